/* cuda_step.h - the device-resident V4 decode step (issue 6): the whole of v4_step
 * (kernels/v4/forward.c) on the GPU, with the weights uploaded once and every
 * sequence's caches (window ring, compressed KV, indexer keys, compressor state) in
 * device memory.  It plugs into a v4_ctx as its step implementation
 * (v4_ctx_set_step_impl), so generate / batch / worker run on it unchanged.
 *
 * Numerics: the kernels of cuda_linear.cu, cuda_ops.cu and cuda_attn.cu, each
 * following the C reference op by op (bit-identical under the conditions their
 * headers state); routing and indexer selections are computed on the device.  In the
 * exact mode the MoE runs on the device (per-expert row lists, grouped expert products
 * and the ordered sum, cuda_moe.h) for resident and paged experts alike, the grouped
 * launch reading each expert's weights through a device table (fixed, or the layer's
 * slot table with paged experts): no host wait with every expert resident or in a
 * hash-routed layer, one (the route ids back) in a score-routed layer with paged
 * experts.  The fast mode takes the same grouped path for steps of at most
 * V4_CUDA_FAST_GROUPED_ROWS rows per routed expert (cuda_plan.h: decode); for larger
 * steps it copies the routes back each MoE layer and the host picks the experts to run,
 * as moe.c does, each expert's products on the tensor cores (4 waits per layer).
 * Traces: route_ids / route_w and index_ids / index_count are filled; the debug dumps
 * (q, kv, sub_out, streams, hidden) and checksums are not (left untouched).
 *
 * Rows: a step carries up to max_batch rows; with every routed expert resident a
 * sequence may fill several of them (a prefill chunk: v4_step_impl.rows_per_seq =
 * max_batch; consecutive positions in row order; the results equal one-row steps), with
 * paged experts too when the device slots hold the union of a layer's experts over a
 * full step (min(n_routed_experts, max_batch x n_act_experts) slots), else one row per
 * sequence.  The LM head runs on the rows whose logits are
 * wanted only.
 * Sequences: device state is keyed by the v4_seq pointer and created at position 0;
 * up to max_seqs sequences keep state at once (a new one takes the least recently
 * stepped slot that is not in the current step; stepping an evicted sequence at a
 * position > 0 fails with a clear error).
 * Experts: all resident (expert_budget 0), or paged within expert_budget bytes of
 * device slots (xslots.h, slot_pool.h: the eviction policy over the experts not pinned by
 * the current layer).  A layer's missing experts come from the mapped checkpoint or, with
 * v4_cuda_engine_create_paged, from an inner provider (the host expert cache); they
 * are staged through pinned host buffers (several host threads) and copied on a copy
 * stream, one copy per expert; the layer's kernels wait for its slots' copies (events)
 * before reading them, and the sum over experts keeps ascending id order (results are
 * bit-identical to the all-resident step).  A budget that cannot
 * hold one layer's experts of a step fails the step with the slot pool's message (how
 * many slots are needed).
 *
 * Errors: the first CUDA failure is sticky (except a sequence's out of device memory,
 * see v4_cuda_seq_bytes: the step fails before any kernel is enqueued and reports the
 * row as a retryable v4_step_fault, v4_ctx_step_fault, or as a stall) and names where it happened
 * ("cuda step: WHERE: <CUDA error>").  Sync debug mode (V4_CUDA_SYNC_DEBUG=1, read once at create and
 * kept in the engine, cu_debug.h): every launcher call is followed by a wait for the
 * stream, so an asynchronous fault is caught at its own kernel and WHERE reads
 * "kernel v4cu_NAME (label)" (the launcher of k_NAME); slow, for debugging.
 *
 * Ownership: the engine owns every device allocation (weights, scratch, sequence
 * state, expert slots) and frees them in v4_cuda_engine_free; it borrows w and the
 * inner provider (must outlive it).
 * Thread: one thread at a time (the v4_ctx's).
 */
#ifndef V4_CUDA_STEP_H
#define V4_CUDA_STEP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "../../config/error.h"
#include "../v4/model.h"
#include "../xpolicy.h"

typedef struct v4_cuda_engine v4_cuda_engine;

/* Upload w to the current CUDA device (cudaSetDevice before); NULL + err on failure
 * (out of device memory: the bytes it needed).  max_batch: the rows of a step (1..256:
 * the scratch is sized for them); max_seqs: the sequences that keep device state at
 * once.  expert_budget: 0 = every routed expert resident, else the bytes of device
 * slots for paged experts. */
v4_cuda_engine *v4_cuda_engine_create(const v4_weights *w, int max_batch, int max_seqs, size_t expert_budget,
                                      v4_error *err);
/* The same, the paged experts' bytes coming from inner (acquired per layer for the
 * misses only, released once staged; NULL: the weights' own experts, as create), the
 * slots evicting by policy (slot_pool.h; create uses V4_XPOL_NEXT). */
v4_cuda_engine *v4_cuda_engine_create_paged(const v4_weights *w, int max_batch, int max_seqs, size_t expert_budget,
                                            const v4_expert_provider *inner, v4_xpolicy_kind policy,
                                            v4_error *err);
void v4_cuda_engine_free(v4_cuda_engine *e);
/* Device bytes v4_cuda_engine_create would allocate for w (weights + scratch; the
 * sequences' state comes on top, per sequence); nothing is allocated. */
size_t v4_cuda_engine_need(const v4_weights *w, int max_batch, size_t expert_budget);
/* The fast numerics mode (cuda_lt.h): the step's QUANT products and its V4_LIN_BF16
 * ones (head, wo_a, from bf16 forms made here: v4_cuda_engine_fast_need bytes more)
 * run on tensor cores through lt (a struct v4cu_lt: v4_cuda_backend_lt, borrowed; it
 * must outlive e).  The routed experts: steps of few rows per expert
 * (v4_cuda_fast_moe_grouped) take the exact grouped kernels; larger steps the grouped
 * tensor-core products (cuda_mma.h) once their self-test passed here (else, said on
 * stderr, one cuBLASLt product per expert with host waits); the rest of the step is
 * unchanged.  0, or -1 + err (no device memory, a CUDA failure in the self-test). */
int v4_cuda_engine_use_fast(v4_cuda_engine *e, void *lt, v4_error *err);
/* The fast mode's grouped tensor-core expert products on (1: runs the self-test again,
 * -1 when it fails or the engine is not in the fast mode with grouped tables) or off
 * (0: the per-expert cuBLASLt path, as before them).  0 done.  Thread: e's. */
int v4_cuda_engine_set_mma(v4_cuda_engine *e, int on);
size_t v4_cuda_engine_fast_need(const v4_weights *w);
/* Paged experts' counters (all 0 when every expert is resident), the MoE layers run
 * by the on-device grouped path (resident or paged experts alike), every MoE layer
 * step, and the host's waits for the engine's stream inside them (moe_host_syncs:
 * grouped path 0 per layer when resident or hash-routed, 1 per score-routed layer with
 * paged experts; the fast mode's host-driven MoE of a large step, without the
 * tensor-core grouped path, 4 per layer).  staging_waits:
 * paged uploads that found their pinned staging buffer still being copied and waited
 * for the copy stream (host waits outside the engine's stream).  The router look-ahead
 * (v4_cuda_engine_set_lookahead): lookahead_issued, experts uploaded ahead of a score
 * layer from the previous score layer's prediction (counted in misses too: the misses
 * at the layers' own selections are misses - lookahead_issued); lookahead_used, those of
 * them that layer then used (hits). */
typedef struct v4_cuda_expert_stats {
    int slots;
    size_t slot_bytes;
    uint64_t hits, misses, evictions, bytes_uploaded;
    uint64_t grouped_moe_layers, mma_moe_layers;   /* the latter: with tensor-core products */
    uint64_t moe_layers, moe_host_syncs, staging_waits;
    uint64_t lookahead_issued, lookahead_used;
} v4_cuda_expert_stats;
void v4_cuda_engine_expert_stats(const v4_cuda_engine *e, v4_cuda_expert_stats *st);
/* The router look-ahead of paged experts on the grouped path (on by default): in a
 * score-routed layer followed by one, the next layer's gate and router also run on
 * this layer's MoE input, their ids come back in this layer's one wait, and the
 * predicted experts not resident are uploaded (unpinned) after this layer's grouped
 * launch, so the next layer finds them; a hint only (skipped when the slots cannot hold
 * them), the outputs unchanged.  0: off.  Thread: e's. */
void v4_cuda_engine_set_lookahead(v4_cuda_engine *e, int on);
/* Bytes of device memory held (weights + scratch + sequence state). */
size_t v4_cuda_engine_bytes(const v4_cuda_engine *e);
/* Sequence memory and admission (issue 20).  A sequence's device state: per layer the
 * bf16 window ring and the f32 compressor states (allocated at its first position, with
 * its page tables), and the bf16 compressed KV entries and indexer keys in pages of
 * page_entries entries (V4_CUDA_SEQ_PAGE by default; set_seq_page changes it while no
 * sequence holds state) taken from the engine's page pools as the sequence reaches them
 * (before a step runs, for that step's positions) and returned when it is released or
 * restarts.  The pools keep their chunks (about 2 MiB each) for reuse until the engine
 * is freed.  v4_cuda_seq_bytes: the most a sequence of max_len positions holds (its
 * claim: the fixed part + every page at max_len; 0 for max_len < 1).
 * Growth and admission follow the banker's rule (seq_pages.h): a sequence's first
 * position and every growth are granted only when every live sequence could still run to
 * its claim in some order, counting on what the others free as they finish, within the
 * bytes sequences may hold (the budget, else what they hold + the pools' free pages +
 * cudaMemGetInfo's free figure; unknown in the emulation without a budget: no test).  A
 * refused first position (or its allocation failing) fails the step with V4_ERR_NOMEM
 * ("not an engine failure") and the fault {row: its first row, retryable 1}; a refused
 * growth fails it with the fault {row, retryable 1, stall 1}: the sequence keeps its
 * state and position and is stepped again later.  Either way before any kernel runs (no
 * sequence's state changes; the new ones before it keep fresh state at position 0, the
 * earlier ones keep the pages they got) and the engine keeps serving.  In a safe state
 * the first sequence of the finishing order is always granted, so the sequences never
 * all wait: memory frees as they finish and none fails while it will.
 * The impl's admit hook reports need = the claim and avail = those bytes when the live
 * sequences stay safe with the new one's fixed part taken (it then finishes last), else
 * 0; its release hook gives a finished sequence's memory back at once.  set_seq_budget:
 * cap the bytes sequences hold at `bytes` (SIZE_MAX: no cap, the default; tests drive
 * admission and growth with it, the emulation included; the pools may keep up to the
 * high-water mark of what was held, rounded up to chunks).  seq_bytes_held: what the
 * sequences hold now (fixed parts + pages).  seq_stats: those figures and the pools'.
 * Thread: e's. */
#define V4_CUDA_SEQ_PAGE 64
size_t v4_cuda_seq_bytes(const v4_config *cfg, int max_len, int page_entries);
void v4_cuda_engine_set_seq_budget(v4_cuda_engine *e, size_t bytes);
size_t v4_cuda_engine_seq_bytes_held(const v4_cuda_engine *e);
/* 0, or -1 + err (V4_ERR_INVALID) when entries is not a power of two in 1..2^20 or a
 * sequence holds device state. */
int v4_cuda_engine_set_seq_page(v4_cuda_engine *e, int entries, v4_error *err);
typedef struct v4_cuda_seq_stats {
    size_t held_bytes;          /* = v4_cuda_engine_seq_bytes_held */
    size_t budget_bytes;        /* v4_cuda_engine_set_seq_budget's, 0 = none (the free memory) */
    size_t pool_bytes;          /* chunks the page pools hold */
    size_t pool_free_bytes;     /* ... of them in pages no sequence holds */
    int page_entries;
    int live;                   /* sequences holding device state */
    uint64_t stalls;            /* growths refused (the sequence waited a step) */
} v4_cuda_seq_stats;
void v4_cuda_engine_seq_stats(const v4_cuda_engine *e, v4_cuda_seq_stats *st);
/* The step implementation to give v4_ctx_set_step_impl (ud = e; rows_per_seq:
 * max_batch with every expert resident, 1 with paged experts; admit and release as
 * above). */
v4_step_impl v4_cuda_engine_impl(v4_cuda_engine *e);

#ifdef __cplusplus
}
#endif

#endif
