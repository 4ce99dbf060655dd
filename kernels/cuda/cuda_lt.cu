/* cuda_lt.cu - the fast mode's tensor-core products through cuBLASLt (cuda_lt.h):
 * pinned plans per (kind, rows, K), scratch, the product sequences (quantize or split
 * the activations, convert the weight's scales, GEMM, finish), and the self-test
 * against the exact kernels.
 *
 * GEMM shape (column-major, as cuBLASLt counts): D [rows x npad] = op(A) B with
 * A = the weight stored [rows][K] row-major = a K x rows column-major matrix read
 * transposed (TN), B = the activations [npad][K] row-major = K x npad column-major;
 * D column-major rows x npad is y [npad][rows] row-major.  Scale layouts (cuBLAS docs
 * "128-element 1D and 128x128 2D block scaling"): VEC128 for A is M-major [L][rows],
 * for B N-major [L][npad]; BLK128x128 for A is K-major [ceil(rows/128)][L4].
 *
 * Ownership: the v4cu_lt owns everything it allocates.  Thread: one at a time.
 */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/rng.h"   /* v4_splitmix64: the self-test's inputs */
#include "kernels/calc_diff.h"
#include "cu_debug.h"
#include "cuda_fast.h"
#include "cuda_linear.h"
#include "cuda_lt.h"

namespace {

constexpr size_t WS_BYTES = (size_t)32 << 20;
constexpr int REF_N = 64;           /* the width each plan's algorithm is chosen for */
constexpr int N_HEUR = 8;

enum kind { K_FP8 = 0, K_FP4 = 1, K_BF16 = 2 };

struct plan {
    int kind, rows, K;
    cublasLtMatmulDesc_t desc;
    cublasLtMatmulAlgo_t algo;
};

struct buf {
    void *p;
    size_t cap;
};

}  // namespace

struct v4cu_lt {
    cublasLtHandle_t h;
    void *ws;
    plan *plans;
    int n_plans, cap_plans;
    buf q, qs, ws8, d, w8, s8, xb;
    int ok;                         /* the self-test passed */
    int sync_debug;                 /* V4_CUDA_SYNC_DEBUG at create (cu_debug.h): wait after each launch */
    char err[320];
    v4cu_lt_stats stats;
};

namespace {

int lt_fail(v4cu_lt *lt, const char *what, const char *why)
{
    if (!lt->err[0])
        snprintf(lt->err, sizeof lt->err, "%s: %s", what, why);
    return -1;
}

int cu_fail(v4cu_lt *lt, const char *what, cudaError_t e) { return lt_fail(lt, what, cudaGetErrorString(e)); }

int bl_fail(v4cu_lt *lt, const char *what, cublasStatus_t s) { return lt_fail(lt, what, cublasLtGetStatusString(s)); }

/* A launcher's result; in the sync debug mode after a wait for st, so that a fault is
 * reported under the kernel's name (the caller's what). */
cudaError_t launched(const v4cu_lt *lt, cudaError_t e, cudaStream_t st)
{
    return lt->sync_debug ? v4cu_sync_after(st, e) : e;
}

void *grow(v4cu_lt *lt, buf *b, size_t bytes)
{
    if (bytes <= b->cap)
        return b->p;
    cudaFree(b->p);
    b->p = NULL;
    b->cap = 0;
    cudaError_t e = cudaMalloc(&b->p, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        b->p = NULL;
        cu_fail(lt, "fast-mode scratch cudaMalloc", e);
        return NULL;
    }
    b->cap = bytes;
    return b->p;
}

struct layouts {
    cublasLtMatrixLayout_t a = NULL, b = NULL, d = NULL;
    ~layouts()
    {
        if (a)
            cublasLtMatrixLayoutDestroy(a);
        if (b)
            cublasLtMatrixLayoutDestroy(b);
        if (d)
            cublasLtMatrixLayoutDestroy(d);
    }
};

cublasStatus_t make_layouts(layouts *L, int kind, int rows, int K, int cols)
{
    const cudaDataType_t ab = kind == K_BF16 ? CUDA_R_16BF : CUDA_R_8F_E4M3;
    cublasStatus_t s = cublasLtMatrixLayoutCreate(&L->a, ab, (uint64_t)K, (uint64_t)rows, (int64_t)K);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&L->b, ab, (uint64_t)K, (uint64_t)cols, (int64_t)K);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatrixLayoutCreate(&L->d, CUDA_R_32F, (uint64_t)rows, (uint64_t)cols, (int64_t)rows);
    return s;
}

/* The heuristic's first algorithm without a K split for this width. */
cublasStatus_t pick_algo(v4cu_lt *lt, cublasLtMatmulDesc_t desc, const layouts *L, cublasLtMatmulAlgo_t *out)
{
    cublasLtMatmulPreference_t pref = NULL;
    cublasStatus_t s = cublasLtMatmulPreferenceCreate(&pref);
    const uint64_t wsb = WS_BYTES;
    const uint32_t red = CUBLASLT_REDUCTION_SCHEME_NONE;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &red, sizeof red);
    cublasLtMatmulHeuristicResult_t res[N_HEUR];
    int got = 0;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulAlgoGetHeuristic(lt->h, desc, L->a, L->b, L->d, L->d, pref, N_HEUR, res, &got);
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS)
        return s;
    for (int i = 0; i < got; i++) {
        int32_t splits = 1;
        size_t wr = 0;
        if (res[i].state != CUBLAS_STATUS_SUCCESS)
            continue;
        if (cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof splits,
                                                 &wr) == CUBLAS_STATUS_SUCCESS &&
            splits > 1)
            continue;
        *out = res[i].algo;
        return CUBLAS_STATUS_SUCCESS;
    }
    return CUBLAS_STATUS_NOT_SUPPORTED;
}

plan *get_plan(v4cu_lt *lt, int kind, int rows, int K)
{
    for (int i = 0; i < lt->n_plans; i++)
        if (lt->plans[i].kind == kind && lt->plans[i].rows == rows && lt->plans[i].K == K)
            return &lt->plans[i];
    if (lt->n_plans == lt->cap_plans) {
        const int nc = lt->cap_plans ? 2 * lt->cap_plans : 32;
        plan *np = (plan *)realloc(lt->plans, sizeof *np * (size_t)nc);
        if (!np) {
            lt_fail(lt, "fast-mode plans", "out of memory");
            return NULL;
        }
        lt->plans = np;
        lt->cap_plans = nc;
    }
    plan p = {kind, rows, K, NULL, {}};
    cublasStatus_t s = cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;
    const int8_t fast_accum = 0;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof opT);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof opN);
    if (s == CUBLAS_STATUS_SUCCESS && kind != K_BF16) {
        const int32_t am = kind == K_FP8 ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                                         : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
        const int32_t bm = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
        s = cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &am, sizeof am);
        if (s == CUBLAS_STATUS_SUCCESS)
            s = cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &bm, sizeof bm);
        if (s == CUBLAS_STATUS_SUCCESS)
            s = cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum,
                                               sizeof fast_accum);
    }
    layouts L;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = make_layouts(&L, kind, rows, K, kind == K_BF16 ? 2 * REF_N : REF_N);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = pick_algo(lt, p.desc, &L, &p.algo);
    if (s != CUBLAS_STATUS_SUCCESS) {
        if (p.desc)
            cublasLtMatmulDescDestroy(p.desc);
        bl_fail(lt, "fast-mode plan (cublasLt descriptor / heuristic)", s);
        return NULL;
    }
    lt->plans[lt->n_plans] = p;
    lt->stats.plans = ++lt->n_plans;
    return &lt->plans[lt->n_plans - 1];
}

/* D = op(A) B with the plan's algorithm, or the heuristic's for this width if the
 * pinned one refuses it. */
int gemm(v4cu_lt *lt, plan *p, const void *a, const float *as, const void *b, const float *bs, int cols, float *d,
         cudaStream_t st)
{
    layouts L;
    cublasStatus_t s = make_layouts(&L, p->kind, p->rows, p->K, cols);
    if (s == CUBLAS_STATUS_SUCCESS && p->kind != K_BF16) {
        s = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &as, sizeof as);
        if (s == CUBLAS_STATUS_SUCCESS)
            s = cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &bs, sizeof bs);
    }
    if (s != CUBLAS_STATUS_SUCCESS)
        return bl_fail(lt, "fast-mode GEMM set-up", s);
    const float one = 1.0f, zero = 0.0f;
    cublasLtMatmulHeuristicResult_t chk;
    const cublasLtMatmulAlgo_t *algo = &p->algo;
    cublasLtMatmulAlgo_t other;
    if (cublasLtMatmulAlgoCheck(lt->h, p->desc, L.a, L.b, L.d, L.d, algo, &chk) != CUBLAS_STATUS_SUCCESS) {
        s = pick_algo(lt, p->desc, &L, &other);
        if (s != CUBLAS_STATUS_SUCCESS)
            return bl_fail(lt, "fast-mode GEMM: no algorithm for this width", s);
        algo = &other;
        lt->stats.fallbacks++;
    }
    s = cublasLtMatmul(lt->h, p->desc, &one, a, L.a, b, L.b, &zero, d, L.d, d, L.d, algo, lt->ws, WS_BYTES, st);
    if (s != CUBLAS_STATUS_SUCCESS)
        return bl_fail(lt, "cublasLtMatmul", s);
    const cudaError_t ce = launched(lt, cudaSuccess, st);
    if (ce != cudaSuccess)
        return cu_fail(lt, "kernel cublasLtMatmul", ce);
    lt->stats.gemms++;
    return 0;
}

int aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

int quant_impl(v4cu_lt *lt, int type, const uint8_t *w, const uint8_t *scale, int rows, int K, int n, const float *x,
               int ldx, float *y, cudaStream_t st, int force)
{
    if ((!lt->ok && !force) || (type != 1 && type != 2) || n <= 0 || K <= 0 || K % 128 || rows < 16 || rows % 16 ||
        (type == 1 && !aligned16(w))) {
        lt->stats.declined++;
        return 1;
    }
    const int npad = v4cu_npad(n), L = K / 128;
    uint8_t *q = (uint8_t *)grow(lt, &lt->q, (size_t)npad * K);
    float *qs = (float *)grow(lt, &lt->qs, sizeof(float) * (size_t)L * npad);
    float *d = (float *)grow(lt, &lt->d, sizeof(float) * (size_t)npad * rows);
    if (!q || !qs || !d)
        return -1;
    cudaError_t e = launched(lt, v4cu_fast_act_quant(x, ldx, n, npad, K, q, qs, st), st);
    if (e != cudaSuccess)
        return cu_fail(lt, "fast-mode activation quantization (kernel v4cu_fast_act_quant)", e);
    const void *a = w;
    float *as;
    if (type == 1) {
        as = (float *)grow(lt, &lt->ws8, sizeof(float) * (size_t)((rows + 127) / 128) * v4cu_l4(K));
        if (!as)
            return -1;
        e = launched(lt, v4cu_fast_wscale(scale, rows, K, as, st), st);
    } else {
        uint8_t *w8 = (uint8_t *)grow(lt, &lt->w8, (size_t)rows * K);
        as = (float *)grow(lt, &lt->s8, sizeof(float) * (size_t)L * rows);
        if (!w8 || !as)
            return -1;
        e = launched(lt, v4cu_fast_fp4_to_fp8(w, scale, rows, K, w8, as, st), st);
        a = w8;
    }
    if (e != cudaSuccess)
        return cu_fail(lt, type == 1 ? "fast-mode weight scales (kernel v4cu_fast_wscale)"
                                     : "fast-mode weight scales (kernel v4cu_fast_fp4_to_fp8)", e);
    plan *p = get_plan(lt, type == 1 ? K_FP8 : K_FP4, rows, K);
    if (!p || gemm(lt, p, a, as, q, qs, npad, d, st))
        return -1;
    e = launched(lt, v4cu_fast_finish(d, rows, n, npad, 0, y, rows, st), st);
    return e == cudaSuccess ? 0 : cu_fail(lt, "fast-mode finish (kernel v4cu_fast_finish)", e);
}

int bf16_impl(v4cu_lt *lt, const uint16_t *wb, int rows, int K, int n, const float *x, int ldx, float *y,
              cudaStream_t st, int force)
{
    if ((!lt->ok && !force) || n <= 0 || K <= 0 || K % 8 || rows < 16 || rows % 16 || !aligned16(wb)) {
        lt->stats.declined++;
        return 1;
    }
    const int npad = v4cu_npad(n);
    uint16_t *xb = (uint16_t *)grow(lt, &lt->xb, sizeof(uint16_t) * 2 * (size_t)npad * K);
    float *d = (float *)grow(lt, &lt->d, sizeof(float) * 2 * (size_t)npad * rows);
    if (!xb || !d)
        return -1;
    cudaError_t e = launched(lt, v4cu_fast_split_bf16(x, ldx, n, npad, K, xb, st), st);
    if (e != cudaSuccess)
        return cu_fail(lt, "fast-mode bf16 split (kernel v4cu_fast_split_bf16)", e);
    plan *p = get_plan(lt, K_BF16, rows, K);
    if (!p || gemm(lt, p, wb, NULL, xb, NULL, 2 * npad, d, st))
        return -1;
    e = launched(lt, v4cu_fast_finish(d, rows, n, npad, 1, y, rows, st), st);
    return e == cudaSuccess ? 0 : cu_fail(lt, "fast-mode finish (kernel v4cu_fast_finish)", e);
}

/* ------------------------------------------------------------------ self-test */

struct devbufs {
    void *p[8] = {};
    ~devbufs()
    {
        for (void *q : p)
            cudaFree(q);
    }
};

/* One product of each kind on random data, fast against exact; "" when all pass. */
int selftest(v4cu_lt *lt, cudaStream_t st, char *why, size_t nwhy)
{
    const int rows = 256, K = 512, n = 6, L = K / 128;
    uint64_t seed = 0x5eed5eedull;
    const size_t nw8 = (size_t)rows * K, ns8 = (size_t)2 * L, nw4 = nw8 / 2, ns4 = (size_t)rows * (K / 32);
    uint8_t *hw = (uint8_t *)malloc(nw8 + ns8 + nw4 + ns4);
    uint16_t *hb = (uint16_t *)malloc(sizeof(uint16_t) * nw8);
    float *hx = (float *)malloc(sizeof(float) * (size_t)n * K), *hy = (float *)malloc(sizeof(float) * 4 * n * rows);
    if (!hw || !hb || !hx || !hy) {
        free(hw), free(hb), free(hx), free(hy);
        snprintf(why, nwhy, "self-test: out of host memory");
        return -1;
    }
    uint8_t *hs8 = hw + nw8, *hw4 = hs8 + ns8, *hs4 = hw4 + nw4;
    for (size_t i = 0; i < nw8; i++) {
        hw[i] = (uint8_t)v4_splitmix64(&seed);
        if ((hw[i] & 0x7f) == 0x7f)
            hw[i] = 0x31;
        const float v = (float)((int)(v4_splitmix64(&seed) % 2001) - 1000) / 4096.0f;
        uint32_t u;
        memcpy(&u, &v, 4);
        hb[i] = (uint16_t)(u >> 16);
    }
    for (size_t i = 0; i < ns8; i++)
        hs8[i] = (uint8_t)(120 + v4_splitmix64(&seed) % 6);
    for (size_t i = 0; i < nw4; i++)
        hw4[i] = (uint8_t)v4_splitmix64(&seed);
    for (size_t i = 0; i < ns4; i++)
        hs4[i] = (uint8_t)(118 + v4_splitmix64(&seed) % 8);
    for (size_t i = 0; i < (size_t)n * K; i++)
        hx[i] = (float)((int)(v4_splitmix64(&seed) % 20001) - 10000) / (float)(1 + v4_splitmix64(&seed) % 3000);
    devbufs B;
    const size_t bytes[6] = {nw8 + ns8 + nw4 + ns4, sizeof(uint16_t) * nw8, sizeof(float) * (size_t)n * K,
                             sizeof(float) * 2 * (size_t)n * rows, sizeof(double) * (size_t)n * K,
                             sizeof(float) * ((size_t)n * L + 1)};
    cudaError_t e = cudaSuccess;
    for (int i = 0; i < 6 && e == cudaSuccess; i++)
        e = cudaMalloc(&B.p[i], bytes[i]);
    uint8_t *dw = (uint8_t *)B.p[0], *ds8 = dw + nw8, *dw4 = ds8 + ns8, *ds4 = dw4 + nw4;
    uint16_t *db = (uint16_t *)B.p[1];
    float *dx = (float *)B.p[2], *dy = (float *)B.p[3], *dxs = (float *)B.p[5];
    double *dxq = (double *)B.p[4];
    if (e == cudaSuccess)
        e = cudaMemcpy(dw, hw, bytes[0], cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(db, hb, bytes[1], cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        e = cudaMemcpy(dx, hx, bytes[2], cudaMemcpyHostToDevice);
    int rc = 0;
    const char *names[3] = {"FP8", "FP4", "BF16"};
    for (int t = 0; t < 3 && e == cudaSuccess && !rc; t++) {
        float *ex = dy, *fa = dy + (size_t)n * rows;
        if (t < 2) {
            e = v4cu_act_quant(dx, n, K, dxq, dxs, st);
            if (e == cudaSuccess)
                e = (t == 0 ? v4cu_quant_fp8 : v4cu_quant_fp4)(t == 0 ? dw : dw4, t == 0 ? ds8 : ds4, rows, K, n, dxq,
                                                               dxs, ex, st);
            if (e == cudaSuccess)
                rc = quant_impl(lt, t + 1, t == 0 ? dw : dw4, t == 0 ? ds8 : ds4, rows, K, n, dx, K, fa, st, 1);
        } else {
            e = v4cu_exact(3, 0, db, NULL, rows, K, n, dx, ex, st);
            if (e == cudaSuccess)
                rc = bf16_impl(lt, db, rows, K, n, dx, K, fa, st, 1);
        }
        if (e == cudaSuccess && !rc)
            e = cudaMemcpyAsync(hy, dy, sizeof(float) * 2 * (size_t)n * rows, cudaMemcpyDeviceToHost, st);
        if (e == cudaSuccess && !rc)
            e = cudaStreamSynchronize(st);
        if (e == cudaSuccess && !rc) {
            long bad = 0;
            const double cd = v4_calc_diff(hy, hy + (size_t)n * rows, (size_t)n * rows, &bad);
            if (bad || !(cd <= 1e-5)) {
                snprintf(why, nwhy, "self-test: %s product calc_diff %.3g against the exact kernel (bound 1e-5), "
                                    "%ld non-finite mismatches", names[t], cd, bad);
                rc = 1;
            }
        } else if (rc) {
            snprintf(why, nwhy, "self-test: %s product: %s", names[t], lt->err[0] ? lt->err : "declined");
        }
    }
    if (e != cudaSuccess) {
        snprintf(why, nwhy, "self-test: %s", cudaGetErrorString(e));
        rc = -1;
    }
    free(hw), free(hb), free(hx), free(hy);
    return rc;
}

}  // namespace

extern "C" {

v4cu_lt *v4cu_lt_create(cudaStream_t st, char *why, size_t nwhy)
{
    v4cu_lt *lt = (v4cu_lt *)calloc(1, sizeof *lt);
    if (!lt) {
        snprintf(why, nwhy, "out of memory");
        return NULL;
    }
    lt->sync_debug = v4cu_sync_debug_env();
    cublasStatus_t s = cublasLtCreate(&lt->h);
    if (s != CUBLAS_STATUS_SUCCESS) {
        snprintf(why, nwhy, "cublasLtCreate: %s", cublasLtGetStatusString(s));
        free(lt);
        return NULL;
    }
    cudaError_t e = cudaMalloc(&lt->ws, WS_BYTES);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(why, nwhy, "cuBLASLt workspace: %s", cudaGetErrorString(e));
        v4cu_lt_free(lt);
        return NULL;
    }
    char msg[320] = "";
    const int rc = selftest(lt, st, msg, sizeof msg);
    lt->ok = rc == 0;
    if (!lt->ok) {
        snprintf(lt->err, sizeof lt->err, "%s", msg);
        fprintf(stderr, "v4fleet: fast numerics on the GPU: the tensor-core path is OFF (%s); the exact kernels "
                        "run every product\n", msg);
        (void)cudaGetLastError();
    } else {
        lt->err[0] = 0;
    }
    memset(&lt->stats, 0, sizeof lt->stats);
    lt->stats.plans = lt->n_plans;
    return lt;
}

void v4cu_lt_free(v4cu_lt *lt)
{
    if (!lt)
        return;
    for (int i = 0; i < lt->n_plans; i++)
        cublasLtMatmulDescDestroy(lt->plans[i].desc);
    free(lt->plans);
    buf *bs[7] = {&lt->q, &lt->qs, &lt->ws8, &lt->d, &lt->w8, &lt->s8, &lt->xb};
    for (buf *b : bs)
        cudaFree(b->p);
    cudaFree(lt->ws);
    if (lt->h)
        cublasLtDestroy(lt->h);
    free(lt);
}

int v4cu_lt_ok(const v4cu_lt *lt) { return lt && lt->ok; }

const char *v4cu_lt_error(const v4cu_lt *lt) { return lt ? lt->err : "no cuBLASLt context"; }

int v4cu_lt_quant(v4cu_lt *lt, int type, const uint8_t *w, const uint8_t *scale, int rows, int K, int n,
                  const float *x, int ldx, float *y, cudaStream_t st)
{
    return quant_impl(lt, type, w, scale, rows, K, n, x, ldx, y, st, 0);
}

int v4cu_lt_bf16(v4cu_lt *lt, const uint16_t *wb, int rows, int K, int n, const float *x, int ldx, float *y,
                 cudaStream_t st)
{
    return bf16_impl(lt, wb, rows, K, n, x, ldx, y, st, 0);
}

void v4cu_lt_get_stats(const v4cu_lt *lt, v4cu_lt_stats *st) { *st = lt->stats; }

}  /* extern "C" */
