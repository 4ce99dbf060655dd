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
# Environment: V4_ROOTFS (the rootfs, default /var/tmp/v4fleet-rootfs/bookworm, made when
# missing), V4_CUDA_DIR (default /usr/local/cuda), V4_DEVICE_CHECK_SCALE (bounds x N,
# default 6: the bounds are for a 16-core GPU machine, this VM has 2 cores).  The copy's
# build-gpu/ is kept between runs (as on a warm device machine); the step logs land in
# $V4_ROOTFS/work/out/.  Needs root (chroot, unshare, mount).  docs/cuda.md says more.
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
# The copy: what the device tool carries (tracked and untracked-not-ignored files, the
# carried folder); build-gpu/ stays from the last run.
DST=$RFS/work/v4fleet
mkdir -p "$DST" "$RFS/work/out" "$RFS/usr/local/cuda"
find "$DST" -mindepth 1 -maxdepth 1 ! -name build-gpu -exec rm -rf {} +
{ git ls-files -co --exclude-standard -z; find device-debs -type f -print0; } |
    tar -c --null -T - -f - | tar -x -f - -C "$DST"
rm -rf "$RFS/work/out"/*
echo "device-rehearse: $(git ls-files -co --exclude-standard | wc -l) files + device-debs/ -> $DST; CUDA $CUDA; no network" >&2
SCALE=${V4_DEVICE_CHECK_SCALE:-6}
set +e
# A private mount namespace (the binds vanish with it) and an empty network namespace.
SCALE=$SCALE unshare --mount --net --fork bash -c '
    set -e
    mount --make-rprivate /
    mount -t proc proc "$1/proc"
    mount --rbind /dev "$1/dev"
    mount --bind -o ro "$2" "$1/usr/local/cuda"
    mount -o remount,bind,ro "$1/usr/local/cuda"
    mount -t tmpfs tmpfs "$1/tmp"
    RFS_DIR=$1
    shift 2
    exec chroot "$RFS_DIR" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
        OUT=/work/out V4_DEVICE_CHECK_FORCE=1 V4_DEVICE_CHECK_SCALE="$SCALE" \
        bash /work/v4fleet/scripts/device-check.sh "$@"
' rehearse "$RFS" "$CUDA" "$@" </dev/null
rc=$?
set -e
echo "device-rehearse: device-check exited $rc; logs in $RFS/work/out/" >&2
exit $rc
