/* bench_flash.c - greedy decode throughput of one model on one device (cpu or cuda),
 * against the device's memory bandwidth, and the CPU/GPU divergence check.
 *
 *   bench_flash --model DIR [--device cpu|cuda|cuda:N] [--tokens T] [--runs R]
 *               [--budgets LIST] [--threads N] [--bw GBPS] [--prompt-ids FILE]
 *   bench_flash --model DIR --diverge N [--device cuda] [--golden TOKENS.json]
 *
 * Bench mode: for each entry of --budgets (comma list; "all" = V4_GPU_EXPERT_MEM unset,
 * i.e. every expert resident on the GPU; anything else, e.g. "85%", is put in
 * V4_GPU_EXPERT_MEM before the engine is wired - v4_attach_experts reads it, and it
 * also picks the CUDA mode (V4_CUDA_MODE, default auto: the device-resident step when
 * every expert stays on the GPU and fits, hybrid + the GPU expert cache otherwise) as
 * `v4fleet generate` does) a fresh backend and context are made, one untimed warm-up generation runs (weights are uploaded to the GPU on first
 * use), then R generations of T greedy tokens (EOS ignored) from the same prompt through
 * the engine's generate path (worker/serve/generate.h, as `v4fleet generate`).  Per-token
 * time = decode seconds / (generated tokens - 1) of a run (the first id is sampled from
 * the prompt's last step, so T tokens are T-1 timed decode steps; T >= 2); the table
 * shows the median of the runs (and the min-max range).  bytes/token = the weights one decode step reads at
 * batch 1 (v4_step_trunk_bytes: every non-routed matrix of every layer incl. the shared
 * expert, the LM head, one embedding row; plus n_act routed experts per layer);
 * GB/s = bytes/token x tokens/s; % of peak = vs 4.8 TB/s (H200 HBM3e) for cuda, vs the
 * measured host read bandwidth (membw.c, or --bw) for cpu.  The cuda row also shows the
 * bytes of weights the backend holds on the GPU after the runs.
 *
 * Divergence mode: the same greedy generation of N tokens with --device cpu and with
 * --device (default cuda), from the same prompt; prints the first position where the
 * token ids differ, or "none in N".  With --golden (a golden set's tokens.json) the
 * prompt is its "prompt" and both runs are also compared with its "generated" ids.
 * Without a usable CUDA device (or build) the GPU side prints "no GPU: skipped".
 *
 * Exit: 0 = ran (or skipped for lack of a GPU), 1 = an engine error, 2 = usage.  The
 * divergence itself is reported, not turned into a failure (the caller decides).
 * Ownership: everything is created and freed in main's helpers.  Thread: main only.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/model_files.h"
#include "kernels/v4/model.h"
#include "config/device_setting.h"
#include "membw.h"
#include "worker/tools/cli_util.h"
#include "worker/serve/generate.h"
#ifdef V4_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

#define HBM_PEAK_GBS 4800.0
#define MAX_RUNS 64

typedef struct opts {
    const char *model, *device, *budgets, *prompt_ids, *golden;
    int tokens, runs, threads, diverge;
    double bw;
} opts;

typedef struct prompt {
    int32_t *ids;
    int n;
    int32_t *expect;    /* golden "generated" (NULL without --golden) */
    int n_expect;
} prompt;

static void usage(FILE *f)
{
    fprintf(f, "usage: bench_flash --model DIR [--device cpu|cuda|cuda:N] [--tokens T] [--runs R]\n"
               "                   [--budgets all,85%%] [--threads N] [--bw GBPS] [--prompt-ids FILE]\n"
               "       bench_flash --model DIR --diverge N [--device cuda] [--golden TOKENS.json]\n");
}

static int is_cuda(const char *dev) { return dev && !strncmp(dev, "cuda", 4); }

/* ------------------------------------------------------------------ prompt */

static int32_t *json_ids(json_t *a, int *n, int vocab)
{
    if (!json_is_array(a))
        return NULL;
    size_t len = json_array_size(a);
    int32_t *v = malloc(sizeof(int32_t) * (len + 1));
    for (size_t i = 0; v && i < len; i++) {
        json_t *x = json_array_get(a, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= vocab) {
            free(v);
            return NULL;
        }
        v[i] = (int32_t)json_integer_value(x);
    }
    *n = (int)len;
    return v;
}

static int load_prompt(const opts *o, int vocab, prompt *p)
{
    memset(p, 0, sizeof *p);
    if (o->golden) {
        json_error_t je;
        json_t *root = json_load_file(o->golden, 0, &je);
        if (!root) {
            fprintf(stderr, "bench_flash: %s: %s\n", o->golden, je.text);
            return -1;
        }
        p->ids = json_ids(json_object_get(root, "prompt"), &p->n, vocab);
        p->expect = json_ids(json_object_get(root, "generated"), &p->n_expect, vocab);
        json_decref(root);
        if (!p->ids || !p->expect || !p->n) {
            fprintf(stderr, "bench_flash: %s: wants \"prompt\" and \"generated\" arrays of ids < %d\n", o->golden,
                    vocab);
            return -1;
        }
        return 0;
    }
    if (o->prompt_ids) {
        v4_error err = {0};
        if (v4_read_ids_json(o->prompt_ids, &p->ids, &p->n, vocab, &err) || !p->n) {
            fprintf(stderr, "bench_flash: %s: %s\n", o->prompt_ids, p->n ? err.msg : "empty prompt");
            return -1;
        }
        return 0;
    }
    static const int32_t def[4] = {0, 1000, 2000, 3000};   /* BOS + 3 ids */
    p->ids = malloc(sizeof def);
    if (!p->ids)
        return -1;
    for (int i = 0; i < 4; i++)
        p->ids[i] = def[i] % vocab;
    p->n = 4;
    return 0;
}

static void prompt_free(prompt *p)
{
    free(p->ids);
    free(p->expect);
}

/* --------------------------------------------------------------- one engine */

typedef struct engine {
    v4_backend *be;
    v4_ctx *ctx;
    v4_seq *seq;
} engine;

static void engine_free(engine *e)
{
    v4_ctx_free(e->ctx);
    v4_seq_free(e->seq);
    if (e->be)
        e->be->ops->destroy(e->be);
    memset(e, 0, sizeof *e);
}

static int engine_open(engine *e, const v4_model_files *m, const char *device, int threads, int max_len,
                       v4_error *err)
{
    memset(e, 0, sizeof *e);
    v4_engine_opts eo = {0};
    eo.device = device;
    eo.threads = threads;
    struct v4_xprov *xp = NULL;   /* stays NULL: no host expert cache here */
    if (!(e->be = v4_open_backend(&eo, err)) || !(e->ctx = v4_ctx_create(&m->w, e->be, 1, err)) ||
        v4_attach_experts(&eo, e->be, (v4_model_files *)m, e->ctx, &xp, err) ||   /* GPU cache, CUDA mode */
        !(e->seq = v4_seq_create(&m->w, max_len, err))) {
        engine_free(e);
        return -1;
    }
    return 0;
}

/* Greedy generation of n tokens from a fresh sequence; res owns the ids. */
static int engine_run(engine *e, const prompt *p, int n, v4_gen_result *res, v4_error *err)
{
    v4_seq_reset(e->seq);
    v4_gen_request req = {p->ids, p->n, n, {.temperature = 0, .top_p = 1.0, .top_k = 0, .seed = 0}, -1, NULL, 0, NULL,
                          NULL, NULL, 0, NULL, 0, NULL, NULL};
    memset(res, 0, sizeof *res);
    return v4_generate(e->ctx, e->seq, NULL, &req, NULL, NULL, res, err);
}

static void engine_report(const engine *e, const char *device, char *dev_name, size_t cap, double *gpu_gb)
{
    *gpu_gb = -1;
    snprintf(dev_name, cap, "cpu");
#ifdef V4_HAVE_CUDA
    if (e->be && is_cuda(device)) {
        snprintf(dev_name, cap, "%s", v4_cuda_backend_device_name(e->be));
        *gpu_gb = (v4_cuda_backend_weight_bytes(e->be) + v4_cuda_backend_engine_bytes(e->be)) / 1e9;
    }
#else
    (void)e;
    (void)device;
#endif
}

/* ------------------------------------------------------------------ bench */

static int bench_budget(const opts *o, const v4_model_files *m, const prompt *p, const char *budget,
                        const char *cpu, double host_bw)
{
    int all = !strcmp(budget, "all");
    if (all)
        unsetenv("V4_GPU_EXPERT_MEM");
    else
        setenv("V4_GPU_EXPERT_MEM", budget, 1);
    engine e;
    v4_error err = {0};
    v4_gen_result res;
    if (engine_open(&e, m, o->device, o->threads, p->n + o->tokens, &err)) {
        fprintf(stderr, "bench_flash: %s: %s: %s\n", o->device, err.where, err.msg);
        return -1;
    }
    double ms[MAX_RUNS];
    int runs = o->runs < 1 ? 1 : o->runs > MAX_RUNS ? MAX_RUNS : o->runs;
    double t0 = v4_bench_now();
    int rc = engine_run(&e, p, o->tokens, &res, &err);   /* warm-up (uploads) */
    double warm_s = v4_bench_now() - t0;
    v4_gen_result_free(&res);
    for (int r = 0; r < runs && !rc; r++) {
        rc = engine_run(&e, p, o->tokens, &res, &err);
        if (!rc)
            ms[r] = 1e3 * res.decode_s / (res.n_tokens - 1);   /* the first id comes from the prompt's last step */
        v4_gen_result_free(&res);
    }
#ifdef V4_HAVE_CUDA
    if (!rc && is_cuda(o->device) && v4_cuda_backend_status(e.be, &err))
        rc = -1;
#endif
    if (rc) {
        fprintf(stderr, "bench_flash: %s: %s: %s\n", o->device, err.where, err.msg);
        engine_free(&e);
        return -1;
    }
    char dev[160];
    double gpu_gb;
    engine_report(&e, o->device, dev, sizeof dev, &gpu_gb);
    double lo = ms[0], hi = ms[0];
    for (int r = 1; r < runs; r++) {
        lo = ms[r] < lo ? ms[r] : lo;
        hi = ms[r] > hi ? ms[r] : hi;
    }
    const v4_config *c = &m->cfg;
    uint64_t bpt = v4_step_trunk_bytes(&m->w) +
                   (uint64_t)c->n_layers * (uint64_t)c->n_act_experts *
                       (c->n_routed_experts ? v4_expert_bytes(&m->w.layers[0].experts[0]) : 0);
    double med = v4_bench_median(ms, runs), tps = med > 0 ? 1e3 / med : 0, gbs = bpt * tps / 1e9;
    double peak = is_cuda(o->device) ? HBM_PEAK_GBS : host_bw;
    char cfg[256], mem[48];
    snprintf(cfg, sizeof cfg, "%d layers, dim %d, %d experts top-%d, %s, experts %s", c->n_layers, c->dim,
             c->n_routed_experts, c->n_act_experts, o->device,
             all ? "all resident" : budget);
    if (gpu_gb >= 0)
        snprintf(mem, sizeof mem, "%.2f", gpu_gb);
    else
        snprintf(mem, sizeof mem, "-");
    printf("| %s / %s | %s | %d x %d | %.2f (%.2f-%.2f) | %.2f | %.3e | %.1f | %.1f%% of %.0f | %s | %.1f |\n", cpu,
           dev, cfg, runs, o->tokens, med, lo, hi, tps, (double)bpt, gbs, peak > 0 ? 100.0 * gbs / peak : 0, peak,
           mem, warm_s);
    fflush(stdout);
    engine_free(&e);
    return 0;
}

static int run_bench(const opts *o, const v4_model_files *m, const prompt *p)
{
    char cpu[256];
    v4_bench_cpu_name(cpu, sizeof cpu);
    double bw = o->bw;
    if (!is_cuda(o->device) && bw <= 0) {
        int thr = o->threads > 0 ? o->threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
        bw = v4_bench_read_bandwidth((size_t)2 << 30, thr, 3);
        printf("measured host read bandwidth: %.2f GB/s (%d threads, 2 GiB sum, median of 3)\n", bw, thr);
    }
    printf("\n| machine | config | runs x tokens | ms/token median (min-max) | tokens/s | bytes/token | GB/s "
           "| %% of peak GB/s | GPU weights GB | warm-up s |\n|---|---|---|---|---|---|---|---|---|---|\n");
    fflush(stdout);
    char *list = strdup(is_cuda(o->device) ? o->budgets : "all");
    int rc = list ? 0 : -1;
    for (char *save = NULL, *b = list ? strtok_r(list, ",", &save) : NULL; b; b = strtok_r(NULL, ",", &save))
        rc |= bench_budget(o, m, p, b, cpu, bw);
    free(list);
    return rc;
}

/* -------------------------------------------------------------- divergence */

static int first_diff(const int32_t *a, int na, const int32_t *b, int nb)
{
    int n = na < nb ? na : nb;
    for (int i = 0; i < n; i++)
        if (a[i] != b[i])
            return i;
    return na == nb ? -1 : n;
}

static void print_diff(const char *what, const int32_t *a, int na, const int32_t *b, int nb)
{
    int k = first_diff(a, na, b, nb);
    if (k < 0)
        printf("diverge: %-16s none in %d\n", what, na);
    else
        printf("diverge: %-16s first difference at generated position %d (%d vs %d)\n", what, k,
               k < na ? a[k] : -1, k < nb ? b[k] : -1);
}

static int gen_on(const v4_model_files *m, const char *dev, int threads, const prompt *p, int n, v4_gen_result *res)
{
    engine e;
    v4_error err = {0};
    int rc = engine_open(&e, m, dev, threads, p->n + n, &err);
    if (!rc)
        rc = engine_run(&e, p, n, res, &err);
#ifdef V4_HAVE_CUDA
    if (!rc && is_cuda(dev) && v4_cuda_backend_status(e.be, &err))
        rc = -1;
#endif
    if (rc)
        fprintf(stderr, "bench_flash: %s: %s: %s\n", dev, err.where, err.msg);
    engine_free(&e);
    return rc;
}

static int run_diverge(const opts *o, const v4_model_files *m, const prompt *p)
{
    int n = o->diverge;
    if (p->expect && n > p->n_expect)
        n = p->n_expect;
    printf("diverge: model %s, prompt %d ids, %d greedy tokens, cpu vs %s\n", o->model, p->n, n, o->device);
    v4_gen_result rc_cpu = {0}, rc_dev = {0};
    if (gen_on(m, "cpu", o->threads, p, n, &rc_cpu))
        return 1;
    if (p->expect)
        print_diff("cpu vs golden", rc_cpu.tokens, rc_cpu.n_tokens, p->expect, n);
    char why[256] = "";
    int have_gpu = 0;
#ifdef V4_HAVE_CUDA
    have_gpu = v4_cuda_device_count(why, sizeof why) > 0;
#else
    snprintf(why, sizeof why, "built without the CUDA backend");
#endif
    int rc = 0;
    if (!is_cuda(o->device) || have_gpu) {
        if (gen_on(m, o->device, o->threads, p, n, &rc_dev)) {
            rc = 1;
        } else {
            char what[64];
            snprintf(what, sizeof what, "cpu vs %s", o->device);
            print_diff(what, rc_cpu.tokens, rc_cpu.n_tokens, rc_dev.tokens, rc_dev.n_tokens);
            if (p->expect) {
                snprintf(what, sizeof what, "%s vs golden", o->device);
                print_diff(what, rc_dev.tokens, rc_dev.n_tokens, p->expect, n);
            }
        }
    } else {
        printf("diverge: cpu vs %s: no GPU: skipped (%s)\n", o->device, why);
    }
    printf("diverge: cpu ids:");
    for (int i = 0; i < rc_cpu.n_tokens; i++)
        printf(" %d", rc_cpu.tokens[i]);
    printf("\n");
    v4_gen_result_free(&rc_cpu);
    v4_gen_result_free(&rc_dev);
    return rc;
}

/* ------------------------------------------------------------------ main */

int main(int argc, char **argv)
{
    opts o = {NULL, NULL, "all,85%", NULL, NULL, 8, 3, 0, 0, 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!v) {
            fprintf(stderr, "bench_flash: %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--model")) o.model = v;
        else if (!strcmp(a, "--device")) o.device = v;
        else if (!strcmp(a, "--budgets")) o.budgets = v;
        else if (!strcmp(a, "--prompt-ids")) o.prompt_ids = v;
        else if (!strcmp(a, "--golden")) o.golden = v;
        else if (!strcmp(a, "--tokens")) o.tokens = atoi(v);
        else if (!strcmp(a, "--runs")) o.runs = atoi(v);
        else if (!strcmp(a, "--threads")) o.threads = atoi(v);
        else if (!strcmp(a, "--diverge")) o.diverge = atoi(v);
        else if (!strcmp(a, "--bw")) o.bw = atof(v);
        else {
            fprintf(stderr, "bench_flash: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
        i++;
    }
    if (!o.device)
        o.device = o.diverge ? "cuda" : "cpu";
    if (!o.model || o.tokens < 2 || o.runs < 1 || o.diverge < 0 || v4_parse_device(o.device, NULL)) {
        usage(stderr);
        return 2;
    }
#ifndef V4_HAVE_CUDA
    if (is_cuda(o.device) && !o.diverge) {
        printf("bench_flash: %s: no GPU: skipped (built without the CUDA backend)\n", o.device);
        return 0;
    }
#else
    char why[256] = "";
    if (is_cuda(o.device) && !o.diverge && v4_cuda_device_count(why, sizeof why) <= 0) {
        printf("bench_flash: %s: no GPU: skipped (%s)\n", o.device, why);
        return 0;
    }
#endif
    v4_model_files m;
    v4_error err = {0};
    double t0 = v4_bench_now();
    if (v4_model_open(o.model, &m, &err)) {
        fprintf(stderr, "bench_flash: %s: %s\n", err.where, err.msg);
        return 1;
    }
    printf("model %s: %d layers, dim %d, vocab %d, opened in %.1f s\n", o.model, m.cfg.n_layers, m.cfg.dim,
           m.cfg.vocab_size, v4_bench_now() - t0);
    prompt p;
    int rc = load_prompt(&o, m.cfg.vocab_size, &p) ? 1 : 0;
    if (!rc)
        rc = o.diverge ? run_diverge(&o, &m, &p) : (run_bench(&o, &m, &p) ? 1 : 0);
    prompt_free(&p);
    v4_model_close(&m);
    return rc;
}
