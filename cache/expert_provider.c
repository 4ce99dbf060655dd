/* expert_provider.c - the decode path's routed experts through the host expert cache
 * (see expert_provider.h).  Thread: callbacks from any thread. */
#include "expert_provider.h"

#include <stdlib.h>
#include <string.h>

#include "expert_block.h"
#include "expert_pack.h"
#include "expert_synth.h"

struct v4_xprov {
    v4_config cfg;
    v4_xblock_layout lo;
    v4_xsource *src;
    v4_xcache *cache;
    v4_expert_provider cb;
    unsigned char *outcomes;    /* [n_layers * n_routed_experts] */
};

static int xp_acquire(void *ud, int layer, const int *ids, int n, v4_expert_w *out, v4_error *err)
{
    v4_xprov *p = ud;
    const void *blocks[1024];   /* n <= n_routed_experts <= 1024 (model_config validates it) */
    unsigned char oc[1024];
    if (n > (int)(sizeof blocks / sizeof blocks[0]))
        return v4_err_set(err, V4_ERR_RANGE, "expert cache", "%d experts in one layer (max 1024)", n);
    if (v4_xcache_acquire_ex(p->cache, layer, ids, n, blocks, oc, err))
        return -1;
    for (int i = 0; i < n; i++) {
        v4_xblock_bind(&p->cfg, &p->lo, blocks[i], &out[i]);
        p->outcomes[(size_t)layer * (size_t)p->cfg.n_routed_experts + (size_t)ids[i]] = oc[i];
    }
    return 0;
}

static void xp_release(void *ud, int layer, const int *ids, int n)
{
    v4_xprov *p = ud;
    v4_xcache_release(p->cache, layer, ids, n);
}

static void xp_prefetch(void *ud, int layer, const int *ids, int n)
{
    v4_xprov *p = ud;
    v4_xcache_prefetch(p->cache, layer, ids, n);
}

/* The source (see expert_provider.h): synthetic for a model with the marker, else the
 * pack when one is given, else the checkpoint's safetensors. */
static v4_xsource *open_source(const v4_config *cfg, const v4_ckpt *ck, const v4_xprov_opts *o, v4_error *err)
{
    const int pack = o->pack_dir && *o->pack_dir;
    uint64_t seed = 0;
    const int synth = o->model_dir ? v4_synth_marker_load(o->model_dir, &seed, err) : 0;
    if (synth < 0)
        return NULL;
    if (synth && pack) {
        v4_err_set(err, V4_ERR_CONFIG, o->pack_dir,
                   "the routed experts of %s are synthetic (" V4_SYNTH_MARKER "): they are generated, not read from a "
                   "pack, and a pack cannot be checked against a model without expert tensors; drop --pack",
                   o->model_dir);
        return NULL;
    }
    if (synth) {
        const double rate = v4_synth_rate_from_env(err);
        return rate < 0 ? NULL : v4_synth_source_open(cfg, seed, rate, err);
    }
    if (pack)
        return v4_pack_source_open_model(o->pack_dir, cfg, ck, o->io_mode, err);
    return v4_st_source_open(o->model_dir, err);
}

v4_xprov *v4_xprov_open(const v4_config *cfg, const v4_ckpt *ck, const v4_xprov_opts *o, v4_error *err)
{
    v4_xprov *p = calloc(1, sizeof *p);
    if (!p) {
        v4_err_set(err, V4_ERR_NOMEM, "expert cache", "out of memory");
        return NULL;
    }
    p->cfg = *cfg;
    v4_xblock_layout_of(cfg, &p->lo);
    v4_xcache_opts co = {.budget_bytes = o->budget_bytes, .io_threads = o->io_threads};
    co.policy_params.slru_protected = -1;
    if (v4_xpolicy_parse(o->policy ? o->policy : "next", &co.policy)) {
        v4_err_set(err, V4_ERR_CONFIG, "cache policy", "'%s' is not lru, slru, lfru or next", o->policy);
        goto fail;
    }
    if (!(p->src = open_source(cfg, ck, o, err)))
        goto fail;
    if (!(p->cache = v4_xcache_create(p->src, &co, err)))
        goto fail;
    if (!(p->outcomes = calloc((size_t)cfg->n_layers * (size_t)cfg->n_routed_experts, 1))) {
        v4_err_set(err, V4_ERR_NOMEM, "expert cache", "out of memory");
        goto fail;
    }
    p->cb = (v4_expert_provider){xp_acquire, xp_release, xp_prefetch, p};
    return p;
fail:
    v4_xprov_close(p);
    return NULL;
}

const v4_expert_provider *v4_xprov_provider(const v4_xprov *p)
{
    return &p->cb;
}

void v4_xprov_stats(v4_xprov *p, v4_xcache_stats *st)
{
    v4_xcache_stats_get(p->cache, st);
}

unsigned char *v4_xprov_outcomes(v4_xprov *p)
{
    return p->outcomes;
}

void v4_xprov_outcomes_reset(v4_xprov *p)
{
    memset(p->outcomes, 0, (size_t)p->cfg.n_layers * (size_t)p->cfg.n_routed_experts);
}

const char *v4_xprov_source_kind(const v4_xprov *p)
{
    return p->src->kind;
}

void v4_xprov_close(v4_xprov *p)
{
    if (!p)
        return;
    v4_xcache_destroy(p->cache);
    v4_xsource_close(p->src);
    free(p->outcomes);
    free(p);
}
