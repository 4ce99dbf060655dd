/* bench_batching.c - aggregate decode throughput of continuous batching (the executor
 * behind `v4fleet batch --concurrency N`, worker/serve/exec_cont.c) against N, and the
 * prefill throughput of one long prompt, for each numerics mode side by side.
 *
 *   bench_batching [--model DIR] [--ns 1,2,4,8,16] [--tasks-per-slot K] [--tokens T]
 *                  [--prompt P] [--runs R] [--threads T] [--isa auto|scalar|avx2|avx512]
 *                  [--device cpu|cuda|cuda:N] [--numerics exact,fast|exact|fast]
 *                  [--prefill TOKENS] [--prefill-rows ROWS]
 *                  [--host-cache-bytes B] [--gpu-expert-mem X] [--io-threads N]
 *                  [--long TOKENS] [--long-n N]
 *
 * Modes: both by default (a table each, then "summary:" lines with the fast mode's
 * targets: N = 8 / N = 1 and prefill fast / exact); on a GPU the fast mode is the
 * tensor-core path (kernels/cuda/cuda_lt.h).  Prefill: one task of TOKENS random prompt ids (default 2048; 0 =
 * none) and one generated token on a runner whose steps carry up to ROWS rows (default
 * 64: prompt chunks of that many positions), R runs, prompt tokens per second (median).
 *
 * The model (default models/bench/small; generated with `v4fleet mkmodel --preset small`
 * when DIR/config.json is missing) is opened once through the task runner (max_batch =
 * the largest N), its checkpoint paged in, and the machine's read bandwidth measured
 * (STREAM-like sum of 2 GiB, same threads, median of 5).  For each N, R times: N*K
 * greedy tasks (P random prompt ids each, T generated tokens, ignore_eos) go through a
 * fresh continuous executor of capacity N, driven as cmd_batch.c drives it (submit
 * while a slot is free, step until one frees, drain).  Decode-dominated by design.
 * Printed: machine, config, N, aggregate generated tokens/s (median of R, and the
 * range: the machine may be shared), tokens per CPU-second of this process (user +
 * system time of every thread during the run, median of R: time slices that other
 * processes of a busy host get do not count, the pool's short spin waits do), speed-up
 * vs N = 1, mean rows per step, weight bytes read per position (per step: trunk + the
 * union of the rows' routed experts, divided by the rows), the achieved GB/s of weight
 * reads and that as a % of the measured bandwidth, the multiply-adds of the weight
 * products per position (trunk + the rows' routed experts), and a roofline: the
 * machine's measured FP32 multiply-add rate (fmapeak.h) and read bandwidth bound each
 * run at max(weight bytes / bandwidth, multiply-adds / rate) seconds, so "roofline
 * tok/s" is the most any kernel doing FP32 multiply-adds could reach for that N and
 * "roofline speed-up" the most batching could gain over N = 1 on this machine (a
 * compute-bound N = 8 against a memory-bound N = 1 caps it).  "exact roof" is the same
 * bound for the arithmetic this engine must do to reproduce the golden bit for bit
 * (README "Numerics"): the trunk's products (FP8, BF16) are double sums, so they run
 * at most at half the FP32 rate (8 lanes, not 16), the routed FP4 experts' byte dot
 * products at most at twice it; the trunk and the experts are separate phases of a
 * step, so the bound is max(trunk bytes / BW, trunk MACs / (rate / 2)) + max(expert
 * bytes / BW, expert MACs / (2 rate)) seconds, and "exact roof speed-up" the most
 * batching could gain over N = 1 if every N ran at that bound.  Not a test: prints,
 * never fails on speed.  With --device cuda the engine runs on the GPU (the resident
 * step batches the same way), % of BW is against 4.8 TB/s and the roofline columns
 * are n/a.
 *
 * Paged experts: --host-cache-bytes B pages the routed experts through a host cache of
 * B bytes (K/M/G suffixes; needed for a `mkmodel --no-experts` model, whose experts come
 * from the synthetic source), --io-threads its readers, --gpu-expert-mem X (bytes or P%
 * of the routed experts, as V4_GPU_EXPERT_MEM) the GPU expert budget.  Each decode row
 * then also shows, for the median run: the GPU expert cache's hit rate (hits / (hits +
 * misses) of the run's expert acquisitions, v4_runner_gpu_cache_figs_get), the GB it
 * uploaded per generated token, and the host cache's hit rate ("-" when not paged).
 * The figures include the cold misses of the run (the caches start empty at the first
 * N and are shared by the later ones).
 *
 * --ns none skips the decode table (e.g. with --long only).
 * Long documents (--long TOKENS, after the tables): --long-n tasks (default 2) of TOKENS
 * random prompt ids each and --tokens generated tokens, all submitted at once to one
 * executor (prefilled and decoded together), one run: seconds, positions per second
 * (prompt + generated), generated tokens per second, and the paging figures.
 *
 * Thread: main thread (the runner's CPU pool does the work).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "bench/fmapeak.h"
#include "bench/membw.h"
#include "config/model_config.h"
#include "config/worker_config.h"
#ifdef V4_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif
#include "worker/serve/executor.h"

#define HBM_GBS 4800.0   /* the 100% line with --device cuda: H200 HBM3e, nominal */

#ifndef V4_BIN_PATH
#define V4_BIN_PATH "build/v4fleet"
#endif

typedef struct opts {
    const char *model, *isa, *ns, *device, *numerics, *gpu_expert_mem;
    int k, tokens, prompt, runs, threads, prefill, prefill_rows, io_threads, long_tokens, long_n;
    long long host_cache_bytes;
} opts;

static int ensure_model(const char *dir)
{
    char cfg[4200], cmd[9000];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    struct stat st;
    if (stat(cfg, &st) == 0) {
        snprintf(cfg, sizeof cfg, "%s/tokenizer.json", dir);
        if (stat(cfg, &st) == 0)
            return 0;
        fprintf(stderr, "bench_batching: %s has a checkpoint but no tokenizer.json (an older mkmodel): regenerate it "
                        "with `v4fleet mkmodel --out %s --preset small --seed 1 --force`\n", dir, dir);
        return -1;
    }
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && '%s' mkmodel --out '%s' --preset small --seed 1 --force", dir,
             V4_BIN_PATH, dir);
    fprintf(stderr, "bench_batching: generating the small model: %s\n", cmd);
    return system(cmd) == 0 ? 0 : -1;
}

/* CPU seconds used by this process so far (user + system, every thread). */
static double cpu_now(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_stime.tv_sec + 1e-6 * (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

/* Read one byte per page of every file of the model so timed runs do not fault. */
static void page_in(const char *dir)
{
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "cat '%s'/*.safetensors > /dev/null", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_batching: could not read the checkpoint ahead\n");
}

typedef struct run_figs {
    double tps, rows_per_step, bytes_per_row, gbs, macs_per_row, bytes, macs, tokens, ebytes, emacs, seconds;
    double cpu_s;   /* CPU seconds of this process during the run (user + system, all threads) */
    /* paging (the run's share of the caches' cumulative figures): -1 = not paged */
    double gpu_hit, gpu_gb_per_token, host_hit;
} run_figs;

/* hits / (hits + misses) of the figures' change from a to b; -1 when the cache is absent
 * (rc != 0), 0 when nothing was acquired. */
static double hit_rate(int rc, const v4_runner_cache_figs *a, const v4_runner_cache_figs *b)
{
    if (rc)
        return -1;
    const double h = (double)(b->hits - a->hits), m = (double)(b->misses - a->misses);
    return h + m > 0 ? h / (h + m) : 0;
}

/* "-" or the rate in % / the GB per token into out. */
static const char *fig_cell(char *out, size_t n, double v, const char *fmt)
{
    if (v < 0)
        snprintf(out, n, "-");
    else
        snprintf(out, n, fmt, v);
    return out;
}

/* n slots, k tasks per slot of `prompt` random ids and `tokens` generated tokens each. */
static int run_once(v4_runner *r, int n, int k_per_slot, int prompt, int gen, unsigned *rng, run_figs *rf)
{
    char err[256];
    v4_exec *x = v4_exec_continuous(r, n, NULL, NULL, err, sizeof err);
    if (!x) {
        fprintf(stderr, "bench_batching: %s\n", err);
        return -1;
    }
    const int V = v4_runner_config(r)->vocab_size, jobs = n * k_per_slot;
    long long tokens = 0;
    int failed = 0, submitted = 0;
    v4_job *fin[64];
    v4_runner_cache_figs g0, h0, g1, h1;
    const int grc = v4_runner_gpu_cache_figs_get(r, &g0), hrc = v4_runner_cache_figs_get(r, &h0);
    double t0 = v4_bench_now(), c0 = cpu_now();
    while (submitted < jobs || x->ops->in_flight(x) > 0) {
        if (submitted < jobs && x->ops->in_flight(x) < x->ops->capacity(x)) {
            /* an id takes at most 11 bytes with its comma */
            const size_t cap = (size_t)prompt * 12 + 256;
            char *line = malloc(cap);
            if (!line) {
                fprintf(stderr, "bench_batching: out of memory\n");
                x->ops->destroy(x);
                return -1;
            }
            size_t at = (size_t)snprintf(line, cap, "{\"id\":\"b%d\",\"input_ids\":[", submitted);
            for (int p = 0; p < prompt; p++) {
                *rng = *rng * 1103515245u + 12345u;
                at += (size_t)snprintf(line + at, cap - at, "%s%u", p ? "," : "", 2 + (*rng >> 8) % (unsigned)(V - 2));
            }
            snprintf(line + at, cap - at, "],\"max_tokens\":%d,\"temperature\":0,\"ignore_eos\":true}", gen);
            v4_job *j = calloc(1, sizeof *j);
            v4_task_error te = {0};
            int bad = v4_task_parse(line, strlen(line), 1 << 20, &j->task, &te);
            free(line);
            if (bad || x->ops->submit(x, j)) {
                fprintf(stderr, "bench_batching: task %d refused: %s\n", submitted, bad ? te.message : "no free slot");
                v4_job_free(j);
                free(j);
                x->ops->destroy(x);
                return -1;
            }
            submitted++;
            continue;
        }
        int k = x->ops->step(x, fin, 64);
        for (int i = 0; i < k; i++) {
            if (fin[i]->rc) {
                fprintf(stderr, "bench_batching: task failed: %s: %s\n", fin[i]->err.where, fin[i]->err.message);
                failed++;
            }
            tokens += fin[i]->out.n_tokens;
            v4_job_free(fin[i]);
            free(fin[i]);
        }
    }
    double dt = v4_bench_now() - t0;
    rf->cpu_s = cpu_now() - c0;
    v4_runner_gpu_cache_figs_get(r, &g1);
    v4_runner_cache_figs_get(r, &h1);
    rf->gpu_hit = hit_rate(grc, &g0, &g1);
    rf->host_hit = hit_rate(hrc, &h0, &h1);
    rf->gpu_gb_per_token = grc ? -1 : tokens > 0 ? (double)(g1.bytes_read - g0.bytes_read) / 1e9 / (double)tokens : 0;
    v4_exec_figs f;
    v4_exec_figs_get(x, &f);
    x->ops->destroy(x);
    rf->tps = (double)tokens / dt;
    rf->seconds = dt;
    rf->rows_per_step = f.steps ? (double)f.rows / (double)f.steps : 0;
    rf->bytes_per_row = f.rows ? f.weight_bytes / (double)f.rows : 0;
    rf->gbs = f.weight_bytes / dt / 1e9;
    rf->macs_per_row = f.rows ? f.macs / (double)f.rows : 0;
    rf->bytes = f.weight_bytes;
    rf->macs = f.macs;
    rf->ebytes = f.expert_bytes;
    rf->emacs = f.expert_macs;
    rf->tokens = (double)tokens;
    return failed ? -1 : 0;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[0..n) (sorts v). */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof v[0], cmp_d);
    return v[n / 2];
}

typedef struct mach {
    char cpu[256];
    double bw, peak;
    int gpu;
} mach;

/* One mode's decode table rows (one per N); fills tps_out and cpu_tps (tokens per CPU
 * second, median of the runs) per N. */
static int decode_rows(v4_runner *r, const opts *o, const mach *mc, const char *mode, const int *ns, int nn,
                       double *tps_out, double *cpu_tps)
{
    const v4_config *cfg = v4_runner_config(r);
    unsigned rng = 12345;
    double base = 0, roof_base = 0, xroof_base = 0;
    int rc = 0;
    for (int t = 0; t < nn; t++) {
        run_figs rf[32], med = {0};
        double v[32];
        int ok = 1;
        tps_out[t] = 0;
        for (int k = 0; k < o->runs && ok; k++)
            ok = run_once(r, ns[t], o->k, o->prompt, o->tokens, &rng, &rf[k]) == 0;
        if (!ok) {
            rc = 1;
            continue;
        }
        for (int k = 0; k < o->runs; k++)
            v[k] = rf[k].cpu_s > 0 ? rf[k].tokens / rf[k].cpu_s : 0;
        cpu_tps[t] = median(v, o->runs);
        for (int k = 0; k < o->runs; k++)
            v[k] = rf[k].tps;
        med.tps = median(v, o->runs);
        for (int k = 0; k < o->runs; k++)   /* the figures of the median run */
            if (rf[k].tps == med.tps)
                med = rf[k];
        tps_out[t] = med.tps;
        const double mac_s = mc->peak > 0 ? med.macs / mc->peak : 0;
        const double bound_s = mc->gpu ? 0 : med.bytes / (mc->bw * 1e9) > mac_s ? med.bytes / (mc->bw * 1e9) : mac_s;
        const double roof = bound_s > 0 ? med.tokens / bound_s : 0;
        if (ns[t] == 1 || !base)
            base = ns[t] == 1 ? med.tps : base;
        if (ns[t] == 1)
            roof_base = roof;
        char rcell[240] = "n/a | n/a | n/a | n/a | n/a | n/a";
        if (roof > 0) {
            /* the exact-arithmetic bound (see the header) */
            const double Bs = mc->bw * 1e9, tb = med.bytes - med.ebytes, tm = med.macs - med.emacs;
            const double trunk_s = tb / Bs > tm / (mc->peak / 2) ? tb / Bs : tm / (mc->peak / 2);
            const double exp_s = med.ebytes / Bs > med.emacs / (2 * mc->peak) ? med.ebytes / Bs
                                                                               : med.emacs / (2 * mc->peak);
            const double xroof = med.tokens / (trunk_s + exp_s);
            if (ns[t] == 1)
                xroof_base = xroof;
            snprintf(rcell, sizeof rcell, "%.1f | %.0f%% | %s%.2fx | %.1f | %.0f%% | %s%.2fx", roof,
                     100.0 * med.tps / roof, roof_base ? "" : "n/a ", roof_base ? roof / roof_base : 0, xroof,
                     100.0 * med.tps / xroof, xroof_base ? "" : "n/a ", xroof_base ? xroof / xroof_base : 0);
        }
        const char *mname = strrchr(o->model, '/') && strrchr(o->model, '/')[1] ? strrchr(o->model, '/') + 1 : o->model;
        char c1[32], c2[32], c3[32];
        printf("| %s | %s (%d layers, dim %d, %d experts top-%d), %d thr, %s | %s | %d | %.2f | %.2f-%.2f | %.2f | %s%.2fx "
               "| %.2f | %.3e | %.2f | %.1f%% | %.3e | %s | %s | %s | %s |\n",
               mc->cpu, mname, cfg->n_layers, cfg->dim, cfg->n_routed_experts, cfg->n_act_experts, o->threads,
               mc->gpu ? o->device : o->isa, mode, ns[t], med.tps, v[0], v[o->runs - 1], cpu_tps[t], base ? "" : "n/a ",
               base ? med.tps / base : 0, med.rows_per_step, med.bytes_per_row, med.gbs, 100.0 * med.gbs / mc->bw,
               med.macs_per_row, rcell, fig_cell(c1, sizeof c1, 100.0 * med.gpu_hit, "%.1f%%"),
               fig_cell(c2, sizeof c2, med.gpu_gb_per_token, "%.3f"),
               fig_cell(c3, sizeof c3, 100.0 * med.host_hit, "%.1f%%"));
        fflush(stdout);
    }
    return rc;
}

/* Prefill of one --prefill-token prompt (one task, 1 generated token), R runs:
 * prompt tokens per second (median), filled into *tps. */
static int prefill_row(v4_runner *r, const opts *o, const mach *mc, const char *mode, double *tps, double *cpu_tps)
{
    unsigned rng = 777;
    double v[32], c[32];
    run_figs rf;
    for (int k = 0; k < o->runs; k++) {
        if (run_once(r, 1, 1, o->prefill, 1, &rng, &rf))
            return -1;
        v[k] = o->prefill / rf.seconds;
        c[k] = rf.cpu_s > 0 ? o->prefill / rf.cpu_s : 0;
    }
    *tps = median(v, o->runs);
    *cpu_tps = median(c, o->runs);
    printf("| %s | %s | %d rows/step | %d | %.1f | %.1f-%.1f | %.1f |\n", mc->cpu, mode, o->prefill_rows, o->prefill,
           *tps, v[0], v[o->runs - 1], *cpu_tps);
    fflush(stdout);
    return 0;
}

/* --long: long_n tasks of long_tokens prompt ids at once (one run), figures printed. */
static int long_row(v4_runner *r, const opts *o, const mach *mc, const char *mode)
{
    unsigned rng = 4242;
    run_figs rf;
    if (run_once(r, o->long_n, 1, o->long_tokens, o->tokens, &rng, &rf))
        return -1;
    const double pos = (double)o->long_n * (double)(o->long_tokens + o->tokens);
    char c1[32], c2[32], c3[32];
    printf("| %s | %s | %d | %d | %d | %.1f | %.1f | %.2f | %s | %s | %s |\n", mc->cpu, mode, o->long_n,
           o->long_tokens, o->tokens, rf.seconds, pos / rf.seconds, rf.tps,
           fig_cell(c1, sizeof c1, 100.0 * rf.gpu_hit, "%.1f%%"), fig_cell(c2, sizeof c2, rf.gpu_gb_per_token, "%.3f"),
           fig_cell(c3, sizeof c3, 100.0 * rf.host_hit, "%.1f%%"));
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    opts o = {.model = "models/bench/small", .isa = "auto", .ns = "1,2,4,8,16", .device = "cpu", .k = 2,
              .tokens = 64, .prompt = 4, .runs = 3, .threads = 2, .prefill = 2048, .prefill_rows = 64, .long_n = 2};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help")) {
            printf("usage: bench_batching [--model DIR] [--ns 1,2,4,8,16] [--tasks-per-slot K] [--tokens T]\n"
                   "                      [--prompt P] [--runs R] [--threads T] [--isa auto|scalar|avx2|avx512]\n"
                   "                      [--device cpu|cuda|cuda:N] [--numerics exact,fast|exact|fast]\n"
                   "                      [--prefill TOKENS (0: none)] [--prefill-rows ROWS]\n"
                   "                      [--host-cache-bytes B] [--gpu-expert-mem BYTES|P%%] [--io-threads N]\n"
                   "                      [--long TOKENS] [--long-n N]\n");
            return 0;
        }
        if (!v) {
            fprintf(stderr, "bench_batching: %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--model")) o.model = v;
        else if (!strcmp(a, "--ns")) o.ns = v;
        else if (!strcmp(a, "--isa")) o.isa = v;
        else if (!strcmp(a, "--tasks-per-slot")) o.k = atoi(v);
        else if (!strcmp(a, "--tokens")) o.tokens = atoi(v);
        else if (!strcmp(a, "--prompt")) o.prompt = atoi(v);
        else if (!strcmp(a, "--runs")) o.runs = atoi(v);
        else if (!strcmp(a, "--threads")) o.threads = atoi(v);
        else if (!strcmp(a, "--device")) o.device = v;
        else if (!strcmp(a, "--numerics")) o.numerics = v;
        else if (!strcmp(a, "--prefill")) o.prefill = atoi(v);
        else if (!strcmp(a, "--prefill-rows")) o.prefill_rows = atoi(v);
        else if (!strcmp(a, "--gpu-expert-mem")) o.gpu_expert_mem = v;
        else if (!strcmp(a, "--io-threads")) o.io_threads = atoi(v);
        else if (!strcmp(a, "--long")) o.long_tokens = atoi(v);
        else if (!strcmp(a, "--long-n")) o.long_n = atoi(v);
        else if (!strcmp(a, "--host-cache-bytes")) {
            if (v4_parse_bytes(v, &o.host_cache_bytes)) {
                fprintf(stderr, "bench_batching: bad --host-cache-bytes %s\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "bench_batching: unknown option %s\n", a);
            return 2;
        }
        i++;
    }
    int ns[16], nn = 0, maxn = 1;
    for (const char *p = strcmp(o.ns, "none") ? o.ns : ""; *p && nn < 16;) {   /* "none": no decode table */
        ns[nn] = atoi(p);
        if (ns[nn] < 1 || ns[nn] > 256) {
            fprintf(stderr, "bench_batching: bad --ns %s\n", o.ns);
            return 2;
        }
        maxn = ns[nn] > maxn ? ns[nn] : maxn;
        nn++;
        p += strcspn(p, ",");
        p += *p == ',';
    }
    if (o.k < 1 || o.tokens < 1 || o.prompt < 1 || o.runs < 1 || o.runs > 32 || o.prefill < 0 ||
        o.prefill_rows < 1 || o.prefill_rows > 4096 || o.io_threads < 0 || o.long_tokens < 0 || o.long_n < 1 ||
        o.long_n > 64) {
        fprintf(stderr, "bench_batching: bad --tasks-per-slot / --tokens / --prompt / --runs / --prefill / "
                        "--prefill-rows / --io-threads / --long / --long-n\n");
        return 2;
    }
    if (o.long_tokens > 0 && o.long_n > maxn)
        maxn = o.long_n;
    mach mc = {"", HBM_GBS, 0, strncmp(o.device, "cpu", 3) != 0};
    if (mc.gpu) {   /* the GPU row: skipped, not failed, without a GPU */
#ifdef V4_HAVE_CUDA
        char why[256] = "";
        if (v4_cuda_device_count(why, sizeof why) <= 0) {
            printf("bench_batching: %s: no GPU: skipped (%s)\n", o.device, why);
            return 0;
        }
#else
        printf("bench_batching: %s: no GPU: skipped (built without the CUDA backend)\n", o.device);
        return 0;
#endif
    }
    /* The modes: the list given, else both. */
    const char *modes[2];
    int nm = 0;
    const char *list = o.numerics ? o.numerics : "exact,fast";
    if (!strcmp(list, "exact,fast") || !strcmp(list, "both")) {
        modes[nm++] = "exact";
        modes[nm++] = "fast";
    } else if (!strcmp(list, "exact") || !strcmp(list, "fast")) {
        modes[nm++] = list;
    } else {
        fprintf(stderr, "bench_batching: --numerics wants exact, fast or exact,fast, got '%s'\n", list);
        return 2;
    }
    if (ensure_model(o.model))
        return 1;
    v4_bench_cpu_name(mc.cpu, sizeof mc.cpu);
    if (mc.gpu) {
        printf("device %s: %% of BW against %.0f GB/s (H200 HBM3e nominal); no roofline (CPU figures only)\n",
               o.device, mc.bw);
        snprintf(mc.cpu, sizeof mc.cpu, "GPU %s", o.device);
    } else {
        const char *fisa = "";
        mc.bw = v4_bench_read_bandwidth((size_t)2 << 30, o.threads, 5);
        mc.peak = v4_bench_fma_peak(o.threads, 5, &fisa);
        printf("measured read bandwidth: %.2f GB/s (%d threads, 2 GiB sum, median of 5)\n", mc.bw, o.threads);
        printf("measured FP32 multiply-add rate: %.1f G/s (%d threads, %s, median of 5)\n", mc.peak / 1e9, o.threads,
               fisa);
    }
    printf("tasks: %d per slot, %d prompt ids, %d generated tokens each (greedy, ignore_eos); median of %d runs\n",
           o.k, o.prompt, o.tokens, o.runs);
    printf("(the exact roof columns assume the exact arithmetic's rates in both modes)\n\n");
    double tps[2][16] = {{0}}, pre[2] = {0}, ctps[2][16] = {{0}}, cpre[2] = {0};
    int rc = 0;
    for (int mi = 0; mi < nm; mi++) {
        v4_task_error e = {0};
        const int rows = o.prefill > 0 && o.prefill_rows > maxn ? o.prefill_rows : maxn;
        /* the prefill row's chunk: --prefill-rows positions per step */
        const v4_runner_opts ro = {.threads = o.threads,
                                   .isa = o.isa,
                                   .max_batch = rows,
                                   .device = o.device,
                                   .numerics = modes[mi],
                                   .prefill_chunk = o.prefill > 0 ? o.prefill_rows : 0,
                                   .host_cache_bytes = o.host_cache_bytes,
                                   .io_threads = o.io_threads,
                                   .gpu_expert_mem = o.gpu_expert_mem};
        v4_runner *r = v4_runner_open(o.model, "bench", &ro, &e);
        if (!r) {
            fprintf(stderr, "bench_batching: %s: %s: %s\n", o.model, e.where, e.message);
            return 1;
        }
        if (mi == 0)
            page_in(o.model);
        char xd[512];
        v4_runner_describe_experts(r, xd, sizeof xd);
        printf("experts (%s): %s\n", modes[mi], xd);
        printf("| machine | config | mode | N | tokens/s | (min-max) | tokens/CPU-s | speed-up | rows/step | "
               "weight bytes/position | GB/s | %% of read BW | MACs/position | roofline tok/s | %% of roofline | "
               "roofline speed-up | exact roof tok/s | %% of exact roof | exact roof speed-up | GPU hit rate | "
               "GPU GB uploaded/token | host hit rate |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
        fflush(stdout);
        rc |= decode_rows(r, &o, &mc, v4_runner_numerics(r), ns, nn, tps[mi], ctps[mi]);
        if (o.prefill > 0) {
            printf("\n| machine | mode | chunk | prompt tokens | prefill tokens/s | (min-max) | tokens/CPU-s |\n"
                   "|---|---|---|---|---|---|---|\n");
            rc |= prefill_row(r, &o, &mc, v4_runner_numerics(r), &pre[mi], &cpre[mi]) != 0;
        }
        if (o.long_tokens > 0) {
            printf("\n| machine | mode | documents | prompt tokens each | generated each | seconds | positions/s "
                   "| generated tokens/s | GPU hit rate | GPU GB uploaded/token | host hit rate |\n"
                   "|---|---|---|---|---|---|---|---|---|---|---|\n");
            rc |= long_row(r, &o, &mc, v4_runner_numerics(r)) != 0;
        }
        printf("\n");
        v4_runner_free(r);
    }
    /* The targets of the fast mode (issue 18): N = 8 >= 3x N = 1, prefill >= 2x exact. */
    int i1 = -1, i8 = -1;
    for (int t = 0; t < nn; t++) {
        i1 = ns[t] == 1 ? t : i1;
        i8 = ns[t] == 8 ? t : i8;
    }
    for (int mi = 0; mi < nm; mi++)
        if (i1 >= 0 && i8 >= 0 && tps[mi][i1] > 0)
            printf("summary: %s: N = 8 / N = 1 = %.2fx (target in fast mode: >= 3x; per CPU-second %.2fx)\n",
                   modes[mi], tps[mi][i8] / tps[mi][i1], ctps[mi][i1] > 0 ? ctps[mi][i8] / ctps[mi][i1] : 0);
    if (nm == 2 && pre[0] > 0 && pre[1] > 0)
        printf("summary: prefill of %d tokens, fast / exact = %.2fx (target: >= 2x; per CPU-second %.2fx)\n", o.prefill,
               pre[1] / pre[0], cpre[0] > 0 ? cpre[1] / cpre[0] : 0);
    if (nm == 2 && i1 >= 0 && tps[0][i1] > 0)
        printf("summary: N = 1, fast / exact = %.2fx (per CPU-second %.2fx)\n", tps[1][i1] / tps[0][i1],
               ctps[0][i1] > 0 ? ctps[1][i1] / ctps[0][i1] : 0);
    return rc;
}
