// gen_tokenizer_cases.mjs - (re)generate tests/data/tokenizer/cases.jsonl with the
// reference tokenizer, Hugging Face `tokenizers` 0.22.2 (the Rust library under
// transformers, vLLM and SGLang; on npm as a native build in @anush008/tokenizers
// 0.6.0).  Developer tool, not run by the build.
//
// Reads the texts of INPUT.jsonl (objects with a "text" field; their ids are ignored),
// appends the texts of EXTRA (one JSON string per line, optional), encodes each with
// TOKENIZER.json without special tokens added (special tokens written in a text are
// still matched whole), and writes {"text", "ids"} lines to stdout: every input line in
// its order, then the extra texts not among them.
//   npm install --prefix /tmp/hf @anush008/tokenizers@0.6.0
//   NODE_PATH=/tmp/hf/node_modules node scripts/gen_tokenizer_cases.mjs \
//     tests/data/tokenizer/tokenizer.json tests/data/tokenizer/cases.jsonl \
//     tests/data/tokenizer/cases_extra.jsonl > /tmp/cases.jsonl
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';

const [tokPath, inPath, extraPath] = process.argv.slice(2);
if (!tokPath || !inPath) {
  console.error('usage: gen_tokenizer_cases.mjs TOKENIZER.json INPUT.jsonl [EXTRA.jsonl]');
  process.exit(2);
}
const require = createRequire(path.join(process.cwd(), 'x.js'));
let Tokenizer;
for (const r of (process.env.NODE_PATH || 'node_modules').split(path.delimiter).filter(Boolean)) {
  try {
    ({ Tokenizer } = require(path.join(r, '@anush008/tokenizers')));
    const cargo = fs.readFileSync(path.join(r, '@anush008/tokenizers/Cargo.toml'), 'utf8');
    const m = cargo.match(/^tokenizers = "([^"]+)"/m);
    if (!m || m[1] !== '0.22.2')
      console.error(`gen_tokenizer_cases.mjs: warning: tokenizers ${m ? m[1] : '?'}, the reference is 0.22.2`);
    break;
  } catch (e) { /* next root */ }
}
if (!Tokenizer) {
  console.error('gen_tokenizer_cases.mjs: @anush008/tokenizers not found (npm install it; NODE_PATH=its node_modules)');
  process.exit(1);
}
const tok = Tokenizer.fromFile(tokPath);
const texts = [];
const seen = new Set();
for (const line of fs.readFileSync(inPath, 'utf8').split('\n'))
  if (line.trim()) {
    const t = JSON.parse(line).text;
    seen.add(t);
    texts.push(t);
  }
if (extraPath)
  for (const line of fs.readFileSync(extraPath, 'utf8').split('\n'))
    if (line.trim()) {
      const t = JSON.parse(line);
      if (typeof t === 'string' && !seen.has(t)) {
        seen.add(t);
        texts.push(t);
      }
    }
for (const text of texts) {
  const e = await tok.encode(text, null, { addSpecialTokens: false });
  process.stdout.write(JSON.stringify({ text, ids: Array.from(e.getIds()) }) + '\n');
}
