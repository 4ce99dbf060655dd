/* expert_provider.h - routed experts for the decode path through the host expert cache:
 * the glue between kernels/v4's v4_expert_provider (acquire/release/prefetch of a
 * layer's experts as matrices) and cache/expert_cache.h (byte-budgeted slots filled
 * from an expert source: the expert pack, or the original safetensors checkpoint).
 *
 * acquire pins the blocks in the cache and binds matrices into them
 * (expert_block.h); release unpins; prefetch starts loads of the hash-routed layers'
 * experts at the start of a step.  With any budget the decode path's outputs are those
 * of the all-resident run (the same bytes, the same kernels).
 *
 * The source: for a model with synthetic experts (DIR/synthetic_experts.json, written
 * by `mkmodel --no-experts`, expert_synth.h) the "synthetic" source, which generates
 * each block (throttled to V4_SYNTH_EXPERT_MBPS MB/s per I/O thread when that is set);
 * a pack_dir with such a model is an error (nothing to check the pack against).
 * Otherwise the pack when pack_dir is given, else the checkpoint ("safetensors").
 *
 * Outcomes: every acquire records, per (layer, expert) it acquired, what the cache did
 * (V4_XOUT_HIT / _MISS / _PREFETCHED, expert_cache.h) in a map [n_layers][n_routed]
 * that v4_xprov_outcomes_reset clears; a batching caller clears it before a step and
 * reads it after (a step acquires each expert of a layer once, for all its rows) to
 * charge each load to the row that needed it.
 *
 * Ownership: v4_xprov owns its cache, source and outcome map (v4_xprov_close).  It
 * borrows cfg and ck (the open checkpoint), which must outlive it.  Thread: the
 * provider callbacks and v4_xprov_stats may be called from any thread (the cache is
 * thread-safe); the outcome map from the thread that runs the steps, between steps;
 * open/close from one thread with no step in progress.
 */
#ifndef V4_EXPERT_PROVIDER_H
#define V4_EXPERT_PROVIDER_H

#include <stddef.h>

#include "../config/model_config.h"
#include "../kernels/v4/model.h"
#include "safetensors.h"
#include "expert_cache.h"

typedef struct v4_xprov_opts {
    const char *model_dir;      /* the checkpoint (source "safetensors", the pack's model check, the
                                   synthetic-experts marker) */
    const char *pack_dir;       /* NULL or "": page experts from the safetensors */
    size_t budget_bytes;        /* host cache bytes (>= one step's experts) */
    const char *policy;         /* "lru" | "slru" | "lfru" | "next" (NULL = "next") */
    int io_threads;             /* 0 = default */
    int io_mode;                /* V4_PACK_IO_* (expert_pack.h); 0 = O_DIRECT with fallback */
} v4_xprov_opts;

typedef struct v4_xprov v4_xprov;

v4_xprov *v4_xprov_open(const v4_config *cfg, const v4_ckpt *ck, const v4_xprov_opts *o, v4_error *err);
/* The callbacks to give v4_ctx_set_expert_provider (valid until v4_xprov_close). */
const v4_expert_provider *v4_xprov_provider(const v4_xprov *p);
void v4_xprov_stats(v4_xprov *p, v4_xcache_stats *st);
/* The outcome map (see above): [layer * n_routed_experts + expert], 0 = not acquired
 * since the last reset.  The caller may overwrite entries (e.g. mark them charged). */
unsigned char *v4_xprov_outcomes(v4_xprov *p);
void v4_xprov_outcomes_reset(v4_xprov *p);
/* "pack", "safetensors" or "synthetic" */
const char *v4_xprov_source_kind(const v4_xprov *p);
void v4_xprov_close(v4_xprov *p);

#endif
