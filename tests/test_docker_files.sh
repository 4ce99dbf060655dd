#!/usr/bin/env bash
# test_docker_files.sh - checks docker/ (Dockerfiles, compose, k8s manifests) as far as a
# machine without a Docker engine allows.
#
# 1. A static checker (Python, below; yaml from /usr/bin/python3) on the real tree:
#    YAML parses; compose services, healthchecks, profiles, depends_on, secrets, volumes,
#    stop_grace_period > V4_GRACE_MS + V4_CONFIRM_TIMEOUT_MS, RabbitMQ consumer_timeout >
#    V4_DEADLINE_MS + grace + confirm, max_message_size >= V4_MAX_BODY_BYTES; every V4_*
#    name in docker files is a worker setting (KNOWN[] of config/worker_config.c), a
#    getenv() of the sources, a CMake option or a name of scripts/lib.sh; .env.example
#    documents every variable compose reads, with compose's defaults; Dockerfiles:
#    multi-stage, every FROM a build arg (BASE_IMAGE; CUDA_DEVEL_IMAGE/CUDA_RUNTIME_IMAGE)
#    whose default is a pinned base, no "# syntax=" line (BuildKit would pull it), non-root,
#    STOPSIGNAL, HEALTHCHECK on /healthz with curl installed, ENTRYPOINT/CMD, labels; both
#    runtime package lists (RUNTIME_PACKAGES_DEBIAN12 / _UBUNTU2404, picked by the base's
#    /etc/os-release) cover `ldd $V4_BIN` (soname -> package table; the Debian 12 column
#    is cross-checked with dpkg -S and the packages' dependencies with apt-cache depends
#    on this machine); .dockerignore keeps
#    the sources and drops secrets; k8s: kinds, probes, grace, GPU, secrets, KEDA target.
# 2. The same checker on mutated copies must fail, naming the broken rule (the checks
#    can fail).
# 3. `docker-compose config` (compose 1.29, parses without an engine) with .env.example
#    and all profiles, also with docker/compose.check.yml (which may change only builds and
#    secret paths); yamllint; shellcheck of docker/make-secrets.sh and
#    scripts/container-check.sh.
# 4. Against real brokers: a private RabbitMQ started with docker/rabbitmq/50-v4fleet.conf
#    and the users fragment make-secrets.sh writes (the node must boot with them, report
#    the configured consumer_timeout, accept the generated credentials); a Redis started
#    with the generated redis.conf answers compose's healthcheck command (and refuses it
#    with a wrong password); `v4fleet worker` run with exactly compose's resolved
#    environment and the generated secret files serves a task, answers compose's
#    healthcheck once it has the HTTP endpoint, and exits 0 on SIGTERM within V4_GRACE_MS;
#    the k8s ConfigMap's values pass the worker's settings validation.
# Not checked here: building and running the images (needs a Docker engine:
# scripts/container-check.sh does it, offline), hadolint (not packaged for Debian), the
# Ubuntu 24.04 package names, kubectl/KEDA schema validation.
# Needs: V4_BIN, V4_TMP; yamllint, docker-compose, shellcheck, rabbitmq-server,
# redis-server (V4_PACKAGES of scripts/lib.sh).  Missing tools are failures, not skips.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=tests/lib/brokers.sh
source "$ROOT/tests/lib/brokers.sh"
PY=/usr/bin/python3

# Broker part needs the conf lines of our files: read them before starting the node.
conf_lines() {   # FILE -> its "key = value" lines (comments and blank lines dropped)
    grep -v '^[[:space:]]*#' "$1" | grep -v '^[[:space:]]*$'
}

: "${V4_BIN:?V4_BIN must name the v4fleet binary}" "${V4_TMP:?V4_TMP must name a scratch directory}"
SECRETS="$(mktemp -d "$V4_TMP/docker_secrets.XXXXXX")"
bash "$ROOT/docker/make-secrets.sh" "$SECRETS/s" > /dev/null
EXTRA="$(conf_lines "$ROOT/docker/rabbitmq/50-v4fleet.conf")
$(conf_lines "$SECRETS/s/60-users.conf")"

# shellcheck disable=SC2317  # called by brokers.sh's EXIT trap
test_cleanup() {
    if [ -n "${wpid:-}" ]; then kill -9 "$wpid" 2>/dev/null || true; fi
    if [ -n "${redis_pid:-}" ]; then kill "$redis_pid" 2>/dev/null || true; fi
    rm -rf "$SECRETS"
}
brokers_test_begin docker_files private "$EXTRA"

cat > "$WORK/check.py" <<'PY'
"""Static checks of docker/ against the worker's settings and binary (see the .sh header).
Usage: check.py ROOT LDD_OUTPUT_FILE [COMPOSE_CONFIG_OUTPUT]; prints ok:/FAIL: lines."""
import fnmatch, os, re, subprocess, sys
import yaml

root, ldd_file = sys.argv[1], sys.argv[2]
compose_resolved = sys.argv[3] if len(sys.argv) > 3 else None
fails = []

def fail(msg):
    fails.append(msg)
    print("FAIL: " + msg)

def ok(msg):
    print("ok: " + msg)

def rd(rel):
    with open(os.path.join(root, rel), encoding="utf-8") as f:
        return f.read()

def ms(duration):   # compose duration ("45s", "1m30s", "500ms") -> ms
    total, pos = 0, 0
    for m in re.finditer(r"(\d+(?:\.\d+)?)(ms|us|h|m|s)", duration):
        total += float(m.group(1)) * {"h": 3600e3, "m": 60e3, "s": 1e3, "ms": 1, "us": 1e-3}[m.group(2)]
        pos += len(m.group(0))
    if pos != len(duration) or not duration:
        raise ValueError("bad duration %r" % duration)
    return total

# ---- the worker's settings and their defaults (config/worker_config.c) --------------
wc = rd("config/worker_config.c")
m = re.search(r"KNOWN\[\]\s*=\s*\{(.*?)\};", wc, re.S)
KNOWN = set(re.findall(r'"(V4_[A-Z0-9_]+)"', m.group(1))) if m else set()
if not KNOWN:
    fail("config/worker_config.c: no KNOWN[] list of settings found")
DEFAULTS = {}
for name, val in re.findall(r'get_(?:long|int)\(src,\s*"(V4_\w+)",\s*([^,]+),', wc):
    if re.fullmatch(r"[\d\s<L()]+", val):
        DEFAULTS[name] = int(eval(val.replace("L", "")))
for name, val in re.findall(r'get_str\(src,\s*"(V4_\w+)",\s*"([^"]*)"', wc):
    DEFAULTS[name] = val
# Settings being added in parallel work (issue 7 observability: the HTTP endpoint).
# Accepted before they reach KNOWN[]; the note below says when one still is missing.
PENDING = {"V4_HTTP_PORT": 9090}
for k, v in PENDING.items():
    DEFAULTS.setdefault(k, v)
    if k not in KNOWN:
        print("note: %s is not in KNOWN[] yet (pending: the worker's HTTP endpoint)" % k)
SETTINGS = KNOWN | set(PENDING)
# Other V4_* names that may appear: getenv() in the sources, CMake options, build-script names.
OTHER = set()
for d in ("config", "cache", "kernels", "telemetry", "queue", "worker"):
    for dp, _, files in os.walk(os.path.join(root, d)):
        for f in files:
            if f.endswith(".c"):
                with open(os.path.join(dp, f), encoding="utf-8", errors="replace") as fh:
                    OTHER |= set(re.findall(r'getenv\("(V4_[A-Z0-9_]+)"\)', fh.read()))
OTHER |= set(re.findall(r"option\((V4_[A-Z0-9_]+)", rd("CMakeLists.txt")))
OTHER |= set(re.findall(r"^(V4_[A-Z0-9_]+)=", rd("scripts/lib.sh"), re.M))
OTHER |= {"V4_CUDA"}          # CMake option being added by the CUDA backend work (issue 6)

def is_setting(name):
    return name in SETTINGS or (name.endswith("_FILE") and name[:-5] in SETTINGS)

docker_files = []
for dp, dns, files in os.walk(os.path.join(root, "docker")):
    dns[:] = [d for d in dns if d != "secrets"]
    docker_files += [os.path.join(dp, f) for f in files if f != ".env"]
docker_files.append(os.path.join(root, ".dockerignore"))
bad = set()
for p in docker_files:
    with open(p, encoding="utf-8") as fh:
        for name in set(re.findall(r"\b(V4_[A-Z0-9_]+)\b", fh.read())):
            if not (is_setting(name) or name in OTHER):
                bad.add("%s in %s" % (name, os.path.relpath(p, root)))
for b in sorted(bad):
    fail("unknown setting %s (not in config/worker_config.c KNOWN[], not a getenv/CMake/lib.sh name)" % b)
if not bad:
    ok("every V4_* name in docker files is a known setting or build name")

# ---- YAML ----------------------------------------------------------------------------
docs = {}
for p in docker_files:
    if p.endswith((".yml", ".yaml")):
        try:
            with open(p, encoding="utf-8") as fh:
                docs[os.path.relpath(p, root)] = [d for d in yaml.safe_load_all(fh) if d is not None]
        except yaml.YAMLError as e:
            fail("%s does not parse: %s" % (os.path.relpath(p, root), e))
ok("%d YAML files parse" % len(docs))

# ---- .env.example --------------------------------------------------------------------
env_lines = rd("docker/.env.example").splitlines()
ENV = {}
for i, line in enumerate(env_lines):
    mm = re.match(r"^([A-Z][A-Z0-9_]*)=(.*)$", line)
    if not mm:
        continue
    ENV[mm.group(1)] = mm.group(2)
    if i == 0 or not env_lines[i - 1].startswith("#"):
        fail(".env.example: %s has no comment line above it (undocumented)" % mm.group(1))
    if mm.group(1).startswith("V4_") and not is_setting(mm.group(1)):
        fail(".env.example: %s is not a worker setting" % mm.group(1))
    if mm.group(1) in DEFAULTS and mm.group(1) not in ("V4_MODEL_DIR",) and \
            str(DEFAULTS[mm.group(1)]) != mm.group(2):
        fail(".env.example: %s=%s differs from the worker's default %s" % (mm.group(1), mm.group(2), DEFAULTS[mm.group(1)]))

def eff(name):   # effective value of a worker setting in the compose deployment
    return int(ENV.get(name, DEFAULTS.get(name)))

# ---- compose -------------------------------------------------------------------------
compose_text = rd("docker/compose.yml")
cvars = {}
for name, default in re.findall(r"\$\{([A-Z][A-Z0-9_]*)(?::?-([^}]*))?\}", re.sub(r"\$\$", "", compose_text)):
    cvars[name] = default
for name, default in sorted(cvars.items()):
    if name not in ENV:
        fail("compose.yml reads ${%s} but .env.example does not document it" % name)
    elif ENV[name] != default:
        fail("compose.yml default of %s (%r) differs from .env.example (%r)" % (name, default, ENV[name]))
for name in ENV:
    if name not in cvars:
        fail(".env.example documents %s but compose.yml does not read it" % name)
# Interpolate ${VAR:-default} as compose does (with .env.example's values), keep $$.
compose = yaml.safe_load(re.sub(r"(?<!\$)\$\{([A-Z][A-Z0-9_]*)(?::?-([^}]*))?\}",
                                lambda x: ENV.get(x.group(1), x.group(2) or ""), compose_text)) or {}
svcs = compose.get("services", {})
for s in ("rabbitmq", "redis", "worker", "worker-cpu"):
    if s not in svcs:
        fail("compose: service %s missing" % s)
    elif not (svcs[s].get("healthcheck") or {}).get("test"):
        fail("compose: service %s has no healthcheck" % s)
rmq = svcs.get("rabbitmq", {})
if not re.match(r"^rabbitmq:3\.\d+(\.\d+)?-management", ENV.get("V4FLEET_RABBITMQ_IMAGE", "")):
    fail("compose: RabbitMQ image is not a pinned rabbitmq:3.x-management (%r)" % ENV.get("V4FLEET_RABBITMQ_IMAGE"))
if "rabbitmq-diagnostics" not in " ".join(map(str, (rmq.get("healthcheck") or {}).get("test", []))):
    fail("compose: the rabbitmq healthcheck does not use rabbitmq-diagnostics")
if not re.match(r"^redis:7\.\d+", ENV.get("V4FLEET_REDIS_IMAGE", "")):
    fail("compose: Redis image is not a pinned redis:7.x (%r)" % ENV.get("V4FLEET_REDIS_IMAGE"))
grace, confirm = eff("V4_GRACE_MS"), eff("V4_CONFIRM_TIMEOUT_MS")
deadline, body = eff("V4_DEADLINE_MS"), eff("V4_MAX_BODY_BYTES")
for s, profile, dockerfile in (("worker", "gpu", "docker/Dockerfile"), ("worker-cpu", "cpu", "docker/Dockerfile.cpu")):
    w = svcs.get(s)
    if not w:
        continue
    if w.get("profiles") != [profile]:
        fail("compose: %s profiles %r, expected [%r]" % (s, w.get("profiles"), profile))
    if (w.get("build") or {}).get("dockerfile") != dockerfile or (w.get("build") or {}).get("context") != "..":
        fail("compose: %s does not build %s from the repository root" % (s, dockerfile))
    dep = w.get("depends_on") or {}
    for b in ("rabbitmq", "redis"):
        if not isinstance(dep, dict) or (dep.get(b) or {}).get("condition") != "service_healthy":
            fail("compose: %s does not wait for %s (depends_on condition service_healthy)" % (s, b))
    try:
        sg = ms(str(w.get("stop_grace_period", "")))
    except ValueError as e:
        sg = 0
        fail("compose: %s stop_grace_period: %s" % (s, e))
    if sg <= grace + confirm:
        fail("compose: %s stop_grace_period %s ms <= V4_GRACE_MS + V4_CONFIRM_TIMEOUT_MS = %d ms" % (s, sg, grace + confirm))
    if w.get("stop_signal", "SIGTERM") != "SIGTERM":
        fail("compose: %s stop_signal is not SIGTERM" % s)
    if "container_name" in w or "ports" in w:
        fail("compose: %s has container_name/ports: --scale %s=N would collide" % (s, s))
    targets = [str(v).split(":")[1] for v in w.get("volumes", []) if isinstance(v, str) and ":" in v]
    for t in ("/models", "/packs"):
        if t not in targets:
            fail("compose: %s mounts nothing at %s" % (s, t))
    env = w.get("environment") or {}
    for k in env:
        if not is_setting(k):
            fail("compose: %s environment %s is not a worker setting" % (s, k))
    for k in ("V4_AMQP_URL", "V4_REDIS_URL"):
        if k in env:
            fail("compose: %s passes %s in the environment (credentials must come from a secret file)" % (s, k))
        sec = env.get(k + "_FILE", "")
        if not sec.startswith("/run/secrets/") or sec[len("/run/secrets/"):] not in (w.get("secrets") or []):
            fail("compose: %s %s_FILE=%r is not one of its secrets" % (s, k, sec))
    labels = w.get("labels") or {}
    if labels.get("prometheus.io/scrape") != "true" or str(labels.get("prometheus.io/port")) != str(eff("V4_HTTP_PORT")):
        fail("compose: %s lacks prometheus.io scrape labels on V4_HTTP_PORT" % s)
    if [str(p) for p in w.get("expose", [])] != [str(eff("V4_HTTP_PORT"))]:
        fail("compose: %s does not expose V4_HTTP_PORT" % s)
    if "/healthz" not in " ".join(map(str, (w.get("healthcheck") or {}).get("test", []))):
        fail("compose: %s healthcheck does not probe /healthz" % s)
    devs = (((w.get("deploy") or {}).get("resources") or {}).get("reservations") or {}).get("devices") or []
    gpu = any(d.get("driver") == "nvidia" and "gpu" in d.get("capabilities", []) for d in devs)
    if profile == "gpu" and not gpu:
        fail("compose: %s has no nvidia GPU reservation" % s)
    if profile == "cpu" and devs:
        fail("compose: %s (cpu profile) reserves devices" % s)
for name, spec in (compose.get("secrets") or {}).items():
    if not str(spec.get("file", "")).startswith("./secrets/"):
        fail("compose: secret %s is not a file under docker/secrets/" % name)
    elif os.path.basename(spec["file"]) not in rd("docker/make-secrets.sh"):
        fail("compose: secret file %s is not written by docker/make-secrets.sh" % spec["file"])
# the broker's settings
conf_src = [v.split(":")[0] for v in rmq.get("volumes", []) if isinstance(v, str) and v.split(":")[0].endswith(".conf")]
if len(conf_src) != 1:
    fail("compose: rabbitmq mounts %d .conf files, expected 1" % len(conf_src))
else:
    conf = dict(re.findall(r"^\s*([a-z_.]+)\s*=\s*(\S+)", rd(os.path.normpath(os.path.join("docker", conf_src[0]))), re.M))
    ct = int(conf.get("consumer_timeout", 0))
    if ct <= deadline + grace + confirm:
        fail("rabbitmq.conf: consumer_timeout %d <= V4_DEADLINE_MS + V4_GRACE_MS + V4_CONFIRM_TIMEOUT_MS = %d" %
             (ct, deadline + grace + confirm))
    if int(conf.get("max_message_size", 0)) < body:
        fail("rabbitmq.conf: max_message_size %s < V4_MAX_BODY_BYTES %d" % (conf.get("max_message_size"), body))
    ok("rabbitmq.conf: consumer_timeout %d ms > %d ms; max_message_size %s" %
       (ct, deadline + grace + confirm, conf.get("max_message_size")))
if compose_resolved:   # `docker-compose config` output: what the engine would get
    with open(compose_resolved, encoding="utf-8") as fh:
        res = yaml.safe_load(fh)
    rs = res.get("services", {})
    if sorted(rs) != sorted(svcs):
        fail("docker-compose config: services %s, expected %s" % (sorted(rs), sorted(svcs)))
    for s in ("worker", "worker-cpu"):
        e = (rs.get(s) or {}).get("environment") or {}
        if str(e.get("V4_GRACE_MS")) != str(grace) or str(e.get("V4_HTTP_PORT")) != str(eff("V4_HTTP_PORT")):
            fail("docker-compose config: %s resolves V4_GRACE_MS/V4_HTTP_PORT to %r/%r" %
                 (s, e.get("V4_GRACE_MS"), e.get("V4_HTTP_PORT")))
ok("compose: services, healthchecks, profiles, depends_on, grace %d ms < stop_grace_period" % (grace + confirm))

# ---- Dockerfiles ---------------------------------------------------------------------
# soname -> (Debian 12 package, Ubuntu 24.04 package, -dev package).  None = libc6.
SONAMES = {
    "libjansson.so.4": ("libjansson4", "libjansson4", "libjansson-dev"),
    "libpcre2-8.so.0": ("libpcre2-8-0", "libpcre2-8-0", "libpcre2-dev"),
    "librabbitmq.so.4": ("librabbitmq4", "librabbitmq4", "librabbitmq-dev"),
    "libhiredis.so.0.14": ("libhiredis0.14", None, "libhiredis-dev"),
    "libhiredis.so.1.1.0": (None, "libhiredis1.1.0", "libhiredis-dev"),
    "libpng16.so.16": ("libpng16-16", "libpng16-16t64", "libpng-dev"),
    "libxxhash.so.0": ("libxxhash0", "libxxhash0", "libxxhash-dev"),
    "libuv.so.1": ("libuv1", "libuv1t64", "libuv1-dev"),
    # dependencies of the packages above (librabbitmq4 -> libssl3, libpng -> zlib1g)
    "libssl.so.3": ("libssl3", "libssl3t64", None),
    "libcrypto.so.3": ("libssl3", "libssl3t64", None),
    "libz.so.1": ("zlib1g", "zlib1g", None),
    # C++ runtime (linked when a C++/CUDA translation unit is present)
    "libstdc++.so.6": ("libstdc++6", "libstdc++6", None),
    "libgcc_s.so.1": ("libgcc-s1", "libgcc-s1", None),
}
LIBC = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1"}
# In debian:12-slim and every Ubuntu 24.04 image already (apt itself depends on them).
BASE = {"libc6", "libgcc-s1", "libstdc++6"}
# Sanitizer runtimes: only in the ASan/UBSan test build, never in an image.
SAN = re.compile(r"^lib(asan|ubsan|tsan|lsan)\.so")
CUDA = re.compile(r"^lib(cudart|cublas|cublasLt|cuda|nvrtc|nvJitLink)\.so")
needed = {}
with open(ldd_file, encoding="utf-8") as fh:
    for line in fh:
        mm = re.match(r"^\s*(\S+)\s+=>\s+(\S+)", line)
        if mm:
            needed[mm.group(1)] = mm.group(2)
if not needed:
    fail("ldd output %s lists no libraries" % ldd_file)
if any(SAN.match(s) for s in needed):
    print("note: %s is a sanitizer build; its sanitizer runtimes are not image libraries" % ldd_file)
unknown = [s for s in needed if s not in SONAMES and s not in LIBC and not CUDA.match(s) and not SAN.match(s)]
for s in unknown:
    fail("ldd: %s is linked but not in the soname table of this test: add its Debian/Ubuntu runtime "
         "packages there and to RUNTIME_PACKAGES_DEBIAN12/_UBUNTU2404 of both Dockerfiles" % s)
# The Debian column must be what dpkg says on this (Debian 12) machine.
for s, path in needed.items():
    if s in SONAMES and SONAMES[s][0] and os.path.exists(path):
        r = subprocess.run(["dpkg", "-S", os.path.realpath(path)], capture_output=True, text=True)
        if r.returncode != 0:
            r = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
        pkg = r.stdout.split(":")[0] if r.returncode == 0 else None
        if pkg != SONAMES[s][0]:
            fail("soname table: %s is in package %r here, the table says %r" % (s, pkg, SONAMES[s][0]))

V4_PACKAGES = re.search(r"V4_PACKAGES=\((.*?)\)", rd("scripts/lib.sh"), re.S).group(1).split()

def dockerfile(rel, base_re, cuda, base_args):
    text = rd(rel)
    if re.match(r"^#\s*syntax\s*=", text):
        fail("%s: has a '# syntax=' line (BuildKit would pull the frontend from a registry)" % rel)
    lines = re.sub(r"\\\n", " ", text).splitlines()
    ins = [(l.split(None, 1)[0].upper(), l.split(None, 1)[1] if len(l.split(None, 1)) > 1 else "")
           for l in lines if l.strip() and not l.lstrip().startswith("#")]
    args = {}
    for k, v in ins:
        if k == "ARG" and "=" in v:
            a, b = v.split("=", 1)
            args[a.strip()] = b.strip().strip('"')
    def subst(v):   # ARG defaults may use earlier ARGs: substitute until nothing changes
        for _ in range(8):
            w = re.sub(r"\$\{(\w+)\}", lambda x: args.get(x.group(1), x.group(0)), v)
            if w == v:
                break
            v = w
        return v
    froms = [i for i, (k, _) in enumerate(ins) if k == "FROM"]
    if len(froms) < 2:
        return fail("%s: not multi-stage (%d FROM)" % (rel, len(froms)))
    # Every stage's base is a build argument (offline builds swap in an imported base).
    for i, want in zip(froms, base_args):
        if ins[i][1].split()[0] != "${%s}" % want:
            fail("%s: FROM %s does not take its image from the build arg %s" % (rel, ins[i][1].split()[0], want))
    images = [subst(ins[i][1]).split()[0] for i in froms]
    if not re.search(r"\s+AS\s+build\b", ins[froms[0]][1], re.I):
        fail("%s: the first stage is not named build" % rel)
    for img in images:
        if not re.match(base_re, img) or img.endswith(":latest") or ":" not in img:
            fail("%s: base image %s is not pinned/expected (%s)" % (rel, img, base_re))
    if cuda and not ("-devel-" in images[0] and "-runtime-" in images[-1] and
                     images[0].replace("-devel-", "-runtime-") == images[-1]):
        fail("%s: build/runtime images are not the matching CUDA devel/runtime pair: %s" % (rel, images))
    final = ins[froms[-1]:]
    def last(kind):
        v = [x for k, x in final if k == kind]
        return v[-1] if v else None
    user = last("USER")
    if not user or user.split(":")[0] in ("root", "0"):
        fail("%s: the runtime stage does not switch to a non-root USER" % rel)
    elif user.split(":")[0] != "10001":
        fail("%s: USER %s, the k8s manifests assume 10001" % (rel, user))
    if last("STOPSIGNAL") != "SIGTERM":
        fail("%s: STOPSIGNAL is not SIGTERM" % rel)
    hc = last("HEALTHCHECK") or ""
    if "/healthz" not in hc or "curl" not in hc:
        fail("%s: HEALTHCHECK does not curl /healthz" % rel)
    if (last("ENTRYPOINT") or "").replace(" ", "") != '["v4fleet"]' or (last("CMD") or "").replace(" ", "") != '["worker"]':
        fail('%s: ENTRYPOINT/CMD are not ["v4fleet"] / ["worker"]' % rel)
    if "org.opencontainers.image.title" not in " ".join(x for k, x in final if k == "LABEL"):
        fail("%s: no org.opencontainers labels" % rel)
    if str(eff("V4_HTTP_PORT")) not in (last("EXPOSE") or ""):
        fail("%s: does not EXPOSE V4_HTTP_PORT" % rel)
    if not any(k == "RUN" and "ldd /usr/local/bin/v4fleet" in x and "not found" in x for k, x in final):
        fail("%s: no ldd guard for missing libraries in the runtime stage" % rel)
    if not any(k == "RUN" and "source scripts/lib.sh" in x for k, x in ins[:froms[1]]):
        fail("%s: the build stage does not take its packages from scripts/lib.sh" % rel)
    test_only = args.get("TEST_ONLY_PACKAGES", "").split()
    build_pkgs = [p for p in V4_PACKAGES if p not in test_only]
    # Two runtime lists, picked in the RUN by the base's /etc/os-release: Debian 12 (col 0,
    # checked with apt-cache here) and Ubuntu 24.04 (col 1, from the table).
    lists = ((0, "RUNTIME_PACKAGES_DEBIAN12", "debian:12"), (1, "RUNTIME_PACKAGES_UBUNTU2404", "ubuntu:24.04"))
    pick = [x for k, x in final if k == "RUN" and "/etc/os-release" in x and "--no-install-recommends" in x]
    if not pick:
        fail("%s: no RUN picks the runtime packages by /etc/os-release with --no-install-recommends" % rel)
    for col, name, distro in lists:
        if pick and not ("${%s}" % name in pick[0] and distro in pick[0]):
            fail("%s: the runtime RUN does not install %s for %s" % (rel, name, distro))
        runtime = args.get(name, "").split()
        if not runtime:
            fail("%s: no %s" % (rel, name))
            continue
        for p in runtime:
            if p.endswith("-dev"):
                fail("%s: runtime stage installs a -dev package %s" % (rel, p))
        if "curl" not in runtime:
            fail("%s: HEALTHCHECK uses curl but curl is not in %s" % (rel, name))
        covered = set(runtime) | BASE
        if col == 0:   # Debian: add the dependencies apt would pull, as apt-cache says here
            r = subprocess.run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
                                "--no-breaks", "--no-replaces", "--no-enhances"] + runtime, capture_output=True, text=True)
            if r.returncode != 0:
                fail("apt-cache depends failed: %s" % r.stderr.strip())
            covered |= {l.strip() for l in r.stdout.splitlines() if l and not l.startswith(" ")}
        else:          # Ubuntu (not checkable here): the dependencies named in the table
            covered |= {"libssl3t64", "zlib1g"}
        for s in needed:
            if s in LIBC or SAN.match(s):
                continue
            if CUDA.match(s):   # CUDA runtime image (cuBLAS...) or the host driver; the CPU image builds without
                continue
            if s not in SONAMES:
                continue
            pkg = SONAMES[s][col]
            if pkg is None:   # this soname cannot come from this distribution (e.g. hiredis 0.14 vs 1.1)
                alt = [t for t, v in SONAMES.items() if t.split(".so")[0] == s.split(".so")[0] and v[col]]
                pkg = SONAMES[alt[0]][col] if alt else None
            if pkg not in covered:
                fail("%s: %s (package %s) is not covered by %s" % (rel, s, pkg, name))
            dev = SONAMES[s][2]
            if dev and dev not in build_pkgs:
                fail("%s: build stage lacks %s for %s (V4_PACKAGES minus TEST_ONLY_PACKAGES)" % (rel, dev, s))
    if not cuda and not any(k == "RUN" and "-DV4_CUDA=OFF" in x for k, x in ins[:froms[1]]):
        fail("%s: the CPU image does not configure with -DV4_CUDA=OFF" % rel)
    runtime = args.get("RUNTIME_PACKAGES_DEBIAN12", "").split()
    ok("%s: %s -> %s, runtime packages by /etc/os-release (Debian 12: %s)" % (rel, images[0], images[-1], " ".join(runtime)))

dockerfile("docker/Dockerfile", r"^nvidia/cuda:\d+\.\d+\.\d+-(devel|runtime)-ubuntu\d", True,
           ("CUDA_DEVEL_IMAGE", "CUDA_RUNTIME_IMAGE"))
dockerfile("docker/Dockerfile.cpu", r"^debian:12[.\d]*-slim$", False, ("BASE_IMAGE", "BASE_IMAGE"))
for rel in ("docker/Dockerfile.cuda-base", "docker/Dockerfile.brokers"):
    if re.match(r"^#\s*syntax\s*=", rd(rel)):
        fail("%s: has a '# syntax=' line (BuildKit would pull the frontend from a registry)" % rel)

# ---- .dockerignore -------------------------------------------------------------------
def di_regex(p):
    p = p.strip("/")
    out, i = "", 0
    while i < len(p):
        if p[i:i + 2] == "**":
            out, i = out + ".*", i + 2
        elif p[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif p[i] == "?":
            out, i = out + "[^/]", i + 1
        else:
            out, i = out + re.escape(p[i]), i + 1
    return re.compile("^" + out + "(/.*)?$")
pats = [l.strip() for l in rd(".dockerignore").splitlines() if l.strip() and not l.startswith("#")]
def ignored(path):
    res = False
    for p in pats:
        neg = p.startswith("!")
        if di_regex(p[1:] if neg else p).match(path):
            res = not neg
    return res
need = ["CMakeLists.txt", "scripts/lib.sh", "tests/CMakeLists.txt", "bench/CMakeLists.txt"]
for d in ("config", "cache", "kernels", "telemetry", "queue", "worker", "tests", "bench"):
    for dp, dns, files in os.walk(os.path.join(root, d)):
        dns[:] = [x for x in dns if x not in ("data", "fuzz")]
        need += [os.path.relpath(os.path.join(dp, f), root) for f in files
                 if f.endswith((".c", ".h", ".txt", ".json", ".cu", ".cuh", ".cpp"))]
hidden = [p for p in need if ignored(p)]
if hidden:
    fail(".dockerignore hides build inputs: %s" % " ".join(hidden[:8]))
for p in (".git", "build", "build-asan", "models/tiny", "docker/secrets/amqp_url", "docker/.env", "tests/data/golden"):
    if not ignored(p):
        fail(".dockerignore does not exclude %s" % p)
if not hidden:
    ok(".dockerignore: %d build inputs kept; .git, build trees, models, secrets excluded" % len(need))

# ---- k8s -----------------------------------------------------------------------------
k8s = {}
for rel, ds in docs.items():
    if rel.startswith("docker/k8s/"):
        for d in ds:
            k8s.setdefault(d.get("kind"), []).append((rel, d))
for kind in ("Deployment", "ConfigMap", "Secret", "ScaledObject", "TriggerAuthentication",
             "PodDisruptionBudget", "PersistentVolumeClaim", "Kustomization"):
    if kind not in k8s:
        fail("k8s: no %s" % kind)
def one(kind):
    return k8s.get(kind, [(None, {})])[0][1]
kust = one("Kustomization")
for r in kust.get("resources", []):
    if not os.path.exists(os.path.join(root, "docker/k8s", r)):
        fail("k8s: kustomization lists missing %s" % r)
    if "secret" in r:
        fail("k8s: kustomization applies %s (placeholder credentials)" % r)
cm = one("ConfigMap")
cmd = cm.get("data") or {}
for k in cmd:
    if not is_setting(k):
        fail("k8s: ConfigMap key %s is not a worker setting" % k)
    if k in ("V4_AMQP_URL", "V4_REDIS_URL"):
        fail("k8s: ConfigMap holds %s (a credential)" % k)
def kv(name):
    return int(cmd.get(name, DEFAULTS.get(name)))
dep = one("Deployment")
pod = ((dep.get("spec") or {}).get("template") or {})
ps = pod.get("spec") or {}
cs = ps.get("containers") or [{}]
c = cs[0]
ports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
def probe(name, path):
    pr = (c.get(name) or {}).get("httpGet") or {}
    port = ports.get(pr.get("port"), pr.get("port"))
    if pr.get("path") != path or port != kv("V4_HTTP_PORT"):
        fail("k8s: %s is not httpGet %s on V4_HTTP_PORT %d (%r on %r)" % (name, path, kv("V4_HTTP_PORT"), pr.get("path"), port))
probe("readinessProbe", "/readyz")
probe("livenessProbe", "/healthz")
tg = ps.get("terminationGracePeriodSeconds", 30)
if tg * 1000 <= kv("V4_GRACE_MS") + kv("V4_CONFIRM_TIMEOUT_MS"):
    fail("k8s: terminationGracePeriodSeconds %s s <= V4_GRACE_MS + V4_CONFIRM_TIMEOUT_MS" % tg)
res = c.get("resources") or {}
if int((res.get("limits") or {}).get("nvidia.com/gpu", 0)) < 1:
    fail("k8s: the worker has no nvidia.com/gpu limit")
if not any((e.get("configMapRef") or {}).get("name") == (cm.get("metadata") or {}).get("name") for e in c.get("envFrom", [])):
    fail("k8s: the worker does not take its environment from the ConfigMap")
env = {e["name"]: e for e in c.get("env", [])}
vols = {v["name"]: v for v in ps.get("volumes", [])}
mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
secrets = {(d.get("metadata") or {}).get("name"): d for _, d in k8s.get("Secret", [])}
for k in ("V4_AMQP_URL", "V4_REDIS_URL"):
    if k in env:
        fail("k8s: %s is set directly (credentials must be files)" % k)
    f = (env.get(k + "_FILE") or {}).get("value", "")
    d, base = os.path.dirname(f), os.path.basename(f)
    v = vols.get((mounts.get(d) or {}).get("name"), {})
    sec = (v.get("secret") or {})
    if not sec or base not in [i["path"] for i in sec.get("items", [])] or \
            base not in ((secrets.get(sec.get("secretName")) or {}).get("stringData") or {}):
        fail("k8s: %s_FILE=%r is not a key of a mounted Secret" % (k, f))
claims = {(d.get("metadata") or {}).get("name") for _, d in k8s.get("PersistentVolumeClaim", [])}
for t in ("/models", "/packs"):
    v = vols.get((mounts.get(t) or {}).get("name"), {})
    if (v.get("persistentVolumeClaim") or {}).get("claimName") not in claims or not mounts[t].get("readOnly"):
        fail("k8s: %s is not a read-only mount of a PVC defined in pvc.yaml" % t)
sc = ps.get("securityContext") or {}
if not sc.get("runAsNonRoot") or sc.get("runAsUser") != 10001:
    fail("k8s: pod securityContext is not runAsNonRoot with runAsUser 10001")
ann = (pod.get("metadata") or {}).get("annotations") or {}
if ann.get("prometheus.io/scrape") != "true" or str(ann.get("prometheus.io/port")) != str(kv("V4_HTTP_PORT")):
    fail("k8s: pod lacks prometheus.io scrape annotations on V4_HTTP_PORT")
labels = (pod.get("metadata") or {}).get("labels") or {}
pdb = one("PodDisruptionBudget")
sel = ((pdb.get("spec") or {}).get("selector") or {}).get("matchLabels") or {"-": "-"}
if any(labels.get(k) != v for k, v in sel.items()):
    fail("k8s: the PodDisruptionBudget selector does not match the worker pods")
so = one("ScaledObject").get("spec") or {}
if (so.get("scaleTargetRef") or {}).get("name") != (dep.get("metadata") or {}).get("name"):
    fail("k8s: ScaledObject does not target the worker Deployment")
trig = (so.get("triggers") or [{}])[0]
ta = one("TriggerAuthentication")
md = trig.get("metadata") or {}
if trig.get("type") != "rabbitmq" or md.get("queueName") != cmd.get("V4_TASK_QUEUE", DEFAULTS["V4_TASK_QUEUE"]) or \
        md.get("mode") != "QueueLength":
    fail("k8s: the ScaledObject trigger is not rabbitmq QueueLength on V4_TASK_QUEUE")
if (trig.get("authenticationRef") or {}).get("name") != (ta.get("metadata") or {}).get("name"):
    fail("k8s: the trigger's authenticationRef is not the TriggerAuthentication")
for ref in (ta.get("spec") or {}).get("secretTargetRef", []):
    if ref.get("key") not in ((secrets.get(ref.get("name")) or {}).get("stringData") or {}):
        fail("k8s: TriggerAuthentication references %s/%s, not in secret.example.yaml" % (ref.get("name"), ref.get("key")))
if not so.get("minReplicaCount", 0) <= so.get("maxReplicaCount", 100):
    fail("k8s: ScaledObject minReplicaCount > maxReplicaCount")
ok("k8s: kinds, probes, grace %s s, GPU limit, secrets as files, PVCs, KEDA on queue %s" % (tg, md.get("queueName")))

print("%d check failure(s)" % len(fails))
sys.exit(1 if fails else 0)
PY

# ---- 1. the real tree ---------------------------------------------------------------
for tool in yamllint docker-compose shellcheck; do
    command -v "$tool" > /dev/null || fail "$tool is not installed (V4_PACKAGES in scripts/lib.sh)"
done
ldd "$V4_BIN" > "$WORK/ldd.txt" || fail "ldd $V4_BIN failed"
if command -v docker-compose > /dev/null; then
    if docker-compose -f "$ROOT/docker/compose.yml" --env-file "$ROOT/docker/.env.example" \
            --profile gpu --profile cpu --profile tools config > "$WORK/compose.resolved.yml" 2> "$WORK/compose.err"; then
        echo "ok: docker-compose config (all profiles) accepts docker/compose.yml"
    else
        cat "$WORK/compose.err" >&2
        fail "docker-compose config rejects docker/compose.yml"
    fi
    # (compose 1.29's `config` ignores --profile: which services a profile starts is
    # checked statically, from each service's `profiles`.)
    # docker/compose.check.yml (scripts/container-check.sh's override) may change how
    # images are built and where the secret files are, nothing else of the services.
    if V4FLEET_CHECK_SECRETS_DIR=/nonexistent docker-compose -f "$ROOT/docker/compose.yml" \
            -f "$ROOT/docker/compose.check.yml" --env-file "$ROOT/docker/.env.example" \
            --profile gpu --profile cpu --profile tools config > "$WORK/compose.check.resolved.yml" 2> "$WORK/compose.err"; then
        if $PY - "$WORK/compose.resolved.yml" "$WORK/compose.check.resolved.yml" <<'PY'
import sys, yaml
a, b = (yaml.safe_load(open(f)) for f in sys.argv[1:3])
bad = []
for name in sorted(set(a["services"]) | set(b["services"])):
    sa, sb = (dict(x["services"].get(name) or {}) for x in (a, b))
    sa.pop("build", None), sb.pop("build", None)
    for k in sorted(set(sa) | set(sb)):
        if sa.get(k) != sb.get(k):
            bad.append("%s.%s" % (name, k))
if sorted(a.get("secrets", {})) != sorted(b.get("secrets", {})):
    bad.append("secrets")
for k, v in b.get("secrets", {}).items():
    if not str(v.get("file", "")).startswith("/nonexistent/"):
        bad.append("secrets.%s.file" % k)
if bad:
    print("compose.check.yml changes: " + ", ".join(bad))
    sys.exit(1)
PY
        then echo "ok: docker/compose.check.yml changes only builds and secret paths"
        else fail "docker/compose.check.yml changes more than builds and secret paths"
        fi
    else
        cat "$WORK/compose.err" >&2
        fail "docker-compose config rejects docker/compose.yml + docker/compose.check.yml"
    fi
fi
if ! $PY "$WORK/check.py" "$ROOT" "$WORK/ldd.txt" "$WORK/compose.resolved.yml"; then
    fail "static checks of docker/ (FAIL lines above)"
fi
if command -v yamllint > /dev/null; then
    yamllint -s -d '{extends: default, rules: {line-length: {max: 120}, document-start: disable,
        truthy: {check-keys: false}}}' "$ROOT/docker/compose.yml" "$ROOT/docker/k8s" || fail "yamllint"
fi
if command -v shellcheck > /dev/null; then
    shellcheck "$ROOT/docker/make-secrets.sh" || fail "shellcheck docker/make-secrets.sh"
    (cd "$ROOT" && shellcheck -x scripts/container-check.sh) || fail "shellcheck scripts/container-check.sh"
fi

# ---- 2. mutated copies must fail, naming the rule ------------------------------------
mutant() {   # mutant NAME FILE SED_EXPR EXPECTED_FAIL_SUBSTRING
    local name="$1" file="$2" expr="$3" want="$4" d="$WORK/mut-$1" out
    mkdir -p "$d"
    (cd "$ROOT" && cp -r --parents docker .dockerignore CMakeLists.txt scripts/lib.sh config cache kernels telemetry \
        queue worker tests/CMakeLists.txt bench/CMakeLists.txt "$d/")
    rm -rf "$d/docker/secrets" "$d/docker/.env"
    sed -i -e "$expr" "$d/$file"
    if cmp -s "$ROOT/$file" "$d/$file"; then
        fail "mutant $name: sed '$expr' changed nothing in $file"
        return
    fi
    if out="$($PY "$WORK/check.py" "$d" "$WORK/ldd.txt" 2>&1)"; then
        fail "mutant $name: the checker passed"
    elif ! grep -q "^FAIL: .*$want" <<< "$out"; then
        printf '%s\n' "$out" | grep '^FAIL' >&2
        fail "mutant $name: no FAIL line with '$want'"
    else
        echo "ok: mutant $name fails: $(grep -m1 "^FAIL: .*$want" <<< "$out")"
    fi
}
mutant grace docker/compose.yml 's/stop_grace_period: 45s/stop_grace_period: 35s/' 'stop_grace_period'
mutant ctimeout docker/rabbitmq/50-v4fleet.conf 's/^consumer_timeout = .*/consumer_timeout = 600000/' 'consumer_timeout'
mutant unknown docker/k8s/configmap.yaml 's/^  V4_LOG_LEVEL:/  V4_LOG_LEVL:/' 'unknown setting V4_LOG_LEVL'
mutant runtime docker/Dockerfile.cpu 's/ libxxhash0 / /' 'libxxhash.so.0'
mutant runtime_cuda docker/Dockerfile 's/ libpng16-16t64 / /' 'libpng16.so.16'
mutant runtime_cuda_debian docker/Dockerfile 's/ libuv1 / /' 'libuv.so.1 (package libuv1) is not covered by RUNTIME_PACKAGES_DEBIAN12'
mutant os_release docker/Dockerfile.cpu 's/:ubuntu:24.04)/:ubuntu:22.04)/' 'RUNTIME_PACKAGES_UBUNTU2404 for ubuntu:24.04'
mutant base_arg docker/Dockerfile.cpu 's/^FROM ${BASE_IMAGE} AS runtime/FROM debian:12.12-slim AS runtime/' 'build arg BASE_IMAGE'
mutant syntax docker/Dockerfile '1i # syntax=docker/dockerfile:1' "syntax="
mutant root docker/Dockerfile 's/^USER 10001:10001$/USER root/' 'non-root USER'
mutant readyz docker/k8s/deployment.yaml 's|path: /readyz|path: /healthz|' 'readinessProbe'
mutant kgrace docker/k8s/deployment.yaml 's/terminationGracePeriodSeconds: 60/terminationGracePeriodSeconds: 30/' \
    'terminationGracePeriodSeconds'
mutant ignore .dockerignore 's/^out$/queue/' 'hides build inputs'
mutant envdoc docker/.env.example '/^# I\/O threads/d' 'V4_IO_THREADS has no comment'
mutant depends docker/compose.yml 's/condition: service_healthy/condition: service_started/' 'service_healthy'
mutant keda docker/k8s/keda.yaml 's/queueName: tasks/queueName: jobs/' 'QueueLength on V4_TASK_QUEUE'
mutant gpu docker/compose.yml 's/driver: nvidia/driver: amd/' 'nvidia GPU reservation'

# ---- 3. make-secrets.sh: formats, modes, idempotent -----------------------------------
s="$SECRETS/s"
[ "$(stat -c %a "$s")" = 700 ] || fail "make-secrets.sh: $s is not mode 0700"
for f in 60-users.conf redis.conf amqp_url redis_url; do
    [ "$(stat -c %a "$s/$f")" = 644 ] || fail "make-secrets.sh: $f is not mode 0644"
done
grep -Eq '^amqp://v4fleet:[0-9a-f]{48}@rabbitmq:5672/$' "$s/amqp_url" || fail "make-secrets.sh: amqp_url format"
grep -Eq '^redis://:[0-9a-f]{48}@redis:6379/0$' "$s/redis_url" || fail "make-secrets.sh: redis_url format"
amqp_pass="$(sed -n 's/^default_pass = //p' "$s/60-users.conf")"
grep -q ":$amqp_pass@" "$s/amqp_url" || fail "make-secrets.sh: amqp_url and 60-users.conf disagree"
before="$(cat "$s"/*)"
bash "$ROOT/docker/make-secrets.sh" "$s" > /dev/null
[ "$before" = "$(cat "$s"/*)" ] || fail "make-secrets.sh: a second run changed existing secrets"

# ---- 4. the brokers with our configuration ------------------------------------------
ct="$(rmqctl eval 'application:get_env(rabbit, consumer_timeout).' 2>&1)"
want_ct="$(sed -n 's/^consumer_timeout = //p' "$ROOT/docker/rabbitmq/50-v4fleet.conf")"
[ "$ct" = "{ok,$want_ct}" ] || fail "RabbitMQ with 50-v4fleet.conf: consumer_timeout is '$ct', expected {ok,$want_ct}"
port="$(sed -E 's#.*:([0-9]+)/$#\1#' <<< "$V4_TEST_AMQP_URL")"
url="$(sed "s#@rabbitmq:5672/#@127.0.0.1:$port/#" "$s/amqp_url")"
if $PY - "$url" <<'PY'
import sys, pika
c = pika.BlockingConnection(pika.URLParameters(sys.argv[1]))
c.close()
PY
then echo "ok: RabbitMQ booted with docker/rabbitmq/50-v4fleet.conf + 60-users.conf; the generated amqp_url logs in"
else fail "the generated amqp_url does not log in to a RabbitMQ configured with 60-users.conf"
fi
if env HOME="$V4_TEST_BROKER_DIR/home" ERL_EPMD_PORT="$(cat "$V4_TEST_BROKER_DIR/epmd.port")" \
        "$(_brokers_sbin)/rabbitmq-diagnostics" -n "$(cat "$V4_TEST_BROKER_DIR/node")" -q check_port_connectivity \
        > "$WORK/diag.log" 2>&1; then
    echo "ok: rabbitmq-diagnostics check_port_connectivity (compose's healthcheck) passes on that node"
else
    cat "$WORK/diag.log" >&2
    fail "rabbitmq-diagnostics check_port_connectivity fails on a healthy node"
fi
# The worker with compose's environment (worker-cpu as `docker-compose config` resolves
# it from .env.example, nothing else inherited), its secrets as files (the generated URLs,
# host names pointed at the test brokers) and a tiny model at V4_MODEL_DIR: every value
# must pass the worker's validation, the credentials must work, one task must succeed,
# and SIGTERM must end it with status 0 well within stop_grace_period.
mkdir -p "$WORK/run-secrets"
printf '%s\n' "$url" > "$WORK/run-secrets/amqp_url"
rport="$(_brokers_free_port)"
sed "s#@redis:6379/#@127.0.0.1:$rport/#" "$s/redis_url" > "$WORK/run-secrets/redis_url"
redis-server "$s/redis.conf" --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$WORK" \
    --logfile "$WORK/redis2.log" &
redis_pid=$!
for _ in $(seq 1 50); do redis-cli -p "$rport" ping > /dev/null 2>&1 && break; sleep 0.1; done
mapfile -t cenv < <($PY - "$WORK/compose.resolved.yml" <<'PY'
import sys, yaml
for k, v in yaml.safe_load(open(sys.argv[1]))["services"]["worker-cpu"]["environment"].items():
    print("%s=%s" % (k, "" if v is None else v))
PY
)
[ "${#cenv[@]}" -gt 10 ] || fail "no worker-cpu environment from docker-compose config"
"$V4_BIN" mkmodel --out "$WORK/models/tiny" --preset tiny > /dev/null
hport="$(_brokers_free_port)"
env -i PATH="$PATH" HOME="$WORK" "${cenv[@]}" V4_MODEL_DIR="$WORK/models/tiny" V4_HTTP_PORT="$hport" \
    V4_AMQP_URL_FILE="$WORK/run-secrets/amqp_url" V4_REDIS_URL_FILE="$WORK/run-secrets/redis_url" \
    "$V4_BIN" worker > "$WORK/worker.log" 2>&1 &
wpid=$!
for _ in $(seq 1 100); do rmqctl list_queues name 2>/dev/null | grep -qx tasks && break; sleep 0.1; done
$PY "$ROOT/tests/lib/queue_client.py" "$url" task tasks '{"id":"dock1","prompt":"hello","max_tokens":4}' ||
    fail "cannot publish a task with the generated amqp_url (worker log: $(tail -n 3 "$WORK/worker.log"))"
r="$($PY "$ROOT/tests/lib/queue_client.py" "$url" result results 60 || true)"
if grep -q '"id": *"dock1"' <<< "$r" && grep -q '"status": *"succeeded"' <<< "$r"; then
    echo "ok: a worker with compose's environment and the generated secrets served a task"
else
    fail "worker with compose's environment: no succeeded result (got '$r')"
fi
hcw="$($PY - "$WORK/compose.resolved.yml" <<'PY'
import sys, yaml
print(yaml.safe_load(open(sys.argv[1]))["services"]["worker-cpu"]["healthcheck"]["test"][1].replace("$$", "$"))
PY
)"
if env V4_HTTP_PORT="$hport" sh -c "$hcw" 2> /dev/null; then
    echo "ok: compose's worker healthcheck ($hcw) passes against the running worker"
elif grep -q '"V4_HTTP_PORT"' "$ROOT/config/worker_config.c"; then
    fail "compose's worker healthcheck fails against a worker that has V4_HTTP_PORT: $hcw"
else
    echo "note: this worker has no HTTP endpoint yet (V4_HTTP_PORT not in KNOWN[]): healthcheck not exercised"
fi
t0=$(date +%s%N)
kill -TERM "$wpid"
wrc=0
wait "$wpid" || wrc=$?
wpid=
t1=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$wrc" -eq 0 ] || fail "worker exit status $wrc after SIGTERM"
grace_ms="$(sed -n 's/^V4_GRACE_MS=//p' "$ROOT/docker/.env.example")"
[ "$t1" -lt "$grace_ms" ] || fail "worker took $t1 ms to exit after SIGTERM (V4_GRACE_MS $grace_ms)"
echo "ok: SIGTERM -> exit 0 in $t1 ms"
for pw in "$amqp_pass" "$(sed -n 's/^requirepass //p' "$s/redis.conf")"; do
    if grep -qF "$pw" "$WORK/worker.log"; then fail "a generated password appears in the worker log"; fi
done
if [ "$status" -ne 0 ]; then tail -n 30 "$WORK/worker.log" >&2; fi

# The k8s ConfigMap's values pass the worker's validation: with them (and secret files
# of any URL) the worker gets past its settings and stops at the missing model directory
# (exit 1, naming config.json) instead of naming a setting (exit 2).
mapfile -t kenv < <($PY - "$ROOT/docker/k8s/configmap.yaml" <<'PY'
import sys, yaml
for k, v in yaml.safe_load(open(sys.argv[1]))["data"].items():
    print("%s=%s" % (k, v))
PY
)
krc=0
env -i PATH="$PATH" HOME="$WORK" "${kenv[@]}" V4_HTTP_PORT="$(_brokers_free_port)" \
    V4_AMQP_URL_FILE="$WORK/run-secrets/amqp_url" V4_REDIS_URL_FILE="$WORK/run-secrets/redis_url" timeout 60 "$V4_BIN" worker > "$WORK/k8s-worker.log" 2>&1 || krc=$?
if [ "$krc" -eq 1 ] && grep -q "config.json" "$WORK/k8s-worker.log" && ! grep -q "worker: V4_" "$WORK/k8s-worker.log"; then
    echo "ok: the ConfigMap's ${#kenv[@]} settings pass the worker's validation"
else
    fail "the worker rejects the ConfigMap's settings (exit $krc): $(cat "$WORK/k8s-worker.log")"
fi
hc="$($PY - "$ROOT/docker/compose.yml" <<'PY'
import sys, yaml
t = yaml.safe_load(open(sys.argv[1]))["services"]["redis"]["healthcheck"]["test"]
print(t[1].replace("$$", "$"))
PY
)"
hc_here="${hc//\/run\/secrets\/redis_conf/$s/redis.conf}"
hc_here="${hc_here//redis-cli /redis-cli -p $rport }"
if sh -c "$hc_here"; then
    echo "ok: compose's Redis healthcheck passes against redis-server started with the generated redis.conf"
else
    fail "compose's Redis healthcheck fails: $hc_here"
fi
printf 'requirepass wrong\n' > "$WORK/wrong.conf"
if sh -c "${hc_here//$s\/redis.conf/$WORK/wrong.conf}" 2> /dev/null; then
    fail "compose's Redis healthcheck passes with a wrong password"
fi
kill "$redis_pid"; wait "$redis_pid" 2>/dev/null || true; redis_pid=

# status: 0 from brokers_test_begin, 1 after any fail
# shellcheck disable=SC2154
if [ "$status" -eq 0 ]; then echo "test_docker_files: all checks passed"; fi
exit "$status"
