/* sampling.c - see sampling.h (order of operations, determinism, log probabilities).
 * Thread: one thread at a time per sampler. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config/rng.h"
#include "sampling.h"

/* One id the penalties touch: generated count, and whether the prompt holds it. */
typedef struct seen {
    int32_t id;
    int32_t count;
    int in_prompt;
} seen;

struct v4_sampler {
    int vocab;
    v4_sampling_params p;
    v4_rng rng;
    int *idx;               /* candidate ids */
    double *prob;
    /* bias and penalties (adjust = 1 when any is on): the adjusted copy of the row */
    int adjust, rep_on, freq_on;
    v4_logit_bias *bias;    /* own copy of p.bias */
    float *adj;             /* [vocab] */
    seen *seen;             /* the ids penalized, in first-seen order */
    int n_seen, cap_seen;
    int32_t *slot;          /* open addressing: index into seen + 1 (0 = empty); size mask + 1 */
    uint32_t mask;
};

int v4_sampling_validate(const v4_sampling_params *p, v4_error *err)
{
    if (!(p->temperature >= 0.0) || !isfinite(p->temperature))
        return v4_err_set(err, V4_ERR_INVALID, "temperature", "must be a finite number >= 0 (got %g)", p->temperature);
    if (!(p->top_p > 0.0 && p->top_p <= 1.0))
        return v4_err_set(err, V4_ERR_INVALID, "top_p", "must be in (0, 1] (got %g)", p->top_p);
    if (p->top_k < 0)
        return v4_err_set(err, V4_ERR_INVALID, "top_k", "must be >= 0 (got %d)", p->top_k);
    if (!(p->min_p >= 0.0 && p->min_p <= 1.0))
        return v4_err_set(err, V4_ERR_INVALID, "min_p", "must be in [0, 1] (got %g)", p->min_p);
    if (!(p->presence_penalty >= -2.0 && p->presence_penalty <= 2.0))
        return v4_err_set(err, V4_ERR_INVALID, "presence_penalty", "must be in [-2, 2] (got %g)", p->presence_penalty);
    if (!(p->frequency_penalty >= -2.0 && p->frequency_penalty <= 2.0))
        return v4_err_set(err, V4_ERR_INVALID, "frequency_penalty", "must be in [-2, 2] (got %g)",
                          p->frequency_penalty);
    if (!(p->repetition_penalty >= 0.0) || !isfinite(p->repetition_penalty))
        return v4_err_set(err, V4_ERR_INVALID, "repetition_penalty", "must be a finite number > 0 (got %g)",
                          p->repetition_penalty);
    if (p->n_bias < 0 || (p->n_bias && !p->bias))
        return v4_err_set(err, V4_ERR_INVALID, "logit_bias", "has no entries array");
    for (int i = 0; i < p->n_bias; i++)
        if (p->bias[i].id < 0 || !(p->bias[i].bias >= -100.0f && p->bias[i].bias <= 100.0f))
            return v4_err_set(err, V4_ERR_INVALID, "logit_bias", "entry %d: id %d, bias %g: the id must be >= 0 and "
                              "the bias in [-100, 100]", i, (int)p->bias[i].id, (double)p->bias[i].bias);
    if (p->top_logprobs < 0 || p->top_logprobs > V4_TOP_LOGPROBS_MAX)
        return v4_err_set(err, V4_ERR_INVALID, "top_logprobs", "must be in [0, %d] (got %d)", V4_TOP_LOGPROBS_MAX,
                          p->top_logprobs);
    return 0;
}

v4_sampler *v4_sampler_create(int vocab, const v4_sampling_params *p, v4_error *err)
{
    if (v4_sampling_validate(p, err))
        return NULL;
    for (int i = 0; i < p->n_bias; i++)
        if (p->bias[i].id >= vocab) {
            v4_err_set(err, V4_ERR_INVALID, "logit_bias", "token id %d is outside the vocabulary of %d",
                       (int)p->bias[i].id, vocab);
            return NULL;
        }
    v4_sampler *s = calloc(1, sizeof *s);
    if (!s) {
        v4_err_set(err, V4_ERR_NOMEM, "sampler", "out of memory");
        return NULL;
    }
    s->vocab = vocab;
    s->p = *p;
    s->rep_on = p->repetition_penalty > 0.0 && p->repetition_penalty != 1.0;
    s->freq_on = p->presence_penalty != 0.0 || p->frequency_penalty != 0.0;
    s->adjust = p->n_bias > 0 || s->rep_on || s->freq_on;
    s->idx = malloc(sizeof(int) * (size_t)vocab);
    s->prob = malloc(sizeof(double) * (size_t)vocab);
    int ok = s->idx && s->prob;
    if (ok && s->adjust)
        ok = (s->adj = malloc(sizeof(float) * (size_t)vocab)) != NULL;
    if (ok && p->n_bias) {
        ok = (s->bias = malloc(sizeof *s->bias * (size_t)p->n_bias)) != NULL;
        if (ok)
            memcpy(s->bias, p->bias, sizeof *s->bias * (size_t)p->n_bias);
    }
    s->p.bias = s->bias;
    if (!ok) {
        v4_sampler_free(s);
        v4_err_set(err, V4_ERR_NOMEM, "sampler", "out of memory");
        return NULL;
    }
    v4_rng_seed(&s->rng, p->seed);
    return s;
}

void v4_sampler_free(v4_sampler *s)
{
    if (!s)
        return;
    free(s->idx);
    free(s->prob);
    free(s->bias);
    free(s->adj);
    free(s->seen);
    free(s->slot);
    free(s);
}

/* ------------------------------------------------------ the penalty table -- */
static uint32_t hash_id(int32_t id)
{
    uint32_t h = (uint32_t)id * 2654435761u;
    return h ^ (h >> 15);
}

/* Rebuild the slots for a table of (mask + 1) slots. */
static int rehash(v4_sampler *s, uint32_t size)
{
    int32_t *slot = calloc(size, sizeof *slot);
    if (!slot)
        return -1;
    free(s->slot);
    s->slot = slot;
    s->mask = size - 1;
    for (int i = 0; i < s->n_seen; i++) {
        uint32_t h = hash_id(s->seen[i].id) & s->mask;
        while (s->slot[h])
            h = (h + 1) & s->mask;
        s->slot[h] = i + 1;
    }
    return 0;
}

/* The entry of id, added (count 0) when new; NULL when out of memory. */
static seen *seen_get(v4_sampler *s, int32_t id)
{
    if (s->slot) {
        for (uint32_t h = hash_id(id) & s->mask; s->slot[h]; h = (h + 1) & s->mask)
            if (s->seen[s->slot[h] - 1].id == id)
                return &s->seen[s->slot[h] - 1];
    }
    if (s->n_seen == s->cap_seen) {
        int cap = s->cap_seen ? s->cap_seen * 2 : 64;
        seen *n = realloc(s->seen, sizeof *n * (size_t)cap);
        if (!n)
            return NULL;
        s->seen = n;
        s->cap_seen = cap;
    }
    if (!s->slot || (uint32_t)(s->n_seen + 1) * 2 > s->mask + 1) {   /* keep the load under 1/2 */
        uint32_t size = s->slot ? (s->mask + 1) * 2 : 128;
        while ((uint32_t)(s->n_seen + 1) * 2 > size)
            size *= 2;
        if (rehash(s, size))
            return NULL;
    }
    seen *e = &s->seen[s->n_seen++];
    *e = (seen){id, 0, 0};
    uint32_t h = hash_id(id) & s->mask;
    while (s->slot[h])
        h = (h + 1) & s->mask;
    s->slot[h] = s->n_seen;
    return e;
}

int v4_sampler_prompt(v4_sampler *s, const int32_t *ids, int n, v4_error *err)
{
    if (!s->rep_on)
        return 0;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= s->vocab)
            continue;
        seen *e = seen_get(s, ids[i]);
        if (!e)
            return v4_err_set(err, V4_ERR_NOMEM, "sampler", "out of memory");
        e->in_prompt = 1;
    }
    return 0;
}

/* Steps 1-2 of sampling.h on a copy of the row; the row itself when nothing is on. */
static const float *adjusted(v4_sampler *s, const float *logits)
{
    if (!s->adjust)
        return logits;
    float *a = s->adj;
    memcpy(a, logits, sizeof *a * (size_t)s->vocab);
    for (int i = 0; i < s->p.n_bias; i++)
        a[s->bias[i].id] = (float)((double)a[s->bias[i].id] + (double)s->bias[i].bias);
    const double r = s->p.repetition_penalty, f = s->p.frequency_penalty, pp = s->p.presence_penalty;
    for (int i = 0; i < s->n_seen; i++) {
        const seen *e = &s->seen[i];
        double l = a[e->id];
        if (s->rep_on)
            l = l > 0.0 ? l / r : l * r;
        if (s->freq_on && e->count > 0)
            l -= (double)e->count * f + pp;
        a[e->id] = (float)l;
    }
    return a;
}

/* The token joins the generated counts (frequency / presence / repetition). */
static int record(v4_sampler *s, int token)
{
    if (!(s->rep_on || s->freq_on) || token < 0 || token >= s->vocab)
        return 0;
    seen *e = seen_get(s, token);
    if (!e)
        return -1;
    e->count++;
    return 0;
}

/* --------------------------------------------------------------- ordering -- */
int v4_argmax(const float *logits, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best])
            best = i;
    return best;
}

/* Sort candidate ids by descending logit, ties to the lower id (heap sort: O(n log n),
 * no recursion, deterministic). */
static int before(const float *l, int a, int b) { return l[a] > l[b] || (l[a] == l[b] && a < b); }

static void sift(const float *l, int *h, int n, int i)
{
    for (;;) {
        int w = i, a = 2 * i + 1, b = a + 1;
        if (a < n && before(l, h[w], h[a]))   /* min-heap on the order: the "last" on top */
            w = a;
        if (b < n && before(l, h[w], h[b]))
            w = b;
        if (w == i)
            return;
        int t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* The k first ids in order into idx[0..k).  Keeps a heap of the best k seen. */
static int top_ids(const float *l, int n, int k, int *idx)
{
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (isnan(l[i]) || l[i] == -INFINITY)   /* -inf: refused by a constraint's mask */
            continue;
        if (m < k) {
            idx[m++] = i;
            for (int j = m / 2 - 1; j >= 0 && m == k; j--)
                sift(l, idx, m, j);
        } else if (before(l, i, idx[0])) {
            idx[0] = i;
            sift(l, idx, m, 0);
        }
    }
    if (m < k)
        for (int j = m / 2 - 1; j >= 0; j--)
            sift(l, idx, m, j);
    for (int e = m - 1; e > 0; e--) {   /* heap sort: worst goes to the end */
        int t = idx[0];
        idx[0] = idx[e];
        idx[e] = t;
        sift(l, idx, e, 0);
    }
    return m;
}

/* ------------------------------------------------------------- the draw -- */
static int draw(v4_sampler *s, const float *logits)
{
    const v4_sampling_params *p = &s->p;
    if (p->temperature == 0.0)
        return v4_argmax(logits, s->vocab);
    int k = p->top_k > 0 && p->top_k < s->vocab ? p->top_k : s->vocab;
    int m = top_ids(logits, s->vocab, k, s->idx);
    if (m == 0)
        return v4_argmax(logits, s->vocab);
    double mx = logits[s->idx[0]], sum = 0.0;
    for (int i = 0; i < m; i++) {
        s->prob[i] = exp(((double)logits[s->idx[i]] - mx) / p->temperature);
        sum += s->prob[i];
    }
    if (p->min_p > 0.0) {   /* prob[0] = 1 is the highest: keep prob >= min_p (a prefix) */
        int keep = 1;
        while (keep < m && s->prob[keep] >= p->min_p)
            keep++;
        if (keep < m) {
            m = keep;
            sum = 0.0;
            for (int i = 0; i < m; i++)
                sum += s->prob[i];
        }
    }
    int keep = m;
    if (p->top_p < 1.0) {
        double c = 0.0;
        for (int i = 0; i < m; i++) {
            c += s->prob[i] / sum;
            if (c >= p->top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    double mass = 0.0;
    for (int i = 0; i < keep; i++)
        mass += s->prob[i];
    double u = v4_rng_unit(&s->rng) * mass, c = 0.0;
    for (int i = 0; i < keep; i++) {
        c += s->prob[i];
        if (u < c)
            return s->idx[i];
    }
    return s->idx[keep - 1];
}

/* Log-softmax of l / T (T = 1 for greedy) over the whole row, in double. */
static void logprobs(const v4_sampler *s, const float *l, int token, v4_sample_lp *lp)
{
    const double T = s->p.temperature > 0.0 ? s->p.temperature : 1.0;
    const int V = s->vocab;
    double mx = -INFINITY;
    for (int i = 0; i < V; i++)
        if (l[i] > mx)
            mx = l[i];
    lp->n_top = 0;
    if (mx == -INFINITY) {   /* every token refused: nothing has a probability */
        lp->logprob = V4_LOGPROB_FLOOR;
        return;
    }
    double sum = 0.0;
    for (int i = 0; i < V; i++)
        if (l[i] != -INFINITY && !isnan(l[i]))
            sum += exp(((double)l[i] - mx) / T);
    const double lse = log(sum);
#define LP(x) (((double)(x) - mx) / T - lse)
    lp->logprob = l[token] == -INFINITY || isnan(l[token]) ? V4_LOGPROB_FLOOR : LP(l[token]);
    int ids[V4_TOP_LOGPROBS_MAX];
    const int n = s->p.top_logprobs > 0 ? top_ids(l, V, s->p.top_logprobs, ids) : 0;
    for (int i = 0; i < n; i++)
        lp->top[i] = (v4_token_logprob){ids[i], LP(l[ids[i]])};
    lp->n_top = n;
#undef LP
}

int v4_sample_ex(v4_sampler *s, const float *logits, v4_sample_lp *lp)
{
    const float *l = adjusted(s, logits);
    const int token = draw(s, l);
    if (lp)
        logprobs(s, l, token, lp);
    return record(s, token) ? -1 : token;
}

int v4_sample(v4_sampler *s, const float *logits)
{
    return v4_sample_ex(s, logits, NULL);
}
