#!/usr/bin/python3
"""worker_redis.py - pika client for tests/test_worker_redis.sh.

  worker_redis.py URL run TASKQ RESULTQ PREFIX N TIMEOUT_S
      publish N tasks (ids PREFIX000.., with confirms, short greedy generations), then
      read RESULTQ until all N ids arrived or TIMEOUT_S passed; print one JSON line:
      {"ids": {id: copies}, "hits": sum of experts.hits, "misses": ..., "bytes": ...,
       "forwarded": sum of prompt_tokens + completion_tokens - 1, "failed": [ids],
       "elapsed_s": seconds from first publish to last result}
      exit 1 when a result is missing.
  worker_redis.py URL collect RESULTQ ID COPIES TIMEOUT_S
      read RESULTQ until COPIES results with id ID arrived (same JSON line; exit 1 if not)
  worker_redis.py URL publish TASKQ ID
      publish one task with id ID (confirmed)
"""
import json
import sys
import time

import pika

url, cmd = sys.argv[1], sys.argv[2]
conn = pika.BlockingConnection(pika.URLParameters(url))
ch = conn.channel()
ch.confirm_delivery()


def task(tid, i):
    return json.dumps({"id": tid, "prompt": "count to %d" % i, "max_tokens": 4 + i % 5, "temperature": 0}).encode()


def publish(q, tid, i):
    ch.basic_publish("", q, task(tid, i), pika.BasicProperties(delivery_mode=2, message_id=tid), mandatory=True)


def collect(q, want, timeout):
    """want(ids) -> True when done; returns the summary dict."""
    s = {"ids": {}, "hits": 0, "misses": 0, "prefetched": 0, "activations": 0, "bytes": 0, "forwarded": 0,
         "failed": []}
    t0 = time.time()
    while time.time() < t0 + timeout and not want(s["ids"]):
        m, p, b = ch.basic_get(q, auto_ack=True)
        if m is None:
            time.sleep(0.02)
            continue
        r = json.loads(b)
        if p.message_id != r["id"]:
            print("message_id %r != id %r" % (p.message_id, r["id"]), file=sys.stderr)
            sys.exit(1)
        s["ids"][r["id"]] = s["ids"].get(r["id"], 0) + 1
        if r["status"] != "succeeded":
            s["failed"].append(r["id"])
            continue
        e = r["experts"]
        s["hits"] += e["hits"]
        s["misses"] += e["misses"]
        s["prefetched"] += e["prefetched"]
        s["activations"] += e["activations"]
        s["bytes"] += e["bytes_loaded"]
        s["forwarded"] += r["usage"]["prompt_tokens"] + r["usage"]["completion_tokens"] - 1
    s["elapsed_s"] = round(time.time() - t0, 3)
    return s


if cmd == "run":
    tq, rq, prefix, n, timeout = sys.argv[3], sys.argv[4], sys.argv[5], int(sys.argv[6]), float(sys.argv[7])
    ids = ["%s%03d" % (prefix, i) for i in range(n)]
    for i, tid in enumerate(ids):
        publish(tq, tid, i)
    s = collect(rq, lambda got: all(t in got for t in ids), timeout)
    print(json.dumps(s))
    sys.exit(0 if all(t in s["ids"] for t in ids) else 1)
elif cmd == "collect":
    rq, tid, copies, timeout = sys.argv[3], sys.argv[4], int(sys.argv[5]), float(sys.argv[6])
    s = collect(rq, lambda got: got.get(tid, 0) >= copies, timeout)
    print(json.dumps(s))
    sys.exit(0 if s["ids"].get(tid, 0) >= copies else 1)
elif cmd == "publish":
    publish(sys.argv[3], sys.argv[4], 0)
else:
    sys.exit("unknown command " + cmd)
conn.close()
