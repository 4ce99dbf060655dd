/* stats_util.h - the expert-utilization matrix of `v4fleet stats` and its per-layer
 * load-balance figures; knows nothing of Redis (the hashes arrive as field/value
 * string pairs) or of output formats.
 *
 * Data: one hash (the total or one time bucket) holds "<layer>:<expert>" -> routed
 * token count, "_tasks", "_tokens" and "_shape" = "L,E,K".  Several hashes (buckets)
 * add up; they must all have the same shape.  Missing expert fields count 0.  Other
 * fields starting with '_' are ignored (room for later writer fields); any other
 * field, a count that is not a non-negative decimal integer, or an expert outside
 * the shape is an error naming the key and field.
 *
 * Figures per layer (over ALL E experts, zeros included): assignments = sum of
 * counts = K x routed tokens; mean = assignments / E; std = population standard
 * deviation; cv = std / mean (the load-balance figure: 0 = perfectly even); max /
 * mean; idle = experts with count 0; top experts by count (ties: lower id first),
 * share = count / assignments.
 *
 * Ownership: v4_umat owns counts (v4_umat_free); zero-initialize before the first add.
 * Thread: one thread per v4_umat.
 */
#ifndef V4_STATS_UTIL_H
#define V4_STATS_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "../config/error.h"

#define V4_UTIL_MAX_LAYERS 4096
#define V4_UTIL_MAX_EXPERTS 65536

typedef struct v4_umat {
    int layers, experts, top_k;   /* 0 until the first hash with a _shape was added */
    uint64_t *counts;             /* layers * experts, counts[l*experts + e] */
    uint64_t tasks, tokens;
    uint64_t hits, misses, kib_loaded, prefetched;   /* experts figures (_hits, _misses, _kib_loaded, _prefetched) */
    int n_hashes;                 /* hashes added */
} v4_umat;

typedef struct v4_umat_layer {
    uint64_t assignments;         /* sum of the layer's counts */
    double routed_tokens;         /* assignments / K */
    double mean, std;
    double cv, max_over_mean;     /* NaN when mean == 0 (no data at this layer) */
    uint64_t max_count;
    int idle;                     /* experts with count 0 */
    int n_top;                    /* entries written to top_ids (only count > 0) */
} v4_umat_layer;

/* Add one hash: n field/value pairs of NUL-terminated strings.  key names the hash
 * in error messages. */
int v4_umat_add_hash(v4_umat *u, const char *key, const char *const *fields,
                     const char *const *values, size_t n, v4_error *err);

/* Figures of one layer; top_ids (capacity top_n, may be NULL when top_n == 0)
 * receives the top_n busiest experts with a non-zero count. */
void v4_umat_layer_stats(const v4_umat *u, int layer, int top_n, int *top_ids,
                         v4_umat_layer *out);

void v4_umat_free(v4_umat *u);

#endif
