/* bench_linear.c - CPU matvec throughput against the machine's read bandwidth.
 *
 * For every ISA the CPU supports and 1/2 threads: FP8 [4096 x 4096] and FP4
 * [4096 x 4096] (QUANT mode), and BF16 [32768 x 4096] (EXACT mode, the LM head's shape)
 * in the row-major and the row-interleaved R8 layout (backend.h), n = 1 and n = 8
 * input vectors.  To measure the memory-
 * bound regime rather than the L3 cache, each sample runs one matvec on each of C
 * copies of the weights (C copies >= 128 MiB in total, visited in order, so every
 * matvec streams its weights from DRAM); time per matvec = sample / C; median of 5
 * samples after a warm-up.  GB/s counts weight bytes (FP8: rows*cols, FP4:
 * rows*cols/2, BF16: 2*rows*cols; the E8M0 scales add 0.006% / 6% on top and are not
 * counted).
 * Read bandwidth: STREAM-like sum of a 1 GiB buffer with 2 threads, median of 5.
 *
 * --moe: instead, the routed-expert half of a batched MoE layer of the `small` model
 * as the engine runs it (one v4_linear_many list): E = 36 FP4 experts (the union a
 * step of 8 rows routes to, top-6 of 64), each with n = 1, 2, 3 or 4 rows through w1 and
 * w3 [1024 x 4096], then w2 [4096 x 1024]; 2 threads; GB/s of expert weights.  The
 * experts (226 MB) do not fit a cache, like a real layer's.
 *
 * --rate: the compute rate instead: one copy of each product (FP8 [1024 x 1024 / 4096 / 8192],
 * FP4 [1024 x 1024 / 4096], BF16 R8 [1024 x 4096] as the head and wo_a run) repeated
 * from the cache, n = 1, 6, 8, 64 vectors (6 and 8: a routed expert's rows in a 64-row
 * prefill chunk and a batched step; 64: a trunk product of that chunk), 1 thread, both
 * numerics modes: G multiply-adds/s and % of the measured FP32 FMA peak (fmapeak.h).
 * Timed on the calling thread's CPU clock (the 1-thread backend runs the products on
 * it), so the time slices other processes of a busy host take do not count.
 * This is the table behind the fast mode's prefill ceiling (docs/numerics.md).
 *
 * Each set runs in both numerics modes (exact: the golden contract; fast: float
 * accumulation, kernels/cpu/linear_fast*.c; FP4 is the same kernel in both).
 *
 * Usage: bench_linear [isa ...]   (default: all supported; scalar is slow on the
 *        BF16 EXACT sets)
 *        bench_linear --rate [isa|auto]
 *        bench_linear --moe [isa|auto [E]]  (default: the best ISA, E = 36; a small E
 *        keeps the experts in the cache: the kernel's compute rate)
 * Env: V4_BENCH_SAMPLES (default 5).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/v4/weights.h"
#include "fmapeak.h"
#include "membw.h"

/* xorshift64 on a caller-owned state */
static uint64_t rnd(uint64_t *rs)
{
    *rs ^= *rs << 13;
    *rs ^= *rs >> 7;
    *rs ^= *rs << 17;
    return *rs;
}

/* ------------------------------------------------------------------ matvec -- */

typedef struct wset {
    v4_mat *m;
    int copies;
    size_t wbytes;      /* weight bytes of one copy */
    v4_lin_mode mode;
    const char *name;
} wset;

static wset make_set(v4_wtype t, int rows, int cols, v4_layout layout, int min_copies, uint64_t *rs)
{
    wset s;
    size_t wb = t == V4_W_FP8 ? (size_t)rows * cols : t == V4_W_BF16 ? (size_t)rows * cols * 2 : (size_t)rows * cols / 2;
    size_t sb = t == V4_W_FP8 ? (size_t)((rows + 127) / 128) * ((cols + 127) / 128)
              : t == V4_W_BF16 ? 1 : (size_t)rows * (cols / 32);
    s.wbytes = wb;
    s.mode = t == V4_W_BF16 ? V4_LIN_EXACT : V4_LIN_QUANT;
    s.name = t == V4_W_FP8 ? "fp8" : t == V4_W_FP4 ? "fp4" : layout == V4_LAYOUT_R8 ? "bf16-r8" : "bf16-rm";
    s.copies = (int)(((size_t)128 << 20) / wb);
    if (s.copies < min_copies)
        s.copies = min_copies;
    if (min_copies < 0)         /* exactly -min_copies copies (--rate: one, kept in the cache) */
        s.copies = -min_copies;
    s.m = calloc((size_t)s.copies, sizeof *s.m);
    for (int c = 0; c < s.copies; c++) {
        uint8_t *w = malloc(wb), *sc = malloc(sb);
        for (size_t i = 0; i < wb; i += 8) {
            uint64_t r = rnd(rs);
            memcpy(w + i, &r, wb - i < 8 ? wb - i : 8);
        }
        if (t == V4_W_FP8)
            for (size_t i = 0; i < wb; i++)
                if ((w[i] & 0x7f) == 0x7f)
                    w[i] ^= 1;            /* no NaN codes */
        if (t == V4_W_BF16)               /* finite values: exponent bits 0x7f80 never all set */
            for (size_t i = 0; i < wb / 2; i++)
                ((uint16_t *)w)[i] &= 0xbfff;
        for (size_t i = 0; i < sb; i++)
            sc[i] = (uint8_t)(110 + rnd(rs) % 16);
        s.m[c] = (v4_mat){t, rows, cols, w, t == V4_W_BF16 ? NULL : sc, V4_LAYOUT_ROWMAJOR};
        if (t == V4_W_BF16)
            free(sc);
        if (layout == V4_LAYOUT_R8) {     /* rows % 8 == 0 here: same size */
            uint8_t *p = malloc(v4_mat_r8_bytes(&s.m[c]));
            v4_mat_pack_r8(&s.m[c], p, 0, (rows + 7) / 8);
            free(w);
            s.m[c].w = p;
            s.m[c].layout = V4_LAYOUT_R8;
        }
    }
    return s;
}

static void free_set(wset *s)
{
    for (int c = 0; c < s->copies; c++) {
        free((void *)s->m[c].w);
        free((void *)s->m[c].scale);
    }
    free(s->m);
}

/* seconds per matvec (median) */
static double time_linear(v4_backend *be, const wset *s, int n, const float *x, float *y, int samples)
{
    const int rows = s->m[0].rows, cols = s->m[0].cols;
    double t[16];
    for (int c = 0; c < s->copies; c++)     /* warm-up: page-in, pool spin-up */
        v4_linear(be, &s->m[c], s->mode, n, x, cols, y, rows);
    for (int k = 0; k < samples; k++) {
        double t0 = v4_bench_now();
        for (int c = 0; c < s->copies; c++)
            v4_linear(be, &s->m[c], s->mode, n, x, cols, y, rows);
        t[k] = (v4_bench_now() - t0) / s->copies;
    }
    return v4_bench_median(t, samples);
}

/* --moe (see the header): median seconds per layer of E experts at n rows each */
static double time_moe(v4_backend *be, const wset *w13, const wset *w2, int E, int n, float *x, float *h,
                       float *y, int samples)
{
    v4_lin_job jobs[2 * 64];
    double t[16];
    for (int k = -1; k < samples; k++) {   /* k = -1: warm-up */
        double t0 = v4_bench_now();
        for (int e = 0; e < E; e++) {
            const float *xe = x + (size_t)e * n * 4096;
            float *he = h + (size_t)e * 2 * n * 1024;
            jobs[2 * e] = (v4_lin_job){&w13->m[2 * e], V4_LIN_QUANT, n, xe, 4096, he, 1024};
            jobs[2 * e + 1] = (v4_lin_job){&w13->m[2 * e + 1], V4_LIN_QUANT, n, xe, 4096, he + (size_t)n * 1024, 1024};
        }
        v4_linear_many(be, jobs, 2 * E);
        for (int e = 0; e < E; e++)
            jobs[e] = (v4_lin_job){&w2->m[e], V4_LIN_QUANT, n, h + (size_t)e * 2 * n * 1024, 1024,
                                   y + (size_t)e * n * 4096, 4096};
        v4_linear_many(be, jobs, E);
        if (k >= 0)
            t[k] = v4_bench_now() - t0;
    }
    return v4_bench_median(t, samples);
}

static int moe_main(const char *isa, int E, int samples)
{
    enum { NMAX = 4 };
    if (E < 1 || E > 64)
        E = 36;
    uint64_t seed = 0x2468ace13579bdfull, *rs = &seed;
    double bw = v4_bench_read_bandwidth((size_t)1 << 30, 2, samples);
    printf("read bandwidth (1 GiB sum, 2 threads, median of %d): %.1f GB/s\n", samples, bw);
    v4_error err;
    v4_err_clear(&err);
    v4_backend *be = v4_cpu_backend_create(2, isa, &err);   /* "auto": the backend picks the best */
    if (!be) {
        fprintf(stderr, "bench_linear: %s\n", err.msg);
        return 1;
    }
    /* make_set's copies: w13 gets 2E matrices of [1024 x 4096], w2 E of [4096 x 1024] */
    wset w13 = make_set(V4_W_FP4, 1024, 4096, V4_LAYOUT_ROWMAJOR, 2 * E, rs);
    wset w2 = make_set(V4_W_FP4, 4096, 1024, V4_LAYOUT_ROWMAJOR, E, rs);
    float *x = malloc(sizeof(float) * E * NMAX * 4096), *h = malloc(sizeof(float) * E * NMAX * 2 * 1024),
          *y = malloc(sizeof(float) * E * NMAX * 4096);
    for (int i = 0; i < E * NMAX * 4096; i++)
        x[i] = (float)((double)(rnd(rs) >> 11) * 0x1p-53 - 0.5);
    const double bytes = (double)E * 3 * 1024 * 4096 / 2;
    printf("MoE layer: %d FP4 experts (w1, w3 [1024 x 4096], w2 [4096 x 1024]), %s, 2 threads, median of %d\n\n",
           E, v4_cpu_backend_isa(be), samples);
    printf("%3s %12s %10s %10s\n", "n", "ms/layer", "GB/s", "% of BW");
    for (int n = 1; n <= NMAX; n++) {
        double sec = time_moe(be, &w13, &w2, E, n, x, h, y, samples);
        printf("%3d %12.3f %10.2f %9.0f%%\n", n, sec * 1e3, bytes / sec / 1e9, bw > 0 ? 100.0 * bytes / sec / 1e9 / bw : 0.0);
    }
    free(x);
    free(h);
    free(y);
    free_set(&w13);
    free_set(&w2);
    be->ops->destroy(be);
    return 0;
}

/* The calling thread's CPU time in seconds. */
static double thread_cpu_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* --rate (see the header): multiply-adds per second of each product in the cache */
static int rate_main(const char *isa, int samples)
{
    enum { NS = 4, NSETS = 6, KMAX = 8192 };
    static const int ns[NS] = {1, 6, 8, 64};
    uint64_t seed = 0x13579bdf2468aceull, *rs = &seed;
    const char *fisa = NULL;
    double peak = v4_bench_fma_peak(1, samples, &fisa);
    printf("FP32 multiply-add peak, 1 thread (%s, median of %d): %.1f G/s\n", fisa ? fisa : "?", samples, peak / 1e9);
    struct { v4_wtype t; int rows, cols; v4_layout lay; v4_lin_mode fast_mode; } def[NSETS] = {
        {V4_W_FP8, 1024, 1024, V4_LAYOUT_ROWMAJOR, V4_LIN_QUANT}, {V4_W_FP8, 1024, 4096, V4_LAYOUT_ROWMAJOR, V4_LIN_QUANT},
        {V4_W_FP8, 1024, 8192, V4_LAYOUT_ROWMAJOR, V4_LIN_QUANT}, {V4_W_FP4, 1024, 1024, V4_LAYOUT_ROWMAJOR, V4_LIN_QUANT},
        {V4_W_FP4, 1024, 4096, V4_LAYOUT_ROWMAJOR, V4_LIN_QUANT}, {V4_W_BF16, 1024, 4096, V4_LAYOUT_R8, V4_LIN_BF16}};
    wset sets[NSETS];
    for (int f = 0; f < NSETS; f++)
        sets[f] = make_set(def[f].t, def[f].rows, def[f].cols, def[f].lay, -1, rs);
    float *x = malloc(sizeof(float) * 64 * KMAX), *y = malloc(sizeof(float) * 64 * 1024);
    for (int i = 0; i < 64 * KMAX; i++)
        x[i] = (float)((double)(rnd(rs) >> 11) * 0x1p-53 - 0.5);
    static const char *const modes[2] = {"exact", "fast"};
    v4_backend *be[2] = {NULL, NULL};
    for (int md = 0; md < 2; md++) {
        v4_error err;
        v4_err_clear(&err);
        if (!(be[md] = v4_cpu_backend_create_ex(1, isa, modes[md], &err))) {
            fprintf(stderr, "bench_linear: %s\n", err.msg);
            if (md)
                be[0]->ops->destroy(be[0]);
            return 1;
        }
    }
    printf("products in the cache (one copy, repeated), 1 thread, %s, median of %d, thread CPU time; G multiply-adds/s "
           "(%% of the FP32 FMA peak; VDPBF16PS does two per lane: up to 200%%)\n\n", v4_cpu_backend_isa(be[0]), samples);
    printf("| product | shape | n | exact | fast | fast / exact |\n|---|---|---|---|---|---|\n");
    for (int f = 0; f < NSETS; f++)
        for (int i = 0; i < NS; i++) {
            const int n = ns[i];
            double g[2];
            for (int md = 0; md < 2; md++) {
                wset s = sets[f];
                s.mode = md ? def[f].fast_mode : s.mode;
                int reps = 1 + (int)(2e8 / ((double)def[f].rows * def[f].cols * n));
                double t[16];
                for (int k = -1; k < samples; k++) {
                    double t0 = thread_cpu_now();
                    for (int r = 0; r < reps; r++)
                        v4_linear(be[md], &s.m[0], s.mode, n, x, def[f].cols, y, def[f].rows);
                    if (k >= 0)
                        t[k] = (thread_cpu_now() - t0) / reps;
                }
                g[md] = (double)def[f].rows * def[f].cols * n / v4_bench_median(t, samples);
            }
            printf("| %s%s | %d x %d | %d | %.1f (%.0f%%) | %.1f (%.0f%%) | %.2fx |\n", sets[f].name,
                   def[f].t == V4_W_BF16 ? " (head, wo_a)" : "", def[f].rows, def[f].cols, n, g[0] / 1e9,
                   100.0 * g[0] / peak, g[1] / 1e9, 100.0 * g[1] / peak, g[1] / g[0]);
            fflush(stdout);
        }
    for (int md = 0; md < 2; md++)
        be[md]->ops->destroy(be[md]);
    free(x);
    free(y);
    for (int f = 0; f < NSETS; f++)
        free_set(&sets[f]);
    return 0;
}

int main(int argc, char **argv)
{
    const char *env = getenv("V4_BENCH_SAMPLES");
    int samples = env ? atoi(env) : 5;
    if (samples < 1 || samples > 16)
        samples = 5;
    const char *all[4] = {"scalar", "avx2", "avx512", "avx512vnni"};
    const char *isas[8];
    int nisa = 0;
    if (argc > 1 && !strcmp(argv[1], "--rate"))
        return rate_main(argc > 2 ? argv[2] : "auto", samples);
    if (argc > 1 && !strcmp(argv[1], "--moe"))
        return moe_main(argc > 2 ? argv[2] : "auto", argc > 3 ? atoi(argv[3]) : 36, samples);
    if (argc > 1) {
        for (int i = 1; i < argc && nisa < 8; i++)
            isas[nisa++] = argv[i];
    } else {
        for (int i = 0; i < 4; i++)
            isas[nisa++] = all[i];
    }

    double bw = v4_bench_read_bandwidth((size_t)1 << 30, 2, samples);
    printf("read bandwidth (1 GiB sum, 2 threads, median of %d): %.1f GB/s\n\n", samples, bw);

    enum { R = 4096, C = 4096, RH = 32768, NMAX = 8, NSET = 4 };
    uint64_t seed = 0x123456789abcdefull, *rs = &seed;
    wset sets[NSET] = {make_set(V4_W_FP8, R, C, V4_LAYOUT_ROWMAJOR, 2, rs), make_set(V4_W_FP4, R, C, V4_LAYOUT_ROWMAJOR, 2, rs),
                       make_set(V4_W_BF16, RH, C, V4_LAYOUT_ROWMAJOR, 2, rs), make_set(V4_W_BF16, RH, C, V4_LAYOUT_R8, 2, rs)};
    float *x = malloc(sizeof(float) * NMAX * C), *y = malloc(sizeof(float) * NMAX * RH);
    for (int i = 0; i < NMAX * C; i++)
        x[i] = (float)((double)(rnd(rs) >> 11) * 0x1p-53 - 0.5);

    printf("%-7s %-5s %7s %-8s %3s %12s %10s %10s\n", "isa", "mode", "threads", "format", "n", "us/matvec", "GB/s",
           "% of BW");
    static const char *const modes[2] = {"exact", "fast"};
    for (int i = 0; i < nisa * 2; i++) {
        const int md = i % 2;
        if (!v4_cpu_isa_supported(isas[i / 2])) {
            if (md == 0)
                printf("%-7s (not supported by this CPU: skipped)\n", isas[i / 2]);
            continue;
        }
        for (int th = 1; th <= 2; th++) {
            v4_error err;
            v4_err_clear(&err);
            v4_backend *be = v4_cpu_backend_create_ex(th, isas[i / 2], modes[md], &err);
            if (!be) {
                printf("%-7s %-5s %7d create failed: %s\n", isas[i / 2], modes[md], th, err.msg);
                continue;
            }
            for (int f = 0; f < NSET; f++)
                for (int n = 1; n <= NMAX; n += NMAX - 1) {
                    double sec = time_linear(be, &sets[f], n, x, y, samples);
                    double gbs = (double)sets[f].wbytes / sec / 1e9;
                    printf("%-7s %-5s %7d %-8s %3d %12.1f %10.2f %9.0f%%\n", isas[i / 2], modes[md], th, sets[f].name, n,
                           sec * 1e6, gbs, bw > 0 ? 100.0 * gbs / bw : 0.0);
                    fflush(stdout);
                }
            be->ops->destroy(be);
        }
    }
    free(x);
    free(y);
    for (int f = 0; f < NSET; f++)
        free_set(&sets[f]);
    return 0;
}
