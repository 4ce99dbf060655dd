#!/usr/bin/env bash
# test_sampling_batch.sh - the sampling fields and log probabilities end to end through
# `v4fleet batch` on the tiny synthetic model (random weights; docs/structured-outputs.md
# "Sampling fields", "Log probabilities"):
#  - logprobs / top_logprobs on OpenAI lines (choices[0].logprobs.content) and task packets
#    (output.logprobs): one entry per generated token less a final EOS, every logprob
#    <= 0, top_logprobs of the asked length, sorted descending, the chosen token's logprob
#    equal to its own entry there when present (else below the last), bytes that decode
#    (backslashreplace) to token; greedy picks the first top entry; the entries' bytes
#    joined give the text (special tokens aside); no logprobs asked -> null / absent;
#  - logit_bias: +100 on a token makes every generated token that one (token_ids), -100
#    on the greedy first token bans it (the first token changes); +100 on EOS ends the
#    answer at once ("stop", one token), and with ignore_eos (now read from batch bodies)
#    the answer runs to max_tokens; top_k 1 at temperature 1 equals greedy (top_k read
#    from batch bodies);
#  - penalties and min_p run and are deterministic (the same line twice gives the same
#    tokens), repetition_penalty changes the greedy answer of a line that repeats;
#  - bad values: invalid_field naming the field (body.top_logprobs, body.min_p,
#    logit_bias outside the vocabulary), n: 17 invalid_field; nothing is "ignored";
#  - --concurrency 3 gives the same lines (logprobs included) as the serial run.
set -u
bin=${V4_BIN:?V4_BIN not set}
py=/usr/bin/python3
work=$(mktemp -d "${V4_TMP:-/tmp}/sampbatch.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fail=1; }

"$bin" mkmodel --out "$work/m" --preset tiny --seed 5 --no-sync >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }
M=(--model "$work/m" --model-name tiny)

# ---- pass 1: greedy first tokens (what the bans below aim at) ----------------------
$py - "$work/g.jsonl" <<'EOF2'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(3):
        f.write(json.dumps({"id": "g%d" % i, "prompt": "Say something %d." % i, "temperature": 0, "max_tokens": 4}) + "\n")
EOF2
"$bin" batch "$work/g.jsonl" -o "$work/g.out" "${M[@]}" 2>"$work/g.err" || { bad "greedy pass: $(tail -3 "$work/g.err")"; exit 1; }

# ---- pass 2: the lines under test ---------------------------------------------------
$py - "$work/g.out" "$work/in.jsonl" <<'EOF2'
import json, sys
first = {}
for l in open(sys.argv[1]):
    r = json.loads(l)
    first[r["id"]] = r["output"]["token_ids"][0]
lines = []
def openai(cid, body):
    body = dict({"model": "tiny", "messages": [{"role": "user", "content": "Tell me about %s." % cid}]}, **body)
    lines.append({"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": body})
def task(tid, fields):
    lines.append(dict({"id": tid, "prompt": "Tell me about %s." % tid}, **fields))
for seed in (1, 2, 3):
    openai("lp-%d" % seed, {"temperature": 1, "seed": seed, "max_tokens": 16, "logprobs": True, "top_logprobs": 5})
    task("tlp-%d" % seed, {"temperature": 0.8, "seed": seed, "max_tokens": 16, "logprobs": True, "top_logprobs": 3,
                           "presence_penalty": 0.5, "min_p": 0.02})
openai("lp-greedy", {"temperature": 0, "max_tokens": 12, "logprobs": True, "top_logprobs": 4})
openai("lp-none", {"temperature": 0, "max_tokens": 4, "logprobs": False, "top_logprobs": None})
openai("lp-zero", {"temperature": 0, "max_tokens": 4, "logprobs": True})
task("force", {"temperature": 1, "seed": 4, "max_tokens": 8, "logit_bias": {"300": 100}, "logprobs": True})
openai("force-oa", {"temperature": 0.7, "seed": 4, "max_tokens": 6, "logit_bias": {"300": 100}, "logprobs": True,
                    "top_logprobs": 2})
for i in range(3):
    task("ban%d" % i, {"prompt": "Say something %d." % i, "temperature": 0, "max_tokens": 4,
                       "logit_bias": {str(first["g%d" % i]): -100}})
openai("eos", {"temperature": 1, "seed": 1, "max_tokens": 10, "logit_bias": {"1": 100}})
openai("eos-ignored", {"temperature": 1, "seed": 1, "max_tokens": 10, "logit_bias": {"1": 100}, "ignore_eos": True})
same = [{"role": "user", "content": "Tell me about k."}]
openai("topk1", {"messages": same, "temperature": 1, "seed": 9, "max_tokens": 12, "top_k": 1})
openai("greedy", {"messages": same, "temperature": 0, "max_tokens": 12})
for k in ("pen-a", "pen-b"):
    openai(k, {"messages": [{"role": "user", "content": "Tell me about pen."}], "temperature": 1.2, "seed": 77,
               "max_tokens": 16, "frequency_penalty": 1.5, "presence_penalty": -0.5, "repetition_penalty": 1.2,
               "min_p": 0.05, "top_k": 40, "top_p": 0.95, "logit_bias": {"7": 3, "8": -3}, "n": 1})
lines.append({"id": "rep0", "input_ids": [0] + [300] * 40, "temperature": 0, "max_tokens": 12, "ignore_eos": True,
              "logit_bias": {"300": 3}})
lines.append({"id": "rep", "input_ids": [0] + [300] * 40, "temperature": 0, "max_tokens": 12, "ignore_eos": True,
             "logit_bias": {"300": 3}, "repetition_penalty": 2.0})
openai("bad-top", {"max_tokens": 4, "logprobs": True, "top_logprobs": 25})
openai("bad-minp", {"max_tokens": 4, "min_p": 2})
openai("bad-n", {"max_tokens": 4, "n": 17})   # n is served (1..16): test_batch_n.sh
task("bad-vocab", {"max_tokens": 4, "logit_bias": {"99999999": 1}})
with open(sys.argv[2], "w") as f:
    for l in lines:
        f.write(json.dumps(l) + "\n")
EOF2

"$bin" batch "$work/in.jsonl" -o "$work/out1.jsonl" "${M[@]}" 2>"$work/err1"; rc=$?
[ "$rc" -eq 3 ] && ok "batch: exit 3 (its failing lines)" || bad "batch: exit $rc: $(tail -5 "$work/err1")"
if grep -q "ignored" "$work/err1"; then bad "a field was ignored: $(grep ignored "$work/err1")"; else ok "no field ignored"; fi

cat > "$work/check.py" <<'EOF2'
import json, math, sys
recs = {}
for l in open(sys.argv[1], encoding="utf-8"):
    r = json.loads(l)
    recs[r.get("custom_id") or r.get("id")] = r
first = {json.loads(l)["id"]: json.loads(l)["output"]["token_ids"][0] for l in open(sys.argv[2])}
fails = []
def norm_err(r):   # a failed line's error: task records' "error", OpenAI's response.body.error
    if r.get("custom_id") is not None or "custom_id" in r:
        if r.get("error"):
            return r["error"]
        resp = r.get("response") or {}
        if resp.get("status_code", 200) >= 400:
            e = resp["body"]["error"]
            return {"code": e["code"], "where": e["param"], "message": e["message"]}
        return None
    return r.get("error")
def body(k):
    r = recs[k]
    if norm_err(r):
        fails.append("%s failed: %s" % (k, norm_err(r)))
        return None
    return r["response"]["body"]
def out(k):
    r = recs[k]
    if r["status"] != "succeeded":
        fails.append("%s failed: %s" % (k, r["error"]))
        return None
    return r["output"]
def check_entries(k, content, n_top, n_expect, text=None):
    if len(content) != n_expect:
        fails.append("%s: %d entries, want %d" % (k, len(content), n_expect))
    for i, e in enumerate(content):
        if set(e) != {"token", "logprob", "bytes", "top_logprobs"}:
            fails.append("%s[%d]: keys %s" % (k, i, sorted(e)))
            return
        if not (e["logprob"] <= 0):
            fails.append("%s[%d]: logprob %r > 0" % (k, i, e["logprob"]))
        if bytes(e["bytes"]).decode("utf-8", "backslashreplace") != e["token"]:
            fails.append("%s[%d]: bytes %r do not decode to %r" % (k, i, e["bytes"], e["token"]))
        top = e["top_logprobs"]
        if len(top) != n_top:
            fails.append("%s[%d]: %d top entries, want %d" % (k, i, len(top), n_top))
        lps = [t["logprob"] for t in top]
        if lps != sorted(lps, reverse=True) or any(x > 0 for x in lps):
            fails.append("%s[%d]: top_logprobs not descending / not <= 0: %r" % (k, i, lps))
        for t in top:
            if bytes(t["bytes"]).decode("utf-8", "backslashreplace") != t["token"] or set(t) != {"token", "logprob", "bytes"}:
                fails.append("%s[%d]: top entry %r" % (k, i, t))
        mine = [t for t in top if t["bytes"] == e["bytes"]]
        if mine and not any(abs(t["logprob"] - e["logprob"]) < 1e-12 for t in mine):
            fails.append("%s[%d]: chosen logprob %r differs from its top entry %r" % (k, i, e["logprob"], mine))
        if top and not mine and e["logprob"] > lps[-1]:
            fails.append("%s[%d]: chosen logprob %r above the last top entry but absent" % (k, i, e["logprob"]))
    if text is not None:
        joined = b"".join(bytes(e["bytes"]) for e in content).decode("utf-8", "replace")
        for sp in ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<think>", "</think>"):
            joined = joined.replace(sp, "")
        if joined != text:
            fails.append("%s: the entries' bytes give %r, the text is %r" % (k, joined, text))
def n_entries(n_tokens, fin):
    return n_tokens - (1 if fin == "stop" else 0)   # no stop strings here: "stop" = a final EOS
for k in ("lp-1", "lp-2", "lp-3", "lp-greedy", "lp-zero", "force-oa"):
    b = body(k)
    if not b:
        continue
    c = b["choices"][0]
    lp = c.get("logprobs")
    if not isinstance(lp, dict) or not isinstance(lp.get("content"), list):
        fails.append("%s: choices[0].logprobs = %r" % (k, lp)); continue
    n_top = {"lp-greedy": 4, "lp-zero": 0, "force-oa": 2}.get(k, 5)
    check_entries(k, lp["content"], n_top, n_entries(b["usage"]["completion_tokens"], c["finish_reason"]),
                  c["message"]["content"])
    if k == "lp-greedy":
        for i, e in enumerate(lp["content"]):
            if e["top_logprobs"][0]["bytes"] != e["bytes"]:
                fails.append("lp-greedy[%d]: greedy did not pick the first top entry" % i)
b = body("lp-none")
if b and b["choices"][0].get("logprobs", "missing") is not None:
    fails.append("lp-none: logprobs %r, want null" % b["choices"][0].get("logprobs", "missing"))
for k in ("tlp-1", "tlp-2", "tlp-3", "force"):
    o = out(k)
    if not o:
        continue
    ids = o["token_ids"]
    n = len(ids) - (1 if o["finish_reason"] == "stop" and ids and ids[-1] == 1 else 0)
    if "logprobs" not in o:
        fails.append("%s: no output.logprobs" % k); continue
    check_entries(k, o["logprobs"], 0 if k == "force" else 3, n, o["text"])
o = out("force")
if o and (o["token_ids"] != [300] * 8 or any(e["logprob"] < -1e-3 for e in o["logprobs"])):
    fails.append("force: token_ids %r (want 8 x 300), logprobs %r" % (o["token_ids"], [e["logprob"] for e in o["logprobs"]]))
b = body("force-oa")
if b and any(e["bytes"] != b["choices"][0]["logprobs"]["content"][0]["bytes"] for e in b["choices"][0]["logprobs"]["content"]):
    fails.append("force-oa: not every token is the forced one")
for i in range(3):
    o = out("ban%d" % i)
    if o and o["token_ids"][0] == first["g%d" % i]:
        fails.append("ban%d: the banned token %d came first" % (i, first["g%d" % i]))
b = body("eos")
if b and (b["choices"][0]["finish_reason"] != "stop" or b["usage"]["completion_tokens"] != 1):
    fails.append("eos: %s after %d tokens, want stop after 1" % (b["choices"][0]["finish_reason"], b["usage"]["completion_tokens"]))
b = body("eos-ignored")
if b and (b["choices"][0]["finish_reason"] != "length" or b["usage"]["completion_tokens"] != 10):
    fails.append("eos-ignored: %s after %d tokens, want length after 10" % (b["choices"][0]["finish_reason"], b["usage"]["completion_tokens"]))
a, g = body("topk1"), body("greedy")
if a and g and a["choices"][0]["message"]["content"] != g["choices"][0]["message"]["content"]:
    fails.append("top_k 1 differs from greedy: %r vs %r" % (a["choices"][0]["message"]["content"], g["choices"][0]["message"]["content"]))
a, b2 = body("pen-a"), body("pen-b")
if a and b2 and a["choices"][0]["message"]["content"] != b2["choices"][0]["message"]["content"]:
    fails.append("penalties: the same line gave two answers")
r0, r1 = out("rep0"), out("rep")
if r0 and r1:
    if r0["token_ids"] != [300] * 12:
        fails.append("rep0: the biased prompt token should repeat: %r" % r0["token_ids"])
    if 300 in r1["token_ids"]:
        fails.append("rep: repetition_penalty 2 should stop the repeat: %r" % r1["token_ids"])
def err(k):
    return norm_err(recs[k]) or {}
for k, code, where in (("bad-top", "invalid_field", "body.top_logprobs"), ("bad-minp", "invalid_field", "body.min_p"),
                       ("bad-n", "invalid_field", "body.n"), ("bad-vocab", "invalid_field", "logit_bias")):
    e = err(k)
    if e.get("code") != code or e.get("where") != where:
        fails.append("%s: error %r, want %s at %s" % (k, e, code, where))
for f in fails:
    print("FAIL:", f)
sys.exit(1 if fails else 0)
EOF2
$py "$work/check.py" "$work/out1.jsonl" "$work/g.out" && ok "logprobs shape and values, logit_bias, penalties, errors" \
    || bad "checks (see above)"

"$bin" batch "$work/in.jsonl" -o "$work/out3.jsonl" "${M[@]}" --concurrency 3 2>"$work/err3"; rc=$?
[ "$rc" -eq 3 ] && ok "batch --concurrency 3: exit 3 (its failing lines)" || bad "--concurrency 3: exit $rc: $(tail -5 "$work/err3")"
$py - "$work/out1.jsonl" "$work/out3.jsonl" <<'EOF2' && ok "--concurrency 3 equals serial (logprobs included)" || bad "--concurrency 3 differs"
import json, sys
def load(p):
    d = {}
    for l in open(p, encoding="utf-8"):
        r = json.loads(l)
        k = r.get("custom_id") or r.get("id")
        if "custom_id" in r:
            b = r["response"]["body"] if r["response"] else None
            d[k] = (b["choices"][0], b["usage"]) if b and "choices" in b else (r["error"] or b)
        else:
            d[k] = r.get("output") or r["error"]
    return d
a, b = load(sys.argv[1]), load(sys.argv[2])
diff = [k for k in a if a[k] != b.get(k)]
for k in diff[:5]:
    print("differs:", k)
sys.exit(1 if diff or set(a) != set(b) else 0)
EOF2
exit $fail
