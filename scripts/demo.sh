#!/usr/bin/env bash
# demo.sh - run the main job on an embedded default: bash scripts/demo.sh
#
# Installs the build dependencies if missing, builds the release binary in build/,
# writes a synthetic tiny checkpoint to models/tiny (once; kept if config.json is
# there), and generates 16 greedy tokens from the prompt ids in scripts/demo_prompt.json.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$V4_ROOT"

v4_section "dependencies"
v4_ensure_packages

v4_section "build (release, build/)"
if [ -f build/CMakeCache.txt ]; then
    cmake --build build -j "$(v4_jobs)"
else
    v4_build build -DCMAKE_BUILD_TYPE=Release
fi

v4_section "model (models/tiny)"
if [ -f models/tiny/config.json ] && [ -f models/tiny/tokenizer.json ]; then
    echo "models/tiny exists; not regenerating"
else
    build/v4fleet mkmodel --out models/tiny --preset tiny --seed 1 --force
fi

v4_section "generate (token ids in, ids out)"
build/v4fleet generate --model models/tiny --prompt-ids scripts/demo_prompt.json \
    --max-tokens 16 --greedy

v4_section "generate (chat prompt in, streamed text out; random weights, so the text is noise)"
build/v4fleet generate --model models/tiny --prompt "Summarize: the fleet serves DeepSeek-V4 from queues." \
    --max-tokens 32 --temperature 0.8 --top-p 0.95 --seed 1
