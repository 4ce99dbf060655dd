/* cachesim_synth.c - synthetic routing traces for `v4fleet cachesim --synth` (see
 * cachesim_lib.h, v4_simtrace_synth): the access order of the engine's batched steps
 * at a model's full shape, without running the model.
 *
 * Model of the routing: every layer has its own popularity over its experts, Zipf with
 * exponent `zipf` over a random permutation (rank r has weight 1 / (r + 1)^zipf); the
 * hash-routed layers (the first n_hash of the shape) are uniform (their experts come from
 * the token ids).  A token picks top_k distinct experts per layer by drawing from the
 * popularity without replacement; tokens are independent.  A step of `batch` rows visits
 * the layers in order, and each (step, layer) is one group of the trace (one step in
 * cachesim's pinning rule): the union of the rows' experts of that layer, pinned while
 * the layer runs, as the engine's acquire does.
 *
 * With weights (the fleet's counts, --popularity) each layer draws from its own counts
 * instead (experts never counted are never drawn; a layer with fewer than top_k counted
 * experts is uniform).
 *
 * Deterministic: a splitmix64 stream from the seed; the same spec gives the same trace.
 * Ownership: fills a v4_simtrace whose arrays are malloc'd (v4_simtrace_free).
 * Thread: any.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cachesim_lib.h"

static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double unit(uint64_t *s) { return (double)(mix(s) >> 11) * 0x1p-53; }

/* index of the first cdf entry > u (cdf ascending, last = 1) */
static int pick(const double *cdf, int n, double u)
{
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (cdf[mid] > u)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

int v4_simtrace_synth(const v4_synthspec *sp, v4_simtrace *t, v4_error *err)
{
    memset(t, 0, sizeof *t);
    const int L = sp->n_layers, E = sp->n_experts, K = sp->top_k, B = sp->batch;
    if (L < 1 || E < 1 || K < 1 || K > E || B < 1 || sp->steps < 1 || sp->zipf < 0 || sp->n_hash < 0)
        return v4_err_set(err, V4_ERR_INVALID, "--synth", "bad shape: %d layers x %d experts, top-%d, batch %d, "
                          "%d steps, zipf %g", L, E, K, B, sp->steps, sp->zipf);
    const int per_group = B * K < E ? B * K : E;
    const int64_t n_groups = (int64_t)sp->steps * L, n_acc = n_groups * per_group;
    if (n_acc > 64 << 20 || (int64_t)L * E > 1 << 24)
        return v4_err_set(err, V4_ERR_RANGE, "--synth", "trace too large: %lld accesses (at most %d)",
                          (long long)n_acc, 64 << 20);
    double *cdf = malloc(sizeof(double) * (size_t)L * (size_t)E);
    int *perm = malloc(sizeof(int) * (size_t)L * (size_t)E);
    int *stamp = malloc(sizeof(int) * (size_t)E);              /* expert -> group that has it */
    int *drawn = calloc((size_t)E, sizeof(int));                /* rank -> token that drew it */
    t->keys = malloc(sizeof(int32_t) * (size_t)n_acc);
    t->step_off = malloc(sizeof(int) * (size_t)(n_groups + 1));
    t->step_line = malloc(sizeof(int) * (size_t)n_groups);
    int rc = -1;
    if (!cdf || !perm || !stamp || !drawn || !t->keys || !t->step_off || !t->step_line) {
        v4_err_set(err, V4_ERR_NOMEM, "--synth", "out of memory for %lld accesses", (long long)n_acc);
        goto out;
    }
    uint64_t rs = sp->seed;
    for (int l = 0; l < L; l++) {
        double *c = cdf + (size_t)l * E, sum = 0.0;
        int *p = perm + (size_t)l * E;
        const double *wl = sp->weights ? sp->weights + (size_t)l * E : NULL;
        int positive = 0;
        for (int r = 0; wl && r < E; r++)
            positive += wl[r] > 0;
        const int uniform = wl ? positive < K : l < sp->n_hash;
        for (int r = 0; r < E; r++) {
            p[r] = r;
            sum += uniform ? 1.0 : wl ? (wl[r] > 0 ? wl[r] : 0.0) : pow(r + 1.0, -sp->zipf);
            c[r] = sum;
        }
        for (int r = 0; r < E; r++)
            c[r] /= sum;
        c[E - 1] = 1.0;
        for (int r = E - 1; r > 0 && !wl; r--) {   /* which expert has rank r: a random permutation */
            int j = (int)(mix(&rs) % (uint64_t)(r + 1)), tmp = p[r];
            p[r] = p[j];
            p[j] = tmp;
        }
    }
    for (int e = 0; e < E; e++)
        stamp[e] = -1;
    int n = 0, g = 0, stamp_id = 0;
    for (int s = 0; s < sp->steps; s++)
        for (int l = 0; l < L; l++, g++) {
            t->step_off[g] = n;
            t->step_line[g] = g + 1;
            for (int b = 0; b < B; b++) {
                const int tok = ++stamp_id;     /* draws without replacement within a token */
                for (int k = 0; k < K; k++) {
                    int r;
                    do
                        r = pick(cdf + (size_t)l * E, E, unit(&rs));
                    while (drawn[r] == tok);
                    drawn[r] = tok;
                    int e = perm[(size_t)l * E + r];
                    if (stamp[e] != g) {
                        stamp[e] = g;
                        t->keys[n++] = l * E + e;
                    }
                }
            }
        }
    t->step_off[g] = n;
    t->n_access = n;
    t->n_steps = g;
    t->n_layers = L;
    t->n_experts = E;
    rc = v4_simtrace_count(t, err);
out:
    free(cdf);
    free(perm);
    free(stamp);
    free(drawn);
    if (rc)
        v4_simtrace_free(t);
    return rc;
}
