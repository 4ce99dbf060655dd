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
 * an ISA the CPU lacks is an error (V4_ERR_INVALID).  The ISA as asked ("auto" or the
 * name) is kept for the engine's attention loops (v4_cpu_backend_isa_asked).
 *
 * Numerics (config/numerics_setting.h): "exact" (the default) runs the kernels above
 * (V4_LIN_BF16 products as V4_LIN_EXACT); "fast" swaps in the kernels of linear_fast*.c
 * for the FP8 QUANT and the V4_LIN_BF16 products (float accumulation in a fixed order,
 * the same bits on every ISA and batch size); V4_LIN_EXACT (router, mHC, compressor and
 * indexer projections) and FP4 stay exact in both modes.  The mode comes from the
 * numerics argument of v4_cpu_backend_create_ex, else V4_NUMERICS, else exact.
 *
 * A linear call: in QUANT mode every input vector is quantized once (v4_act_quant or
 * its SIMD twin, bit-identical) into instance-owned buffers on the calling thread;
 * then the rows of W are cut into chunks and the pool runs the row kernel on them.
 * linear_many (v4_linear_many) does the same for a list of products in ONE pool run:
 * each job's rows become chunks in proportion to its work, and jobs that read the same
 * input (x, n, cols; e.g. an expert's w1 and w3) share one quantization.  A MoE layer
 * thus costs two pool hand-offs instead of three per expert, and one thread's tail of
 * a small expert matrix no longer idles the others.
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

#include "../codec.h"
#include "cpu_backend.h"
#include "cpu_budget.h"
#include "cpu_kernels.h"
#include "threadpool.h"

/* Below this many multiply-adds (rows*cols*n) a call runs on the caller only. */
#define V4_CPU_PAR_MIN (1 << 16)

typedef struct lin_job {
    v4_rows_fn fn;
    const v4_mat *W;
    int n;
    const float *xq, *xs, *x;
    int ldx;
    float *y;
    int ldy;
    int granule;        /* rows per chunk are a multiple of this */
    const v4_lin_job *src;  /* the caller's job (valid during the call) */
} lin_job;

/* One pool task: rows [r0, r1) of job `job`. */
typedef struct lin_task_t {
    int job, r0, r1;
} lin_task_t;

typedef struct cpu_impl {
    const char *isa;
    v4_numerics numerics;
    const char *asked;  /* "auto" (chosen here) or isa (named by the caller or V4_CPU_ISA) */
    v4_act_quant_fn act_quant;
    v4_rows_fn fp8, fp4, exact, bf16;   /* bf16: the V4_LIN_BF16 products */
    v4_pool *pool;
    int n_threads;
    float *xq, *xs;
    size_t cap_q, cap_s;
    lin_job *jobs;      /* the current call's prepared jobs and tasks */
    lin_task_t *tasks;
    int cap_jobs, cap_tasks;
} cpu_impl;

typedef struct run_ctx {
    const lin_job *jobs;
    const lin_task_t *tasks;
} run_ctx;

static void run_task(void *ctx, int task, int thread)
{
    (void)thread;
    const run_ctx *rc = ctx;
    const lin_task_t *t = &rc->tasks[task];
    const lin_job *j = &rc->jobs[t->job];
    j->fn(j->W, j->n, j->xq, j->xs, j->x, j->ldx, j->y, j->ldy, t->r0, t->r1);
}

static int grow(void **p, int *cap, int need, size_t elem)
{
    if (need <= *cap)
        return 0;
    void *q = realloc(*p, (size_t)need * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = need;
    return 0;
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

static void fill_nan(const v4_lin_job *in)
{
    for (int b = 0; b < in->n; b++)
        for (int r = 0; r < in->W->rows; r++)
            in->y[(size_t)b * in->ldy + r] = v4_f32_from_bits(0x7fc00000u);
}

/* Whether the backend can run W in this mode: R8 is an EXACT-mode layout (backend.h),
 * a device matrix (V4_MAT_CUDA) belongs to a CUDA backend; anything else is a caller
 * bug, answered with NaN outputs. */
static int job_ok(const v4_lin_job *in)
{
    const v4_mat *W = in->W;
    return !v4_mat_is_device(W) && (W->layout == V4_LAYOUT_ROWMAJOR ||
           (W->layout == V4_LAYOUT_R8 && in->mode != V4_LIN_QUANT && W->type != V4_W_FP4));
}

/* Quantization buffer floats a QUANT job needs (xq, xs): one spare each for the
 * cols % 128 tail rule below. */
static size_t q_floats(const v4_lin_job *in) { return (size_t)in->n * (size_t)in->W->cols + 1; }
static size_t s_floats(const v4_lin_job *in) { return (size_t)in->n * (size_t)(in->W->cols / 128) + 1; }

/* in -> out, quantizing a QUANT job's inputs into xq/xs (unless quantize == 0: they
 * are already there, shared with an earlier job of the call). */
static void prepare_job(const cpu_impl *c, const v4_lin_job *in, float *xq, float *xs, int quantize,
                        lin_job *out)
{
    const v4_mat *W = in->W;
    *out = (lin_job){.W = W, .n = in->n, .x = in->x, .ldx = in->ldx, .y = in->y, .ldy = in->ldy, .src = in};
    if (in->mode != V4_LIN_QUANT) {   /* EXACT: always the exact kernels; BF16: the mode's */
        out->fn = in->mode == V4_LIN_BF16 ? c->bf16 : c->exact;
        /* R8: any multiple of 8 rows is a whole number of groups, and even one group
         * per task keeps the kernel memory-bound (small matrices like the mHC fn
         * [24 x 16384] still use every thread) */
        out->granule = W->layout == V4_LAYOUT_R8 ? 8 : 64;
        return;
    }
    const int K = W->cols, nkb = K / 128;
    for (int b = 0; b < in->n && quantize; b++) {
        c->act_quant(in->x + (size_t)b * in->ldx, K, xq + (size_t)b * K, xs + (size_t)b * nkb);
        /* QUANT is defined for cols % 128 == 0 (all model shapes); otherwise the
         * tail is not quantized: keep what the reference kernels read of it
         * deterministic (the SIMD kernels defer to them for such shapes). */
        if (K % 128 != 0)
            memset(xq + (size_t)b * K + (size_t)nkb * 128, 0, sizeof(float) * (size_t)(K % 128));
    }
    if (K % 128 != 0 && quantize)
        xs[(size_t)in->n * nkb] = 0.0f;
    out->xq = xq;
    out->xs = xs;
    out->fn = W->type == V4_W_FP8 ? c->fp8 : c->fp4;
    out->granule = W->type == V4_W_FP8 ? 128 : 32;
}

static double job_work(const lin_job *j)
{
    return (double)j->W->rows * (double)j->W->cols * (double)j->n;
}

/* Cuts job j into about `target` chunks (whole granules) appended to c->tasks. */
static void add_tasks(cpu_impl *c, int j, int target, int *nt)
{
    const lin_job *J = &c->jobs[j];
    const int rows = J->W->rows, g = J->granule;
    int chunk = (rows + target - 1) / target;
    chunk = (chunk + g - 1) / g * g;
    for (int r0 = 0; r0 < rows; r0 += chunk)
        c->tasks[(*nt)++] = (lin_task_t){j, r0, r0 + chunk < rows ? r0 + chunk : rows};
}

/* Runs the prepared jobs c->jobs[0..nj): on the caller alone when there is little
 * work, else as one pool run.  A single job gets about 4 chunks per thread; in a
 * list, each job gets chunks in proportion to its work (at least one), about 8 per
 * thread in all, so the pool's dynamic claiming balances the whole list at once. */
static void run_jobs(cpu_impl *c, int nj)
{
    double total = 0.0;
    for (int j = 0; j < nj; j++)
        total += job_work(&c->jobs[j]);
    const int T = c->n_threads;
    int max_tasks = 0;
    if (T > 1 && total >= (double)V4_CPU_PAR_MIN)
        for (int j = 0; j < nj; j++)
            max_tasks += (c->jobs[j].W->rows + c->jobs[j].granule - 1) / c->jobs[j].granule;
    if (max_tasks <= 1 || grow((void **)&c->tasks, &c->cap_tasks, max_tasks, sizeof *c->tasks) != 0) {
        for (int j = 0; j < nj; j++) {
            const lin_job *J = &c->jobs[j];
            J->fn(J->W, J->n, J->xq, J->xs, J->x, J->ldx, J->y, J->ldy, 0, J->W->rows);
        }
        return;
    }
    int nt = 0;
    for (int j = 0; j < nj; j++) {
        int target = 4 * T;
        if (nj > 1)
            target = (int)(8.0 * T * job_work(&c->jobs[j]) / total + 0.5);
        add_tasks(c, j, target < 1 ? 1 : target, &nt);
    }
    run_ctx rc = {c->jobs, c->tasks};
    v4_pool_run(c->pool, nt, run_task, &rc);
}

/* Whether QUANT job a can reuse the quantized inputs of QUANT job b (same x, n, cols). */
static int same_input(const v4_lin_job *a, const v4_lin_job *b)
{
    return a->mode == V4_LIN_QUANT && b->mode == V4_LIN_QUANT && a->x == b->x && a->ldx == b->ldx &&
           a->n == b->n && a->W->cols == b->W->cols;
}

static void cpu_linear_many(v4_backend *be, const v4_lin_job *in, int n_jobs)
{
    cpu_impl *c = be->impl;
    if (grow((void **)&c->jobs, &c->cap_jobs, n_jobs, sizeof *c->jobs) != 0) {
        for (int i = 0; i < n_jobs; i++)
            fill_nan(&in[i]);   /* out of memory and the interface has no error path */
        return;
    }
    /* the QUANT inputs' buffer offsets: shared inputs (e.g. w1 and w3 of one expert)
     * are quantized once */
    size_t nq = 0, ns = 0;
    for (int i = 0; i < n_jobs; i++)
        if (in[i].mode == V4_LIN_QUANT) {
            nq += q_floats(&in[i]);
            ns += s_floats(&in[i]);
        }
    if (ensure_cap(c, nq + 1, ns + 1) != 0) {
        for (int i = 0; i < n_jobs; i++)
            fill_nan(&in[i]);
        return;
    }
    int nj = 0;
    size_t oq = 0, os = 0;
    for (int i = 0; i < n_jobs; i++) {
        if (in[i].n <= 0 || in[i].W->rows <= 0)
            continue;
        if (!job_ok(&in[i])) {
            fill_nan(&in[i]);
            continue;
        }
        int k = -1;
        for (int p = 0; p < nj && k < 0; p++)
            if (same_input(&in[i], c->jobs[p].src))
                k = p;
        if (k >= 0) {
            prepare_job(c, &in[i], c->xq + (c->jobs[k].xq - c->xq), c->xs + (c->jobs[k].xs - c->xs), 0,
                        &c->jobs[nj]);
        } else {
            prepare_job(c, &in[i], c->xq + oq, c->xs + os, 1, &c->jobs[nj]);
            if (in[i].mode == V4_LIN_QUANT) {
                oq += q_floats(&in[i]);
                os += s_floats(&in[i]);
            }
        }
        nj++;
    }
    run_jobs(c, nj);
}

static void cpu_linear(v4_backend *be, const v4_mat *W, v4_lin_mode mode,
                       int n, const float *x, int ldx, float *y, int ldy)
{
    const v4_lin_job job = {W, mode, n, x, ldx, y, ldy};
    cpu_linear_many(be, &job, 1);
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
        free(c->jobs);
        free(c->tasks);
        free(c);
    }
    free(be);
}

static const v4_backend_ops cpu_ops = {"cpu", cpu_linear, cpu_destroy, cpu_linear_many};

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

/* The fast numerics mode's kernels (linear_fast*.c) over the ISA's exact set: FP8 QUANT
 * (the bf16-dot order: VDPBF16PS where the CPU has AVX512-BF16, its AVX-512F emulation
 * otherwise) and V4_LIN_BF16 products accumulate in float; V4_LIN_EXACT and FP4 keep
 * their exact kernels.  ISAs without fast SIMD kernels (scalar, avx2) run the fast
 * reference. */
static void select_fast(cpu_impl *c)
{
    c->fp8 = v4_rows_fp8_fast_scalar;
    c->bf16 = v4_rows_exact_fast_scalar;
#if V4_CPU_X86
    if (strncmp(c->isa, "avx512", 6) == 0) {
        __builtin_cpu_init();
        c->fp8 = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vbmi") ? v4_rows_fp8_fast_bf16 : v4_rows_fp8_fast_avx512;
        c->bf16 = v4_rows_exact_fast_avx512;
    }
#endif
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
    return v4_cpu_backend_create_ex(n_threads, isa, NULL, err);
}

v4_backend *v4_cpu_backend_create_ex(int n_threads, const char *isa, const char *numerics, v4_error *err)
{
    const char *num_src = "numerics";
    if (!numerics || !*numerics) {
        numerics = getenv("V4_NUMERICS");
        num_src = "V4_NUMERICS";
    }
    v4_numerics num = V4_NUM_EXACT;
    if (numerics && *numerics && v4_parse_numerics(numerics, &num)) {
        v4_err_set(err, V4_ERR_INVALID, num_src, "unknown numerics mode '%s' (exact, fast)", numerics);
        return NULL;
    }
    if (!isa || !*isa)
        isa = "auto";
    if (strcmp(isa, "auto") == 0) {
        const char *env = getenv("V4_CPU_ISA");
        if (env && *env)
            isa = env;
    }
    const int asked_auto = strcmp(isa, "auto") == 0;
    if (asked_auto)
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
    if (n_threads == 0) {   /* the CPUs this process may really use (affinity, cgroup quota) */
        v4_cpu_budget cb;
        v4_cpu_budget_get(&cb);
        n_threads = cb.threads;
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
    c->asked = asked_auto ? "auto" : c->isa;
    c->numerics = num;
    c->bf16 = c->exact;
    if (num == V4_NUM_FAST)
        select_fast(c);
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

const char *v4_cpu_backend_isa_asked(const v4_backend *be)
{
    if (!be || be->ops != &cpu_ops)
        return NULL;
    return ((const cpu_impl *)be->impl)->asked;
}

v4_numerics v4_cpu_backend_numerics(const v4_backend *be)
{
    if (!be || be->ops != &cpu_ops)
        return V4_NUM_EXACT;
    return ((const cpu_impl *)be->impl)->numerics;
}

int v4_cpu_backend_threads(const v4_backend *be)
{
    if (!be || be->ops != &cpu_ops)
        return 0;
    return ((const cpu_impl *)be->impl)->n_threads;
}

void v4_cpu_backend_pool_stats(const v4_backend *be, v4_pool_stats *st)
{
    v4_pool_get_stats(be && be->ops == &cpu_ops ? ((const cpu_impl *)be->impl)->pool : NULL, st);
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
