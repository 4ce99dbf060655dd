/* warmup.h - get a freshly opened runner ready before the worker reports ready and
 * consumes: pre-load the fleet's hottest routed experts into the host expert cache,
 * then run one short generation.
 *
 * Experts (only when they are paged through the host cache): the fleet's all-time
 * utilization hash in Redis (<prefix>:util:<model>:total, telemetry/util_redis.h) ranks
 * every (layer, expert) by routed tokens; the busiest are loaded, coldest first (so the
 * hottest are the most recently used), up to the cache's slots less one token's worth
 * of headroom (n_layers x experts per token).  No Redis, no statistics for the model,
 * or a shape that does not match the model: nothing is pre-loaded (the note says why)
 * and experts load on demand; none of these is an error.
 * Generation: a few greedy tokens from the BOS token (touches the mapped trunk and the
 * forward context's buffers, proves the model runs).  Its failure is the one error:
 * a worker whose model cannot generate must not report ready.
 *
 * Ownership: borrows the runner.  Thread: the runner's thread, no task running.
 */
#ifndef V4_WARMUP_H
#define V4_WARMUP_H

#include "worker/serve/task_run.h"

typedef struct v4_warmup_opts {
    const char *redis_url;          /* NULL or "off": no expert statistics */
    const char *prefix;             /* Redis key prefix (V4_REDIS_PREFIX) */
    const char *model;              /* the served model name (the statistics' key) */
    int gen_tokens;                 /* tokens of the warm-up generation (0: none) */
} v4_warmup_opts;

typedef struct v4_warmup_report {
    int experts_ranked;             /* (layer, expert) pairs with routed tokens in Redis */
    int experts_loaded;             /* pre-loaded into the host cache */
    unsigned long long bytes_loaded;
    int gen_tokens;                 /* tokens the warm-up generation produced */
    double experts_ms, gen_ms;
    char note[512];                 /* why no expert was pre-loaded ("" when some were) */
    char hottest[128];              /* "layer:expert,..." of the first few pre-loaded, hottest first */
} v4_warmup_report;

/* 0 ready (rep filled), -1 the warm-up generation failed (e filled). */
int v4_warmup(v4_runner *r, const v4_warmup_opts *o, v4_warmup_report *rep, v4_task_error *e);

#endif
