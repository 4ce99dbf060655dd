#!/usr/bin/env bash
# compare_tokenizer.sh - v4fleet's tokenizer against Hugging Face `tokenizers` 0.22.2 (the
# reference: scripts/gen_tokenizer_cases.mjs) on texts cut from real files.  Developer
# tool, not run by the build; needs node with @anush008/tokenizers 0.6.0:
#   npm install --prefix /tmp/hf @anush008/tokenizers@0.6.0
#   NODE_PATH=/tmp/hf/node_modules scripts/compare_tokenizer.sh TOKENIZER_DIR OUT_DIR ROOT...
# Writes OUT_DIR/texts.jsonl, hf.jsonl (ids by HF), ours.jsonl (ids by build/v4fleet
# tokenize --jsonl), prints the number of texts, the mismatches (the first 5 shown) and
# both tokenizers' times.  Exit 1 on any mismatch.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TOK="${1:?tokenizer directory}"; OUT="${2:?output directory}"; shift 2
mkdir -p "$OUT"
python3 "$HERE/cut_corpus.py" "$@" > "$OUT/texts.jsonl"
t0=$(date +%s.%N)
node "$HERE/gen_tokenizer_cases.mjs" "$TOK/tokenizer.json" "$OUT/texts.jsonl" > "$OUT/hf.jsonl"
t1=$(date +%s.%N)
"${V4_BIN:-$HERE/../build/v4fleet}" tokenize --tokenizer "$TOK" --jsonl < "$OUT/texts.jsonl" > "$OUT/ours.jsonl"
t2=$(date +%s.%N)
python3 - "$OUT" "$t0" "$t1" "$t2" <<'PY'
import json, sys
out, t0, t1, t2 = sys.argv[1], *map(float, sys.argv[2:])
hf = [json.loads(l) for l in open(out + "/hf.jsonl", encoding="utf-8")]
ours = [json.loads(l) for l in open(out + "/ours.jsonl", encoding="utf-8")]
if len(hf) != len(ours):
    sys.exit("compare_tokenizer.sh: %d HF lines, %d of ours" % (len(hf), len(ours)))
bad = [(h["text"], h["ids"], o) for h, o in zip(hf, ours) if h["ids"] != o]
chars = sum(len(h["text"]) for h in hf)
print("%d texts (%d characters): %d mismatches; HF %.1f s, v4fleet %.1f s (one thread, process start included)"
      % (len(hf), chars, len(bad), t1 - t0, t2 - t1))
for t, a, b in bad[:5]:
    print("  %r: HF %s, v4fleet %s" % (t[:80], a[:20], b[:20]))
sys.exit(1 if bad else 0)
PY
