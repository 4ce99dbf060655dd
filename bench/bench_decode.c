/* bench_decode.c - decode throughput of the CPU engine against the machine's
 * measured memory read bandwidth.
 *
 *   bench_decode [--preset tiny|small|all] [--models DIR] [--tokens N] [--runs R]
 *                [--threads T] [--isa auto|scalar|avx2|avx512] [--no-prepare]
 *
 * For each preset it generates the synthetic model with `v4fleet mkmodel` (once, under
 * --models, default models/bench), pages the whole checkpoint in, measures the read
 * bandwidth (STREAM-like sum of 4 GiB, same thread count, median of 5), then decodes N tokens
 * from a fresh sequence R times (after 2 untimed warm-up tokens) and prints a table:
 * machine, config, tokens/s (median of runs), weight bytes read per token (trunk +
 * the distinct routed experts each step used, from the routing trace), achieved GB/s
 * and that as a % of the measured bandwidth.  Batch 1: one pass over the weights per
 * token is the floor of memory traffic, so % of bandwidth is the figure of merit.
 * The model is opened with v4_model_open, so the EXACT-mode matrices run in the
 * prepared R8 layout unless --no-prepare (or env V4_NO_PREPARE=1) keeps them
 * row-major; the config column says which ("r8" / "row-major").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cache/model_files.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/v4/model.h"
#include "membw.h"

#ifndef V4_BIN_PATH
#define V4_BIN_PATH "build/v4fleet"
#endif

typedef struct opts {
    const char *preset, *models, *isa;
    int tokens, runs, threads, no_prepare;
} opts;

static int ensure_model(const opts *o, const char *preset, char *dir, size_t cap)
{
    return v4_bench_ensure_model(V4_BIN_PATH, o->models, preset, "bench_decode", dir, cap);
}

static int bench_preset(const opts *o, const char *preset, double bw, const char *cpu)
{
    char dir[4096];
    if (ensure_model(o, preset, dir, sizeof dir))
        return -1;
    v4_model_files m;
    v4_error err = {0};
    if (o->no_prepare ? v4_model_open_ex(dir, &m, V4_OPEN_NO_PREPARE, &err) : v4_model_open(dir, &m, &err)) {
        fprintf(stderr, "bench_decode: %s: %s\n", err.where, err.msg);
        return -1;
    }
    v4_bench_page_in(m.ck);
    const v4_config *cfg = &m.cfg;
    int ntok = o->tokens > 0 ? o->tokens : (cfg->dim >= 2048 ? 8 : 256);
    v4_backend *be = v4_cpu_backend_create(o->threads, o->isa, &err);
    v4_ctx *c = be ? v4_ctx_create(&m.w, be, 1, &err) : NULL;
    v4_seq *s = c ? v4_seq_create(&m.w, ntok + 2, &err) : NULL;
    if (!s) {
        fprintf(stderr, "bench_decode: %s\n", err.msg);
        return -1;
    }
    int32_t *rid = calloc((size_t)cfg->n_layers * cfg->n_act_experts, 4);
    float *rw = calloc((size_t)cfg->n_layers * cfg->n_act_experts, 4);
    v4_trace tr = {0};
    tr.route_ids = rid;
    tr.route_w = rw;
    v4_trace *trp = &tr;
    float *logits = malloc(sizeof(float) * (size_t)cfg->vocab_size);
    uint64_t trunk = v4_step_trunk_bytes(&m.w), expert = v4_expert_bytes(&m.w.layers[0].experts[0]);
    double tps[64], bytes_sum = 0;
    int runs = o->runs < 1 ? 1 : o->runs > 64 ? 64 : o->runs, steps = 0;
    unsigned rng = 12345;
    for (int r = 0; r < runs; r++) {
        v4_seq_reset(s);
        double t0 = 0;
        for (int p = 0; p < ntok + 2; p++) {
            if (p == 2)
                t0 = v4_bench_now();
            rng = rng * 1103515245u + 12345u;
            int32_t tok = (int32_t)((rng >> 8) % (unsigned)cfg->vocab_size);
            if (v4_step(c, &s, &tok, 1, logits, &trp, &err)) {
                fprintf(stderr, "bench_decode: %s\n", err.msg);
                return -1;
            }
            if (p >= 2) {   /* distinct experts per layer this step */
                uint64_t used = 0;
                for (int l = 0; l < cfg->n_layers; l++)
                    for (int k = 0; k < cfg->n_act_experts; k++) {
                        int dup = 0;
                        for (int j = 0; j < k; j++)
                            dup |= rid[l * cfg->n_act_experts + j] == rid[l * cfg->n_act_experts + k];
                        used += !dup;
                    }
                bytes_sum += (double)(trunk + used * expert);
                steps++;
            }
        }
        tps[r] = ntok / (v4_bench_now() - t0);
    }
    double med = v4_bench_median(tps, runs), bpt = bytes_sum / steps, gbs = bpt * med / 1e9;
    printf("| %s | %s (%d layers, dim %d), %s, %d thr, %s | %.2f | %.3e | %.2f | %.1f%% |\n", cpu, preset,
           cfg->n_layers, cfg->dim, v4_cpu_backend_isa(be), o->threads,
           m.w.head.layout == V4_LAYOUT_R8 ? "r8" : "row-major", med, bpt, gbs, 100.0 * gbs / bw);
    fflush(stdout);
    free(rid); free(rw); free(logits);
    v4_seq_free(s);
    v4_ctx_free(c);
    be->ops->destroy(be);
    v4_model_close(&m);
    return 0;
}

int main(int argc, char **argv)
{
    opts o = {"all", "models/bench", "auto", 0, 3, 2, 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help")) {
            printf("usage: bench_decode [--preset tiny|small|all] [--models DIR] [--tokens N] [--runs R]\n"
                   "                    [--threads T] [--isa auto|scalar|avx2|avx512] [--no-prepare]\n");
            return 0;
        }
        if (!strcmp(a, "--no-prepare")) {
            o.no_prepare = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "bench_decode: %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--preset")) o.preset = v;
        else if (!strcmp(a, "--models")) o.models = v;
        else if (!strcmp(a, "--isa")) o.isa = v;
        else if (!strcmp(a, "--tokens")) o.tokens = atoi(v);
        else if (!strcmp(a, "--runs")) o.runs = atoi(v);
        else if (!strcmp(a, "--threads")) o.threads = atoi(v);
        else {
            fprintf(stderr, "bench_decode: unknown option %s\n", a);
            return 2;
        }
        i++;
    }
    char cpu[256];
    v4_bench_cpu_name(cpu, sizeof cpu);
    /* 4 GiB: well past any last-level cache (1 GiB reads partly hit a large L3 on
     * some EPYC hosts and overstate DRAM bandwidth by up to 40%). */
    double bw = v4_bench_read_bandwidth((size_t)4 << 30, o.threads, 5);
    printf("measured read bandwidth: %.2f GB/s (%d threads, 4 GiB sum, median of 5)\n\n", bw, o.threads);
    printf("| machine | config | tokens/s | bytes/token | GB/s | %% of read BW |\n|---|---|---|---|---|---|\n");
    int rc = 0;
    if (!strcmp(o.preset, "tiny") || !strcmp(o.preset, "all"))
        rc |= bench_preset(&o, "tiny", bw, cpu);
    if (!strcmp(o.preset, "small") || !strcmp(o.preset, "all"))
        rc |= bench_preset(&o, "small", bw, cpu);
    return rc ? 1 : 0;
}
