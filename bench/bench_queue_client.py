#!/usr/bin/python3
"""bench_queue_client.py URL QUEUE N - the producer/consumer side of bench/bench_queue.sh:
publishes N one-token tasks with confirms (reply_to = an exclusive queue), waits for all
results and prints tasks/s (publish start -> last result) and the in-worker overhead
outside inference (timing.total_ms - prefill_ms - decode_ms: parse, sequence setup,
result JSON) as median / p99."""
import json
import sys
import time

import pika

url, queue, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = pika.BlockingConnection(pika.URLParameters(url))
ch = c.channel()
ch.confirm_delivery()
r = ch.queue_declare("", exclusive=True).method.queue
t0 = time.time()
for i in range(n):
    task = {"id": "b%d" % i, "input_ids": [0, 2], "max_tokens": 1, "temperature": 0}
    ch.basic_publish("", queue, json.dumps(task).encode(), pika.BasicProperties(reply_to=r, delivery_mode=2))
t1 = time.time()
got, over, tot, ids = 0, [], [], set()
for m, p, b in ch.consume(r, inactivity_timeout=30, auto_ack=True):
    if m is None:
        break
    x = json.loads(b)
    ids.add(x["id"])
    tm = x["timing"]
    over.append(tm["total_ms"] - tm["prefill_ms"] - tm["decode_ms"])
    tot.append(tm["total_ms"])
    got += 1
    if len(ids) == n:
        break
t2 = time.time()
over.sort()
tot.sort()
print("tasks %d (distinct %d), publish %.2f s, last result %.2f s -> %.0f tasks/s; in-worker overhead outside "
      "inference median %.3f ms p99 %.3f ms; in-worker total median %.3f ms"
      % (got, len(ids), t1 - t0, t2 - t0, got / (t2 - t0), over[len(over) // 2], over[int(len(over) * .99)],
         tot[len(tot) // 2]))
sys.exit(0 if len(ids) == n else 1)
