/* task_sampling.c - the sampling fields of a task (see task_sampling.h;
 * docs/structured-outputs.md "Sampling fields").  Thread: any. */
#include "task_sampling.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIELD(e, where, ...) v4_task_fail(e, V4_TASK_INVALID_FIELD, where, __VA_ARGS__)

static const char *const FIELDS[] = {"logit_bias", "presence_penalty", "frequency_penalty", "repetition_penalty",
                                     "min_p", "logprobs", "top_logprobs", NULL};

int v4_task_sampling_field(const char *k)
{
    for (const char *const *f = FIELDS; *f; f++)
        if (!strcmp(*f, k))
            return 1;
    return 0;
}

/* A number in [lo, hi] (lo_open: lo excluded). */
static int number(json_t *v, const char *k, double lo, double hi, int lo_open, double *out, v4_task_error *e)
{
    const char *range = lo_open ? "(%g, %g]" : "[%g, %g]";
    char r[64];
    snprintf(r, sizeof r, range, lo, hi);
    if (!json_is_number(v))
        return FIELD(e, k, "must be a number in %s", r);
    double x = json_number_value(v);
    if (x < lo || x > hi || (lo_open && x == lo))
        return FIELD(e, k, "must be in %s (got %g)", r, x);
    *out = x;
    return 0;
}

/* A token id key: decimal digits, no sign, within int32. */
static int token_key(const char *key, int32_t *id)
{
    long long x = 0;
    size_t n = strlen(key);
    if (!n || n > 10 || (n > 1 && key[0] == '0'))   /* no leading zeros: one key per id */
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (key[i] < '0' || key[i] > '9')
            return -1;
        x = x * 10 + (key[i] - '0');
    }
    if (x > INT32_MAX)
        return -1;
    *id = (int32_t)x;
    return 0;
}

static int logit_bias(json_t *v, v4_task_sampling *s, v4_task_error *e)
{
    if (!json_is_object(v))
        return FIELD(e, "logit_bias", "must be an object {\"<token id>\": bias in [-100, 100]}");
    size_t n = json_object_size(v);
    if (n > V4_TASK_MAX_LOGIT_BIAS)
        return FIELD(e, "logit_bias", "has %zu entries, at most %d are allowed", n, V4_TASK_MAX_LOGIT_BIAS);
    free(s->bias);
    s->bias = NULL;
    s->n_bias = 0;
    if (!n)
        return 0;
    if (!(s->bias = malloc(sizeof *s->bias * n)))
        return v4_task_fail(e, V4_TASK_INTERNAL, "logit_bias", "out of memory");
    const char *key;
    json_t *x;
    json_object_foreach(v, key, x) {
        char where[64];
        snprintf(where, sizeof where, "logit_bias.%.40s", key);
        int32_t id = 0;
        if (token_key(key, &id))
            return FIELD(e, where, "the key must be a token id (decimal digits without leading zeros, 0..%d)", INT32_MAX);
        double b = 0;
        if (number(x, where, -100, 100, 0, &b, e))
            return -1;
        s->bias[s->n_bias++] = (v4_logit_bias){id, (float)b};   /* keys are distinct: JSON_REJECT_DUPLICATES */
    }
    return 0;
}

int v4_task_sampling_parse(const char *k, json_t *v, v4_task_sampling *s, v4_task_error *e)
{
    if (json_is_null(v))
        return 0;
    if (!strcmp(k, "logit_bias"))
        return logit_bias(v, s, e);
    if (!strcmp(k, "presence_penalty"))
        return number(v, k, -2, 2, 0, &s->presence_penalty, e);
    if (!strcmp(k, "frequency_penalty"))
        return number(v, k, -2, 2, 0, &s->frequency_penalty, e);
    if (!strcmp(k, "repetition_penalty"))
        return number(v, k, 0, 1e6, 1, &s->repetition_penalty, e);
    if (!strcmp(k, "min_p"))
        return number(v, k, 0, 1, 0, &s->min_p, e);
    if (!strcmp(k, "logprobs")) {
        if (!json_is_boolean(v))
            return FIELD(e, k, "must be true or false");
        s->logprobs = json_is_true(v);
        return 0;
    }
    if (!strcmp(k, "top_logprobs")) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > V4_TOP_LOGPROBS_MAX)
            return FIELD(e, k, "must be an integer in [0, %d]", V4_TOP_LOGPROBS_MAX);
        s->top_logprobs = (int)json_integer_value(v);
        return 0;
    }
    return FIELD(e, k, "is not a sampling field");
}

int v4_task_sampling_check(const v4_task_sampling *s, v4_task_error *e)
{
    if (s->top_logprobs > 0 && !s->logprobs)
        return FIELD(e, "top_logprobs", "needs \"logprobs\": true (got top_logprobs %d without it)", s->top_logprobs);
    return 0;
}

void v4_task_sampling_apply(const v4_task_sampling *s, v4_sampling_params *p)
{
    p->presence_penalty = s->presence_penalty;
    p->frequency_penalty = s->frequency_penalty;
    p->repetition_penalty = s->repetition_penalty;
    p->min_p = s->min_p;
    p->bias = s->bias;
    p->n_bias = s->n_bias;
    p->logprobs = s->logprobs;
    p->top_logprobs = s->logprobs ? s->top_logprobs : 0;
}

void v4_task_sampling_free(v4_task_sampling *s)
{
    free(s->bias);
    memset(s, 0, sizeof *s);
}
