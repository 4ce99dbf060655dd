/* cuda_step.cu - the device-resident decode step (see cuda_step.h).
 *
 * Read it next to kernels/v4/forward.c, mhc.c, attention.c, indexer.c,
 * compressor.c and moe.c: the same sequence of operations, each a kernel launch on
 * device buffers instead of a C loop.  Host code only (the kernels live in
 * cuda_linear.cu, cuda_ops.cu, cuda_attn.cu, cuda_moe.cu); the CPU emulator compiles
 * this file as well (test_cuda_step_emulated runs it against the CPU engine on the
 * golden model).
 *
 * Host decisions (the same ones the C code makes from host-side state): where each
 * sequence's window slot and compressor rows are, when a compressed block completes,
 * and the candidate lists' window and HCA parts.  The MoE (exact mode): routing,
 * per-expert row lists, the experts' products (one grouped launch per matrix) and the
 * sum over experts in ascending id stay on the device (cuda_moe.h: moe_grouped), the
 * experts read through the layer's device pointer table xtab: fixed with every expert
 * resident, the layer's slot table with paged experts (paged_select: the host needs
 * the layer's expert set - from the tokens for a hash layer, prepared before its
 * attention; from the route ids copied back for a score layer - pins the slots,
 * uploads the misses, one copy per expert on the copy stream of xslots.cu, makes the
 * stream wait for the slots' ready events and uploads the table; the router look-ahead
 * of a score layer followed by one also routes the next layer on this layer's input,
 * brings those ids back in the same wait and uploads the next layer's predicted misses
 * after this layer's launch: lookahead_upload).  The fast mode takes
 * the grouped path for steps of few rows per expert (moe_on_device), else the
 * host-driven MoE (routes back, the host picks the experts, one gather kernel and the
 * per-expert products through lin(): routed_experts, for resident and paged experts).  The routes of every
 * layer live in route_all and come back once, at the end of the step, for the traces.
 * Everything stays on the one stream of the engine, except the uploads of paged
 * experts on the copy stream.
 *
 * Waits for the stream (host round trips): the host's per-layer data (candidate
 * lists, lengths) and the step's tokens/positions are staged in pinned host memory,
 * one area per layer, and uploaded without a wait (an area is rewritten only in the
 * next step, after its final wait; if n_layers areas exceed 64 MiB, one area is
 * reused after a wait per layer).  With every expert resident a step therefore waits
 * only for the logits (the routes for the traces come back in the same wait) and at
 * its end; traced index selections add a wait per CSA layer; paged experts add one
 * wait per score-routed MoE layer (none per hash layer); the fast mode's host-driven
 * MoE (large steps) adds 4 per layer (routes back, row lists up).  The counts are kept (moe_syncs,
 * v4_cuda_expert_stats.moe_host_syncs).  Results copied to the host are complete when
 * the step returns.
 *
 * Prefill chunks (several rows of one sequence in a step, consecutive positions in row
 * order, as forward.c): the projections, the MoE and the head run over every row at
 * once; the per-row state updates (indexer keys, compressor) are enqueued row by row in
 * position order, so each row sees exactly the compressed entries the one-row steps
 * would; a row's window candidates at positions inside the step point at the step's own
 * kv rows, those before it at the ring, and the ring is written after the attention
 * kernel (only the last `window` positions of each sequence), so no row of the step
 * overwrites a window entry another row still reads.
 *
 * Ownership: see cuda_step.h.  Thread: one at a time.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef V4CU_HOST_EMULATION
#include <cuda_runtime.h>

#include "cuda_attn.h"
#include "cuda_fast.h"
#include "cuda_linear.h"
#include "cuda_lt.h"
#include "cuda_mma.h"
#include "cuda_ops.h"
#endif
#include "cu_debug.h"
#include "cuda_moe.h"
#include "cuda_plan.h"
#include "cuda_step.h"
#include "seq_pages.h"
#include "slot_pool.h"
#include "xslots.h"

extern "C" {
#include "../v4/ops.h"
}

/* Device copies of the weights (weights.h) and of one sequence's state (internal.h). */
struct dmat {
    int type, rows, cols, r8;
    void *w;
    uint8_t *scale;
    uint16_t *wb;                   /* fast mode, V4_LIN_BF16 products: the bf16 row-major form */
};

struct dexpert {
    dmat w1, w3, w2;
};

struct dcomp {
    int ratio, dim, overlap;
    float *ape, *norm;
    dmat wkv, wgate;
};

struct dlayer {
    int ratio;
    dmat hc_attn_fn, hc_ffn_fn;
    float *hc_attn_base, *hc_ffn_base, *hc_attn_scale, *hc_ffn_scale, *attn_norm, *ffn_norm;
    dmat wq_a, wq_b, wkv, wo_a, wo_b;
    float *q_norm, *kv_norm, *attn_sink;
    dcomp comp, idx_comp;
    dmat idx_wq_b, idx_weights_proj, gate;
    float *gate_bias;
    int32_t *tid2eid;
    dexpert shared;
    dexpert *experts;               /* host array of device matrices */
    const uint8_t **xtab;           /* device [6][E] pointer table of the routed experts
                                     * (cuda_moe.h): fixed (all resident) or the slot table
                                     * of the paged experts (rewritten per step: the layer's
                                     * experts -> their slots, the others NULL); NULL: the
                                     * host-driven MoE only (beyond the grouped limits) */
    int xfp4;                       /* the routed experts are FP4 (else FP8) */
};

/* Compressor state of one sequence and layer (compressor.c's v4_comp_state). */
struct dcstate {
    float *kv, *sc;
    int rows, width;
};

/* A sequence's caches are bf16 (uint16_t bits) like the CPU engine's (seq.c): the
 * window ring [window][head_dim] (allocated with the sequence), the compressed entries
 * ([head_dim] each) and the indexer keys ([index_head_dim] each) in pages of
 * 2^pg_shift entries taken from the engine's page pools as the sequence grows
 * (seq_pages.h; entry j in page j >> pg_shift); the compressor states stay float. */
struct dlstate {
    uint16_t *win;
    uint16_t **pc, **pi;            /* host page tables [np_max] (into dseq.hpt): compressed
                                     * entries (ratio layers), indexer keys (ratio 4) */
    const uint16_t **dpc, **dpi;    /* their device copies (ratio 4: the indexer's scores and
                                     * picks read them; into dseq.dpt) */
    int np_max, npc, npi;           /* pages a table can hold; pages held */
    int n_comp, n_idx;
    dcstate cs, ics;
};

struct dseq {
    const v4_seq *key;              /* NULL: free slot */
    int pos, max_len;
    long last_step;
    size_t bytes;                   /* device bytes held: its allocations and its pages */
    size_t claim;                   /* the most it can hold (v4_cuda_seq_bytes at max_len) */
    uint16_t **hpt;                 /* host page tables of every layer (one malloc) */
    const uint16_t **dpt;           /* device page tables of the ratio-4 layers (one cudaMalloc) */
    dlstate *L;                     /* [n_layers] */
};

/* A step's rows by sequence (prefill chunks): first[b] the first row of b's sequence,
 * at[first[b]][k] (through seqrow + off) its k-th row, count its rows. */
struct rowmap {
    int first[256], off[256], count[256], seqrow[256];
};

static int row_at(const rowmap *rm, int b, int k) { return rm->seqrow[rm->off[rm->first[b]] + k]; }

struct v4_cuda_engine {
    const v4_weights *w;
    int device;                     /* the device current at create: set again on every entry */
    cudaStream_t st;
    int max_batch, max_seqs;
    size_t bytes;
    void **allocs;                  /* every device allocation of the weights and scratch */
    int n_allocs, cap_allocs;
    cudaError_t fail;               /* first CUDA failure (sticky) */
    int count_only;                 /* v4_cuda_engine_need: add up bytes, allocate nothing */
    int sync_debug;                 /* V4_CUDA_SYNC_DEBUG at create (cu_debug.h): wait after each call */
    char fail_where[96];

    dlayer *L;
    /* paged experts (expert_budget > 0): device slots with uploads on a copy stream
     * (xslots.h; bookkeeping and eviction policy in slot_pool.c) */
    int paged;
    int nslots;                     /* device expert slots (paged) */
    v4cu_xslots *xsl;
    size_t xoff[6];                 /* slot layout: w1.w, w1.scale, w3.w, w3.scale, w2.w, w2.scale */
    int *x_ids;                     /* [n_routed]: the layer's experts with rows, ascending */
    unsigned char *x_miss;          /* [n_routed]: x_ids[i] is being uploaded this layer (host
                                     * path); the layer's expert set by id (grouped path) */
    dexpert *x_mats;                /* [n_routed]: the layer's acquired experts by id */
    int x_held, x_nx;               /* the layer whose x_ids[0..x_nx) are pinned, -1: none */
    /* the router look-ahead (score layer l -> score layer l+1, grouped path): layer
     * l+1's gate and route on layer l's MoE input, its ids copied back in layer l's one
     * wait, the predicted misses uploaded after layer l's grouped launch */
    int lookahead;                  /* v4_cuda_engine_set_lookahead (on when paged) */
    int la_layer;                   /* the layer the last look-ahead uploaded for, -1: none */
    int *la_ids;                    /* [n_routed]: the predicted misses, ascending */
    unsigned char *la_mark;         /* [n_routed]: expert uploaded by the look-ahead for la_layer */
    uint64_t la_issued, la_used;    /* stats: experts uploaded; of them hit by la_layer's begin */
    const uint8_t **h_stab;         /* pinned [n_layers][6][E]: the slot tables' host side
                                     * (a layer's area is rewritten in the next step only) */
    uint16_t *embed;
    dmat head, hc_head_fn;
    float *norm, *hc_head_base, *hc_head_scale, *freqs_swa, *freqs_comp;

    /* scratch [max_batch][...] */
    float *X, *mixes, *pre, *post, *comb, *x, *out, *qa, *q, *kv, *o, *z, *ckv, *csc, *iq, *iw, *ikv, *isc;
    uint16_t *kvb;                  /* [max_batch][head_dim]: kv as bf16 bits (the candidates) */
    float *la_gate, *la_route_w;    /* look-ahead: [max_batch][n_routed], [max_batch][K] */
    int32_t *la_route;              /* look-ahead: [max_batch][K] */
    float *gate, *route_w_all, *ex_x, *ex_g, *ex_u, *ex_h, *ex_o, *ex_wt, *y, *logits, *tin, *tout, *e, *score, *xs;
    double *xq;
    int32_t *route_all, *tokens, *pos, *csel, *len, *rows;
    const uint16_t **cand;
    long lmax;                      /* candidate slots per row in cand */
    size_t score_cap;               /* entries in score */

    /* routes of every layer of a step ([n_layers][n][K], one copy back at the end for
     * the traces) and the grouped MoE's scratch (cuda_moe.h) */
    v4cu_moe_bufs mb;
    v4cu_lt *lt;                    /* fast numerics (borrowed from the backend), NULL = exact */
    int grouped;                    /* every layer has xtab */
    int mma;                        /* fast mode: large steps' routed experts on the tensor cores (cuda_mma.h) */
    uint64_t grouped_layers;        /* MoE layers run by the grouped path (stats) */
    uint64_t mma_layers;            /* ... of them with the tensor-core products (stats) */
    uint64_t moe_layers, moe_syncs; /* MoE layer steps; host waits for the stream in them */
    const uint8_t **h_xtab;         /* host source of the xtab uploads [n_layers][6][E] */

    /* host mirrors */
    int32_t *h_la;                  /* pinned [max_batch][K]: the look-ahead's route ids */
    int32_t *h_route_all, *h_route, *h_len, *h_rows, *h_csel, *h_pos, *h_nsel, *h_start;
    float *h_route_w_all, *h_route_w, *h_wt;
    const uint16_t **h_cand;        /* pinned [cand_layers][max_batch][lmax] */
    int cand_layers;                /* n_layers: one staging area per layer, the uploads are
                                     * not waited for; 1 (too big): a wait per layer */
    int32_t *h_tok;                 /* pinned [max_batch]: the step's tokens */
    long step_no;
    dseq *seqs;
    size_t seq_budget;              /* v4_cuda_engine_set_seq_budget; SIZE_MAX: none */
    int pg_shift;                   /* sequence cache pages of 2^pg_shift entries */
    v4_page_pool *pool_c, *pool_i;  /* pages of compressed entries / indexer keys (made at
                                     * the first sequence) */
    size_t *bk_held, *bk_claim;     /* [max_seqs + 1]: the banker's test (seq_safe) */
    unsigned char *bk_scratch;
    uint64_t seq_stalls;            /* growths refused (the sequence waited) */
};

/* ------------------------------------------------------------ memory helpers */

/* ck(e, rc, where): record the first failure (sticky) with where; -1 on a failure.
 * In the sync debug mode (cu_debug.h) a successful call is followed by a wait for the
 * stream, so a kernel's fault is caught at its own launcher, and the failure is named
 * by the called function (the text of the call before its '(', e.g. v4cu_rmsnorm: the
 * launcher of k_rmsnorm) and where. */
static int ck_at(v4_cuda_engine *e, cudaError_t rc, const char *where, const char *call)
{
    int synced = 0;
    if (rc == cudaSuccess && e->sync_debug && !e->count_only && e->st) {
        rc = v4cu_sync_after(e->st, rc);
        synced = 1;
    }
    if (rc == cudaSuccess)
        return 0;
    if (e->fail == cudaSuccess) {
        e->fail = rc;
        if (e->sync_debug) {
            const size_t k = strcspn(call, "( ");
            const int kernel = !strncmp(call, "v4cu_", 5) || !strncmp(call, "lin", 3);
            snprintf(e->fail_where, sizeof e->fail_where, "%s%.*s (%s)", kernel ? synced ? "kernel " : "launch of " : "",
                     (int)k, call, where);
        } else {
            snprintf(e->fail_where, sizeof e->fail_where, "%s", where);
        }
    }
    return -1;
}
#define ck(e, rc, where) ck_at((e), (rc), (where), #rc)

static void *dalloc(v4_cuda_engine *e, size_t bytes)
{
    void *p = NULL;
    if (e->count_only) {
        e->bytes += bytes;
        return (void *)(uintptr_t)256;     /* never dereferenced */
    }
    if (e->fail != cudaSuccess || ck(e, cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc"))
        return NULL;
    if (e->n_allocs == e->cap_allocs) {
        int cap = e->cap_allocs ? 2 * e->cap_allocs : 256;
        void **a = (void **)realloc(e->allocs, sizeof(void *) * (size_t)cap);
        if (!a) {
            cudaFree(p);
            e->fail = cudaErrorMemoryAllocation;
            snprintf(e->fail_where, sizeof e->fail_where, "host memory");
            return NULL;
        }
        e->allocs = a;
        e->cap_allocs = cap;
    }
    e->allocs[e->n_allocs++] = p;
    e->bytes += bytes;
    return p;
}

static void *upload(v4_cuda_engine *e, const void *h, size_t bytes)
{
    if (!h)
        return NULL;
    void *d = dalloc(e, bytes);
    if (d && !e->count_only && ck(e, cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, e->st), "upload"))
        return NULL;
    return d;
}

static float *upf(v4_cuda_engine *e, const float *h, size_t n) { return (float *)upload(e, h, n * sizeof(float)); }

static size_t mat_w_bytes(const v4_mat *m)
{
    size_t rows = (size_t)m->rows;
    if (m->layout == V4_LAYOUT_R8)
        rows = (rows + 7) / 8 * 8;
    const size_t n = rows * (size_t)m->cols;
    switch (m->type) {
    case V4_W_FP8: return n;
    case V4_W_FP4: return n / 2;
    case V4_W_BF16: return 2 * n;
    case V4_W_F32: return 4 * n;
    }
    return 0;
}

static size_t mat_s_bytes(const v4_mat *m)
{
    if (m->type == V4_W_FP8)
        return (size_t)((m->rows + 127) / 128) * (size_t)((m->cols + 127) / 128);
    if (m->type == V4_W_FP4)
        return (size_t)m->rows * (size_t)(m->cols / 32);
    return 0;
}

static dmat upmat(v4_cuda_engine *e, const v4_mat *m)
{
    dmat d = {(int)m->type, m->rows, m->cols, m->layout == V4_LAYOUT_R8, NULL, NULL, NULL};
    if (!m->w)
        return d;
    d.w = upload(e, m->w, mat_w_bytes(m));
    if (m->scale)
        d.scale = (uint8_t *)upload(e, m->scale, mat_s_bytes(m));
    return d;
}

/* Rows [r0, r0+nr) as a matrix (kernels/cpu/backend_cpu.c v4_mat_rows). */
static dmat dmat_rows(const dmat *W, int r0, int nr)
{
    dmat m = *W;
    m.rows = nr;
    if (W->wb)
        m.wb = W->wb + (size_t)r0 * W->cols;
    switch (W->type) {
    case V4_W_FP8:
        m.w = (uint8_t *)W->w + (size_t)r0 * W->cols;
        m.scale = W->scale + (size_t)(r0 / 128) * ((W->cols + 127) / 128);
        break;
    case V4_W_FP4:
        m.w = (uint8_t *)W->w + (size_t)r0 * (W->cols / 2);
        m.scale = W->scale + (size_t)r0 * (W->cols / 32);
        break;
    case V4_W_BF16: m.w = (uint16_t *)W->w + (size_t)r0 * W->cols; break;
    case V4_W_F32: m.w = (float *)W->w + (size_t)r0 * W->cols; break;
    }
    return m;
}

static dcomp upcomp(v4_cuda_engine *e, const v4_compressor_w *c)
{
    dcomp d = {c->ratio, c->dim, c->overlap, NULL, NULL, {}, {}};
    const int cw = (c->overlap ? 2 : 1) * c->dim;
    d.ape = upf(e, c->ape, (size_t)c->ratio * cw);
    d.norm = upf(e, c->norm, (size_t)c->dim);
    d.wkv = upmat(e, &c->wkv);
    d.wgate = upmat(e, &c->wgate);
    return d;
}

static dexpert upexpert(v4_cuda_engine *e, const v4_expert_w *x)
{
    return dexpert{upmat(e, &x->w1), upmat(e, &x->w3), upmat(e, &x->w2)};
}

/* ------------------------------------------------------------------ linear */

/* y [n][W.rows] = W x for the activations already quantized into e->xq / e->xs. */
static cudaError_t lin_quantized(v4_cuda_engine *e, const dmat *W, int n, float *y)
{
    return (W->type == V4_W_FP8 ? v4cu_quant_fp8 : v4cu_quant_fp4)((const uint8_t *)W->w, W->scale, W->rows, W->cols,
                                                                   n, e->xq, e->xs, y, e->st);
}

/* The fast mode's tensor-core product (cuda_lt.h): 0 done, 1 not taken, -1 failed. */
static int lin_fast(v4_cuda_engine *e, const dmat *W, int quant, int n, const float *x, float *y)
{
    int r = 1;
    if (quant)
        r = v4cu_lt_quant(e->lt, W->type, (const uint8_t *)W->w, W->scale, W->rows, W->cols, n, x, W->cols, y, e->st);
    else if (W->wb)
        r = v4cu_lt_bf16(e->lt, W->wb, W->rows, W->cols, n, x, W->cols, y, e->st);
    if (r < 0 && e->fail == cudaSuccess) {
        e->fail = cudaErrorUnknown;
        snprintf(e->fail_where, sizeof e->fail_where, "fast mode: %.50s", v4cu_lt_error(e->lt));
    }
    return r;
}

/* y [n][W.rows] = W x, x [n][W.cols], both compact, in mode (backend.h); the fast mode
 * takes QUANT products and those with a bf16 form (V4_LIN_BF16: head, wo_a). */
static int lin(v4_cuda_engine *e, const dmat *W, int quant, int n, const float *x, float *y)
{
    if (e->lt) {
        const int r = lin_fast(e, W, quant, n, x, y);
        if (r == 0 && e->sync_debug)    /* the sync debug mode: cuda_lt.cu names its own kernels */
            return ck_at(e, cudaSuccess, "fast-mode product", quant ? "v4cu_lt_quant" : "v4cu_lt_bf16");
        if (r <= 0)
            return r;
    }
    if (quant)
        return ck(e, v4cu_act_quant(x, n, W->cols, e->xq, e->xs, e->st), "linear") ||
                       ck(e, lin_quantized(e, W, n, y), "linear")
                   ? -1
                   : 0;
    return ck(e, v4cu_exact(W->type, W->r8, W->w, W->scale, W->rows, W->cols, n, x, y, e->st), "linear");
}

/* Strided copies between device arrays (rows of width floats). */
static int copy2d(v4_cuda_engine *e, float *dst, int ldd, const float *src, int lds, int width, int rows)
{
    return ck(e, cudaMemcpy2DAsync(dst, sizeof(float) * (size_t)ldd, src, sizeof(float) * (size_t)lds,
                                   sizeof(float) * (size_t)width, (size_t)rows, cudaMemcpyDeviceToDevice, e->st),
              "copy");
}

/* The same for rows of bf16 bits. */
static int copy2d_b16(v4_cuda_engine *e, uint16_t *dst, int ldd, const uint16_t *src, int lds, int width, int rows)
{
    const size_t b = sizeof(uint16_t);
    return ck(e, cudaMemcpy2DAsync(dst, b * (size_t)ldd, src, b * (size_t)lds, b * (size_t)width, (size_t)rows,
                                   cudaMemcpyDeviceToDevice, e->st),
              "copy");
}

static int to_host(v4_cuda_engine *e, void *h, const void *d, size_t bytes)
{
    if (ck(e, cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, e->st), "copy to host"))
        return -1;
    return ck(e, cudaStreamSynchronize(e->st), "synchronize");
}

/* Enqueued only: h must stay unchanged until the stream has passed the copy (the
 * step's end synchronizes, on failure too). */
static int to_dev_async(v4_cuda_engine *e, void *d, const void *h, size_t bytes)
{
    return ck(e, cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, e->st), "copy to device");
}

static int to_dev(v4_cuda_engine *e, void *d, const void *h, size_t bytes)
{
    if (ck(e, cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, e->st), "copy to device"))
        return -1;
    return ck(e, cudaStreamSynchronize(e->st), "synchronize");   /* h may be reused at once */
}

/* ------------------------------------------------------------------- mHC */

static int hc_pre(v4_cuda_engine *e, const dmat *fn, const float *scale, const float *base, const float *norm, int n)
{
    const v4_config *cfg = &e->w->cfg;
    const int hc = cfg->hc_mult, dim = cfg->dim, mix = fn->rows;
    if (lin(e, fn, 0, n, e->X, e->mixes) ||
        ck(e, v4cu_rms_scale(e->X, hc * dim, cfg->norm_eps, e->mixes, mix, n, e->st), "hc") ||
        ck(e, v4cu_hc_weights(e->mixes, scale, base, hc, cfg->hc_iters, cfg->hc_eps, e->pre, e->post, e->comb, n,
                              e->st), "hc") ||
        ck(e, v4cu_hc_reduce(e->X, e->pre, hc, dim, e->x, n, e->st), "hc"))
        return -1;
    return ck(e, v4cu_rmsnorm(e->x, dim, norm, dim, cfg->norm_eps, e->x, dim, n, e->st), "norm");
}

static int hc_post(v4_cuda_engine *e, int n)
{
    const v4_config *cfg = &e->w->cfg;
    return ck(e, v4cu_hc_post(e->X, e->out, e->post, e->comb, cfg->hc_mult, cfg->dim, n, e->st), "hc");
}

/* ------------------------------------------------------------- compressor */

/* Entry j ([dim] bf16) of a paged cache whose host page table is pt. */
static uint16_t *page_entry(const v4_cuda_engine *e, uint16_t *const *pt, int j, int dim)
{
    return pt[j >> e->pg_shift] + (size_t)(j & ((1 << e->pg_shift) - 1)) * dim;
}

/* Where the entry that position pos completes goes (entry n of a table holding np
 * pages; seq_grow gave the step's positions their pages), NULL when pos completes no
 * block of ratio r. */
static uint16_t *block_out(const v4_cuda_engine *e, uint16_t *const *pt, int np, int n, int dim, int pos, int r)
{
    if ((pos + 1) % r != 0 || (n >> e->pg_shift) >= np)
        return NULL;
    return page_entry(e, pt, n, dim);
}

/* compressor.c v4_compressor_step on device state: kvp/sc [W] of this token; out
 * [d] (bf16 bits, v4_seq_store_bf16) written when a block completes (returns 1); the
 * entry is computed in place in e->e. */
static int comp_step(v4_cuda_engine *e, const dcomp *c, dcstate *st, int pos, const float *kvp, const float *sc,
                     const float *freqs, int rotate, uint16_t *out)
{
    const v4_config *cfg = &e->w->cfg;
    const int r = c->ratio, d = c->dim, W = st->width, rd = cfg->rope_head_dim;
    const int row = (c->overlap ? r : 0) + pos % r;
    if (copy2d(e, st->kv + (size_t)row * W, W, kvp, W, W, 1) ||
        ck(e, v4cu_add(sc, c->ape + (size_t)(pos % r) * W, st->sc + (size_t)row * W, W, e->st), "compressor"))
        return -1;
    if ((pos + 1) % r != 0)
        return 0;
    if (!out)   /* seq_grow gives every completed entry its page: an engine bug otherwise */
        return ck(e, cudaErrorInvalidValue, "compressor: no page for a completed entry");
    if (ck(e, v4cu_comp_pool(st->kv, st->sc, W, r, d, c->overlap, e->e, e->st), "compressor"))
        return -1;
    if (c->overlap && (copy2d(e, st->kv, W, st->kv + (size_t)r * W, W, W, r) ||
                       copy2d(e, st->sc, W, st->sc + (size_t)r * W, W, W, r)))
        return -1;
    float *v = e->e;
    if (ck(e, v4cu_rmsnorm(v, d, c->norm, d, cfg->norm_eps, v, d, 1, e->st), "compressor") ||
        ck(e, v4cu_rope_at(v + d - rd, 1, d, rd / 2, freqs, pos + 1 - r, 0, e->st), "compressor"))
        return -1;
    if (rotate ? ck(e, v4cu_hadamard(v, 1, d, d, e->st), "compressor") ||
                     ck(e, v4cu_block_qdq(v, 1, d, d, 32, 1, e->st), "compressor")
               : ck(e, v4cu_block_qdq(v, 1, d, d - rd, 64, 0, e->st), "compressor"))
        return -1;
    return ck(e, v4cu_bf16_bits(v, out, d, e->st), "compressor") ? -1 : 1;
}

/* ----------------------------------------------------------- attention */

/* indexer.c v4_indexer for row b (its query already roped, rotated and quantized):
 * fills csel[b*topk ...], returns the count (-1 on error). */
static int indexer(v4_cuda_engine *e, const dlayer *lw, dlstate *L, int b, int pos, v4_trace *tr, int layer)
{
    const v4_config *cfg = &e->w->cfg;
    const int ih = cfg->index_n_heads, id = cfg->index_head_dim, topk = cfg->index_topk;
    const float *q = e->iq + (size_t)b * ih * id;   /* rotated and quantized for every row by attention() */
    int done = comp_step(e, &lw->idx_comp, &L->ics, pos, e->ikv + (size_t)b * 2 * id, e->isc + (size_t)b * 2 * id,
                         e->freqs_comp, 1, block_out(e, L->pi, L->npi, L->n_idx, id, pos, lw->ratio));
    if (done < 0)
        return -1;
    L->n_idx += done;
    const int n = L->n_idx, k = n < topk ? n : topk;
    int32_t *sel = e->csel + (size_t)b * topk;
    if (ck(e, v4cu_index_scores(q, L->dpi, e->pg_shift, n, e->iw + (size_t)b * ih, ih, id, e->score, e->st),
           "indexer") ||
        ck(e, v4cu_topk(e->score, n, k, sel, e->st), "indexer"))
        return -1;
    if (tr && (tr->index_ids || tr->index_count)) {
        if (k && to_host(e, e->h_csel, sel, sizeof(int32_t) * (size_t)k))
            return -1;
        if (tr->index_ids)
            for (int i = 0; i < topk; i++)
                tr->index_ids[(size_t)layer * topk + i] = i < k ? e->h_csel[i] : -1;
        if (tr->index_count)
            tr->index_count[layer] = k;
    }
    return k;
}

static int attention(v4_cuda_engine *e, int layer, dseq *const *S, const rowmap *rm, int n, v4_trace *const *tr)
{
    const v4_config *cfg = &e->w->cfg;
    const dlayer *lw = &e->L[layer];
    const int H = cfg->n_heads, hd = cfg->head_dim, rd = cfg->rope_head_dim, win = cfg->window;
    /* this layer's host staging of the candidate lists and lengths (pinned; its own
     * area per layer unless cand_layers is 1, then reused after a wait) */
    const size_t slot = e->cand_layers > 1 ? (size_t)layer : 0;
    const uint16_t **h_cand = e->h_cand + slot * e->max_batch * e->lmax;
    int32_t *h_len = e->h_len + slot * e->max_batch;
    const int ql = cfg->q_lora_rank, G = cfg->o_groups, ol = cfg->o_lora_rank;
    const float eps = cfg->norm_eps;
    const float *freqs = lw->ratio ? e->freqs_comp : e->freqs_swa;

    if (lin(e, &lw->wq_a, 1, n, e->x, e->qa) ||
        ck(e, v4cu_rmsnorm(e->qa, ql, lw->q_norm, ql, eps, e->qa, ql, n, e->st), "q_norm") ||
        lin(e, &lw->wq_b, 1, n, e->qa, e->q) || lin(e, &lw->wkv, 1, n, e->x, e->kv))
        return -1;
    if (lw->ratio && (lin(e, &lw->comp.wkv, 0, n, e->x, e->ckv) || lin(e, &lw->comp.wgate, 0, n, e->x, e->csc)))
        return -1;
    if (lw->ratio == 4 &&
        (lin(e, &lw->idx_wq_b, 1, n, e->qa, e->iq) || lin(e, &lw->idx_weights_proj, 0, n, e->x, e->iw) ||
         lin(e, &lw->idx_comp.wkv, 0, n, e->x, e->ikv) || lin(e, &lw->idx_comp.wgate, 0, n, e->x, e->isc)))
        return -1;
    if (ck(e, v4cu_head_rms_bf16(e->q, n * H, hd, eps, e->st), "q") ||
        ck(e, v4cu_rope(e->q + hd - rd, n * H, hd, rd / 2, freqs, e->pos, H, 0, e->st), "q") ||
        ck(e, v4cu_rmsnorm(e->kv, hd, lw->kv_norm, hd, eps, e->kv, hd, n, e->st), "kv") ||
        ck(e, v4cu_rope(e->kv + hd - rd, n, hd, rd / 2, freqs, e->pos, 1, 0, e->st), "kv") ||
        ck(e, v4cu_block_qdq(e->kv, n, hd, hd - rd, 64, 0, e->st), "kv") ||
        ck(e, v4cu_bf16_bits(e->kv, e->kvb, (long)n * hd, e->st), "kv"))
        return -1;
    if (lw->ratio == 4) {   /* the indexer queries of every row (indexer.c: rope, rotate, quantize) */
        const int ih = cfg->index_n_heads, id = cfg->index_head_dim;
        if (ck(e, v4cu_rope(e->iq + id - rd, n * ih, id, rd / 2, e->freqs_comp, e->pos, ih, 0, e->st), "indexer") ||
            ck(e, v4cu_hadamard(e->iq, n * ih, id, id, e->st), "indexer") ||
            ck(e, v4cu_block_qdq(e->iq, n * ih, id, id, 32, 1, e->st), "indexer"))
            return -1;
    }

    /* per row in row order (a sequence's rows in position order): its state updates
     * and its candidate list */
    for (int b = 0; b < n; b++) {
        dlstate *L = &S[b]->L[layer];
        const int pos = e->h_pos[b], p0 = e->h_pos[rm->first[b]];
        int nsel = 0;
        if (lw->ratio == 4 && (nsel = indexer(e, lw, L, b, pos, tr ? tr[b] : NULL, layer)) < 0)
            return -1;
        if (lw->ratio) {
            const int cw = (lw->comp.overlap ? 2 : 1) * lw->comp.dim;
            int done = comp_step(e, &lw->comp, &L->cs, pos, e->ckv + (size_t)b * cw, e->csc + (size_t)b * cw, freqs,
                                 0, block_out(e, L->pc, L->npc, L->n_comp, hd, pos, lw->ratio));
            if (done < 0)
                return -1;
            L->n_comp += done;
        }
        /* candidates (attention.c candidates()): window oldest -> newest (positions of
         * this step from its kv rows, earlier ones from the ring), then compressed */
        const uint16_t **hc = h_cand + (size_t)b * e->lmax;
        int m = 0;
        for (int q = pos >= win - 1 ? pos - win + 1 : 0; q <= pos; q++)
            hc[m++] = q >= p0 ? e->kvb + (size_t)row_at(rm, b, q - p0) * hd : L->win + (size_t)(q % win) * hd;
        while (m < win)
            hc[m++] = NULL;
        if (lw->ratio && lw->ratio != 4)
            for (int j = 0; j < L->n_comp; j++)
                hc[m++] = page_entry(e, L->pc, j, hd);
        h_len[b] = m;                       /* the window and HCA part; CSA picks follow */
        e->h_nsel[b] = lw->ratio == 4 ? nsel : 0;
    }
    /* one upload of every row's list, then the indexer's picks appended on the device;
     * with one staging area for all layers, a wait (after the lengths) before reuse */
    if (to_dev_async(e, e->cand, h_cand, sizeof(uint16_t *) * (size_t)n * e->lmax))
        return -1;
    for (int b = 0; b < n; b++) {
        if (e->h_nsel[b] &&
            ck(e, v4cu_cand_from_sel(e->cand + (size_t)b * e->lmax + h_len[b], S[b]->L[layer].dpc, e->pg_shift, hd,
                                     e->csel + (size_t)b * cfg->index_topk, e->h_nsel[b], e->st), "candidates"))
            return -1;
        h_len[b] += e->h_nsel[b];
    }
    const float scale = (float)pow((double)hd, -0.5);
    if ((e->cand_layers > 1 ? to_dev_async : to_dev)(e, e->len, h_len, sizeof(int32_t) * (size_t)n) ||
        ck(e, v4cu_sparse_attn(e->q, e->cand, e->len, (int)e->lmax, n, H, hd, scale, lw->attn_sink, e->o, e->st),
           "attention") ||
        ck(e, v4cu_rope(e->o + hd - rd, n * H, hd, rd / 2, freqs, e->pos, H, 1, e->st), "attention"))
        return -1;
    /* the window ring, now that no candidate list reads it: each sequence's last
     * `window` positions of this step */
    for (int b = 0; b < n; b++) {
        const int pos = e->h_pos[b], last = e->h_pos[rm->first[b]] + rm->count[rm->first[b]] - 1;
        if (pos > last - win &&
            copy2d_b16(e, S[b]->L[layer].win + (size_t)(pos % win) * hd, hd, e->kvb + (size_t)b * hd, hd, hd, 1))
            return -1;
    }
    /* grouped low-rank output projection */
    const int gin = H * hd / G;
    for (int g = 0; g < G; g++) {
        const dmat wg = dmat_rows(&lw->wo_a, g * ol, ol);
        if (copy2d(e, e->tin, gin, e->o + (size_t)g * gin, H * hd, gin, n) || lin(e, &wg, 0, n, e->tin, e->tout) ||
            copy2d(e, e->z + (size_t)g * ol, G * ol, e->tout, ol, ol, n))
            return -1;
    }
    if (ck(e, v4cu_round_bf16(e->z, (long)n * G * ol, e->st), "wo_a"))
        return -1;
    return lin(e, &lw->wo_b, 1, n, e->z, e->out);
}

/* ----------------------------------------------------------------- MoE */

/* Expert x on rows [s0, s0+m) of the gathered buffers (ex_x in, ex_o out); the
 * shared expert runs on rows [0, n). */
static int expert_forward(v4_cuda_engine *e, const dexpert *x, int s0, int m, const float *wt)
{
    const v4_config *cfg = &e->w->cfg;
    const size_t I = (size_t)cfg->moe_inter, d = (size_t)cfg->dim;
    float *ex_x = e->ex_x + s0 * d, *g = e->ex_g + s0 * I, *u = e->ex_u + s0 * I, *h = e->ex_h + s0 * I;
    return lin(e, &x->w1, 1, m, ex_x, g) || lin(e, &x->w3, 1, m, ex_x, u) ||
                   ck(e, v4cu_swiglu(g, u, cfg->moe_inter, cfg->swiglu_limit, wt, h, m, e->st), "swiglu") ||
                   lin(e, &x->w2, 1, m, h, e->ex_o + s0 * d)
               ? -1
               : 0;
}

/* Routed expert x_ids[i] of the layer on its rows (h_start), into its own part of the
 * gathered buffers; a paged expert first makes the stream wait for its slot's copy. */
static int routed_expert(v4_cuda_engine *e, const dlayer *lw, int i, v4_error *err)
{
    const int dim = e->w->cfg.dim, x = e->x_ids[i], s0 = e->h_start[x], m = e->h_start[x + 1] - s0;
    if (e->xsl && v4cu_xslots_wait(e->xsl, v4cu_xslots_slot_of(e->xsl, i), err))
        return -1;
    if (ck(e, v4cu_gather_rows(e->x, dim, e->rows + s0, m, e->ex_x + (size_t)s0 * dim, e->st), "moe gather"))
        return -1;
    return expert_forward(e, e->xsl ? &e->x_mats[x] : &lw->experts[x], s0, m, e->ex_wt + s0);
}

/* Paged experts: pin the layer's experts x_ids[0..nx) (all or nothing; nothing
 * pinned on failure), point x_mats at the slots and mark the misses (x_miss). */
static int acquire_experts(v4_cuda_engine *e, int layer, int nx, v4_error *err)
{
    const v4_config *cfg = &e->w->cfg;
    if (v4cu_xslots_begin(e->xsl, layer, e->x_ids, nx, err))
        return -1;
    const int type = cfg->expert_fp4 ? V4_W_FP4 : V4_W_FP8, I = cfg->moe_inter, d = cfg->dim;
    for (int i = 0; i < nx; i++) {
        uint8_t *base = v4cu_xslots_at(e->xsl, v4cu_xslots_slot_of(e->xsl, i));
        dmat *dm[3] = {&e->x_mats[e->x_ids[i]].w1, &e->x_mats[e->x_ids[i]].w3, &e->x_mats[e->x_ids[i]].w2};
        for (int k = 0; k < 3; k++)
            *dm[k] = dmat{type, k == 2 ? d : I, k == 2 ? I : d, 0, base + e->xoff[2 * k], base + e->xoff[2 * k + 1],
                          NULL};
        e->x_miss[i] = 0;
    }
    for (int k = 0; k < v4cu_xslots_nmiss(e->xsl); k++)
        e->x_miss[v4cu_xslots_miss_at(e->xsl, k)] = 1;
    return 0;
}

/* The routed experts of a layer.  Resident ones (hits; every expert when none is
 * paged) are enqueued first; then the misses' host bytes are fetched (the host expert
 * cache may load them meanwhile) and each miss is enqueued right after its upload on
 * the copy stream, so its copy overlaps the kernels before it and the next miss's copy
 * overlaps its kernels.  Every expert writes its own rows of ex_o; the scatter-adds
 * into y then run in ascending expert id, the order of the C reference (moe.c), so
 * the sum is bit-identical whatever order the experts ran in. */
static int routed_experts(v4_cuda_engine *e, int layer, int nx, v4_error *err)
{
    const dlayer *lw = &e->L[layer];
    const int dim = e->w->cfg.dim;
    if (e->xsl && acquire_experts(e, layer, nx, err))
        return -1;
    int rc = 0;
    for (int i = 0; i < nx && !rc; i++)
        if (!e->xsl || !e->x_miss[i])
            rc = routed_expert(e, lw, i, err);
    const int nmiss = e->xsl ? v4cu_xslots_nmiss(e->xsl) : 0;
    if (nmiss && !rc)
        rc = v4cu_xslots_fetch(e->xsl, err);
    for (int k = 0; k < nmiss && !rc; k++)
        rc = v4cu_xslots_upload(e->xsl, k, err) || routed_expert(e, lw, v4cu_xslots_miss_at(e->xsl, k), err);
    if (e->xsl)
        v4cu_xslots_end(e->xsl, rc == 0);
    for (int i = 0; i < nx && !rc; i++) {
        const int s0 = e->h_start[e->x_ids[i]], m = e->h_start[e->x_ids[i] + 1] - s0;
        rc = ck(e, v4cu_scatter_add(e->y, dim, e->ex_o + (size_t)s0 * dim, e->rows + s0, m, e->st), "moe");
    }
    if (e->xsl)   /* records the slots' used events after this layer's kernels, unpins */
        v4cu_xslots_release(e->xsl, layer, e->x_ids, nx);
    return rc ? -1 : 0;
}

/* The shared expert on x into ex_o [n][dim], as expert_forward computes it, with x
 * quantized once for w1 and w3 (act_quant is per row: the values lin() makes twice). */
static int shared_expert(v4_cuda_engine *e, const dexpert *x, int n)
{
    const v4_config *cfg = &e->w->cfg;
    return ck(e, v4cu_act_quant(e->x, n, cfg->dim, e->xq, e->xs, e->st), "shared expert") ||
                   ck(e, lin_quantized(e, &x->w1, n, e->ex_g), "linear") ||
                   ck(e, lin_quantized(e, &x->w3, n, e->ex_u), "linear") ||
                   ck(e, v4cu_swiglu(e->ex_g, e->ex_u, cfg->moe_inter, cfg->swiglu_limit, NULL, e->ex_h, n, e->st),
                      "swiglu") ||
                   lin(e, &x->w2, 1, n, e->ex_h, e->ex_o)
               ? -1
               : 0;
}

/* Whether the fast mode's step of n rows runs its routed experts on the tensor cores
 * (cuda_mma.h): many rows per expert (cuda_plan.h: v4_cuda_fast_moe_grouped says few). */
static int moe_mma(const v4_cuda_engine *e, int n)
{
    const v4_config *c = &e->w->cfg;
    return e->lt && e->mma && !v4_cuda_fast_moe_grouped(n, c->n_act_experts, c->n_routed_experts);
}

/* The routed experts with every expert resident: lists, products and the ordered sum
 * on the device (cuda_moe.h), no copy to the host; then the shared expert. */
static int moe_grouped(v4_cuda_engine *e, const dlayer *lw, int n, const int32_t *route, const float *route_w)
{
    const v4_config *cfg = &e->w->cfg;
    const int dim = cfg->dim, mma = moe_mma(e, n);
    if (ck(e, (mma ? v4cu_moe_routed_mma : v4cu_moe_routed)(&e->mb, lw->xtab, lw->xfp4, cfg->n_routed_experts, dim,
                                                              cfg->moe_inter, cfg->swiglu_limit, route, route_w, e->x,
                                                              n, cfg->n_act_experts, e->st),
           mma ? "moe (tensor cores)" : "moe") ||
        shared_expert(e, &lw->shared, n) ||
        ck(e, v4cu_moe_combine(e->mb.go, dim, e->mb.comb, n, cfg->n_act_experts, e->ex_o, e->out, e->st), "moe"))
        return -1;
    e->grouped_layers++;
    e->mma_layers += mma;
    return 0;
}

/* Paged experts on the grouped path: unpin the held layer's experts, recording their
 * slots' `used` events after the kernels enqueued so far (its grouped launch). */
static void paged_release(v4_cuda_engine *e)
{
    if (e->x_held < 0)
        return;
    v4cu_xslots_release(e->xsl, e->x_held, e->x_ids, e->x_nx);
    e->x_held = -1;
}

/* The distinct experts of n rows of K route ids, ascending into ids (their count
 * returned), ids outside [0, E) dropped as the device's list builder does; mark[E]
 * ends up 1 for the experts of the set, 0 for the others. */
static int route_set(const int32_t *route, int n, int K, int E, unsigned char *mark, int *ids)
{
    memset(mark, 0, (size_t)E);
    for (int p = 0; p < n * K; p++)
        if (route[p] >= 0 && route[p] < E)
            mark[route[p]] = 1;
    int m = 0;
    for (int x = 0; x < E; x++)
        if (mark[x])
            ids[m++] = x;
    return m;
}

/* Paged experts on the grouped path, before the layer's grouped launch: the layer's
 * expert set (a hash layer's from the step's tokens and tid2eid: no wait; a score
 * layer's from its routes copied back: the layer's one wait), its slots pinned (all
 * or nothing), the misses fetched and uploaded (xslots.h: one copy per expert from
 * pinned staging on the copy stream), the stream made to wait for every slot's copy,
 * and the layer's slot table (each expert of the set -> its slot's six parts, NULL for
 * the others) uploaded without a wait from its pinned area.  route: the layer's route
 * ids on the device (unused for a hash layer).  The experts stay pinned (x_held) until
 * paged_release; on failure nothing stays pinned. */
static int paged_select(v4_cuda_engine *e, int layer, int n, const int32_t *route, int la_n, v4_error *err)
{
    const v4_config *cfg = &e->w->cfg;
    const int K = cfg->n_act_experts, E = cfg->n_routed_experts;
    const int32_t *t2e = e->w->layers[layer].tid2eid;
    if (t2e) {
        for (int b = 0; b < n; b++) {
            const int32_t tok = e->h_tok[b];
            if (tok < 0 || tok >= cfg->vocab_size)
                return v4_err_set(err, V4_ERR_RANGE, "cuda step", "token %d of row %d outside the vocabulary (%d)",
                                  tok, b, cfg->vocab_size);
            memcpy(e->h_route + (size_t)b * K, t2e + (size_t)tok * K, sizeof(int32_t) * (size_t)K);
        }
    } else {
        /* the look-ahead's ids (la_n > 0) come back in the same wait */
        if ((la_n && ck(e, cudaMemcpyAsync(e->h_la, e->la_route, sizeof(int32_t) * (size_t)la_n * K,
                                           cudaMemcpyDeviceToHost, e->st),
                        "copy to host")) ||
            to_host(e, e->h_route, route, sizeof(int32_t) * (size_t)n * K))
            return -1;
        e->moe_syncs++;
    }
    const int nx = route_set(e->h_route, n, K, E, e->x_miss, e->x_ids);
    if (v4cu_xslots_begin(e->xsl, layer, e->x_ids, nx, err))
        return -1;
    if (e->la_layer == layer) {   /* the look-ahead's uploads this begin found resident */
        for (int k = 0; k < v4cu_xslots_nmiss(e->xsl); k++)
            e->la_mark[e->x_ids[v4cu_xslots_miss_at(e->xsl, k)]] = 0;   /* evicted since */
        for (int i = 0; i < nx; i++)
            e->la_used += e->la_mark[e->x_ids[i]];
        e->la_layer = -1;
    }
    int rc = v4cu_xslots_fetch(e->xsl, err) || v4cu_xslots_upload_all(e->xsl, err);
    v4cu_xslots_end(e->xsl, !rc);
    e->x_held = layer;
    e->x_nx = nx;
    const uint8_t **t = e->h_stab + (size_t)layer * 6 * E;
    for (int i = 0; i < 6 * E; i++)
        t[i] = NULL;
    for (int i = 0; i < nx && !rc; i++) {
        const int slot = v4cu_xslots_slot_of(e->xsl, i);
        const uint8_t *base = v4cu_xslots_at(e->xsl, slot);
        for (int k = 0; k < 6; k++)
            t[(size_t)k * E + e->x_ids[i]] = base + e->xoff[k];
        rc = v4cu_xslots_wait(e->xsl, slot, err);
    }
    if (!rc)
        rc = to_dev_async(e, (void *)e->L[layer].xtab, t, sizeof(uint8_t *) * 6 * (size_t)E);
    if (rc)
        paged_release(e);
    return rc ? -1 : 0;
}

/* Whether layer's routed experts of a step of n rows take the grouped on-device path:
 * always in the exact mode; in the fast mode for steps of few rows per expert (the
 * exact grouped kernels) and, while the tensor-core path passed its self-test, for the
 * others too (moe_mma); only where the layer has its table. */
static int moe_on_device(const v4_cuda_engine *e, int layer, int n)
{
    const v4_config *c = &e->w->cfg;
    return e->L[layer].xtab && (!e->lt || e->mma || v4_cuda_fast_moe_grouped(n, c->n_act_experts, c->n_routed_experts));
}

/* The router look-ahead for score layer `layer` (paged, grouped path): the next layer
 * is score-routed and takes the grouped path too.  Its routes are then computed on
 * layer's MoE input and copied back in layer's one wait (paged_select). */
static int lookahead_on(const v4_cuda_engine *e, int layer, int n)
{
    const v4_weights *w = e->w;
    return e->paged && e->lookahead && !w->layers[layer].tid2eid && e->x_held != layer &&
           layer + 1 < w->cfg.n_layers && !w->layers[layer + 1].tid2eid && moe_on_device(e, layer + 1, n);
}

/* After the previous layer's grouped launch (its experts still pinned): the predicted
 * experts of `layer` (h_la, n rows; ascending, ids outside [0, E) dropped) that are not
 * resident are uploaded into unpinned slots and left resident but unpinned, so the
 * layer's own begin finds them (hits) and its waits on the slots' ready events order
 * the copies.  A hint: when the slots cannot hold them (the pool's V4_ERR_NOMEM), or
 * the ids are out of range, nothing is done; a CUDA failure is an error. */
static int lookahead_upload(v4_cuda_engine *e, int layer, int n, v4_error *err)
{
    const int K = e->w->cfg.n_act_experts, E = e->w->cfg.n_routed_experts;
    const int np = route_set(e->h_la, n, K, E, e->la_mark, e->la_ids);
    v4_slot_pool *pool = v4cu_xslots_pool(e->xsl);
    int nl = 0;
    for (int i = 0; i < np; i++) {   /* the predicted misses only: only the uploads count */
        const int x = e->la_ids[i];
        if (v4_slot_pool_lookup(pool, layer, x) < 0)
            e->la_ids[nl++] = x;
        else
            e->la_mark[x] = 0;
    }
    e->la_layer = -1;
    if (!nl)
        return 0;
    v4_error hint = {};
    if (v4cu_xslots_begin(e->xsl, layer, e->la_ids, nl, &hint)) {
        memset(e->la_mark, 0, (size_t)E);
        if (hint.code == V4_ERR_NOMEM && !v4cu_xslots_broken(e->xsl, err))
            return 0;   /* does not fit beside the pinned experts: skipped */
        if (err)
            *err = hint;
        return -1;
    }
    const int rc = v4cu_xslots_fetch(e->xsl, err) || v4cu_xslots_upload_all(e->xsl, err);
    v4cu_xslots_end(e->xsl, !rc);
    v4cu_xslots_release(e->xsl, layer, e->la_ids, nl);
    if (rc) {
        memset(e->la_mark, 0, (size_t)E);
        return -1;
    }
    e->la_issued += (uint64_t)nl;
    e->la_layer = layer;
    return 0;
}

/* Before layer l's attention: a hash layer's experts are known from the tokens, so with
 * paged experts on the grouped path their uploads start here and overlap the attention. */
static int moe_ahead(v4_cuda_engine *e, int layer, int n, v4_error *err)
{
    if (!e->paged || !moe_on_device(e, layer, n) || !e->w->layers[layer].tid2eid)
        return 0;
    return paged_select(e, layer, n, NULL, 0, err);
}

/* The layer's routes go to its part of route_all (copied back for the traces at the
 * end of the step).  The grouped path (cuda_moe.h) serves resident and paged experts
 * alike, reading the layer's pointer table: fixed, or the slot table paged_select
 * wrote (no wait for a hash layer, one for a score layer); the fast mode takes it for
 * steps of few rows per expert with the exact kernels, for the others with the
 * tensor-core products (moe_mma, cuda_mma.h).  Only when those failed their self-test
 * (or were turned off) does a fast-mode step of many rows take the host-driven MoE: the
 * routes and weights come back, the host picks the experts and uploads the row lists
 * (4 waits per layer), each expert's products through cuBLASLt (lin). */
static int moe(v4_cuda_engine *e, int layer, int n, v4_error *err)
{
    const v4_config *cfg = &e->w->cfg;
    const dlayer *lw = &e->L[layer];
    const int dim = cfg->dim, E = cfg->n_routed_experts, K = cfg->n_act_experts;
    int32_t *route = e->route_all + (size_t)layer * n * K;
    float *route_w = e->route_w_all + (size_t)layer * n * K;
    e->moe_layers++;
    if (lin(e, &lw->gate, 0, n, e->x, e->gate) ||
        ck(e, v4cu_route(e->gate, E, K, lw->gate_bias, lw->tid2eid, e->tokens, cfg->route_scale, route, route_w, n,
                         e->st), "router"))
        return -1;
    if (moe_on_device(e, layer, n)) {   /* else (fast mode, many rows) each expert through lin() */
        const int la = lookahead_on(e, layer, n);
        if (la && (lin(e, &e->L[layer + 1].gate, 0, n, e->x, e->la_gate) ||
                   ck(e, v4cu_route(e->la_gate, E, K, e->L[layer + 1].gate_bias, NULL, e->tokens, cfg->route_scale,
                                    e->la_route, e->la_route_w, n, e->st),
                      "router (look-ahead)")))
            return -1;
        if (e->paged && e->x_held != layer && paged_select(e, layer, n, route, la ? n : 0, err))
            return -1;
        int rc = moe_grouped(e, lw, n, route, route_w);
        if (!rc && la)
            rc = lookahead_upload(e, layer + 1, n, err);
        paged_release(e);
        return rc;
    }
    e->moe_syncs += 4;          /* routes and weights back, rows and weights up */
    if (to_host(e, e->h_route, route, sizeof(int32_t) * (size_t)n * K) ||
        to_host(e, e->h_route_w, route_w, sizeof(float) * (size_t)n * K))
        return -1;
    if (ck(e, cudaMemsetAsync(e->y, 0, sizeof(float) * (size_t)n * dim, e->st), "moe"))
        return -1;
    /* rows and weights of every expert of the layer, in ascending expert id: one upload */
    int off = 0, nx = 0;
    for (int x = 0; x < E; x++) {
        e->h_start[x] = off;
        for (int b = 0; b < n; b++)
            for (int k = 0; k < K; k++)
                if (e->h_route[b * K + k] == x) {
                    e->h_rows[off] = b;
                    e->h_wt[off++] = e->h_route_w[b * K + k];
                }
        if (off > e->h_start[x])
            e->x_ids[nx++] = x;
    }
    e->h_start[E] = off;
    if (to_dev(e, e->ex_wt, e->h_wt, sizeof(float) * (size_t)off) ||
        to_dev(e, e->rows, e->h_rows, sizeof(int32_t) * (size_t)off) || routed_experts(e, layer, nx, err))
        return -1;
    if (copy2d(e, e->ex_x, dim, e->x, dim, dim, n) || expert_forward(e, &lw->shared, 0, n, NULL))
        return -1;
    return ck(e, v4cu_add_bf16(e->y, e->ex_o, e->out, (long)n * dim, e->st), "moe");
}

/* The traces' routes of every layer (route_all copied back by the step). */
static void fill_route_traces(const v4_cuda_engine *e, int n, v4_trace *const *tr)
{
    const int K = e->w->cfg.n_act_experts, L = e->w->cfg.n_layers;
    for (int b = 0; tr && b < n; b++)
        if (tr[b] && tr[b]->route_ids)
            for (int l = 0; l < L; l++)
                for (int k = 0; k < K; k++) {
                    const size_t src = ((size_t)l * n + b) * K + k;
                    tr[b]->route_ids[l * K + k] = e->h_route_all[src];
                    tr[b]->route_w[l * K + k] = e->h_route_w_all[src];
                }
}

/* ------------------------------------------------------------ sequences */

/* Pages of 2^shift entries for n entries. */
static int pages_for(long n, int shift) { return n > 0 ? (int)((n + (1L << shift) - 1) >> shift) : 0; }

/* The pools' chunk allocator (seq_pages.h): device memory, NULL when there is none
 * (the CUDA error cleared: not an engine failure). */
static void *chunk_alloc(void *ud, size_t bytes)
{
    (void)ud;
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return p;
}

static void chunk_free(void *ud, void *p)
{
    (void)ud;
    cudaFree(p);
}

/* Every page of s back to the pools. */
static void return_pages(v4_cuda_engine *e, dseq *s, int n_layers)
{
    for (int l = 0; s->L && l < n_layers; l++) {
        dlstate *L = &s->L[l];
        for (int i = 0; i < L->npc; i++) {
            v4_page_pool_put(e->pool_c, L->pc[i]);
            s->bytes -= v4_page_pool_page_bytes(e->pool_c);
        }
        for (int i = 0; i < L->npi; i++) {
            v4_page_pool_put(e->pool_i, L->pi[i]);
            s->bytes -= v4_page_pool_page_bytes(e->pool_i);
        }
        L->npc = L->npi = 0;
    }
}

static void free_dseq(v4_cuda_engine *e, dseq *s)
{
    const int n_layers = e->w->cfg.n_layers;
    return_pages(e, s, n_layers);
    for (int l = 0; s->L && l < n_layers; l++) {
        dlstate *L = &s->L[l];
        cudaFree(L->win);
        cudaFree(L->cs.kv);
        cudaFree(L->cs.sc);
        cudaFree(L->ics.kv);
        cudaFree(L->ics.sc);
    }
    cudaFree((void *)s->dpt);
    free(s->hpt);
    free(s->L);
    memset(s, 0, sizeof *s);
}

/* Compressor state to its start (compressor.c comp_state_reset): kv = 0, sc = -inf. */
static int cstate_reset(v4_cuda_engine *e, dcstate *st)
{
    const size_t n = (size_t)st->rows * st->width;
    /* sc = -inf: a fill kernel would do; the host copy is simple (once per sequence) */
    float *h = (float *)malloc(n * sizeof(float));
    if (!h)
        return ck(e, cudaErrorMemoryAllocation, "host memory");
    for (size_t i = 0; i < n; i++)
        h[i] = -INFINITY;
    int rc = to_dev(e, st->sc, h, n * sizeof(float));
    free(h);
    return rc || ck(e, cudaMemsetAsync(st->kv, 0, n * sizeof(float), e->st), "memset") ? -1 : 0;
}

static size_t seq_held(const v4_cuda_engine *e)
{
    size_t b = 0;
    for (int i = 0; i < e->max_seqs; i++)
        b += e->seqs[i].bytes;
    return b;
}

/* A sequence's fixed allocation: out of memory is NOT sticky (the CUDA error is
 * cleared and e->fail left alone, so the engine keeps serving the other sequences);
 * *oom = 1 tells seq_state.  A sequence budget (v4_cuda_engine_set_seq_budget) refuses
 * what would pass it the same way.  Counts the bytes into s->bytes. */
static int seq_alloc(v4_cuda_engine *e, dseq *s, void **p, size_t bytes, int *oom)
{
    if (e->seq_budget != SIZE_MAX && seq_held(e) + bytes > e->seq_budget) {
        *oom = 1;
        return -1;
    }
    const cudaError_t rc = cudaMalloc(p, bytes ? bytes : 1);
    if (rc == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();   /* clear it: not an engine failure */
        *p = NULL;
        *oom = 1;
        return -1;
    }
    if (ck(e, rc, "cudaMalloc"))
        return -1;
    s->bytes += bytes;
    return 0;
}

static int cstate_init(v4_cuda_engine *e, dseq *s, dcstate *st, const dcomp *c, int *oom)
{
    const int k = c->overlap ? 2 : 1;
    st->rows = k * c->ratio;
    st->width = k * c->dim;
    const size_t n = (size_t)st->rows * st->width;
    if (seq_alloc(e, s, (void **)&st->kv, n * sizeof(float), oom) ||
        seq_alloc(e, s, (void **)&st->sc, n * sizeof(float), oom))
        return -1;
    return cstate_reset(e, st);
}

/* A sequence's bytes (see the header): fixed (window rings, compressor states, device
 * page tables) plus, when pages is set, every page at max_len positions. */
static size_t seq_bytes(const v4_config *cfg, int max_len, int shift, int pages)
{
    if (max_len < 1)
        return 0;
    const size_t P = (size_t)1 << shift;
    size_t b = 0;
    for (int l = 0; l < cfg->n_layers; l++) {
        const int r = cfg->compress_ratios[l];
        b += sizeof(uint16_t) * (size_t)cfg->window * cfg->head_dim;
        if (!r)
            continue;
        const size_t np = (size_t)pages_for(max_len / r, shift);
        const size_t k = r == 4 ? 2 : 1;   /* ratio 4 compressors overlap: 2r rows of 2 dim */
        b += 2 * sizeof(float) * (k * r) * (k * cfg->head_dim) + (pages ? np * P * sizeof(uint16_t) * cfg->head_dim : 0);
        if (r == 4)
            b += 2 * sizeof(float) * (2 * 4) * (2 * cfg->index_head_dim) + 2 * np * sizeof(uint16_t *) +
                 (pages ? np * P * sizeof(uint16_t) * cfg->index_head_dim : 0);
    }
    return b;
}

static int page_shift(int entries)
{
    int s = 0;
    while (s < 20 && (1 << s) < entries)
        s++;
    return s;
}

extern "C" size_t v4_cuda_seq_bytes(const v4_config *cfg, int max_len, int page_entries)
{
    return seq_bytes(cfg, max_len, page_shift(page_entries > 0 ? page_entries : V4_CUDA_SEQ_PAGE), 1);
}

/* The bytes sequences may hold in all: the budget, else what they hold plus the pools'
 * free pages plus the device's free memory (cudaMemGetInfo); SIZE_MAX when unknown
 * (the emulation without a budget: nothing is refused). */
static size_t seq_total(v4_cuda_engine *e)
{
    if (e->seq_budget != SIZE_MAX)
        return e->seq_budget;
#ifdef V4CU_HOST_EMULATION
    return SIZE_MAX;
#else
    size_t fr = 0, total = 0;
    if (cudaMemGetInfo(&fr, &total) != cudaSuccess) {
        (void)cudaGetLastError();
        return SIZE_MAX;
    }
    return seq_held(e) + v4_page_pool_free_bytes(e->pool_c) + v4_page_pool_free_bytes(e->pool_i) + fr;
#endif
}

/* The banker's test (seq_pages.h) over the live sequences with s (live or about to be:
 * its claim set) holding extra bytes more; a virtual new sequence (s NULL, claim
 * v_claim holding v_held) when v_claim is non-zero. */
static int seq_safe(v4_cuda_engine *e, const dseq *s, size_t extra, size_t v_held, size_t v_claim, size_t total)
{
    if (total == SIZE_MAX)
        return 1;
    int n = 0;
    for (int i = 0; i < e->max_seqs; i++) {
        const dseq *c = &e->seqs[i];
        if (!c->key && c != s)
            continue;
        e->bk_held[n] = c->bytes + (c == s ? extra : 0);
        e->bk_claim[n] = c->claim > e->bk_held[n] ? c->claim : e->bk_held[n];
        n++;
    }
    if (v_claim) {
        e->bk_held[n] = v_held;
        e->bk_claim[n++] = v_claim;
    }
    return v4_seq_mem_safe(e->bk_held, e->bk_claim, n, total, e->bk_scratch);
}

/* Table tab (device copy dtab, NULL: none) of s from *np to want pages out of pool;
 * 0, 1 when the pool had no memory (the pages got so far are kept), -1 on a failure. */
static int grow_table(v4_cuda_engine *e, dseq *s, v4_page_pool *pool, uint16_t **tab, const uint16_t **dtab, int *np,
                      int want)
{
    const int from = *np;
    int rc = 0;
    while (*np < want) {
        uint16_t *p = (uint16_t *)v4_page_pool_get(pool);
        if (!p) {
            rc = 1;
            break;
        }
        tab[(*np)++] = p;
        s->bytes += v4_page_pool_page_bytes(pool);
    }
    /* the host table's entries stay as they are while s lives: an unwaited copy */
    if (dtab && *np > from && to_dev_async(e, dtab + from, tab + from, sizeof(uint16_t *) * (size_t)(*np - from)))
        return -1;
    return rc;
}

/* Pages for s's positions [0, end) (every ratio layer's entries up to end / ratio),
 * granted only when the sequences stay safe (seq_safe; *total: seq_total, computed
 * at the first growth of the step, 0 before).  0; 1: s must wait (the banker's test
 * or the pools' memory refused; nothing of s changed but pages it got); -1: a CUDA
 * failure.  *want: the bytes asked for. */
static int seq_grow(v4_cuda_engine *e, dseq *s, int end, size_t *total, size_t *want)
{
    const v4_config *cfg = &e->w->cfg;
    const size_t bc = v4_page_pool_page_bytes(e->pool_c), bi = v4_page_pool_page_bytes(e->pool_i);
    size_t extra = 0;
    for (int l = 0; l < cfg->n_layers; l++) {
        const int r = e->L[l].ratio;
        if (!r)
            continue;
        const dlstate *L = &s->L[l];
        const int np = pages_for(end / r, e->pg_shift);
        extra += (size_t)(np > L->npc ? np - L->npc : 0) * bc + (r == 4 && np > L->npi ? (size_t)(np - L->npi) * bi : 0);
    }
    *want = extra;
    if (!extra)
        return 0;
    if (!*total)
        *total = seq_total(e);
    if (!seq_safe(e, s, extra, 0, 0, *total))
        return 1;
    for (int l = 0; l < cfg->n_layers; l++) {
        const int r = e->L[l].ratio;
        if (!r)
            continue;
        dlstate *L = &s->L[l];
        const int np = pages_for(end / r, e->pg_shift);
        int rc = grow_table(e, s, e->pool_c, L->pc, L->dpc, &L->npc, np);
        if (!rc && r == 4)
            rc = grow_table(e, s, e->pool_i, L->pi, L->dpi, &L->npi, np);
        if (rc)
            return rc;
    }
    return 0;
}

/* The page pools, made at the first sequence (pages of 2^pg_shift entries, chunks of
 * about 2 MiB). */
static int ensure_pools(v4_cuda_engine *e)
{
    if (e->pool_c)
        return 0;
    const v4_config *cfg = &e->w->cfg;
    const size_t P = (size_t)1 << e->pg_shift, bc = P * sizeof(uint16_t) * cfg->head_dim,
                 bi = P * sizeof(uint16_t) * cfg->index_head_dim;
    const size_t chunk = (size_t)2 << 20;
    e->pool_c = v4_page_pool_create(bc, bc < chunk ? (int)(chunk / bc) : 1, chunk_alloc, chunk_free, NULL);
    e->pool_i = v4_page_pool_create(bi ? bi : 1, bi && bi < chunk ? (int)(chunk / bi) : 1, chunk_alloc, chunk_free,
                                    NULL);
    if (!e->pool_c || !e->pool_i) {
        v4_page_pool_free(e->pool_c);
        v4_page_pool_free(e->pool_i);
        e->pool_c = e->pool_i = NULL;
        return ck(e, cudaErrorMemoryAllocation, "host memory");
    }
    return 0;
}

/* The fixed part of s's state for v->max_len (window rings, compressor states, page
 * tables; no pages yet); *oom = 1 when the device memory was short. */
static int seq_make(v4_cuda_engine *e, dseq *s, const v4_seq_view *v, int *oom)
{
    const v4_config *cfg = &e->w->cfg;
    s->L = (dlstate *)calloc((size_t)cfg->n_layers, sizeof *s->L);
    size_t ht = 0, dt = 0;
    for (int l = 0; l < cfg->n_layers; l++)
        if (e->L[l].ratio) {
            const size_t np = (size_t)pages_for(v->max_len / e->L[l].ratio, e->pg_shift);
            ht += (e->L[l].ratio == 4 ? 2 : 1) * np;
            dt += e->L[l].ratio == 4 ? 2 * np : 0;
        }
    s->hpt = (uint16_t **)calloc(ht + 1, sizeof(uint16_t *));
    if (!s->L || !s->hpt)
        return ck(e, cudaErrorMemoryAllocation, "host memory");
    if (dt && seq_alloc(e, s, (void **)&s->dpt, dt * sizeof(uint16_t *), oom))
        return -1;
    uint16_t **hp = s->hpt;
    const uint16_t **dp = s->dpt;
    for (int l = 0; l < cfg->n_layers; l++) {
        dlstate *L = &s->L[l];
        const dlayer *lw = &e->L[l];
        const size_t wb = sizeof(uint16_t) * (size_t)cfg->window * cfg->head_dim;
        if (seq_alloc(e, s, (void **)&L->win, wb, oom) || ck(e, cudaMemsetAsync(L->win, 0, wb, e->st), "memset"))
            return -1;
        if (!lw->ratio)
            continue;
        L->np_max = pages_for(v->max_len / lw->ratio, e->pg_shift);
        L->pc = hp;
        hp += L->np_max;
        if (lw->ratio == 4) {
            L->pi = hp;
            hp += L->np_max;
            L->dpc = dp;
            L->dpi = dp + L->np_max;
            dp += 2 * L->np_max;
        }
        if (cstate_init(e, s, &L->cs, &lw->comp, oom) ||
            (lw->ratio == 4 && cstate_init(e, s, &L->ics, &lw->idx_comp, oom)))
            return -1;
    }
    return 0;
}

/* The device state of view v (created at position 0), or NULL + err; *oom = 1 when its
 * allocation found no device memory, or admitting it could leave the live sequences
 * unable to finish (seq_safe), and the engine is still usable. */
static dseq *seq_state(v4_cuda_engine *e, const v4_seq_view *v, const v4_seq_view *all, int n, int *oom_out,
                       v4_error *err)
{
    const v4_config *cfg = &e->w->cfg;
    dseq *s = NULL;
    for (int i = 0; i < e->max_seqs && !s; i++)
        if (e->seqs[i].key == v->key)
            s = &e->seqs[i];
    if (s && s->pos == v->pos && v->pos > 0)
        return s;
    if (v->pos > 0) {
        v4_err_set(err, V4_ERR_INVALID, "cuda step",
                   s ? "the sequence is at position %d on the host but %d on the device"
                     : "no device state for a sequence at position %d (more than %d live sequences?)",
                   v->pos, s ? s->pos : e->max_seqs);
        return NULL;
    }
    if (!s) {   /* a free slot, else the least recently stepped one outside this step */
        for (int i = 0; i < e->max_seqs; i++) {
            dseq *c = &e->seqs[i];
            int busy = 0;
            for (int j = 0; j < n && c->key; j++)
                busy |= all[j].key == c->key;
            if (busy)
                continue;
            if (!s || !c->key || (s->key && c->last_step < s->last_step))
                s = c;
            if (!c->key)
                break;
        }
        if (!s) {
            v4_err_set(err, V4_ERR_INVALID, "cuda step", "more sequences in one step than device slots (%d)",
                       e->max_seqs);
            return NULL;
        }
    }
    if (ensure_pools(e))
        return NULL;
    if (s->key && s->max_len == v->max_len) {   /* reuse the allocations, give back the pages */
        return_pages(e, s, cfg->n_layers);
        for (int l = 0; l < cfg->n_layers; l++) {
            dlstate *L = &s->L[l];
            L->n_comp = L->n_idx = 0;
            if (ck(e, cudaMemsetAsync(L->win, 0, sizeof(uint16_t) * (size_t)cfg->window * cfg->head_dim, e->st),
                   "memset"))
                return NULL;
            if ((L->cs.kv && cstate_reset(e, &L->cs)) || (L->ics.kv && cstate_reset(e, &L->ics)))
                return NULL;
        }
    } else {
        if (s->L)
            free_dseq(e, s);
        const size_t claim = seq_bytes(cfg, v->max_len, e->pg_shift, 1);
        const size_t fixed = seq_bytes(cfg, v->max_len, e->pg_shift, 0), total = seq_total(e);
        int oom = !seq_safe(e, NULL, 0, fixed, claim, total);
        const int refused = oom;
        if (!oom) {
            s->claim = claim;
            seq_make(e, s, v, &oom);
        }
        if (oom || e->fail != cudaSuccess) {
            const size_t held = seq_held(e) - s->bytes;
            free_dseq(e, s);
            if (refused)
                v4_err_set(err, V4_ERR_NOMEM, "cuda step",
                           "no device memory for a sequence of %d positions now (it may hold %zu bytes; the live "
                           "sequences hold %zu of %zu and could not all finish) - not an engine failure",
                           v->max_len, claim, held, total);
            else
                v4_err_set(err, V4_ERR_NOMEM, "cuda step",
                           "no device memory for a sequence of %d positions (%zu bytes; %zu held by other sequences)%s",
                           v->max_len, claim, held, e->fail != cudaSuccess ? "" : " - not an engine failure");
            *oom_out = e->fail == cudaSuccess;
            return NULL;
        }
    }
    s->key = v->key;
    s->max_len = v->max_len;
    s->pos = 0;
    return s;
}

/* Candidate slots per row for sequences up to max_len: window + the larger of the
 * indexer's top-k and the most HCA entries. */
static int ensure_cand(v4_cuda_engine *e, int max_len)
{
    const v4_config *cfg = &e->w->cfg;
    long need = cfg->index_topk, sc = 0;
    for (int l = 0; l < cfg->n_layers; l++)
        if (e->L[l].ratio) {
            const long cap = max_len / e->L[l].ratio + 1;
            if (e->L[l].ratio != 4 && cap > need)
                need = cap;
            if (e->L[l].ratio == 4 && cap > sc)
                sc = cap;
        }
    need += cfg->window;
    if (need > e->lmax) {   /* (no copy is in flight: the last step ended with a wait) */
        cudaFree(e->cand);
        cudaFreeHost(e->h_cand);
        e->cand = NULL;
        e->h_cand = NULL;
        const size_t per_layer = sizeof(uint16_t *) * (size_t)need * e->max_batch;
        e->cand_layers = per_layer * cfg->n_layers <= ((size_t)64 << 20) ? cfg->n_layers : 1;
        if (ck(e, cudaMallocHost((void **)&e->h_cand, per_layer * e->cand_layers), "cudaMallocHost") ||
            ck(e, cudaMalloc((void **)&e->cand, per_layer), "cudaMalloc"))
            return -1;
        e->lmax = need;
    }
    if ((size_t)sc > e->score_cap) {
        cudaFree(e->score);
        e->score = NULL;
        if (ck(e, cudaMalloc((void **)&e->score, sizeof(float) * (size_t)sc), "cudaMalloc"))
            return -1;
        e->score_cap = (size_t)sc;
    }
    return 0;
}

/* -------------------------------------------------------------- the step */

/* The LM head for the wanted rows (want NULL: all) into logits [n][vocab]. */
static int head_rows(v4_cuda_engine *e, int n, const int *want, float *logits)
{
    const int V = e->w->cfg.vocab_size, dim = e->w->cfg.dim;
    int m = 0, all = 1;
    for (int b = 0; b < n; b++)
        all &= !want || want[b];
    if (all)
        return lin(e, &e->head, 0, n, e->x, e->logits) ||
               to_host(e, logits, e->logits, sizeof(float) * (size_t)n * V);
    for (int b = 0; b < n; b++)   /* the wanted rows' hidden states, compacted into y */
        if (want[b] && copy2d(e, e->y + (size_t)m++ * dim, dim, e->x + (size_t)b * dim, dim, dim, 1))
            return -1;
    if (!m)
        return 0;
    if (lin(e, &e->head, 0, m, e->y, e->logits))
        return -1;
    for (int b = 0, k = 0; b < n; b++)
        if (want[b] && ck(e, cudaMemcpyAsync(logits + (size_t)b * V, e->logits + (size_t)k++ * V, sizeof(float) * V,
                                             cudaMemcpyDeviceToHost, e->st), "copy to host"))
            return -1;
    return ck(e, cudaStreamSynchronize(e->st), "synchronize");
}

/* The step's rows by sequence (rm), each sequence's device state in S (the same
 * pointer for every row of a sequence); a later row of a sequence must be at the
 * position after its previous row.  A new sequence without device memory fails it with
 * fault->row = its first row (retryable; nothing is enqueued yet but the fresh state of
 * the new sequences before it, which stays at position 0). */
static int map_rows(v4_cuda_engine *e, const v4_seq_view *views, int n, rowmap *rm, dseq **S, v4_step_fault *fault,
                    v4_error *err)
{
    for (int b = 0; b < n; b++) {
        int f = b, prev = -1;
        for (int j = b - 1; j >= 0 && prev < 0; j--)
            if (views[j].key == views[b].key)
                prev = j;
        if (prev >= 0) {
            f = rm->first[prev];
            if (views[b].pos != views[prev].pos + 1)
                return v4_err_set(err, V4_ERR_INVALID, "cuda step",
                                  "row %d of a sequence is at position %d, after its row %d at %d", b, views[b].pos,
                                  prev, views[prev].pos);
            S[b] = S[prev];
        } else {
            rm->count[b] = 0;
            int oom = 0;
            if (!(S[b] = seq_state(e, &views[b], views, n, &oom, err))) {
                if (oom)
                    *fault = (v4_step_fault){.row = b, .retryable = 1, .stall = 0};
                return -1;
            }
        }
        rm->first[b] = f;
        rm->count[f]++;
    }
    int off = 0;
    for (int b = 0; b < n; b++)
        if (rm->first[b] == b) {
            rm->off[b] = off;
            off += rm->count[b];
            rm->count[b] = 0;   /* refilled below as the rows are placed */
        }
    for (int b = 0; b < n; b++) {
        const int f = rm->first[b];
        rm->seqrow[rm->off[f] + rm->count[f]++] = b;
    }
    return 0;
}

static int use_device(const v4_cuda_engine *e);

static int engine_step(void *ud, const v4_seq_view *views, const int32_t *tokens, int n, float *logits,
                       const int *want, v4_trace *const *tr, v4_step_fault *fault, v4_error *err)
{
    v4_cuda_engine *e = (v4_cuda_engine *)ud;
    const v4_config *cfg = &e->w->cfg;
    if (use_device(e))
        return v4_err_set(err, V4_ERR_INTERNAL, "cuda step", "cudaSetDevice(%d) failed on the step thread", e->device);
    if (e->fail != cudaSuccess)
        return v4_err_set(err, V4_ERR_INTERNAL, "cuda step", "an earlier CUDA failure (%s: %s) left the engine unusable",
                          e->fail_where, cudaGetErrorString(e->fail));
    if (n > e->max_batch)
        return v4_err_set(err, V4_ERR_INVALID, "cuda step", "batch of %d (max %d)", n, e->max_batch);
    for (int b = 0; tr && b < n; b++)
        if (tr[b] && (tr[b]->force || tr[b]->route_gap))
            return v4_err_set(err, V4_ERR_INVALID, "cuda step",
                              "teacher forcing and routing gaps are traced on the CPU path only (row %d)", b);
    dseq *S[256];
    rowmap rm;
    int max_len = 0;
    memcpy(e->h_tok, tokens, sizeof(int32_t) * (size_t)n);   /* pinned: the upload is not waited for */
    if (map_rows(e, views, n, &rm, S, fault, err))   /* (a fault: before any kernel) */
        return -1;
    /* each sequence's pages for this step's positions, before any kernel: a refused
     * growth is that sequence's fault (it waits, nothing ran; the pages the sequences
     * before it got stay theirs) */
    size_t total = 0;
    for (int b = 0; b < n; b++) {
        if (rm.first[b] != b)
            continue;
        const int end = views[b].pos + rm.count[b];
        size_t want = 0;
        const int g = seq_grow(e, S[b], end, &total, &want);
        if (g < 0)
            return v4_err_set(err, V4_ERR_INTERNAL, "cuda step", "%s: %s", e->fail_where, cudaGetErrorString(e->fail));
        if (g > 0) {
            e->seq_stalls++;
            *fault = (v4_step_fault){.row = b, .retryable = 1, .stall = 1};
            return v4_err_set(err, V4_ERR_NOMEM, "cuda step",
                              "the sequence of row %d (positions %d..%d of %d) waits for %zu bytes of cache pages: "
                              "sequences hold %zu of %zu bytes and granting them now could leave one unable to "
                              "finish, or the device had no memory - not an engine failure",
                              b, views[b].pos, end - 1, views[b].max_len, want, seq_held(e), total);
        }
    }
    for (int b = 0; b < n; b++) {
        if (views[b].max_len > max_len)
            max_len = views[b].max_len;
        e->h_pos[b] = views[b].pos;
    }
    e->step_no++;
    int rc = ensure_cand(e, max_len) || to_dev_async(e, e->tokens, e->h_tok, sizeof(int32_t) * (size_t)n) ||
             to_dev_async(e, e->pos, e->h_pos, sizeof(int32_t) * (size_t)n) ||
             ck(e, v4cu_embed(e->embed, e->tokens, n, cfg->dim, cfg->hc_mult, e->X, e->st), "embed");
    for (int l = 0; !rc && l < cfg->n_layers; l++) {
        const dlayer *lw = &e->L[l];
        rc = moe_ahead(e, l, n, err) ||
             hc_pre(e, &lw->hc_attn_fn, lw->hc_attn_scale, lw->hc_attn_base, lw->attn_norm, n) ||
             attention(e, l, S, &rm, n, tr) || hc_post(e, n) ||
             hc_pre(e, &lw->hc_ffn_fn, lw->hc_ffn_scale, lw->hc_ffn_base, lw->ffn_norm, n) || moe(e, l, n, err) ||
             hc_post(e, n);
    }
    if (!rc) {   /* hc_head, final norm, head */
        const int hc = cfg->hc_mult, dim = cfg->dim;
        rc = lin(e, &e->hc_head_fn, 0, n, e->X, e->mixes) ||
             ck(e, v4cu_rms_scale(e->X, hc * dim, cfg->norm_eps, e->mixes, e->hc_head_fn.rows, n, e->st), "hc_head") ||
             ck(e, v4cu_hc_head_pre(e->mixes, e->hc_head_fn.rows, e->hc_head_scale, e->hc_head_base, hc, cfg->hc_eps,
                                    e->pre, n, e->st), "hc_head") ||
             ck(e, v4cu_hc_reduce(e->X, e->pre, hc, dim, e->x, n, e->st), "hc_head") ||
             ck(e, v4cu_rmsnorm(e->x, dim, e->norm, dim, cfg->norm_eps, e->x, dim, n, e->st), "norm");
        /* the traces' routes of every layer: queued before the logits, so that the
         * step's one synchronization (to_host of the logits, or the final one) covers them */
        int want_routes = 0;
        for (int b = 0; tr && b < n; b++)
            want_routes |= tr[b] && tr[b]->route_ids;
        const size_t nr = (size_t)cfg->n_layers * n * cfg->n_act_experts;
        if (!rc && want_routes)
            rc = ck(e, cudaMemcpyAsync(e->h_route_all, e->route_all, sizeof(int32_t) * nr, cudaMemcpyDeviceToHost,
                                       e->st), "copy to host") ||
                 ck(e, cudaMemcpyAsync(e->h_route_w_all, e->route_w_all, sizeof(float) * nr, cudaMemcpyDeviceToHost,
                                       e->st), "copy to host");
        if (!rc && logits)
            rc = head_rows(e, n, want, logits);
        if (!rc)
            rc = ck(e, cudaStreamSynchronize(e->st), "synchronize");
        if (!rc && want_routes)
            fill_route_traces(e, n, tr);
    }
    if (rc) {
        cudaStreamSynchronize(e->st);   /* the unwaited uploads' host sources (h_tok, h_pos, h_cand, h_len) */
        paged_release(e);               /* a layer's paged experts still pinned */
        for (int b = 0; b < n; b++)   /* their device state holds part of a position */
            if (rm.first[b] == b)
                free_dseq(e, S[b]);
        if (e->fail == cudaSuccess && err->msg[0])
            return -1;                  /* a precise error from the step (expert budget) */
        if (e->fail != cudaSuccess)
            return v4_err_set(err, V4_ERR_INTERNAL, "cuda step", "%s: %s", e->fail_where, cudaGetErrorString(e->fail));
        return v4_err_set(err, V4_ERR_INTERNAL, "cuda step", "the step failed");
    }
    for (int b = 0; b < n; b++) {
        S[b]->pos++;
        S[b]->last_step = e->step_no;
    }
    return 0;
}

/* ------------------------------------------------------------ create/free */

/* Make e's device current on the calling thread: the step runs on the runner's step
 * thread, which may never have called cudaSetDevice (cuda:N with N > 0). */
static int use_device(const v4_cuda_engine *e)
{
#ifndef V4CU_HOST_EMULATION
    return cudaSetDevice(e->device) == cudaSuccess ? 0 : -1;
#else
    (void)e;
    return 0;
#endif
}

/* Paged experts (budget > 0): device slots, copy stream and staging (xslots.h), the
 * misses coming from inner (the host expert cache) or, inner NULL, the weights. */
static int setup_paging(v4_cuda_engine *e, size_t budget, const v4_expert_provider *inner, v4_xpolicy_kind policy,
                        v4_error *err)
{
    const v4_config *c = &e->w->cfg;
    const size_t slot_bytes = v4cu_xslots_layout(c, e->xoff, NULL);
    e->paged = 1;
    e->nslots = v4cu_xslots_count(c, budget);
    e->bytes += (size_t)e->nslots * slot_bytes;
    if (e->count_only)
        return 0;
    if (!(e->xsl = v4cu_xslots_create(e->w, inner, budget, policy, e->st, e->device, "cuda step", err)))
        return -1;
    const size_t E = (size_t)c->n_routed_experts;
    e->x_miss = (unsigned char *)calloc(E, 1);
    e->x_mats = (dexpert *)calloc(E, sizeof(dexpert));
    if (!e->x_miss || !e->x_mats)
        return v4_err_set(err, V4_ERR_NOMEM, "cuda engine", "out of memory");
    return 0;
}

static int alloc_scratch(v4_cuda_engine *e)
{
    const v4_config *c = &e->w->cfg;
    const size_t B = (size_t)e->max_batch, hc = c->hc_mult, dim = c->dim, H = c->n_heads, hd = c->head_dim;
    const size_t K = c->n_act_experts, I = c->moe_inter, ih = c->index_n_heads, id = c->index_head_dim;
    const size_t mix = (2 + hc) * hc, gin = H * hd / c->o_groups;
    size_t kmax = hc * dim;   /* the widest linear input */
    const size_t ins[] = {dim, (size_t)c->q_lora_rank, (size_t)c->o_groups * c->o_lora_rank, I, gin};
    for (size_t v : ins)
        kmax = v > kmax ? v : kmax;
#define F(p, n) ((p) = (float *)dalloc(e, sizeof(float) * (n)))
#define I32(p, n) ((p) = (int32_t *)dalloc(e, sizeof(int32_t) * (n)))
    F(e->X, B * hc * dim); F(e->mixes, B * mix); F(e->pre, B * hc); F(e->post, B * hc); F(e->comb, B * hc * hc);
    F(e->x, B * dim); F(e->out, B * dim); F(e->qa, B * c->q_lora_rank); F(e->q, B * H * hd); F(e->kv, B * hd);
    F(e->o, B * H * hd); e->kvb = (uint16_t *)dalloc(e, sizeof(uint16_t) * B * hd); F(e->z, B * c->o_groups * c->o_lora_rank); F(e->ckv, B * 2 * hd); F(e->csc, B * 2 * hd);
    F(e->iq, B * ih * id); F(e->iw, B * ih); F(e->ikv, B * 2 * id); F(e->isc, B * 2 * id);
    F(e->gate, B * c->n_routed_experts); F(e->la_gate, B * c->n_routed_experts); F(e->la_route_w, B * K);
    I32(e->la_route, B * K); F(e->route_w_all, (size_t)c->n_layers * B * K); F(e->ex_x, B * K * dim); F(e->ex_g, B * K * I);
    F(e->ex_u, B * K * I); F(e->ex_h, B * K * I); F(e->ex_o, B * K * dim); F(e->ex_wt, B * K); F(e->y, B * dim);
    F(e->logits, B * c->vocab_size); F(e->tin, B * gin); F(e->tout, B * c->o_lora_rank); F(e->e, 2 * hd + id);
    F(e->xs, B * (kmax / 128 + 1) + 1);
    e->xq = (double *)dalloc(e, sizeof(double) * B * kmax);
    I32(e->route_all, (size_t)c->n_layers * B * K); I32(e->tokens, B); I32(e->pos, B); I32(e->csel, B * c->index_topk); I32(e->len, B);
    I32(e->rows, B * K);
    if (e->grouped) {   /* the grouped MoE's scratch (cuda_moe.h) */
        const size_t P = B * K, E = c->n_routed_experts, wide = dim > I ? dim : I;
        v4cu_moe_bufs *m = &e->mb;
        I32(m->rows, P); I32(m->eid, P); I32(m->tile, P); I32(m->comb, P); I32(m->start, E + 1);
        I32(m->active, E); I32(m->nact, 1); F(m->wt, P); F(m->gx, P * dim); F(m->gg, P * I); F(m->gu, P * I);
        F(m->gh, P * I); F(m->go, P * dim); F(m->xs, P * (wide / 128 + 1) + 1);
        m->xq = (double *)dalloc(e, sizeof(double) * P * wide);
        m->xb = (uint16_t *)dalloc(e, sizeof(uint16_t) * P * wide);   /* the fast mode's tensor-core path */
        I32(m->tl, (size_t)v4cu_mma_tile_bound((int)P, (int)E));
    }
#undef F
#undef I32
    /* pinned: copied without a wait (uploads) or within the step's one wait (routes) */
    if (!e->count_only &&
        (ck(e, cudaMallocHost((void **)&e->h_len, sizeof(int32_t) * c->n_layers * B), "cudaMallocHost") ||
         ck(e, cudaMallocHost((void **)&e->h_pos, sizeof(int32_t) * B), "cudaMallocHost") ||
         ck(e, cudaMallocHost((void **)&e->h_tok, sizeof(int32_t) * B), "cudaMallocHost") ||
         ck(e, cudaMallocHost((void **)&e->h_la, sizeof(int32_t) * B * K), "cudaMallocHost") ||
         ck(e, cudaMallocHost((void **)&e->h_route_all, sizeof(int32_t) * c->n_layers * B * K), "cudaMallocHost") ||
         ck(e, cudaMallocHost((void **)&e->h_route_w_all, sizeof(float) * c->n_layers * B * K), "cudaMallocHost")))
        return -1;
    e->h_route = (int32_t *)calloc(B * K, sizeof(int32_t));
    e->h_rows = (int32_t *)calloc(B * K, sizeof(int32_t));
    e->h_csel = (int32_t *)calloc((size_t)c->index_topk + 1, sizeof(int32_t));
    e->h_nsel = (int32_t *)calloc(B, sizeof(int32_t));
    e->h_start = (int32_t *)calloc((size_t)c->n_routed_experts + 1, sizeof(int32_t));
    e->h_route_w = (float *)calloc(B * K, sizeof(float));
    e->h_wt = (float *)calloc(B * K, sizeof(float));
    e->seqs = (dseq *)calloc((size_t)e->max_seqs, sizeof(dseq));
    e->seq_budget = SIZE_MAX;
    e->pg_shift = page_shift(V4_CUDA_SEQ_PAGE);
    e->bk_held = (size_t *)calloc((size_t)e->max_seqs + 1, sizeof(size_t));
    e->bk_claim = (size_t *)calloc((size_t)e->max_seqs + 1, sizeof(size_t));
    e->bk_scratch = (unsigned char *)calloc((size_t)e->max_seqs + 1, 1);
    e->x_ids = (int *)calloc((size_t)c->n_routed_experts, sizeof(int));
    e->la_ids = (int *)calloc((size_t)c->n_routed_experts, sizeof(int));
    e->la_mark = (unsigned char *)calloc((size_t)c->n_routed_experts, 1);
    if (!e->x_ids || !e->la_ids || !e->la_mark || !e->h_route || !e->h_rows || !e->h_csel || !e->h_nsel ||
        !e->h_start || !e->h_route_w || !e->h_wt || !e->seqs || !e->bk_held || !e->bk_claim || !e->bk_scratch)
        return ck(e, cudaErrorMemoryAllocation, "host memory");
    return e->fail == cudaSuccess ? 0 : -1;
}

/* Whether the grouped MoE (cuda_moe.h) can run every layer: all routed experts
 * resident, one quantized type (FP8 or FP4, row-major) and shape, within its limits. */
static int grouped_ok(const v4_cuda_engine *e)
{
    const v4_config *c = &e->w->cfg;
    const int E = c->n_routed_experts, K = c->n_act_experts, d = c->dim, I = c->moe_inter;
    if (e->paged || E > V4CU_MOE_MAX_EXPERTS || (long)e->max_batch * K > V4CU_MOE_MAX_PAIRS)
        return 0;
    const int type = e->w->layers[0].experts[0].w1.type;
    if (type != V4_W_FP8 && type != V4_W_FP4)
        return 0;
    for (int l = 0; l < c->n_layers; l++)
        for (int x = 0; x < E; x++) {
            const v4_expert_w *xw = &e->w->layers[l].experts[x];
            const v4_mat *m[3] = {&xw->w1, &xw->w3, &xw->w2};
            for (int k = 0; k < 3; k++)
                if ((int)m[k]->type != type || m[k]->layout == V4_LAYOUT_R8 || !m[k]->w || !m[k]->scale ||
                    m[k]->rows != (k == 2 ? d : I) || m[k]->cols != (k == 2 ? I : d))
                    return 0;
        }
    return 1;
}

/* Every layer's table of its routed experts' device pointers [6][E] (cuda_moe.h),
 * uploaded once; the host source stays until the engine is freed. */
static void upload_xtabs(v4_cuda_engine *e)
{
    const v4_config *c = &e->w->cfg;
    const size_t E = (size_t)c->n_routed_experts;
    e->h_xtab = (const uint8_t **)calloc((size_t)c->n_layers * 6 * E, sizeof(uint8_t *));
    if (!e->h_xtab) {
        ck(e, cudaErrorMemoryAllocation, "host memory");
        return;
    }
    for (int l = 0; l < c->n_layers; l++) {
        dlayer *d = &e->L[l];
        const uint8_t **t = e->h_xtab + (size_t)l * 6 * E;
        for (size_t x = 0; x < E; x++) {
            const dmat *m[3] = {&d->experts[x].w1, &d->experts[x].w3, &d->experts[x].w2};
            for (int k = 0; k < 3; k++) {
                t[(2 * k) * E + x] = (const uint8_t *)m[k]->w;
                t[(2 * k + 1) * E + x] = m[k]->scale;
            }
        }
        d->xtab = (const uint8_t **)upload(e, t, sizeof(uint8_t *) * 6 * E);
        d->xfp4 = e->w->layers[l].experts[0].w1.type == V4_W_FP4;
    }
    e->grouped = e->fail == cudaSuccess;
}

/* Paged experts: the grouped path reads per layer a device slot table [6][E] (the
 * xtab layout) that paged_select rewrites each step from a pinned host area; it needs
 * the grouped kernels' limits only (the slots' layout is fixed by the config: FP4 or
 * FP8, row-major, xslots.h; an expert of another shape fails its upload). */
static void slot_tables(v4_cuda_engine *e)
{
    const v4_config *c = &e->w->cfg;
    const size_t E = (size_t)c->n_routed_experts, tab = sizeof(uint8_t *) * 6 * E;
    if (E > V4CU_MOE_MAX_EXPERTS || (long)e->max_batch * c->n_act_experts > V4CU_MOE_MAX_PAIRS)
        return;
    for (int l = 0; l < c->n_layers; l++) {
        e->L[l].xtab = (const uint8_t **)dalloc(e, tab);
        e->L[l].xfp4 = c->expert_fp4 != 0;
    }
    if (!e->count_only && !ck(e, cudaMallocHost((void **)&e->h_stab, tab * (size_t)c->n_layers), "cudaMallocHost"))
        memset((void *)e->h_stab, 0, tab * (size_t)c->n_layers);
    e->grouped = e->fail == cudaSuccess;
}

static int upload_weights(v4_cuda_engine *e)
{
    const v4_weights *w = e->w;
    const v4_config *c = &w->cfg;
    const int hc = c->hc_mult, mix = (2 + hc) * hc, E = c->n_routed_experts;
    e->embed = (uint16_t *)upload(e, w->embed.w, (size_t)c->vocab_size * c->dim * 2);
    e->head = upmat(e, &w->head);
    e->hc_head_fn = upmat(e, &w->hc_head_fn);
    e->norm = upf(e, w->norm, (size_t)c->dim);
    e->hc_head_base = upf(e, w->hc_head_base, (size_t)hc);
    e->hc_head_scale = upf(e, w->hc_head_scale, 1);
    float fr[64];
    v4_rope_freqs(fr, c->rope_head_dim, c->rope_theta, 1.0, 0, 0, 0);
    e->freqs_swa = upf(e, fr, (size_t)c->rope_head_dim / 2);
    v4_rope_freqs(fr, c->rope_head_dim, c->compress_rope_theta, c->rope_factor, c->original_seq_len, c->beta_fast,
                  c->beta_slow);
    e->freqs_comp = upf(e, fr, (size_t)c->rope_head_dim / 2);
    e->L = (dlayer *)calloc((size_t)c->n_layers, sizeof(dlayer));
    if (!e->L)
        return ck(e, cudaErrorMemoryAllocation, "host memory");
    for (int l = 0; l < c->n_layers && e->fail == cudaSuccess; l++) {
        const v4_layer_w *s = &w->layers[l];
        dlayer *d = &e->L[l];
        d->ratio = s->ratio;
        d->hc_attn_fn = upmat(e, &s->hc_attn_fn);
        d->hc_ffn_fn = upmat(e, &s->hc_ffn_fn);
        d->hc_attn_base = upf(e, s->hc_attn_base, (size_t)mix);
        d->hc_ffn_base = upf(e, s->hc_ffn_base, (size_t)mix);
        d->hc_attn_scale = upf(e, s->hc_attn_scale, 3);
        d->hc_ffn_scale = upf(e, s->hc_ffn_scale, 3);
        d->attn_norm = upf(e, s->attn_norm, (size_t)c->dim);
        d->ffn_norm = upf(e, s->ffn_norm, (size_t)c->dim);
        d->wq_a = upmat(e, &s->wq_a);
        d->wq_b = upmat(e, &s->wq_b);
        d->wkv = upmat(e, &s->wkv);
        d->wo_a = upmat(e, &s->wo_a);
        d->wo_b = upmat(e, &s->wo_b);
        d->q_norm = upf(e, s->q_norm, (size_t)c->q_lora_rank);
        d->kv_norm = upf(e, s->kv_norm, (size_t)c->head_dim);
        d->attn_sink = upf(e, s->attn_sink, (size_t)c->n_heads);
        if (s->ratio)
            d->comp = upcomp(e, &s->comp);
        if (s->ratio == 4) {
            d->idx_comp = upcomp(e, &s->idx_comp);
            d->idx_wq_b = upmat(e, &s->idx_wq_b);
            d->idx_weights_proj = upmat(e, &s->idx_weights_proj);
        }
        d->gate = upmat(e, &s->gate);
        d->gate_bias = s->tid2eid ? NULL : upf(e, s->gate_bias, (size_t)E);
        d->tid2eid = s->tid2eid ? (int32_t *)upload(e, s->tid2eid,
                                                    sizeof(int32_t) * (size_t)c->vocab_size * c->n_act_experts)
                                : NULL;
        d->shared = upexpert(e, &s->shared);
        d->experts = (dexpert *)calloc((size_t)E, sizeof(dexpert));
        if (!d->experts)
            return ck(e, cudaErrorMemoryAllocation, "host memory");
        for (int x = 0; x < E && e->fail == cudaSuccess && !e->paged; x++)   /* paged: in slots */
            d->experts[x] = upexpert(e, &s->experts[x]);
    }
    if (e->fail == cudaSuccess && grouped_ok(e))
        upload_xtabs(e);
    else if (e->fail == cudaSuccess && e->paged)
        slot_tables(e);
    if (e->count_only)
        return e->fail == cudaSuccess ? 0 : -1;
    return e->fail == cudaSuccess ? ck(e, cudaStreamSynchronize(e->st), "upload") : -1;
}

extern "C" void v4_cuda_engine_free(v4_cuda_engine *e)
{
    if (!e)
        return;
    use_device(e);
    if (e->st)
        cudaStreamSynchronize(e->st);
    v4cu_xslots_free(e->xsl);   /* waits for its copies */
    for (int i = 0; e->seqs && i < e->max_seqs; i++)
        if (e->seqs[i].key || e->seqs[i].L)
            free_dseq(e, &e->seqs[i]);
    for (int i = 0; i < e->n_allocs; i++)
        cudaFree(e->allocs[i]);
    cudaFree(e->cand);
    cudaFree(e->score);
    for (int l = 0; e->L && l < e->w->cfg.n_layers; l++)
        free(e->L[l].experts);
#ifndef V4CU_HOST_EMULATION
    if (e->st)
        cudaStreamDestroy(e->st);
#endif
    free(e->L);
    free(e->allocs);
    cudaFreeHost(e->h_cand);
    cudaFreeHost(e->h_len);
    cudaFreeHost(e->h_pos);
    cudaFreeHost(e->h_tok);
    cudaFreeHost(e->h_route_all);
    cudaFreeHost(e->h_route_w_all);
    cudaFreeHost((void *)e->h_stab);
    free(e->h_route);
    free(e->la_ids);
    free(e->la_mark);
    cudaFreeHost(e->h_la);
    free(e->h_rows);
    free(e->h_csel);
    free(e->h_nsel);
    free(e->h_start);
    free(e->x_ids);
    free(e->x_miss);
    free(e->x_mats);
    free(e->h_route_w);
    free(e->h_xtab);
    free(e->h_wt);
    free(e->seqs);
    v4_page_pool_free(e->pool_c);
    v4_page_pool_free(e->pool_i);
    free(e->bk_held);
    free(e->bk_claim);
    free(e->bk_scratch);
    free(e);
}

extern "C" v4_cuda_engine *v4_cuda_engine_create(const v4_weights *w, int max_batch, int max_seqs,
                                                 size_t expert_budget, v4_error *err)
{
    return v4_cuda_engine_create_paged(w, max_batch, max_seqs, expert_budget, NULL, V4_XPOL_NEXT, err);
}

extern "C" v4_cuda_engine *v4_cuda_engine_create_paged(const v4_weights *w, int max_batch, int max_seqs,
                                                       size_t expert_budget, const v4_expert_provider *inner,
                                                       v4_xpolicy_kind policy, v4_error *err)
{
    if (max_batch < 1 || max_batch > 256 || max_seqs < 1) {
        v4_err_set(err, V4_ERR_INVALID, "cuda engine", "max_batch %d (rows, 1..256) and max_seqs %d (>= 1)",
                   max_batch, max_seqs);
        return NULL;
    }
    if (w->cfg.hc_mult > 16 || w->cfg.head_dim > 1024 || w->cfg.rope_head_dim > 128) {
        v4_err_set(err, V4_ERR_CONFIG, "cuda engine", "model shape beyond the kernels' limits");
        return NULL;
    }
    v4_cuda_engine *e = (v4_cuda_engine *)calloc(1, sizeof *e);
    if (!e) {
        v4_err_set(err, V4_ERR_NOMEM, "cuda engine", "out of memory");
        return NULL;
    }
    e->w = w;
    e->max_batch = max_batch;
    e->max_seqs = max_seqs;
    e->sync_debug = v4cu_sync_debug_env();
    e->x_held = -1;
    e->la_layer = -1;
    e->lookahead = 1;
#ifndef V4CU_HOST_EMULATION
    cudaGetDevice(&e->device);      /* the creator made the backend's device current */
    if (ck(e, cudaStreamCreateWithFlags(&e->st, cudaStreamNonBlocking), "cudaStreamCreate")) {
        v4_err_set(err, V4_ERR_INVALID, "cuda engine", "no CUDA stream: %s", cudaGetErrorString(e->fail));
        v4_cuda_engine_free(e);
        return NULL;
    }
#endif
    if (expert_budget && setup_paging(e, expert_budget, inner, policy, err)) {
        v4_cuda_engine_free(e);
        return NULL;
    }
    if (upload_weights(e) || alloc_scratch(e)) {
        v4_err_set(err, V4_ERR_NOMEM, "cuda engine", "uploading the weights failed at %s (%s) after %.1f MiB",
                   e->fail_where, cudaGetErrorString(e->fail), (double)e->bytes / (1 << 20));
        v4_cuda_engine_free(e);
        return NULL;
    }
    return e;
}

/* The bf16 form of a V4_LIN_BF16 matrix for the fast mode (a row-major BF16 weight is
 * its own form). */
static void bf16_form(v4_cuda_engine *e, dmat *d)
{
    if (!d->w || (d->type == V4_W_BF16 && !d->r8)) {
        d->wb = (uint16_t *)d->w;
        return;
    }
    if (d->type != V4_W_BF16 && d->type != V4_W_FP8)
        return;
    uint16_t *wb = (uint16_t *)dalloc(e, sizeof(uint16_t) * (size_t)d->rows * d->cols);
    if (wb && !e->count_only &&
        ck(e, v4cu_fast_weight_bf16(d->type, d->r8, d->w, d->scale, d->rows, d->cols, wb, e->st), "bf16 form"))
        return;
    d->wb = wb;
}

extern "C" int v4_cuda_engine_use_fast(v4_cuda_engine *e, void *lt, v4_error *err)
{
    if (!lt)
        return v4_err_set(err, V4_ERR_INVALID, "cuda engine", "fast mode without a cuBLASLt context");
    if (use_device(e))
        return v4_err_set(err, V4_ERR_INTERNAL, "cuda engine", "cudaSetDevice(%d) failed", e->device);
    bf16_form(e, &e->head);
    for (int l = 0; l < e->w->cfg.n_layers; l++)
        bf16_form(e, &e->L[l].wo_a);
    if (e->fail != cudaSuccess || ck(e, cudaStreamSynchronize(e->st), "bf16 forms"))
        return v4_err_set(err, V4_ERR_NOMEM, "cuda engine", "fast mode: the bf16 weight forms (%s): %s", e->fail_where,
                          cudaGetErrorString(e->fail));
    e->lt = (v4cu_lt *)lt;
    /* the routed experts of large steps on the tensor cores, once they passed the self-test */
    e->mma = 0;
    if (e->grouped) {
        char why[240] = "";
        const int r = v4cu_mma_selftest(e->st, why, sizeof why);
        if (r < 0)
            return v4_err_set(err, V4_ERR_INTERNAL, "cuda engine", "fast mode: grouped tensor-core %s", why);
        if (r == 0)
            fprintf(stderr, "v4fleet: fast mode: the grouped tensor-core expert products are off (%s); large steps "
                            "run one cuBLASLt product per expert\n", why);
        e->mma = r == 1;
    }
    return 0;
}

extern "C" int v4_cuda_engine_set_mma(v4_cuda_engine *e, int on)
{
    if (on && (!e->lt || !e->grouped))
        return -1;
    if (on) {
        char why[240] = "";
        if (v4cu_mma_selftest(e->st, why, sizeof why) != 1)
            return -1;
    }
    e->mma = on != 0;
    return 0;
}

extern "C" size_t v4_cuda_engine_fast_need(const v4_weights *w)
{
    const v4_mat *m[2] = {&w->head, &w->layers[0].wo_a};
    size_t b = 0;
    for (int k = 0; k < 2; k++)
        if (m[k]->w && (m[k]->type == V4_W_FP8 || (m[k]->type == V4_W_BF16 && m[k]->layout == V4_LAYOUT_R8)))
            b += sizeof(uint16_t) * (size_t)m[k]->rows * m[k]->cols * (k ? (size_t)w->cfg.n_layers : 1);
    return b;
}

extern "C" size_t v4_cuda_engine_need(const v4_weights *w, int max_batch, size_t expert_budget)
{
    v4_cuda_engine *e = (v4_cuda_engine *)calloc(1, sizeof *e);
    if (!e)
        return 0;
    e->w = w;
    e->max_batch = max_batch < 1 ? 1 : max_batch;
    e->max_seqs = e->max_batch;
    e->count_only = 1;
    v4_error ignore = {};
    if (expert_budget)
        setup_paging(e, expert_budget, NULL, V4_XPOL_NEXT, &ignore);
    upload_weights(e);
    alloc_scratch(e);
    const size_t need = e->bytes;
    e->n_allocs = 0;
    v4_cuda_engine_free(e);
    return need;
}

extern "C" void v4_cuda_engine_expert_stats(const v4_cuda_engine *e, v4_cuda_expert_stats *st)
{
    memset(st, 0, sizeof *st);
    if (e) {
        st->grouped_moe_layers = e->grouped_layers;
        st->mma_moe_layers = e->mma_layers;
        st->moe_layers = e->moe_layers;
        st->moe_host_syncs = e->moe_syncs;
        st->staging_waits = e->xsl ? v4cu_xslots_staging_waits(e->xsl) : 0;
    }
    if (!e || !e->xsl)
        return;
    v4_slot_pool_stats ps;
    v4_slot_pool_stats_get(v4cu_xslots_pool(e->xsl), &ps);
    st->slots = ps.slots;
    st->slot_bytes = ps.slot_bytes;
    st->hits = ps.hits;
    st->misses = ps.misses;
    st->evictions = ps.evictions;
    st->bytes_uploaded = ps.bytes_uploaded;
    st->lookahead_issued = e->la_issued;
    st->lookahead_used = e->la_used;
}

extern "C" void v4_cuda_engine_set_lookahead(v4_cuda_engine *e, int on)
{
    e->lookahead = on != 0;
    e->la_layer = -1;
}

extern "C" size_t v4_cuda_engine_bytes(const v4_cuda_engine *e) { return e ? e->bytes : 0; }

/* Admission (the banker's rule, seq_pages.h): need = the most a new sequence of
 * max_len positions can hold (its claim; 0 when key's slot already holds state of that
 * size, which seq_state reuses); avail = the bytes sequences may hold in all
 * (seq_total) when the live sequences stay safe with the new one's fixed part taken
 * (then the new one, placed last in the finishing order, may claim all of it), else 0.
 * Unknown (the emulation without a budget, no cudaMemGetInfo): -1, admit. */
static int engine_admit(void *ud, const v4_seq *key, int max_len, size_t *need, size_t *avail)
{
    v4_cuda_engine *e = (v4_cuda_engine *)ud;
    const v4_config *cfg = &e->w->cfg;
    *need = seq_bytes(cfg, max_len, e->pg_shift, 1);
    for (int i = 0; i < e->max_seqs; i++)
        if (e->seqs[i].key == key && e->seqs[i].L && e->seqs[i].max_len == max_len)
            *need = 0;
    if (e->seq_budget == SIZE_MAX && use_device(e))
        return -1;
    const size_t total = seq_total(e);
    if (total == SIZE_MAX)
        return -1;
    const size_t fixed = seq_bytes(cfg, max_len, e->pg_shift, 0);
    *avail = seq_safe(e, NULL, 0, fixed, total, total) ? total : 0;   /* (a claim of total: it finishes last) */
    return 0;
}

/* The task of key is over: free its device state now (a later position-0 row makes it
 * again). */
static void engine_release(void *ud, const v4_seq *key)
{
    v4_cuda_engine *e = (v4_cuda_engine *)ud;
    for (int i = 0; i < e->max_seqs; i++)
        if (e->seqs[i].key == key) {
            (void)use_device(e);
            free_dseq(e, &e->seqs[i]);
        }
}

extern "C" void v4_cuda_engine_set_seq_budget(v4_cuda_engine *e, size_t bytes) { e->seq_budget = bytes; }

extern "C" size_t v4_cuda_engine_seq_bytes_held(const v4_cuda_engine *e) { return seq_held(e); }

extern "C" int v4_cuda_engine_set_seq_page(v4_cuda_engine *e, int entries, v4_error *err)
{
    if (entries < 1 || entries > (1 << 20) || (entries & (entries - 1)))
        return v4_err_set(err, V4_ERR_INVALID, "cuda engine", "sequence page of %d entries (a power of two, 1..2^20)",
                          entries);
    for (int i = 0; i < e->max_seqs; i++)
        if (e->seqs[i].L)
            return v4_err_set(err, V4_ERR_INVALID, "cuda engine",
                              "the sequence page size changes only while no sequence holds device state");
    (void)use_device(e);
    v4_page_pool_free(e->pool_c);
    v4_page_pool_free(e->pool_i);
    e->pool_c = e->pool_i = NULL;
    e->pg_shift = page_shift(entries);
    return 0;
}

extern "C" void v4_cuda_engine_seq_stats(const v4_cuda_engine *e, v4_cuda_seq_stats *st)
{
    *st = (v4_cuda_seq_stats){
        .held_bytes = seq_held(e),
        .budget_bytes = e->seq_budget == SIZE_MAX ? 0 : e->seq_budget,
        .pool_bytes = v4_page_pool_bytes(e->pool_c) + v4_page_pool_bytes(e->pool_i),
        .pool_free_bytes = v4_page_pool_free_bytes(e->pool_c) + v4_page_pool_free_bytes(e->pool_i),
        .page_entries = 1 << e->pg_shift,
        .live = 0,
        .stalls = e->seq_stalls};
    for (int i = 0; i < e->max_seqs; i++)
        st->live += e->seqs[i].key != NULL;
}

/* Prefill chunks (several rows of a sequence in a step): with every expert resident,
 * always; with paged experts when the slots hold the union of a layer's experts over a
 * full step (min(E, max_batch x K): every step of max_batch rows fits, whichever rows
 * they are), else one row per sequence (a step of max_batch sequences is then already
 * the most the slots can serve). */
static int rows_per_seq(const v4_cuda_engine *e)
{
    const v4_config *c = &e->w->cfg;
    const long fullstep = (long)e->max_batch * c->n_act_experts;
    const long need = fullstep < c->n_routed_experts ? fullstep : c->n_routed_experts;
    return !e->paged || e->nslots >= need ? e->max_batch : 1;
}

extern "C" v4_step_impl v4_cuda_engine_impl(v4_cuda_engine *e)
{
    v4_step_impl s = {
        .step = engine_step, .ud = e, .rows_per_seq = rows_per_seq(e), .admit = engine_admit,
        .release = engine_release};
    return s;
}
