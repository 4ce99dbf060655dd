/* bench_cuda_linear.c - throughput of the CUDA backend's linear op on V4-Flash shapes.
 *
 * Shapes: FP8 [4096 x 4096] (QUANT, a trunk projection), FP4 experts [2048 x 4096]
 * (w1/w3) and [4096 x 2048] (w2) (QUANT), and the BF16 LM head [129280 x 4096] (EXACT,
 * row-major and R8 as the model prepares it); batches 1, 4 and 8.
 * Two timings per row:
 *   call us   - one v4_linear call through the backend as the engine makes it in
 *               "hybrid" mode (x H2D, kernels, y D2H, stream sync), weights already
 *               cached on the device; median of the samples.
 *   kernel us - the kernels alone on device-resident weights and activations (act
 *               quantization + product), timed with CUDA events over many launches.
 * Both cycle through C copies of the weights (C copies >= 256 MiB) so that the 50 MB
 * L2 cache does not serve them; GB/s = weight bytes (FP8 rows*cols, FP4 rows*cols/2,
 * BF16 2*rows*cols; scales not counted) / kernel time, and % of the H200's 4.8 TB/s.
 *
 * Without the CUDA backend compiled in, or without a GPU, it prints "no GPU: skipped"
 * and exits 0 (it is a benchmark, not a test).
 * Usage: bench_cuda_linear [iterations]   (default 50 per timing)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "kernels/codec.h"
#ifdef V4_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_linear.h"
#include "kernels/v4/weights.h"
#endif

#ifdef V4_HAVE_CUDA
static uint64_t rnd(uint64_t *rs)
{
    *rs ^= *rs << 13;
    *rs ^= *rs >> 7;
    *rs ^= *rs << 17;
    return *rs;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

typedef struct shape {
    const char *name;
    v4_wtype type;
    v4_lin_mode mode;
    v4_layout layout;
    int rows, cols;
} shape;

/* weight bytes as the kernels read them (scales apart) */
static size_t wbytes(const shape *s)
{
    size_t e = (size_t)s->rows * (size_t)s->cols;
    return s->type == V4_W_FP8 ? e : s->type == V4_W_FP4 ? e / 2 : e * 2;
}

static size_t sbytes(const shape *s)
{
    if (s->type == V4_W_FP8)
        return (size_t)((s->rows + 127) / 128) * (size_t)((s->cols + 127) / 128);
    if (s->type == V4_W_FP4)
        return (size_t)s->rows * (size_t)(s->cols / 32);
    return 0;
}

static void fill_weights(const shape *s, uint8_t *w, uint8_t *sc, uint64_t *rs)
{
    const size_t n = wbytes(s);
    if (s->type == V4_W_BF16) {
        uint16_t *h = (uint16_t *)w;
        for (size_t i = 0; i < n / 2; i++)
            h[i] = (uint16_t)(0x3c00u | (rnd(rs) & 0x83ffu));     /* finite, |v| ~ 2^-7..2^0 */
    } else {
        for (size_t i = 0; i < n; i += 8) {
            uint64_t v = rnd(rs) & 0x7e7e7e7e7e7e7e7eull;             /* no e4m3 NaN codes */
            memcpy(w + i, &v, n - i < 8 ? n - i : 8);
        }
    }
    for (size_t i = 0; i < sbytes(s); i++)
        sc[i] = (uint8_t)(120 + rnd(rs) % 8);
}

typedef struct row {
    char shape[48];
    const char *type;
    const char *layout;
    int n;
    double call_us, kern_us, gbs;
} row;

static int bench_shape(v4_backend *be, const shape *s, int iters, row *out, int nout)
{
    const size_t wb = wbytes(s), sb = sbytes(s);
    size_t copies = ((size_t)256 << 20) / wb + 1;
    if (copies > 64)
        copies = 64;
    uint64_t rs = 0x9e3779b97f4a7c15ull ^ (uint64_t)s->rows;
    uint8_t **hw = calloc(copies, sizeof *hw), **hs = calloc(copies, sizeof *hs);
    void **dw = calloc(copies, sizeof *dw);
    uint8_t **ds = calloc(copies, sizeof *ds);
    v4_mat *W = calloc(copies, sizeof *W);
    int nrow = 0;
    for (size_t c = 0; c < copies; c++) {
        uint8_t *tmp = malloc(wb);
        hs[c] = sb ? malloc(sb) : NULL;
        fill_weights(s, tmp, hs[c], &rs);
        W[c] = (v4_mat){s->type, s->rows, s->cols, tmp, hs[c], V4_LAYOUT_ROWMAJOR};
        if (s->layout == V4_LAYOUT_R8) {
            hw[c] = malloc(v4_mat_r8_bytes(&W[c]));
            v4_mat_pack_r8(&W[c], hw[c], 0, (s->rows + 7) / 8);
            free(tmp);
            W[c].w = hw[c];
            W[c].layout = V4_LAYOUT_R8;
        } else {
            hw[c] = tmp;
        }
        if (cudaMalloc(&dw[c], wb) != cudaSuccess || (sb && cudaMalloc((void **)&ds[c], sb) != cudaSuccess)) {
            fprintf(stderr, "bench: cudaMalloc failed for %s\n", s->name);
            return 0;
        }
        cudaMemcpy(dw[c], hw[c], wb, cudaMemcpyHostToDevice);
        if (sb)
            cudaMemcpy(ds[c], hs[c], sb, cudaMemcpyHostToDevice);
    }
    static const int batches[] = {1, 4, 8};
    const int K = s->cols, rows = s->rows;
    float *x = malloc(sizeof(float) * 8 * (size_t)K), *y = malloc(sizeof(float) * 8 * (size_t)rows);
    for (size_t i = 0; i < 8 * (size_t)K; i++)
        x[i] = v4_bf16((float)((int)(rnd(&rs) % 2001) - 1000) / 256.0f);
    float *dx, *dxs, *dy;
    double *dxq;
    cudaMalloc((void **)&dx, sizeof(float) * 8 * (size_t)K);
    cudaMalloc((void **)&dxq, sizeof(double) * 8 * (size_t)K);
    cudaMalloc((void **)&dxs, sizeof(float) * (8 * (size_t)(K / 128) + 1));
    cudaMalloc((void **)&dy, sizeof(float) * 8 * (size_t)rows);
    cudaMemcpy(dx, x, sizeof(float) * 8 * (size_t)K, cudaMemcpyHostToDevice);
    cudaStream_t st;
    cudaStreamCreate(&st);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (size_t bi = 0; bi < sizeof batches / sizeof batches[0] && nrow < nout; bi++) {
        const int n = batches[bi];
        /* through the backend: warm-up uploads every copy */
        for (size_t c = 0; c < copies; c++)
            v4_linear(be, &W[c], s->mode, n, x, K, y, rows);
        double *t = malloc(sizeof(double) * (size_t)iters);
        for (int i = 0; i < iters; i++) {
            double t0 = now_s();
            v4_linear(be, &W[(size_t)i % copies], s->mode, n, x, K, y, rows);
            t[i] = now_s() - t0;
        }
        qsort(t, (size_t)iters, sizeof(double), cmp_d);
        const double call = t[iters / 2];
        free(t);
        /* kernels alone */
        cudaError_t err = cudaSuccess;
        for (int pass = 0; pass < 2 && err == cudaSuccess; pass++) {
            const int reps = pass ? iters : 3;
            if (pass)
                cudaEventRecord(e0, st);
            for (int i = 0; i < reps && err == cudaSuccess; i++) {
                const size_t c = (size_t)i % copies;
                if (s->mode == V4_LIN_QUANT) {
                    err = v4cu_act_quant(dx, n, K, dxq, dxs, st);
                    if (err == cudaSuccess)
                        err = (s->type == V4_W_FP8 ? v4cu_quant_fp8 : v4cu_quant_fp4)(dw[c], ds[c], rows, K, n, dxq,
                                                                                        dxs, dy, st);
                } else {
                    err = v4cu_exact((int)s->type, s->layout == V4_LAYOUT_R8, dw[c], ds[c], rows, K, n, dx, dy, st);
                }
            }
            if (pass)
                cudaEventRecord(e1, st);
        }
        float ms = 0;
        if (err == cudaSuccess)
            err = cudaEventSynchronize(e1);
        if (err == cudaSuccess)
            err = cudaEventElapsedTime(&ms, e0, e1);
        if (err != cudaSuccess) {
            fprintf(stderr, "bench: %s n=%d: %s\n", s->name, n, cudaGetErrorString(err));
            break;
        }
        row *r = &out[nrow++];
        snprintf(r->shape, sizeof r->shape, "%s %dx%d", s->name, rows, K);
        r->type = s->type == V4_W_FP8 ? "fp8" : s->type == V4_W_FP4 ? "fp4" : "bf16";
        r->layout = s->layout == V4_LAYOUT_R8 ? "R8" : "rowmajor";
        r->n = n;
        r->call_us = call * 1e6;
        r->kern_us = 1e3 * (double)ms / iters;
        r->gbs = (double)wb / (r->kern_us * 1e-6) / 1e9;
    }
    v4_cuda_backend_drop_weights(be);
    for (size_t c = 0; c < copies; c++) {
        free(hw[c]);
        free(hs[c]);
        cudaFree(dw[c]);
        cudaFree(ds[c]);
    }
    free(hw); free(hs); free(dw); free(ds); free(W); free(x); free(y);
    cudaFree(dx); cudaFree(dxq); cudaFree(dxs); cudaFree(dy);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaStreamDestroy(st);
    return nrow;
}
#endif

int main(int argc, char **argv)
{
#ifndef V4_HAVE_CUDA
    (void)argc; (void)argv;
    printf("bench_cuda_linear: no GPU: skipped (built without the CUDA backend)\n");
    return 0;
#else
    char why[256] = "";
    if (v4_cuda_device_count(why, sizeof why) <= 0) {
        printf("bench_cuda_linear: no GPU: skipped (%s)\n", why);
        return 0;
    }
    const int iters = argc > 1 ? atoi(argv[1]) : 50;
    if (iters < 1) {
        fprintf(stderr, "usage: bench_cuda_linear [iterations >= 1]\n");
        return 2;
    }
    v4_error err = {0};
    v4_backend *be = v4_cuda_backend_create(0, &err);
    if (!be) {
        fprintf(stderr, "bench_cuda_linear: %s\n", err.msg);
        return 1;
    }
    char host[128] = "?";
    gethostname(host, sizeof host - 1);
    static const shape shapes[] = {
        {"trunk", V4_W_FP8, V4_LIN_QUANT, V4_LAYOUT_ROWMAJOR, 4096, 4096},
        {"expert w1/w3", V4_W_FP4, V4_LIN_QUANT, V4_LAYOUT_ROWMAJOR, 2048, 4096},
        {"expert w2", V4_W_FP4, V4_LIN_QUANT, V4_LAYOUT_ROWMAJOR, 4096, 2048},
        {"lm head", V4_W_BF16, V4_LIN_EXACT, V4_LAYOUT_ROWMAJOR, 129280, 4096},
        {"lm head", V4_W_BF16, V4_LIN_EXACT, V4_LAYOUT_R8, 129280, 4096},
    };
    row rows[64];
    int nr = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        nr += bench_shape(be, &shapes[i], iters, rows + nr, 64 - nr);
    printf("\nmachine: %s, %s\n", host, v4_cuda_backend_device_name(be));
    printf("%-28s %-5s %-8s %5s %10s %10s %9s %8s\n", "shape", "type", "layout", "batch", "call us", "kernel us",
           "GB/s", "% 4.8TB/s");
    for (int i = 0; i < nr; i++)
        printf("%-28s %-5s %-8s %5d %10.1f %10.1f %9.1f %7.1f%%\n", rows[i].shape, rows[i].type, rows[i].layout,
               rows[i].n, rows[i].call_us, rows[i].kern_us, rows[i].gbs, 100.0 * rows[i].gbs / 4800.0);
    int rc = v4_cuda_backend_status(be, &err) ? 1 : 0;
    if (rc)
        fprintf(stderr, "bench_cuda_linear: CUDA failure: %s\n", err.msg);
    be->ops->destroy(be);
    return rc;
#endif
}
