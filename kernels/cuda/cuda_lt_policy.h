/* cuda_lt_policy.h - the pure-C decisions and records of the fast mode's cuBLASLt path
 * (cuda_lt.cu), header-only and free of CUDA headers so that every build has them: the
 * CPU tests (tests/test_cuda_lt_align.c, tests/test_metrics.c), the engine
 * (worker/serve/engine.h) and the worker's /metrics use them without a GPU.
 *
 * 1. Operand alignment (v4cu_lt_align_pick).  cuBLASLt's heuristic assumes every
 *    operand 256-byte aligned unless told otherwise (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_
 *    {A,B,C,D}_BYTES, uint32_t, default 256), so an algorithm picked under the default may
 *    need 256 bytes while a weight row view (v4_mat_rows) or a part of a paged-expert slot
 *    is only 16..128-byte aligned.  cuda_lt.cu therefore tells the heuristic the real
 *    alignment of each operand (the largest power of two, at most 256, dividing both its
 *    address and its column stride in bytes: cuBLASLt's alignment covers the pointer and
 *    the leading dimension) and keys its pinned plans on the four values, so a plan chosen
 *    for 256-byte operands is never used on 16-byte ones.  Operands below 16 bytes (the
 *    floor of cuBLASLt's FP8 and BF16 tensor-core kernels) or NULL are declined: the
 *    caller runs the exact kernel.
 *
 * 2. The self-test verdict (v4_fast_selftest).  When the fast mode's start-up self-test
 *    fails, every product falls back to the exact kernels; an operator must see which
 *    product failed and with what status.  cuda_lt.cu fills the record
 *    (v4cu_lt_create), the CUDA backend keeps a copy (v4_cuda_backend_selftest), the
 *    engine hands it on (v4_backend_fast_selftest, worker/serve/engine.h), the worker logs
 *    it and renders v4fleet:fast_selftest{result,product,status,code}
 *    (worker/fleet/worker_metrics.h).
 *
 * Ownership: plain values, nothing allocated; the record's strings are arrays inside it.
 * Thread: any (pure functions).
 */
#ifndef V4_CUDA_LT_POLICY_H
#define V4_CUDA_LT_POLICY_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define V4CU_LT_ALIGN_MAX 256u  /* cuBLASLt's default (and largest meaningful) preference */
#define V4CU_LT_ALIGN_MIN 16u   /* below: declined to the exact kernel */

/* The alignment cuBLASLt may assume of an operand at address p whose columns are
 * ld_bytes apart: the largest power of two dividing both, at most 256 (p == 0 and
 * ld_bytes == 0 give 256: only the cap divides nothing). */
static inline uint32_t v4cu_lt_align_of(uintptr_t p, uint64_t ld_bytes)
{
    const uint64_t v = (uint64_t)p | ld_bytes | (uint64_t)V4CU_LT_ALIGN_MAX;
    return (uint32_t)(v & (~v + 1u));    /* the lowest set bit */
}

/* The MIN_ALIGNMENT preferences of one product, bytes, each a power of two in [16, 256]. */
typedef struct v4cu_lt_align {
    uint32_t a, b, c, d;
} v4cu_lt_align;

/* One product D = op(A) B (+ C), each operand's address and column stride in bytes:
 * 0 with *al the four preferences when every operand is non-NULL and at least 16-byte
 * aligned; 1 (decline: run the exact kernel) with *al zeroed otherwise. */
static inline int v4cu_lt_align_pick(uintptr_t a, uint64_t lda, uintptr_t b, uint64_t ldb, uintptr_t c, uint64_t ldc,
                                     uintptr_t d, uint64_t ldd, v4cu_lt_align *al)
{
    const v4cu_lt_align r = {v4cu_lt_align_of(a, lda), v4cu_lt_align_of(b, ldb), v4cu_lt_align_of(c, ldc),
                             v4cu_lt_align_of(d, ldd)};
    const v4cu_lt_align zero = {0, 0, 0, 0};
    if (!a || !b || !c || !d || r.a < V4CU_LT_ALIGN_MIN || r.b < V4CU_LT_ALIGN_MIN || r.c < V4CU_LT_ALIGN_MIN ||
        r.d < V4CU_LT_ALIGN_MIN) {
        *al = zero;
        return 1;
    }
    *al = r;
    return 0;
}

static inline int v4cu_lt_align_eq(const v4cu_lt_align *x, const v4cu_lt_align *y)
{
    return x->a == y->a && x->b == y->b && x->c == y->c && x->d == y->d;
}

/* The fast mode's start-up self-test, as the worker reports it. */
typedef enum v4_fast_state {
    V4_FAST_NOT_RUN = 0,        /* no self-test: the exact mode, or a CPU backend */
    V4_FAST_PASSED = 1,         /* the tensor-core products run */
    V4_FAST_FAILED = 2,         /* a self-test product failed: every product runs exactly */
    V4_FAST_UNAVAILABLE = 3     /* cuBLASLt did not start (handle or workspace): every product exact */
} v4_fast_state;

typedef struct v4_fast_selftest {
    int state;              /* v4_fast_state */
    char product[24];       /* the product that failed: "fp8 block-scaled", "fp4 w4a8", "bf16"; "setup"
                             * for a failure outside the products (cuBLASLt start, test buffers);
                             * "" when passed or not run */
    char status[40];        /* what failed: the cuBLAS status name ("CUBLAS_STATUS_NOT_SUPPORTED"), the
                             * CUDA error name ("cudaErrorMisalignedAddress"), "calc_diff" (a wrong
                             * result), "declined" (the product refused its own test shape); "" when
                             * passed or not run */
    int code;               /* the cublasStatus_t / cudaError_t number behind status; 0 for the others */
    char detail[320];       /* the whole reason, as the stderr line gives it */
} v4_fast_selftest;

/* "not_run", "passed", "failed", "unavailable" (the metric's result label). */
static inline const char *v4_fast_state_name(int state)
{
    switch (state) {
    case V4_FAST_PASSED: return "passed";
    case V4_FAST_FAILED: return "failed";
    case V4_FAST_UNAVAILABLE: return "unavailable";
    default: return "not_run";
    }
}

#ifdef __cplusplus
}
#endif

#endif
