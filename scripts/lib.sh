# shellcheck shell=bash
# lib.sh - shared helpers of scripts/test.sh and scripts/demo.sh (source it, don't run it).
#
# Design: each helper is a small function that returns non-zero on failure instead of
# exiting, so that callers decide whether a failure aborts (demo.sh) or is counted and
# reported at the end (test.sh).  Helpers chain their steps with `|| return` because
# `set -e` is not in force inside functions called from an `if` condition.
#
#   v4_section TITLE              print a section header
#   v4_jobs                       number of build jobs (nproc)
#   v4_ensure_packages            install the Debian build dependencies if any is missing
#   v4_build DIR [CMAKE_ARGS...]  configure (first time: -G Ninja) and build DIR
#
# V4_ROOT is the repository root (set here from this file's location).

V4_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# librabbitmq-dev: the worker's AMQP client; rabbitmq-server, redis-server: the real brokers
# the queue tests start on loopback (tests/lib/brokers.sh); python3-pika: the third-party
# producer of the end-to-end queue test; libhiredis-dev: the Redis expert-utilization
# counters and `v4fleet stats`; libpng-dev: `v4fleet stats --png` heatmaps; libxxhash-dev:
# XXH3 checksums of expert-pack blocks; libuv1-dev: the worker's /healthz /readyz /metrics
# endpoint; curl: its test (tests/test_worker_http.sh) and the images' HEALTHCHECK;
# yamllint, docker-compose (1.29: `config` parses without an engine), shellcheck:
# tests/test_docker_files.sh's checks of docker/; python3-jsonschema: the structured-output
# tests validate answers against their schema (tests/test_structured_*.sh).
V4_PACKAGES=(build-essential cmake ninja-build pkg-config libjansson-dev libpcre2-dev clang
             librabbitmq-dev libhiredis-dev libpng-dev libxxhash-dev libuv1-dev rabbitmq-server redis-server
             python3-pika python3-jsonschema curl yamllint docker-compose shellcheck)

v4_section() {
    printf '\n==== %s ====\n' "$*"
}

v4_jobs() {
    nproc 2>/dev/null || echo 2
}

# Print the Debian packages of V4_PACKAGES that are not installed.
v4_missing_packages() {
    local p
    for p in "${V4_PACKAGES[@]}"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
            echo "$p"
        fi
    done
}

# Without dpkg (not Debian): only check that the tools are there.
v4_check_tools() {
    local t
    for t in cc cmake ninja pkg-config; do
        command -v "$t" >/dev/null || { echo "error: '$t' not found (not a Debian system: install it yourself)" >&2; return 1; }
    done
    pkg-config --exists jansson || { echo "error: jansson development files not found (pkg-config jansson)" >&2; return 1; }
    pkg-config --exists libpcre2-8 || { echo "error: PCRE2 development files not found (pkg-config libpcre2-8)" >&2; return 1; }
    pkg-config --exists librabbitmq || { echo "error: rabbitmq-c development files not found (pkg-config librabbitmq)" >&2; return 1; }
}

# apt-get update once + install, only when something is missing; root, non-interactive.
v4_ensure_packages() {
    if ! command -v dpkg-query >/dev/null; then
        v4_check_tools
        return
    fi
    local missing
    missing="$(v4_missing_packages | tr '\n' ' ')"
    if [ -z "${missing// /}" ]; then
        echo "build dependencies present: ${V4_PACKAGES[*]}"
        return 0
    fi
    echo "installing missing packages: $missing"
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || { echo "error: not root and no sudo; install: $missing" >&2; return 1; }
        sudo=(sudo -n)
    fi
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q || return 1
    # shellcheck disable=SC2086  # word splitting of the package list is intended
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -q --no-install-recommends $missing || return 1
}

# Configure DIR (relative to V4_ROOT) with the extra cmake args, then build it.
# An existing build directory keeps its generator; a new one uses Ninja.
v4_build() {
    local dir="$V4_ROOT/$1"
    shift
    local gen=()
    [ -f "$dir/CMakeCache.txt" ] || gen=(-G Ninja)
    cmake -S "$V4_ROOT" -B "$dir" "${gen[@]}" "$@" || return 1
    cmake --build "$dir" -j "$(v4_jobs)" || return 1
}
