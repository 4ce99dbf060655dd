/* weights.c - release what a v4_weights owns, byte accounting, and the R8 preparation
 * of the EXACT-mode matrices (see weights.h).
 *
 * Preparation design: every matrix to repack gets one owned buffer (64-byte aligned;
 * large ones 2 MiB aligned with a transparent-huge-page hint, since the decode path
 * streams them and fewer TLB misses help), then the packing is cut into pieces of
 * about 1 MiB of whole 8-row groups and run on a private thread pool (one thread per
 * online core; kernels/cpu/threadpool.h).  Only when every piece is done do the
 * v4_mat views switch to the copies (w, layout), so a failure leaves the weights in
 * their previous, consistent state.  The packing is a pure copy (element (r, j) moves
 * to v4_mat_index in the R8 layout; FP8 bytes and their scale grid unchanged), so the
 * numerics cannot change; the kernels' bit-identity with the scalar reference for
 * both layouts is what tests/test_linear.c checks.
 * No global state; thread: one caller at a time per v4_weights.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../cpu/threadpool.h"
#include "weights.h"

void v4_weights_free(v4_weights *w)
{
    if (!w)
        return;
    for (int i = 0; i < w->n_owned; i++)
        free(w->owned[i]);
    free(w->owned);
    if (w->layers)
        for (int l = 0; l < w->cfg.n_layers; l++)
            free(w->layers[l].experts);
    free(w->layers);
    w->owned = NULL;
    w->layers = NULL;
    w->n_owned = w->cap_owned = 0;
}

uint64_t v4_mat_bytes(const v4_mat *m)
{
    uint64_t rows = (uint64_t)m->rows;
    if (m->layout == V4_LAYOUT_R8)
        rows = (rows + 7) / 8 * 8;
    uint64_t n = rows * (uint64_t)m->cols;
    switch (m->type) {
    case V4_W_FP8:
        return n + (uint64_t)((m->rows + 127) / 128) * (uint64_t)((m->cols + 127) / 128);
    case V4_W_FP4:
        return n / 2 + n / 32;
    case V4_W_BF16:
        return 2 * n;
    case V4_W_F32:
        return 4 * n;
    }
    return 0;
}

uint64_t v4_expert_bytes(const v4_expert_w *e)
{
    return v4_mat_bytes(&e->w1) + v4_mat_bytes(&e->w3) + v4_mat_bytes(&e->w2);
}

static uint64_t mat_elems(const v4_mat *m) { return (uint64_t)m->rows * (uint64_t)m->cols; }

/* The trunk's matrices of one step (all but the routed experts), summed by f. */
static uint64_t trunk_sum(const v4_weights *w, uint64_t (*f)(const v4_mat *))
{
    const v4_config *cfg = &w->cfg;
    uint64_t b = f(&w->head) + f(&w->hc_head_fn);
    for (int l = 0; l < cfg->n_layers; l++) {
        const v4_layer_w *lw = &w->layers[l];
        const v4_mat *mats[] = {&lw->hc_attn_fn, &lw->hc_ffn_fn, &lw->wq_a, &lw->wq_b, &lw->wkv,
                                &lw->wo_a, &lw->wo_b, &lw->gate, &lw->shared.w1, &lw->shared.w3, &lw->shared.w2};
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++)
            b += f(mats[i]);
        if (lw->ratio)
            b += f(&lw->comp.wkv) + f(&lw->comp.wgate);
        if (lw->ratio == 4)
            b += f(&lw->idx_wq_b) + f(&lw->idx_weights_proj) + f(&lw->idx_comp.wkv) + f(&lw->idx_comp.wgate);
    }
    return b;
}

uint64_t v4_step_trunk_bytes(const v4_weights *w)
{
    return 2ull * (uint64_t)w->cfg.dim + trunk_sum(w, v4_mat_bytes);   /* + one embedding row */
}

uint64_t v4_step_trunk_macs(const v4_weights *w) { return trunk_sum(w, mat_elems); }

uint64_t v4_expert_macs(const v4_expert_w *e) { return mat_elems(&e->w1) + mat_elems(&e->w3) + mat_elems(&e->w2); }

/* ------------------------------------------------------------- R8 packing -- */

static size_t elem_size(v4_wtype t)
{
    return t == V4_W_F32 ? 4 : t == V4_W_BF16 ? 2 : 1;
}

size_t v4_mat_r8_bytes(const v4_mat *src)
{
    return (size_t)(src->rows + 7) / 8 * 8 * (size_t)src->cols * elem_size(src->type);
}

#define PACK_JB 64      /* columns per block: a group's block (<= 2 KiB) stays in L1 */

#define PACK_GROUPS(T)                                                                  \
    do {                                                                                \
        const T *s = src->w;                                                            \
        T *d = dst;                                                                     \
        for (int g = g0; g < g1; g++) {                                                 \
            T *dg = d + (size_t)g * K * 8;                                              \
            for (int jb = 0; jb < K; jb += PACK_JB) {                                   \
                const int je = jb + PACK_JB < K ? jb + PACK_JB : K;                     \
                for (int i = 0; i < 8; i++) {                                           \
                    const int r = 8 * g + i;                                            \
                    if (r < rows) {                                                     \
                        const T *sr = s + (size_t)r * K;                                \
                        for (int j = jb; j < je; j++)                                   \
                            dg[(size_t)j * 8 + i] = sr[j];                              \
                    } else {                                                            \
                        for (int j = jb; j < je; j++)                                   \
                            dg[(size_t)j * 8 + i] = 0;                                  \
                    }                                                                   \
                }                                                                       \
            }                                                                           \
        }                                                                               \
    } while (0)

void v4_mat_pack_r8(const v4_mat *src, void *dst, int g0, int g1)
{
    const int K = src->cols, rows = src->rows;
    switch (elem_size(src->type)) {
    case 4: PACK_GROUPS(uint32_t); break;
    case 2: PACK_GROUPS(uint16_t); break;
    default: PACK_GROUPS(uint8_t); break;
    }
}

/* ------------------------------------------------------------ preparation -- */

typedef struct prep_mat {
    v4_mat *m;
    void *dst;
} prep_mat;

typedef struct prep_piece {
    int mat, g0, g1;
} prep_piece;

typedef struct prep_job {
    const prep_mat *mats;
    const prep_piece *pieces;
} prep_job;

static void prep_task(void *ctx, int task, int thread)
{
    (void)thread;
    const prep_job *j = ctx;
    const prep_piece *p = &j->pieces[task];
    const prep_mat *pm = &j->mats[p->mat];
    v4_mat_pack_r8(pm->m, pm->dst, p->g0, p->g1);
}

/* An owned buffer of `bytes` (registered in w->owned); NULL if out of memory. */
static void *own_buffer(v4_weights *w, size_t bytes)
{
    if (w->n_owned == w->cap_owned) {
        int cap = w->cap_owned ? 2 * w->cap_owned : 64;
        void **p = realloc(w->owned, sizeof(void *) * (size_t)cap);
        if (!p)
            return NULL;
        w->owned = p;
        w->cap_owned = cap;
    }
    const size_t huge = (size_t)2 << 20;
    const size_t align = bytes >= huge ? huge : 64;
    void *m = aligned_alloc(align, (bytes + align - 1) / align * align);
    if (!m)
        return NULL;
#ifdef MADV_HUGEPAGE
    if (align == huge)
        (void)madvise(m, (bytes + align - 1) / align * align, MADV_HUGEPAGE);   /* a hint only */
#endif
    w->owned[w->n_owned++] = m;
    return m;
}

/* The matrices the decode path multiplies with V4_LIN_EXACT (keep in sync with
 * kernels/v4: forward.c head, mhc.c fn, attention.c compressors/indexer/wo_a,
 * moe.c gate).  Returns their count; out may be NULL. */
static int exact_mats(v4_weights *w, v4_mat **out)
{
    int n = 0;
#define ADD(mp) do { if (out) out[n] = (mp); n++; } while (0)
    ADD(&w->head);
    ADD(&w->hc_head_fn);
    for (int l = 0; l < w->cfg.n_layers; l++) {
        v4_layer_w *lw = &w->layers[l];
        ADD(&lw->hc_attn_fn);
        ADD(&lw->hc_ffn_fn);
        ADD(&lw->gate);
        if (w->cfg.o_lora_rank % 8 == 0)
            ADD(&lw->wo_a);
        if (lw->ratio) {
            ADD(&lw->comp.wkv);
            ADD(&lw->comp.wgate);
        }
        if (lw->ratio == 4) {
            ADD(&lw->idx_weights_proj);
            ADD(&lw->idx_comp.wkv);
            ADD(&lw->idx_comp.wgate);
        }
    }
#undef ADD
    return n;
}

int v4_weights_prepare(v4_weights *w, v4_error *err)
{
    if (!w->layers)
        return v4_err_set(err, V4_ERR_INVALID, "v4_weights_prepare", "weights are not bound");
    int nm = exact_mats(w, NULL);
    v4_mat **all = calloc((size_t)nm, sizeof *all);
    prep_mat *mats = calloc((size_t)nm, sizeof *mats);
    prep_piece *pieces = NULL;
    v4_pool *pool = NULL;
    int rc = -1, np = 0, cap = 0, k = 0;
    if (!all || !mats)
        goto oom;
    exact_mats(w, all);
    for (int i = 0; i < nm; i++) {
        v4_mat *m = all[i];
        if (m->layout != V4_LAYOUT_ROWMAJOR || !m->w || m->rows <= 0 || m->cols <= 0 ||
            (m->type != V4_W_BF16 && m->type != V4_W_F32 && m->type != V4_W_FP8))
            continue;
        size_t bytes = v4_mat_r8_bytes(m);
        void *dst = own_buffer(w, bytes);
        if (!dst)
            goto oom;
        mats[k] = (prep_mat){m, dst};
        const int ng = (m->rows + 7) / 8;
        const size_t gbytes = bytes / (size_t)ng;
        int per = (int)(((size_t)1 << 20) / gbytes);
        if (per < 1)
            per = 1;
        for (int g = 0; g < ng; g += per) {
            if (np == cap) {
                cap = cap ? 2 * cap : 256;
                prep_piece *p = realloc(pieces, sizeof *p * (size_t)cap);
                if (!p)
                    goto oom;
                pieces = p;
            }
            pieces[np++] = (prep_piece){k, g, g + per < ng ? g + per : ng};
        }
        k++;
    }
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    pool = v4_pool_create(nc > 0 ? (int)nc : 1);
    if (!pool)
        goto oom;
    prep_job job = {mats, pieces};
    v4_pool_run(pool, np, prep_task, &job);
    for (int i = 0; i < k; i++) {
        mats[i].m->w = mats[i].dst;
        mats[i].m->layout = V4_LAYOUT_R8;
    }
    rc = 0;
    goto done;
oom:
    v4_err_set(err, V4_ERR_NOMEM, "v4_weights_prepare", "out of memory for the R8 weight copies (V4_NO_PREPARE=1 runs on the mapped weights)");
done:
    v4_pool_destroy(pool);
    free(pieces);
    free(mats);
    free(all);
    return rc;
}
