#!/usr/bin/python3
"""queue_client.py - small pika client for the queue fault tests (tests/test_queue_faults.sh).

  queue_client.py URL publish QUEUE N MAX_TOKENS [ID_PREFIX [REPLY_TO]]
      publish N tasks with confirms (ids ID_PREFIX000..), print nothing
  queue_client.py URL collect QUEUE N TIMEOUT_S
      read results from QUEUE until N distinct ids were seen (duplicates allowed, counted),
      exit 1 if fewer arrive; prints "distinct D duplicates U".  TIMEOUT_S bounds the wait
      for the first result and between two new ones (progress), not the whole collection
      (capped at max(900 s, 10 x TIMEOUT_S)), so a slow machine is not a lost task; on a
      failure stderr says how many were missing and for how long nothing came.
  queue_client.py URL task QUEUE JSON
      publish one task body as given (with confirm)
  queue_client.py URL result QUEUE TIMEOUT_S
      wait for one message in QUEUE and print its body
  queue_client.py URL count QUEUE
      print the ready message count of QUEUE
  queue_client.py URL dump QUEUE N TIMEOUT_S
      read N distinct results from QUEUE and print each body on one line; exit 1 if fewer
      (TIMEOUT_S: the same progress bound as collect)
  queue_client.py URL dead QUEUE ID TIMEOUT_S
      wait for the task ID in QUEUE (a dead-letter queue); print its x-death reason/count
  queue_client.py URL unbind|bind QUEUE EXCHANGE ROUTING_KEY
      remove / add the binding of QUEUE to EXCHANGE
"""
import json
import sys
import time

import pika


class Progress:
    """A wait bounded by the time since the last progress (idle_s) and by a cap."""

    def __init__(self, idle_s):
        self.idle, self.start = idle_s, time.time()
        self.last, self.cap = self.start, self.start + max(900.0, 10 * idle_s)

    def more(self):
        now = time.time()
        return now - self.last < self.idle and now < self.cap

    def moved(self):
        self.last = time.time()

    def why(self, what, got, n):
        now = time.time()
        return "%s: %d of %d after %.0f s; nothing new for the last %.0f s (bound %.0f s)%s" % (
            what, got, n, now - self.start, now - self.last, self.idle,
            ", the overall cap reached" if now >= self.cap else "")

url, cmd = sys.argv[1], sys.argv[2]
conn = pika.BlockingConnection(pika.URLParameters(url))
ch = conn.channel()

if cmd == "publish":
    queue, n, max_tokens = sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    prefix = sys.argv[6] if len(sys.argv) > 6 else "t"
    reply_to = sys.argv[7] if len(sys.argv) > 7 else None
    ch.confirm_delivery()
    for i in range(n):
        task = {"id": "%s%03d" % (prefix, i), "prompt": "task %d" % i, "max_tokens": max_tokens, "temperature": 0}
        ch.basic_publish("", queue, json.dumps(task).encode(),
                         pika.BasicProperties(delivery_mode=2, reply_to=reply_to, correlation_id="c%d" % i),
                         mandatory=True)
elif cmd == "collect":
    queue, n, timeout = sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
    seen, dups = set(), 0
    w = Progress(timeout)
    while w.more() and len(seen) < n:
        m, p, b = ch.basic_get(queue, auto_ack=True)
        if m is None:
            time.sleep(0.05)
            continue
        r = json.loads(b)
        if r["status"] != "succeeded" or p.message_id != r["id"]:
            print("bad result:", r, p.message_id, file=sys.stderr)
            sys.exit(1)
        if r["id"] in seen:
            dups += 1
        else:
            w.moved()
        seen.add(r["id"])
    print("distinct %d duplicates %d" % (len(seen), dups))
    if len(seen) < n:
        print(w.why("results in " + queue, len(seen), n), file=sys.stderr)
    sys.exit(0 if len(seen) >= n else 1)
elif cmd == "task":
    ch.confirm_delivery()
    ch.basic_publish("", sys.argv[3], sys.argv[4].encode(), pika.BasicProperties(delivery_mode=2), mandatory=True)
elif cmd == "result":
    end = time.time() + float(sys.argv[4])
    while time.time() < end:
        m, p, b = ch.basic_get(sys.argv[3], auto_ack=True)
        if m is not None:
            print(b.decode())
            sys.exit(0)
        time.sleep(0.05)
    print("no message in %s" % sys.argv[3], file=sys.stderr)
    sys.exit(1)
elif cmd == "count":
    print(ch.queue_declare(sys.argv[3], passive=True).method.message_count)
elif cmd == "dump":
    queue, n, timeout = sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
    seen = {}
    w = Progress(timeout)
    while w.more() and len(seen) < n:
        m, p, b = ch.basic_get(queue, auto_ack=True)
        if m is None:
            time.sleep(0.05)
            continue
        rid = json.loads(b)["id"]
        if rid not in seen:
            w.moved()
        seen.setdefault(rid, b.decode())
    for body in seen.values():
        print(body)
    if len(seen) < n:
        print(w.why("results in " + queue, len(seen), n), file=sys.stderr)
    sys.exit(0 if len(seen) >= n else 1)
elif cmd == "dead":
    queue, tid, timeout = sys.argv[3], sys.argv[4], float(sys.argv[5])
    end = time.time() + timeout
    while time.time() < end:
        m, p, b = ch.basic_get(queue, auto_ack=True)
        if m is None:
            time.sleep(0.1)
            continue
        if json.loads(b).get("id") == tid:
            death = (p.headers or {}).get("x-death", [{}])[0]
            print("dead %s reason %s count %s" % (tid, death.get("reason"), death.get("count")))
            sys.exit(0)
    print("no %s in %s" % (tid, queue), file=sys.stderr)
    sys.exit(1)
elif cmd in ("unbind", "bind"):
    (ch.queue_unbind if cmd == "unbind" else ch.queue_bind)(sys.argv[3], sys.argv[4], routing_key=sys.argv[5])
conn.close()
