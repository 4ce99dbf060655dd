/* gr_schema_merge.c - the JSON Schema compiler's schema-to-schema work, apart from the
 * grammar it emits: keyword tables, $ref resolution (local JSON pointers), allOf and
 * sibling keywords merged into one schema, and the test that oneOf's branches cannot both
 * match an instance.  It calls nothing of gr_schema.c (no object circle: the layering
 * check).  docs/grammar.md says what is merged and how.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/grammar/gr_schema_internal.h"

/* ------------------------------------------------------------- keywords -- */
static const char *const UNSUPPORTED[] = {
    "not", "if", "then", "else", "contains", "minContains", "maxContains", "dependencies",
    "dependentRequired", "dependentSchemas", "propertyNames", "unevaluatedProperties", "unevaluatedItems",
    "$dynamicRef", "$recursiveRef", NULL};
/* keywords that assert something (the rest of a schema is annotation for us) */
static const char *const ASSERTING[] = {
    "type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "properties", "required", "additionalProperties",
    "patternProperties", "items", "prefixItems", "additionalItems", "minItems", "maxItems", "uniqueItems",
    "minLength", "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
    "multipleOf", "minProperties", "maxProperties", NULL};

static int in(const char *const *list, const char *k)
{
    for (; *list; list++)
        if (!strcmp(*list, k))
            return 1;
    return 0;
}

int gr_sc_asserts(json_t *s)
{
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) {
        if (in(ASSERTING, k) || in(UNSUPPORTED, k))
            return 1;
    }
    return 0;
}

int gr_sc_unsupported(const char *k)
{
    return in(UNSUPPORTED, k);
}

/* --------------------------------------------------------------- $ref -- */
json_t *gr_sc_resolve(gr_sc *c, const char *ref, const char *ptr)
{
    if (ref[0] != '#') {
        gr_sc_fail(c, ptr, "$ref", "only local references (#...) are supported, not '%.200s'", ref);
        return NULL;
    }
    json_t *cur = c->root;
    const char *p = ref + 1;
    if (*p && *p != '/') {   /* an anchor: look for a matching $anchor / $id at the top levels */
        gr_sc_fail(c, ptr, "$ref", "anchor references ('%.200s') are not supported", ref);
        return NULL;
    }
    while (*p == '/') {
        p++;
        char tok[PTR_MAX];
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof tok) {
            if (p[0] == '~' && (p[1] == '0' || p[1] == '1')) {
                tok[n++] = p[1] == '0' ? '~' : '/';
                p += 2;
            } else if (p[0] == '%' && p[1] && p[2]) {
                char h[3] = {p[1], p[2], 0};
                tok[n++] = (char)strtol(h, NULL, 16);
                p += 3;
            } else {
                tok[n++] = *p++;
            }
        }
        tok[n] = 0;
        if (json_is_object(cur)) {
            cur = json_object_get(cur, tok);
        } else if (json_is_array(cur)) {
            char *e;
            long i = strtol(tok, &e, 10);
            cur = *e || i < 0 ? NULL : json_array_get(cur, (size_t)i);
        } else {
            cur = NULL;
        }
        if (!cur) {
            gr_sc_fail(c, ptr, "$ref", "the reference '%.200s' points nowhere", ref);
            return NULL;
        }
    }
    return cur;
}

/* ---------------------------------------------------------------- merge -- */
json_t *gr_sc_own(gr_sc *c, json_t *x)
{
    if (x)
        json_array_append_new(c->owned, x);
    return x;
}

json_t *gr_sc_types_of(json_t *t)
{
    json_t *a = json_array();
    if (json_is_string(t))
        json_array_append(a, t);
    else if (json_is_array(t))
        json_array_extend(a, t);
    return a;
}

static int has_type(json_t *arr, const char *t)
{
    size_t i;
    json_t *x;
    json_array_foreach(arr, i, x) {
        if (json_is_string(x) && !strcmp(json_string_value(x), t))
            return 1;
    }
    return 0;
}

static json_t *all_of2(json_t *a, json_t *b)
{
    json_t *o = json_object();
    json_t *arr = json_array();
    json_array_append(arr, a);
    json_array_append(arr, b);
    json_object_set_new(o, "allOf", arr);
    return o;
}

/* allOf(a, b) as one schema (both objects with their $ref already resolved) */
json_t *gr_sc_merge(gr_sc *c, json_t *a, json_t *b, const char *ptr)
{
    if (json_is_true(b) || (json_is_object(b) && !json_object_size(b)))
        return a;
    if (json_is_true(a) || (json_is_object(a) && !json_object_size(a)))
        return b;
    if (json_is_false(a) || json_is_false(b)) {
        gr_sc_fail(c, ptr, "allOf", "a false schema in allOf admits no value");
        return NULL;
    }
    json_t *m = gr_sc_own(c, json_deep_copy(a));
    if (!m) {
        v4_err_set(c->err, V4_ERR_NOMEM, "grammar", "out of memory");
        return NULL;
    }
    const char *k;
    json_t *bv;
    json_object_foreach(b, k, bv) {
        json_t *av = json_object_get(m, k);
        if (!av) {
            json_object_set(m, k, bv);
            continue;
        }
        if (json_equal(av, bv))
            continue;
        if (!strcmp(k, "type")) {
            json_t *ta = gr_sc_types_of(av), *tb = gr_sc_types_of(bv), *r = json_array();
            size_t i;
            json_t *x;
            json_array_foreach(ta, i, x) {
                const char *t = json_string_value(x);
                if (!t)
                    continue;
                if (has_type(tb, t) || (!strcmp(t, "integer") && has_type(tb, "number")))
                    json_array_append(r, x);
                else if (!strcmp(t, "number") && has_type(tb, "integer"))
                    json_array_append_new(r, json_string("integer"));
            }
            json_decref(ta);
            json_decref(tb);
            if (!json_array_size(r)) {
                json_decref(r);
                gr_sc_fail(c, ptr, "type", "allOf branches with no type in common");
                return NULL;
            }
            json_object_set_new(m, k, r);
        } else if (!strcmp(k, "properties") && json_is_object(av) && json_is_object(bv)) {
            json_t *p = json_deep_copy(av);
            const char *pk;
            json_t *pv;
            json_object_foreach(bv, pk, pv) {
                json_t *ap = json_object_get(p, pk);
                json_object_set_new(p, pk, ap ? all_of2(ap, pv) : json_incref(pv));
            }
            json_object_set_new(m, k, p);
        } else if (!strcmp(k, "required") && json_is_array(av) && json_is_array(bv)) {
            json_t *r = json_deep_copy(av);
            size_t i;
            json_t *x;
            json_array_foreach(bv, i, x) {
                size_t j;
                json_t *y;
                int dup = 0;
                json_array_foreach(r, j, y) dup |= json_equal(x, y);
                if (!dup)
                    json_array_append(r, x);
            }
            json_object_set_new(m, k, r);
        } else if (!strcmp(k, "enum") && json_is_array(av) && json_is_array(bv)) {
            json_t *r = json_array();
            size_t i, j;
            json_t *x, *y;
            json_array_foreach(av, i, x) {
                json_array_foreach(bv, j, y) {
                    if (json_equal(x, y)) {
                        json_array_append(r, x);
                        break;
                    }
                }
            }
            json_object_set_new(m, k, r);
        } else if (!strcmp(k, "minLength") || !strcmp(k, "minItems") || !strcmp(k, "minimum") ||
                   !strcmp(k, "minProperties")) {
            if (json_is_number(av) && json_is_number(bv) && json_number_value(bv) > json_number_value(av))
                json_object_set(m, k, bv);
        } else if (!strcmp(k, "maxLength") || !strcmp(k, "maxItems") || !strcmp(k, "maximum") ||
                   !strcmp(k, "maxProperties")) {
            if (json_is_number(av) && json_is_number(bv) && json_number_value(bv) < json_number_value(av))
                json_object_set(m, k, bv);
        } else if (!strcmp(k, "additionalProperties") || !strcmp(k, "items") || !strcmp(k, "additionalItems")) {
            if (json_is_false(av) || json_is_false(bv))
                json_object_set_new(m, k, json_false());
            else if (json_is_true(av))
                json_object_set(m, k, bv);
            else if (!json_is_true(bv))
                json_object_set_new(m, k, all_of2(av, bv));
        } else if (in(ASSERTING, k) || in(UNSUPPORTED, k)) {
            gr_sc_fail(c, ptr, k, "allOf branches with different '%s' cannot be merged", k);
            return NULL;
        }
    }
    /* additionalProperties of one side judge the properties only the other side names:
     * false forbids them, a schema applies to them too (an object must pass both) */
    json_t *mp = json_object_get(m, "properties");
    for (int side = 0; side < 2 && json_is_object(mp); side++) {
        json_t *x = side ? b : a, *xap = json_object_get(x, "additionalProperties");
        json_t *xp = json_object_get(x, "properties"), *xpp = json_object_get(x, "patternProperties");
        if (!xap || json_is_true(xap) || xpp)
            continue;
        const char *pk;
        json_t *pv;
        void *tmp;
        json_object_foreach_safe(mp, tmp, pk, pv) {
            if (json_object_get(xp, pk))
                continue;
            json_object_set_new(mp, pk, json_is_false(xap) ? json_false() : all_of2(pv, xap));
        }
    }
    return m;
}

/* s with its $ref and allOf folded in (s itself when it has neither) */
json_t *gr_sc_flatten(gr_sc *c, json_t *s, const char *ptr)
{
    if (++c->depth > 64) {
        gr_sc_fail(c, ptr, "$ref", "references nested too deep (a recursive $ref with sibling keywords?)");
        return NULL;
    }
    json_t *ref = json_object_get(s, "$ref"), *all = json_object_get(s, "allOf");
    json_t *out = s;
    if (ref && c->ref_alone) {   /* drafts 3-7: the reference alone */
        json_t *t = json_is_string(ref) ? gr_sc_resolve(c, json_string_value(ref), ptr) : NULL;
        if (!json_is_string(ref))
            gr_sc_fail(c, ptr, "$ref", "$ref must be a string");
        out = t && json_is_object(t) ? gr_sc_flatten(c, t, ptr) : t;
        c->depth--;
        return out;
    }
    if (ref || all) {
        out = gr_sc_own(c, json_deep_copy(s));
        json_object_del(out, "$ref");
        json_object_del(out, "allOf");
        if (ref) {
            if (!json_is_string(ref)) {
                c->depth--;
                return gr_sc_fail(c, ptr, "$ref", "$ref must be a string"), NULL;
            }
            json_t *t = gr_sc_resolve(c, json_string_value(ref), ptr);
            if (!t || (t = json_is_object(t) ? gr_sc_flatten(c, t, ptr) : t) == NULL) {
                c->depth--;
                return NULL;
            }
            out = gr_sc_merge(c, t, out, ptr);
        }
        if (out && all) {
            if (!json_is_array(all)) {
                c->depth--;
                return gr_sc_fail(c, ptr, "allOf", "allOf must be an array"), NULL;
            }
            size_t i;
            json_t *x;
            json_array_foreach(all, i, x) {
                char sp[PTR_MAX];
                idx_ptr(sp, ptr, "allOf", i);
                json_t *fx = json_is_object(x) ? gr_sc_flatten(c, x, sp) : x;
                if (!fx || !(out = gr_sc_merge(c, out, fx, sp)))
                    break;
            }
        }
    }
    c->depth--;
    return out;
}

/* ------------------------------------------------------- oneOf exclusivity -- */

static int value_bits(json_t *x)
{
    return json_is_object(x) ? GR_T_OBJ : json_is_array(x) ? GR_T_ARR : json_is_string(x) ? GR_T_STR
           : json_is_integer(x) ? GR_T_INT : json_is_real(x) ? GR_T_NUM : json_is_boolean(x) ? GR_T_BOOL : GR_T_NULL;
}

/* the types an instance of s can have (s flattened: no $ref, no allOf) */
int gr_sc_type_bits(json_t *s)
{
    if (!json_is_object(s))
        return json_is_false(s) ? 0 : 127;
    json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (cn)
        return value_bits(cn);
    if (json_is_array(en)) {
        int b = 0;
        size_t i;
        json_t *x;
        json_array_foreach(en, i, x) b |= value_bits(x);
        return b;
    }
    json_t *t = json_object_get(s, "type");
    if (!t)
        return 127;
    static const char *const N[] = {"object", "array", "string", "number", "integer", "boolean", "null"};
    json_t *ta = gr_sc_types_of(t);
    int b = 0;
    size_t i;
    json_t *x;
    json_array_foreach(ta, i, x) {
        for (int k = 0; k < 7; k++)
            if (json_is_string(x) && !strcmp(json_string_value(x), N[k]))
                b |= 1 << k;
    }
    json_decref(ta);
    return b;
}

/* the values s allows when it lists them (enum/const), else NULL (borrowed or owned) */
static json_t *listed(gr_sc *c, json_t *s)
{
    json_t *cn = json_object_get(s, "const");
    if (cn) {
        json_t *a = gr_sc_own(c, json_array());
        json_array_append(a, cn);
        return a;
    }
    json_t *en = json_object_get(s, "enum");
    return json_is_array(en) ? en : NULL;
}

static int values_disjoint(json_t *a, json_t *b)
{
    size_t i, j;
    json_t *x, *y;
    json_array_foreach(a, i, x) {
        json_array_foreach(b, j, y) {
            if (json_equal(x, y))
                return 0;
        }
    }
    return 1;
}

int gr_sc_in_required(json_t *s, const char *k)
{
    size_t i;
    json_t *x;
    json_array_foreach(json_object_get(s, "required"), i, x) {
        if (json_is_string(x) && !strcmp(json_string_value(x), k))
            return 1;
    }
    return 0;
}

/* 1 when no instance can match both a and b: by types, by listed values, or by a
 * required property whose listed values differ (a discriminator) */
int gr_sc_disjoint(gr_sc *c, json_t *a, json_t *b)
{
    int ta = gr_sc_type_bits(a), tb = gr_sc_type_bits(b);
    if (ta & GR_T_NUM)
        ta |= GR_T_INT;
    if (tb & GR_T_NUM)
        tb |= GR_T_INT;
    if (!(ta & tb))
        return 1;
    json_t *la = json_is_object(a) ? listed(c, a) : NULL, *lb = json_is_object(b) ? listed(c, b) : NULL;
    if (la && lb && values_disjoint(la, lb))
        return 1;
    if (!json_is_object(a) || !json_is_object(b) || (ta & tb) != GR_T_OBJ)
        return 0;
    const char *k;
    json_t *pa;
    json_object_foreach(json_object_get(a, "properties"), k, pa) {
        json_t *pb = json_object_get(json_object_get(b, "properties"), k);
        if (!pb || !gr_sc_in_required(a, k) || !gr_sc_in_required(b, k) || !json_is_object(pa) || !json_is_object(pb))
            continue;
        json_t *va = listed(c, pa), *vb = listed(c, pb);
        if (va && vb && values_disjoint(va, vb))
            return 1;
        if (!(gr_sc_type_bits(pa) & gr_sc_type_bits(pb)))
            return 1;
    }
    return 0;
}

/* oneOf over object branches equal but for `required` (R_i): branch i matches alone when,
 * for every other j, some key of R_j outside R_i is absent.  Each branch becomes the
 * variants that forbid one such key per other branch (at most 64).  0 done (rules of nt
 * added), 1 not this shape, -1 error. */
