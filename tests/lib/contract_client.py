#!/usr/bin/python3
"""contract_client.py - the sender's side of the request/response contract
(docs/queue-worker.md "Contract"), for tests/test_queue_contract.sh.

  contract_client.py URL PREFIX SCHEMA STEP

PREFIX names the worker's queues (PREFIX.tasks, PREFIX.invalid, PREFIX.unroutable);
SCHEMA is config/result.schema.json.  STEP:
  invalid    packets that fail validation, each with reply_to and a correlation_id:
             every one gets a failed result on reply_to (status, error {code, message,
             where}, id, the correlation_id; valid under SCHEMA) and one record in the
             invalid queue; one of them names a reply_to queue that does not exist: its
             answer lands in the unroutable queue with the reason.
  gone       a task whose reply_to queue (exclusive, auto-delete) is deleted while it
             runs (a 1.5 s deadline-bounded run): its result is in the unroutable queue
             with x-unroutable-reason / x-original-reply-to and the correlation_id, and
             it is the run's failed result with the partial text (output.text).
  deadlines  tasks already past a deadline taken from the sender's clock (AMQP timestamp
             + deadline_ms, the x-deadline-at header, timestamp + expiration) fail with
             deadline_exceeded without running (no prefill, no expert activation); a
             task within all three bounds succeeds; a run that overruns its deadline
             fails with the text generated so far in output.text.
Prints one line per checked answer; exit 1 (AssertionError) when a check fails.
"""
import json
import sys
import time

import jsonschema
import pika

url, prefix, schema_path, step = sys.argv[1:5]
validator = jsonschema.Draft202012Validator(json.load(open(schema_path)))
conn = pika.BlockingConnection(pika.URLParameters(url))
ch = conn.channel()
ch.confirm_delivery()
TASKS, INVALID, UNROUTABLE = prefix + ".tasks", prefix + ".invalid", prefix + ".unroutable"


def reply_queue(channel):
    return channel.queue_declare("", exclusive=True, auto_delete=True).method.queue


def send(body, reply_to=None, corr=None, channel=None, **props):
    (channel or ch).basic_publish("", TASKS, body if isinstance(body, bytes) else json.dumps(body).encode(),
                                  pika.BasicProperties(delivery_mode=2, reply_to=reply_to, correlation_id=corr,
                                                       **props), mandatory=True)


def take(queue, n, timeout_s=60):
    """n messages of queue as (properties, body) pairs; fails when fewer come within timeout_s."""
    got, end = [], time.time() + timeout_s
    while len(got) < n and time.time() < end:
        m, p, b = ch.basic_get(queue, auto_ack=True)
        if m is None:
            time.sleep(0.05)
            continue
        got.append((p, json.loads(b)))
    assert len(got) == n, "%d of %d messages in %s after %d s" % (len(got), n, queue, timeout_s)
    return got


def empty(queue):
    return ch.queue_declare(queue, passive=True).method.message_count == 0


if step == "invalid":
    rq = reply_queue(ch)
    bad = [  # (body, extra properties, expected id, code, where)
        ({"id": "bad-range", "prompt": "x", "max_tokens": -3}, {}, "bad-range", "invalid_field", "max_tokens"),
        (b"this is not json", {"message_id": "m-notjson"}, "m-notjson", "invalid_json", None),
        ({"id": "bad-header", "prompt": "x", "max_tokens": 2}, {"headers": {"x-deadline-at": "soon"}}, "bad-header",
         "invalid_field", "x-deadline-at"),
    ]
    for i, (body, props, _, _, _) in enumerate(bad):
        send(body, rq, "inv-%d" % i, **props)
    answers = take(rq, len(bad))
    by_corr = {p.correlation_id: r for p, r in answers}
    for i, (_, _, rid, code, where) in enumerate(bad):
        r = by_corr["inv-%d" % i]
        validator.validate(r)
        assert r["status"] == "failed" and r["id"] == rid and r["error"]["code"] == code, r
        assert r["error"]["message"] and (where is None or r["error"]["where"] == where), r
        print("reply_to answer %s: %s %s: %s" % (rid, code, r["error"]["where"], r["error"]["message"]))
    recs = take(INVALID, len(bad))
    assert sorted(r["id"] for _, r in recs) == sorted(b[2] for b in bad), recs
    # an invalid packet whose reply_to queue does not exist: record + unroutable answer, acked once
    send({"id": "bad-gone", "prompt": 7}, "no-such-queue-" + prefix, "inv-gone")
    (p, r), = take(UNROUTABLE, 1)
    h = p.headers or {}
    assert r["id"] == "bad-gone" and r["status"] == "failed" and r["error"]["where"] == "prompt", r
    assert p.correlation_id == "inv-gone" and h.get("x-original-reply-to") == "no-such-queue-" + prefix, h
    assert "not found" in h.get("x-unroutable-reason", ""), h
    (p, r), = take(INVALID, 1)
    assert r["id"] == "bad-gone", r
    time.sleep(1.0)
    assert empty(INVALID) and empty(UNROUTABLE) and empty(TASKS), "a second record or a redelivery"
    print("unroutable answer bad-gone: %s" % h["x-unroutable-reason"])
elif step == "gone":
    c2 = pika.BlockingConnection(pika.URLParameters(url))
    ch2 = c2.channel()
    ch2.confirm_delivery()
    rq = reply_queue(ch2)
    send({"id": "gone1", "input_ids": [0, 2, 10, 3, 5], "max_tokens": 200000, "ignore_eos": True,
          "deadline_ms": 1500, "temperature": 0}, rq, "c-gone", channel=ch2)
    time.sleep(0.3)
    c2.close()   # the exclusive reply queue goes with its connection while the task runs
    (p, r), = take(UNROUTABLE, 1, 60)
    h = p.headers or {}
    validator.validate(r)
    assert r["id"] == "gone1" and p.message_id == "gone1" and p.correlation_id == "c-gone", (r, p)
    assert h.get("x-original-reply-to") == rq and h.get("x-original-correlation-id") == "c-gone", h
    assert h.get("x-unroutable-reason", "").startswith("reply_to queue '%s' not found" % rq), h
    assert r["status"] == "failed" and r["error"]["code"] == "deadline_exceeded", r
    assert r["output"]["text"], r   # the partial text of the overrun
    print("unroutable result gone1: %s; partial text %d chars" % (h["x-unroutable-reason"], len(r["output"]["text"])))
elif step == "deadlines":
    rq = reply_queue(ch)
    now = time.time()
    short = {"input_ids": [0, 2, 10, 3, 5], "max_tokens": 4, "temperature": 0}
    send(dict(short, id="late-ts", deadline_ms=5000), rq, "d1", timestamp=int(now) - 20)
    send(dict(short, id="late-at"), rq, "d2", headers={"x-deadline-at": int(now * 1000) - 1000})
    send(dict(short, id="late-exp"), rq, "d3", timestamp=int(now) - 20, expiration="10000")
    send(dict(short, id="on-time", deadline_ms=60000), rq, "d4", timestamp=int(now),
         headers={"x-deadline-at": str(int(now * 1000) + 60000)}, expiration="60000")
    send({"id": "overrun", "input_ids": [0, 2, 10, 3, 5], "max_tokens": 200000, "ignore_eos": True,
          "deadline_ms": 1000, "temperature": 0}, rq, "d5")
    got = {r["id"]: (p, r) for p, r in take(rq, 5, 60)}
    for rid, where in (("late-ts", "deadline_ms"), ("late-at", "x-deadline-at"), ("late-exp", "expiration")):
        p, r = got[rid]
        validator.validate(r)
        assert r["status"] == "failed" and r["error"]["code"] == "deadline_exceeded", r
        assert r["error"]["where"] == where and "not run" in r["error"]["message"], r
        assert r["timing"]["prefill_ms"] == 0 and r["experts"]["activations"] == 0 and "output" not in r, r
        print("%s: %s" % (rid, r["error"]["message"]))
    p, r = got["on-time"]
    validator.validate(r)
    assert r["status"] == "succeeded" and r["usage"]["completion_tokens"] == 4, r
    p, r = got["overrun"]
    validator.validate(r)
    assert r["status"] == "failed" and r["error"]["code"] == "deadline_exceeded", r
    assert r["error"]["where"] == "deadline_ms" and r["output"]["text"], r
    assert r["timing"]["total_ms"] >= 900, r
    print("overrun: %s; partial text %d chars" % (r["error"]["message"], len(r["output"]["text"])))
else:
    sys.exit("unknown step " + step)
conn.close()
