#!/usr/bin/python3
"""worker_http.py - helpers for tests/test_worker_http.sh (pika client, Prometheus text
checks, JSON log checks).

  worker_http.py run URL TASKQ RESULTQ INVALIDQ PREFIX N TIMEOUT_S
      publish N good tasks (ids PREFIX000.., AMQP timestamp set), one task for a model the
      worker does not serve (id PREFIX-wrong) and one invalid packet (not JSON), with
      confirms; read RESULTQ until the N+1 results and INVALIDQ until the error record
      arrived; print one JSON line {"ok": n, "failed": {code: n}, "prompt_tokens": sum,
      "completion_tokens": sum, "multi_token": tasks with >= 2 tokens, "ids": [...]};
      exit 1 when something is missing.
  worker_http.py parse FILE
      validate FILE as Prometheus text format 0.0.4 (every sample after its family's HELP
      and TYPE, names/labels/values well-formed, histogram buckets cumulative with +Inf =
      _count) and print {"name{labels}": value} as JSON; exit 1 with the reason if invalid.
  worker_http.py logs FILE WORKER_ID ID...
      every line of FILE is a JSON object with time (RFC 3339, ms, UTC), level, worker ==
      WORKER_ID, component, msg; every ID has a "finished" line (task == ID, with status);
      exit 1 with the reasons otherwise.
"""
import json
import re
import sys
import time


def run(argv):
    import pika
    url, tq, rq, iq, prefix, n, timeout = argv[0], argv[1], argv[2], argv[3], argv[4], int(argv[5]), float(argv[6])
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.confirm_delivery()
    ids = ["%s%03d" % (prefix, i) for i in range(n)]
    ts = int(time.time())
    for i, tid in enumerate(ids):
        body = {"id": tid, "prompt": "count to %d" % i, "max_tokens": 3 + i % 4, "temperature": 0}
        ch.basic_publish("", tq, json.dumps(body).encode(),
                         pika.BasicProperties(delivery_mode=2, message_id=tid, timestamp=ts), mandatory=True)
    wrong = prefix + "-wrong"
    ch.basic_publish("", tq, json.dumps({"id": wrong, "model": "no-such-model", "prompt": "x"}).encode(),
                     pika.BasicProperties(delivery_mode=2, message_id=wrong, timestamp=ts), mandatory=True)
    ch.basic_publish("", tq, b"this is not json", pika.BasicProperties(delivery_mode=2, timestamp=ts), mandatory=True)
    want = set(ids) | {wrong}
    s = {"ok": 0, "failed": {}, "prompt_tokens": 0, "completion_tokens": 0, "multi_token": 0, "ids": [],
         "invalid": 0}
    end = time.time() + timeout
    while time.time() < end and (len(s["ids"]) < len(want) or s["invalid"] < 1):
        got = False
        m, p, b = ch.basic_get(rq, auto_ack=True)
        if m is not None:
            got = True
            r = json.loads(b)
            s["ids"].append(r["id"])
            if r["status"] == "succeeded":
                s["ok"] += 1
                u = r["usage"]
                s["prompt_tokens"] += u["prompt_tokens"]
                s["completion_tokens"] += u["completion_tokens"]
                s["multi_token"] += u["completion_tokens"] >= 2
            else:
                c = r["error"]["code"]
                s["failed"][c] = s["failed"].get(c, 0) + 1
        m, p, b = ch.basic_get(iq, auto_ack=True)
        if m is not None:
            got = True
            s["invalid"] += 1
        if not got:
            time.sleep(0.05)
    conn.close()
    print(json.dumps(s))
    return 0 if set(s["ids"]) == want and len(s["ids"]) == len(want) and s["invalid"] == 1 else 1


NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
SAMPLE = re.compile(r"^(" + NAME + r")(\{(.*)\})? (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(,|$)')


def parse(argv):
    text = open(argv[0], encoding="utf-8").read()
    if not text.endswith("\n"):
        return fail("no final newline")
    helps, types, out, fam_of = {}, {}, {}, {}
    buckets = {}
    for ln, line in enumerate(text.splitlines(), 1):
        if line.startswith("# HELP "):
            name = line.split(" ", 3)[2]
            if name in helps:
                return fail("line %d: second HELP for %s" % (ln, name))
            helps[name] = True
            continue
        if line.startswith("# TYPE "):
            parts = line.split(" ")
            if len(parts) != 4 or parts[3] not in ("counter", "gauge", "histogram", "summary", "untyped"):
                return fail("line %d: bad TYPE line %r" % (ln, line))
            if parts[2] not in helps:
                return fail("line %d: TYPE before HELP for %s" % (ln, parts[2]))
            types[parts[2]] = parts[3]
            continue
        if not line or line.startswith("#"):
            return fail("line %d: unexpected line %r" % (ln, line))
        m = SAMPLE.match(line)
        if not m:
            return fail("line %d: bad sample %r" % (ln, line))
        name, labels, value = m.group(1), m.group(3) or "", m.group(4)
        fam = name
        for suf in ("_bucket", "_sum", "_count"):
            if name.endswith(suf) and types.get(name[: -len(suf)]) == "histogram":
                fam = name[: -len(suf)]
        if fam not in types:
            return fail("line %d: sample %s without a TYPE line" % (ln, name))
        rest, pairs = labels, []
        while rest:
            lm = LABEL.match(rest)
            if not lm:
                return fail("line %d: bad labels %r" % (ln, labels))
            pairs.append((lm.group(1), lm.group(2)))
            rest = rest[lm.end():]
        try:
            v = float(value.replace("+Inf", "inf"))
        except ValueError:
            return fail("line %d: bad value %r" % (ln, value))
        key = name + ("{" + labels + "}" if labels else "")
        out[key] = v
        if name.endswith("_bucket") and fam != name:
            le = [b for a, b in pairs if a == "le"]
            others = ",".join('%s="%s"' % p for p in pairs if p[0] != "le")
            if len(le) != 1:
                return fail("line %d: bucket without le" % ln)
            buckets.setdefault((fam, others), []).append((float(le[0].replace("+Inf", "inf")), v))
    for (fam, others), bl in buckets.items():
        les = [b[0] for b in bl]
        counts = [b[1] for b in bl]
        if les != sorted(les) or les[-1] != float("inf") or counts != sorted(counts):
            return fail("%s{%s}: buckets not ascending/cumulative or no +Inf: %r" % (fam, others, bl))
        ckey = fam + "_count" + ("{" + others + "}" if others else "")
        if ckey in out and out[ckey] != counts[-1]:
            return fail("%s: +Inf bucket %g != _count %g" % (fam, counts[-1], out[ckey]))
    print(json.dumps(out))
    return 0


TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def logs(argv):
    path, wid, ids = argv[0], argv[1], argv[2:]
    bad, finished = [], set()
    n = 0
    with open(path, encoding="utf-8") as f:
        for ln, line in enumerate(f, 1):
            n += 1
            try:
                o = json.loads(line)
            except ValueError as e:
                bad.append("line %d is not JSON (%s): %r" % (ln, e, line[:200]))
                continue
            if not isinstance(o, dict):
                bad.append("line %d: not an object" % ln)
                continue
            if not TIME.match(str(o.get("time", ""))):
                bad.append("line %d: time %r" % (ln, o.get("time")))
            if o.get("level") not in ("error", "info", "debug"):
                bad.append("line %d: level %r" % (ln, o.get("level")))
            if o.get("worker") != wid:
                bad.append("line %d: worker %r != %r" % (ln, o.get("worker"), wid))
            if o.get("component") not in ("worker", "amqp", "redis", "http"):
                bad.append("line %d: component %r" % (ln, o.get("component")))
            if not isinstance(o.get("msg"), str) or not o["msg"]:
                bad.append("line %d: msg %r" % (ln, o.get("msg")))
            if "task" in o and "status" in o:
                finished.add(o["task"])
    for tid in ids:
        if tid not in finished:
            bad.append("no finished line for task %s" % tid)
    if n == 0:
        bad.append("empty log")
    for b in bad[:20]:
        print(b, file=sys.stderr)
    print("%d lines, %d tasks finished, %d problems" % (n, len(finished), len(bad)))
    return 1 if bad else 0


def fail(msg):
    print("invalid exposition: " + msg, file=sys.stderr)
    return 1


if __name__ == "__main__":
    cmds = {"run": run, "parse": parse, "logs": logs}
    sys.exit(cmds[sys.argv[1]](sys.argv[2:]))
