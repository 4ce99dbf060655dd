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
 * Before cublasLtMatmulAlgoGetHeuristic the descriptor carries what the product will
 * run with: the block scales' pointers (the real scratch pointers of the first call; a
 * later call sets its own before cublasLtMatmul) and, in the preference, each operand's
 * alignment (cuda_lt_policy.h: v4cu_lt_align_pick), which is also part of a plan's key.
 * The self-test records which product failed and the cuBLAS / CUDA status
 * (v4_fast_selftest) for the stderr line, the backend and the worker's /metrics.
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
    v4cu_lt_align al;               /* the operands' alignments the algorithm was chosen for */
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
    char err_status[40];            /* the first failure's cuBLAS status / CUDA error name ("" none) */
    int err_code;                   /* and its number */
    v4cu_lt_stats stats;
};

namespace {

/* The first failure wins (message, status name, number). */
int lt_fail(v4cu_lt *lt, const char *what, const char *why, const char *status, int code)
{
    if (!lt->err[0]) {
        snprintf(lt->err, sizeof lt->err, "%s: %s", what, why);
        snprintf(lt->err_status, sizeof lt->err_status, "%s", status);
        lt->err_code = code;
    }
    return -1;
}

int cu_fail(v4cu_lt *lt, const char *what, cudaError_t e)
{
    return lt_fail(lt, what, cudaGetErrorString(e), cudaGetErrorName(e), (int)e);
}

int bl_fail(v4cu_lt *lt, const char *what, cublasStatus_t s)
{
    return lt_fail(lt, what, cublasLtGetStatusString(s), cublasLtGetStatusName(s), (int)s);
}

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

/* The heuristic's first algorithm without a K split for this width, among those that
 * work with operands aligned as al says (the preferences default to 256 bytes). */
cublasStatus_t pick_algo(v4cu_lt *lt, cublasLtMatmulDesc_t desc, const layouts *L, const v4cu_lt_align *al,
                         cublasLtMatmulAlgo_t *out)
{
    cublasLtMatmulPreference_t pref = NULL;
    cublasStatus_t s = cublasLtMatmulPreferenceCreate(&pref);
    const uint64_t wsb = WS_BYTES;
    const uint32_t red = CUBLASLT_REDUCTION_SCHEME_NONE;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &red, sizeof red);
    const struct {
        cublasLtMatmulPreferenceAttributes_t attr;
        uint32_t bytes;
    } aligns[4] = {{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, al->a},
                   {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, al->b},
                   {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, al->c},
                   {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, al->d}};
    for (int i = 0; i < 4 && s == CUBLAS_STATUS_SUCCESS; i++)
        s = cublasLtMatmulPreferenceSetAttribute(pref, aligns[i].attr, &aligns[i].bytes, sizeof aligns[i].bytes);
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

/* The pinned plan of (kind, rows, K, al), made on first use: the descriptor with the
 * block scales' modes and pointers (as, bs: this call's; NULL for BF16) set before the
 * heuristic is asked, for the alignments al. */
plan *get_plan(v4cu_lt *lt, int kind, int rows, int K, const v4cu_lt_align *al, const float *as, const float *bs)
{
    for (int i = 0; i < lt->n_plans; i++)
        if (lt->plans[i].kind == kind && lt->plans[i].rows == rows && lt->plans[i].K == K &&
            v4cu_lt_align_eq(&lt->plans[i].al, al))
            return &lt->plans[i];
    if (lt->n_plans == lt->cap_plans) {
        const int nc = lt->cap_plans ? 2 * lt->cap_plans : 32;
        plan *np = (plan *)realloc(lt->plans, sizeof *np * (size_t)nc);
        if (!np) {
            lt_fail(lt, "fast-mode plans", "out of memory", "out of host memory", 0);
            return NULL;
        }
        lt->plans = np;
        lt->cap_plans = nc;
    }
    plan p = {kind, rows, K, *al, NULL, {}};
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
        /* the scales the product runs with, before the heuristic (a NULL one means 1) */
        if (s == CUBLAS_STATUS_SUCCESS)
            s = cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &as, sizeof as);
        if (s == CUBLAS_STATUS_SUCCESS)
            s = cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &bs, sizeof bs);
    }
    layouts L;
    if (s == CUBLAS_STATUS_SUCCESS)
        s = make_layouts(&L, kind, rows, K, kind == K_BF16 ? 2 * REF_N : REF_N);
    if (s == CUBLAS_STATUS_SUCCESS)
        s = pick_algo(lt, p.desc, &L, al, &p.algo);
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
        s = pick_algo(lt, p->desc, &L, &p->al, &other);
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

/* The operands' alignments of D [rows x cols] = op(A) B with A the weight (K x rows, ld K
 * elements of esize bytes), B the activations (K x cols, ld K) and C = D (floats, ld
 * rows): 0 with *al, or 1 (declined) when one is below 16 bytes (cuda_lt_policy.h). */
int operand_align(const void *a, const void *b, const float *d, int rows, int K, size_t esize, v4cu_lt_align *al)
{
    const uint64_t ldab = (uint64_t)K * esize, ldd = sizeof(float) * (uint64_t)rows;
    return v4cu_lt_align_pick((uintptr_t)a, ldab, (uintptr_t)b, ldab, (uintptr_t)d, ldd, (uintptr_t)d, ldd, al);
}

int decline(v4cu_lt *lt, int misaligned)
{
    lt->stats.declined++;
    lt->stats.misaligned += misaligned != 0;
    return 1;
}

int quant_impl(v4cu_lt *lt, int type, const uint8_t *w, const uint8_t *scale, int rows, int K, int n, const float *x,
               int ldx, float *y, cudaStream_t st, int force)
{
    if ((!lt->ok && !force) || (type != 1 && type != 2) || n <= 0 || K <= 0 || K % 128 || rows < 16 || rows % 16)
        return decline(lt, 0);
    v4cu_lt_align al;
    /* an FP8 weight is read in place: a misaligned one goes to the exact kernel before any work */
    if (type == 1 && v4cu_lt_align_of((uintptr_t)w, (uint64_t)K) < V4CU_LT_ALIGN_MIN)
        return decline(lt, 1);
    const int npad = v4cu_npad(n), L = K / 128;
    uint8_t *q = (uint8_t *)grow(lt, &lt->q, (size_t)npad * K);
    float *qs = (float *)grow(lt, &lt->qs, sizeof(float) * (size_t)L * npad);
    float *d = (float *)grow(lt, &lt->d, sizeof(float) * (size_t)npad * rows);
    uint8_t *w8 = type == 2 ? (uint8_t *)grow(lt, &lt->w8, (size_t)rows * K) : NULL;
    if (!q || !qs || !d || (type == 2 && !w8))
        return -1;
    if (operand_align(type == 1 ? (const void *)w : (const void *)w8, q, d, rows, K, 1, &al))
        return decline(lt, 1);
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
        as = (float *)grow(lt, &lt->s8, sizeof(float) * (size_t)L * rows);
        if (!as)
            return -1;
        e = launched(lt, v4cu_fast_fp4_to_fp8(w, scale, rows, K, w8, as, st), st);
        a = w8;
    }
    if (e != cudaSuccess)
        return cu_fail(lt, type == 1 ? "fast-mode weight scales (kernel v4cu_fast_wscale)"
                                     : "fast-mode weight scales (kernel v4cu_fast_fp4_to_fp8)", e);
    plan *p = get_plan(lt, type == 1 ? K_FP8 : K_FP4, rows, K, &al, as, qs);
    if (!p || gemm(lt, p, a, as, q, qs, npad, d, st))
        return -1;
    e = launched(lt, v4cu_fast_finish(d, rows, n, npad, 0, y, rows, st), st);
    return e == cudaSuccess ? 0 : cu_fail(lt, "fast-mode finish (kernel v4cu_fast_finish)", e);
}

int bf16_impl(v4cu_lt *lt, const uint16_t *wb, int rows, int K, int n, const float *x, int ldx, float *y,
              cudaStream_t st, int force)
{
    if ((!lt->ok && !force) || n <= 0 || K <= 0 || K % 8 || rows < 16 || rows % 16)
        return decline(lt, 0);
    if (v4cu_lt_align_of((uintptr_t)wb, 2 * (uint64_t)K) < V4CU_LT_ALIGN_MIN)
        return decline(lt, 1);
    const int npad = v4cu_npad(n);
    uint16_t *xb = (uint16_t *)grow(lt, &lt->xb, sizeof(uint16_t) * 2 * (size_t)npad * K);
    float *d = (float *)grow(lt, &lt->d, sizeof(float) * 2 * (size_t)npad * rows);
    if (!xb || !d)
        return -1;
    v4cu_lt_align al;
    if (operand_align(wb, xb, d, rows, K, sizeof(uint16_t), &al))
        return decline(lt, 1);
    cudaError_t e = launched(lt, v4cu_fast_split_bf16(x, ldx, n, npad, K, xb, st), st);
    if (e != cudaSuccess)
        return cu_fail(lt, "fast-mode bf16 split (kernel v4cu_fast_split_bf16)", e);
    plan *p = get_plan(lt, K_BF16, rows, K, &al, NULL, NULL);
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

/* The verdict of a failure: which product (or "setup"), the status name and number,
 * and the reason (also the stderr line's). */
void verdict_fail(v4_fast_selftest *v, int state, const char *product, const char *status, int code,
                  const char *detail)
{
    v->state = state;
    snprintf(v->product, sizeof v->product, "%s", product);
    snprintf(v->status, sizeof v->status, "%s", status);
    v->code = code;
    snprintf(v->detail, sizeof v->detail, "%s", detail);
}

/* One product of each kind on random data, fast against exact: 0 when all pass, else
 * nonzero with the failing product, its status and the reason in *v. */
int selftest(v4cu_lt *lt, cudaStream_t st, v4_fast_selftest *v)
{
    const int rows = 256, K = 512, n = 6, L = K / 128;
    uint64_t seed = 0x5eed5eedull;
    const size_t nw8 = (size_t)rows * K, ns8 = (size_t)2 * L, nw4 = nw8 / 2, ns4 = (size_t)rows * (K / 32);
    uint8_t *hw = (uint8_t *)malloc(nw8 + ns8 + nw4 + ns4);
    uint16_t *hb = (uint16_t *)malloc(sizeof(uint16_t) * nw8);
    float *hx = (float *)malloc(sizeof(float) * (size_t)n * K), *hy = (float *)malloc(sizeof(float) * 4 * n * rows);
    if (!hw || !hb || !hx || !hy) {
        free(hw), free(hb), free(hx), free(hy);
        verdict_fail(v, V4_FAST_FAILED, "setup", "out of host memory", 0, "self-test: out of host memory");
        return -1;
    }
    uint8_t *hs8 = hw + nw8, *hw4 = hs8 + ns8, *hs4 = hw4 + nw4;
    for (size_t i = 0; i < nw8; i++) {
        hw[i] = (uint8_t)v4_splitmix64(&seed);
        if ((hw[i] & 0x7f) == 0x7f)
            hw[i] = 0x31;
        const float x = (float)((int)(v4_splitmix64(&seed) % 2001) - 1000) / 4096.0f;
        uint32_t u;
        memcpy(&u, &x, 4);
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
    /* on st itself: st is non-blocking, so it would not wait for a plain cudaMemcpy on the
     * legacy default stream (pageable sources: staged before each call returns) */
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(dw, hw, bytes[0], cudaMemcpyHostToDevice, st);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(db, hb, bytes[1], cudaMemcpyHostToDevice, st);
    if (e == cudaSuccess)
        e = cudaMemcpyAsync(dx, hx, bytes[2], cudaMemcpyHostToDevice, st);
    int rc = 0;
    static const char *const products[3] = {"fp8 block-scaled", "fp4 w4a8", "bf16"};
    const char *where = "setup";    /* what a CUDA error belongs to */
    char msg[sizeof v->detail];
    for (int t = 0; t < 3 && e == cudaSuccess && !rc; t++) {
        where = products[t];
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
                snprintf(msg, sizeof msg, "self-test: %s product calc_diff %.3g against the exact kernel (bound 1e-5), "
                                          "%ld non-finite mismatches", products[t], cd, bad);
                verdict_fail(v, V4_FAST_FAILED, products[t], "calc_diff", 0, msg);
                rc = 1;
            }
        } else if (rc < 0) {
            snprintf(msg, sizeof msg, "self-test: %s product: %.280s", products[t], lt->err);
            verdict_fail(v, V4_FAST_FAILED, products[t], lt->err_status[0] ? lt->err_status : "failed", lt->err_code,
                         msg);
        } else if (rc > 0) {
            snprintf(msg, sizeof msg, "self-test: %s product: declined its own test shape (%d x %d, %d columns)",
                     products[t], rows, K, n);
            verdict_fail(v, V4_FAST_FAILED, products[t], "declined", 0, msg);
        }
    }
    if (e != cudaSuccess) {
        snprintf(msg, sizeof msg, "self-test: %s: %s", where, cudaGetErrorString(e));
        verdict_fail(v, V4_FAST_FAILED, where, cudaGetErrorName(e), (int)e, msg);
        rc = -1;
    }
    /* nothing queued on st may still read the host buffers when they go */
    (void)cudaStreamSynchronize(st);
    free(hw), free(hb), free(hx), free(hy);
    if (!rc)
        *v = v4_fast_selftest{V4_FAST_PASSED, "", "", 0, ""};
    return rc;
}

}  // namespace

extern "C" {

v4cu_lt *v4cu_lt_create(cudaStream_t st, v4_fast_selftest *verdict)
{
    char msg[sizeof verdict->detail];
    v4cu_lt *lt = (v4cu_lt *)calloc(1, sizeof *lt);
    if (!lt) {
        verdict_fail(verdict, V4_FAST_UNAVAILABLE, "setup", "out of host memory", 0, "out of memory");
        return NULL;
    }
    lt->sync_debug = v4cu_sync_debug_env();
    cublasStatus_t s = cublasLtCreate(&lt->h);
    if (s != CUBLAS_STATUS_SUCCESS) {
        snprintf(msg, sizeof msg, "cublasLtCreate: %s", cublasLtGetStatusString(s));
        verdict_fail(verdict, V4_FAST_UNAVAILABLE, "setup", cublasLtGetStatusName(s), (int)s, msg);
        free(lt);
        return NULL;
    }
    cudaError_t e = cudaMalloc(&lt->ws, WS_BYTES);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(msg, sizeof msg, "cuBLASLt workspace: %s", cudaGetErrorString(e));
        verdict_fail(verdict, V4_FAST_UNAVAILABLE, "setup", cudaGetErrorName(e), (int)e, msg);
        v4cu_lt_free(lt);
        return NULL;
    }
    const int rc = selftest(lt, st, verdict);
    lt->ok = rc == 0;
    if (!lt->ok) {
        snprintf(lt->err, sizeof lt->err, "%s", verdict->detail);
        char code[24] = "";
        if (verdict->code)
            snprintf(code, sizeof code, " (%d)", verdict->code);
        fprintf(stderr, "v4fleet: fast numerics on the GPU: the tensor-core path is OFF: self-test failed (product "
                        "%s, status %s%s): %s; the exact kernels run every product\n", verdict->product,
                verdict->status, code, verdict->detail);
        (void)cudaGetLastError();
    } else {
        lt->err[0] = 0;
        lt->err_status[0] = 0;
        lt->err_code = 0;
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
