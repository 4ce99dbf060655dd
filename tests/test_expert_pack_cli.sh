#!/usr/bin/env bash
# test_expert_pack_cli.sh - CLI contract of `v4fleet pack` on a tiny checkpoint made with
# `v4fleet mkmodel --preset tiny` (and a second one with --seed 7: same config, other
# weights).
#
# Checks: pack output (summary, manifest + experts.bin, no .tmp left); --verify exit 0;
# one flipped byte -> --verify exits 1 and lists exactly that layer/expert/offset;
# atomicity: a run killed mid-way (test hook V4_PACK_TEST_CRASH_AFTER -> SIGKILL) leaves
# no PACKDIR, only PACKDIR.tmp.<pid>, which --verify refuses and the next run removes;
# an existing PACKDIR is refused without --force and replaced with it; --force never
# deletes a directory that is not a pack; --verify --model of another checkpoint is
# refused; usage errors exit 2.  Scratch files in a temp dir under V4_TMP.
set -u

bin=${V4_BIN:?V4_BIN not set}
tmp=$(mktemp -d "${V4_TMP:-/tmp}/xpack_cli.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0

check() {  # check DESCRIPTION COMMAND...
    local what=$1; shift
    if ! "$@"; then echo "FAIL: $what"; fail=1; fi
}
has() { grep -qE -- "$2" <<<"$1"; }

"$bin" mkmodel --preset tiny --out "$tmp/m1" --no-sync >/dev/null 2>&1 || { echo "FAIL: mkmodel"; exit 1; }
"$bin" mkmodel --preset tiny --seed 7 --out "$tmp/m2" --no-sync >/dev/null 2>&1 || { echo "FAIL: mkmodel --seed 7"; exit 1; }

# ---------------------------------------------------------------- pack + verify
out=$("$bin" pack --model "$tmp/m1" --out "$tmp/p" 2>&1); rc=$?
echo "$out"
check "pack exits 0 (got $rc)" test "$rc" -eq 0
check "summary line" has "$out" "^packed .* 4 layers x 16 experts, 53248 bytes per block, 0.00 GB in .* MB/s\)"
check "manifest.json + experts.bin" test -s "$tmp/p/manifest.json" -a -s "$tmp/p/experts.bin"
check "experts.bin is 64 blocks" test "$(stat -c %s "$tmp/p/experts.bin")" -eq $((64 * 53248))
check "no .tmp left" test -z "$(ls -d "$tmp"/p.tmp.* 2>/dev/null)"

out=$("$bin" pack --verify "$tmp/p" 2>&1); rc=$?
echo "$out"
check "verify exits 0 (got $rc)" test "$rc" -eq 0
check "verify summary" has "$out" "^verified .*: 64 blocks, .*: ok, 0 corrupt"
out=$("$bin" pack --verify "$tmp/p" --model "$tmp/m1" 2>&1); rc=$?
check "verify --model of the same checkpoint exits 0 (got $rc: $out)" test "$rc" -eq 0

# ---------------------------------------------------------------- another checkpoint
out=$("$bin" pack --verify "$tmp/p" --model "$tmp/m2" 2>&1); rc=$?
echo "$out"
check "verify --model of another checkpoint exits 1 (got $rc)" test "$rc" -eq 1
check "names the mismatch" has "$out" "^v4fleet pack: .*/p: pack was made from a different checkpoint"

# ---------------------------------------------------------------- corruption
# layer 3 expert 9 = block 3*16+9 = 57, at offset 57*53248; flip the byte 777 bytes in.
off=$((57 * 53248))
cp "$tmp/p/experts.bin" "$tmp/good.bin"
/usr/bin/python3 - "$tmp/p/experts.bin" $((off + 777)) <<'EOF'
import sys
with open(sys.argv[1], 'r+b') as f:
    f.seek(int(sys.argv[2])); b = f.read(1); f.seek(int(sys.argv[2])); f.write(bytes([b[0] ^ 1]))
EOF
out=$("$bin" pack --verify "$tmp/p" 2>&1); rc=$?
echo "$out"
check "verify of a corrupt pack exits 1 (got $rc)" test "$rc" -eq 1
check "exactly one BAD line" test "$(grep -c '^BAD' <<<"$out")" -eq 1
check "BAD names layer 3 expert 9 and its offset" has "$out" "^BAD layer 3 expert 9 offset $off: layer 3 expert 9: checksum mismatch in .*/p/experts.bin at offset $off \(want [0-9a-f]{16}, got [0-9a-f]{16}\)$"
check "summary counts it" has "$out" "^verified .*: 64 blocks, .*: FAILED, 1 corrupt"
# every block corrupt: a logits run paging from the pack fails with the code expert_corrupt
/usr/bin/python3 - "$tmp/p/experts.bin" 53248 <<'EOF'
import sys
with open(sys.argv[1], 'r+b') as f:
    for blk in range(64):
        at = blk * int(sys.argv[2]) + 777
        f.seek(at); b = f.read(1); f.seek(at); f.write(bytes([b[0] ^ 1]))
EOF
echo '[5, 9, 17]' > "$tmp/ids.json"
out=$("$bin" logits --model "$tmp/m1" --tokens "$tmp/ids.json" --out "$tmp/l.bin" --pack "$tmp/p" \
    --host-cache-bytes 4M 2>&1); rc=$?
check "logits on a corrupt pack exits 1 (got $rc)" test "$rc" -eq 1
check "its error line carries the code expert_corrupt ($out)" has "$out" "^v4fleet logits: expert_corrupt: .*checksum mismatch"
cp "$tmp/good.bin" "$tmp/p/experts.bin"

# truncated data file: refused at open
truncate -s $((60 * 53248)) "$tmp/p/experts.bin"
out=$("$bin" pack --verify "$tmp/p" 2>&1); rc=$?
check "truncated pack exits 1 (got $rc)" test "$rc" -eq 1
check "truncation named" has "$out" "ends beyond the end of the file .*truncated pack"
cp "$tmp/good.bin" "$tmp/p/experts.bin"

# ---------------------------------------------------------------- existing PACKDIR, --force
out=$("$bin" pack --model "$tmp/m1" --out "$tmp/p" 2>&1); rc=$?
check "existing PACKDIR refused (got $rc)" test "$rc" -eq 1
check "refusal message" has "$out" "^v4fleet pack: .*/p: already exists \(use --force to replace it\)"
out=$("$bin" pack --model "$tmp/m2" --out "$tmp/p" --force 2>&1); rc=$?
check "--force replaces (got $rc: $out)" test "$rc" -eq 0
out=$("$bin" pack --verify "$tmp/p" --model "$tmp/m2" 2>&1); rc=$?
check "replaced pack is m2's (got $rc: $out)" test "$rc" -eq 0
check "no .old left" test -z "$(ls -d "$tmp"/p.old.* 2>/dev/null)"
mkdir "$tmp/notapack"; echo keep > "$tmp/notapack/precious.txt"
out=$("$bin" pack --model "$tmp/m1" --out "$tmp/notapack" --force 2>&1); rc=$?
check "--force onto a non-pack refused (got $rc)" test "$rc" -eq 1
check "non-pack message" has "$out" "holds 'precious.txt', which is not part of an expert pack"
check "non-pack untouched" test -s "$tmp/notapack/precious.txt"
check "its .tmp removed" test -z "$(ls -d "$tmp"/notapack.tmp.* 2>/dev/null)"

# ---------------------------------------------------------------- crash mid-way
V4_PACK_TEST_CRASH_AFTER=20 "$bin" pack --model "$tmp/m1" --out "$tmp/c" >/dev/null 2>&1; rc=$?
check "crash hook killed the run (rc $rc)" test "$rc" -eq 137
check "no PACKDIR after a crash" test ! -e "$tmp/c"
left=$(ls -d "$tmp"/c.tmp.* 2>/dev/null)
check "a .tmp leftover exists" test -n "$left"
check "leftover has no manifest" test ! -e "$left/manifest.json"
out=$("$bin" pack --verify "$left" 2>&1); rc=$?
check "leftover is not a pack (got $rc)" test "$rc" -eq 1
check "leftover refusal names the manifest" has "$out" "no manifest.json: not an expert pack, or an incomplete one"
out=$("$bin" pack --model "$tmp/m1" --out "$tmp/c" 2>&1); rc=$?
check "rerun after the crash succeeds (got $rc: $out)" test "$rc" -eq 0
check "rerun removed the leftover" test ! -e "$left"
out=$("$bin" pack --verify "$tmp/c" --model "$tmp/m1" 2>&1); rc=$?
check "rerun pack verifies (got $rc)" test "$rc" -eq 0

# ---------------------------------------------------------------- usage
"$bin" pack >/dev/null 2>&1; rc=$?
check "no arguments: exit 2 (got $rc)" test "$rc" -eq 2
"$bin" pack --model "$tmp/m1" >/dev/null 2>&1; rc=$?
check "--model without --out: exit 2 (got $rc)" test "$rc" -eq 2
"$bin" pack --verify "$tmp/p" --out x >/dev/null 2>&1; rc=$?
check "--verify with --out: exit 2 (got $rc)" test "$rc" -eq 2
"$bin" pack --bogus >/dev/null 2>&1; rc=$?
check "unknown flag: exit 2 (got $rc)" test "$rc" -eq 2
out=$("$bin" pack --help 2>&1); rc=$?
check "--help exit 0" test "$rc" -eq 0
check "--help text" has "$out" "usage: v4fleet pack --model DIR --out PACKDIR"
out=$("$bin" pack --model "$tmp/nosuch" --out "$tmp/q" 2>&1); rc=$?
check "missing model: exit 1 (got $rc)" test "$rc" -eq 1
check "missing model named" has "$out" "^v4fleet pack: .*nosuch/config.json: "
check "nothing created for a missing model" test ! -e "$tmp/q"

[ "$fail" -eq 0 ] && echo "all checks passed"
exit "$fail"
