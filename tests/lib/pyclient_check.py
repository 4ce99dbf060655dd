#!/usr/bin/python3
"""pyclient_check.py - checks of scripts/v4client.py against a real broker and a running
`v4fleet worker` on the tiny model, for tests/test_pyclient.sh (docs/queue-worker.md,
"Python client").

  pyclient_check.py URL PREFIX SCHEMA

PREFIX names the worker's queues (PREFIX.tasks ...); SCHEMA is config/result.schema.json.
Checks, in order (one printed line each; an AssertionError = exit 1):
  run        run() of a task without id: an id is generated, the result validates, the
             answer's message_id / correlation_id are the task's
  twins      two submits with the SAME task id in flight together (3 and 7 tokens), waited
             for in reverse order: each gets its own answer (matched by correlation_id);
             two threads with one Client each
  timeout    a long task (deadline_ms 2000) waited 0.5 s: TaskTimeout naming the id; the
             same handle later gets the deadline_exceeded failure with the partial text
  invalid    an invalid packet (max_tokens -3): TaskError invalid_field, where max_tokens,
             raised by default, returned with on_failure="return"; its record validates
  deadlines  a timestamp 20 s in the past (the Client's clock) + deadline_ms 5000, and a
             deadline_at in the past: deadline_exceeded, not run, where deadline_ms /
             x-deadline-at
  publish    a queue that does not exist -> PublishError unroutable naming the task; a
             queue that rejects (x-max-length 0, reject-publish) -> PublishError nacked;
             the client keeps working after both
  optional   urgent=True and cancel(): checked against what the broker has (the urgent
             queue and the cancel exchange are declared by workers that support them;
             on a branch without that support: PublishError naming PREFIX.tasks.urgent,
             cancel() returns False, the client keeps working); then, with a queue
             PREFIX.idle.urgent and a fanout exchange of the test's own, what lands there:
             the task with its AMQP properties, and {"cancel": id}
  misuse     a stray answer (unknown correlation_id) is counted, not delivered; bad
             arguments raise TypeError / ValueError; a refused connection raises
             ClientError without the password
Also declares PREFIX.idle (a queue nobody consumes) for the submit.py checks after it.
"""
import json
import os
import sys
import threading
import time

import jsonschema
import pika

sys.dont_write_bytecode = True   # no scripts/__pycache__ in the work tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from v4client import Client, ClientError, Pending, PublishError, TaskError, TaskTimeout  # noqa: E402

url, prefix, schema_path = sys.argv[1:4]
TASKS = prefix + ".tasks"
validator = jsonschema.Draft202012Validator(json.load(open(schema_path)))
SHORT = {"input_ids": [0, 2, 10, 3, 5], "temperature": 0, "ignore_eos": True}


def raises(exc, fn, *a, **kw):
    try:
        fn(*a, **kw)
    except exc as e:
        return e
    raise AssertionError("%s not raised by %s" % (exc.__name__, fn.__name__))


def exists(kind, name):
    """Does the broker have this queue / exchange? (passive declare on a throwaway connection)"""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        ch = conn.channel()
        (ch.queue_declare if kind == "queue" else ch.exchange_declare)(name, passive=True)
        return True
    except pika.exceptions.ChannelClosedByBroker as e:
        assert e.reply_code == 404, e
        return False
    finally:
        if conn.is_open:
            conn.close()


# side queues: one nobody consumes (submit.py's timeout) and one that rejects every publish
admin = pika.BlockingConnection(pika.URLParameters(url))
ach = admin.channel()
ach.queue_declare(prefix + ".idle", arguments={"x-expires": 120000})   # gone 2 min after its last use
ach.queue_declare(prefix + ".full", arguments={"x-max-length": 0, "x-overflow": "reject-publish"})

with Client(url, task_queue=TASKS, timeout=120) as c:
    # run
    h = c.submit(dict(SHORT, max_tokens=5))
    assert isinstance(h, Pending) and h.id.startswith("py-") and not h.done(), h
    r = c.result(h)
    validator.validate(r)
    assert r["status"] == "succeeded" and r["id"] == h.id and r["usage"]["completion_tokens"] == 5, r
    assert h.properties.message_id == h.id and h.properties.correlation_id == h.correlation_id, h.properties
    r2 = c.run({"prompt": "hello", "max_tokens": 4, "temperature": 0})
    validator.validate(r2)
    assert r2["status"] == "succeeded" and r2["id"].startswith("py-") and r2["id"] != h.id, r2
    print("run: %s -> %r (%d tokens), %s -> %r" % (h.id, r["output"]["text"], r["usage"]["completion_tokens"],
                                                   r2["id"], r2["output"]["text"]))

    # twins: the same id twice in flight; answers told apart by correlation_id only
    a = c.submit(dict(SHORT, id="twin", max_tokens=3))
    b = c.submit(dict(SHORT, id="twin", max_tokens=7))
    assert a.correlation_id != b.correlation_id
    rb, ra = c.result(b), a.result()
    assert (ra["id"], rb["id"]) == ("twin", "twin"), (ra, rb)
    assert ra["usage"]["completion_tokens"] == 3 and rb["usage"]["completion_tokens"] == 7, (ra["usage"], rb["usage"])
    assert len(ra["output"]["token_ids"]) == 3 and len(rb["output"]["token_ids"]) == 7
    assert rb["output"]["token_ids"][:3] == ra["output"]["token_ids"], (ra["output"], rb["output"])  # greedy prefix
    got = {}

    def one_thread(i):
        with Client(url, task_queue=TASKS) as tc:
            got[i] = tc.run(dict(SHORT, id="thr-%d" % i, max_tokens=2 + i), timeout=120)

    ts = [threading.Thread(target=one_thread, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert {i: (g["id"], g["usage"]["completion_tokens"]) for i, g in got.items()} == {0: ("thr-0", 2),
                                                                                       1: ("thr-1", 3)}, got
    print("twins: twin/3 and twin/7 matched by correlation id; two threads: thr-0/2, thr-1/3")

    # timeout, then the late answer on the same handle
    slow = c.submit(dict(SHORT, id="slow1", max_tokens=200000), deadline_ms=2000)
    t0 = time.monotonic()
    e = raises(TaskTimeout, c.result, slow, 0.5)
    assert e.task_id == "slow1" and "'slow1'" in str(e) and "0.5 s" in str(e), str(e)
    assert 0.45 <= time.monotonic() - t0 < 5, time.monotonic() - t0
    assert isinstance(e, TimeoutError)
    late = c.result("slow1", timeout=60, on_failure="return")
    assert isinstance(late, TaskError) and late.code == "deadline_exceeded" and late.where == "deadline_ms", late
    validator.validate(late.record)
    assert late.id == "slow1" and late.record["output"]["text"], late.record
    print("timeout: %s; then %s" % (e, late))

    # invalid packet: raised, or returned
    e = raises(TaskError, c.run, {"id": "bad-range", "prompt": "x", "max_tokens": -3})
    assert (e.code, e.where, e.id) == ("invalid_field", "max_tokens", "bad-range") and e.message, vars(e)
    validator.validate(e.record)
    assert e.record["status"] == "failed", e.record
    ret = c.run({"id": "bad-type", "prompt": 7}, on_failure="return")
    assert isinstance(ret, TaskError) and ret.code == "invalid_field" and ret.where == "prompt", ret
    print("invalid: %s | %s" % (e, ret))

    # deadlines from the sender's clock
    with Client(url, task_queue=TASKS, clock=lambda: time.time() - 20, on_failure="return") as skew:
        e1 = skew.run(dict(SHORT, id="late-ts", max_tokens=4), deadline_ms=5000)
    e2 = c.result(c.submit(dict(SHORT, id="late-at", max_tokens=4), deadline_at=time.time() - 1),
                  on_failure="return")
    for err, where in ((e1, "deadline_ms"), (e2, "x-deadline-at")):
        assert isinstance(err, TaskError) and err.code == "deadline_exceeded" and err.where == where, err
        assert "not run" in err.message and "output" not in err.record, err.record
        assert err.record["timing"]["prefill_ms"] == 0, err.record
        validator.validate(err.record)
    print("deadlines: %s | %s" % (e1, e2))

    # publish errors
    with Client(url, task_queue=prefix + ".nosuch") as nc:
        e = raises(PublishError, nc.submit, {"id": "nowhere", "prompt": "x"})
        assert e.reason == "unroutable" and e.task_id == "nowhere" and prefix + ".nosuch" in str(e), str(e)
        assert "does not exist" in str(e), str(e)
    with Client(url, task_queue=prefix + ".full") as fc:
        e2 = raises(PublishError, fc.submit, {"id": "rejected", "prompt": "x"})
        assert e2.reason == "nacked" and e2.task_id == "rejected", str(e2)
        assert not fc._pending, fc._pending
        e3 = raises(PublishError, fc.submit, {"id": "rejected2", "prompt": "x"})   # the channel still works
        assert e3.reason == "nacked", e3
    print("publish: %s | %s" % (e, e2))

    # optional features: judged against what the broker has
    if exists("queue", TASKS + ".urgent"):
        ru = c.run(dict(SHORT, id="urg", max_tokens=2), urgent=True)
        assert ru["status"] == "succeeded" and ru["id"] == "urg", ru
        print("urgent: queue %s.urgent exists, served" % TASKS)
    else:
        e = raises(PublishError, c.submit, dict(SHORT, id="urg", max_tokens=2), urgent=True)
        assert e.reason == "unroutable" and e.target == TASKS + ".urgent" and "urg" in str(e), str(e)
        print("urgent: no queue %s.urgent on this broker: %s" % (TASKS, e))
    have_cancel = exists("exchange", TASKS + ".cancel")
    assert c.cancel_exchange == TASKS + ".cancel"
    assert c.cancel("nothing-to-cancel") is have_cancel
    assert c.cancel(Pending(c, "nothing-either", "x", None)) is have_cancel
    print("cancel: exchange %s.cancel %s, cancel() -> %s" % (TASKS, "exists" if have_cancel else "absent",
                                                             have_cancel))
    # both publishing paths on the wire, with a queue and an exchange of our own
    ach.queue_declare(prefix + ".idle.urgent")
    ach.exchange_declare(prefix + ".mycancel", "fanout")
    cq = ach.queue_declare("", exclusive=True).method.queue
    ach.queue_bind(cq, prefix + ".mycancel")
    with Client(url, task_queue=prefix + ".idle", cancel_exchange=prefix + ".mycancel") as ic:
        t0 = int(time.time())
        hu = ic.submit({"id": "urg2", "prompt": "x"}, urgent=True, deadline_ms=900)
        assert ic.cancel(hu) is True
    m, p, b = ach.basic_get(prefix + ".idle.urgent", auto_ack=True)
    assert m is not None and json.loads(b) == {"id": "urg2", "prompt": "x", "deadline_ms": 900}, b
    assert (p.message_id, p.correlation_id, p.delivery_mode, p.content_type) == (
        "urg2", hu.correlation_id, 2, "application/json"), p
    assert p.reply_to == ic.reply_queue and t0 <= p.timestamp <= time.time() + 1, (p.reply_to, p.timestamp)
    m, p, b = ach.basic_get(cq, auto_ack=True)
    assert m is not None and json.loads(b) == {"cancel": "urg2"} and p.delivery_mode == 2, b
    print("wire: urgent task in %s.idle.urgent with its properties; cancel %s on %s.mycancel" % (prefix, b.decode(),
                                                                                              prefix))
    r = c.run(dict(SHORT, id="after", max_tokens=2))
    assert r["status"] == "succeeded" and r["id"] == "after", r

    # misuse and strays
    ach.basic_publish("", c.reply_queue, b'{"id":"ghost"}', pika.BasicProperties(correlation_id="not-ours"))
    before = c.stray
    c.poll(1.0)
    assert c.stray == before + 1, (before, c.stray)
    raises(TypeError, c.submit, '{"prompt": "x"}')
    raises(ValueError, c.submit, {"id": 5, "prompt": "x"})
    raises(ValueError, c.submit, {"id": "", "prompt": "x"})
    raises(ValueError, c.result, "never-submitted")
    raises(ValueError, c.result, "slow1")   # its result was taken already
    raises(ValueError, Client, url, task_queue=TASKS, on_failure="ignore")
    raises(ValueError, c.cancel, 7)
    print("misuse: stray answers counted (%d); bad arguments refused" % c.stray)
e = raises(ClientError, Client, "amqp://guest:s3cret@127.0.0.1:1/")
assert "s3cret" not in str(e) and "guest:***@" in str(e), str(e)
print("connect: %s" % e)
for q in (".full", ".idle.urgent"):
    ach.queue_delete(prefix + q)
ach.exchange_delete(prefix + ".mycancel")
admin.close()
