#!/usr/bin/env bash
# bare-rootfs.sh - make (or reuse) a bare Debian 12 rootfs shaped like the GPU machines we
# borrow: build-essential, cmake, ninja, python3 and nothing of the project's libraries.
# Used to rehearse scripts/device-check.sh offline (scripts/device-rehearse.sh) and as the
# base of the container images (scripts/container-check.sh imports it as an image).
#
#   scripts/bare-rootfs.sh [DIR]     default DIR: $V4_ROOTFS or /var/tmp/v4fleet-rootfs/bookworm
#
# Needs root and debootstrap (installed with apt-get when missing) and the Debian mirror
# (V4_DEBIAN_MIRROR, default http://deb.debian.org/debian; V4_DEBIAN_SECURITY for the
# security archive).  A DIR that already holds a finished rootfs (the marker file
# .v4fleet-rootfs) is reused as it is: it stays bare (the rehearsal writes into an overlay
# of its own, never into DIR).  Prints DIR last.
# docs/cuda.md ("Rehearsing on a bare machine") says how the pieces fit.
set -euo pipefail
DIR=${1:-${V4_ROOTFS:-/var/tmp/v4fleet-rootfs/bookworm}}
MIRROR=${V4_DEBIAN_MIRROR:-http://deb.debian.org/debian}
PKGS=build-essential,cmake,ninja-build,python3,ca-certificates
if [ -f "$DIR/.v4fleet-rootfs" ]; then
    echo "bare-rootfs: reusing $DIR ($(cat "$DIR/.v4fleet-rootfs"))" >&2
    echo "$DIR"
    exit 0
fi
[ "$(id -u)" -eq 0 ] || { echo "bare-rootfs: needs root (debootstrap, chroot)" >&2; exit 1; }
if ! command -v debootstrap >/dev/null; then
    echo "bare-rootfs: installing debootstrap" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >&2 ||
        { DEBIAN_FRONTEND=noninteractive apt-get update -q >&2 &&
          DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >&2; }
fi
rm -rf "$DIR"
mkdir -p "$DIR"
echo "bare-rootfs: debootstrap bookworm into $DIR (minbase + $PKGS; a few minutes)" >&2
t0=$(date +%s)
debootstrap --variant=minbase --include="$PKGS" bookworm "$DIR" "$MIRROR" >"$DIR.debootstrap.log" 2>&1 || {
    echo "bare-rootfs: debootstrap failed; last lines of $DIR.debootstrap.log:" >&2
    tail -20 "$DIR.debootstrap.log" >&2
    exit 1
}
# The same sources a stock bookworm image has (docker builds run apt-get inside it).
SECURITY=${V4_DEBIAN_SECURITY:-${MIRROR%/debian}/debian-security}
printf 'deb %s bookworm main\ndeb %s bookworm-updates main\ndeb %s bookworm-security main\n' \
    "$MIRROR" "$MIRROR" "$SECURITY" >"$DIR/etc/apt/sources.list"
rm -rf "$DIR"/var/cache/apt/archives/*.deb "$DIR"/var/lib/apt/lists/*
echo "bookworm minbase + $PKGS, $(date -u +%Y-%m-%dT%H:%MZ)" >"$DIR/.v4fleet-rootfs"
echo "bare-rootfs: done in $(($(date +%s) - t0)) s ($(du -sh "$DIR" | cut -f1))" >&2
echo "$DIR"
