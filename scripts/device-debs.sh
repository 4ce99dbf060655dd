#!/usr/bin/env bash
# device-debs.sh - fetch the Debian packages the full build needs, to carry them to a GPU
# machine that has the CUDA toolkit, a compiler, cmake and ninja but none of the project's
# libraries and no network (docs/cuda.md "Bringing the libraries along").
#
#   scripts/device-debs.sh [DIR]     default DIR: device-debs/ (git-ignored), ~6 MB
#
# Run it on a Debian 12 (bookworm, amd64) machine with apt.  The set is computed, not
# written by hand: the dependency closure of the build's -dev packages (and pkg-config)
# minus what a machine with build-essential already has (the closure of build-essential
# and every Required/Essential package).  scripts/device-check.sh unpacks the folder with
# `dpkg -x` into a private prefix when pkg-config cannot find the libraries.
# DIR/MANIFEST lists package, version and sha256 of each file; extra packages can be
# added with V4_DEVICE_DEBS_EXTRA="pkg1 pkg2".  Exit 0 when every package was fetched.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-device-debs}
# The -dev packages of the full build (CMakeLists.txt's pkg_check_modules) + the tool.
ROOTS=(pkg-config libjansson-dev libpcre2-dev librabbitmq-dev libhiredis-dev libpng-dev libxxhash-dev libuv1-dev)
# shellcheck disable=SC2206  # word splitting intended
EXTRA=(${V4_DEVICE_DEBS_EXTRA:-})
command -v apt-get >/dev/null || { echo "device-debs: needs apt-get (a Debian 12 machine)" >&2; exit 1; }
. /etc/os-release
[ "${VERSION_CODENAME:-}" = bookworm ] ||
    echo "device-debs: warning: this is ${PRETTY_NAME:-an unknown system}, not Debian 12 (bookworm): the packages follow its archive" >&2
closure() {
    apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
        --no-enhances "$@" 2>/dev/null | grep -E '^[a-z0-9]' | sort -u
}
if [ -z "$(apt-cache policy libjansson-dev 2>/dev/null | sed -n 's/ *Candidate: //p' | grep -v none)" ]; then
    echo "device-debs: apt has no package lists; running apt-get update" >&2
    apt-get update -q >&2
fi
need=$(closure "${ROOTS[@]}" "${EXTRA[@]}")
have=$( { closure build-essential
          dpkg-query -W -f='${Package} ${Priority} ${Essential}\n' 2>/dev/null | awk '$2 == "required" || $3 == "yes" { print $1 }'
        } | sort -u)
mapfile -t PKGS < <(comm -23 <(echo "$need") <(echo "$have"))
[ ${#PKGS[@]} -gt 0 ] || { echo "device-debs: empty package set (apt-cache found nothing?)" >&2; exit 1; }
mkdir -p "$DIR"
rm -f "$DIR"/*.deb "$DIR/MANIFEST"
echo "device-debs: ${#PKGS[@]} packages -> $DIR/: ${PKGS[*]}" >&2
( cd "$DIR" && apt-get download -q "${PKGS[@]}" ) >&2
for f in "$DIR"/*.deb; do
    printf '%s %s %s\n' "$(dpkg-deb -f "$f" Package)" "$(dpkg-deb -f "$f" Version)" "$(sha256sum "$f" | cut -d' ' -f1)"
done >"$DIR/MANIFEST"
n=$(wc -l <"$DIR/MANIFEST")
[ "$n" -eq ${#PKGS[@]} ] || { echo "device-debs: fetched $n files for ${#PKGS[@]} packages" >&2; exit 1; }
echo "device-debs: $n packages, $(du -sh "$DIR" | cut -f1) in $DIR/ (carry it: docs/cuda.md)" >&2
