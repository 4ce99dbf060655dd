/* gr_regex.c - ECMA-262 regular expressions (the syntax JSON Schema's `pattern` uses, and
 * the regex constraint) parsed to a small tree and emitted into the lexer NFA.
 *
 * Supported: literals (UTF-8), . \d \D \w \W \s \S, classes [...] with ranges, negation and
 * those escapes, \t \n \r \f \v \0 \xHH \uHHHH \cX and escaped punctuation, groups (...)
 * (?:...) (?<name>...), alternation, * + ? {n} {n,} {n,m} (lazy forms match the same
 * language), ^ and $ at the ends of a top-level alternative.  Refused with the offset:
 * lookaround, backreferences, \b \B word boundaries, \p{..} classes, anchors inside.
 * A regex's language is what matters here (not which match a search finds), so lazy and
 * greedy quantifiers are the same.  docs/structured-outputs.md lists this too.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/grammar/gr_internal.h"

enum { RX_CS, RX_CAT, RX_ALT, RX_REP, RX_EMPTY, RX_BOL, RX_EOL };

typedef struct rx_node {
    int kind, a, b, min, max;
    gr_cset cs;
} rx_node;

typedef struct rx {
    const char *s;
    size_t n, i;
    rx_node *nd;
    int n_nd, cap_nd;
    v4_error *err;
    int depth;
} rx;

static int fail(rx *r, const char *what)
{
    return v4_err_set(r->err, V4_ERR_INVALID, "regex", "%s at offset %zu of the regex", what, r->i);
}

static int node(rx *r, int kind)
{
    if (r->n_nd == r->cap_nd) {
        int nc = r->cap_nd ? r->cap_nd * 2 : 32;
        rx_node *q = realloc(r->nd, (size_t)nc * sizeof *q);
        if (!q)
            return v4_err_set(r->err, V4_ERR_NOMEM, "regex", "out of memory");
        r->nd = q;
        r->cap_nd = nc;
    }
    memset(&r->nd[r->n_nd], 0, sizeof *r->nd);
    r->nd[r->n_nd].kind = kind;
    r->nd[r->n_nd].a = r->nd[r->n_nd].b = -1;
    return r->n_nd++;
}

static int bin(rx *r, int kind, int a, int b)
{
    if (a < 0)
        return b;
    int k = node(r, kind);
    if (k < 0)
        return -1;
    r->nd[k].a = a;
    r->nd[k].b = b;
    return k;
}

/* decode one UTF-8 code point at r->i */
static int utf8_next(rx *r, uint32_t *cp)
{
    const unsigned char *p = (const unsigned char *)r->s + r->i;
    size_t left = r->n - r->i;
    unsigned c = p[0];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (!len || (size_t)len > left)
        return fail(r, "invalid UTF-8");
    uint32_t v = len == 1 ? c : c & (0x7F >> len);
    for (int k = 1; k < len; k++) {
        if ((p[k] & 0xC0) != 0x80)
            return fail(r, "invalid UTF-8");
        v = (v << 6) | (p[k] & 0x3F);
    }
    r->i += (size_t)len;
    *cp = v;
    return 0;
}

static int add_class(gr_cset *s, int which)   /* d w s */
{
    int rc = 0;
    if (which == 'd')
        return gr_cset_add(s, '0', '9');
    if (which == 'w')
        return gr_cset_add(s, '0', '9') | gr_cset_add(s, 'A', 'Z') | gr_cset_add(s, 'a', 'z') | gr_cset_add(s, '_', '_');
    static const uint32_t ws[][2] = {{9, 13},         {32, 32},         {0xA0, 0xA0},     {0x1680, 0x1680},
                                     {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                                     {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
    for (size_t k = 0; k < sizeof ws / sizeof *ws; k++)
        rc |= gr_cset_add(s, ws[k][0], ws[k][1]);
    return rc;
}

static int hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* After a backslash: a class escape (sets *cls to d/D/w/W/s/S) or one code point. */
static int escape(rx *r, int in_class, uint32_t *cp, int *cls)
{
    *cls = 0;
    if (r->i >= r->n)
        return fail(r, "a trailing backslash");
    char c = r->s[r->i++];
    switch (c) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S':
        *cls = c;
        return 0;
    case 't': *cp = 9; return 0;
    case 'n': *cp = 10; return 0;
    case 'v': *cp = 11; return 0;
    case 'f': *cp = 12; return 0;
    case 'r': *cp = 13; return 0;
    case '0':
        if (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9')
            return fail(r, "an octal escape");
        *cp = 0;
        return 0;
    case 'b':
        if (in_class) {
            *cp = 8;
            return 0;
        }
        return fail(r, "a word boundary (\\b) is not supported");
    case 'B':
        return fail(r, "a word boundary (\\B) is not supported");
    case 'c':
        if (r->i < r->n && ((r->s[r->i] | 32) >= 'a' && (r->s[r->i] | 32) <= 'z')) {
            *cp = (uint32_t)(r->s[r->i++] & 31);
            return 0;
        }
        *cp = '\\';
        r->i--;
        return 0;
    case 'x': case 'u': {
        int nd = c == 'x' ? 2 : 4;
        if (c == 'u' && r->i < r->n && r->s[r->i] == '{')
            return fail(r, "\\u{...} (the u flag) is not supported");
        uint32_t v = 0;
        for (int k = 0; k < nd; k++) {
            int h = r->i < r->n ? hexval(r->s[r->i]) : -1;
            if (h < 0)
                return fail(r, c == 'x' ? "\\x needs two hex digits" : "\\u needs four hex digits");
            v = v * 16 + (uint32_t)h;
            r->i++;
        }
        if (v >= 0xD800 && v <= 0xDFFF)
            return fail(r, "a surrogate code point (\\uD800-\\uDFFF)");
        *cp = v;
        return 0;
    }
    case 'p': case 'P':
        return fail(r, "Unicode property classes (\\p{...}) are not supported");
    case 'k':
        return fail(r, "named backreferences are not supported");
    default:
        if (c >= '1' && c <= '9')
            return fail(r, "backreferences are not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
            return fail(r, "an unknown escape");
        r->i--;
        return utf8_next(r, cp);
    }
}

static int class_into(gr_cset *s, int cls)
{
    int lower = cls | 32;
    if (cls == lower)
        return add_class(s, lower);
    gr_cset t = {0}, neg;
    int rc = add_class(&t, lower);
    gr_cset_norm(&t);
    rc |= gr_cset_negate(&t, &neg);
    for (int k = 0; !rc && k < neg.n; k++)
        rc |= gr_cset_add(s, neg.r[2 * k], neg.r[2 * k + 1]);
    gr_cset_free(&t);
    gr_cset_free(&neg);
    return rc;
}

static int parse_bracket(rx *r)
{
    int k = node(r, RX_CS);
    if (k < 0)
        return -1;
    gr_cset s = {0};
    int neg = 0, first = 1, rc = 0;
    if (r->i < r->n && r->s[r->i] == '^') {
        neg = 1;
        r->i++;
    }
    for (;;) {
        if (r->i >= r->n) {
            rc = fail(r, "an unterminated character class");
            break;
        }
        if (r->s[r->i] == ']' && !first) {
            r->i++;
            break;
        }
        if (r->s[r->i] == ']' && first) {   /* ECMA: [] matches nothing, [^] anything */
            r->i++;
            break;
        }
        first = 0;
        uint32_t lo;
        int cls = 0;
        if (r->s[r->i] == '\\') {
            r->i++;
            if (escape(r, 1, &lo, &cls)) {
                rc = -1;
                break;
            }
        } else if (utf8_next(r, &lo)) {
            rc = -1;
            break;
        }
        if (cls) {
            if (class_into(&s, cls))
                rc = v4_err_set(r->err, V4_ERR_NOMEM, "regex", "out of memory");
            if (rc)
                break;
            continue;
        }
        uint32_t hi = lo;
        if (r->i + 1 < r->n && r->s[r->i] == '-' && r->s[r->i + 1] != ']') {
            r->i++;
            int cls2 = 0;
            if (r->s[r->i] == '\\') {
                r->i++;
                if (escape(r, 1, &hi, &cls2)) {
                    rc = -1;
                    break;
                }
            } else if (utf8_next(r, &hi)) {
                rc = -1;
                break;
            }
            if (cls2) {
                rc = fail(r, "a class escape as a range end");
                break;
            }
            if (hi < lo) {
                rc = fail(r, "a range out of order");
                break;
            }
        }
        if (gr_cset_add(&s, lo, hi)) {
            rc = v4_err_set(r->err, V4_ERR_NOMEM, "regex", "out of memory");
            break;
        }
    }
    if (rc) {
        gr_cset_free(&s);
        return -1;
    }
    gr_cset_norm(&s);
    if (neg) {
        gr_cset t;
        if (gr_cset_negate(&s, &t)) {
            gr_cset_free(&s);
            return v4_err_set(r->err, V4_ERR_NOMEM, "regex", "out of memory");
        }
        gr_cset_free(&s);
        s = t;
    }
    r->nd[k].cs = s;
    return k;
}

static int parse_alt(rx *r);

static int parse_int(rx *r, int *v)
{
    if (r->i >= r->n || r->s[r->i] < '0' || r->s[r->i] > '9')
        return -1;
    long x = 0;
    while (r->i < r->n && r->s[r->i] >= '0' && r->s[r->i] <= '9') {
        x = x * 10 + (r->s[r->i++] - '0');
        if (x > 1000000)
            x = 1000000;
    }
    *v = (int)x;
    return 0;
}

static int parse_atom(rx *r)
{
    char c = r->s[r->i];
    if (c == '(') {
        r->i++;
        if (r->i < r->n && r->s[r->i] == '?') {
            if (r->i + 1 < r->n && r->s[r->i + 1] == ':') {
                r->i += 2;
            } else if (r->i + 2 < r->n && r->s[r->i + 1] == '<' && r->s[r->i + 2] != '=' && r->s[r->i + 2] != '!') {
                const char *e = memchr(r->s + r->i, '>', r->n - r->i);
                if (!e)
                    return fail(r, "an unterminated group name");
                r->i = (size_t)(e - r->s) + 1;
            } else {
                return fail(r, "lookaround assertions are not supported");
            }
        }
        if (++r->depth > 200)
            return fail(r, "groups nested too deep");
        int k = parse_alt(r);
        r->depth--;
        if (k < 0)
            return -1;
        if (r->i >= r->n || r->s[r->i] != ')')
            return fail(r, "an unclosed group");
        r->i++;
        return k;
    }
    if (c == '[') {
        r->i++;
        return parse_bracket(r);
    }
    if (c == '^' || c == '$') {
        r->i++;
        return node(r, c == '^' ? RX_BOL : RX_EOL);
    }
    int k = node(r, RX_CS);
    if (k < 0)
        return -1;
    gr_cset *s = &r->nd[k].cs;
    int rc = 0;
    if (c == '.') {
        r->i++;
        rc = gr_cset_add(s, 0, 9) | gr_cset_add(s, 11, 12) | gr_cset_add(s, 14, 0x2027) | gr_cset_add(s, 0x202A, 0x10FFFF);
    } else if (c == '\\') {
        r->i++;
        uint32_t cp;
        int cls;
        if (escape(r, 0, &cp, &cls))
            return -1;
        rc = cls ? class_into(s, cls) : gr_cset_add(s, cp, cp);
    } else if (c == '*' || c == '+' || c == '?') {
        return fail(r, "a quantifier with nothing before it");
    } else {
        uint32_t cp;
        if (utf8_next(r, &cp))
            return -1;
        rc = gr_cset_add(s, cp, cp);
    }
    if (rc)
        return v4_err_set(r->err, V4_ERR_NOMEM, "regex", "out of memory");
    gr_cset_norm(s);
    return k;
}

static int parse_rep(rx *r)
{
    int a = parse_atom(r);
    if (a < 0)
        return -1;
    for (;;) {
        if (r->i >= r->n)
            return a;
        char c = r->s[r->i];
        int min, max;
        size_t save = r->i;
        if (c == '*') {
            min = 0, max = -1;
            r->i++;
        } else if (c == '+') {
            min = 1, max = -1;
            r->i++;
        } else if (c == '?') {
            min = 0, max = 1;
            r->i++;
        } else if (c == '{') {
            r->i++;
            if (parse_int(r, &min)) {
                r->i = save;   /* a literal '{' (Annex B) */
                return a;
            }
            max = min;
            if (r->i < r->n && r->s[r->i] == ',') {
                r->i++;
                if (parse_int(r, &max))
                    max = -1;
            }
            if (r->i >= r->n || r->s[r->i] != '}') {
                r->i = save;
                return a;
            }
            r->i++;
            if (max >= 0 && max < min)
                return fail(r, "a {n,m} with m < n");
            if (min > GR_MAX_REPEAT || max > GR_MAX_REPEAT)
                return v4_err_set(r->err, V4_ERR_RANGE, "regex", "repetition {%d,%d} over the engine's bound %d", min,
                                  max, GR_MAX_REPEAT);
        } else {
            return a;
        }
        if (r->i < r->n && r->s[r->i] == '?')
            r->i++;   /* lazy: the same language */
        int k = r->nd[a].kind;
        if (k == RX_BOL || k == RX_EOL)
            return fail(r, "a quantified anchor");
        int q = node(r, RX_REP);
        if (q < 0)
            return -1;
        r->nd[q].a = a;
        r->nd[q].min = min;
        r->nd[q].max = max;
        a = q;
    }
}

static int parse_cat(rx *r)
{
    int acc = -1;
    while (r->i < r->n && r->s[r->i] != '|' && r->s[r->i] != ')') {
        int k = parse_rep(r);
        if (k < 0)
            return -1;
        acc = bin(r, RX_CAT, acc, k);
        if (acc < 0)
            return -1;
    }
    return acc < 0 ? node(r, RX_EMPTY) : acc;
}

static int parse_alt(rx *r)
{
    int a = parse_cat(r);
    while (a >= 0 && r->i < r->n && r->s[r->i] == '|') {
        r->i++;
        int b = parse_cat(r);
        if (b < 0)
            return -1;
        a = bin(r, RX_ALT, a, b);
    }
    return a;
}

/* ---------------------------------------------------------------- emission -- */
typedef struct emit_ctx {
    gr_nfa *n;
    rx *r;
    int json;
} emit_ctx;

static int emit(emit_ctx *e, int k, gr_frag *out);

static int emit_empty(emit_ctx *e, gr_frag *out)
{
    int s = gr_nfa_state(e->n, e->r->err);
    if (s < 0)
        return -1;
    out->start = out->end = s;
    return 0;
}

static int emit(emit_ctx *e, int k, gr_frag *out)
{
    rx_node *x = &e->r->nd[k];
    v4_error *err = e->r->err;
    switch (x->kind) {
    case RX_CS:
        return gr_emit_cset(e->n, &x->cs, e->json, out, err);
    case RX_EMPTY:
        return emit_empty(e, out);
    case RX_BOL:
    case RX_EOL:
        return v4_err_set(err, V4_ERR_INVALID, "regex", "an anchor (%c) inside the regex is not supported",
                          x->kind == RX_BOL ? '^' : '$');
    case RX_CAT: {
        gr_frag a, b;
        if (emit(e, x->a, &a) || emit(e, x->b, &b) || gr_nfa_eps(e->n, a.end, b.start, err))
            return -1;
        out->start = a.start;
        out->end = b.end;
        return 0;
    }
    case RX_ALT: {
        gr_frag a, b;
        int s = gr_nfa_state(e->n, err), t = gr_nfa_state(e->n, err);
        if (s < 0 || t < 0 || emit(e, x->a, &a) || emit(e, x->b, &b) || gr_nfa_eps(e->n, s, a.start, err) ||
            gr_nfa_eps(e->n, s, b.start, err) || gr_nfa_eps(e->n, a.end, t, err) || gr_nfa_eps(e->n, b.end, t, err))
            return -1;
        out->start = s;
        out->end = t;
        return 0;
    }
    case RX_REP: {
        int min = x->min, max = x->max, sub = x->a;
        int s = gr_nfa_state(e->n, err);
        if (s < 0)
            return -1;
        int cur = s;
        for (int i = 0; i < min; i++) {
            gr_frag f;
            if (emit(e, sub, &f) || gr_nfa_eps(e->n, cur, f.start, err))
                return -1;
            cur = f.end;
        }
        int t = gr_nfa_state(e->n, err);
        if (t < 0 || gr_nfa_eps(e->n, cur, t, err))
            return -1;
        if (max < 0) {
            gr_frag f;
            if (emit(e, sub, &f) || gr_nfa_eps(e->n, cur, f.start, err) || gr_nfa_eps(e->n, f.end, cur, err))
                return -1;
        } else {
            for (int i = min; i < max; i++) {
                gr_frag f;
                if (emit(e, sub, &f) || gr_nfa_eps(e->n, cur, f.start, err) || gr_nfa_eps(e->n, f.end, t, err))
                    return -1;
                cur = f.end;
            }
        }
        out->start = s;
        out->end = t;
        return 0;
    }
    }
    return v4_err_set(err, V4_ERR_INTERNAL, "regex", "bad node");
}

/* One top-level alternative with its anchors at its ends (search mode). */
static int emit_branch(emit_ctx *e, int k, int mode, gr_frag *out)
{
    /* flatten the CAT chain (left-leaning) into its items */
    int items[4096], n = 0, stack[4096], sp = 0;
    stack[sp++] = k;
    while (sp) {
        int x = stack[--sp];
        if (e->r->nd[x].kind == RX_CAT) {
            if (sp + 2 > 4096)
                return v4_err_set(e->r->err, V4_ERR_RANGE, "regex", "regex too long");
            stack[sp++] = e->r->nd[x].b;
            stack[sp++] = e->r->nd[x].a;
        } else {
            if (n == 4096)
                return v4_err_set(e->r->err, V4_ERR_RANGE, "regex", "regex too long");
            items[n++] = x;
        }
    }
    int lo = 0, hi = n, bol = 0, eol = 0;
    while (lo < hi && e->r->nd[items[lo]].kind == RX_BOL)
        lo++, bol = 1;
    while (hi > lo && e->r->nd[items[hi - 1]].kind == RX_EOL)
        hi--, eol = 1;
    int s = gr_nfa_state(e->n, e->r->err);
    if (s < 0)
        return -1;
    int cur = s;
    gr_frag any;
    if (mode == GR_RX_SEARCH && !bol) {
        if (gr_emit_any_len(e->n, e->json, 0, -1, &any, e->r->err) || gr_nfa_eps(e->n, cur, any.start, e->r->err))
            return -1;
        cur = any.end;
    }
    for (int i = lo; i < hi; i++) {
        gr_frag f;
        if (emit(e, items[i], &f) || gr_nfa_eps(e->n, cur, f.start, e->r->err))
            return -1;
        cur = f.end;
    }
    if (mode == GR_RX_SEARCH && !eol) {
        int32_t lo = e->n->n_st;
        if (gr_emit_any_len(e->n, e->json, 0, -1, &any, e->r->err) || gr_nfa_eps(e->n, cur, any.start, e->r->err))
            return -1;
        cur = any.end;
        if (e->n->absorb_on) {   /* the match is found: whatever follows keeps it */
            if (e->n->n_absorb + 2 > e->n->cap_absorb) {
                int32_t nc = e->n->cap_absorb ? e->n->cap_absorb * 2 : 16;
                int32_t *q = realloc(e->n->absorb, (size_t)nc * sizeof *q);
                if (!q)
                    return v4_err_set(e->r->err, V4_ERR_NOMEM, "regex", "out of memory");
                e->n->absorb = q;
                e->n->cap_absorb = nc;
            }
            e->n->absorb[e->n->n_absorb++] = lo;
            e->n->absorb[e->n->n_absorb++] = e->n->n_st;
        }
    }
    out->start = s;
    out->end = cur;
    return 0;
}

int gr_regex_emit(gr_nfa *n, const char *src, size_t len, int mode, int json, gr_frag *out, v4_error *err)
{
    rx r = {.s = src, .n = len, .err = err};
    int root = parse_alt(&r);
    int rc = root < 0 ? -1 : 0;
    if (!rc && r.i < r.n)
        rc = fail(&r, "an unmatched ')'");
    if (!rc) {
        emit_ctx e = {.n = n, .r = &r, .json = json};
        /* the top-level alternatives, each with its own anchors */
        int alts[1024], na = 0, stack[1024], sp = 0;
        stack[sp++] = root;
        while (sp && !rc) {
            int x = stack[--sp];
            if (r.nd[x].kind == RX_ALT) {
                if (sp + 2 > 1024)
                    rc = v4_err_set(err, V4_ERR_RANGE, "regex", "too many alternatives");
                else {
                    stack[sp++] = r.nd[x].b;
                    stack[sp++] = r.nd[x].a;
                }
            } else if (na == 1024) {
                rc = v4_err_set(err, V4_ERR_RANGE, "regex", "too many alternatives");
            } else {
                alts[na++] = x;
            }
        }
        int s = rc ? -1 : gr_nfa_state(n, err), t = rc ? -1 : gr_nfa_state(n, err);
        if (s < 0 || t < 0)
            rc = -1;
        for (int i = 0; !rc && i < na; i++) {
            gr_frag f = {0};
            rc = emit_branch(&e, alts[i], mode, &f) || gr_nfa_eps(n, s, f.start, err) || gr_nfa_eps(n, f.end, t, err)
                     ? -1
                     : 0;
        }
        out->start = s;
        out->end = t;
    }
    for (int i = 0; i < r.n_nd; i++)
        gr_cset_free(&r.nd[i].cs);
    free(r.nd);
    return rc;
}
