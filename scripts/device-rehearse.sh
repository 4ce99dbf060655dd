#!/usr/bin/env bash
# device-rehearse.sh - rehearse scripts/device-check.sh on a bare GPU-machine lookalike, here:
# a bookworm rootfs with build-essential, cmake, ninja and python3 only (scripts/bare-rootfs.sh),
# the CUDA toolkit bind-mounted read-only at /usr/local/cuda (no ld.so.conf entry, no
# LD_LIBRARY_PATH), no network (a new network namespace), and the working tree copied in
# the way the device tool copies it (tracked + untracked-not-ignored files, plus the carried
# device-debs/).  device-check then runs with V4_DEVICE_CHECK_FORCE=1: it must build the full
# tree from the carried packages and run every step, the GPU ones SKIPPED, exit 0.
#
#   scripts/device-rehearse.sh [-- DEVICE-CHECK-ARGS...]
#
# Environment: V4_ROOTFS (the bare rootfs, default /var/tmp/v4fleet-rootfs/bookworm, made
# when missing; never written: the machine is an overlay on it, its writable layer in
# V4_REHEARSE_DIR, default /var/tmp/v4fleet-rehearse), V4_CUDA_DIR (default
# /usr/local/cuda), V4_DEVICE_CHECK_SCALE (bounds x N, default 6: the bounds are for a
# 16-core GPU machine, this VM has 2 cores).  The copy's build-gpu/ is kept in the layer
# between runs (as on a warm device machine; delete the layer for a cold one); the step
# logs land in $V4_REHEARSE_DIR/out/.  Needs root (chroot, unshare, mount, overlayfs).
# docs/cuda.md says more.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${1:-}" = -- ] && shift
[ "$(id -u)" -eq 0 ] || { echo "device-rehearse: needs root (chroot, unshare, mount)" >&2; exit 1; }
RFS=$(bash scripts/bare-rootfs.sh "${V4_ROOTFS:-/var/tmp/v4fleet-rootfs/bookworm}" | tail -1)
CUDA=$(readlink -f "${V4_CUDA_DIR:-/usr/local/cuda}")
[ -x "$CUDA/bin/nvcc" ] || { echo "device-rehearse: no nvcc under $CUDA" >&2; exit 1; }
if ! ls device-debs/*.deb >/dev/null 2>&1; then
    echo "device-rehearse: no device-debs/: fetching them (scripts/device-debs.sh)" >&2
    bash scripts/device-debs.sh
fi
# The machine: an overlay on the bare rootfs (upper layer in $RDIR), the copy of the tree
# in it: what the device tool carries (tracked and untracked-not-ignored files, the
# carried folder); build-gpu/ stays from the last run.
RDIR=${V4_REHEARSE_DIR:-/var/tmp/v4fleet-rehearse}
mkdir -p "$RDIR/upper" "$RDIR/work" "$RDIR/merged" "$RDIR/out" "$RDIR/upper/work/v4fleet"
DST=$RDIR/upper/work/v4fleet
find "$DST" -mindepth 1 -maxdepth 1 ! -name build-gpu -exec rm -rf {} +
{ git ls-files -co --exclude-standard -z; find device-debs -type f -print0; } |
    tar -c --null -T - -f - | tar -x -f - -C "$DST"
rm -rf "${RDIR:?}/out"/*
echo "device-rehearse: $(git ls-files -co --exclude-standard | wc -l) files + device-debs/ -> $DST; CUDA $CUDA; no network" >&2
SCALE=${V4_DEVICE_CHECK_SCALE:-6}
set +e
# A private mount namespace (the binds vanish with it) and an empty network namespace.
SCALE=$SCALE unshare --mount --net --fork bash -c '
    set -e
    mount --make-rprivate /
    M=$3/merged
    mount -t overlay overlay -o "lowerdir=$1,upperdir=$3/upper,workdir=$3/work" "$M"
    mkdir -p "$M/usr/local/cuda" "$M/work/out"
    mount -t proc proc "$M/proc"
    mount --rbind /dev "$M/dev"
    mount --bind -o ro "$2" "$M/usr/local/cuda"
    mount -o remount,bind,ro "$M/usr/local/cuda"
    mount -t tmpfs tmpfs "$M/tmp"
    mount --bind "$3/out" "$M/work/out"
    shift 3
    exec chroot "$M" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
        OUT=/work/out V4_DEVICE_CHECK_FORCE=1 V4_DEVICE_CHECK_SCALE="$SCALE" \
        bash /work/v4fleet/scripts/device-check.sh "$@"
' rehearse "$RFS" "$CUDA" "$RDIR" "$@" </dev/null
rc=$?
set -e
echo "device-rehearse: device-check exited $rc; logs in $RDIR/out/" >&2
exit $rc
