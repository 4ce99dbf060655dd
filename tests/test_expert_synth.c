/* test_expert_synth.c - synthetic routed experts (cache/expert_synth.h):
 *   - block identity: for full `$V4_BIN mkmodel` checkpoints of the tiny and the small
 *     preset (small with --layers 2: 2.1 GB written to $V4_TMP, deleted at the end), the
 *     synthetic source's block of (layer, expert) equals the safetensors source's block
 *     byte for byte, for the first, last and some middle pairs (every pair for tiny);
 *     a different seed gives different bytes;
 *   - the source from 4 threads at once (every tiny block, each thread in its own
 *     order) gives the same bytes; counters add up;
 *   - errors: (layer, expert) outside the model, a misaligned destination, FP8 experts;
 *   - the throttle: 6 blocks at a rate of one block per 25 ms take at least 150 ms (a
 *     lower bound only: no timed assertion that a slow machine could break);
 *   - V4_SYNTH_EXPERT_MBPS parsing; the marker: written text loads back, absent = 0,
 *     malformed files are V4_ERR_CONFIG naming the file.
 * Set V4_SYNTH_SKIP_SMALL=1 to leave out the small preset (e.g. under slow sanitizers). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cache/expert_block.h"
#include "cache/expert_pack.h"
#include "cache/expert_synth.h"
#include "cache/model_files.h"
#include "testutil.h"

static int run(const char *cmd)
{
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Compare the synthetic and the safetensors blocks of the pairs (or every pair when
 * all); returns the number of differing pairs. */
static int compare(const char *label, const char *dir, uint64_t seed, int all)
{
    v4_error err = {0};
    v4_xsource *st = v4_st_source_open(dir, &err);
    CHECK(st != NULL, "%s: st source: %s: %s", label, err.where, err.msg);
    if (!st)
        return 1;
    v4_model_files m;
    CHECK(v4_model_open_ex(dir, &m, V4_OPEN_NO_PREPARE, &err) == 0, "%s: open: %s", label, err.msg);
    v4_xsource *sy = v4_synth_source_open(&m.cfg, seed, 0, &err);
    CHECK(sy != NULL, "%s: synth source: %s", label, err.msg);
    CHECK(sy && sy->block_bytes == st->block_bytes && sy->n_layers == st->n_layers && sy->n_experts == st->n_experts &&
              !strcmp(sy->kind, "synthetic"),
          "%s: source shapes differ", label);
    const int L = m.cfg.n_layers, E = m.cfg.n_routed_experts;
    const size_t B = st->block_bytes;
    uint8_t *a = aligned_alloc(V4_XBLOCK_ALIGN, B), *b = aligned_alloc(V4_XBLOCK_ALIGN, B);
    const int pairs[][2] = {{0, 0}, {0, E - 1}, {L - 1, 0}, {L - 1, E - 1}, {L / 2, E / 2}, {0, E / 3}, {L - 1, 2 * E / 3}};
    const int np = all ? L * E : (int)(sizeof pairs / sizeof pairs[0]);
    int bad = 0;
    for (int i = 0; sy && i < np; i++) {
        const int l = all ? i / E : pairs[i][0], e = all ? i % E : pairs[i][1];
        memset(a, 0x55, B);
        memset(b, 0xAA, B);
        int r1 = v4_xsource_read(st, l, e, a, &err), r2 = v4_xsource_read(sy, l, e, b, &err);
        if (r1 || r2 || memcmp(a, b, B)) {
            size_t at = 0;
            while (at < B && a[at] == b[at])
                at++;
            CHECK(0, "%s: layer %d expert %d: synthetic block differs (rc %d %d, first byte %zu of %zu)", label, l, e, r1, r2,
                  at, B);
            bad++;
        }
    }
    /* another seed: other bytes */
    v4_xsource *s2 = v4_synth_source_open(&m.cfg, seed + 1, 0, &err);
    CHECK(s2 && !v4_xsource_read(s2, 0, 0, b, &err) && !v4_xsource_read(st, 0, 0, a, &err) && memcmp(a, b, B),
          "%s: seed %llu gives the same block as seed %llu", label, (unsigned long long)seed + 1, (unsigned long long)seed);
    printf("%s: %d blocks of %zu bytes compared, %d differ\n", label, np, B, bad);
    v4_xsource_close(s2);
    v4_xsource_close(sy);
    v4_xsource_close(st);
    v4_model_close(&m);
    free(a);
    free(b);
    return bad;
}

/* ---- threads: each reads every block in its own order and compares with ref */

typedef struct thr {
    v4_xsource *s;
    const uint8_t *ref;         /* [L*E][B] */
    int n, stride, bad;
} thr;

static void *reader(void *arg)
{
    thr *t = arg;
    const size_t B = t->s->block_bytes;
    uint8_t *buf = aligned_alloc(V4_XBLOCK_ALIGN, B);
    v4_error err = {0};
    for (int k = 0; k < t->n; k++) {
        const int i = (int)(((long)k * t->stride) % t->n);
        if (!buf || v4_xsource_read(t->s, i / t->s->n_experts, i % t->s->n_experts, buf, &err) ||
            memcmp(buf, t->ref + (size_t)i * B, B))
            t->bad++;
    }
    free(buf);
    return NULL;
}

static void test_threads(const char *dir, uint64_t seed)
{
    v4_error err = {0};
    v4_model_files m;
    if (v4_model_open_ex(dir, &m, V4_OPEN_NO_PREPARE, &err)) {
        CHECK(0, "open %s: %s", dir, err.msg);
        return;
    }
    v4_xsource *s = v4_synth_source_open(&m.cfg, seed, 0, &err);
    const int n = m.cfg.n_layers * m.cfg.n_routed_experts;
    const size_t B = s ? s->block_bytes : 0;
    uint8_t *ref = s ? aligned_alloc(V4_XBLOCK_ALIGN, (size_t)n * B) : NULL;
    for (int i = 0; ref && i < n; i++)
        CHECK(!v4_xsource_read(s, i / m.cfg.n_routed_experts, i % m.cfg.n_routed_experts, ref + (size_t)i * B, &err),
              "read %d: %s", i, err.msg);
    thr t[4];
    pthread_t id[4];
    const int strides[4] = {1, 7, 13, 31};     /* coprime with 64: every block once */
    for (int k = 0; ref && k < 4; k++) {
        t[k] = (thr){.s = s, .ref = ref, .n = n, .stride = strides[k]};
        pthread_create(&id[k], NULL, reader, &t[k]);
    }
    int bad = 0;
    for (int k = 0; ref && k < 4; k++) {
        pthread_join(id[k], NULL);
        bad += t[k].bad;
    }
    CHECK(ref && bad == 0, "4 threads: %d blocks differ from the single-threaded reads", bad);
    v4_xsource_counters c;
    v4_xsource_get_counters(s, &c);
    CHECK(c.reads == 5ull * (uint64_t)n && c.bytes == c.reads * B && c.errors == 0 && c.buffered_reads == c.reads,
          "counters: %llu reads %llu bytes %llu errors (want %d reads)", (unsigned long long)c.reads,
          (unsigned long long)c.bytes, (unsigned long long)c.errors, 5 * n);
    /* errors */
    uint8_t *buf = aligned_alloc(V4_XBLOCK_ALIGN, B + V4_XBLOCK_ALIGN);
    memset(&err, 0, sizeof err);
    CHECK(v4_xsource_read(s, m.cfg.n_layers, 0, buf, &err) && err.code == V4_ERR_RANGE && strstr(err.msg, "outside"),
          "layer out of range: %d %s", err.code, err.msg);
    memset(&err, 0, sizeof err);
    CHECK(v4_xsource_read(s, 0, -1, buf, &err) && err.code == V4_ERR_RANGE, "expert -1: %d %s", err.code, err.msg);
    memset(&err, 0, sizeof err);
    CHECK(v4_xsource_read(s, 0, 0, buf + 64, &err) && err.code == V4_ERR_INVALID && strstr(err.msg, "aligned"),
          "misaligned destination: %d %s", err.code, err.msg);
    v4_xsource_get_counters(s, &c);
    CHECK(c.errors == 3, "error counter %llu, want 3", (unsigned long long)c.errors);
    v4_config c8 = m.cfg;
    c8.expert_fp4 = 0;
    memset(&err, 0, sizeof err);
    CHECK(!v4_synth_source_open(&c8, seed, 0, &err) && err.code == V4_ERR_CONFIG && strstr(err.msg, "FP4"),
          "FP8 experts: %d %s", err.code, err.msg);
    /* the throttle: one block per 25 ms, 6 reads from one thread >= 150 ms */
    v4_xsource *ts = v4_synth_source_open(&m.cfg, seed, (double)B / 0.025, &err);
    const double t0 = now_s();
    int ok = ts != NULL;
    for (int i = 0; ok && i < 6; i++)
        ok = !v4_xsource_read(ts, 0, i, buf, &err) && !memcmp(buf, ref + (size_t)i * B, B);
    const double dt = now_s() - t0;
    CHECK(ok, "throttled reads failed or differ: %s", err.msg);
    CHECK(dt >= 0.149, "6 throttled reads took %.3f s, want >= 0.150 s", dt);
    printf("throttle: 6 blocks of %zu bytes at %.2f MB/s in %.3f s (>= 0.150)\n", B, (double)B / 0.025 / 1e6, dt);
    v4_xsource_close(ts);
    free(buf);
    free(ref);
    v4_xsource_close(s);
    v4_model_close(&m);
}

static void test_env_rate(void)
{
    v4_error err = {0};
    unsetenv("V4_SYNTH_EXPERT_MBPS");
    CHECK(v4_synth_rate_from_env(&err) == 0, "unset: not 0");
    setenv("V4_SYNTH_EXPERT_MBPS", "", 1);
    CHECK(v4_synth_rate_from_env(&err) == 0, "empty: not 0");
    setenv("V4_SYNTH_EXPERT_MBPS", "12.5", 1);
    CHECK(v4_synth_rate_from_env(&err) == 12.5e6, "12.5: %g", v4_synth_rate_from_env(&err));
    const char *bad[] = {"fast", "-3", "0", "3x", "nan"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("V4_SYNTH_EXPERT_MBPS", bad[i], 1);
        memset(&err, 0, sizeof err);
        CHECK(v4_synth_rate_from_env(&err) < 0 && err.code == V4_ERR_CONFIG && strstr(err.where, "V4_SYNTH_EXPERT_MBPS"),
              "'%s' accepted", bad[i]);
    }
    unsetenv("V4_SYNTH_EXPERT_MBPS");
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void test_marker(const char *root)
{
    char dir[1200], path[1300];
    snprintf(dir, sizeof dir, "%s/marker", root);
    snprintf(path, sizeof path, "%s/" V4_SYNTH_MARKER, dir);
    char cmd[1300];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    CHECK(run(cmd) == 0, "mkdir");
    v4_error err = {0};
    uint64_t seed = 0;
    CHECK(v4_synth_marker_load(dir, &seed, &err) == 0, "absent marker: not 0");
    char *text = v4_synth_marker_json(18446744073709551615ull);
    CHECK(text != NULL, "marker json");
    write_file(path, text ? text : "");
    free(text);
    CHECK(v4_synth_marker_load(dir, &seed, &err) == 1 && seed == 18446744073709551615ull, "round trip: seed %llu (%s)",
          (unsigned long long)seed, err.msg);
    const char *bad[] = {"{", "{\"format\": \"other\", \"version\": 1, \"seed\": \"1\"}",
                         "{\"format\": \"v4fleet-synthetic-experts\", \"version\": 2, \"seed\": \"1\"}",
                         "{\"format\": \"v4fleet-synthetic-experts\", \"version\": 1, \"seed\": 1}",
                         "{\"format\": \"v4fleet-synthetic-experts\", \"version\": 1, \"seed\": \"-1\"}",
                         "{\"format\": \"v4fleet-synthetic-experts\", \"version\": 1, \"seed\": \"99999999999999999999\"}",
                         "{\"format\": \"v4fleet-synthetic-experts\", \"version\": 1, \"seed\": \"\"}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file(path, bad[i]);
        memset(&err, 0, sizeof err);
        CHECK(v4_synth_marker_load(dir, &seed, &err) == -1 && err.code == V4_ERR_CONFIG && strstr(err.where, V4_SYNTH_MARKER),
              "malformed marker %zu accepted (%s)", i, err.msg);
    }
}

int main(void)
{
    const char *bin = getenv("V4_BIN");
    if (!bin || !*bin) {
        fprintf(stderr, "V4_BIN not set\n");
        return 77;
    }
    char root[1024], tiny[1100], small[1100], cmd[8192];
    snprintf(root, sizeof root, "%s/xsynth_c.%ld", t_env("V4_TMP", "/tmp"), (long)getpid());
    snprintf(tiny, sizeof tiny, "%s/tiny", root);
    snprintf(small, sizeof small, "%s/small", root);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && '%s' mkmodel --preset tiny --seed 11 --out '%s' --no-sync >/dev/null 2>&1",
             root, root, bin, tiny);
    if (run(cmd)) {
        fprintf(stderr, "mkmodel failed: %s\n", cmd);
        return 1;
    }
    CHECK(compare("tiny", tiny, 11, 1) == 0, "tiny blocks differ");
    test_threads(tiny, 11);
    test_env_rate();
    test_marker(root);
    if (!getenv("V4_SYNTH_SKIP_SMALL")) {
        snprintf(cmd, sizeof cmd, "'%s' mkmodel --preset small --layers 2 --seed 5 --out '%s' --no-sync >/dev/null 2>&1", bin,
                 small);
        CHECK(run(cmd) == 0, "mkmodel small failed: %s", cmd);
        CHECK(compare("small (2 layers)", small, 5, 0) == 0, "small blocks differ");
    } else {
        printf("SKIP: the small preset (V4_SYNTH_SKIP_SMALL is set)\n");
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    run(cmd);
    TEST_DONE();
}
