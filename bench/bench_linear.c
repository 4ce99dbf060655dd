/* bench_linear.c - CPU matvec throughput against the machine's read bandwidth.
 *
 * For every ISA the CPU supports and 1/2 threads: FP8 [4096 x 4096] and FP4
 * [4096 x 4096] (QUANT mode), n = 1 and n = 8 input vectors.  To measure the memory-
 * bound regime rather than the L3 cache, each sample runs one matvec on each of C
 * copies of the weights (C copies >= 128 MiB in total, visited in order, so every
 * matvec streams its weights from DRAM); time per matvec = sample / C; median of 5
 * samples after a warm-up.  GB/s counts weight bytes (FP8: rows*cols, FP4:
 * rows*cols/2; the E8M0 scales add 0.006% / 6% on top and are not counted).
 * Read bandwidth: STREAM-like sum of a 1 GiB buffer with 2 threads, median of 5.
 *
 * Usage: bench_linear [isa ...]   (default: all supported)
 * Env: V4_BENCH_SAMPLES (default 5).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/threadpool.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static uint64_t rs = 0x123456789abcdefull;
static uint64_t rnd(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}

/* ------------------------------------------------------------ read bandwidth -- */

typedef struct bw_job {
    const uint64_t *buf;
    size_t words;
    int parts;
    uint64_t sum[64];
} bw_job;

static void bw_task(void *ctx, int t, int thread)
{
    (void)thread;
    bw_job *j = ctx;
    size_t per = j->words / (size_t)j->parts, lo = per * (size_t)t, hi = lo + per;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = lo; i < hi; i += 4) {
        s0 += j->buf[i];
        s1 += j->buf[i + 1];
        s2 += j->buf[i + 2];
        s3 += j->buf[i + 3];
    }
    j->sum[t * 8] = s0 + s1 + s2 + s3;
}

static double read_bandwidth(int samples)
{
    const size_t bytes = (size_t)1 << 30;
    uint64_t *buf = aligned_alloc(4096, bytes);
    if (!buf)
        return 0.0;
    memset(buf, 1, bytes);
    v4_pool *p = v4_pool_create(2);
    bw_job j = {buf, bytes / 8, 2, {0}};
    double t[16];
    v4_pool_run(p, 2, bw_task, &j);    /* warm-up */
    for (int s = 0; s < samples; s++) {
        double t0 = now();
        v4_pool_run(p, 2, bw_task, &j);
        t[s] = now() - t0;
    }
    v4_pool_destroy(p);
    volatile uint64_t sink = j.sum[0] + j.sum[8];
    (void)sink;
    free(buf);
    return (double)bytes / median(t, samples) / 1e9;
}

/* ------------------------------------------------------------------ matvec -- */

typedef struct wset {
    v4_mat *m;
    int copies;
    size_t wbytes;      /* weight bytes of one copy */
} wset;

static wset make_set(v4_wtype t, int rows, int cols)
{
    wset s;
    size_t wb = t == V4_W_FP8 ? (size_t)rows * cols : (size_t)rows * cols / 2;
    size_t sb = t == V4_W_FP8 ? (size_t)((rows + 127) / 128) * ((cols + 127) / 128) : (size_t)rows * (cols / 32);
    s.wbytes = wb;
    s.copies = (int)(((size_t)128 << 20) / wb);
    if (s.copies < 2)
        s.copies = 2;
    s.m = calloc((size_t)s.copies, sizeof *s.m);
    for (int c = 0; c < s.copies; c++) {
        uint8_t *w = malloc(wb), *sc = malloc(sb);
        for (size_t i = 0; i < wb; i += 8) {
            uint64_t r = rnd();
            memcpy(w + i, &r, wb - i < 8 ? wb - i : 8);
        }
        if (t == V4_W_FP8)
            for (size_t i = 0; i < wb; i++)
                if ((w[i] & 0x7f) == 0x7f)
                    w[i] ^= 1;            /* no NaN codes */
        for (size_t i = 0; i < sb; i++)
            sc[i] = (uint8_t)(110 + rnd() % 16);
        s.m[c] = (v4_mat){t, rows, cols, w, sc};
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
        v4_linear(be, &s->m[c], V4_LIN_QUANT, n, x, cols, y, rows);
    for (int k = 0; k < samples; k++) {
        double t0 = now();
        for (int c = 0; c < s->copies; c++)
            v4_linear(be, &s->m[c], V4_LIN_QUANT, n, x, cols, y, rows);
        t[k] = (now() - t0) / s->copies;
    }
    return median(t, samples);
}

int main(int argc, char **argv)
{
    const char *env = getenv("V4_BENCH_SAMPLES");
    int samples = env ? atoi(env) : 5;
    if (samples < 1 || samples > 16)
        samples = 5;
    const char *all[3] = {"scalar", "avx2", "avx512"};
    const char *isas[8];
    int nisa = 0;
    if (argc > 1) {
        for (int i = 1; i < argc && nisa < 8; i++)
            isas[nisa++] = argv[i];
    } else {
        for (int i = 0; i < 3; i++)
            isas[nisa++] = all[i];
    }

    double bw = read_bandwidth(samples);
    printf("read bandwidth (1 GiB sum, 2 threads, median of %d): %.1f GB/s\n\n", samples, bw);

    enum { R = 4096, C = 4096, NMAX = 8 };
    wset sets[2] = {make_set(V4_W_FP8, R, C), make_set(V4_W_FP4, R, C)};
    float *x = malloc(sizeof(float) * NMAX * C), *y = malloc(sizeof(float) * NMAX * R);
    for (int i = 0; i < NMAX * C; i++)
        x[i] = (float)((double)(rnd() >> 11) * 0x1p-53 - 0.5);

    printf("%-7s %7s %-6s %3s %12s %10s %10s\n", "isa", "threads", "format", "n", "us/matvec", "GB/s", "% of BW");
    for (int i = 0; i < nisa; i++) {
        if (!v4_cpu_isa_supported(isas[i])) {
            printf("%-7s (not supported by this CPU: skipped)\n", isas[i]);
            continue;
        }
        for (int th = 1; th <= 2; th++) {
            v4_error err;
            v4_err_clear(&err);
            v4_backend *be = v4_cpu_backend_create(th, isas[i], &err);
            if (!be) {
                printf("%-7s %7d create failed: %s\n", isas[i], th, err.msg);
                continue;
            }
            for (int f = 0; f < 2; f++)
                for (int n = 1; n <= NMAX; n += NMAX - 1) {
                    double sec = time_linear(be, &sets[f], n, x, y, samples);
                    double gbs = (double)sets[f].wbytes / sec / 1e9;
                    printf("%-7s %7d %-6s %3d %12.1f %10.2f %9.0f%%\n", isas[i], th, f ? "fp4" : "fp8", n,
                           sec * 1e6, gbs, bw > 0 ? 100.0 * gbs / bw : 0.0);
                    fflush(stdout);
                }
            be->ops->destroy(be);
        }
    }
    free(x);
    free(y);
    free_set(&sets[0]);
    free_set(&sets[1]);
    return 0;
}
