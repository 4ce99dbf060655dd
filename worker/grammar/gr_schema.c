/* gr_schema.c - JSON Schema -> grammar: a nonterminal per (sub)schema, memoized by the
 * schema node so that $ref recursion becomes grammar recursion; allOf and sibling keywords
 * merged; anyOf/oneOf as alternatives; objects with their properties in the schema's
 * order (required ones mandatory, others optional, extra keys after them when allowed);
 * arrays with prefix items and counted bounds.  A keyword that changes which instances
 * are valid and cannot be enforced is a compile error naming it and its JSON pointer.
 * References and merging: gr_schema_merge.c; scalars: gr_schema_types.c.  docs/grammar.md
 * lists what is supported.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/grammar/gr_compile.h"
#include "worker/grammar/gr_schema_internal.h"
/* ----------------------------------------------------------------- memo -- */
static int memo_get(gr_sc *c, json_t *s)
{
    for (int i = c->n_memo - 1; i >= 0; i--)
        if (c->memo[i].schema == s)
            return c->memo[i].nt;
    return -1;
}

static int memo_put(gr_sc *c, json_t *s, int nt)
{
    if (c->n_memo == c->cap_memo) {
        int nc = c->cap_memo ? c->cap_memo * 2 : 64;
        gr_sc_memo *q = realloc(c->memo, (size_t)nc * sizeof *q);
        if (!q)
            return v4_err_set(c->err, V4_ERR_NOMEM, "grammar", "out of memory");
        c->memo = q;
        c->cap_memo = nc;
    }
    c->memo[c->n_memo++] = (gr_sc_memo){s, nt};
    return 0;
}

/* ------------------------------------------------------------ structure -- */
static int value(gr_sc *c, json_t *s, const char *ptr);

static int rule(gr_sc *c, int lhs, int n, ...)
{
    int32_t syms[16];
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++)
        syms[i] = va_arg(ap, int32_t);
    va_end(ap);
    return gr_rule(c->b, lhs, syms, n, c->err);
}

static int any_value(gr_sc *c)
{
    if (c->nt_any >= 0)
        return c->nt_any;
    int v = gr_nt(c->b, "any", c->err), o = gr_nt(c->b, "any-object", c->err), m = gr_nt(c->b, "any-members", c->err);
    int a = gr_nt(c->b, "any-array", c->err), e = gr_nt(c->b, "any-elements", c->err);
    if (v < 0 || o < 0 || m < 0 || a < 0 || e < 0)
        return -1;
    c->nt_any = v;
    if (rule(c, v, 1, o) || rule(c, v, 1, a) || rule(c, v, 1, c->lx_str) || rule(c, v, 1, c->lx_num) ||
        rule(c, v, 1, c->lx_true) || rule(c, v, 1, c->lx_false) || rule(c, v, 1, c->lx_null) ||
        rule(c, o, 2, c->lx_lbrace, c->lx_rbrace) || rule(c, o, 3, c->lx_lbrace, m, c->lx_rbrace) ||
        rule(c, m, 3, c->lx_str, c->lx_colon, v) || rule(c, m, 5, m, c->lx_comma, c->lx_str, c->lx_colon, v) ||
        rule(c, a, 2, c->lx_lbrack, c->lx_rbrack) || rule(c, a, 3, c->lx_lbrack, e, c->lx_rbrack) ||
        rule(c, e, 1, v) || rule(c, e, 3, e, c->lx_comma, v))
        return -1;
    return v;
}

static int sub_value(gr_sc *c, json_t *s, const char *ptr)   /* absent or true: any */
{
    if (!s || json_is_true(s))
        return any_value(c);
    return value(c, s, ptr);
}

static int object_nt(gr_sc *c, json_t *s, const char *ptr)
{
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *ap = json_object_get(s, "additionalProperties"), *pp = json_object_get(s, "patternProperties");
    if (props && !json_is_object(props))
        return gr_sc_fail(c, ptr, "properties", "properties must be an object");
    if (req && !json_is_array(req))
        return gr_sc_fail(c, ptr, "required", "required must be an array");
    /* the named keys: properties in order, then required names without a schema */
    int n = 0, cap = (int)(props ? json_object_size(props) : 0) + (int)(req ? json_array_size(req) : 0);
    const char **keys = calloc((size_t)cap + 1, sizeof *keys);
    json_t **sch = calloc((size_t)cap + 1, sizeof *sch);
    char *isreq = calloc((size_t)cap + 1, 1);
    int rc = !keys || !sch || !isreq ? v4_err_set(c->err, V4_ERR_NOMEM, "grammar", "out of memory") : 0;
    const char *k;
    json_t *v;
    if (!rc && props)
        json_object_foreach(props, k, v) {
            keys[n] = k;
            sch[n++] = v;
        }
    size_t i;
    json_array_foreach(req, i, v) {
        if (rc)
            break;
        if (!json_is_string(v)) {
            rc = gr_sc_fail(c, ptr, "required", "required must list strings");
            break;
        }
        int j = 0;
        while (j < n && strcmp(keys[j], json_string_value(v)))
            j++;
        if (j == n) {   /* required, not in properties: a named key after them, with the schema
                         * of the patternProperties it matches, else additionalProperties' */
            const char *rk = json_string_value(v);
            json_t *m = json_array();
            const char *pk;
            json_t *pv;
            json_object_foreach(json_is_object(pp) ? pp : NULL, pk, pv) {
                int hit = gr_regex_matches(pk, strlen(pk), GR_RX_SEARCH, rk, strlen(rk), c->err);
                if (hit < 0) {
                    rc = gr_sc_where(c, ptr, "patternProperties");
                    break;
                }
                if (hit)
                    json_array_append(m, pv);
            }
            json_t *rs = json_array_size(m) == 1 ? json_incref(json_array_get(m, 0))
                         : json_array_size(m) ? json_pack("{sO}", "allOf", m)
                         : ap ? json_incref(ap) : json_true();
            json_decref(m);
            keys[n] = rk;
            sch[n++] = gr_sc_own(c, rs);   /* false when nothing admits it: the object is pruned */
            if (rc)
                break;
        }
        isreq[j] = 1;
    }
    int nreq = 0;
    for (int j = 0; j < n; j++)
        nreq += isreq[j];
    json_t *mnp = json_object_get(s, "minProperties"), *mxp = json_object_get(s, "maxProperties");
    if (!rc && mnp && !(gr_sc_count(mnp) >= 0 && gr_sc_count(mnp) <= nreq))
        rc = gr_sc_fail(c, ptr, "minProperties", "minProperties above the number of required properties is not supported");
    if (!rc && mxp && !(gr_sc_count(mxp) >= 0 && json_is_false(ap) && !pp && gr_sc_count(mxp) >= n))
        rc = gr_sc_fail(c, ptr, "maxProperties", "maxProperties is not supported where more properties are possible");
    /* extra members: XL -> X | XL "," X.  A key matching a pattern of patternProperties
     * takes that pattern's schema; any other key (when additionalProperties allows one)
     * matches no pattern and takes additionalProperties' schema; none is a named key. */
    int xl = -1;
    if (!rc && pp && !json_is_object(pp))
        rc = gr_sc_fail(c, ptr, "patternProperties", "patternProperties must be an object");
    int npat = pp ? (int)json_object_size(pp) : 0;
    if (!rc && (npat || !json_is_false(ap))) {
        int x = gr_nt(c->b, "member", c->err);
        xl = gr_nt(c->b, "members", c->err);
        rc = x < 0 || xl < 0 ? -1 : 0;
        const char **pats = calloc((size_t)npat + 1, sizeof *pats);
        int np = 0;
        if (!pats)
            rc = v4_err_set(c->err, V4_ERR_NOMEM, "grammar", "out of memory");
        json_object_foreach(npat ? pp : NULL, k, v) {
            if (rc)
                break;
            char sp[PTR_MAX], sp2[PTR_MAX];
            sub_ptr(sp, ptr, "patternProperties");
            sub_ptr(sp2, sp, k);
            pats[np++] = k;
            int kl = gr_lex_string_vetoed(c->b, k, keys, n, NULL, 0, c->err);
            int vn = kl < 0 ? -1 : sub_value(c, v, sp2);
            rc = kl < 0 ? gr_sc_where(c, sp, k) : vn < 0 ? -1 : rule(c, x, 3, kl, c->lx_colon, vn);
        }
        if (!rc && !json_is_false(ap)) {
            char sp[PTR_MAX];
            sub_ptr(sp, ptr, "additionalProperties");
            int kl = np ? gr_lex_string_vetoed(c->b, NULL, keys, n, pats, np, c->err)
                        : gr_lex_key_except(c->b, keys, n, c->err);
            int vn = kl < 0 ? -1 : sub_value(c, ap, sp);
            rc = kl < 0 ? gr_sc_where(c, ptr, "patternProperties") : vn < 0 ? -1 : rule(c, x, 3, kl, c->lx_colon, vn);
        }
        free(pats);
        if (!rc)
            rc = rule(c, xl, 1, x) || rule(c, xl, 3, xl, c->lx_comma, x) ? -1 : 0;
    }
    /* F_j: nothing written yet, properties j.. to come; C_j: something written */
    int obj = -1;
    if (!rc) {
        int nextF = gr_nt(c->b, "members-end", c->err), nextC = gr_nt(c->b, "members-end-c", c->err);
        rc = nextF < 0 || nextC < 0 || rule(c, nextF, 0) || rule(c, nextC, 0) ? -1 : 0;
        if (!rc && xl >= 0)
            rc = rule(c, nextF, 1, xl) || rule(c, nextC, 2, c->lx_comma, xl) ? -1 : 0;
        for (int j = n - 1; j >= 0 && !rc; j--) {
            char sp[PTR_MAX], sp2[PTR_MAX];
            sub_ptr(sp, ptr, "properties");
            sub_ptr(sp2, sp, keys[j]);
            json_t *ks = json_string(keys[j]);
            char *kd = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL;
            json_decref(ks);
            int kl = kd ? gr_lex_bytes(c->b, kd, strlen(kd), c->err) : -1;
            free(kd);
            if (json_is_false(sch[j]) && !isreq[j])   /* a property that must not appear */
                continue;
            int vn = kl < 0 ? -1 : sub_value(c, sch[j], sp2);
            int F = gr_nt(c->b, keys[j], c->err), C = gr_nt(c->b, keys[j], c->err);
            rc = kl < 0 || vn < 0 || F < 0 || C < 0 ? -1 : 0;
            if (!rc)
                rc = rule(c, F, 4, kl, c->lx_colon, vn, nextC) || rule(c, C, 5, c->lx_comma, kl, c->lx_colon, vn, nextC)
                         ? -1
                         : 0;
            if (!rc && !isreq[j])
                rc = rule(c, F, 1, nextF) || rule(c, C, 1, nextC) ? -1 : 0;
            nextF = F;
            nextC = C;
        }
        obj = rc ? -1 : gr_nt(c->b, "object", c->err);
        if (obj >= 0 && rule(c, obj, 3, c->lx_lbrace, nextF, c->lx_rbrace))
            obj = -1;
    }
    free(keys);
    free(sch);
    free(isreq);
    return rc ? -1 : obj;
}

static int array_nt(gr_sc *c, json_t *s, const char *ptr)
{
    json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    json_t *addl = json_object_get(s, "additionalItems");
    json_t *mn = json_object_get(s, "minItems"), *mx = json_object_get(s, "maxItems");
    json_t *uq = json_object_get(s, "uniqueItems");
    if (uq && !json_is_false(uq))
        return gr_sc_fail(c, ptr, "uniqueItems", "uniqueItems is not supported");
    json_t *rest = items;
    if (json_is_array(items)) {   /* draft 7 tuples */
        prefix = items;
        rest = addl;
    } else if (prefix && !json_is_array(prefix)) {
        return gr_sc_fail(c, ptr, "prefixItems", "prefixItems must be an array");
    }
    int P = prefix ? (int)json_array_size(prefix) : 0;
    long min = 0, max = -1;
    if (mn) {
        if (gr_sc_count(mn) < 0)
            return gr_sc_fail(c, ptr, "minItems", "minItems must be a non-negative integer");
        min = (long)gr_sc_count(mn);
    }
    if (mx) {
        if (gr_sc_count(mx) < 0)
            return gr_sc_fail(c, ptr, "maxItems", "maxItems must be a non-negative integer");
        max = (long)gr_sc_count(mx);
    }
    if (json_is_false(rest) && (max < 0 || max > P))
        max = P;
    if (max >= 0 && max < min)
        return gr_sc_fail(c, ptr, "maxItems", "maxItems is below minItems");
    long base = min > P ? min : P;   /* counted positions before the free tail */
    if (base > GR_MAX_REPEAT || (max >= 0 && max - base > GR_MAX_REPEAT))
        return gr_sc_fail(c, ptr, max >= 0 ? "maxItems" : "minItems", "item counts over the engine's bound of %d",
                          GR_MAX_REPEAT);
    int R = -1;
    if (!json_is_false(rest) && (max < 0 || max > P)) {
        char sp[PTR_MAX];
        snprintf(sp, sizeof sp, "%s/%s", ptr, json_is_array(items) ? "additionalItems" : "items");
        R = sub_value(c, rest, sp);
        if (R < 0)
            return -1;
    }
    /* T_k: the rest after k items. T_k -> eps (k >= min) | "," E_k T_{k+1} (k < max) */
    int next = -1;   /* T_{k+1} */
    if (max < 0) {   /* T_base: RL -> eps | RL "," R (left recursion) */
        next = gr_nt(c->b, "items-rest", c->err);
        if (next < 0 || rule(c, next, 0) || rule(c, next, 3, next, c->lx_comma, R))
            return -1;
    }
    int e0 = -1;
    long k0 = max < 0 ? (base > 0 ? base - 1 : 0) : max;
    for (long k = k0; max != 0 && k >= 0; k--) {
        int E = -1;
        if (k == 0 || max < 0 || k < max) {
            if (k < P) {
                char sp[PTR_MAX];
                idx_ptr(sp, ptr, json_is_array(items) ? "items" : "prefixItems", (size_t)k);
                E = sub_value(c, json_array_get(prefix, (size_t)k), sp);
            } else {
                E = R;
            }
            if (E < 0)
                return -1;
        }
        if (k == 0) {
            e0 = E;
            break;
        }
        int T = gr_nt(c->b, "items", c->err);
        if (T < 0 || (k >= min && rule(c, T, 0)))
            return -1;
        if ((max < 0 || k < max) && rule(c, T, 3, c->lx_comma, E, next))
            return -1;
        next = T;
    }
    int arr = gr_nt(c->b, "array", c->err);
    if (arr < 0)
        return -1;
    if (min == 0 && rule(c, arr, 2, c->lx_lbrack, c->lx_rbrack))
        return -1;
    if (max != 0 && rule(c, arr, 4, c->lx_lbrack, e0, next, c->lx_rbrack))
        return -1;
    return arr;
}

static int one_of_required(gr_sc *c, json_t **fl, size_t n, int nt, const char *ptr)
{
    json_t *rest0 = NULL;
    for (size_t i = 0; i < n; i++) {
        if (!json_is_object(fl[i]) || !(gr_sc_type_bits(fl[i]) & GR_T_OBJ))
            return 1;
        json_t *r = json_deep_copy(fl[i]);
        json_object_del(r, "required");
        int same = !rest0 || json_equal(r, rest0);
        if (!rest0)
            rest0 = r;
        else
            json_decref(r);
        if (!same) {
            json_decref(rest0);
            return 1;
        }
    }
    json_decref(rest0);
    for (size_t i = 0; i < n; i++) {
        /* D_j = R_j \ R_i for every j != i */
        json_t *choices = gr_sc_own(c, json_array());
        int dead = 0;
        for (size_t j = 0; j < n && !dead; j++) {
            if (j == i)
                continue;
            json_t *d = json_array();
            size_t q;
            json_t *x;
            json_array_foreach(json_object_get(fl[j], "required"), q, x) {
                if (json_is_string(x) && !gr_sc_in_required(fl[i], json_string_value(x)))
                    json_array_append(d, x);
            }
            dead = !json_array_size(d);   /* R_j within R_i: i never matches alone */
            json_array_append_new(choices, d);
        }
        if (dead)
            continue;
        size_t variants = 1, m = json_array_size(choices);
        for (size_t j = 0; j < m; j++) {
            variants *= json_array_size(json_array_get(choices, j));
            if (variants > 64)
                return 1;
        }
        for (size_t v = 0; v < variants; v++) {   /* forbid one key of each D_j */
            json_t *s = gr_sc_own(c, json_deep_copy(fl[i]));
            json_t *props = json_object_get(s, "properties");
            if (!json_is_object(props)) {
                props = json_object();
                json_object_set_new(s, "properties", props);
            }
            size_t k = v;
            for (size_t j = 0; j < m; j++) {
                json_t *d = json_array_get(choices, j);
                json_object_set_new(props, json_string_value(json_array_get(d, k % json_array_size(d))), json_false());
                k /= json_array_size(d);
            }
            char sp[PTR_MAX];
            idx_ptr(sp, ptr, "oneOf", i);
            int an = value(c, s, sp);
            if (an < 0 || rule(c, nt, 1, an))
                return -1;
        }
    }
    return 0;
}

/* the rules of nonterminal nt for schema s */
static int body(gr_sc *c, json_t *s, int nt, const char *ptr)
{
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) {
        if (gr_sc_unsupported(k))
            return gr_sc_fail(c, ptr, k, "the keyword '%s' is not supported", k);
    }
    if (json_object_get(s, "$ref") || json_object_get(s, "allOf")) {
        json_t *ref = json_object_get(s, "$ref");
        if (ref && json_is_string(ref) && (c->ref_alone || !json_object_get(s, "allOf"))) {
            json_t *rest = gr_sc_own(c, json_deep_copy(s));
            json_object_del(rest, "$ref");
            if (c->ref_alone || !gr_sc_asserts(rest)) {   /* a plain reference: share the target's nonterminal */
                char sp[PTR_MAX];
                snprintf(sp, sizeof sp, "%.500s", json_string_value(ref));
                json_t *t = gr_sc_resolve(c, json_string_value(ref), ptr);
                int tn = t ? value(c, t, sp) : -1;
                return tn < 0 ? -1 : rule(c, nt, 1, tn);
            }
        }
        json_t *f = gr_sc_flatten(c, s, ptr);
        if (!f)
            return -1;
        if (json_is_object(f))
            return body(c, f, nt, ptr);
        int fv = value(c, f, ptr);
        return fv < 0 ? -1 : rule(c, nt, 1, fv);
    }
    json_t *any = json_object_get(s, "anyOf"), *one = json_object_get(s, "oneOf");
    if (any && one)
        return gr_sc_fail(c, ptr, "oneOf", "anyOf and oneOf in one schema are not supported");
    if (any || one) {
        json_t *alts = any ? any : one;
        const char *kw = any ? "anyOf" : "oneOf";
        if (!json_is_array(alts) || !json_array_size(alts))
            return gr_sc_fail(c, ptr, kw, "%s must be a non-empty array", kw);
        json_t *base = gr_sc_own(c, json_deep_copy(s));
        json_object_del(base, kw);
        int plain = !gr_sc_asserts(base);
        size_t i;
        if (one) {   /* exactly one branch: enforced only where the branches cannot overlap */
            size_t n = json_array_size(alts);
            json_t **fl = calloc(n, sizeof *fl);
            if (!fl)
                return v4_err_set(c->err, V4_ERR_NOMEM, "grammar", "out of memory");
            int rc = 0;
            for (i = 0; i < n && !rc; i++) {
                char sp[PTR_MAX];
                idx_ptr(sp, ptr, kw, i);
                json_t *x = json_array_get(alts, i);
                json_t *fx = json_is_object(x) ? gr_sc_flatten(c, x, sp) : x;
                fl[i] = fx && !plain ? gr_sc_merge(c, base, fx, sp) : fx;
                rc = fl[i] ? 0 : -1;
            }
            size_t oa = 0, ob = 0;
            int overlap = 0;
            for (size_t a = 0; a < n && !rc && !overlap; a++)
                for (size_t bb = a + 1; bb < n && !overlap; bb++)
                    if (!gr_sc_disjoint(c, fl[a], fl[bb]))
                        overlap = 1, oa = a, ob = bb;
            if (!rc && overlap) {   /* branches that differ only in `required`: exclusive by absent keys */
                int r = one_of_required(c, fl, n, nt, ptr);
                if (r == 1)
                    rc = gr_sc_fail(c, ptr, "oneOf",
                                    "oneOf branches %zu and %zu may both match, and exclusivity is not enforced "
                                    "(anyOf would be)",
                                    oa, ob);
                free(fl);
                return r ? -1 : 0;
            }
            free(fl);
            if (rc)
                return -1;
        }
        json_array_foreach(alts, i, v) {
            char sp[PTR_MAX];
            idx_ptr(sp, ptr, kw, i);
            int an;
            if (plain) {
                an = value(c, v, sp);
            } else {
                json_t *fv = json_is_object(v) ? gr_sc_flatten(c, v, sp) : v;
                json_t *m = fv ? gr_sc_merge(c, base, fv, sp) : NULL;
                an = m ? value(c, m, sp) : -1;
            }
            if (an < 0 || rule(c, nt, 1, an))
                return -1;
        }
        return 0;
    }
    /* the types this schema allows */
    static const char *const ALL[] = {"object", "array", "string", "number", "integer", "boolean", "null"};
    json_t *t = json_object_get(s, "type");
    int allow[7];
    for (int j = 0; j < 7; j++)
        allow[j] = t == NULL;
    if (t) {
        json_t *ta = gr_sc_types_of(t);
        if (!json_array_size(ta)) {
            json_decref(ta);
            return gr_sc_fail(c, ptr, "type", "type must be a type name or an array of them");
        }
        size_t i;
        json_array_foreach(ta, i, v) {
            int found = 0;
            for (int j = 0; j < 7; j++)
                if (json_is_string(v) && !strcmp(json_string_value(v), ALL[j]))
                    allow[j] = found = 1;
            if (!found) {
                json_decref(ta);
                return gr_sc_fail(c, ptr, "type", "unknown type");
            }
        }
        json_decref(ta);
    }
    if (allow[3])
        allow[4] = 0;   /* number covers integer */
    json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (en || cn) {
        if (en && !json_is_array(en))
            return gr_sc_fail(c, ptr, "enum", "enum must be an array");
        size_t i, n = en ? json_array_size(en) : 1;
        for (i = 0; i < n; i++) {
            json_t *x = en ? json_array_get(en, i) : cn;
            int ok = json_is_object(x)    ? allow[0]
                     : json_is_array(x)   ? allow[1]
                     : json_is_string(x)  ? allow[2]
                     : json_is_integer(x) ? allow[3] || allow[4]
                     : json_is_real(x)    ? allow[3]
                     : json_is_boolean(x) ? allow[5]
                                          : allow[6];
            if (!ok)
                continue;
            int cv = gr_sc_const(c, x, ptr);
            if (cv < 0 || rule(c, nt, 1, cv))
                return -1;
        }
        return 0;   /* none added: no value fits, the nonterminal is pruned with its users */
    }
    for (int j = 0; j < 7; j++) {
        if (!allow[j])
            continue;
        int sym = j == 0   ? object_nt(c, s, ptr)
                  : j == 1 ? array_nt(c, s, ptr)
                  : j == 2 ? gr_sc_string(c, s, ptr)
                  : j <= 4 ? gr_sc_number(c, s, ptr, j == 4)
                  : j == 5 ? -2
                           : c->lx_null;
        if (sym == -2) {
            if (rule(c, nt, 1, c->lx_true) || rule(c, nt, 1, c->lx_false))
                return -1;
            continue;
        }
        if (sym < 0 || rule(c, nt, 1, sym))
            return -1;
    }
    return 0;
}

static int value(gr_sc *c, json_t *s, const char *ptr)
{
    if (json_is_true(s) || (json_is_object(s) && !json_object_size(s)))
        return any_value(c);
    if (json_is_false(s))   /* no value: a nonterminal without productions (pruned with its users) */
        return gr_nt(c->b, "false", c->err);
    if (!json_is_object(s))
        return gr_sc_fail(c, ptr, NULL, "a schema must be an object or a boolean");
    int nt = memo_get(c, s);
    if (nt >= 0)
        return nt;
    if (++c->depth > 200) {
        c->depth--;
        return gr_sc_fail(c, ptr, NULL, "schema nested too deep");
    }
    nt = gr_nt(c->b, ptr, c->err);
    int rc = nt < 0 || memo_put(c, s, nt) ? -1 : body(c, s, nt, ptr);
    c->depth--;
    return rc ? -1 : nt;
}

int gr_schema_emit(gr_builder *b, json_t *schema, v4_error *err)
{
    gr_sc c = {.b = b, .root = schema, .err = err, .nt_any = -1};
    /* Drafts 3 to 7 say a $ref's sibling keywords are ignored; 2019-09 on, they apply. */
    const char *draft = json_string_value(json_object_get(schema, "$schema"));
    c.ref_alone = draft && (strstr(draft, "draft-03") || strstr(draft, "draft-04") || strstr(draft, "draft-06") ||
                            strstr(draft, "draft-07"));
    c.int_exact = draft && (strstr(draft, "draft-03") || strstr(draft, "draft-04"));
    c.owned = json_array();
    if (!c.owned)
        return v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory");
    static const char *const LIT[] = {"{", "}", "[", "]", ",", ":", "true", "false", "null"};
    int32_t *dst[] = {&c.lx_lbrace, &c.lx_rbrace, &c.lx_lbrack, &c.lx_rbrack, &c.lx_comma,
                      &c.lx_colon,  &c.lx_true,   &c.lx_false,  &c.lx_null};
    int rc = 0;
    for (int i = 0; i < 9 && !rc; i++)
        rc = (*dst[i] = gr_lex_bytes(b, LIT[i], strlen(LIT[i]), err)) < 0;
    if (!rc)
        rc = (c.lx_str = gr_lex_json_string(b, 0, -1, err)) < 0;
    if (!rc) {
        json_t *num = json_object();
        json_object_set_new(num, "type", json_string("number"));
        rc = (c.lx_num = gr_sc_number(&c, num, "", 0)) < 0;
        json_decref(num);
    }
    int top = -1;
    if (!rc) {
        if (!schema) {   /* json_object: any object */
            json_t *o = json_object();
            json_object_set_new(o, "type", json_string("object"));
            json_array_append_new(c.owned, o);
            top = value(&c, o, "");
        } else {
            top = value(&c, schema, "");
        }
        rc = top < 0;
    }
    if (!rc) {
        int st = gr_nt(b, "start", err);
        rc = st < 0 || gr_rule(b, st, (int32_t[]){top}, 1, err);
        b->start = st;
    }
    json_decref(c.owned);
    free(c.memo);
    return rc ? -1 : 0;
}
