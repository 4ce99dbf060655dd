#!/usr/bin/env bash
# test_structured_batch.sh - output constraints end to end through `v4fleet batch` on the
# tiny synthetic model (random weights), docs/structured-outputs.md:
#  - OpenAI lines and task packets with response_format json_schema (an object with an
#    enum, a bounded integer, a string of at most 8 characters, all required), json_object,
#    guided_json, structured_outputs (json as a string, disable_any_whitespace),
#    guided_regex and guided_choice, at temperature 1 with several seeds (plus greedy and
#    thinking-mode lines): every answer that ends with finish_reason "stop" validates
#    against its schema (python3-jsonschema, Draft 2020-12), fullmatches its regex
#    (python re) or is one of its choices; at least half of the constrained lines end with
#    "stop" (the bounded schemas always can), so the test cannot pass vacuously; a stop
#    string still ends a constrained answer (a choice cut at its space);
#  - a schema that does not compile (uniqueItems), a regex that does not (lookahead):
#    that line alone fails with invalid_field naming the field, its message the keyword
#    and the JSON pointer; tools / stream: true: unsupported_field naming the field; a
#    Lark guided_grammar: invalid_field (only GBNF is read); every other line succeeds;
#  - guided_grammar and structured_outputs.grammar (GBNF): the answers fullmatch the
#    grammar's language written as a Python regex;
#  - --concurrency 3 (the continuous executor, a matcher per slot) gives the same answers
#    (text, token ids, finish reason) as the serial run.
set -u
bin=${V4_BIN:?V4_BIN not set}
py=/usr/bin/python3
work=$(mktemp -d "${V4_TMP:-/tmp}/structured.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fail=1; }

$py -c 'import jsonschema' 2>/dev/null || { echo "FAIL: python3-jsonschema is not installed (V4_PACKAGES)"; exit 1; }
"$bin" mkmodel --out "$work/m" --preset tiny --seed 5 --no-sync >/dev/null 2>&1 || { echo "mkmodel failed"; exit 1; }
M=(--model "$work/m" --model-name tiny)

# ---- the input: constrained lines x seeds, failing lines, one free line -------------
$py - "$work/in.jsonl" "$work/expect.json" <<'EOF'
import json, sys
out, exp_path = sys.argv[1], sys.argv[2]
PERSON = {"type": "object",
          "properties": {"kind": {"enum": ["cat", "dog", "bird"]},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120},
                         "name": {"type": "string", "maxLength": 8}},
          "required": ["kind", "age", "name"], "additionalProperties": False}
ORDER = {"type": "object",
         "properties": {"id": {"type": "integer", "minimum": -5, "maximum": 5},
                        "ok": {"type": "boolean"},
                        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 1, "maxItems": 3},
                        "note": {"type": ["string", "null"], "maxLength": 4}},
         "required": ["id", "ok", "tags"], "additionalProperties": False}
REGEX = r"[a-z]{1,6}@[a-z]{2,5}\.(com|org)"
CHOICES = ["yes", "no", "maybe later"]
GBNF = 'root ::= answer (", " word){0,2}\nanswer ::= "yes" | "no"\nword ::= [a-z]{1,5}\n'
GBNF_RE = r"(yes|no)(, [a-z]{1,5}){0,2}"
lines, expect = [], {}

def openai(cid, body):
    body = dict({"model": "tiny", "messages": [{"role": "user", "content": "Answer for %s." % cid}]}, **body)
    lines.append({"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": body})

def task(tid, fields):
    lines.append(dict({"id": tid, "prompt": "Answer for %s." % tid}, **fields))

for seed in (1, 2, 3, 4):
    s = {"temperature": 1, "seed": seed}
    openai("schema-%d" % seed, dict(s, max_tokens=400, response_format={
        "type": "json_schema", "json_schema": {"name": "person", "strict": True, "schema": PERSON}}))
    expect["schema-%d" % seed] = ["schema", PERSON]
    openai("object-%d" % seed, dict(s, max_completion_tokens=160, response_format={"type": "json_object"}))
    expect["object-%d" % seed] = ["object", None]
    task("gjson-%d" % seed, dict(s, max_tokens=400, guided_json=ORDER))
    expect["gjson-%d" % seed] = ["schema", ORDER]
    task("sojson-%d" % seed, dict(s, max_tokens=400, structured_outputs={"json": json.dumps(PERSON),
                                                                        "disable_any_whitespace": True}))
    expect["sojson-%d" % seed] = ["compact", PERSON]
    task("regex-%d" % seed, dict(s, max_tokens=60, guided_regex=REGEX))
    expect["regex-%d" % seed] = ["regex", REGEX]
    openai("choice-%d" % seed, dict(s, max_tokens=20, guided_choice=CHOICES))
    expect["choice-%d" % seed] = ["choice", CHOICES]
    if seed <= 2:
        task("gbnf-%d" % seed, dict(s, max_tokens=40, guided_grammar=GBNF))
        expect["gbnf-%d" % seed] = ["regex", GBNF_RE]
        task("sogbnf-%d" % seed, dict(s, max_tokens=40, structured_outputs={"grammar": GBNF}))
        expect["sogbnf-%d" % seed] = ["regex", GBNF_RE]
task("greedy-schema", {"temperature": 0, "max_tokens": 400, "response_format": {
    "type": "json_schema", "json_schema": {"name": "p", "schema": PERSON}}})
expect["greedy-schema"] = ["schema", PERSON]
task("stop-choice", {"temperature": 1, "seed": 11, "max_tokens": 20, "stop": [" "],
                     "guided_choice": ["yes please", "no thanks", "maybe later"]})
expect["stop-choice"] = ["stop-choice", ["yes", "no", "maybe"]]
task("think-choice", {"temperature": 1, "seed": 9, "max_tokens": 120, "thinking": True, "guided_choice": CHOICES})
expect["think-choice"] = ["think-choice", CHOICES]
# lines that fail alone
BADSCHEMA = {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}}
openai("bad-schema", {"max_tokens": 50, "response_format": {"type": "json_schema",
                                                            "json_schema": {"name": "b", "schema": BADSCHEMA}}})
task("bad-regex", {"max_tokens": 20, "guided_regex": "(?=a)b"})
openai("tools", {"max_tokens": 20, "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]})
task("stream", {"max_tokens": 20, "stream": True})
task("grammar", {"max_tokens": 20, "guided_grammar": "start: \"a\""})
# a free line, and fields that change nothing
openai("free", {"max_tokens": 8, "temperature": 0, "user": "u1", "store": False, "stream": False,
                "response_format": {"type": "text"}, "metadata": {"k": "v"}})
with open(out, "w") as f:
    for l in lines:
        f.write(json.dumps(l) + "\n")
json.dump(expect, open(exp_path, "w"))
EOF

"$bin" batch "$work/in.jsonl" -o "$work/out1.jsonl" "${M[@]}" 2>"$work/err1"; rc=$?
[ "$rc" -eq 3 ] && ok "batch: exit 3 (its failing lines)" || bad "batch: exit $rc: $(tail -5 "$work/err1")"
if grep -q "ignored" "$work/err1"; then bad "a field was ignored: $(grep ignored "$work/err1")"; else ok "no field ignored"; fi

cat > "$work/check.py" <<'EOF'
import json, re, sys
import jsonschema
out, exp = sys.argv[1], json.load(open(sys.argv[2]))
recs = {}
for l in open(out, encoding="utf-8"):
    r = json.loads(l)
    key = r.get("custom_id") or r.get("id")
    assert key not in recs, "two lines for %s" % key
    recs[key] = r
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
def answer(r):
    if "custom_id" in r:
        if norm_err(r):
            return None, None, norm_err(r)
        c = r["response"]["body"]["choices"][0]
        return c["message"]["content"], c["finish_reason"], None
    if r["status"] != "succeeded":
        return None, None, r["error"]
    return r["output"]["text"], r["output"]["finish_reason"], None
fails, stops, n = [], 0, 0
for key, (kind, arg) in sorted(exp.items()):
    text, fin, err = answer(recs[key])
    if err:
        fails.append("%s failed: %s" % (key, err)); continue
    n += 1
    if fin != "stop":
        assert fin == "length", (key, fin)
        continue
    stops += 1
    try:
        if kind in ("schema", "compact"):
            jsonschema.Draft202012Validator(arg).validate(json.loads(text))
            if kind == "compact" and re.search(r"[ \t\r\n]", re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)):
                fails.append("%s: whitespace outside strings with disable_any_whitespace: %r" % (key, text))
        elif kind == "object":
            if not isinstance(json.loads(text), dict):
                fails.append("%s: not an object: %r" % (key, text))
        elif kind == "regex":
            if not re.fullmatch(arg, text):
                fails.append("%s: %r does not fullmatch %s" % (key, text, arg))
        elif kind == "choice":
            if text not in arg:
                fails.append("%s: %r is not a choice" % (key, text))
        elif kind == "stop-choice":
            if text not in arg:
                fails.append("%s: the stop string did not cut the choice: %r" % (key, text))
        elif kind == "think-choice":   # the reasoning comes apart (reasoning_content), text is the answer
            rc = recs[key]["output"].get("reasoning_content")
            if text not in arg or rc is None or "</think>" in rc or "</think>" in text:
                fails.append("%s: answer %r (a choice?) / reasoning_content %r" % (key, text, rc))
    except (ValueError, jsonschema.ValidationError) as e:
        fails.append("%s: %r: %s" % (key, text, str(e).splitlines()[0]))
print("constrained lines: %d, ended with stop: %d" % (n, stops))
if stops * 2 < n:
    fails.append("only %d of %d constrained lines ended with stop" % (stops, n))
for k in ("stop-choice", "greedy-schema", "schema-1", "schema-2", "schema-3", "schema-4", "regex-1", "choice-1"):
    if answer(recs[k])[1] != "stop":
        fails.append("%s: a bounded constraint did not end with stop" % k)
def error(key):
    return norm_err(recs[key])
e = error("bad-schema")
if not (e and e["code"] == "invalid_field" and e["where"] == "response_format" and "uniqueItems" in e["message"]
        and "/properties/tags/uniqueItems" in e["message"]):
    fails.append("bad-schema: %s" % e)
e = error("bad-regex")
if not (e and e["code"] == "invalid_field" and e["where"] == "guided_regex" and "offset" in e["message"]):
    fails.append("bad-regex: %s" % e)
e = error("grammar")
if not (e and e["code"] == "invalid_field" and e["where"] == "guided_grammar" and "only GBNF" in e["message"]):
    fails.append("grammar (Lark): %s" % e)
for key, where in (("tools", "body.tools"), ("stream", "stream")):
    e = error(key)
    if not (e and e["code"] == "unsupported_field" and e["where"] == where):
        fails.append("%s: %s" % (key, e))
if answer(recs["free"])[2] is not None:
    fails.append("free line failed: %s" % (answer(recs["free"])[2],))
for f in fails:
    print("FAIL:", f)
sys.exit(1 if fails else 0)
EOF
$py "$work/check.py" "$work/out1.jsonl" "$work/expect.json" && ok "answers validate; errors name the field" \
    || bad "answers (see above)"

# ---- the continuous executor: the same answers ----------------------------------------
"$bin" batch "$work/in.jsonl" -o "$work/out3.jsonl" "${M[@]}" --concurrency 3 2>"$work/err3"; rc=$?
[ "$rc" -eq 3 ] && ok "batch --concurrency 3: exit 3 (its failing lines)" || bad "--concurrency 3: exit $rc: $(tail -5 "$work/err3")"
$py - "$work/out1.jsonl" "$work/out3.jsonl" <<'EOF' && ok "--concurrency 3 equals serial" || bad "--concurrency 3 differs"
import json, sys
def load(p):
    d = {}
    for l in open(p, encoding="utf-8"):
        r = json.loads(l)
        key = r.get("custom_id") or r.get("id")
        if "custom_id" in r:
            b = r["response"]["body"] if r["response"] else None
            d[key] = (b["choices"][0]["message"]["content"], b["choices"][0]["finish_reason"],
                      b["usage"]["completion_tokens"]) if b and "choices" in b else (r["error"] or b)
        else:
            d[key] = (r["output"]["text"], r["output"]["finish_reason"], r["output"]["token_ids"]) \
                if r["status"] == "succeeded" else r["error"]
    return d
a, b = load(sys.argv[1]), load(sys.argv[2])
bad = [k for k in a if a[k] != b.get(k)]
for k in bad[:5]:
    print("differs:", k, a[k], b.get(k))
sys.exit(1 if bad or set(a) != set(b) else 0)
EOF
exit $fail
