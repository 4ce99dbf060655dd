/* gr_compile.c - v4g_compile: a constraint's text -> its grammar (JSON Schema and
 * json_object through gr_schema.c; a regex as one lexeme; a choice as literal
 * alternatives; GBNF through gr_gbnf.c), and the reference-counted constraint that holds it.
 */
#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/grammar/gr_compile.h"
#include "worker/grammar/gr_gbnf.h"

struct v4g_constraint {
    atomic_int refs;
    gr_grammar *g;
};

gr_grammar *gr_constraint_grammar(v4g_constraint *c)
{
    return c->g;
}

static int emit_choice(gr_builder *b, const char *text, size_t len, v4_error *err)
{
    json_error_t je;
    json_t *a = json_loadb(text, len, 0, &je);
    if (!a || !json_is_array(a) || !json_array_size(a)) {
        json_decref(a);
        v4_err_set(err, V4_ERR_INVALID, "choice", "a choice is a non-empty JSON array of strings%s%s",
                   a ? "" : ": ", a ? "" : je.text);
        return -1;
    }
    int st = gr_nt(b, "choice", err), rc = st < 0;
    size_t i;
    json_t *x;
    json_array_foreach(a, i, x) {
        if (rc)
            break;
        if (!json_is_string(x)) {
            rc = v4_err_set(err, V4_ERR_INVALID, "choice", "choice %zu is not a string", i);
            if (err)
                snprintf(err->where, sizeof err->where, "/%zu", i);
            break;
        }
        if (!json_string_length(x)) {
            /* the empty answer: the start symbol may derive nothing */
            rc = gr_rule(b, st, NULL, 0, err);
            continue;
        }
        int l = gr_lex_bytes(b, json_string_value(x), json_string_length(x), err);
        rc = l < 0 || gr_rule(b, st, (int32_t[]){l}, 1, err);
    }
    json_decref(a);
    b->start = st;
    return rc ? -1 : 0;
}

static int emit_regex(gr_builder *b, const char *text, size_t len, v4_error *err)
{
    int l = gr_lex_regex(b, text, len, GR_RX_FULL, 0, 0, -1, err);
    int st = l < 0 ? -1 : gr_nt(b, "regex", err);
    if (st < 0 || gr_rule(b, st, (int32_t[]){l}, 1, err))
        return -1;
    b->start = st;   /* an empty output never matches: a lexeme has at least one byte */
    return 0;
}

v4g_constraint *v4g_compile(v4g_kind kind, const char *text, size_t len, const v4g_opts *opts, v4_error *err)
{
    v4g_opts o = opts ? *opts : (v4g_opts){0};
    if (o.ws_max <= 0)
        o.ws_max = 8;
    if (o.ws_max > 64)
        o.ws_max = 64;
    gr_builder b;
    gr_builder_init(&b);
    int rc = 0;
    if (err)
        err->where[0] = 0;
    switch (kind) {
    case V4G_JSON_SCHEMA: {
        json_error_t je;
        json_t *s = json_loadb(text ? text : "", len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (!s)   /* an integer past 64 bits (a bound such as 9223372036854776000): read as reals */
            s = json_loadb(text ? text : "", len, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &je);
        if (!s) {
            rc = v4_err_set(err, V4_ERR_INVALID, "schema", "the schema is not JSON: %s (line %d, column %d)", je.text,
                            je.line, je.column);
            break;
        }
        rc = gr_schema_emit(&b, s, err);
        json_decref(s);
        if (!rc && !o.compact)
            rc = gr_set_skip(&b, o.ws_max, err);
        break;
    }
    case V4G_JSON_OBJECT:
        rc = gr_schema_emit(&b, NULL, err);
        if (!rc && !o.compact)
            rc = gr_set_skip(&b, o.ws_max, err);
        break;
    case V4G_REGEX:
        rc = emit_regex(&b, text ? text : "", len, err);
        break;
    case V4G_CHOICE:
        rc = emit_choice(&b, text ? text : "", len, err);
        break;
    case V4G_GRAMMAR:
        rc = gr_gbnf_compile(&b, text, text ? len : 0, err);
        break;
    default:
        rc = v4_err_set(err, V4_ERR_INVALID, "grammar", "unknown constraint kind %d", (int)kind);
    }
    gr_grammar *g = rc ? NULL : gr_grammar_build(&b, err);
    gr_builder_free(&b);
    if (!g)
        return NULL;
    v4g_constraint *c = calloc(1, sizeof *c);
    if (!c) {
        gr_grammar_free(g);
        v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory");
        return NULL;
    }
    atomic_init(&c->refs, 1);
    c->g = g;
    return c;
}

int v4g_pattern_matches(const char *rx, size_t rxlen, const char *s, size_t n, v4_error *err)
{
    return gr_regex_matches(rx, rxlen, GR_RX_SEARCH, s, n, err);
}

v4g_constraint *v4g_constraint_ref(v4g_constraint *c)
{
    if (c)
        atomic_fetch_add(&c->refs, 1);
    return c;
}

void v4g_constraint_unref(v4g_constraint *c)
{
    if (c && atomic_fetch_sub(&c->refs, 1) == 1) {
        gr_grammar_free(c->g);
        free(c);
    }
}

size_t v4g_constraint_bytes(const v4g_constraint *c)
{
    gr_grammar *g = c->g;
    pthread_mutex_lock(&g->mu);
    size_t n = g->bytes + g->lx.bytes;
    pthread_mutex_unlock(&g->mu);
    return n;
}
