#!/usr/bin/python3
"""lane_client.py - the sender's side of cancellation and of the urgent lane
(docs/queue-worker.md "Cancellation", "Urgent lane"), for tests/test_queue_cancel.sh and
tests/test_queue_urgent.sh.

  lane_client.py URL PREFIX STEP ARGS...

PREFIX names the worker's queues and exchanges: PREFIX.tasks, PREFIX.tasks.urgent,
PREFIX.cancel; answers come back on PREFIX.replies (a durable queue this client declares,
so that several invocations share it).  STEP:
  send ID long|short|tokens=N [urgent]
             publish one task (reply_to PREFIX.replies, correlation_id ID) to the task
             queue, or to the urgent queue: long = 200000 tokens with ignore_eos (runs
             until something stops it), short = 4 tokens, tokens=N = N tokens with ignore_eos
  cancel ID  publish {"cancel": ID} to the fanout exchange PREFIX.cancel (it must exist:
             the worker declares it; passive declare first)
  cancel-raw BODY
             publish BODY as is to PREFIX.cancel (a malformed cancel message)
  collect FILE N [TIMEOUT_S]
             take answers from PREFIX.replies until N distinct ids were seen (fails after
             TIMEOUT_S, 120 by default), then 1.5 s more for a duplicate; write
             {id: [answer, ...]} as JSON to FILE; print "ID status [code]" per answer
  check FILE SCHEMA ID succeeded|running-cancelled|queued-cancelled
             check the answers of ID in FILE (written by collect): exactly one, valid
             under SCHEMA (config/result.schema.json), with the expected outcome:
             running-cancelled = failed, error cancelled at "cancel", the text so far in
             output.text (non-empty); queued-cancelled = failed, cancelled, "not run" in
             the message, no output, no prefill, no expert activation
Exit 1 (AssertionError) when a check fails.
"""
import json
import sys
import time

import pika

url, prefix, step = sys.argv[1:4]
args = sys.argv[4:]
TASKS, URGENT, CANCEL, REPLIES = prefix + ".tasks", prefix + ".tasks.urgent", prefix + ".cancel", prefix + ".replies"


def channel():
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare(REPLIES, durable=True)
    return conn, ch


def task_body(tid, kind):
    body = {"id": tid, "input_ids": [0, 2, 10, 3, 5], "temperature": 0}
    if kind == "long":
        body.update(max_tokens=200000, ignore_eos=True)
    elif kind == "short":
        body.update(max_tokens=4)
    elif kind.startswith("tokens="):
        body.update(max_tokens=int(kind[7:]), ignore_eos=True)
    else:
        sys.exit("unknown task kind " + kind)
    return json.dumps(body).encode()


if step == "send":
    tid, kind = args[0], args[1]
    queue = URGENT if len(args) > 2 and args[2] == "urgent" else TASKS
    conn, ch = channel()
    ch.basic_publish("", queue, task_body(tid, kind),
                     pika.BasicProperties(delivery_mode=2, reply_to=REPLIES, correlation_id=tid,
                                          timestamp=int(time.time())), mandatory=True)
    conn.close()
elif step in ("cancel", "cancel-raw"):
    conn, ch = channel()
    ch.exchange_declare(CANCEL, passive=True)   # the worker's: 404 (an exception) if it does not exist
    body = json.dumps({"cancel": args[0]}).encode() if step == "cancel" else args[0].encode()
    ch.basic_publish(CANCEL, "", body, pika.BasicProperties(delivery_mode=2))
    conn.close()
elif step == "collect":
    path, n = args[0], int(args[1])
    timeout_s = float(args[2]) if len(args) > 2 else 120.0
    conn, ch = channel()
    got, end, extra_end = {}, time.time() + timeout_s, None
    while True:
        now = time.time()
        if len(got) >= n and extra_end is None:
            extra_end = now + 1.5
        if (extra_end is not None and now >= extra_end) or (extra_end is None and now >= end):
            break
        m, p, b = ch.basic_get(REPLIES, auto_ack=True)
        if m is None:
            time.sleep(0.05)
            continue
        r = json.loads(b)
        assert p.correlation_id == r["id"] and p.message_id == r["id"], (p, r)
        got.setdefault(r["id"], []).append(r)
        print("%s %s %s" % (r["id"], r["status"], (r.get("error") or {}).get("code", "")))
    conn.close()
    json.dump(got, open(path, "w"))
    assert len(got) >= n, "%d of %d answers after %.0f s: %s" % (len(got), n, timeout_s, sorted(got))
elif step == "check":
    import jsonschema
    path, schema, tid, want = args[0], args[1], args[2], args[3]
    answers = json.load(open(path)).get(tid, [])
    assert len(answers) == 1, "task %s: %d answers, not one: %s" % (tid, len(answers), answers)
    r = answers[0]
    jsonschema.Draft202012Validator(json.load(open(schema))).validate(r)
    if want == "succeeded":
        assert r["status"] == "succeeded", r
    else:
        e = r.get("error") or {}
        assert r["status"] == "failed" and e.get("code") == "cancelled" and e.get("where") == "cancel", r
        if want == "running-cancelled":
            assert r.get("output", {}).get("text"), "no partial text: %s" % r
            print("%s: %s; partial text %d chars" % (tid, e["message"], len(r["output"]["text"])))
        elif want == "queued-cancelled":
            assert "not run" in e["message"] and "output" not in r, r
            assert r["timing"]["prefill_ms"] == 0 and r["experts"]["activations"] == 0, r
            print("%s: %s" % (tid, e["message"]))
        else:
            sys.exit("unknown outcome " + want)
else:
    sys.exit("unknown step " + step)
