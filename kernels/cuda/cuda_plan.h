/* cuda_plan.h - the CUDA decode mode's choice (auto | resident | hybrid) and its device
 * memory split, as a pure function of (device memory, model sizes, settings), in plain
 * C so that a CPU test can call it (tests/test_cuda_plan.c); worker/serve/engine.c
 * measures the inputs and follows the plan.
 *
 * Rules (V4_CUDA_MODE, V4_GPU_EXPERT_MEM):
 *  - hybrid: the hybrid mode (weight products on the GPU), whatever the sizes.
 *  - an explicit expert budget B: the resident step paging experts in B (capped at the
 *    routed-expert bytes).  auto falls back to hybrid when trunk + B + headroom does
 *    not fit the free memory; resident tries anyway (the engine's allocation says why
 *    when it fails).
 *  - no budget, and trunk + every expert + headroom fits: the resident step with every
 *    expert resident (budget 0).
 *  - no budget, and it does not fit (the full V4-Flash on one H200): the resident step
 *    with paged experts, budget = free - trunk - headroom - the sequences' reserve
 *    (capped at the routed-expert bytes), when that holds one step's experts
 *    (step_experts slots); else auto picks hybrid and resident is an error
 *    (V4_ERR_NOMEM, with the sizes).
 * Sequences (V4_GPU_SEQ_MEM): the bytes the sequences' device caches may hold (the
 * engine's banker's admission, cuda_step.h).  An explicit seq_budget is reserved as
 * asked (and counted in every "fits" above).  Otherwise the default reserve is
 * min(seq_tasks x seq_claim, max(seq_claim, avail / 8)), avail = free - trunk -
 * headroom: every task at the full context, but no more than an eighth of the device
 * after the trunk unless one task alone needs more; with every expert resident, or an
 * explicit expert budget, the sequences get all the rest.  seq_claim 0 (unknown) and
 * no seq_budget: seq_bytes 0, no reserve (the engine then counts on the free memory).
 * With paged experts the reserve shrinks, if it must, to leave one step's experts.
 * Ownership: plain values.  Thread: any (pure).
 */
#ifndef V4_CUDA_PLAN_H
#define V4_CUDA_PLAN_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "../../config/error.h"   /* (inside: C linkage from C++ too) */

typedef enum v4_cuda_mode_req { V4_CUDA_REQ_AUTO = 0, V4_CUDA_REQ_RESIDENT, V4_CUDA_REQ_HYBRID } v4_cuda_mode_req;

typedef struct v4_cuda_plan_in {
    v4_cuda_mode_req mode;
    size_t free_bytes;          /* device memory free now */
    size_t trunk_bytes;         /* the resident step without routed experts (weights, scratch, fast forms) */
    size_t experts_bytes;       /* every routed expert resident (the step's own layout) */
    size_t slot_bytes;          /* one paged expert slot (an upper bound is fine) */
    int step_experts;           /* slots one step pins at most (one layer's experts for the batch) */
    size_t headroom;            /* left free for sequences and the runtime */
    size_t budget;              /* explicit V4_GPU_EXPERT_MEM in bytes, 0 = none */
    size_t seq_claim;           /* one task's sequence at the full context (v4_cuda_seq_bytes), 0 = unknown */
    int seq_tasks;              /* tasks decoded at once (< 1: 1) */
    size_t seq_budget;          /* explicit V4_GPU_SEQ_MEM in bytes, 0 = none */
} v4_cuda_plan_in;

typedef struct v4_cuda_plan {
    int resident;               /* 1 = the resident step, 0 = hybrid */
    size_t expert_budget;       /* resident: 0 = every expert resident, else the slot pool's budget */
    size_t trunk_bytes, pool_bytes, headroom;   /* the split (pool: experts resident or paged) */
    size_t seq_bytes;           /* resident: the sequences' budget (0 = none: the free memory) */
    const char *seq_why;        /* one phrase for the log: where seq_bytes came from */
    const char *why;            /* one phrase for the log */
} v4_cuda_plan;

/* The fast mode's routed experts in a step of n rows (K experts per row, E per layer):
 * 1 = the grouped on-device path (cuda_moe.h: the exact grouped kernels, reading
 * resident or paged experts through the layer's table; no host wait, or one in a
 * score-routed layer with paged experts), 0 = one tensor-core product per expert
 * (cuBLASLt, the host picks the experts: 4 waits per layer).  Grouped while the rows
 * per routed expert, n*K / min(E, n*K), are at most V4_CUDA_FAST_GROUPED_ROWS (the
 * grouped kernels' tile height): decode and small prefill chunks, where each expert's
 * product is a few rows and its weights' bytes, not its arithmetic, set the time; a
 * larger step (a prefill chunk of V4-Flash's 256 rows: 6 rows per expert) takes the
 * tensor cores.  n, K, E < 1: 0. */
#define V4_CUDA_FAST_GROUPED_ROWS 4
int v4_cuda_fast_moe_grouped(int n, int K, int E);

/* "auto" | "resident" | "hybrid" ("" = auto); 0 or -1 (unknown). */
int v4_cuda_mode_req_parse(const char *s, v4_cuda_mode_req *out);
/* The plan for in; 0, or -1 with err (V4_ERR_NOMEM: resident asked and impossible). */
int v4_cuda_auto_plan(const v4_cuda_plan_in *in, v4_cuda_plan *out, v4_error *err);

#ifdef __cplusplus
}
#endif

#endif
