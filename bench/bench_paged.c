/* bench_paged.c - decode with paged experts: tokens/s, hit rate and bytes read per
 * token with the host expert cache at fractions of the routed-expert bytes, with the
 * router look-ahead on and off.
 *
 *   bench_paged [--preset small|tiny] [--models DIR] [--fracs 1,0.5,0.25] [--tokens N]
 *               [--runs R] [--threads T] [--policy lru|slru|lfru] [--source pack|safetensors]
 *               [--io-threads N] [--lookahead on,off|on|off]
 *
 * Generates the synthetic model with `v4fleet mkmodel` under --models (default
 * models/bench) and its expert pack with `v4fleet pack` (DIR/PRESET.pack) when missing.
 * Baseline: all experts resident (mapped checkpoint, paged in).  Then, for each
 * fraction f and each look-ahead setting (--lookahead, default both: on = the router
 * look-ahead of kernels/v4/moe.c prefetches the next score-routed layer's predicted
 * experts, v4_ctx_set_lookahead; off = only the hash layers' prefetch), a fresh host
 * cache of f x (layers x experts x block bytes): untimed warm-up passes of 4 x N tokens
 * (fill the cache), then R timed passes of N tokens with random token ids (batch 1; the
 * on and off runs of a fraction see the same ids).  Prints one table: machine, config,
 * cache, lookahead, tokens/s (median of R), hit rate (acquire hits / all acquired
 * experts, over the timed passes; prefetched blocks count as hits), MB read per token
 * (bytes the cache loaded / timed tokens), load latency p50 / p99, and the tokens/s
 * relative to resident.  The pack source reads with O_DIRECT (so misses
 * really go to the disk); the safetensors source copies from the mapped checkpoint
 * (page cache).  Speed is machine- and disk-dependent: quote medians of several runs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cache/expert_block.h"
#include "cache/expert_provider.h"
#include "cache/model_files.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/v4/model.h"
#include "membw.h"

#ifndef V4_BIN_PATH
#define V4_BIN_PATH "build/v4fleet"
#endif

typedef struct opts {
    const char *preset, *models, *fracs, *policy, *source, *lookahead;
    int tokens, runs, threads, io_threads;
} opts;

static int ensure(const char *check, const char *cmd)
{
    struct stat st;
    if (stat(check, &st) == 0)
        return 0;
    fprintf(stderr, "bench_paged: %s\n", cmd);
    return system(cmd) == 0 ? 0 : -1;
}

/* N tokens from a fresh sequence; returns seconds for the last N - 2 (or all if N < 3). */
static double pass(v4_ctx *c, v4_seq *s, int n, int vocab, unsigned *rng, float *logits, v4_error *err)
{
    v4_seq_reset(s);
    double t0 = v4_bench_now();
    for (int p = 0; p < n; p++) {
        *rng = *rng * 1103515245u + 12345u;
        int32_t tok = (int32_t)((*rng >> 8) % (unsigned)vocab);
        if (v4_step(c, &s, &tok, 1, logits, NULL, err))
            return -1;
    }
    return v4_bench_now() - t0;
}

int main(int argc, char **argv)
{
    opts o = {"small", "models/bench", "1,0.5,0.25", "next", "pack", "on,off", 8, 3, 2, 4};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help")) {
            printf("usage: bench_paged [--preset small|tiny] [--models DIR] [--fracs 1,0.5,0.25] [--tokens N]\n"
                   "                   [--runs R] [--threads T] [--policy lru|slru|lfru]\n"
                   "                   [--source pack|safetensors] [--io-threads N] [--lookahead on,off|on|off]\n");
            return 0;
        }
        if (!v) {
            fprintf(stderr, "bench_paged: %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--preset")) o.preset = v;
        else if (!strcmp(a, "--models")) o.models = v;
        else if (!strcmp(a, "--fracs")) o.fracs = v;
        else if (!strcmp(a, "--policy")) o.policy = v;
        else if (!strcmp(a, "--source")) o.source = v;
        else if (!strcmp(a, "--lookahead")) o.lookahead = v;
        else if (!strcmp(a, "--tokens")) o.tokens = atoi(v);
        else if (!strcmp(a, "--runs")) o.runs = atoi(v);
        else if (!strcmp(a, "--threads")) o.threads = atoi(v);
        else if (!strcmp(a, "--io-threads")) o.io_threads = atoi(v);
        else {
            fprintf(stderr, "bench_paged: unknown option %s\n", a);
            return 2;
        }
        i++;
    }
    if (o.tokens < 3 || o.runs < 1 || o.runs > 64) {
        fprintf(stderr, "bench_paged: --tokens >= 3, --runs in [1, 64]\n");
        return 2;
    }
    /* the look-ahead settings to run, in order: 1 = on, 0 = off */
    int las[2], n_la = 0;
    if (!strcmp(o.lookahead, "on,off") || !strcmp(o.lookahead, "on"))
        las[n_la++] = 1;
    if (!strcmp(o.lookahead, "on,off") || !strcmp(o.lookahead, "off"))
        las[n_la++] = 0;
    if (!strcmp(o.lookahead, "off,on")) {
        las[n_la++] = 0;
        las[n_la++] = 1;
    }
    if (!n_la) {
        fprintf(stderr, "bench_paged: --lookahead wants on,off, off,on, on or off, got '%s'\n", o.lookahead);
        return 2;
    }
    char dir[4096], pack[4200], check[4400], cmd[13000];
    snprintf(dir, sizeof dir, "%s/%s", o.models, o.preset);
    snprintf(pack, sizeof pack, "%s/%s.pack", o.models, o.preset);
    snprintf(check, sizeof check, "%s/config.json", dir);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && '%s' mkmodel --out '%s' --preset %s --seed 1 --force", o.models,
             V4_BIN_PATH, dir, o.preset);
    if (ensure(check, cmd))
        return 1;
    int use_pack = !strcmp(o.source, "pack");
    snprintf(check, sizeof check, "%s/manifest.json", pack);
    snprintf(cmd, sizeof cmd, "'%s' pack --model '%s' --out '%s' --force", V4_BIN_PATH, dir, pack);
    if (use_pack && ensure(check, cmd))
        return 1;

    v4_model_files m;
    v4_error err = {0};
    if (v4_model_open(dir, &m, &err)) {
        fprintf(stderr, "bench_paged: %s: %s\n", err.where, err.msg);
        return 1;
    }
    const v4_config *cfg = &m.cfg;
    v4_xblock_layout lo;
    v4_xblock_layout_of(cfg, &lo);
    const double all = (double)cfg->n_layers * cfg->n_routed_experts * (double)lo.bytes;
    v4_backend *be = v4_cpu_backend_create(o.threads, "auto", &err);
    v4_ctx *c = be ? v4_ctx_create(&m.w, be, 1, &err) : NULL;
    v4_seq *s = c ? v4_seq_create(&m.w, o.tokens, &err) : NULL;
    float *logits = malloc(sizeof(float) * (size_t)cfg->vocab_size);
    if (!s || !logits) {
        fprintf(stderr, "bench_paged: %s\n", err.msg);
        return 1;
    }
    char cpu[256];
    v4_bench_cpu_name(cpu, sizeof cpu);
    printf("bench_paged: %s (%d layers x %d experts, block %.2f MB, all experts %.2f GiB), %d tokens x %d runs, "
           "policy %s, source %s, look-ahead %s\n\n",
           o.preset, cfg->n_layers, cfg->n_routed_experts, lo.bytes / 1e6, all / 1073741824.0, o.tokens, o.runs,
           o.policy, o.source, o.lookahead);
    printf("| machine | config | cache | lookahead | tokens/s | hit rate | MB read/token | load p50 / p99 ms | "
           "vs resident |\n"
           "|---|---|---|---|---|---|---|---|---|\n");
    unsigned rng = 12345;
    double tps[64], resident = 0;
    /* baseline: resident (mapped, paged in by a warm-up pass) */
    pass(c, s, o.tokens, cfg->vocab_size, &rng, logits, &err);
    for (int r = 0; r < o.runs; r++)
        tps[r] = o.tokens / pass(c, s, o.tokens, cfg->vocab_size, &rng, logits, &err);
    resident = v4_bench_median(tps, o.runs);
    printf("| %s | %s, %d thr | resident (mapped) | - | %.2f | - | 0 | - | 1.00 |\n", cpu, o.preset, o.threads,
           resident);
    fflush(stdout);
    char list[256];
    snprintf(list, sizeof list, "%s", o.fracs);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        double f = atof(tok);
        if (!(f > 0 && f <= 1.5)) {
            fprintf(stderr, "bench_paged: bad fraction '%s'\n", tok);
            return 2;
        }
        const unsigned rng0 = rng;   /* each look-ahead setting: the same token ids */
        for (int li = 0; li < n_la; li++) {
            rng = rng0;
            v4_xprov_opts xo = {dir, use_pack ? pack : NULL, (size_t)(f * all) + lo.bytes, o.policy, o.io_threads,
                                0};
            v4_xprov *xp = v4_xprov_open(cfg, m.ck, &xo, &err);
            if (!xp) {
                fprintf(stderr, "bench_paged: cache %.0f%%: %s\n", 100 * f, err.msg);
                return 1;
            }
            v4_ctx_set_expert_provider(c, v4_xprov_provider(xp));
            v4_ctx_set_lookahead(c, las[li]);
            for (int w = 0; w < 4; w++)   /* warm-up: fill the cache */
                if (pass(c, s, o.tokens, cfg->vocab_size, &rng, logits, &err) < 0) {
                    fprintf(stderr, "bench_paged: %s\n", err.msg);
                    return 1;
                }
            v4_xcache_stats a, b;
            v4_xprov_stats(xp, &a);
            for (int r = 0; r < o.runs; r++) {
                double t = pass(c, s, o.tokens, cfg->vocab_size, &rng, logits, &err);
                if (t < 0) {
                    fprintf(stderr, "bench_paged: %s\n", err.msg);
                    return 1;
                }
                tps[r] = o.tokens / t;
            }
            v4_xprov_stats(xp, &b);
            double med = v4_bench_median(tps, o.runs), acq = (double)(b.hits - a.hits) + (double)(b.misses - a.misses);
            double mb = (double)(b.bytes_read - a.bytes_read) / 1e6 / ((double)o.tokens * o.runs);
            printf("| %s | %s, %d thr, %s, %d io thr | %.0f%% (%.2f GiB) | %s | %.2f | %.1f%% | %.1f | %.2f / %.2f | "
                   "%.2f |\n",
                   cpu, o.preset, o.threads, o.policy, o.io_threads, 100 * f, b.budget_bytes / 1073741824.0,
                   las[li] ? "on" : "off", med, acq > 0 ? 100.0 * (double)(b.hits - a.hits) / acq : 0.0, mb,
                   b.lat_p50_us / 1e3, b.lat_p99_us / 1e3, med / resident);
            fflush(stdout);
            v4_ctx_set_expert_provider(c, NULL);
            v4_xprov_close(xp);
        }
    }
    free(logits);
    v4_seq_free(s);
    v4_ctx_free(c);
    be->ops->destroy(be);
    v4_model_close(&m);
    return 0;
}
