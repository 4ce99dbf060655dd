#!/usr/bin/python3
"""submit.py - publish task packets to a v4fleet task queue and print their results.

usage: submit.py [--url AMQP_URL] [--queue QUEUE] [--timeout S] [FILE]

Reads one JSON task per line from FILE (or stdin), publishes each to QUEUE (default
"tasks"; persistent, publisher confirms, mandatory) with reply_to = a private
auto-delete reply queue and correlation_id = the task id, then prints each result as
one JSON line, in arrival order, until every task has a result or the timeout passes
(exit 1, naming the ids still missing).  The AMQP URL comes from --url, else from
V4_AMQP_URL, else amqp://guest:guest@127.0.0.1:5672/; it is never printed.
Needs python3-pika (installed by scripts/demo.sh).
"""
import argparse
import json
import os
import sys
import time

import pika


def main():
    ap = argparse.ArgumentParser(description="publish v4fleet tasks and print their results")
    ap.add_argument("--url", default=os.environ.get("V4_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"))
    ap.add_argument("--queue", default="tasks")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("file", nargs="?", default="-")
    a = ap.parse_args()
    src = sys.stdin if a.file == "-" else open(a.file, encoding="utf-8")
    tasks = []
    for n, line in enumerate(src, 1):
        if not line.strip():
            continue
        try:
            t = json.loads(line)
        except ValueError as e:
            sys.exit("submit.py: %s line %d: not JSON: %s" % (a.file, n, e))
        if not isinstance(t, dict) or not isinstance(t.get("id"), str):
            sys.exit("submit.py: %s line %d: a task is a JSON object with a string \"id\"" % (a.file, n))
        tasks.append((t["id"], line.strip().encode()))
    conn = pika.BlockingConnection(pika.URLParameters(a.url))
    ch = conn.channel()
    reply = ch.queue_declare("", exclusive=True, auto_delete=True).method.queue
    ch.confirm_delivery()
    for tid, body in tasks:
        try:
            props = pika.BasicProperties(delivery_mode=2, reply_to=reply, correlation_id=tid, message_id=tid,
                                         timestamp=int(time.time()))
            ch.basic_publish("", a.queue, body, props, mandatory=True)
        except pika.exceptions.UnroutableError:
            sys.exit("submit.py: queue %r does not exist (is a worker running?)" % a.queue)
    waiting = {tid for tid, _ in tasks}
    deadline = time.time() + a.timeout
    while waiting and time.time() < deadline:
        m, p, b = ch.basic_get(reply, auto_ack=True)
        if m is None:
            time.sleep(0.02)
            continue
        print(b.decode("utf-8", "replace"), flush=True)
        waiting.discard(p.correlation_id)
    conn.close()
    if waiting:
        sys.exit("submit.py: no result within %.0f s for: %s" % (a.timeout, ", ".join(sorted(waiting))))


if __name__ == "__main__":
    main()
