#!/usr/bin/python3
"""queue_e2e.py - the client side of tests/test_queue_e2e.sh (python3-pika as a
third-party producer).  Publishes valid tasks (half with reply_to + correlation_id,
half routed to the results exchange), a table of malformed packets and a task for a
model the worker does not serve, then checks: every result arrives with the right id,
message_id and correlation id; every malformed packet lands exactly once in the
invalid queue with the expected error code/field; the worker keeps serving after them;
the task queue ends empty.  Usage: queue_e2e.py AMQP_URL PREFIX N.  Exit 0 = pass."""
import json
import sys
import time

import pika

url, prefix, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
TASKS, INVALID, RESULTS = prefix + ".tasks", prefix + ".invalid", prefix + ".results"
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg, file=sys.stderr)


conn = pika.BlockingConnection(pika.URLParameters(url))
ch = conn.channel()
ch.confirm_delivery()
reply = ch.queue_declare("", exclusive=True).method.queue


def publish(body, props):
    ch.basic_publish("", TASKS, body, props, mandatory=True)


BAD = [  # (body, code, where)
    (b"", "invalid_json", "body"),
    (b"not json", "invalid_json", "body"),
    (b'{"id":"d1","id":"d2","prompt":"x"}', "invalid_json", "body"),
    (b'{"id":"n1","prompt":NaN}', "invalid_json", "body"),
    (b'{"id":"b1","prompt":"\xff"}', "invalid_json", "body"),
    (b'[1,2,3]', "invalid_json", "body"),
    (b'{"prompt":"no id"}', "invalid_field", "id"),
    (b'{"id":"f1","prompt":"x","max_tokens":"many"}', "invalid_field", "max_tokens"),
    (b'{"id":"f2","prompt":"x","input_ids":[1]}', "invalid_field", "messages"),
    (b'{"id":"f3","prompt":"x","top_p":0}', "invalid_field", "top_p"),
    (b"[" * 3000 + b"]" * 3000, "invalid_json", "body"),
]

expect_reply, expect_results = {}, {}
for i in range(n):
    tid = "t%03d" % i
    task = {"id": tid, "max_tokens": 4 + i % 5, "temperature": 0 if i % 2 else 0.8, "seed": i,
            "metadata": {"i": i}}
    if i % 3 == 0:
        task["messages"] = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello %d" % i}]
    elif i % 3 == 1:
        task["prompt"] = "question %d" % i
    else:
        task["input_ids"] = [0, 2, 10 + i, 3, 5]
    if i % 2 == 0:
        corr = "corr-%d" % i
        publish(json.dumps(task).encode(), pika.BasicProperties(reply_to=reply, correlation_id=corr, delivery_mode=2))
        expect_reply[tid] = corr
    else:
        publish(json.dumps(task).encode(), pika.BasicProperties(delivery_mode=2))
        expect_results[tid] = None
    if i == n // 2:   # the malformed table in the middle of the stream
        for j, (body, _, _) in enumerate(BAD):
            publish(body, pika.BasicProperties(delivery_mode=2, message_id="bad-%d" % j))
        publish(b'{"id":"wrong-model","model":"gpt-x","prompt":"x"}',
                pika.BasicProperties(reply_to=reply, correlation_id="corr-wm", delivery_mode=2))
        expect_reply["wrong-model"] = "corr-wm"

got = {}
deadline = time.time() + 60


def drain(queue, expect, want_corr):
    while time.time() < deadline and not all(k in got for k in expect):
        m, p, b = ch.basic_get(queue, auto_ack=True)
        if m is None:
            time.sleep(0.05)
            continue
        r = json.loads(b)
        check(r["id"] not in got, "duplicate result for %s" % r["id"])
        got[r["id"]] = r
        check(p.message_id == r["id"], "message_id %r != id %r" % (p.message_id, r["id"]))
        check(r["id"] in expect, "unexpected result %s in %s" % (r["id"], queue))
        if want_corr and r["id"] in expect:
            check(p.correlation_id == expect[r["id"]], "%s: correlation_id %r" % (r["id"], p.correlation_id))


drain(reply, expect_reply, True)
drain(RESULTS, expect_results, False)
for tid in list(expect_reply) + list(expect_results):
    check(tid in got, "no result for %s" % tid)
for tid, r in got.items():
    if tid == "wrong-model":
        check(r["status"] == "failed" and r["error"]["code"] == "model_not_available", "wrong-model: %r" % r)
        continue
    check(r["status"] == "succeeded", "%s failed: %r" % (tid, r.get("error")))
    if r["status"] == "succeeded":
        out = r["output"]
        check(len(out["token_ids"]) == r["usage"]["completion_tokens"] > 0, "%s usage" % tid)
        check(out["finish_reason"] in ("stop", "length"), "%s finish_reason" % tid)
        check(r["metadata"] == {"i": int(tid[1:])}, "%s metadata echo" % tid)
        check(r["worker"] != "", "%s worker id" % tid)

invalid = []
t_end = time.time() + 10
while time.time() < t_end and len(invalid) < len(BAD):
    m, p, b = ch.basic_get(INVALID, auto_ack=True)
    if m is None:
        time.sleep(0.05)
        continue
    invalid.append(json.loads(b))
time.sleep(0.5)
m, p, b = ch.basic_get(INVALID, auto_ack=True)
check(m is None, "more than one record per malformed packet in %s" % INVALID)
check(len(invalid) == len(BAD), "%d invalid records, want %d" % (len(invalid), len(BAD)))
for rec, (body, code, where) in zip(invalid, BAD):
    e = rec["error"]
    check(e["code"] == code and e["where"] == where, "%r: got %s/%s, want %s/%s (%s)"
          % (body[:40], e["code"], e["where"], code, where, e["message"]))
    if code == "invalid_json" and body and body != b"[1,2,3]":   # syntax errors carry a position
        check("line" in e and "column" in e and "position" in e, "%r: no position" % body[:40])

q = ch.queue_declare(TASKS, passive=True).method
check(q.message_count == 0, "%s still holds %d messages" % (TASKS, q.message_count))
conn.close()
print("queue_e2e: %d results, %d invalid records, %d failures" % (len(got), len(invalid), len(failures)))
sys.exit(1 if failures else 0)
