/* constrain.c - the tokenizer as the constraint engine's vocabulary, and one sequence's
 * constraint state: mask the logits, commit the sampled token (see constrain.h;
 * docs/structured-outputs.md "How masks apply").
 * Thread: one thread at a time per state.
 */
#include "constrain.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *tok_bytes(void *ctx, int32_t id, size_t *len)
{
    const char *b = v4_tok_bytes(ctx, id, len);
    if (!b)
        *len = 0;
    return b;
}

static int tok_special(void *ctx, int32_t id)
{
    return v4_tok_is_special(ctx, id);
}

v4g_vocab *v4_grammar_vocab(const v4_tokenizer *t, int32_t eos, v4_error *err)
{
    return v4g_vocab_new(v4_tok_n_ids(t), tok_bytes, tok_special, (void *)t, eos, err);
}

struct v4_constrain {
    v4g_matcher *m;
    int n_logits, n_vocab;      /* logits row width; the engine's vocabulary (ids below it) */
    int32_t eos, end_think;
    int active;                 /* 0: the reasoning phase (before end_think) */
    long tokens;                /* committed under the constraint */
    uint32_t *bits;             /* [n_vocab / 32] the mask */
    int ready;                  /* bits hold the mask of the current state (v4_constrain_prepare) */
    int mask_rc;                /* its v4g_matcher_mask result; mask_err the error */
    v4_error mask_err;
    float *out;                 /* [n_logits] the masked logits */
};

v4_constrain *v4_constrain_new(v4g_constraint *c, const v4g_vocab *v, int n_logits, int32_t eos, int32_t end_think,
                               v4_error *err)
{
    v4_constrain *s = calloc(1, sizeof *s);
    if (!s) {
        v4_err_set(err, V4_ERR_NOMEM, "constraint", "out of memory");
        return NULL;
    }
    s->n_logits = n_logits;
    s->n_vocab = v4g_vocab_size(v);
    s->eos = eos;
    s->end_think = end_think;
    s->active = end_think < 0;
    s->bits = calloc(((size_t)s->n_vocab + 31) / 32 + 1, sizeof *s->bits);
    s->out = malloc(sizeof *s->out * (size_t)(n_logits > 0 ? n_logits : 1));
    if (!s->bits || !s->out) {
        v4_err_set(err, V4_ERR_NOMEM, "constraint", "out of memory");
        v4_constrain_free(s);
        return NULL;
    }
    if (!(s->m = v4g_matcher_new(c, v, err))) {
        v4_constrain_free(s);
        return NULL;
    }
    return s;
}

void v4_constrain_free(v4_constrain *s)
{
    if (!s)
        return;
    v4g_matcher_free(s->m);
    free(s->bits);
    free(s->out);
    free(s);
}

int v4_constrain_active(const v4_constrain *s)
{
    return s->active;
}

long v4_constrain_tokens(const v4_constrain *s)
{
    return s->tokens;
}

const float *v4_constrain_apply(v4_constrain *s, const float *logits, v4_error *err)
{
    const int n = s->n_logits;
    if (!s->active) {   /* the reasoning: free, but it cannot end the answer */
        memcpy(s->out, logits, sizeof *s->out * (size_t)n);
        if (s->eos >= 0 && s->eos < n)
            s->out[s->eos] = -INFINITY;
        return s->out;
    }
    v4_constrain_prepare(s);
    if (s->mask_rc) {
        if (err) {
            *err = s->mask_err;
            snprintf(err->where, sizeof err->where, "constraint");
        }
        return NULL;
    }
    const int nv = s->n_vocab < n ? s->n_vocab : n;
    int allowed = 0;
    for (int i = 0; i < nv; i++) {
        const int ok = (s->bits[i >> 5] >> (i & 31)) & 1;
        s->out[i] = ok ? logits[i] : -INFINITY;
        allowed += ok;
    }
    for (int i = nv; i < n; i++)
        s->out[i] = -INFINITY;
    if (!allowed) {
        v4_err_set(err, V4_ERR_INVALID, "constraint",
                   "the constraint allows no token after %ld tokens of the answer (the vocabulary cannot spell what "
                   "it requires next)", s->tokens);
        return NULL;
    }
    return s->out;
}

void v4_constrain_prepare(v4_constrain *s)
{
    if (!s->active || s->ready)
        return;
    memset(&s->mask_err, 0, sizeof s->mask_err);
    s->mask_rc = v4g_matcher_mask(s->m, s->bits, &s->mask_err);
    s->ready = 1;
}

int v4_constrain_commit(v4_constrain *s, int32_t token, v4_error *err)
{
    s->ready = 0;   /* the state moves on (or stays refused: the mask is the same then) */
    if (!s->active) {
        s->active = token == s->end_think;
        return 0;
    }
    int r = v4g_matcher_commit(s->m, token, err);
    if (r < 0) {
        if (err)
            snprintf(err->where, sizeof err->where, "constraint");
        return -1;
    }
    if (r > 0)
        return v4_err_set(err, V4_ERR_INTERNAL, "constraint", "token %d was sampled but the constraint refuses it",
                          token);
    s->tokens++;
    return 0;
}
