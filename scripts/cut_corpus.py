#!/usr/bin/env python3
"""cut_corpus.py - texts for comparing the tokenizer with Hugging Face's on real data.

Developer tool, not run by the build (scripts/compare_tokenizer.sh drives it).  Walks
the given files and directories (text files only: UTF-8 that decodes, no NUL; .gz
files are read decompressed; .mo gettext catalogs give their strings, the translations
of every language installed), and cuts each into pieces of 1..2000 characters at
seeded random offsets, on any character boundary (so pieces start and end mid-word,
mid-line, inside runs of spaces and digits, where the split regex is most fragile).
Writes {"text": ...} lines to stdout, at most --max texts, deterministic for a seed.
"""
import argparse
import gzip
import json
import os
import random
import sys


def files(roots, exts):
    for r in roots:
        if os.path.isfile(r):
            yield r
            continue
        for d, _, names in os.walk(r):
            for n in sorted(names):
                p = os.path.join(d, n)
                if os.path.islink(p) or not os.path.isfile(p):
                    continue
                if exts and not any(n.endswith(e) for e in exts):
                    continue
                yield p


def read_text(p, limit):
    try:
        with (gzip.open(p, "rb") if p.endswith(".gz") else open(p, "rb")) as f:
            b = f.read(limit)
    except OSError:
        return None
    if b and p.endswith(".mo"):   # gettext catalogs: their strings, translations in many languages
        parts = []
        for seg in b.split(b"\0"):
            try:
                parts.append(seg.decode("utf-8"))
            except UnicodeDecodeError:
                pass
        return "\n".join(x for x in parts if x.strip())
    if not b or b"\0" in b:
        return None
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("roots", nargs="+")
    ap.add_argument("--max", type=int, default=41000)
    ap.add_argument("--per-file", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ext", action="append", default=[], help="only names ending so (repeatable)")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    n = 0
    for p in files(a.roots, a.ext):
        t = read_text(p, 1 << 20)
        if not t:
            continue
        for _ in range(a.per_file):
            if n >= a.max:
                return
            L = min(len(t), rng.choice([1, 2, 3, 5, 8, 13, 40, 120, 400, 2000]))
            at = rng.randrange(0, len(t) - L + 1)
            sys.stdout.write(json.dumps({"text": t[at:at + L]}, ensure_ascii=False) + "\n")
            n += 1
    print("cut_corpus.py: %d texts" % n, file=sys.stderr)


if __name__ == "__main__":
    main()
