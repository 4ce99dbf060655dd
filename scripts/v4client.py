"""v4client.py - a small Python client for the v4fleet queue worker (RabbitMQ, pika).

Why: every microservice that talks to `v4fleet worker` needs the same few things right:
a private reply queue, correlation ids, the AMQP timestamp (deadlines count from the
sender's clock), persistent delivery with publisher confirms, a client-side timeout, and
one shape for failures.  This module does them once.  The contract it implements is
docs/queue-worker.md ("Contract", "Deadlines", "Python client"); results are
config/result.schema.json.

    import sys; sys.path.insert(0, "scripts")          # or copy this one file
    from v4client import Client, TaskError, TaskTimeout

    with Client("amqp://guest:guest@127.0.0.1:5672/", task_queue="tasks") as c:
        r = c.run({"prompt": "hello", "max_tokens": 8}, timeout=60)   # the result dict
        h1 = c.submit({"id": "a", "prompt": "one"})                   # -> Pending
        h2 = c.submit({"id": "b", "prompt": "two"}, deadline_ms=5000)
        print(c.result(h2)["output"]["text"], h1.result()["output"]["text"])

What a submit does: the task (a dict; copied, never changed) gets an id when it has none
("py-" + 20 hex digits); it is published persistent (delivery_mode 2), `mandatory`, with
publisher confirms, to the default exchange with routing key `task_queue` (or
`task_queue + ".urgent"` with urgent=True), with message_id = the task id, reply_to =
this client's private queue (server-named, exclusive, auto-delete: one per client, gone
with its connection), correlation_id = a fresh random token per submit (so two
submissions of the same task id are told apart), timestamp = the sender's clock
(seconds: AMQP's resolution), content_type application/json.  A broker that returns the
message (no such queue) or nacks it raises PublishError; nothing is retried.

Answers: the worker answers every task message that carries reply_to there, valid or
not (an invalid packet gets a failed result with error {code, message, where}), with the
task's correlation_id.  Answers are matched by correlation_id only; one for no pending
submit (a duplicate: delivery is at-least-once) is dropped and counted in `stray`.
A failed result raises TaskError (code, message, where, id, record), or is returned as
that TaskError object when on_failure="return" (per client or per call).  No answer
within the timeout raises TaskTimeout naming the task id; the handle stays valid, a
later result() may still get the answer.

Thread safety: a Client is NOT thread-safe.  It owns one pika BlockingConnection, which
must be used by one thread only; its replies are only read while that thread is inside
submit/result/run/as_completed/poll/cancel.  Use one Client per thread (each has its own
reply queue) or hand work to one thread that owns the Client.  While your code does not
call the Client for longer than the heartbeat timeout (the broker's default is 60 s; add
`?heartbeat=0` to the URL to turn heartbeats off) the broker may close the connection;
call poll() now and then.  A closed connection ends the client: its reply queue is
gone, and the worker diverts the answers still due to V4_UNROUTABLE_QUEUE
(`results.unroutable`); the next call raises ClientError.

Optional features that need worker support (docs/queue-worker.md): cancel(id) publishes
{"cancel": id} to the fanout exchange `cancel_exchange` (default task_queue + ".cancel",
i.e. `tasks.cancel`) and returns False, without error, when the broker has no such
exchange; submit(urgent=True) publishes to `task_queue + ".urgent"` and raises
PublishError when that queue does not exist.

Fleet affinity (docs/queue-worker.md "Fleet affinity"): with affinity=True (default: on
when $V4_AFFINITY is "1") a normal (not urgent) task is published to the x-consistent-hash
exchange `affinity_exchange` (default task_queue + ".affinity") with the routing key
prefix_route_key(task, prefix_key): tasks with the same key land on the same worker, whose
prefix cache then holds their shared prompt prefix.  The key is the submit's prefix_key,
else the task's own "prefix_key" field (taken out of the packet: the worker never sees
it), else derived from the task's first `affinity_chars` (512) characters of prompt text
(see prefix_route_key).  When the broker has no such exchange (no worker runs with
V4_AFFINITY=1) the task goes to the task queue as without affinity.

Needs python3-pika (>= 1.0; V4_PACKAGES in scripts/lib.sh).
"""
import hashlib
import json
import os
import re
import time
import uuid

import pika
import pika.exceptions

__all__ = ["Client", "Pending", "ClientError", "PublishError", "TaskError", "TaskTimeout", "DEFAULT_URL",
           "prefix_route_key"]

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/"


def _masked(url):
    """The URL with its password replaced by *** (for messages)."""
    return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)


def _text_of(content):
    """A message's content as text: a string as is; OpenAI's parts list -> its texts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else json.dumps(content, sort_keys=True)


def prefix_route_key(task, prefix_key=None, chars=512):
    """The routing key of a task on the affinity exchange (docs/queue-worker.md "Fleet
    affinity").  prefix_key given: that string (hashed when longer than 200 bytes; AMQP
    routing keys are at most 255).  Else derived from what the worker's prefix cache keys
    on, the start of the prompt as the model sees it:
      messages   role + NUL + content (text parts joined) of each message in order, NUL
                 separated: the system message and any few-shot turns come first
      prompt     the prompt text
      input_ids  the ids, comma separated (the first 256 ids: one cache block)
    of which the first `chars` characters (input_ids: ids) are hashed: "p" + the first 32
    hex digits of their SHA-256.  Tasks whose prompts agree on that start share a key;
    512 characters are about 120-170 tokens, less than one 256-token cache block, so
    prompts sharing a cacheable prefix agree on it.  A task with none of the three fields
    gets the key "p-" (all such tasks go to one worker)."""
    if prefix_key is not None:
        if not isinstance(prefix_key, str) or not prefix_key:
            raise ValueError("prefix_key must be a non-empty string, not %r" % (prefix_key,))
        raw = prefix_key.encode("utf-8")
        return prefix_key if len(raw) <= 200 else "h" + hashlib.sha256(raw).hexdigest()[:32]
    if isinstance(task.get("messages"), list):
        text = "\0".join("%s\0%s" % (m.get("role", ""), _text_of(m.get("content")))
                          if isinstance(m, dict) else str(m) for m in task["messages"])[:chars]
    elif isinstance(task.get("prompt"), str):
        text = task["prompt"][:chars]
    elif isinstance(task.get("input_ids"), list):
        text = ",".join(str(i) for i in task["input_ids"][:256])
    else:
        return "p-"
    return "p" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


class ClientError(Exception):
    """Base class of this module's errors (also: connection problems, misuse)."""


class PublishError(ClientError):
    """The broker did not take a message: `reason` is "unroutable" (no queue `target`)
    or "nacked"; `task_id` names the task."""

    def __init__(self, task_id, target, reason, detail=""):
        self.task_id, self.target, self.reason = task_id, target, reason
        what = {"unroutable": "the broker returned it: queue %r does not exist (is a worker running?)" % target,
                "nacked": "the broker nacked it (queue %r full or failing)" % target}.get(reason, reason)
        super().__init__("task %r not published: %s%s" % (task_id, what, (": " + detail) if detail else ""))


class TaskTimeout(ClientError, TimeoutError):
    """No answer within `timeout` seconds for the task(s) `task_ids` (`task_id`: the first)."""

    def __init__(self, task_ids, timeout):
        self.task_ids, self.timeout = list(task_ids), timeout
        self.task_id = self.task_ids[0] if self.task_ids else None
        names = ", ".join(repr(t) for t in self.task_ids)
        super().__init__("no result for task%s %s within %.1f s" % ("s" if len(self.task_ids) > 1 else "", names,
                                                                      timeout))


class TaskError(ClientError):
    """A failed result: `code`, `message`, `where` (None when the worker named no field),
    `id` (the task id) and `record` (the whole result dict, output included: a
    deadline_exceeded run keeps its partial text in record["output"]["text"])."""

    def __init__(self, record, task_id=None):
        err = record.get("error") or {}
        self.record = record
        self.id = record.get("id") or task_id
        self.code = err.get("code", "unknown")
        self.message = err.get("message", "")
        self.where = err.get("where")
        super().__init__("task %r failed: %s%s: %s" % (self.id, self.code,
                                                       " (%s)" % self.where if self.where else "", self.message))


class Pending:
    """The handle of one submitted task (Future-like).  `id`: the task id;
    `correlation_id`; `body`: the answer's raw bytes once it arrived, else None;
    `record`: the answer parsed.  Use it from the Client's thread only."""

    def __init__(self, client, task_id, correlation_id, timeout):
        self._client, self.id, self.correlation_id, self.timeout = client, task_id, correlation_id, timeout
        self.body, self.record, self.properties, self._seq = None, None, None, None

    def done(self):
        """True once the answer arrived (does not read the connection: see Client.poll)."""
        return self.body is not None

    def result(self, timeout=None, on_failure=None):
        """Client.result(self, timeout, on_failure)."""
        return self._client.result(self, timeout, on_failure)

    def __repr__(self):
        return "<Pending %r %s>" % (self.id, "done" if self.done() else "waiting")


class Client:
    """A connection to the broker with a private reply queue (see the module docstring).

    url          AMQP URL (amqp:// or amqps://); default $V4_AMQP_URL, else DEFAULT_URL
    task_queue   the worker's V4_TASK_QUEUE; default $V4_TASK_QUEUE, else "tasks"
    timeout      default seconds result() waits (600: the worker's default deadline)
    on_failure   "raise" (TaskError raised) or "return" (the TaskError returned)
    cancel_exchange  the cancel fanout exchange; default task_queue + ".cancel"
    clock        the sender's clock for the AMQP timestamp, seconds since the epoch
                 (default time.time; tests pass a skewed one)
    affinity     route normal tasks by prefix key (see the module doc); default: on when
                 $V4_AFFINITY is "1"
    affinity_exchange  the workers' V4_AFFINITY_EXCHANGE; default $V4_AFFINITY_EXCHANGE,
                 else task_queue + ".affinity"
    affinity_chars     characters of prompt text a derived key covers (512)
    """

    def __init__(self, url=None, task_queue=None, timeout=600.0, on_failure="raise", cancel_exchange=None,
                 clock=time.time, affinity=None, affinity_exchange=None, affinity_chars=512):
        if on_failure not in ("raise", "return"):
            raise ValueError("on_failure must be 'raise' or 'return', not %r" % (on_failure,))
        self.url = url or os.environ.get("V4_AMQP_URL") or DEFAULT_URL
        self.task_queue = task_queue or os.environ.get("V4_TASK_QUEUE") or "tasks"
        self.timeout, self.on_failure, self._clock = timeout, on_failure, clock
        self.cancel_exchange = cancel_exchange or self.task_queue + ".cancel"
        self.affinity = (os.environ.get("V4_AFFINITY") == "1") if affinity is None else bool(affinity)
        self.affinity_exchange = (affinity_exchange or os.environ.get("V4_AFFINITY_EXCHANGE")
                                  or self.task_queue + ".affinity")
        self.affinity_chars = int(affinity_chars)
        self._affinity_ok = None            # does the broker have affinity_exchange? (asked once)
        self.stray = 0                      # answers for no pending submit (duplicates)
        self._pending, self._by_id, self._seq = {}, {}, 0
        try:
            self._conn = pika.BlockingConnection(pika.URLParameters(self.url))
        except pika.exceptions.AMQPError as e:
            raise ClientError("cannot connect to %s: %s" % (_masked(self.url), e.__class__.__name__)) from e
        self._ch = self._conn.channel()
        self._ch.confirm_delivery()
        self.reply_queue = self._ch.queue_declare("", exclusive=True, auto_delete=True).method.queue
        self._ch.basic_consume(self.reply_queue, self._on_answer, auto_ack=True)

    # ---- lifetime ----
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        """Close the connection (and with it the reply queue); answers still due then go
        to the worker's unroutable queue.  Safe to call twice."""
        if self._conn.is_open:
            try:
                self._conn.close()
            except pika.exceptions.AMQPError:
                pass

    # ---- publishing ----
    def _affinity_exchange_exists(self):
        """Whether the broker has affinity_exchange (a passive declare on a channel of its
        own, asked once per client)."""
        if self._affinity_ok is None:
            try:
                ch = self._conn.channel()
            except pika.exceptions.AMQPError as e:
                raise ClientError("connection to %s lost (%s)" % (_masked(self.url), e.__class__.__name__)) from e
            try:
                ch.exchange_declare(self.affinity_exchange, passive=True)
                self._affinity_ok = True
            except pika.exceptions.ChannelClosedByBroker as e:
                if e.reply_code != 404:
                    raise ClientError("affinity exchange %r: %s" % (self.affinity_exchange, e)) from e
                self._affinity_ok = False
            finally:
                if ch.is_open:
                    ch.close()
        return self._affinity_ok

    def submit(self, task, timeout=None, deadline_ms=None, urgent=False, deadline_at=None, prefix_key=None):
        """Publish one task; returns its Pending handle.

        task         dict (copied); gets an "id" when it has none (a non-string id: ValueError)
        timeout      the default wait of result() for this task (else the client's)
        deadline_ms  sets the task's deadline_ms (counted by the worker from this message's
                     timestamp, i.e. from now on the sender's clock)
        deadline_at  absolute deadline, seconds since the epoch -> header x-deadline-at (ms)
        urgent       publish to task_queue + ".urgent" (needs a worker that has it; never
                     routed by affinity)
        prefix_key   the affinity routing key (else the task's "prefix_key" field, else
                     derived: prefix_route_key); used only when affinity is on
        Raises PublishError when the broker returns or nacks the message."""
        if not isinstance(task, dict):
            raise TypeError("a task is a dict, not %s" % type(task).__name__)
        task = dict(task)
        own_key = task.pop("prefix_key", None)     # a client-side field: never sent to the worker
        if prefix_key is None:
            prefix_key = own_key
        if prefix_key is not None and (not isinstance(prefix_key, str) or not prefix_key):
            raise ValueError("prefix_key must be a non-empty string, not %r" % (prefix_key,))
        if "id" not in task:
            task["id"] = "py-" + uuid.uuid4().hex[:20]
        tid = task["id"]
        if not isinstance(tid, str) or not tid:
            raise ValueError("task id must be a non-empty string, not %r" % (tid,))
        if deadline_ms is not None:
            task["deadline_ms"] = deadline_ms
        headers = None
        if deadline_at is not None:
            headers = {"x-deadline-at": int(deadline_at * 1000)}
        corr = uuid.uuid4().hex
        props = pika.BasicProperties(content_type="application/json", delivery_mode=2, message_id=tid,
                                     correlation_id=corr, reply_to=self.reply_queue,
                                     timestamp=int(self._clock()), headers=headers)
        exchange, queue = "", self.task_queue + (".urgent" if urgent else "")
        if self.affinity and not urgent:
            key = prefix_route_key(task, prefix_key, self.affinity_chars)
            if self._affinity_exchange_exists():
                exchange, queue = self.affinity_exchange, key
        body = json.dumps(task, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        h = Pending(self, tid, corr, timeout)
        self._pending[corr] = h        # before publishing: the answer may come while we wait for the confirm
        try:
            self._ch.basic_publish(exchange, queue, body, props, mandatory=True)
        except pika.exceptions.UnroutableError as e:
            del self._pending[corr]
            raise PublishError(tid, exchange or queue, "unroutable") from e
        except pika.exceptions.NackError as e:
            del self._pending[corr]
            raise PublishError(tid, exchange or queue, "nacked") from e
        except pika.exceptions.AMQPError as e:
            del self._pending[corr]
            raise ClientError("task %r not published: connection to %s lost (%s)" %
                              (tid, _masked(self.url), e.__class__.__name__)) from e
        self._by_id[tid] = h
        return h

    def cancel(self, task):
        """Ask the workers to cancel a task (a Pending or an id): publishes {"cancel": id}
        to the fanout exchange cancel_exchange, with confirms, on a channel of its own.
        Returns True when published, False when the broker has no such exchange (the
        workers do not support cancelling).  The task's answer still comes (it may be a
        result or a failure, as the worker decides)."""
        tid = task.id if isinstance(task, Pending) else task
        if not isinstance(tid, str) or not tid:
            raise ValueError("cancel: a task id is a non-empty string, not %r" % (tid,))
        try:
            ch = self._conn.channel()
        except pika.exceptions.AMQPError as e:
            raise ClientError("cancel %r: connection to %s lost (%s)" % (tid, _masked(self.url),
                                                                       e.__class__.__name__)) from e
        try:
            ch.exchange_declare(self.cancel_exchange, passive=True)
        except pika.exceptions.ChannelClosedByBroker as e:
            if e.reply_code == 404:
                return False
            raise ClientError("cancel %r: %s" % (tid, e)) from e
        try:
            ch.confirm_delivery()
            ch.basic_publish(self.cancel_exchange, "", json.dumps({"cancel": tid}).encode(),
                             pika.BasicProperties(content_type="application/json", delivery_mode=2,
                                                  message_id=tid, timestamp=int(self._clock())))
        except pika.exceptions.NackError as e:
            raise PublishError(tid, self.cancel_exchange, "nacked", "the cancel message") from e
        finally:
            if ch.is_open:
                ch.close()
        return True

    # ---- answers ----
    def _on_answer(self, _ch, _method, props, body):
        h = self._pending.get(props.correlation_id)
        if h is None or h.body is not None:
            self.stray += 1
            return
        self._seq += 1
        h.body, h.properties, h._seq = body, props, self._seq
        try:
            h.record = json.loads(body)
            if not isinstance(h.record, dict):
                raise ValueError("not an object")
        except ValueError as e:
            h.record = {"id": h.id, "status": "failed",
                        "error": {"code": "bad_answer", "message": "the answer is not a JSON object: %s" % e,
                                  "where": None}}

    def poll(self, timeout=0.0):
        """Read what the broker sent (answers, heartbeats) for up to timeout seconds."""
        try:
            self._conn.process_data_events(time_limit=timeout)
        except pika.exceptions.AMQPError as e:
            raise ClientError("connection to %s lost (%s): this client's reply queue is gone; answers still "
                              "due go to the worker's unroutable queue" % (_masked(self.url),
                                                                          e.__class__.__name__)) from e

    def _handle(self, task):
        if isinstance(task, Pending):
            if task._client is not self:
                raise ValueError("task %r was submitted by another Client" % task.id)
            return task
        h = self._by_id.get(task)
        if h is None:
            raise ValueError("no task %r was submitted by this Client (or its result was already taken by id)"
                             % (task,))
        return h

    def _release(self, h):
        """Forget an answered handle (a later duplicate of its answer counts as stray)."""
        self._pending.pop(h.correlation_id, None)
        if self._by_id.get(h.id) is h:
            del self._by_id[h.id]

    def _wait(self, handles, timeout):
        end = time.monotonic() + timeout
        while not all(h.done() for h in handles):
            left = end - time.monotonic()
            if left <= 0:
                return False
            self.poll(min(left, 0.25))
        return True

    def _outcome(self, h, on_failure):
        rec = h.record
        if rec.get("status") == "failed":
            err = TaskError(rec, h.id)
            if (on_failure or self.on_failure) == "raise":
                raise err
            return err
        return rec

    def result(self, task, timeout=None, on_failure=None):
        """Wait for the answer of a task (a Pending, or the id of one submitted by this
        client: the latest submit of that id).  Returns the result dict; a failed result
        raises TaskError, or returns it with on_failure="return".  Waits `timeout`
        seconds (default: the submit's timeout, else the client's), then raises
        TaskTimeout naming the id; the handle stays valid for a later call."""
        h = self._handle(task)
        if timeout is None:
            timeout = h.timeout if h.timeout is not None else self.timeout
        if not self._wait([h], timeout):
            raise TaskTimeout([h.id], timeout)
        self._release(h)
        return self._outcome(h, on_failure)

    def run(self, task, timeout=None, deadline_ms=None, urgent=False, on_failure=None):
        """submit + result: the result dict (TaskError / TaskTimeout / PublishError as there)."""
        return self.result(self.submit(task, timeout, deadline_ms, urgent), timeout, on_failure)

    def as_completed(self, handles, timeout=None):
        """Yield the handles as their answers arrive (arrival order); raise TaskTimeout
        naming every id still unanswered when `timeout` seconds (default: the client's)
        pass without all of them.  Failed results are yielded too (check h.record or
        call h.result())."""
        handles = [self._handle(h) for h in handles]
        timeout = self.timeout if timeout is None else timeout
        end = time.monotonic() + timeout
        left_over = list(handles)
        while left_over:
            ready = sorted((h for h in left_over if h.done()), key=lambda h: h._seq)
            for h in ready:
                left_over.remove(h)
                self._release(h)
                yield h
            if not left_over:
                break
            remaining = end - time.monotonic()
            if remaining <= 0:
                raise TaskTimeout([h.id for h in left_over], timeout)
            self.poll(min(remaining, 0.25))
