#!/usr/bin/env bash
# test_stats.sh - CLI contract of `v4fleet stats` against a real Redis.
#
# Writes utilization hashes with redis-cli under a prefix unique to this run (with
# glob metacharacters in it, next to a sibling prefix that an unescaped SCAN MATCH
# would also hit), then checks the exact figures of the text and --json reports
# (routed tokens, top experts and tie order, std, CV, max/mean, idle, fleet line),
# --bucket, --hours summing the recent buckets only, --png (PNG signature and IHDR
# width/height), a layer without data, SELECT of a non-zero db, $V4_REDIS_URL, and
# the errors: Redis down, unknown model, several models, no key, wrong password
# (never printed), bad options (exit 2 + usage).  Keys are deleted at exit.
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib/brokers.sh
source "$here/lib/brokers.sh"
bin=${V4_BIN:?V4_BIN not set}
PY=/usr/bin/python3
fail=0

trap 'brokers_release' EXIT
brokers_ensure || { echo "FAIL: no Redis for the stats test" >&2; exit 1; }
url=${V4_TEST_REDIS_URL:?V4_TEST_REDIS_URL not set}
base=$(sed -E 's#/[0-9]+$##' <<<"$url")          # without /db
hostport=$(sed -E 's#^redis://([^@/]*@)?([^/]*).*#\2#' <<<"$url")

tmp=$(mktemp -d "${V4_TMP:-/tmp}/test_stats.XXXXXX") || exit 1
run_id="st$$r$RANDOM"
P="${run_id}[x]"        # our prefix: '[x]' would be a glob class if not escaped
SIB="${run_id}x"        # sibling prefix that '[x]' matches unescaped
keys=()
cleanup() {
    local k
    for k in "${keys[@]}"; do
        redis-cli -u "$url" DEL "$k" > /dev/null 2>&1
        redis-cli -u "$base/5" DEL "$k" > /dev/null 2>&1
    done
    rm -rf "$tmp"
    brokers_release
}
trap cleanup EXIT

check() {  # check DESCRIPTION COMMAND...
    local what=$1; shift
    if ! "$@"; then echo "FAIL: $what"; fail=1; fi
}
has() { grep -qE -- "$2" <<<"$1"; }
hset() {  # hset URL KEY FIELD VALUE...
    local u=$1 k=$2; shift 2
    keys+=("$k")
    redis-cli -u "$u" HSET "$k" "$@" > /dev/null || { echo "FAIL: redis-cli HSET $k"; fail=1; }
}
jget() {  # jget JSON PYTHON-EXPR (on d)
    "$PY" -c 'import json,sys; d=json.loads(sys.argv[1]); print(eval(sys.argv[2]))' "$1" "$2"
}

# ---------------------------------------------------------------- data
# L=3, E=8, K=2, 100 routed tokens at every layer (sum of counts = 200 per layer):
#   layer 0: 10 30 0 40 20 0 50 50  mean 25, var 3000/8=375 -> std 19.36, cv 0.775, max/mean 2
#   layer 1: 25 x 8                 std 0, cv 0, max/mean 1
#   layer 2: e2 = e5 = 100          var 15000/8=1875 -> std 43.30, cv 1.732, max/mean 4
# fleet mean CV = (0.7746 + 0 + 1.7321) / 3 = 0.836
hset "$url" "$P:util:tiny:total" _shape 3,8,2 _tasks 4 _tokens 100 _hits 300 _misses 80 _prefetched 20 _kib_loaded 2048 \
    0:0 10 0:1 30 0:3 40 0:4 20 0:6 50 0:7 50 \
    1:0 25 1:1 25 1:2 25 1:3 25 1:4 25 1:5 25 1:6 25 1:7 25 \
    2:2 100 2:5 100
hset "$url" "$SIB:util:other:total" _shape 1,2,1 _tasks 1 _tokens 1 0:0 1

# ---------------------------------------------------------------- text report
out=$("$bin" stats --redis "$url" --prefix "$P" 2>&1); rc=$?
echo "$out"
check "exit 0 (got $rc)" test "$rc" -eq 0
check "model found by SCAN (sibling prefix not matched)" has "$out" "^model: tiny +prefix: $run_id\[x\]"
check "source total" has "$out" "^source: total \($run_id\[x\]:util:tiny:total\)"
check "header" has "$out" "^tasks: 4 +tokens: 100 +shape: 3 layers, 8 routed experts, top-2$"
check "layer 0 row" has "$out" "^ +0 +100 +19\.36 +0\.775 +2\.00 +2 +6\(25\.0%\) 7\(25\.0%\) 3\(20\.0%\) 1\(15\.0%\) 4\(10\.0%\)$"
check "layer 1 row" has "$out" "^ +1 +100 +0\.00 +0\.000 +1\.00 +0 +0\(12\.5%\) 1\(12\.5%\) 2\(12\.5%\) 3\(12\.5%\) 4\(12\.5%\)$"
check "layer 2 row" has "$out" "^ +2 +100 +43\.30 +1\.732 +4\.00 +6 +2\(50\.0%\) 5\(50\.0%\)$"
check "expert cache line" has "$out" "^expert cache: 300 hits, 80 misses, 20 prefetched \(hit rate 75\.0%\), 2\.0 MiB loaded$"
check "fleet line" has "$out" "^fleet: mean CV 0\.836 over 3/3 layers with data; max CV 1\.732 \(layer 2\); 8 idle of 24 experts$"

out=$("$bin" stats --redis "$url" --prefix "$P" --model tiny --top 1 2>&1); rc=$?
check "--top 1 exit 0 (got $rc)" test "$rc" -eq 0
check "--top 1 lists one expert" has "$out" "^ +0 +100 .* 6\(25\.0%\)$"

# ---------------------------------------------------------------- --counts (cachesim --popularity)
out=$("$bin" stats --redis "$url" --prefix "$P" --counts "$tmp/counts.txt" 2>&1); rc=$?
check "--counts exit 0 (got $rc)" test "$rc" -eq 0
check "--counts: header names the model and shape" has "$(head -1 "$tmp/counts.txt")" "^# v4fleet stats --counts: model tiny, 3 layers x 8 experts, top-2, 100 tokens, all-time total$"
check "--counts: one line per (layer, expert)" test "$(grep -cvE '^#' "$tmp/counts.txt")" -eq 24
check "--counts: layer 0 as stored, idle experts 0" test "$(awk '$1 == 0 { printf "%s ", $3 }' "$tmp/counts.txt")" = "10 30 0 40 20 0 50 50 "
check "--counts: layer 2" test "$(awk '$1 == 2 && $3 > 0 { printf "%s:%s ", $2, $3 }' "$tmp/counts.txt")" = "2:100 5:100 "
out=$("$bin" stats --redis "$url" --prefix "$P" --counts "$tmp/nodir/c.txt" 2>&1); rc=$?
check "--counts into a missing directory exits 1 (got $rc)" test "$rc" -eq 1
check "--counts error message" has "$out" "^v4fleet stats: $tmp/nodir/c\.txt: cannot create: No such file"

# ---------------------------------------------------------------- JSON
js=$("$bin" stats --redis "$url" --prefix "$P" --json --top 3); rc=$?
check "--json exit 0 (got $rc)" test "$rc" -eq 0
check "--json is one JSON object" "$PY" -c 'import json,sys; d=json.loads(sys.argv[1]); assert isinstance(d, dict)' "$js"
check "json model/source/shape" test "$(jget "$js" '(d["model"], d["source"]["kind"], d["tasks"], d["tokens"], d["shape"])')" \
    = "('tiny', 'total', 4, 100, {'layers': 3, 'experts': 8, 'top_k': 2})"
check "json routed tokens" test "$(jget "$js" '[l["routed_tokens"] for l in d["layers"]]')" = "[100.0, 100.0, 100.0]"
check "json top experts layer 0" test "$(jget "$js" '[(t["expert"], t["count"], t["share"]) for t in d["layers"][0]["top"]]')" \
    = "[(6, 50, 0.25), (7, 50, 0.25), (3, 40, 0.2)]"
check "json std" test "$(jget "$js" '[round(l["std"], 6) for l in d["layers"]]')" = "[19.364917, 0.0, 43.30127]"
check "json cv" test "$(jget "$js" '[round(l["cv"], 6) for l in d["layers"]]')" = "[0.774597, 0.0, 1.732051]"
check "json max/mean, idle" test "$(jget "$js" '[(l["max_over_mean"], l["idle"]) for l in d["layers"]]')" = "[(2.0, 2), (1.0, 0), (4.0, 6)]"
check "json expert cache" test "$(jget "$js" 'd["expert_cache"]')" = "{'hits': 300, 'misses': 80, 'prefetched': 20, 'kib_loaded': 2048}"
check "json fleet" test "$(jget "$js" '(round(d["fleet"]["mean_cv"], 6), d["fleet"]["max_cv_layer"], d["fleet"]["idle_experts"])')" \
    = "(0.835549, 2, 8)"

# ---------------------------------------------------------------- buckets
cur=$(date -u +%Y%m%d%H00)
prev=$(date -u -d '1 hour ago' +%Y%m%d%H00)
old=$(date -u -d '10 hours ago' +%Y%m%d%H00)
hset "$url" "$P:util:tiny:b:$cur" _shape 3,8,2 _tasks 2 _tokens 30 0:0 40 0:1 20 1:0 30 1:7 30 2:4 60
hset "$url" "$P:util:tiny:b:$prev" _shape 3,8,2 _tasks 1 _tokens 10 0:1 20 1:0 10 1:7 10 2:4 20
hset "$url" "$P:util:tiny:b:$old" _shape 3,8,2 _tasks 100 _tokens 1000 0:5 2000 1:5 2000 2:5 2000
keys+=("$P:util:tiny:b:notatime")
redis-cli -u "$url" SET "$P:util:tiny:b:notatime" x > /dev/null   # a string: must be skipped by name

# cur + prev: layer 0 e0=40 e1=40 (mean 10, std 17.32, cv 1.732, max/mean 4), layer 2 e4=80
# (std 26.46, cv 2.646, max/mean 8); the old bucket (10 h) is outside 3 hours.
out=$("$bin" stats --redis "$url" --prefix "$P" --hours 3 2>&1); rc=$?
echo "$out"
check "--hours 3 exit 0 (got $rc)" test "$rc" -eq 0
check "--hours source line" has "$out" "^source: 2 buckets started in the last 3 hours \($prev \.\. $cur UTC\)$"
check "--hours sums tasks/tokens of the recent buckets only" has "$out" "^tasks: 3 +tokens: 40 "
check "--hours layer 0" has "$out" "^ +0 +40 +17\.32 +1\.732 +4\.00 +6 +0\(50\.0%\) 1\(50\.0%\)$"
check "--hours layer 1" has "$out" "^ +1 +40 +17\.32 +1\.732 +4\.00 +6 +0\(50\.0%\) 7\(50\.0%\)$"
check "--hours layer 2" has "$out" "^ +2 +40 +26\.46 +2\.646 +8\.00 +7 +4\(100\.0%\)$"
js=$("$bin" stats --redis "$url" --prefix "$P" --hours 3 --json); rc=$?
check "--hours --json exit 0 (got $rc)" test "$rc" -eq 0
check "--hours json source" test "$(jget "$js" '(d["source"]["kind"], d["source"]["count"], d["source"]["hours"], d["tasks"])')" \
    = "('buckets', 2, 3, 3)"
check "--hours json std/cv layer 2" test "$(jget "$js" '(round(d["layers"][2]["std"], 6), round(d["layers"][2]["cv"], 6))')" \
    = "(26.457513, 2.645751)"

out=$("$bin" stats --redis "$url" --prefix "$P" --hours 1 2>&1); rc=$?
if [ "$(date -u +%Y%m%d%H00)" = "$cur" ]; then   # skip the exact check across an hour boundary
    check "--hours 1: the current bucket only (rc $rc)" has "$out" "^tasks: 2 +tokens: 30 "
fi
out=$("$bin" stats --redis "$url" --prefix "$P" --hours 12 2>&1); rc=$?
check "--hours 12 includes the old bucket (rc $rc)" has "$out" "^tasks: 103 +tokens: 1040 "

out=$("$bin" stats --redis "$url" --prefix "$P" --bucket "$prev" 2>&1); rc=$?
check "--bucket exit 0 (got $rc)" test "$rc" -eq 0
check "--bucket source" has "$out" "^source: bucket $prev UTC"
check "--bucket figures" has "$out" "^tasks: 1 +tokens: 10 "
check "--bucket layer 0" has "$out" "^ +0 +10 +6\.61 +2\.646 +8\.00 +7 +1\(100\.0%\)$"

# ---------------------------------------------------------------- PNG
out=$("$bin" stats --redis "$url" --prefix "$P" --png "$tmp/util.png" 2>&1); rc=$?
check "--png exit 0 (got $rc)" test "$rc" -eq 0
check "--png reported" has "$out" "^heatmap: $tmp/util\.png \(256 x 96 px"
check "no .tmp left" test ! -e "$tmp/util.png.tmp"
ihdr=$("$PY" - "$tmp/util.png" <<'PY'
import struct, sys, zlib
b = open(sys.argv[1], "rb").read()
assert b[:8] == b"\x89PNG\r\n\x1a\n", "signature"
n, typ = struct.unpack(">I4s", b[8:16])
assert typ == b"IHDR" and n == 13, "IHDR first"
assert struct.unpack(">I", b[29:33])[0] == zlib.crc32(b[12:29]), "IHDR CRC"
w, h, depth, color = struct.unpack(">IIBB", b[16:26])
assert b.endswith(b"IEND\xaeB`\x82"), "IEND last"
print(w, h, depth, color)
PY
)
check "PNG IHDR: 256 x 96 (8 experts x 32 px, 3 layers x 32 px), 8-bit RGB (got '$ihdr')" test "$ihdr" = "256 96 8 2"
js=$("$bin" stats --redis "$url" --prefix "$P" --json --png "$tmp/util2.png"); rc=$?
check "--json --png heatmap entry (rc $rc)" test "$(jget "$js" '(d["heatmap"]["width"], d["heatmap"]["height"])')" = "(256, 96)"
out=$("$bin" stats --redis "$url" --prefix "$P" --png "$tmp/nodir/x.png" 2>&1); rc=$?
check "--png into a missing directory exits 1 (got $rc)" test "$rc" -eq 1
check "--png error message" has "$out" "^v4fleet stats: $tmp/nodir/x\.png\.tmp: cannot create: No such file"

# ---------------------------------------------------------------- a layer without data, db 5, env URL
hset "$base/5" "$P:util:sparse:total" _shape 2,4,1 _tasks 1 _tokens 6 0:0 3 0:2 3
out=$(V4_REDIS_URL="$base/5" "$bin" stats --prefix "$P" 2>&1); rc=$?
echo "$out"
check "db 5 via \$V4_REDIS_URL exit 0 (got $rc)" test "$rc" -eq 0
check "db 5 model" has "$out" "^model: sparse "
check "layer with data" has "$out" "^ +0 +6 +1\.50 +1\.000 +2\.00 +2 +0\(50\.0%\) 2\(50\.0%\)$"
check "layer without data" has "$out" "^ +1 +0 +0\.00 +- +- +4 +-$"
check "fleet over 1/2 layers" has "$out" "^fleet: mean CV 1\.000 over 1/2 layers with data"
js=$("$bin" stats --redis "$base/5" --prefix "$P" --json)
check "json null cv for a layer without data" test "$(jget "$js" '(d["layers"][1]["cv"], d["layers"][1]["top"])')" = "(None, [])"
out=$("$bin" stats --redis "$base/0" --prefix "$P" --model sparse 2>&1); rc=$?
check "db 0 has no 'sparse' (rc $rc)" has "$out" "^v4fleet stats: $run_id\[x\]:util:sparse:total: no data"

# ---------------------------------------------------------------- errors (exit 1, one line)
expect_error() {  # expect_error DESCRIPTION REGEX ARGS...
    local what=$1 re=$2; shift 2
    local err rc
    err=$("$bin" stats "$@" 2>&1 >/dev/null); rc=$?
    echo "  $what -> $err"
    check "$what exits 1 (got $rc)" test "$rc" -eq 1
    check "$what prints one line" test "$(printf '%s\n' "$err" | wc -l)" -eq 1
    check "$what: '$err' matches '$re'" has "$err" "^v4fleet stats: $re"
}
down=$(_brokers_free_port)
expect_error "Redis down" "redis://127\.0\.0\.1:$down/0: cannot connect to 127\.0\.0\.1:$down: Connection refused" \
    --redis "redis://127.0.0.1:$down/0"
# a server that accepts and never answers: the 2 s command timeout must fire (on the
# handshake PING of the shared connect, telemetry/redis_conn.c)
"$PY" -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(4)
open(sys.argv[1] + ".new", "w").write(str(s.getsockname()[1]))
import os; os.rename(sys.argv[1] + ".new", sys.argv[1]); time.sleep(60)' "$tmp/hang.port" &
hang_pid=$!
for _ in $(seq 50); do [ -s "$tmp/hang.port" ] && break; sleep 0.1; done
t0=$(date +%s)
expect_error "Redis not answering" "redis://127\.0\.0\.1:$(cat "$tmp/hang.port")/0: PING failed: no answer within 2000 ms" \
    --redis "redis://127.0.0.1:$(cat "$tmp/hang.port")/0"
check "timed out within 2-5 s" test $(( $(date +%s) - t0 )) -le 5
kill "$hang_pid" 2> /dev/null
wait "$hang_pid" 2> /dev/null
expect_error "unknown model" "$run_id\[x\]:util:nope:total: no data: the key does not exist" \
    --redis "$url" --prefix "$P" --model nope
expect_error "no key under the prefix" "${run_id}none:util:\*:total: no utilization data" \
    --redis "$url" --prefix "${run_id}none"
hset "$url" "$SIB:util:second:total" _shape 1,2,1 _tasks 1 _tokens 1 0:1 1
expect_error "several models" "$SIB:util:\*:total: 2 models found \(other, second\); choose one with --model" \
    --redis "$url" --prefix "$SIB"
expect_error "--hours without recent buckets" "$SIB:util:other:b:\*: no data: none of the 0 buckets" \
    --redis "$url" --prefix "$SIB" --model other --hours 2
hset "$url" "$SIB:util:other:b:$cur" _shape 1,2,1 _tasks 1 _tokens 1 0:1 1
hset "$url" "$SIB:util:other:b:$prev" _shape 1,3,1 _tasks 1 _tokens 1 0:1 1
expect_error "buckets of different shapes" "$SIB:util:other:b:[0-9]{12}: _shape 1,[23],1 differs from" \
    --redis "$url" --prefix "$SIB" --model other --hours 3
hset "$url" "$SIB:util:bad:total" _shape 1,2,1 0:7 1
expect_error "expert outside the shape" "$SIB:util:bad:total: field 0:7: outside the shape" \
    --redis "$url" --prefix "$SIB" --model bad

# wrong password: the server has none (or another one) -> AUTH fails; never print it
for auth in ":s3cr3tPW" "someuser:s3cr3tPW"; do
    err=$("$bin" stats --redis "redis://$auth@$hostport/0" --prefix "$P" 2>&1 >/dev/null); rc=$?
    echo "  AUTH $auth -> $err"
    check "bad AUTH exits 1 (got $rc)" test "$rc" -eq 1
    check "bad AUTH message" has "$err" "^v4fleet stats: redis://(someuser)?:\*\*\*@$hostport/0: AUTH refused: "
    check "password never printed" test "${err/s3cr3tPW/}" = "$err"
done
err=$("$bin" stats --redis "redis://s3cr3tPW@$hostport/0" 2>&1); rc=$?
check "user info without ':' refused (rc $rc)" test "$rc" -eq 1
check "... without printing it" test "${err/s3cr3tPW/}" = "$err"

# ---------------------------------------------------------------- usage (exit 2)
expect_usage() {  # expect_usage DESCRIPTION ARGS...
    local what=$1; shift
    local err rc
    err=$("$bin" stats "$@" 2>&1 >/dev/null); rc=$?
    check "$what exits 2 (got $rc)" test "$rc" -eq 2
    check "$what prints usage on stderr" has "$err" "^usage: v4fleet stats"
}
expect_usage "unknown option" --bogus
expect_usage "missing value" --redis
expect_usage "--bucket with --hours" --bucket "$cur" --hours 2
expect_usage "bad --bucket" --bucket 202613011200
expect_usage "bad --hours" --hours 0
expect_usage "bad --top" --top -1
out=$("$bin" stats --help); rc=$?
check "--help exits 0 (got $rc)" test "$rc" -eq 0
check "--help lists the options" has "$out" "--hours H"
check "stats is in the command list" has "$("$bin" --help)" "^  stats "

exit $fail
