/* expert_source_st.c - expert source "safetensors": pages routed experts straight from
 * the original checkpoint, no pack (expert_pack.h declares v4_st_source_open).
 *
 * Design: the source opens the model directory with v4_model_open_ex(NO_PREPARE)
 * (config + mmap'ed shards + bound weights; nothing is copied or prepared) and read()
 * copies the six tensors of (layer, expert) from the mapping into the caller's block
 * with v4_xblock_fill.  The kernel pages the bytes in on first touch (no checksum:
 * safetensors has none; a disk error surfaces as SIGBUS, as on the all-resident
 * path).  After the copy the source's pages are dropped from the mapping
 * (MADV_DONTNEED: the page cache keeps them as long as the kernel likes, but the
 * process RSS does not grow with the experts read), so the host-tier byte budget is
 * what bounds memory.  Counters are atomics.
 *
 * Ownership: the source owns its v4_model_files; v4_xsource_close releases them.
 * Thread: read() from any number of threads (the mapping is read-only); close once.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "expert_block.h"
#include "expert_pack.h"
#include "expert_pack_util.h"
#include "model_files.h"

typedef struct st_src {
    v4_xsource base;
    v4_model_files m;
    v4_xblock_layout lo;
    atomic_uint_fast64_t reads, bytes, read_ns, errors;
} st_src;

static void drop_range(const void *p, size_t len)
{
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)p & ~(pg - 1), b = ((uintptr_t)p + len + pg - 1) & ~(pg - 1);
    if (p && len)
        (void)madvise((void *)a, b - a, MADV_DONTNEED);
}

static int st_read(v4_xsource *xs, int l, int e, void *dst, v4_error *err)
{
    st_src *s = (st_src *)xs;
    if (l < 0 || l >= xs->n_layers || e < 0 || e >= xs->n_experts) {
        atomic_fetch_add(&s->errors, 1);
        return v4_err_set(err, V4_ERR_RANGE, v4_ckpt_dir(s->m.ck), "layer %d expert %d: outside the model (%d layers x %d experts)",
                          l, e, xs->n_layers, xs->n_experts);
    }
    if (!dst || (uintptr_t)dst % V4_XBLOCK_ALIGN) {
        atomic_fetch_add(&s->errors, 1);
        return v4_err_set(err, V4_ERR_INVALID, v4_ckpt_dir(s->m.ck), "layer %d expert %d: destination buffer not %d-byte aligned",
                          l, e, V4_XBLOCK_ALIGN);
    }
    const uint64_t t0 = v4_xp_now_ns();
    const v4_expert_w *x = &s->m.w.layers[l].experts[e];
    v4_xblock_fill(&s->m.cfg, &s->lo, x, dst);
    const v4_mat *mm[3] = {&x->w1, &x->w3, &x->w2};
    for (int i = 0; i < 3; i++) {
        drop_range(mm[i]->w, s->lo.len[2 * i]);
        drop_range(mm[i]->scale, s->lo.len[2 * i + 1]);
    }
    atomic_fetch_add(&s->reads, 1);
    atomic_fetch_add(&s->bytes, s->lo.bytes);
    atomic_fetch_add(&s->read_ns, v4_xp_now_ns() - t0);
    return 0;
}

static void st_close(v4_xsource *xs)
{
    st_src *s = (st_src *)xs;
    if (!s)
        return;
    v4_model_close(&s->m);
    free(s);
}

static const v4_xsource_ops st_ops = {st_read, st_close};

v4_xsource *v4_st_source_open(const char *model_dir, v4_error *err)
{
    st_src *s = calloc(1, sizeof *s);
    if (!s) {
        v4_err_set(err, V4_ERR_NOMEM, model_dir, "out of memory");
        return NULL;
    }
    if (v4_model_open_ex(model_dir, &s->m, V4_OPEN_NO_PREPARE, err)) {
        free(s);
        return NULL;
    }
    v4_xblock_layout_of(&s->m.cfg, &s->lo);
    s->base.ops = &st_ops;
    s->base.block_bytes = s->lo.bytes;
    s->base.n_layers = s->m.cfg.n_layers;
    s->base.n_experts = s->m.cfg.n_routed_experts;
    s->base.kind = "safetensors";
    return &s->base;
}

/* Used by v4_xsource_get_counters (expert_pack.c) for sources that are not packs. */
void v4_st_source_counters(const v4_xsource *xs, v4_xsource_counters *out);
void v4_st_source_counters(const v4_xsource *xs, v4_xsource_counters *out)
{
    memset(out, 0, sizeof *out);
    if (!xs || xs->ops != &st_ops)
        return;
    st_src *s = (st_src *)xs;
    out->reads = atomic_load(&s->reads);
    out->bytes = atomic_load(&s->bytes);
    out->read_ns = atomic_load(&s->read_ns);
    out->buffered_reads = out->reads;
    out->errors = atomic_load(&s->errors);
}
