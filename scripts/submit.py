#!/usr/bin/python3
"""submit.py - publish task packets to a v4fleet task queue and print their results.

usage: submit.py [--url AMQP_URL] [--queue QUEUE] [--timeout S] [--deadline-ms MS] [--urgent]
                 [--affinity | --no-affinity] [--prefix-key KEY] [FILE]

Reads one JSON task per line from FILE (or stdin; blank lines skipped), publishes each to
QUEUE (default "tasks") through scripts/v4client.py (persistent, publisher confirms,
mandatory, AMQP timestamp, message_id = the task id, reply_to = the client's private
reply queue, a correlation_id per task; a task without "id" gets one), then prints each
result's body as one JSON line, exactly as the worker sent it, in arrival order, until
every task has a result or the timeout passes (exit 1, naming the ids still missing).
Failed results are printed like the others (exit 0).  --deadline-ms sets every task's
deadline_ms; --urgent publishes to QUEUE.urgent (needs a worker that declares it).
--affinity (default when V4_AFFINITY=1) routes each task by its prefix key to the workers'
affinity exchange QUEUE.affinity (docs/queue-worker.md "Fleet affinity"): the key is
--prefix-key, else the task line's own "prefix_key" field (removed from the packet), else
derived from the start of its prompt (v4client.prefix_route_key).
A line that is not a JSON object, a non-string id, or a queue the broker does not know:
exit 1 with a message.  The AMQP URL comes from --url, else from V4_AMQP_URL, else
amqp://guest:guest@127.0.0.1:5672/; it is never printed.
Tasks are re-serialized (json.loads + json.dumps): a line with duplicate keys is sent
with the last value.  Needs python3-pika (installed by scripts/demo.sh).
See docs/queue-worker.md ("Python client").
"""
import argparse
import json
import os
import sys

sys.dont_write_bytecode = True   # no scripts/__pycache__ in the work tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from v4client import Client, ClientError, TaskTimeout  # noqa: E402


def read_tasks(src, name):
    tasks = []
    for n, line in enumerate(src, 1):
        if not line.strip():
            continue
        try:
            t = json.loads(line)
        except ValueError as e:
            sys.exit("submit.py: %s line %d: not JSON: %s" % (name, n, e))
        if not isinstance(t, dict) or ("id" in t and (not isinstance(t["id"], str) or not t["id"])):
            sys.exit("submit.py: %s line %d: a task is a JSON object whose \"id\", if given, is a non-empty string"
                     % (name, n))
        tasks.append(t)
    return tasks


def main():
    ap = argparse.ArgumentParser(description="publish v4fleet tasks and print their results")
    ap.add_argument("--url", default=os.environ.get("V4_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"))
    ap.add_argument("--queue", default="tasks")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--deadline-ms", type=int, default=None)
    ap.add_argument("--urgent", action="store_true")
    ap.add_argument("--affinity", dest="affinity", action="store_true", default=None)
    ap.add_argument("--no-affinity", dest="affinity", action="store_false")
    ap.add_argument("--prefix-key", default=None)
    ap.add_argument("file", nargs="?", default="-")
    a = ap.parse_args()
    src = sys.stdin if a.file == "-" else open(a.file, encoding="utf-8")
    tasks = read_tasks(src, a.file)
    try:
        with Client(a.url, task_queue=a.queue, timeout=a.timeout, affinity=a.affinity) as c:
            handles = [c.submit(t, deadline_ms=a.deadline_ms, urgent=a.urgent, prefix_key=a.prefix_key)
                       for t in tasks]
            for h in c.as_completed(handles):
                print(h.body.decode("utf-8", "replace"), flush=True)
    except TaskTimeout as e:
        sys.exit("submit.py: no result within %.0f s for: %s" % (a.timeout, ", ".join(sorted(e.task_ids))))
    except (ClientError, ValueError) as e:
        sys.exit("submit.py: %s" % e)


if __name__ == "__main__":
    main()
