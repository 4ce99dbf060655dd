/* cachesim_lib.h - the pieces of `v4fleet cachesim`: a routing trace in memory, its
 * replay through an xpolicy (kernels/xpolicy.h) and Belady's offline MIN.
 *
 * A trace is a sequence of steps (one token each); a step is a list of accesses,
 * key = layer * n_experts + expert.  Replay rule (policies and MIN alike): the keys
 * of one step are pinned together for the whole step - at its start the step's
 * resident keys are pinned (no touch), each miss is pinned when inserted - so a
 * step's working set cannot evict itself, not even a key the step reaches later;
 * they are unpinned in access order when the step ends (LRU/SLRU: the step's last
 * key is the most recent).  A miss inserts the key
 * (no bypass).  MIN evicts the resident key, not in the current step, whose next use
 * is farthest in the future (never used again first).
 *
 * Ownership: v4_simtrace_load fills a v4_simtrace whose arrays are malloc'd; the caller
 * frees them with v4_simtrace_free.
 * Thread: any, on distinct traces.
 */
#ifndef V4_CACHESIM_LIB_H
#define V4_CACHESIM_LIB_H

#include <stdint.h>

#include "kernels/xpolicy.h"
#include "config/error.h"

typedef struct v4_simtrace {
    int32_t *keys;          /* [n_access] */
    int *step_off;          /* [n_steps + 1] accesses of step s: [step_off[s], step_off[s+1]) */
    int *step_line;         /* [n_steps] first line of the step in the file (messages) */
    int n_access, n_steps;
    int n_layers, n_experts;
    int n_distinct;         /* distinct keys */
    int max_step_keys;      /* largest number of distinct keys in one step */
    int max_step;           /* a step with that many */
    int json;               /* 1 = logits --trace JSON lines, 0 = plain */
} v4_simtrace;

/* Load FILE.  Format auto-detected: the first non-blank line starting with '{' means
 * `v4fleet logits --trace` JSON lines (one step per line, layer = index in "layers",
 * its "experts"); otherwise plain "layer expert" pairs, one per line ('#' comments),
 * steps separated by blank lines - or, with no blank line in the file, one step per
 * line.  n_experts > 0 fixes the key stride (ids must be below it); 0 = max id + 1. */
int v4_simtrace_load(const char *path, int n_experts, v4_simtrace *t, v4_error *err);
void v4_simtrace_free(v4_simtrace *t);
/* Fill n_distinct, max_step_keys and max_step from keys and step_off (the loader and the
 * synthetic generator both end with it).  0, or -1 + err when out of memory. */
int v4_simtrace_count(v4_simtrace *t, v4_error *err);

/* A synthetic trace (cachesim_synth.c has the routing model): steps of `batch` rows
 * through n_layers layers of n_experts, top_k per row and layer, Zipf(zipf) popularity
 * per layer over a random permutation (uniform on the first n_hash layers), one group
 * (= one pinned step of the replay) per (step, layer).  Same spec, same trace.
 * weights (borrowed, NULL = the Zipf model): [n_layers * n_experts] popularity of each
 * expert (e.g. the fleet's counts, v4_popularity_load), used as given on every layer (no
 * permutation, no uniform hash layers); a layer whose weights have fewer than top_k
 * positive entries is uniform. */
typedef struct v4_synthspec {
    int n_layers, n_experts, top_k, n_hash;
    int batch, steps;
    double zipf;
    uint64_t seed;
    const double *weights;
} v4_synthspec;

int v4_simtrace_synth(const v4_synthspec *sp, v4_simtrace *t, v4_error *err);

/* Read a popularity file (cachesim_popularity.c): text lines "layer expert count" ('#'
 * comments, blank lines ignored; `v4fleet stats --counts` writes it) for a model of
 * n_layers x n_experts (an index outside it is an error, a pair not listed counts 0, a
 * pair listed twice is an error).  *w = malloc'd [n_layers * n_experts] counts (the
 * caller frees it), *uniform = layers with fewer than top_k experts counted (they will
 * be uniform), *total = the sum of the counts.  0, or -1 + err (where = "path:line"). */
int v4_popularity_load(const char *path, int n_layers, int n_experts, int top_k, double **w, int *uniform,
                       double *total, v4_error *err);

typedef struct v4_simresult {
    int64_t hits, misses, evictions;
} v4_simresult;

/* Replay through policy kind with `slots` slots (>= t->max_step_keys). */
int v4_sim_policy(const v4_simtrace *t, v4_xpolicy_kind kind, const v4_xpolicy_params *pp, int slots,
                  v4_simresult *r, v4_error *err);
/* Belady's MIN under the same pinning rule. */
int v4_sim_belady(const v4_simtrace *t, int slots, v4_simresult *r, v4_error *err);
/* The best fixed set, a reference for traces without temporal locality (the synthetic
 * ones): the `slots` keys the trace uses most are held from their first use, every
 * access to another key is a miss (a bound that ignores where those would be loaded:
 * no online policy does much better on an independent-token trace, where Belady's MIN
 * profits from knowing the future draws). */
int v4_sim_static(const v4_simtrace *t, int slots, v4_simresult *r, v4_error *err);

#endif
