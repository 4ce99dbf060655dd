#!/usr/bin/python3
"""affinity_client.py - the sender's side of fleet affinity (docs/queue-worker.md "Fleet
affinity") for tests/test_queue_affinity.sh and bench/fleet_affinity.sh, through
scripts/v4client.py (the client microservices use).

  affinity_client.py URL TASK_QUEUE run OUT TAG N KEYS MODE [TOKENS [TIMEOUT_S [PREFIX_CHARS]]]

Submits N tasks, ids TAG0..TAG{N-1}, task i with key k{i % KEYS}, then writes one JSON line
per answer to OUT as it arrives (flushed: a test may watch it grow):
  {"id", "key", "status", "worker", "cached_tokens", "prompt_tokens", "ms"}
(ms: submit -> answer; cached_tokens: usage.prompt_tokens_details.cached_tokens, 0 if
absent).  MODE: "key" = affinity on, prefix_key = the key; "derived" = affinity on, the
key derived by the client from the prompt (prefix_route_key); "off" = affinity off (the
task queue, round-robin).  Prompt of task i: PREFIX_CHARS (default 0) characters of text
that depend only on its key, then " item <i>"; TOKENS (default 4) tokens generated,
ignore_eos.  Ends after every task was answered, plus 2 s for duplicates (the client
drops an answer for no pending submit and counts it: the last line of OUT is
{"stray": n}), or after TIMEOUT_S (default 300): exit 1 naming the ids still missing.
"""
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
from v4client import Client, TaskTimeout  # noqa: E402

WORDS = ("river stone lantern orchard copper signal meadow harbor violet engine "
         "summit thistle canvas ember glacier quarry pepper willow falcon marble").split()


def prefix_text(key, chars):
    """chars characters of deterministic text for key (different keys differ at once)."""
    if chars <= 0:
        return ""
    h = sum(ord(c) * 131 ** i for i, c in enumerate(key))
    out, i = ["Instructions for %s:" % key], 0
    while sum(len(w) + 1 for w in out) < chars:
        out.append(WORDS[(h + i * 7 + i * i) % len(WORDS)])
        i += 1
    return " ".join(out)[:chars]


def main():
    url, queue, step = sys.argv[1:4]
    if step != "run":
        sys.exit("affinity_client.py: unknown step %r" % step)
    out, tag, n, keys, mode = sys.argv[4], sys.argv[5], int(sys.argv[6]), int(sys.argv[7]), sys.argv[8]
    tokens = int(sys.argv[9]) if len(sys.argv) > 9 else 4
    timeout = float(sys.argv[10]) if len(sys.argv) > 10 else 300.0
    pchars = int(sys.argv[11]) if len(sys.argv) > 11 else 0
    if mode not in ("key", "derived", "off"):
        sys.exit("affinity_client.py: MODE is key, derived or off, not %r" % mode)
    with Client(url, task_queue=queue, timeout=timeout, on_failure="return", affinity=mode != "off") as c, \
            open(out, "w") as f:
        handles, meta = [], {}
        for i in range(n):
            key = "k%d" % (i % keys)
            pre = prefix_text(key, pchars)
            task = {"id": "%s%d" % (tag, i), "prompt": (pre + " item %d" % i).strip(), "max_tokens": tokens,
                    "ignore_eos": True, "temperature": 0}
            handles.append(c.submit(task, prefix_key=key if mode == "key" else None))
            meta[task["id"]] = (key, time.time())
        missing = set(meta)
        try:
            for h in c.as_completed(handles, timeout=timeout):
                rec = h.record or {}
                usage = rec.get("usage") or {}
                det = usage.get("prompt_tokens_details") or {}
                key, t0 = meta[h.id]
                missing.discard(h.id)
                f.write(json.dumps({"id": h.id, "key": key, "status": rec.get("status"), "worker": rec.get("worker"),
                                    "cached_tokens": det.get("cached_tokens", 0),
                                    "prompt_tokens": usage.get("prompt_tokens", 0),
                                    "ms": round((time.time() - t0) * 1e3)}) + "\n")
                f.flush()
        except TaskTimeout:
            sys.exit("affinity_client.py: no answer within %.0f s for %d task(s): %s" %
                     (timeout, len(missing), " ".join(sorted(missing)[:20])))
        end = time.time() + 2.0
        while time.time() < end:
            c.poll(0.2)
        f.write(json.dumps({"stray": c.stray}) + "\n")


if __name__ == "__main__":
    main()
