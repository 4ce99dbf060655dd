#!/usr/bin/env bash
# container-check.sh - build and run the v4fleet container images for real, offline.
#
# Why: docker/ (Dockerfiles, compose.yml) is otherwise only checked statically
# (tests/test_docker_files.sh); this script builds the images and runs them the way
# production does, on a machine with Docker but no registry (the base image is imported
# from a debootstrapped rootfs, the brokers of the compose stack are built from Debian
# packages, the CUDA toolkit comes from this host).  docs/operations.md, "Containers
# offline", has the measured times.
#
# What, in order (each a row of the final table: step, result, seconds):
#   deps          the project's Debian packages (scripts/lib.sh V4_PACKAGES) and docker
#   dockerd       a daemon that answers; if none, start one (dockerd --iptables=false
#                 --ip-masq=false --bridge=none --storage-driver=overlay2, vfs if overlay2
#                 fails) and stop it at the end
#   base          the base image: --base IMAGE, or a rootfs imported as v4fleet-base:bookworm
#                 (--rootfs DIR, default scripts/bare-rootfs.sh's); reused when the image
#                 already holds that rootfs (label io.v4fleet.rootfs)
#   cpu-image     docker/Dockerfile.cpu with BASE_IMAGE=the base -> v4fleet:cpu
#   mkmodel       the tiny demo model made inside the image (as scripts/demo.sh does) into
#                 a host directory mounted at /models
#   brokers       a private RabbitMQ + Redis on loopback (tests/lib/brokers.sh)
#   run           the worker container hardened as compose runs it: read-only root,
#                 tmpfs /tmp, cap_drop ALL, no-new-privileges, uid 10001, secrets as
#                 files under /run/secrets; waits for /readyz
#   tasks         scripts/demo_tasks.jsonl through scripts/submit.py: every task
#                 answered, the one naming another model fails model_not_available
#   http          /healthz and /readyz 200, /metrics counts the tasks, the image's
#                 HEALTHCHECK reports healthy
#   stop          docker stop (SIGTERM): exit status 0 and the worker's "exiting:" line
#   broker-images stand-ins for the rabbitmq/redis images (docker/Dockerfile.brokers)
#   compose-up    docker-compose -f docker/compose.yml -f docker/compose.check.yml
#                 --profile cpu up --scale worker-cpu=2: brokers and workers healthy
#   compose-tasks the demo tasks through the stack's published AMQP port
#   compose-http  /healthz /readyz /metrics inside each worker
#   compose-stop  docker-compose stop (stop_grace_period): every worker exits 0
#   cuda-base     a CUDA base from the base + the host's toolkit (docker/Dockerfile.cuda-base)
#   gpu-image     docker/Dockerfile on that base -> v4fleet:cuda (no GPU needed)
#   gpu-ldd       ldd in the image finds every library but libcuda.so.1 (the driver's);
#                 the binary starts
# A step whose prerequisite failed is SKIP (with the reason).  Exit 0 only when every
# step that ran passed (steps turned off by --no-compose/--no-gpu are listed as off).
# Containers, the compose project, its volumes and the brokers are removed at exit;
# images are kept.  Needs root (dockerd, chown of the model dir to uid 10001).
# The step functions are called through `step NAME NEEDS FUNCTION`, which shellcheck
# cannot follow:
# shellcheck disable=SC2317
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

usage() {
    cat <<'EOF'
usage: scripts/container-check.sh [options]

Builds the v4fleet images and runs them like production (see the head of this file).
  --base IMAGE       use IMAGE as the base of the images (default: import a rootfs)
  --rootfs DIR       import DIR as v4fleet-base:bookworm (default: the output of
                     scripts/bare-rootfs.sh, which debootstraps one if needed)
  --cuda DIR         CUDA toolkit for the GPU image (default: /usr/local/cuda, resolved)
  --cuda-archs LIST  CUDA_ARCHITECTURES of the GPU image (default: docker/Dockerfile's)
  --no-gpu           leave out the GPU image steps
  --no-compose       leave out the compose steps
  --rebuild          rebuild the imported base and the CUDA base even when reusable
  --keep             keep the work directory (logs, model, secrets); kept anyway on failure
  -h, --help         this text
Environment: V4_CHECK_WORK (work directory parent, default /var/tmp).
EOF
}

BASE_IMAGE="" ROOTFS="" CUDA_DIR="/usr/local/cuda" CUDA_ARCHS="" GPU=1 COMPOSE=1 REBUILD=0 KEEP=0
while [ $# -gt 0 ]; do
    case "$1" in
    --base) BASE_IMAGE="${2:?--base needs an image}"; shift 2 ;;
    --rootfs) ROOTFS="${2:?--rootfs needs a directory}"; shift 2 ;;
    --cuda) CUDA_DIR="${2:?--cuda needs a directory}"; shift 2 ;;
    --cuda-archs) CUDA_ARCHS="${2:?--cuda-archs needs a list}"; shift 2 ;;
    --no-gpu) GPU=0; shift ;;
    --no-compose) COMPOSE=0; shift ;;
    --rebuild) REBUILD=1; shift ;;
    --keep) KEEP=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "container-check: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
done
if [ -n "$BASE_IMAGE" ] && [ -n "$ROOTFS" ]; then
    echo "container-check: --base and --rootfs exclude each other" >&2
    exit 2
fi

# shellcheck source=scripts/lib.sh
source "$ROOT/scripts/lib.sh"
# shellcheck source=tests/lib/brokers.sh
source "$ROOT/tests/lib/brokers.sh"
PY=/usr/bin/python3
CPU_IMAGE=v4fleet:cpu
CUDA_IMAGE=v4fleet:cuda
CUDA_BASE_IMAGE=v4fleet-cuda-base:bookworm
RMQ_IMAGE=v4fleet-check-rabbitmq:bookworm
REDIS_IMAGE=v4fleet-check-redis:bookworm
PROJECT="v4check$$"
WORK="$(mktemp -d "${V4_CHECK_WORK:-/var/tmp}/v4fleet-container-check.XXXXXX")" || exit 1
LOGS="$WORK/logs"
mkdir -p "$LOGS"

# ---- steps, results, the table ---------------------------------------------------------
S_NAMES=() S_RESULTS=() S_SECS=() S_NOTES=()
declare -A PASSED=()
NOTE="" CUR=""

record() {   # NAME RESULT SECONDS NOTE
    S_NAMES+=("$1"); S_RESULTS+=("$2"); S_SECS+=("$3"); S_NOTES+=("$4")
}

# A step's function returns non-zero on failure after calling bad (the reason for the
# table); NOTE may also carry a remark for a passing step.
bad() {
    NOTE="$*"
    echo "container-check: $CUR: FAIL: $*" >&2
    return 1
}

step() {   # step NAME NEEDS FUNCTION   (NEEDS: comma-separated steps that must have passed)
    local name="$1" needs="$2" fn="$3" n t0 rc
    for n in ${needs//,/ }; do
        if [ "${PASSED[$n]:-0}" != 1 ]; then
            record "$name" SKIP 0 "needs $n"
            return 0
        fi
    done
    CUR="$name" NOTE=""
    v4_section "$name"
    t0=$EPOCHREALTIME
    "$fn"
    rc=$?
    local secs
    secs="$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')"
    if [ "$rc" -eq 0 ]; then
        PASSED[$name]=1
        record "$name" PASS "$secs" "$NOTE"
        echo "container-check: $name: PASS in $secs s${NOTE:+ ($NOTE)}"
    else
        record "$name" FAIL "$secs" "${NOTE:-exit status $rc}"
    fi
}

off() {   # off NAME REASON
    record "$1" OFF 0 "$2"
}

NFAIL=0 NSKIP=0
table() {
    local i
    printf '\n%-14s %-6s %8s  %s\n' step result seconds note
    printf '%-14s %-6s %8s  %s\n' -------------- ------ -------- ----
    for i in "${!S_NAMES[@]}"; do
        printf '%-14s %-6s %8s  %s\n' "${S_NAMES[$i]}" "${S_RESULTS[$i]}" "${S_SECS[$i]}" "${S_NOTES[$i]}"
        case "${S_RESULTS[$i]}" in
        FAIL) NFAIL=$((NFAIL + 1)) ;;
        SKIP) NSKIP=$((NSKIP + 1)) ;;
        esac
    done
}

# ---- cleanup (EXIT trap; also run before the table) -----------------------------------
CONTAINERS=() DOCKERD_PID="" COMPOSE_UP=0 BROKERS_UP=0 CLEANED=0
DC=()
cleanup() {
    [ "$CLEANED" -eq 0 ] || return 0
    CLEANED=1
    local c
    for c in "${CONTAINERS[@]}"; do
        docker rm -f -v "$c" > /dev/null 2>&1 || true
    done
    if [ "$COMPOSE_UP" -eq 1 ]; then
        "${DC[@]}" down -v --remove-orphans > "$LOGS/compose-down.log" 2>&1 || true
    fi
    if [ "$BROKERS_UP" -eq 1 ]; then brokers_stop > /dev/null 2>&1 || true; fi
    if [ -n "$DOCKERD_PID" ]; then
        kill -TERM "$DOCKERD_PID" 2> /dev/null || true
        for _ in $(seq 1 60); do kill -0 "$DOCKERD_PID" 2> /dev/null || break; sleep 0.5; done
        if kill -0 "$DOCKERD_PID" 2> /dev/null; then
            echo "container-check: dockerd $DOCKERD_PID still running 30 s after SIGTERM" >&2
        fi
    fi
}
trap 'cleanup' EXIT
trap 'exit 130' INT TERM

docker_ok() { timeout 10 docker info > /dev/null 2>&1; }
log_tail() {   # FILE [N]: the last lines of a log, indented, to stderr
    tail -n "${2:-15}" "$1" 2> /dev/null | sed 's/^/    | /' >&2
}

# ---- a: packages and the daemon --------------------------------------------------------
s_deps() {
    command -v docker > /dev/null || { bad "no docker client (apt-get install docker.io)"; return 1; }
    command -v dockerd > /dev/null || docker_ok || { bad "no dockerd and no daemon answers (apt-get install docker.io)"; return 1; }
    v4_ensure_packages > "$LOGS/packages.log" 2>&1 || { log_tail "$LOGS/packages.log"; bad "installing V4_PACKAGES failed"; return 1; }
    command -v docker-compose > /dev/null || { bad "no docker-compose"; return 1; }
    NOTE="docker $(docker version -f '{{.Client.Version}}' 2> /dev/null), $(docker-compose version --short 2> /dev/null | head -n1)"
}

start_dockerd() {   # DRIVER
    dockerd --iptables=false --ip-masq=false --bridge=none --storage-driver="$1" \
        > "$LOGS/dockerd-$1.log" 2>&1 &
    DOCKERD_PID=$!
    local end=$((SECONDS + 60))
    while [ "$SECONDS" -lt "$end" ]; do
        docker_ok && return 0
        kill -0 "$DOCKERD_PID" 2> /dev/null || break
        sleep 0.5
    done
    kill -TERM "$DOCKERD_PID" 2> /dev/null
    wait "$DOCKERD_PID" 2> /dev/null
    DOCKERD_PID=""
    return 1
}

s_dockerd() {
    if docker_ok; then
        NOTE="a daemon answers already ($(docker info -f '{{.ServerVersion}}, {{.Driver}}' 2> /dev/null)); left running"
        return 0
    fi
    if start_dockerd overlay2; then
        NOTE="started dockerd (overlay2, --bridge=none); stopped at the end"
        return 0
    fi
    echo "container-check: dockerd with overlay2 did not come up; last lines:" >&2
    log_tail "$LOGS/dockerd-overlay2.log"
    if start_dockerd vfs; then
        NOTE="started dockerd with vfs (overlay2 failed: $LOGS/dockerd-overlay2.log); stopped at the end"
        return 0
    fi
    log_tail "$LOGS/dockerd-vfs.log"
    bad "dockerd did not answer within 60 s, with overlay2 nor vfs ($LOGS/dockerd-*.log)"
}

# ---- b: the base image -----------------------------------------------------------------
s_base() {
    if [ -n "$BASE_IMAGE" ]; then
        docker image inspect "$BASE_IMAGE" > /dev/null 2>&1 ||
            { bad "no image $BASE_IMAGE here (no registry: import one, e.g. --rootfs DIR)"; return 1; }
        NOTE="given: $BASE_IMAGE"
        return 0
    fi
    local dir="$ROOTFS" marker have
    if [ -z "$dir" ]; then
        dir="$(bash "$ROOT/scripts/bare-rootfs.sh" 2> "$LOGS/bare-rootfs.log" | tail -n 1)" ||
            { log_tail "$LOGS/bare-rootfs.log"; bad "scripts/bare-rootfs.sh failed"; return 1; }
    fi
    [ -f "$dir/etc/os-release" ] || { bad "$dir is not a root filesystem (no etc/os-release)"; return 1; }
    BASE_IMAGE=v4fleet-base:bookworm
    # What the image must hold: the rootfs marker (bare-rootfs.sh), else the directory and
    # its newest top-level change.
    marker="$(cat "$dir/.v4fleet-rootfs" 2> /dev/null || echo "$dir $(stat -c %Y "$dir")"); without /work, /usr/local/cuda"
    have="$(docker image inspect -f '{{index .Config.Labels "io.v4fleet.rootfs"}}' "$BASE_IMAGE" 2> /dev/null)"
    if [ "$REBUILD" -eq 0 ] && [ "$have" = "$marker" ]; then
        NOTE="reused $BASE_IMAGE ($marker)"
        return 0
    fi
    # Nothing may be mounted inside (a chroot rehearsal's /proc, /dev or bind-mounted
    # toolkit would be copied into the image).
    local mounts
    mounts="$(awk -v d="$(readlink -f "$dir")/" 'index($2 "/", d) == 1 { print $2 }' /proc/mounts | tr '\n' ' ')"
    [ -z "$mounts" ] || { bad "mounts inside $dir (a rehearsal running?): $mounts"; return 1; }
    # Imported images carry no environment: give it the usual PATH.  Left out: what
    # scripts/device-rehearse.sh leaves in the shared rootfs (/work, the /usr/local/cuda
    # mount point), and the contents of the pseudo filesystems (Docker provides them).
    tar -C "$dir" --one-file-system --exclude=./work --exclude=./usr/local/cuda --exclude='./proc/*' \
        --exclude='./sys/*' --exclude='./dev/*' -c . | docker import \
        -c "LABEL io.v4fleet.rootfs=\"$marker\"" \
        -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        -c 'CMD ["bash"]' - "$BASE_IMAGE" > "$LOGS/import.log" 2>&1 ||
        { log_tail "$LOGS/import.log"; bad "docker import of $dir failed"; return 1; }
    NOTE="imported $dir as $BASE_IMAGE ($(docker image inspect -f '{{.Size}}' "$BASE_IMAGE" | awk '{ printf "%.0f MB", $1 / 1e6 }'))"
}

# ---- c: the CPU image ------------------------------------------------------------------
build() {   # LOG DESC docker-build-args...
    local log="$1" desc="$2"
    shift 2
    if ! timeout 3600 docker build --network host "$@" > "$log" 2>&1; then
        log_tail "$log" 25
        bad "$desc: docker build failed ($log)"
        return 1
    fi
}

cached() {   # LOG -> "N of M steps cached" (the legacy builder's "Using cache" lines)
    echo "$(grep -c 'Using cache' "$1") of $(grep -c '^Step ' "$1") steps cached"
}

s_cpu_image() {
    build "$LOGS/build-cpu.log" "docker/Dockerfile.cpu" --build-arg BASE_IMAGE="$BASE_IMAGE" \
        -f "$ROOT/docker/Dockerfile.cpu" -t "$CPU_IMAGE" "$ROOT" || return 1
    NOTE="$CPU_IMAGE $(docker image inspect -f '{{.Size}}' "$CPU_IMAGE" | awk '{ printf "%.0f MB", $1 / 1e6 }'); $(cached "$LOGS/build-cpu.log")"
}

# The hardening compose gives the workers (docker/compose.yml x-worker), as docker run flags.
HARDENED=(--read-only --tmpfs /tmp --cap-drop ALL --security-opt no-new-privileges:true --user 10001:10001)

# ---- d: the demo model, made by the image ----------------------------------------------
s_mkmodel() {
    mkdir -p "$WORK/models" "$WORK/packs"
    chown 10001:10001 "$WORK/models"
    if ! docker run --rm --network none "${HARDENED[@]}" -v "$WORK/models:/models" "$CPU_IMAGE" \
            mkmodel --out /models/tiny --preset tiny --seed 1 --force > "$LOGS/mkmodel.log" 2>&1; then
        log_tail "$LOGS/mkmodel.log"
        bad "v4fleet mkmodel in $CPU_IMAGE failed"
        return 1
    fi
    { [ -f "$WORK/models/tiny/config.json" ] && [ -f "$WORK/models/tiny/tokenizer.json" ]; } ||
        { bad "mkmodel left no config.json/tokenizer.json in $WORK/models/tiny"; return 1; }
    NOTE="$(du -sh "$WORK/models/tiny" | cut -f1) in $WORK/models/tiny"
}

# ---- e: private brokers on loopback ----------------------------------------------------
s_brokers() {
    BROKERS_UP=1
    brokers_start "$WORK/brokers" > "$LOGS/brokers.log" 2>&1 ||
        { log_tail "$LOGS/brokers.log"; bad "tests/lib/brokers.sh could not start RabbitMQ + Redis"; return 1; }
    mkdir -p "$WORK/run-secrets"
    chmod 0700 "$WORK/run-secrets"
    (umask 022 && printf '%s\n' "$V4_TEST_AMQP_URL" > "$WORK/run-secrets/amqp_url" &&
        printf '%s\n' "$V4_TEST_REDIS_URL" > "$WORK/run-secrets/redis_url")
    NOTE="$(tail -n 1 "$LOGS/brokers.log" | sed 's/^brokers.sh: //; s/ (.*//')"
}

# ---- f: the worker container -----------------------------------------------------------
WORKER="v4check-worker-$$"
HTTP_PORT=""
http_code() {   # URL -> the status code (000 when nothing answers)
    curl -s -o /dev/null -m 5 -w '%{http_code}' "$1" 2> /dev/null
}
is_200() { [ "$(http_code "$1")" = 200 ]; }
running() { [ "$(docker inspect -f '{{.State.Running}}' "$1" 2> /dev/null)" = true ]; }

s_run() {
    HTTP_PORT="$(_brokers_free_port)"
    CONTAINERS+=("$WORKER")
    if ! docker run -d --name "$WORKER" --network host "${HARDENED[@]}" --stop-timeout 45 \
            -v "$WORK/models:/models:ro" -v "$WORK/packs:/packs:ro" \
            -v "$WORK/run-secrets/amqp_url:/run/secrets/amqp_url:ro" \
            -v "$WORK/run-secrets/redis_url:/run/secrets/redis_url:ro" \
            -e V4_AMQP_URL_FILE=/run/secrets/amqp_url -e V4_REDIS_URL_FILE=/run/secrets/redis_url \
            -e V4_MODEL_DIR=/models/tiny -e V4_MODEL_NAME=tiny -e V4_HTTP_PORT="$HTTP_PORT" \
            "$CPU_IMAGE" > "$LOGS/run.log" 2>&1; then
        log_tail "$LOGS/run.log"
        bad "docker run $CPU_IMAGE failed"
        return 1
    fi
    local end=$((SECONDS + 180)) code
    while :; do
        code="$(http_code "http://127.0.0.1:$HTTP_PORT/readyz")"
        [ "$code" = 200 ] && break
        if ! running "$WORKER"; then
            docker logs "$WORKER" > "$LOGS/worker.log" 2>&1
            log_tail "$LOGS/worker.log"
            bad "the worker container exited (status $(docker inspect -f '{{.State.ExitCode}}' "$WORKER")) before /readyz"
            return 1
        fi
        if [ "$SECONDS" -ge "$end" ]; then
            docker logs "$WORKER" > "$LOGS/worker.log" 2>&1
            log_tail "$LOGS/worker.log"
            bad "still pending after 180 s: /readyz on port $HTTP_PORT (last answer $code)"
            return 1
        fi
        sleep 0.5
    done
    # The hardening really is in force: user, read-only root, capabilities, privileges.
    local user ro caps nnp
    user="$(docker exec "$WORKER" id -u 2> /dev/null)"
    ro="$(docker inspect -f '{{.HostConfig.ReadonlyRootfs}}' "$WORKER")"
    caps="$(docker exec "$WORKER" sh -c "sed -n 's/^CapEff:[[:space:]]*//p' /proc/1/status" 2> /dev/null)"
    nnp="$(docker exec "$WORKER" sh -c "sed -n 's/^NoNewPrivs:[[:space:]]*//p' /proc/1/status" 2> /dev/null)"
    [ "$user" = 10001 ] || { bad "the worker runs as uid '$user', not 10001"; return 1; }
    [ "$ro" = true ] || { bad "the root filesystem is not read-only"; return 1; }
    [ "$caps" = 0000000000000000 ] || { bad "the worker has capabilities: CapEff $caps"; return 1; }
    [ "$nnp" = 1 ] || { bad "no_new_privs is not set (NoNewPrivs '$nnp')"; return 1; }
    if docker exec "$WORKER" sh -c 'touch /var/lib/v4fleet/x' 2> /dev/null; then
        bad "the worker could write to its home on a read-only root"; return 1
    fi
    NOTE="ready on :$HTTP_PORT; uid 10001, read-only root, CapEff 0, NoNewPrivs 1"
}

# ---- g: the demo tasks -----------------------------------------------------------------
# check_results RESULTS_FILE SERVED_NAMES: every task of scripts/demo_tasks.jsonl has a
# result; a task naming a model not in SERVED_NAMES failed model_not_available, the
# others succeeded.  Prints a one-line summary.
check_results() {
    "$PY" - "$ROOT/scripts/demo_tasks.jsonl" "$1" "$2" <<'PY'
import json, sys
tasks = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
served = set(sys.argv[3].split(","))
got = {}
for line in open(sys.argv[2]):
    line = line.strip()
    if line:
        r = json.loads(line)
        got[r.get("id")] = r
bad = []
for t in tasks:
    r = got.get(t["id"])
    if r is None:
        bad.append("%s: no result" % t["id"])
    elif t.get("model") and t["model"] not in served:
        code = (r.get("error") or {}).get("code")
        if r.get("status") != "failed" or code != "model_not_available":
            bad.append("%s: expected failed/model_not_available, got %s/%s" % (t["id"], r.get("status"), code))
    elif r.get("status") != "succeeded":
        bad.append("%s: %s (%s)" % (t["id"], r.get("status"), json.dumps(r.get("error"))))
workers = sorted({r.get("worker", "") for r in got.values()})
if bad:
    print("; ".join(bad))
    sys.exit(1)
print("%d results, %d succeeded, model_not_available as expected; workers: %s" %
      (len(got), sum(r.get("status") == "succeeded" for r in got.values()), " ".join(workers)))
PY
}

submit_and_check() {   # AMQP_URL LOG_PREFIX
    local out
    if ! timeout 200 "$PY" "$ROOT/scripts/submit.py" --url "$1" --timeout 150 "$ROOT/scripts/demo_tasks.jsonl" \
            > "$LOGS/$2-results.jsonl" 2> "$LOGS/$2-submit.err"; then
        log_tail "$LOGS/$2-submit.err"
        bad "submit.py: $(tail -n 1 "$LOGS/$2-submit.err")"
        return 1
    fi
    out="$(check_results "$LOGS/$2-results.jsonl" tiny)" || { bad "results: $out"; return 1; }
    NOTE="$out"
}

s_tasks() {
    submit_and_check "$V4_TEST_AMQP_URL" run
}

# ---- h: the HTTP endpoints -------------------------------------------------------------
# check_metrics FILE MIN_SUCCESS MIN_FAILURE MIN_READY: the /metrics text (summed over
# label sets, and over workers when FILE holds several) counts at least that many
# succeeded and failed tasks and ready workers.  Prints a one-line summary.
check_metrics() {
    "$PY" - "$@" <<'PY'
import re, sys
vals = {}
for line in open(sys.argv[1]):
    m = re.match(r"^(v4fleet:[a-z_]+)(\{[^}]*\})?\s+(\S+)$", line.strip())
    if m:
        vals[m.group(1)] = vals.get(m.group(1), 0.0) + float(m.group(3))
need = {"v4fleet:request_success_total": int(sys.argv[2]), "v4fleet:request_failure_total": int(sys.argv[3]),
        "v4fleet:ready": int(sys.argv[4])}
short = ["%s=%s (want >= %s)" % (k, vals.get(k), v) for k, v in need.items() if vals.get(k, 0) < v]
if short:
    print("; ".join(short))
    sys.exit(1)
print("%d v4fleet: series; success %d, failure %d, ready %d" % (len(vals), vals["v4fleet:request_success_total"],
      vals["v4fleet:request_failure_total"], vals["v4fleet:ready"]))
PY
}

health_status() { docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{end}}' "$1" 2> /dev/null; }
is_healthy() { [ "$(health_status "$1")" = healthy ]; }

s_http() {
    local p
    for p in healthz readyz; do
        is_200 "http://127.0.0.1:$HTTP_PORT/$p" ||
            { bad "/$p answered $(http_code "http://127.0.0.1:$HTTP_PORT/$p"), not 200"; return 1; }
    done
    curl -fsS -m 5 "http://127.0.0.1:$HTTP_PORT/metrics" > "$LOGS/run-metrics.txt" 2>&1 ||
        { bad "/metrics: $(head -c 200 "$LOGS/run-metrics.txt")"; return 1; }
    local m end=$((SECONDS + 90))
    m="$(check_metrics "$LOGS/run-metrics.txt" 3 1 1)" || { bad "/metrics: $m"; return 1; }
    # The image's HEALTHCHECK (curl /healthz every 15 s) must call it healthy.
    until is_healthy "$WORKER"; do
        if [ "$SECONDS" -ge "$end" ]; then
            bad "still pending after 90 s: docker's health status of $WORKER is '$(health_status "$WORKER")', not healthy"
            return 1
        fi
        sleep 1
    done
    NOTE="/healthz /readyz 200; $m; HEALTHCHECK healthy"
}

# ---- i: SIGTERM ------------------------------------------------------------------------
# stopped_clean CONTAINER LOG: exit status 0 and the worker's exiting line in its log.
stopped_clean() {
    local c="$1" log="$2" rc oom
    docker logs "$c" > "$log" 2>&1
    rc="$(docker inspect -f '{{.State.ExitCode}}' "$c")"
    oom="$(docker inspect -f '{{.State.OOMKilled}}' "$c")"
    [ "$rc" = 0 ] || { log_tail "$log"; bad "$c exited with status $rc (OOM killed: $oom)"; return 1; }
    grep -q 'exiting: ' "$log" || { log_tail "$log"; bad "$c: no 'exiting:' line in its log ($log)"; return 1; }
    grep -q 'signal 15' "$log" || { log_tail "$log"; bad "$c: no 'signal 15' line in its log ($log)"; return 1; }
    grep -q 'exiting: .* 0 results unconfirmed' "$log" ||
        { log_tail "$log"; bad "$c: results left unconfirmed at exit ($log)"; return 1; }
}

s_stop() {
    local t0 ms
    t0=$EPOCHREALTIME
    docker stop -t 45 "$WORKER" > /dev/null 2>&1 || { bad "docker stop $WORKER failed"; return 1; }
    ms="$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%d", (b - a) * 1000 }')"
    stopped_clean "$WORKER" "$LOGS/worker.log" || return 1
    NOTE="exit 0 in $ms ms; $(grep -o 'exiting: [0-9]* succeeded, [0-9]* failed' "$LOGS/worker.log" | tail -n 1)"
}

# ---- j: the compose stack --------------------------------------------------------------
s_broker_images() {
    build "$LOGS/build-rabbitmq.log" "rabbitmq stand-in" --build-arg BASE_IMAGE="$BASE_IMAGE" --target rabbitmq \
        -f "$ROOT/docker/Dockerfile.brokers" -t "$RMQ_IMAGE" "$ROOT/docker/rabbitmq" || return 1
    build "$LOGS/build-redis.log" "redis stand-in" --build-arg BASE_IMAGE="$BASE_IMAGE" --target redis \
        -f "$ROOT/docker/Dockerfile.brokers" -t "$REDIS_IMAGE" "$ROOT/docker/rabbitmq" || return 1
    NOTE="$RMQ_IMAGE ($(cached "$LOGS/build-rabbitmq.log")), $REDIS_IMAGE ($(cached "$LOGS/build-redis.log"))"
}

compose_ids() {   # SERVICE -> its container ids
    "${DC[@]}" ps -q "$1" 2> /dev/null
}

all_healthy() {   # every container of the project is healthy (brokers and workers)
    local id n=0
    for id in $("${DC[@]}" ps -q 2> /dev/null); do
        is_healthy "$id" || return 1
        n=$((n + 1))
    done
    [ "$n" -eq 4 ]
}

health_summary() {
    local id
    for id in $("${DC[@]}" ps -q 2> /dev/null); do
        printf '%s=%s ' "$(docker inspect -f '{{.Name}}' "$id" | sed 's#^/##')" "$(health_status "$id")"
    done
}

s_compose_up() {
    mkdir -p "$WORK/compose"
    bash "$ROOT/docker/make-secrets.sh" "$WORK/compose/secrets" > /dev/null ||
        { bad "docker/make-secrets.sh failed"; return 1; }
    export V4FLEET_CHECK_SECRETS_DIR="$WORK/compose/secrets" V4FLEET_CHECK_BASE_IMAGE="$BASE_IMAGE"
    export V4FLEET_RABBITMQ_IMAGE="$RMQ_IMAGE" V4FLEET_REDIS_IMAGE="$REDIS_IMAGE" V4FLEET_IMAGE_CPU="$CPU_IMAGE"
    export V4FLEET_MODELS_DIR="$WORK/models" V4FLEET_PACKS_DIR="$WORK/packs"
    V4FLEET_AMQP_PORT="$(_brokers_free_port)" V4FLEET_MANAGEMENT_PORT="$(_brokers_free_port)"
    export V4FLEET_AMQP_PORT V4FLEET_MANAGEMENT_PORT
    export V4_MODEL_NAME=tiny
    DC=(docker-compose -p "$PROJECT" -f "$ROOT/docker/compose.yml" -f "$ROOT/docker/compose.check.yml"
        --env-file "$ROOT/docker/.env.example" --profile cpu)
    "${DC[@]}" config > "$LOGS/compose.resolved.yml" 2> "$LOGS/compose-config.err" ||
        { log_tail "$LOGS/compose-config.err"; bad "docker-compose config rejects compose.yml + compose.check.yml"; return 1; }
    COMPOSE_UP=1
    # up waits for the brokers' healthchecks (depends_on: service_healthy) before the workers.
    if ! timeout 300 "${DC[@]}" up -d --no-build --scale worker-cpu=2 > "$LOGS/compose-up.log" 2>&1; then
        log_tail "$LOGS/compose-up.log"
        "${DC[@]}" logs --no-color > "$LOGS/compose-logs.txt" 2>&1
        bad "docker-compose up failed: $(tail -n 1 "$LOGS/compose-up.log") ($LOGS/compose-logs.txt)"
        return 1
    fi
    # The workers' healthcheck runs every 15 s: healthy within ~20 s of their start.
    local end=$((SECONDS + 150))
    until all_healthy; do
        if [ "$SECONDS" -ge "$end" ]; then
            "${DC[@]}" logs --no-color > "$LOGS/compose-logs.txt" 2>&1
            bad "still pending after 150 s: all 4 containers healthy; now: $(health_summary)($LOGS/compose-logs.txt)"
            return 1
        fi
        sleep 1
    done
    NOTE="$(health_summary)"
}

s_compose_tasks() {
    local url
    url="$(sed "s#@rabbitmq:5672/#@127.0.0.1:$V4FLEET_AMQP_PORT/#" "$WORK/compose/secrets/amqp_url")"
    submit_and_check "$url" compose
}

s_compose_http() {
    local id p code m n=0
    for id in $(compose_ids worker-cpu); do
        for p in healthz readyz; do
            code="$(docker exec "$id" curl -s -o /dev/null -m 5 -w '%{http_code}' "http://127.0.0.1:9090/$p")"
            [ "$code" = 200 ] || { bad "worker ${id:0:12}: /$p answered $code"; return 1; }
        done
        docker exec "$id" curl -fsS -m 5 http://127.0.0.1:9090/metrics > "$LOGS/compose-metrics-$n.txt" 2>&1 ||
            { bad "worker ${id:0:12}: /metrics failed"; return 1; }
        m="$(check_metrics "$LOGS/compose-metrics-$n.txt" 0 0 1)" || { bad "worker ${id:0:12} /metrics: $m"; return 1; }
        n=$((n + 1))
    done
    [ "$n" -eq 2 ] || { bad "$n worker-cpu containers, expected 2"; return 1; }
    # The 4 tasks are spread over the workers: check the sum.
    cat "$LOGS"/compose-metrics-*.txt > "$LOGS/compose-metrics.txt"
    m="$(check_metrics "$LOGS/compose-metrics.txt" 3 1 2)" || { bad "/metrics (sum of both workers): $m"; return 1; }
    NOTE="2 workers: /healthz /readyz 200; $m"
}

s_compose_stop() {
    local ids id i=0 t0 ms
    mapfile -t ids < <(compose_ids worker-cpu)
    t0=$EPOCHREALTIME
    timeout 120 "${DC[@]}" stop worker-cpu > "$LOGS/compose-stop.log" 2>&1 ||
        { log_tail "$LOGS/compose-stop.log"; bad "docker-compose stop worker-cpu failed"; return 1; }
    ms="$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%d", (b - a) * 1000 }')"
    for id in "${ids[@]}"; do
        stopped_clean "$id" "$LOGS/compose-worker-$i.log" || return 1
        i=$((i + 1))
    done
    "${DC[@]}" logs --no-color > "$LOGS/compose-logs.txt" 2>&1
    timeout 180 "${DC[@]}" down -v --remove-orphans > "$LOGS/compose-down.log" 2>&1 ||
        { log_tail "$LOGS/compose-down.log"; bad "docker-compose down failed"; return 1; }
    COMPOSE_UP=0
    NOTE="$i workers exit 0 in $ms ms (stop_grace_period 45s); down -v"
}

# ---- k: the GPU image ------------------------------------------------------------------
s_cuda_base() {
    local dir nvcc base_id have want
    dir="$(readlink -f "$CUDA_DIR")"
    [ -x "$dir/bin/nvcc" ] || { bad "no CUDA toolkit at $CUDA_DIR (no bin/nvcc)"; return 1; }
    nvcc="$("$dir/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
    base_id="$(docker image inspect -f '{{.Id}}' "$BASE_IMAGE")"
    want="$base_id $dir $nvcc"
    have="$(docker image inspect -f '{{index .Config.Labels "io.v4fleet.cuda-base"}}' "$CUDA_BASE_IMAGE" 2> /dev/null)"
    if [ "$REBUILD" -eq 0 ] && [ "$have" = "$want" ]; then
        NOTE="reused $CUDA_BASE_IMAGE (CUDA $nvcc from $dir)"
        return 0
    fi
    build "$LOGS/build-cuda-base.log" "docker/Dockerfile.cuda-base" --build-arg BASE_IMAGE="$BASE_IMAGE" \
        --build-arg CUDA_HOME_DIR="/usr/local/$(basename "$dir")" --label "io.v4fleet.cuda-base=$want" \
        -f "$ROOT/docker/Dockerfile.cuda-base" -t "$CUDA_BASE_IMAGE" "$dir" || return 1
    NOTE="CUDA $nvcc from $dir ($(du -shL "$dir" | cut -f1) of context); $(cached "$LOGS/build-cuda-base.log")"
}

s_gpu_image() {
    local archs=()
    [ -z "$CUDA_ARCHS" ] || archs=(--build-arg CUDA_ARCHITECTURES="$CUDA_ARCHS")
    build "$LOGS/build-gpu.log" "docker/Dockerfile" --build-arg CUDA_DEVEL_IMAGE="$CUDA_BASE_IMAGE" \
        --build-arg CUDA_RUNTIME_IMAGE="$CUDA_BASE_IMAGE" "${archs[@]}" \
        -f "$ROOT/docker/Dockerfile" -t "$CUDA_IMAGE" "$ROOT" || return 1
    local os
    os="$(docker run --rm --network none --entrypoint sh "$CUDA_IMAGE" -c '. /etc/os-release && echo "$ID:$VERSION_ID"')"
    NOTE="$CUDA_IMAGE on $os; CUDA_ARCHITECTURES ${CUDA_ARCHS:-80;89;90 (default)}; $(cached "$LOGS/build-gpu.log")"
}

s_gpu_ldd() {
    docker run --rm --network none --entrypoint ldd "$CUDA_IMAGE" /usr/local/bin/v4fleet > "$LOGS/gpu-ldd.txt" 2>&1 ||
        { log_tail "$LOGS/gpu-ldd.txt"; bad "ldd in $CUDA_IMAGE failed"; return 1; }
    local missing cudalibs
    missing="$(grep 'not found' "$LOGS/gpu-ldd.txt" | grep -v 'libcuda\.so\.1' | awk '{ print $1 }' | tr '\n' ' ')"
    [ -z "$missing" ] || { bad "ldd: not found in $CUDA_IMAGE: $missing"; return 1; }
    cudalibs="$(grep -oE 'lib(cublas|cublasLt|cudart)\.so\.[0-9]+ => [^ ]+' "$LOGS/gpu-ldd.txt" | sed 's/ => /=/' | tr '\n' ' ')"
    # The binary loads and decodes on the CPU engine without a GPU or driver (the CUDA
    # runtime is linked statically and opens libcuda only when a CUDA device is asked for).
    local gen=()
    [ "${PASSED[mkmodel]:-0}" = 1 ] && gen=(-v "$WORK/models:/models:ro")
    if [ "${#gen[@]}" -gt 0 ]; then
        if ! docker run --rm --network none "${HARDENED[@]}" "${gen[@]}" \
                -v "$ROOT/scripts/demo_prompt.json:/prompt.json:ro" "$CUDA_IMAGE" \
                generate --model /models/tiny --prompt-ids /prompt.json --max-tokens 4 --greedy \
                > "$LOGS/gpu-generate.txt" 2>&1; then
            log_tail "$LOGS/gpu-generate.txt"
            bad "v4fleet generate (CPU engine) fails in $CUDA_IMAGE"
            return 1
        fi
    elif ! docker run --rm --network none "${HARDENED[@]}" "$CUDA_IMAGE" --help > "$LOGS/gpu-help.txt" 2>&1; then
        log_tail "$LOGS/gpu-help.txt"
        bad "v4fleet --help fails in $CUDA_IMAGE"
        return 1
    fi
    local nref ran="v4fleet --help runs"
    nref="$(grep -c 'libcuda\.so\.1' "$LOGS/gpu-ldd.txt")" || true
    [ "${#gen[@]}" -eq 0 ] || ran="generate (CPU engine, tiny model) runs without a GPU"
    NOTE="nothing missing (libcuda.so.1, the driver's: ${nref:-0} reference(s)); ${cudalibs:-no CUDA shared library}; $ran"
}

# ---- main ------------------------------------------------------------------------------
echo "container-check: work directory $WORK (logs in $LOGS)"
step deps "" s_deps
step dockerd deps s_dockerd
step base dockerd s_base
step cpu-image base s_cpu_image
step mkmodel cpu-image s_mkmodel
step brokers deps s_brokers
step run mkmodel,brokers s_run
step tasks run s_tasks
step http tasks s_http
step stop run s_stop
if [ "$COMPOSE" -eq 1 ]; then
    step broker-images base s_broker_images
    step compose-up broker-images,mkmodel s_compose_up
    step compose-tasks compose-up s_compose_tasks
    step compose-http compose-tasks s_compose_http
    step compose-stop compose-up s_compose_stop
else
    for s in broker-images compose-up compose-tasks compose-http compose-stop; do off "$s" "--no-compose"; done
fi
if [ "$GPU" -eq 1 ]; then
    step cuda-base base s_cuda_base
    step gpu-image cuda-base s_gpu_image
    step gpu-ldd gpu-image s_gpu_ldd
else
    for s in cuda-base gpu-image gpu-ldd; do off "$s" "--no-gpu"; done
fi

v4_section "cleanup"
what="${CONTAINERS[*]:+containers, }${DC[*]:+compose project + volumes, }"
[ "$BROKERS_UP" -eq 0 ] || what="${what}brokers, "
[ -z "$DOCKERD_PID" ] || what="${what}dockerd, "
t0=$EPOCHREALTIME
cleanup
record cleanup "done" "$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')" \
    "${what%, }"
total=0
for i in "${!S_SECS[@]}"; do total="$(awk -v a="$total" -v b="${S_SECS[$i]}" 'BEGIN { printf "%.1f", a + b }')"; done
table
printf '%-14s %-6s %8s\n' total "" "$total"
if [ "$NFAIL" -eq 0 ] && [ "$NSKIP" -eq 0 ]; then
    echo "container-check: all steps passed"
    if [ "$KEEP" -eq 1 ]; then echo "container-check: kept $WORK"; else rm -rf "$WORK"; fi
    exit 0
fi
echo "container-check: $NFAIL step(s) failed, $NSKIP skipped; logs kept in $LOGS"
exit 1
