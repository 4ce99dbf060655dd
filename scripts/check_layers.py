#!/usr/bin/env python3
"""check_layers.py - the tree keeps its rooms: arrows one way, no circles.

Usage: python3 scripts/check_layers.py [--root DIR] [--build DIR]

Two checks, both over the room table below (docs/layout.md explains the rooms):

1. Sources (#include "..." lines of every .c .h .cu .cuh .cpp): each quoted include
   must resolve (next to the file, else from the repository root, as the compiler's
   -I<root> does); a file may include only files of its own room or of a room its
   room may use; a *_internal.h header is included only from its own folder; no
   header circle (a.h -> b.h -> a.h).
2. Objects (with --build: the object files CMake compiled for the libraries, read
   with nm): an edge a.o -> b.o for every symbol a uses that b defines.  The same
   room rule holds for the edges, and there is no circle between object files
   (consumer.c calls service.c which calls consumer.c is a circle, even when each
   includes only its own header): every file of a room can be read, built and
   tested knowing only the files below it.

tests/ and bench/ may include anything (nothing includes them).  A source file in a
folder the table does not know is an error, so a new room is added here on purpose.
Exit status: 0 clean, 1 violations (each printed with its files or symbols), 2 usage.
"""
import argparse
import collections
import os
import re
import subprocess
import sys

# room -> the rooms it may use (itself included).  Arrows one way:
# tools -> fleet -> serve -> tokenizer, grammar, prefix; prefix -> kernels; fleet -> queue, telemetry; serve -> cache,
# kernels; cache -> kernels; everything -> config.
ALLOWED = {
    "config": {"config"},
    "kernels": {"kernels", "config"},
    "cache": {"cache", "kernels", "config"},
    "telemetry": {"telemetry", "config"},
    "queue": {"queue", "config"},
    "tokenizer": {"tokenizer", "config"},
    "grammar": {"grammar", "config"},
    "prefix": {"prefix", "kernels", "config"},
    "serve": {"serve", "tokenizer", "grammar", "prefix", "cache", "kernels", "config"},
    "fleet": {"fleet", "serve", "tokenizer", "grammar", "prefix", "telemetry", "queue", "cache", "kernels", "config"},
    "tools": {"tools", "fleet", "serve", "tokenizer", "grammar", "prefix", "telemetry", "queue", "cache", "kernels",
              "config"},
    "main": {"main", "tools", "fleet"},
}
PREFIXES = [  # longest first
    ("worker/tokenizer/", "tokenizer"),
    ("worker/grammar/", "grammar"),
    ("worker/prefix/", "prefix"),
    ("worker/serve/", "serve"),
    ("worker/fleet/", "fleet"),
    ("worker/tools/", "tools"),
    ("config/", "config"),
    ("kernels/", "kernels"),
    ("cache/", "cache"),
    ("telemetry/", "telemetry"),
    ("queue/", "queue"),
    ("tests/", None),
    ("bench/", None),
]
# The CMake library targets whose objects the object check reads.
LIBS = ["v4config", "v4engine", "v4cuda", "v4telemetry", "v4queue", "v4tokenizer", "v4grammar", "v4prefix", "v4serve",
        "v4fleetcore", "v4tools", "v4fleet"]
EXTS = (".c", ".h", ".cu", ".cuh", ".cpp")
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def room_of(path):
    """The room of a repository-relative path; None for tests/bench; '?' unknown."""
    if path == "worker/main.c":
        return "main"
    for p, r in PREFIXES:
        if path.startswith(p):
            return r
    return "?"


def sources(root):
    out = []
    for top in sorted(os.listdir(root)):
        d = os.path.join(root, top)
        if top.startswith(".") or top.startswith("build") or not os.path.isdir(d):
            continue
        for dp, dn, fn in os.walk(d):
            dn[:] = [x for x in dn if not x.startswith(".")]
            for f in fn:
                if f.endswith(EXTS):
                    out.append(os.path.relpath(os.path.join(dp, f), root))
    return sorted(out)


def sccs(graph):
    """Strongly connected components with more than one node (iterative Tarjan)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def check_includes(root, problems):
    files = sources(root)
    graph = collections.defaultdict(set)
    n_inc = 0
    for f in files:
        rf = room_of(f)
        if rf == "?":
            if f.startswith("worker/"):
                problems.append(f"{f}: worker/ holds only main.c and the rooms tokenizer/ serve/ fleet/ tools/")
            else:
                problems.append(f"{f}: source file outside every room (add its room to scripts/check_layers.py)")
            continue
        with open(os.path.join(root, f), errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                n_inc += 1
                t = m.group(1)
                cand = [os.path.normpath(os.path.join(os.path.dirname(f), t)), os.path.normpath(t)]
                target = next((c for c in cand if os.path.isfile(os.path.join(root, c))), None)
                if target is None:
                    problems.append(f"{f}:{lineno}: #include \"{t}\" resolves neither next to the file nor from the root")
                    continue
                graph[f].add(target)
                rt = room_of(target)
                if rf is None:
                    continue
                if target.endswith("_internal.h") and os.path.dirname(target) != os.path.dirname(f):
                    problems.append(f"{f}:{lineno}: includes {target}, another folder's internal header")
                if rt is None or rt == "?" or rt not in ALLOWED[rf]:
                    problems.append(f"{f}:{lineno}: room '{rf}' includes {target} (room '{rt}'); "
                                    f"'{rf}' may use only: {', '.join(sorted(ALLOWED[rf]))}")
    for comp in sccs(graph):
        problems.append("header circle: " + " -> ".join(comp))
    return len(files), n_inc


def nm(path, *flags):
    r = subprocess.run(["nm", *flags, path], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"nm {path}: {r.stderr.strip()}")
    return r.stdout.splitlines()


def check_objects(root, build, problems):
    objs = {}   # source path -> object file
    for lib in LIBS:
        d = os.path.join(build, "CMakeFiles", lib + ".dir")
        for dp, dn, fn in os.walk(d):
            for f in fn:
                if not f.endswith(".o"):
                    continue
                src = os.path.relpath(os.path.join(dp, f[:-2]), d)
                # an object whose source is gone (a stale build) says nothing of the tree
                if os.path.isfile(os.path.join(root, src)):
                    objs[src] = os.path.join(dp, f)
    if not objs:
        problems.append(f"{build}: no object files of {', '.join(LIBS)} (build first)")
        return 0, 0
    defs, uses = {}, collections.defaultdict(set)
    for src, o in objs.items():
        for line in nm(o, "--defined-only"):
            parts = line.split()
            # strong definitions only: weak ones (C++ inline functions, templates) are
            # copies in every object that uses them, not an arrow
            if len(parts) == 3 and parts[1] in "TDBRGSC":
                defs.setdefault(parts[2], src)
        for line in nm(o, "--undefined-only"):
            parts = line.split()
            if parts and parts[0] == "U":
                uses[src].add(parts[-1])
    graph = collections.defaultdict(dict)
    n_edges = 0
    for src, syms in uses.items():
        for s in sorted(syms):
            d = defs.get(s)
            if d is None or d == src:
                continue
            if d not in graph[src]:
                n_edges += 1
                graph[src][d] = s
                ra, rb = room_of(src), room_of(d)
                if ra not in ALLOWED or rb not in ALLOWED[ra]:
                    problems.append(f"{src} uses {s} from {d}: room '{ra}' may not use room '{rb}'")
    for comp in sccs({k: set(v) for k, v in graph.items()}):
        cs = set(comp)
        why = [f"{a} -> {b} ({graph[a][b]})" for a in comp for b in sorted(graph[a]) if b in cs]
        problems.append("circle between object files: " + ", ".join(comp) + "\n    " + "\n    ".join(why))
    return len(objs), n_edges


def main():
    ap = argparse.ArgumentParser(description="check the rooms' arrows and circles")
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--build", help="a CMake build directory: also check the object files' symbols")
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    problems = []
    n_files, n_inc = check_includes(root, problems)
    summary = f"{n_files} source files, {n_inc} includes"
    if a.build:
        n_obj, n_edges = check_objects(root, os.path.abspath(a.build), problems)
        summary += f", {n_obj} object files, {n_edges} symbol edges"
    for p in problems:
        print("check_layers: " + p)
    print(f"check_layers: {summary}: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
