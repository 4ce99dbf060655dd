/* backend_cpu.c - the CPU backend: ISA dispatch, activation quantization, and the
 * row kernels run in parallel on a per-instance thread pool.
 *
 * Design: v4_cpu_backend_create picks one kernel set at creation ("scalar", "avx2",
 * "avx512", "avx512vnni"; "auto" = the best the CPU supports, detected with
 * __builtin_cpu_supports: avx512 needs avx512f+bw+vl+dq, avx512vnni that plus
 * avx512vnni (the avx512 set with the integer-dot-product FP4 kernel), avx2 needs
 * avx2+fma).  The environment variable V4_CPU_ISA (scalar|avx2|avx512|avx512vnni|auto)
 * overrides an "auto" request, e.g. to compare
 * paths in production; an explicit isa argument wins over the environment.  Asking for
 * an ISA the CPU lacks is an error (V4_ERR_INVALID).
 *
 * A linear call: in QUANT mode every input vector is quantized once (v4_act_quant or
 * its SIMD twin, bit-identical) into instance-owned buffers on the calling thread;
 * then the rows of W are cut into chunks and the pool runs the row kernel on them.
 * Chunks are multiples of 128 rows for FP8 (whole scale blocks), 64 for row-major
 * EXACT (the SIMD tile), 8 for R8 EXACT (one row group), 32 for FP4, about 4 chunks
 * per thread for load balance; a call with little work (rows*cols*n below
 * V4_CPU_PAR_MIN) runs on the caller alone.  R8 weights are accepted in EXACT mode
 * only (other combinations, and device matrices (V4_MAT_CUDA), get NaN outputs, see
 * backend.h: their bytes are never read).  Every
 * output element is computed by exactly one kernel invocation with the scalar
 * reference's arithmetic, so results do not depend on the thread count or split.
 *
 * Ownership: the backend owns its pool, its quantization buffers and its impl; the
 * caller owns the backend (be->ops->destroy).  Weights are borrowed per call.
 * Thread: one thread drives an instance at a time (backend.h); the pool threads only
 * run row kernels on disjoint rows.  No global mutable state.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../codec.h"
#include "cpu_backend.h"
#include "cpu_kernels.h"
#include "threadpool.h"

/* Below this many multiply-adds (rows*cols*n) a call runs on the caller only. */
#define V4_CPU_PAR_MIN (1 << 16)

typedef struct cpu_impl {
    const char *isa;
    v4_act_quant_fn act_quant;
    v4_rows_fn fp8, fp4, exact;
    v4_pool *pool;
    int n_threads;
    float *xq, *xs;
    size_t cap_q, cap_s;
} cpu_impl;

typedef struct lin_job {
    v4_rows_fn fn;
    const v4_mat *W;
    int n;
    const float *xq, *xs, *x;
    int ldx;
    float *y;
    int ldy;
    int chunk;
} lin_job;

static void lin_task(void *ctx, int task, int thread)
{
    (void)thread;
    const lin_job *j = ctx;
    int r0 = task * j->chunk;
    int r1 = r0 + j->chunk;
    if (r1 > j->W->rows)
        r1 = j->W->rows;
    if (r0 < r1)
        j->fn(j->W, j->n, j->xq, j->xs, j->x, j->ldx, j->y, j->ldy, r0, r1);
}

static int ensure_cap(cpu_impl *c, size_t nq, size_t ns)
{
    if (nq > c->cap_q) {
        float *p = realloc(c->xq, nq * sizeof(float));
        if (!p)
            return -1;
        c->xq = p;
        c->cap_q = nq;
    }
    if (ns > c->cap_s) {
        float *p = realloc(c->xs, ns * sizeof(float));
        if (!p)
            return -1;
        c->xs = p;
        c->cap_s = ns;
    }
    return 0;
}

static void cpu_linear(v4_backend *be, const v4_mat *W, v4_lin_mode mode,
                       int n, const float *x, int ldx, float *y, int ldy)
{
    cpu_impl *c = be->impl;
    if (n <= 0 || W->rows <= 0)
        return;
    lin_job j = {.W = W, .n = n, .x = x, .ldx = ldx, .y = y, .ldy = ldy};
    int granule;
    if (v4_mat_is_device(W) || (W->layout != V4_LAYOUT_ROWMAJOR &&
        (W->layout != V4_LAYOUT_R8 || mode != V4_LIN_EXACT || W->type == V4_W_FP4))) {
        /* R8 is an EXACT-mode layout (backend.h); a device matrix (V4_MAT_CUDA) belongs
         * to a CUDA backend; anything else is a caller bug */
        for (int b = 0; b < n; b++)
            for (int r = 0; r < W->rows; r++)
                y[(size_t)b * ldy + r] = v4_f32_from_bits(0x7fc00000u);
        return;
    }
    if (mode == V4_LIN_EXACT) {
        j.fn = c->exact;
        /* R8: any multiple of 8 rows is a whole number of groups, and even one group
         * per task keeps the kernel memory-bound (small matrices like the mHC fn
         * [24 x 16384] still use every thread) */
        granule = W->layout == V4_LAYOUT_R8 ? 8 : 64;
    } else {
        const int K = W->cols, nkb = K / 128;
        if (ensure_cap(c, (size_t)n * (size_t)K + 1, (size_t)n * (size_t)nkb + 1) != 0) {
            /* Out of memory and the interface has no error path: make it visible. */
            for (int b = 0; b < n; b++)
                for (int r = 0; r < W->rows; r++)
                    y[(size_t)b * ldy + r] = v4_f32_from_bits(0x7fc00000u);
            return;
        }
        for (int b = 0; b < n; b++) {
            c->act_quant(x + (size_t)b * ldx, K, c->xq + (size_t)b * K, c->xs + (size_t)b * nkb);
            /* QUANT is defined for cols % 128 == 0 (all model shapes); otherwise the
             * tail is not quantized: keep what the reference kernels read of it
             * deterministic (the SIMD kernels defer to them for such shapes). */
            if (K % 128 != 0)
                memset(c->xq + (size_t)b * K + (size_t)nkb * 128, 0, sizeof(float) * (size_t)(K % 128));
        }
        if (K % 128 != 0)
            c->xs[(size_t)n * nkb] = 0.0f;
        j.xq = c->xq;
        j.xs = c->xs;
        if (W->type == V4_W_FP8) {
            j.fn = c->fp8;
            granule = 128;
        } else {
            j.fn = c->fp4;
            granule = 32;
        }
    }
    const int rows = W->rows;
    double work = (double)rows * (double)W->cols * (double)n;
    int T = c->n_threads;
    if (T <= 1 || work < (double)V4_CPU_PAR_MIN || rows <= granule) {
        j.fn(W, n, j.xq, j.xs, x, ldx, y, ldy, 0, rows);
        return;
    }
    int target = 4 * T;
    int chunk = (rows + target - 1) / target;
    chunk = (chunk + granule - 1) / granule * granule;
    j.chunk = chunk;
    int tasks = (rows + chunk - 1) / chunk;
    v4_pool_run(c->pool, tasks, lin_task, &j);
}

static void cpu_destroy(v4_backend *be)
{
    if (!be)
        return;
    cpu_impl *c = be->impl;
    if (c) {
        v4_pool_destroy(c->pool);
        free(c->xq);
        free(c->xs);
        free(c);
    }
    free(be);
}

static const v4_backend_ops cpu_ops = {"cpu", cpu_linear, cpu_destroy};

int v4_cpu_isa_supported(const char *isa)
{
    if (!isa)
        return 0;
    if (strcmp(isa, "scalar") == 0 || strcmp(isa, "auto") == 0)
        return 1;
#if V4_CPU_X86
    __builtin_cpu_init();
    if (strcmp(isa, "avx2") == 0)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (strcmp(isa, "avx512") == 0)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    if (strcmp(isa, "avx512vnni") == 0)
        return v4_cpu_isa_supported("avx512") && __builtin_cpu_supports("avx512vnni");
#endif
    return 0;
}

static int select_isa(cpu_impl *c, const char *isa)
{
    if (strcmp(isa, "scalar") == 0) {
        c->isa = "scalar";
        c->act_quant = v4_act_quant;
        c->fp8 = v4_rows_fp8_scalar;
        c->fp4 = v4_rows_fp4_scalar;
        c->exact = v4_rows_exact_scalar;
        return 0;
    }
#if V4_CPU_X86
    if (strcmp(isa, "avx2") == 0) {
        c->isa = "avx2";
        c->act_quant = v4_act_quant_avx2;
        c->fp8 = v4_rows_fp8_avx2;
        c->fp4 = v4_rows_fp4_avx2;
        c->exact = v4_rows_exact_avx2;
        return 0;
    }
    if (strcmp(isa, "avx512") == 0 || strcmp(isa, "avx512vnni") == 0) {
        const int vnni = strcmp(isa, "avx512vnni") == 0;
        c->isa = vnni ? "avx512vnni" : "avx512";
        c->act_quant = v4_act_quant_avx512;
        c->fp8 = v4_rows_fp8_avx512;
        c->fp4 = vnni ? v4_rows_fp4_vnni : v4_rows_fp4_avx512;
        c->exact = v4_rows_exact_avx512;
        return 0;
    }
#endif
    return -1;
}

v4_backend *v4_cpu_backend_create(int n_threads, const char *isa, v4_error *err)
{
    if (!isa || !*isa)
        isa = "auto";
    if (strcmp(isa, "auto") == 0) {
        const char *env = getenv("V4_CPU_ISA");
        if (env && *env)
            isa = env;
    }
    if (strcmp(isa, "auto") == 0)
        isa = v4_cpu_isa_supported("avx512vnni") ? "avx512vnni" : v4_cpu_isa_supported("avx512") ? "avx512"
              : v4_cpu_isa_supported("avx2") ? "avx2" : "scalar";
    if (strcmp(isa, "scalar") != 0 && strcmp(isa, "avx2") != 0 && strcmp(isa, "avx512") != 0 &&
        strcmp(isa, "avx512vnni") != 0) {
        v4_err_set(err, V4_ERR_INVALID, "cpu backend", "unknown ISA '%s' (scalar, avx2, avx512, avx512vnni, auto)", isa);
        return NULL;
    }
    if (!v4_cpu_isa_supported(isa)) {
        v4_err_set(err, V4_ERR_INVALID, "cpu backend", "this CPU does not support ISA '%s'", isa);
        return NULL;
    }
    if (n_threads < 0) {
        v4_err_set(err, V4_ERR_INVALID, "cpu backend", "n_threads %d < 0", n_threads);
        return NULL;
    }
    if (n_threads == 0) {
        long np = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = np > 0 ? (int)np : 1;
    }
    v4_backend *be = calloc(1, sizeof *be);
    cpu_impl *c = calloc(1, sizeof *c);
    if (!be || !c) {
        free(be);
        free(c);
        v4_err_set(err, V4_ERR_NOMEM, "cpu backend", "out of memory");
        return NULL;
    }
    if (select_isa(c, isa) != 0) {
        free(be);
        free(c);
        v4_err_set(err, V4_ERR_INTERNAL, "cpu backend", "ISA '%s' not compiled in", isa);
        return NULL;
    }
    c->n_threads = n_threads;
    c->pool = v4_pool_create(n_threads);
    if (!c->pool) {
        free(be);
        free(c);
        v4_err_set(err, V4_ERR_NOMEM, "cpu backend", "cannot start %d threads", n_threads);
        return NULL;
    }
    be->ops = &cpu_ops;
    be->impl = c;
    return be;
}

const char *v4_cpu_backend_isa(const v4_backend *be)
{
    if (!be || be->ops != &cpu_ops)
        return NULL;
    return ((const cpu_impl *)be->impl)->isa;
}

int v4_cpu_backend_threads(const v4_backend *be)
{
    if (!be || be->ops != &cpu_ops)
        return 0;
    return ((const cpu_impl *)be->impl)->n_threads;
}

v4_mat v4_mat_rows(const v4_mat *W, int r0, int nr)
{
    v4_mat m = *W;
    m.rows = nr;
    switch (W->type) {
    case V4_W_FP8:
        m.w = (const uint8_t *)W->w + (size_t)r0 * W->cols;
        m.scale = W->scale + (size_t)(r0 / 128) * ((W->cols + 127) / 128);
        break;
    case V4_W_FP4:
        m.w = (const uint8_t *)W->w + (size_t)r0 * (W->cols / 2);
        m.scale = W->scale + (size_t)r0 * (W->cols / 32);
        break;
    case V4_W_BF16:
        m.w = (const uint16_t *)W->w + (size_t)r0 * W->cols;
        break;
    case V4_W_F32:
        m.w = (const float *)W->w + (size_t)r0 * W->cols;
        break;
    }
    return m;
}
