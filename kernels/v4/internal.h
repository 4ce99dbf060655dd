/* internal.h - state and scratch shared by the files of the decode path
 * (the .c files of kernels/v4).  Not a public header. */
#ifndef V4_INTERNAL_H
#define V4_INTERNAL_H

#include "../codec.h"
#include "model.h"

/* Compressor running state: kv and gate scores of the last c*r tokens, [c*r][c*d]. */
typedef struct v4_comp_state {
    float *kv, *sc;
    int rows, width;
} v4_comp_state;

/* The caches hold bf16 values (the reference's KV cache dtype, spec §5.3 / §5.4 /
 * §5.5): uint16_t bits, converted to float on load (exact). */
typedef struct v4_layer_state {
    uint16_t *win;           /* [window][head_dim] ring buffer, slot = pos % window */
    uint16_t *comp;          /* [cap][head_dim] compressed entries */
    int n_comp;
    v4_comp_state cs;
    uint16_t *idx_keys;      /* [cap][index_head_dim] (CSA) */
    int n_idx;
    v4_comp_state ics;
    int cap;                 /* capacity of comp / idx_keys in entries */
} v4_layer_state;

struct v4_seq {
    const v4_weights *w;
    int pos;
    int broken;              /* a step failed half-way (expert provider error) */
    int max_len;
    long inexact;            /* cache values stored that were not bf16 (v4_seq_store_bf16) */
    size_t bytes;            /* what v4_seq_create allocated (v4_seq_bytes) */
    v4_layer_state *L;
};

/* Store n cache values as bf16 bits; the values are bf16 already (every path rounds
 * them, spec §5), and any that is not (its bits differ from v4_bf16's) is counted in
 * s->inexact and stored rounded (v4_seq_inexact reports the count: tests check 0).
 * Inline: indexer.c is also linked without seq.c (tests/cuda). */
static inline void v4_seq_store_bf16(v4_seq *s, uint16_t *dst, const float *src, int n)
{
    long bad = 0;
    for (int i = 0; i < n; i++) {
        const uint16_t b = v4_bf16_bits(src[i]);
        bad += v4_f32_bits(v4_bf16_from_bits(b)) != v4_f32_bits(src[i]);
        dst[i] = b;
    }
    s->inexact += bad;
}

/* Scratch for one step of up to max_batch sequences.  Sizes in floats. */
typedef struct v4_scratch {
    float *X;        /* [B][hc][dim] residual streams */
    float *mixes;    /* [B][mix] */
    float *pre, *post, *comb;   /* [B][hc], [B][hc], [B][hc][hc] */
    float *x;        /* [B][dim] sub-layer input after the norm */
    float *out;      /* [B][dim] sub-layer output */
    float *qa;       /* [B][q_lora] */
    float *q;        /* [B][H*hd] */
    float *kv;       /* [B][hd] */
    float *o;        /* [B][H*hd] attention output */
    float *z;        /* [B][groups*o_lora] */
    float *ckv, *csc;   /* [B][2*hd] compressor projections */
    float *iq;       /* [B][ih*id] indexer queries */
    float *iw;       /* [B][ih] indexer head weights */
    float *ikv, *isc;   /* [B][2*id] indexer compressor projections */
    float *score;    /* [cap_entries] indexer scores of one sequence */
    int *sel;        /* [max(topk, n_act)] */
    int *csel;       /* [B][index_topk] indexer selections */
    int *ncsel;      /* [B] */
    const uint16_t **cand;  /* [window + cap_entries] attention candidate keys (bf16 rows) */
    float *gate;     /* [B][n_routed] */
    float *gate_next;   /* [B][n_routed] the look-ahead: the next layer's router on this layer's input */
    int *la_ids;     /* [n_routed] the look-ahead's distinct experts (la_mark: [n_routed] flags) */
    int *la_mark;
    int *route;      /* [B][n_act] */
    float *route_w;  /* [B][n_act] */
    float *ex_x, *ex_g, *ex_u, *ex_h, *ex_o;   /* [B][...] expert batch buffers */
    int *rowpos;     /* [B] each row's position (a sequence's rows count up from its pos) */
    int *rowsel;     /* [B] the rows whose logits a step computes */
    /* hid [B][dim]: those rows' head inputs, packed */
    int *ex_rows;    /* [B*n_act] batch row of each gathered expert row */
    float *ex_wt;    /* [B*n_act] its routing weight */
    int *ex_start, *ex_cnt;   /* [n_routed] expert e's gathered rows: [start, start+cnt) */
    float *sh_g, *sh_u, *sh_h, *sh_o;   /* [B][moe_inter] x3, [B][dim]: the shared expert */
    v4_lin_job *jobs;   /* [2*(n_routed+1)] one MoE phase's products */
    float *y;        /* [B][dim] MoE f32 accumulator */
    int *ex_ids;     /* [n_routed] distinct experts of a layer's batch (provider) */
    int *ex_slot;    /* [n_routed] expert id -> index in ex_ids, -1 if unused */
    v4_expert_w *ex_w;   /* [n_routed] the provider's experts */
    int n_ex;        /* entries of ex_ids acquired for the current layer */
    float *hid;      /* [B][dim] the head inputs of the rows in rowsel, packed */
    int cap_entries; /* sized for the longest sequence seen */
} v4_scratch;

struct v4_ctx {
    const v4_weights *w;
    v4_backend *be;
    int max_batch;
    v4_expert_provider xp;   /* xp.acquire == NULL: the weights' experts */
    int lookahead;           /* prefetch the next score layer's predicted experts (moe.c; default 1) */
    uint64_t la_prefetched;  /* experts the look-ahead asked the provider for (v4_ctx_lookahead_prefetched) */
    v4_scratch s;
    float freqs_swa[64], freqs_comp[64];   /* RoPE tables (rope_dim/2 <= 64) */
    v4_step_impl impl;       /* impl.step == NULL: the CPU path */
    v4_seq_view *views;      /* [max_batch] for impl.step */
    v4_step_fault fault;     /* the last step's fault of one new sequence (row -1: none) */
    /* The attention / indexer loops (attn_kern.h) for the CPU backend's ISA, chosen at
     * v4_ctx_create; NULL = the reference loops (ISA "scalar"). */
    const struct v4_attn_kern *attn;
};

/* mhc.c */
void v4_hc_pre(v4_ctx *c, const v4_mat *fn, const float *scale, const float *base, int n);
void v4_hc_post(v4_ctx *c, int n);
void v4_hc_head(v4_ctx *c, int n);

/* attention.c / compressor.c / indexer.c / moe.c */
int v4_attention(v4_ctx *c, int layer, v4_seq *const *seqs, int n, v4_trace *const *tr);
int v4_compressor_step(const v4_compressor_w *cw, v4_comp_state *st, int pos,
                       const float *kvp, const float *sc, const float *freqs,
                       int rope_dim, float eps, int rotate, float *out);
void v4_indexer(v4_ctx *c, int layer, v4_seq *s, int b, v4_trace *tr);
int v4_moe(v4_ctx *c, int layer, const int32_t *tokens, int n, v4_trace *const *tr, v4_error *err);

int v4_ctx_reserve(v4_ctx *c, int entries, v4_error *err);

#endif
