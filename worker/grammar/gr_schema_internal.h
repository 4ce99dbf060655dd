/* gr_schema_internal.h - what the two files of the JSON Schema compiler share
 * (gr_schema.c: structure, references, objects, arrays; gr_schema_types.c: strings,
 * numbers, constants).  Internal to worker/grammar/.
 * Ownership: a gr_sc lives for one compilation; merged schemas it makes are kept in
 * `owned` until the end.  Thread: the compiling thread only.
 */
#ifndef V4_GR_SCHEMA_INTERNAL_H
#define V4_GR_SCHEMA_INTERNAL_H

#include <jansson.h>
#include <stdio.h>

#include "worker/grammar/gr_internal.h"

typedef struct gr_sc_memo {
    json_t *schema;
    int32_t nt;
} gr_sc_memo;

typedef struct gr_sc {
    gr_builder *b;
    json_t *root;
    v4_error *err;
    gr_sc_memo *memo;
    int n_memo, cap_memo;
    json_t *owned;   /* array: merged schemas made while compiling */
    int depth;
    int ref_alone;   /* drafts 3-7: a $ref's sibling keywords are ignored */
    int int_exact;   /* drafts 3-4: an integer has no fraction (6 on: 1.0 is one) */
    int32_t lx_lbrace, lx_rbrace, lx_lbrack, lx_rbrack, lx_comma, lx_colon;
    int32_t lx_true, lx_false, lx_null, lx_str, lx_num;
    int32_t nt_any;  /* any JSON value, made on first use (-1) */
} gr_sc;

/* Fail at ptr/kw with a message; returns -1.  gr_sc_where: keep the message a callee
 * wrote, prefix the place. */
int gr_sc_fail(gr_sc *c, const char *ptr, const char *kw, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
int gr_sc_where(gr_sc *c, const char *ptr, const char *kw);

#define PTR_MAX 512

/* ptr + "/" + token (JSON pointer escaping ~ and /) */
static inline void sub_ptr(char *out, const char *ptr, const char *tok)
{
    size_t n = (size_t)snprintf(out, PTR_MAX, "%s/", ptr);
    for (const char *p = tok; *p && n + 3 < PTR_MAX; p++) {
        if (*p == '~' || *p == '/') {
            out[n++] = '~';
            out[n++] = *p == '~' ? '0' : '1';
        } else {
            out[n++] = *p;
        }
    }
    out[n < PTR_MAX ? n : PTR_MAX - 1] = 0;
}

static inline void idx_ptr(char *out, const char *ptr, const char *kw, size_t i)
{
    snprintf(out, PTR_MAX, "%s/%s/%zu", ptr, kw, i);
}

/* gr_schema_merge.c: keyword tables, references, merging, oneOf exclusivity */
enum { GR_T_OBJ = 1, GR_T_ARR = 2, GR_T_STR = 4, GR_T_NUM = 8, GR_T_INT = 16, GR_T_BOOL = 32, GR_T_NULL = 64 };
int gr_sc_unsupported(const char *k);          /* a keyword this engine refuses */
int gr_sc_asserts(json_t *s);                  /* s has a keyword beyond annotations */
json_t *gr_sc_resolve(gr_sc *c, const char *ref, const char *ptr);   /* a local $ref, or NULL (err) */
json_t *gr_sc_own(gr_sc *c, json_t *x);        /* kept until the compilation ends */
json_t *gr_sc_types_of(json_t *t);             /* "type" as a new array of names */
json_t *gr_sc_merge(gr_sc *c, json_t *a, json_t *b, const char *ptr);   /* allOf(a, b), NULL (err) */
json_t *gr_sc_flatten(gr_sc *c, json_t *s, const char *ptr);            /* $ref and allOf folded in */
int gr_sc_type_bits(json_t *s);                /* GR_T_* an instance of s may have */
int gr_sc_in_required(json_t *s, const char *k);
int gr_sc_disjoint(gr_sc *c, json_t *a, json_t *b);   /* 1: no instance matches both */

/* A count keyword's value (minLength, maxItems, ...): a non-negative integer, also when
 * written as a real (2.0, or every number of a schema read with integers as reals);
 * -1 when it is none. */
static inline long long gr_sc_count(json_t *x)
{
    double d = json_is_number(x) ? json_number_value(x) : -1;
    if (json_is_integer(x))
        return json_integer_value(x) < 0 ? -1 : json_integer_value(x);
    return d >= 0 && d == (double)(long long)d && d < 9e18 ? (long long)d : -1;
}

/* lexeme ids (>= 0) or nonterminals, -1 on error */
int gr_sc_number(gr_sc *c, json_t *s, const char *ptr, int integer);
int gr_sc_string(gr_sc *c, json_t *s, const char *ptr);
int gr_sc_const(gr_sc *c, json_t *v, const char *ptr);
char *gr_int_range_regex(int has_lo, int64_t lo, int has_hi, int64_t hi);

#endif
