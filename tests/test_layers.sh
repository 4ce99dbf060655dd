#!/usr/bin/env bash
# test_layers.sh - the rooms keep their arrows (scripts/check_layers.py): on this tree
# and this build (the directory of V4_BIN: its objects' symbols), no include from a
# lower room into a higher one, no header circle, no circle between object files.
# Then the checker itself is shown to catch each kind of violation, on small made-up
# trees: a lower room including a higher one, an include that resolves nowhere, a
# header circle, two object files calling each other, an object using a symbol of a
# higher room, and a source file outside every room.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CHECK="$ROOT/scripts/check_layers.py"
: "${V4_BIN:?V4_BIN (the v4fleet binary of the build under test) is not set}"
BUILD="$(dirname "$V4_BIN")"
TMP="$(mktemp -d "${V4_TMP:-/tmp}/layers.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# 1. The real tree and build.
if out="$(python3 "$CHECK" --root "$ROOT" --build "$BUILD" 2>&1)"; then
    echo "$out"
    # the object check really read the libraries (not an empty build)
    n_obj="$(sed -nE 's/.* ([0-9]+) object files.*/\1/p' <<< "$out")"
    [ "${n_obj:-0}" -ge 50 ] || fail "only '${n_obj:-0}' object files read from $BUILD"
else
    echo "$out"
    fail "the tree or the build in $BUILD breaks the layering (see above)"
fi

# expect_fail NAME PATTERN ARGS...: the checker exits 1 and prints PATTERN.
expect_fail() {
    local name="$1" pattern="$2" rc=0
    shift 2
    out="$(python3 "$CHECK" "$@" 2>&1)" || rc=$?
    if [ "$rc" -ne 1 ]; then
        fail "$name: exit status $rc, want 1; output: $out"
    elif ! grep -qF -- "$pattern" <<< "$out"; then
        fail "$name: no '$pattern' in: $out"
    else
        echo "ok: $name caught"
    fi
}
mk() { mkdir -p "$(dirname "$1")"; cat > "$1"; }

# 2. A lower room includes a higher one (kernels -> worker/serve).
T="$TMP/up"
mk "$T/worker/serve/job.h" <<< '#pragma once'
mk "$T/kernels/k.c" <<< '#include "worker/serve/job.h"'
expect_fail "upward include" "room 'kernels' includes worker/serve/job.h" --root "$T"

# 2b. Another folder's internal header (same room: still an error).
T="$TMP/internal"
mk "$T/worker/serve/task_run_internal.h" <<< '#pragma once'
mk "$T/worker/serve/sub/x.c" <<< '#include "worker/serve/task_run_internal.h"'
expect_fail "internal header" "another folder's internal header" --root "$T"

# 3. An include that resolves nowhere.
T="$TMP/lost"
mk "$T/queue/q.c" <<< '#include "nowhere.h"'
expect_fail "unresolved include" 'resolves neither' --root "$T"

# 4. A header circle.
T="$TMP/hcircle"
mk "$T/cache/a.h" <<< '#include "b.h"'
mk "$T/cache/b.h" <<< '#include "a.h"'
expect_fail "header circle" "header circle: cache/a.h -> cache/b.h" --root "$T"

# 5. Two object files that call each other (each includes only its own header).
T="$TMP/ocircle"
mk "$T/queue/a.c" <<< 'int b_fn(void); int a_fn(void) { return b_fn(); }'
mk "$T/queue/b.c" <<< 'int a_fn(void); int b_fn(void) { return 1; } int c_fn(void) { return a_fn(); }'
O="$T/build/CMakeFiles/v4queue.dir/queue"
mkdir -p "$O"
cc -c -o "$O/a.c.o" "$T/queue/a.c"
cc -c -o "$O/b.c.o" "$T/queue/b.c"
expect_fail "object circle" "circle between object files: queue/a.c, queue/b.c" --root "$T" --build "$T/build"

# 6. An object of a lower room uses a symbol defined in a higher room.
T="$TMP/oup"
mk "$T/config/c.c" <<< 'int serve_fn(void); int c_fn(void) { return serve_fn(); }'
mk "$T/worker/serve/s.c" <<< 'int serve_fn(void) { return 2; }'
mkdir -p "$T/build/CMakeFiles/v4config.dir/config" "$T/build/CMakeFiles/v4serve.dir/worker/serve"
cc -c -o "$T/build/CMakeFiles/v4config.dir/config/c.c.o" "$T/config/c.c"
cc -c -o "$T/build/CMakeFiles/v4serve.dir/worker/serve/s.c.o" "$T/worker/serve/s.c"
expect_fail "upward symbol" "config/c.c uses serve_fn from worker/serve/s.c: room 'config' may not use room 'serve'" \
    --root "$T" --build "$T/build"

# 7. A source file outside every room, and a loose file in worker/.
T="$TMP/stray"
mk "$T/misc/x.c" <<< 'int x;'
mk "$T/worker/loose.c" <<< 'int y;'
expect_fail "file outside the rooms" "misc/x.c: source file outside every room" --root "$T"
expect_fail "loose worker file" "worker/loose.c: worker/ holds only main.c" --root "$T"

if [ "$fails" -ne 0 ]; then
    echo "test_layers: $fails failure(s)"
    exit 1
fi
echo "test_layers: all checks passed"
