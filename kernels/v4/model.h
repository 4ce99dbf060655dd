/* model.h - the DeepSeek-V4 decode path: public interface.
 *
 * Three objects, after antirez's engine/session split:
 *   v4_weights (weights.h)  the loaded model, read-only, shared by everything;
 *   v4_seq                  one sequence's mutable state: window ring buffers,
 *                           compressed KV entries, indexer keys, compressor state,
 *                           and its position; created, reset and freed independently;
 *   v4_ctx                  a forward context: the backend, scratch buffers for up to
 *                           max_batch sequences per step.  One per worker thread.
 *
 * v4_step() advances n sequences by one token each (each at its own position) and
 * writes their f32 logits.  Weight-touching products run once per step for the
 * whole batch through the backend; per-sequence work (attention, compressors,
 * routing) loops over the sequences.
 *
 * Ownership: v4_seq_create/v4_ctx_create return objects the caller frees with
 * v4_seq_free/v4_ctx_free.  Both borrow the v4_weights (and v4_ctx the backend),
 * which must outlive them.  Traces are caller-owned.
 * Thread: a v4_ctx and the sequences passed to it are used by one thread at a time;
 * different contexts may run concurrently over the same weights.
 */
#ifndef V4_MODEL_H
#define V4_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "../../config/error.h"
#include "../backend.h"
#include "weights.h"

typedef struct v4_seq v4_seq;
typedef struct v4_ctx v4_ctx;

/* Per-step observation of one sequence (all optional; NULL arrays are skipped).
 * Layout per layer l: route_ids[l*n_act + k], route_w[...]; index_ids[l*index_topk + k]
 * with index_count[l] (-1 for layers without an indexer); checksum[l*2 + {0,1}] =
 * fingerprint of the residual streams after the attention / MoE sub-layer.
 * Debug dumps (if non-NULL): q[l][n_heads][head_dim], kv[l][head_dim],
 * sub_out[l][2][dim], streams[l][2][hc][dim]. */
typedef struct v4_trace {
    int32_t *route_ids;
    float *route_w;
    int32_t *index_ids;
    int32_t *index_count;
    uint32_t *checksum;
    float *q, *kv, *sub_out, *streams;
    float *hidden;          /* [dim] final normed hidden state */
    /* route_gap[l] (if non-NULL): on a score-routed layer, how far the k-th selected
     * biased score lies above the best unselected one, relative to the k-th
     * (s_k - s_k+1) / |s_k|; -1 on a hash-routed layer.  A near-tie shows as a small gap. */
    float *route_gap;
    /* Teacher forcing (input, may be NULL): force[l][2][hc][dim], the residual streams
     * the step continues from after each sub-layer (normally another run's `streams`
     * at the same position).  The row's own sub_out, streams and checksum are recorded
     * first, so each sub-layer's outputs come from the given inputs.  force_sel
     * (may be NULL: every sub-layer) picks the sub-layers forced: force_sel[l*2 + s]. */
    const float *force;
    const uint8_t *force_sel;
} v4_trace;

v4_seq *v4_seq_create(const v4_weights *w, int max_len, v4_error *err);
void v4_seq_reset(v4_seq *s);
void v4_seq_free(v4_seq *s);
int v4_seq_pos(const v4_seq *s);            /* next position to be decoded */
int v4_seq_capacity(const v4_seq *s);
/* Memory of a sequence.  v4_seq_create(w, max_len) allocates everything up front (a
 * running sequence never allocates), all of it owned by the v4_seq and freed by
 * v4_seq_free:
 *   per layer     the window ring  window x head_dim bf16 (2 bytes a value)
 *   ratio r != 0  compressed KV    (max_len / r + 1) x head_dim bf16
 *                 compressor state 2 x rows x width f32 (rows x width = r x head_dim,
 *                                  2r x 2 head_dim for ratio 4)
 *   ratio 4       indexer keys     (max_len / 4 + 1) x index_head_dim bf16
 *                 their compressor 2 x 8 x 2 index_head_dim f32
 *   the v4_seq and its layer array.
 * v4_seq_bytes_for gives that total for a config before anything is allocated (0 for
 * max_len < 1); v4_seq_bytes what sequence s holds (the same number).  Scratch shared
 * by a context's sequences (v4_ctx) is not counted.  Thread: any (s read-only). */
size_t v4_seq_bytes_for(const v4_config *cfg, int max_len);
size_t v4_seq_bytes(const v4_seq *s);
/* Cache values stored since create / reset that were not bf16-representable (stored
 * rounded).  Always 0 for the V4 numerics: every cache entry is bf16 by construction
 * (spec §5); tests check it. */
long v4_seq_inexact(const v4_seq *s);
/* Read-only views of the caches (for tests), bf16 bits (v4_bf16_from_bits gives the
 * float): window ring [window][head_dim], compressed entries [n][head_dim], indexer
 * keys [n][index_head_dim].  Owned by s; valid until the next step, reset or free. */
const uint16_t *v4_seq_window(const v4_seq *s, int layer);
const uint16_t *v4_seq_compressed(const v4_seq *s, int layer, int *n);
const uint16_t *v4_seq_index_keys(const v4_seq *s, int layer, int *n);
/* Forking a sequence (several answers from one prefill, docs/queue-worker.md "n"):
 * v4_seq_copy_from makes dst an exact copy of src's state (position, window rings,
 * compressed entries, indexer keys, compressor states, broken / inexact marks), so
 * that dst then decodes bit-identically to src given the same tokens (tests/
 * test_seq_fork.c).  dst must come from the same weights with the same capacity
 * (-1, err V4_ERR_INVALID otherwise; dst unchanged); it allocates nothing.
 * v4_seq_fork: a new sequence (v4_seq_create's memory, the caller frees it) holding
 * such a copy; NULL with err when out of memory.  This copies the CPU state only: a
 * step implementation that keeps its own state per sequence (the CUDA engine, keyed by
 * the v4_seq) does not see it - v4_ctx_seq_forkable says whether a context's steps run
 * from the v4_seq's own state.  Thread: any (src read-only, dst not in use). */
int v4_seq_copy_from(v4_seq *dst, const v4_seq *src, v4_error *err);
v4_seq *v4_seq_fork(const v4_seq *src, v4_error *err);

/* Routed experts from outside the weights: a cache that loads them on demand
 * (cache/expert_provider.h).  Per step and MoE layer, v4_step asks for the distinct
 * experts the batch was routed to, in ascending id order, computes, then releases
 * them.  acquire fills out[i] (matrices that stay valid until release); it may block
 * while blocks load; non-zero (err filled) fails the step.  prefetch (optional) is a
 * hint given at the start of a step for the hash-routed layers, whose experts follow
 * from the token ids alone.  The shared expert always comes from the weights. */
typedef struct v4_expert_provider {
    int (*acquire)(void *ud, int layer, const int *ids, int n, v4_expert_w *out, v4_error *err);
    void (*release)(void *ud, int layer, const int *ids, int n);
    void (*prefetch)(void *ud, int layer, const int *ids, int n);
    void *ud;
} v4_expert_provider;

/* Another implementation of the whole step (kernels/cuda/cuda_step.h: the decode path
 * on the GPU with its own device copies of the weights and of every sequence's state).
 * v4_step checks its inputs as usual, hands the step to impl.step with a view of each
 * row (key: the v4_seq, identity only; the row's position; the capacity), then
 * advances the positions; a failure marks the sequences broken (except a fault, below).
 * The backend and the expert provider are not used while an implementation is set.
 * fault (never NULL; preset to {.row = -1}): a failure confined to one new sequence,
 * which step reports by setting fault->row to that sequence's first row of the step (its
 * position 0) before returning non-zero with err filled: nothing of the step ran and no
 * sequence's state changed (sequences new in the step may keep fresh state at position
 * 0), so the caller may run the other rows again without it; fault->retryable = 1 when
 * it may succeed later (the implementation's memory for sequences was short), 0 when the
 * sequence cannot run at all.  A stall (fault->stall = 1, retryable 1) may name any
 * sequence's first row: its memory must wait, nothing ran, its state and position are
 * kept; the caller runs the others without it and steps it again later.  Leave it
 * untouched when the whole step failed.
 * rows_per_seq: the rows
 * one sequence may fill in a step (a prefill chunk: its rows take consecutive positions
 * in row order, like v4_step's; 0 or 1: one row per sequence).  want: as v4_step_rows'
 * (NULL: every row's logits; else only rows with want[b] != 0 need them). */
typedef struct v4_seq_view {
    const v4_seq *key;
    int pos, max_len;
} v4_seq_view;
/* A step failure confined to one new sequence (see v4_step_impl.step and
 * v4_ctx_step_fault).  A plain value. */
typedef struct v4_step_fault {
    int row;        /* the sequence's first row in the step; -1: none */
    int retryable;  /* 1: out of memory for it now, may run later; 0: it cannot run */
    int stall;      /* 1 (with retryable): the sequence (new or not) keeps its state and
                     * position; step it again at a later step (its memory must wait) */
} v4_step_fault;
/* Admission and release (both optional; they also apply with step NULL, the CPU path):
 *   admit(ud, key, max_len, need, avail): the bytes a new sequence (key, of capacity
 *     max_len, not yet stepped) will allocate at its first step (*need) and the bytes
 *     that can be allocated now (*avail: free memory plus what idle slots hold); 0, or
 *     non-zero when the figures are unknown.  NULL: every sequence is admitted.
 *   release(ud, key): the sequence's task is over; the implementation may free its
 *     state now (key is not stepped again before a position-0 row; it may be freed).
 * The continuous executor decides with them (worker/serve/admit.h). */
typedef struct v4_step_impl {
    int (*step)(void *ud, const v4_seq_view *seqs, const int32_t *tokens, int n, float *logits, const int *want,
                v4_trace *const *traces, v4_step_fault *fault, v4_error *err);
    void *ud;
    int rows_per_seq;
    int (*admit)(void *ud, const v4_seq *key, int max_len, size_t *need, size_t *avail);
    void (*release)(void *ud, const v4_seq *key);
} v4_step_impl;

v4_ctx *v4_ctx_create(const v4_weights *w, v4_backend *be, int max_batch, v4_error *err);
/* impl (copied; NULL = the CPU path through the backend) runs every later step of c. */
void v4_ctx_set_step_impl(v4_ctx *c, const v4_step_impl *impl);
/* Admission of sequence s (not yet stepped) through the step implementation's admit
 * hook: 0 with *need / *avail filled (the executor applies admit.h's rule), or 1 when
 * there is no hook or it cannot tell (always admit; *need = 0, *avail = SIZE_MAX).
 * v4_ctx_release_seq: s's task is over (the hook, if any, may free its state).
 * Thread: c's. */
int v4_ctx_admit(const v4_ctx *c, const v4_seq *s, size_t *need, size_t *avail);
void v4_ctx_release_seq(v4_ctx *c, const v4_seq *s);
/* After a failed v4_step_rows / v4_step on c: 0 with *f filled when the step
 * implementation reported a fault of one new sequence (v4_step_impl.step: f->row is the
 * first row of a sequence at position 0 in that call's rows): no sequence advanced and
 * none is marked broken, so the caller may step the other rows again without that row's
 * sequence (release it first: v4_ctx_release_seq); -1 (*f = {-1, 0}) when the last step
 * succeeded or failed as a whole.  Thread: c's. */
int v4_ctx_step_fault(const v4_ctx *c, v4_step_fault *f);
/* p (copied; NULL = the weights' own experts) serves every later step of c.  The
 * provider must outlive its use by c. */
void v4_ctx_set_expert_provider(v4_ctx *c, const v4_expert_provider *p);
/* Router look-ahead (on by default; used only with a provider that has prefetch): at
 * each MoE layer followed by a score-routed one, the next layer's router is applied to
 * this layer's input (the normalized x its own router reads) and the top-k experts of
 * every row, their union, go to prefetch for the next layer once this layer's experts
 * are acquired, so their loads overlap this layer's experts and the next attention.  A
 * hint: outputs do not change (the provider's bytes are the same whenever they load),
 * a wrong guess costs a load and a slot.  v4_ctx_lookahead_prefetched: experts it
 * passed to prefetch since create (hits included; the cache counts what it loaded).
 * v4_ctx_lookahead: the setting (1 on, 0 off).  The user setting is V4_LOOKAHEAD /
 * --no-lookahead (worker/serve/engine.h v4_lookahead_on).  Thread: c's. */
void v4_ctx_set_lookahead(v4_ctx *c, int on);
int v4_ctx_lookahead(const v4_ctx *c);
uint64_t v4_ctx_lookahead_prefetched(const v4_ctx *c);
void v4_ctx_free(v4_ctx *c);
const v4_config *v4_ctx_config(const v4_ctx *c);
/* Rows one sequence may fill in a step: max_batch, or with a step implementation its
 * rows_per_seq (at least 1, at most max_batch). */
int v4_ctx_rows_per_seq(const v4_ctx *c);
/* Rows a step takes (max_batch). */
int v4_ctx_max_rows(const v4_ctx *c);
/* 1 when c's steps read and write the sequences' own state (the CPU path), so a copy
 * made by v4_seq_copy_from / v4_seq_fork continues as the original; 0 with a step
 * implementation (the CUDA engine keeps each sequence's caches on the device, keyed by
 * the v4_seq, and has no fork: the serving core then prefills each answer separately,
 * worker/serve/choices.h).  Thread: any. */
int v4_ctx_seq_forkable(const v4_ctx *c);
/* The attention / indexer loops c runs, chosen at create from its CPU backend's ISA
 * as asked (--isa / V4_CPU_ISA): "reference" (scalar), "avx2", "avx512" (avx512 and
 * avx512vnni), or for auto (and other backends) the widest the CPU runs, "portable"
 * without AVX2.  Every choice gives the same bits. */
const char *v4_ctx_attn_path(const v4_ctx *c);

/* Feed tokens[i] to seqs[i] at its current position, for i < n (n <= max_batch);
 * logits: [n][vocab] f32 (may be NULL); traces: NULL or n pointers (each may be NULL).
 * A sequence may fill several rows (a prefill chunk: one weight pass for many prompt
 * positions): its rows take consecutive positions in row order, each attending to the
 * ones before it, and the results equal feeding them one step at a time.  With a step
 * implementation (v4_ctx_set_step_impl), at most its rows_per_seq rows per sequence.
 * Fails (state unchanged) on a bad token id or a full sequence.  When the expert
 * provider (or a step implementation) fails mid-step, the step fails with its error and
 * the n sequences are marked broken (their caches hold part of a position): later steps
 * on them fail until v4_seq_reset; a step implementation's fault of one new sequence
 * (v4_ctx_step_fault) marks none. */
/* v4_step, with the LM head only for the rows with want[b] != 0 (want NULL: all): the
 * other rows of logits are left unspecified (a prefill chunk needs no logits but its
 * last row's).  A step implementation may compute them all. */
int v4_step_rows(v4_ctx *c, v4_seq *const *seqs, const int32_t *tokens, int n, float *logits, const int *want,
                 v4_trace *const *tr, v4_error *err);
int v4_step(v4_ctx *c, v4_seq *const *seqs, const int32_t *tokens, int n,
            float *logits, v4_trace *const *traces, v4_error *err);

/* The bit-exactness fingerprint: sum_i (i+1) * bf16bits(x_i) mod 2^32. */
uint32_t v4_checksum_bf16(const float *x, int n);
uint32_t v4_checksum_f32(const float *x, int n);

#endif
