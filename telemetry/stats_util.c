/* stats_util.c - see stats_util.h.
 *
 * add_hash makes two passes over the fields: the first finds and checks _shape
 * (Redis returns hash fields in no particular order), the second adds the counts.
 * Counts are added into uint64 with overflow checks.  The std is computed in two
 * passes (mean first) in double precision.
 */
#include "stats_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Decimal digits only, no sign, no overflow; "" is not a number. */
static int parse_u64(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (!*s)
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* "A<sep>B" with A, B decimal ints <= limit; the whole string must match. */
static int parse_int_at(const char **p, long limit, int *out)
{
    const char *s = *p;
    long v = 0;
    if (*s < '0' || *s > '9')
        return -1;
    for (; *s >= '0' && *s <= '9'; s++) {
        v = v * 10 + (*s - '0');
        if (v > limit)
            return -1;
    }
    *out = (int)v;
    *p = s;
    return 0;
}

static int parse_shape(const char *s, int *l, int *e, int *k)
{
    const char *p = s;
    if (parse_int_at(&p, V4_UTIL_MAX_LAYERS, l) || *p++ != ',' ||
        parse_int_at(&p, V4_UTIL_MAX_EXPERTS, e) || *p++ != ',' ||
        parse_int_at(&p, V4_UTIL_MAX_EXPERTS, k) || *p)
        return -1;
    return (*l >= 1 && *e >= 1 && *k >= 1 && *k <= *e) ? 0 : -1;
}

static int set_shape(v4_umat *u, const char *key, const char *const *fields,
                     const char *const *values, size_t n, v4_error *err)
{
    const char *shape = NULL;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(fields[i], "_shape"))
            shape = values[i];
    if (!shape)
        return v4_err_set(err, V4_ERR_FORMAT, key, "no _shape field (expected \"L,E,K\")");
    int l, e, k;
    if (parse_shape(shape, &l, &e, &k))
        return v4_err_set(err, V4_ERR_FORMAT, key,
                          "_shape '%.64s' is not \"L,E,K\" with 1 <= L <= %d, "
                          "1 <= K <= E <= %d", shape, V4_UTIL_MAX_LAYERS, V4_UTIL_MAX_EXPERTS);
    if (u->counts) {
        if (l != u->layers || e != u->experts || k != u->top_k)
            return v4_err_set(err, V4_ERR_SHAPE, key,
                              "_shape %d,%d,%d differs from %d,%d,%d of the hashes before it",
                              l, e, k, u->layers, u->experts, u->top_k);
        return 0;
    }
    u->counts = calloc((size_t)l * (size_t)e, sizeof *u->counts);
    if (!u->counts)
        return v4_err_set(err, V4_ERR_NOMEM, key, "out of memory for %d x %d counts", l, e);
    u->layers = l;
    u->experts = e;
    u->top_k = k;
    return 0;
}

static int add_u64(uint64_t *acc, uint64_t v)
{
    return __builtin_add_overflow(*acc, v, acc) ? -1 : 0;
}

int v4_umat_add_hash(v4_umat *u, const char *key, const char *const *fields,
                     const char *const *values, size_t n, v4_error *err)
{
    if (set_shape(u, key, fields, values, n, err))
        return -1;
    for (size_t i = 0; i < n; i++) {
        const char *f = fields[i];
        uint64_t v;
        if (f[0] == '_') {
            uint64_t *dst = !strcmp(f, "_tasks") ? &u->tasks : !strcmp(f, "_tokens") ? &u->tokens
                          : !strcmp(f, "_hits") ? &u->hits : !strcmp(f, "_misses") ? &u->misses
                          : !strcmp(f, "_kib_loaded") ? &u->kib_loaded
                          : !strcmp(f, "_prefetched") ? &u->prefetched : NULL;
            if (!dst)
                continue;   /* _shape (checked) or a field of a later writer */
            if (parse_u64(values[i], &v))
                return v4_err_set(err, V4_ERR_FORMAT, key,
                                  "field %s: '%.64s' is not a non-negative integer", f, values[i]);
            if (add_u64(dst, v))
                return v4_err_set(err, V4_ERR_RANGE, key, "field %s: sum overflows", f);
            continue;
        }
        const char *p = f;
        int l, e;
        if (parse_int_at(&p, V4_UTIL_MAX_LAYERS, &l) || *p++ != ':' ||
            parse_int_at(&p, V4_UTIL_MAX_EXPERTS, &e) || *p)
            return v4_err_set(err, V4_ERR_FORMAT, key,
                              "unexpected field '%.64s' (want \"<layer>:<expert>\" or _tasks, "
                              "_tokens, _shape)", f);
        if (l >= u->layers || e >= u->experts)
            return v4_err_set(err, V4_ERR_RANGE, key,
                              "field %s: outside the shape (%d layers, %d experts)", f,
                              u->layers, u->experts);
        if (parse_u64(values[i], &v))
            return v4_err_set(err, V4_ERR_FORMAT, key,
                              "field %s: '%.64s' is not a non-negative integer", f, values[i]);
        if (add_u64(&u->counts[(size_t)l * (size_t)u->experts + (size_t)e], v))
            return v4_err_set(err, V4_ERR_RANGE, key, "field %s: sum overflows", f);
    }
    u->n_hashes++;
    return 0;
}

/* a ranks before b: more tokens, or as many and a lower id. */
static int ranks_before(const uint64_t *c, int a, int b)
{
    return c[a] > c[b] || (c[a] == c[b] && a < b);
}

void v4_umat_layer_stats(const v4_umat *u, int layer, int top_n, int *top_ids,
                         v4_umat_layer *out)
{
    memset(out, 0, sizeof *out);
    const uint64_t *c = u->counts + (size_t)layer * (size_t)u->experts;
    int E = u->experts;
    for (int e = 0; e < E; e++) {
        if (__builtin_add_overflow(out->assignments, c[e], &out->assignments))
            out->assignments = UINT64_MAX;   /* saturate; no real fleet gets near 2^64 */
        if (c[e] > out->max_count)
            out->max_count = c[e];
        out->idle += c[e] == 0;
    }
    out->routed_tokens = (double)out->assignments / u->top_k;
    out->mean = (double)out->assignments / E;
    double ss = 0;
    for (int e = 0; e < E; e++) {
        double d = (double)c[e] - out->mean;
        ss += d * d;
    }
    out->std = sqrt(ss / E);
    if (out->mean > 0) {
        out->cv = out->std / out->mean;
        out->max_over_mean = (double)out->max_count / out->mean;
    } else {
        out->cv = out->max_over_mean = NAN;
    }
    int prev = -1;
    for (int k = 0; k < top_n; k++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            if (!c[e] || (prev >= 0 && !ranks_before(c, prev, e)))
                continue;
            if (best < 0 || ranks_before(c, e, best))
                best = e;
        }
        if (best < 0)
            break;
        top_ids[k] = best;
        out->n_top++;
        prev = best;
    }
}

void v4_umat_free(v4_umat *u)
{
    free(u->counts);
    memset(u, 0, sizeof *u);
}
