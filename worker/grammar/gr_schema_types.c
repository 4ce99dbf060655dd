/* gr_schema_types.c - the scalar parts of the JSON Schema compiler: strings (length,
 * pattern, format), integers and numbers (bounds as exact regexes over decimal text),
 * and constants (enum/const values as lexemes and rules).  gr_schema.c drives it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/strbuf.h"
#include "worker/grammar/gr_schema_internal.h"

/* ------------------------------------------------------- integer ranges -- */
/* fixed-width digit strings a <= b of the same length: a regex for the range */
static void fixed(v4_strbuf *o, const char *a, const char *b, int L)
{
    char t[64];
    if (L == 0)
        return;
    if (a[0] == b[0]) {
        snprintf(t, sizeof t, "%c", a[0]);
        v4_sb_put(o, t);
        fixed(o, a + 1, b + 1, L - 1);
        return;
    }
    int all0 = 1, all9 = 1;
    for (int i = 1; i < L; i++) {
        all0 &= a[i] == '0';
        all9 &= b[i] == '9';
    }
    v4_sb_put(o, "(?:");
    int lo = a[0] - '0', hi = b[0] - '0';
    int first = 1;
    if (!all0) {   /* a[0] followed by a[1..]..9* */
        char nines[64];
        memset(nines, '9', (size_t)L - 1);
        snprintf(t, sizeof t, "%c", a[0]);
        v4_sb_put(o, t);
        fixed(o, a + 1, nines, L - 1);
        lo++;
        first = 0;
    }
    int top = all9 ? hi : hi - 1;
    if (lo <= top) {
        if (!first)
            v4_sb_put(o, "|");
        snprintf(t, sizeof t, "[%d-%d]", lo, top);
        v4_sb_put(o, t);
        if (L > 1) {
            snprintf(t, sizeof t, "[0-9]{%d}", L - 1);
            v4_sb_put(o, t);
        }
        first = 0;
    }
    if (!all9) {   /* b[0] followed by 0*..b[1..] */
        char zeros[64];
        memset(zeros, '0', (size_t)L - 1);
        if (!first)
            v4_sb_put(o, "|");
        snprintf(t, sizeof t, "%c", b[0]);
        v4_sb_put(o, t);
        fixed(o, zeros, b + 1, L - 1);
    }
    v4_sb_put(o, ")");
}

/* non-negative integers in [a, b] (b < 0: unbounded), no leading zeros */
static void nonneg(v4_strbuf *o, uint64_t a, int64_t b)
{
    char sa[32], sb[32], t[64];
    int first = 1;
    v4_sb_put(o, "(?:");
    for (int L = 1; L <= 20; L++) {
        uint64_t lo = L == 1 ? 0 : (uint64_t)pow(10, L - 1), hi = L >= 20 ? UINT64_MAX : (uint64_t)pow(10, L) - 1;
        if (L == 20)
            lo = 10000000000000000000ull;
        if (b >= 0 && lo > (uint64_t)b)
            break;
        if (hi < a)
            continue;
        uint64_t x = a > lo ? a : lo, y = b >= 0 && (uint64_t)b < hi ? (uint64_t)b : hi;
        if (b < 0 && x == lo && L < 20) {   /* every number of L or more digits */
            if (!first)
                v4_sb_put(o, "|");
            snprintf(t, sizeof t, L == 1 ? "[0-9]|[1-9][0-9]+" : "[1-9][0-9]{%d,}", L - 1);
            v4_sb_put(o, t);
            first = 0;
            break;
        }
        snprintf(sa, sizeof sa, "%0*llu", L, (unsigned long long)x);
        snprintf(sb, sizeof sb, "%0*llu", L, (unsigned long long)y);
        if (!first)
            v4_sb_put(o, "|");
        fixed(o, sa, sb, L);
        first = 0;
        if (b < 0 && L < 20 && y == hi) {   /* and every longer number */
            snprintf(t, sizeof t, "|[1-9][0-9]{%d,}", L);
            v4_sb_put(o, t);
            break;
        }
    }
    v4_sb_put(o, ")");
}

/* the regex of the integers in [lo, hi] (has_lo/has_hi: bounded) */
char *gr_int_range_regex(int has_lo, int64_t lo, int has_hi, int64_t hi)
{
    v4_strbuf o = {0};
    v4_sb_put(&o, "(?:");
    int alt = 0;
    /* negatives -n: n in [nmin, nmax] with -n <= hi and -n >= lo */
    if (!has_lo || lo < 0) {
        uint64_t nmin = has_hi && hi < 0 ? (uint64_t)(-(hi + 1)) + 1 : 1;
        int64_t nmax = has_lo ? (int64_t)((uint64_t)(-(lo + 1)) + 1) : -1;   /* -1: unbounded */
        if (nmax < 0 || (uint64_t)nmax >= nmin) {
            v4_sb_put(&o, "-");
            nonneg(&o, nmin, nmax);
            alt = 1;
        }
    }
    if (!has_hi || hi >= 0) {
        uint64_t a = has_lo && lo > 0 ? (uint64_t)lo : 0;
        if (!has_hi || (uint64_t)hi >= a) {
            if (alt)
                v4_sb_put(&o, "|");
            nonneg(&o, a, has_hi ? hi : -1);
            alt = 1;
        }
    }
    v4_sb_put(&o, ")");
    if (o.oom || !alt) {
        free(o.p);
        return NULL;
    }
    return o.p;
}

/* ----------------------------------------------------------------- bounds -- */
/* minimum/maximum/exclusive* of s as an integer interval; 1 when there are none */
static int int_bounds(gr_sc *c, json_t *s, const char *ptr, int *has_lo, int64_t *lo, int *has_hi, int64_t *hi)
{
    *has_lo = *has_hi = 0;
    static const char *const kw[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    for (int k = 0; k < 4; k++) {
        json_t *x = json_object_get(s, kw[k]);
        if (!x || !json_is_number(x))
            continue;
        /* an exclusive bound: draft 4's boolean beside minimum/maximum, or the number itself */
        int ex = k == 1 || k == 3 || json_is_true(json_object_get(s, kw[k + 1 - 2 * (k & 1)]));
        if ((k == 0 || k == 2) && !json_is_boolean(json_object_get(s, kw[k + 1])))
            ex = 0;
        int64_t b;
        if (json_is_integer(x)) {   /* exact, to the ends of int64 */
            int64_t v = json_integer_value(x);
            if (ex && (k < 2 ? v == INT64_MAX : v == INT64_MIN))
                return gr_sc_fail(c, ptr, kw[k], "no integer lies beyond this bound");
            b = ex ? (k < 2 ? v + 1 : v - 1) : v;
        } else {
            double v = json_number_value(x);
            if (fabs(v) >= 9e18)   /* past int64: integers stay within int64 (docs) */
                b = v > 0 ? INT64_MAX : INT64_MIN;
            else
                b = (int64_t)(k < 2 ? (ex ? floor(v) + 1 : ceil(v)) : (ex ? ceil(v) - 1 : floor(v)));
        }
        if (k < 2) {
            if (!*has_lo || b > *lo)
                *lo = b;
            *has_lo = 1;
        } else {
            if (!*has_hi || b < *hi)
                *hi = b;
            *has_hi = 1;
        }
    }
    if (*has_lo && *has_hi && *lo > *hi)
        return gr_sc_fail(c, ptr, "minimum", "no integer lies between minimum and maximum");
    return 0;
}

static int is_int_value(json_t *v)
{
    if (json_is_integer(v))
        return 1;
    if (!json_is_real(v))
        return 0;
    double d = json_real_value(v);
    return d == floor(d) && fabs(d) < 9e18;
}

static const char NUM_TAIL[] = "(?:\\.[0-9]+)?(?:[eE][+-]?[0-9]+)?";

/* non-negative y = I.F with lo <= y <= hi (exclusive where said; lo >= 0): its regex
 * alternatives, each behind sign.  I strictly between the ends: any fraction; I == lo
 * when lo is excluded: a nonzero fraction; I == hi: a zero fraction unless excluded. */
static void part(v4_strbuf *o, int *alt, const char *sign, int64_t lo, int lo_ex, int has_hi, int64_t hi, int hi_ex)
{
    char t[96];
    int64_t any_lo = lo_ex ? lo + 1 : lo;
    if (!has_hi || hi - 1 >= any_lo) {
        char *r = gr_int_range_regex(1, any_lo, has_hi, hi - 1);
        if (!r) {
            o->oom = 1;
            return;
        }
        v4_sb_put(o, *alt ? "|" : "");
        v4_sb_put(o, sign);
        v4_sb_put(o, r);
        v4_sb_put(o, "(?:\\.[0-9]+)?");
        free(r);
        *alt = 1;
    }
    if (lo_ex && (!has_hi || lo < hi)) {
        snprintf(t, sizeof t, "%s%s%lld\\.[0-9]*[1-9][0-9]*", *alt ? "|" : "", sign, (long long)lo);
        v4_sb_put(o, t);
        *alt = 1;
    }
    if (has_hi && !hi_ex && hi >= lo && !(lo_ex && lo == hi)) {
        snprintf(t, sizeof t, "%s%s%lld(?:\\.0+)?", *alt ? "|" : "", sign, (long long)hi);
        v4_sb_put(o, t);
        *alt = 1;
    }
}

/* a number in an interval with integer bounds, written without exponent (docs) */
static char *num_range_regex(gr_sc *c, json_t *s, const char *ptr)
{
    static const char *const kws[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    int has[4] = {0};
    int64_t v[4] = {0};
    for (int k = 0; k < 4; k++) {
        json_t *x = json_object_get(s, kws[k]);
        if (!x || !json_is_number(x))
            continue;
        if (!is_int_value(x)) {
            gr_sc_fail(c, ptr, kws[k], "a bound of a number that is not an integer is not supported");
            return NULL;
        }
        has[k] = 1;
        v[k] = (int64_t)json_number_value(x);
    }
    int has_lo = has[0] || has[1], has_hi = has[2] || has[3];
    int64_t lo = has[0] ? v[0] : v[1], hi = has[2] ? v[2] : v[3];
    int lo_ex = has[0] ? json_is_true(json_object_get(s, "exclusiveMinimum")) : has[1];
    int hi_ex = has[2] ? json_is_true(json_object_get(s, "exclusiveMaximum")) : has[3];
    if (has[0] && has[1] && v[1] >= v[0])
        lo = v[1], lo_ex = 1;
    if (has[2] && has[3] && v[3] <= v[2])
        hi = v[3], hi_ex = 1;
    v4_strbuf o = {0};
    int alt = 0;
    v4_sb_put(&o, "(?:");
    if (!has_hi || hi > 0 || (hi == 0 && !hi_ex)) {   /* y = x >= 0 */
        int pos_lo = has_lo && lo >= 0;
        part(&o, &alt, "", pos_lo ? lo : 0, pos_lo ? lo_ex : 0, has_hi, hi, hi_ex);
    }
    if (!has_lo || lo < 0) {   /* y = -x > 0 */
        int neg_hi = has_hi && hi < 0;
        part(&o, &alt, "-", neg_hi ? -hi : 0, neg_hi ? hi_ex : 1, has_lo, has_lo ? -lo : 0, lo_ex);
    }
    v4_sb_put(&o, ")");
    if (o.oom || !alt) {
        free(o.p);
        gr_sc_fail(c, ptr, "minimum", "no number lies between the bounds");
        return NULL;
    }
    return o.p;
}

/* ----------------------------------------------------------------- scalars -- */
int gr_sc_number(gr_sc *c, json_t *s, const char *ptr, int integer)
{
    json_t *mo = json_object_get(s, "multipleOf");
    if (mo) {
        if (!(integer && json_is_number(mo) && json_number_value(mo) == 1.0))
            return gr_sc_fail(c, ptr, "multipleOf", "multipleOf is not supported");
    }
    int bounded = json_object_get(s, "minimum") || json_object_get(s, "maximum") ||
                  json_is_number(json_object_get(s, "exclusiveMinimum")) ||
                  json_is_number(json_object_get(s, "exclusiveMaximum"));
    char *rx;
    if (integer) {
        int has_lo = 0, has_hi = 0;
        int64_t lo = 0, hi = 0;
        if (int_bounds(c, s, ptr, &has_lo, &lo, &has_hi, &hi))
            return -1;
        /* from draft 6 on JSON Schema counts 1.0 as an integer: a zero fraction is allowed */
        char *r = !has_lo && !has_hi ? strdup("-?(?:0|[1-9][0-9]*)") : gr_int_range_regex(has_lo, lo, has_hi, hi);
        rx = r ? malloc(strlen(r) + 16) : NULL;
        if (rx)
            sprintf(rx, c->int_exact ? "%s" : "(?:%s)(?:\\.0+)?", r);
        free(r);
    } else if (!bounded) {
        size_t n = strlen(NUM_TAIL) + 32;
        rx = malloc(n);
        if (rx)
            snprintf(rx, n, "-?(?:0|[1-9][0-9]*)%s", NUM_TAIL);
    } else {
        rx = num_range_regex(c, s, ptr);
        if (!rx)
            return -1;
    }
    if (!rx)
        return gr_sc_fail(c, ptr, integer ? "minimum" : "type", "out of memory or an empty range");
    int l = gr_lex_regex(c->b, rx, strlen(rx), GR_RX_FULL, 0, 0, -1, c->err);
    free(rx);
    if (l < 0)
        return gr_sc_where(c, ptr, "minimum");
    return l;
}

/* formats: regexes over the decoded string (docs: formats) */
static const struct {
    const char *name, *rx;
} FORMATS[] = {
    /* a day the month has (February: 29 in every year) */
    {"date", "[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-9]))"},
    {"time", "(?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)(?:\\.[0-9]+)?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"},
    {"date-time", "[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-9]))[Tt](?:[01][0-9]|2[0-3]):[0-5][0-9]:(?:[0-5][0-9]|60)"
                  "(?:\\.[0-9]+)?(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"},
    {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
    {"ipv4", "(?:(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"},
    {"email", "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\\.)+"
              "[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"},
    {"hostname", "(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(?:\\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"},
    {"uri", "[A-Za-z][A-Za-z0-9+.-]*:[^\\x00-\\x20\"<>\\\\^`{|}]*"},
    /* a URI, or a relative reference (RFC 3986: no ':' in a first segment without a scheme) */
    {"uri-reference", "[A-Za-z][A-Za-z0-9+.-]*:[^\\x00-\\x20\"<>\\\\^`{|}]*|(?://[^/?#\\x00-\\x20\"<>\\\\^`{|}]*(?:/[^?#\\x00-\\x20\"<>\\\\^`{|}]*)?|/[^?#\\x00-\\x20\"<>\\\\^`{|}]*|[^:/?#\\x00-\\x20\"<>\\\\^`{|}][^/?#\\x00-\\x20\"<>\\\\^`{|}]*(?:/[^?#\\x00-\\x20\"<>\\\\^`{|}]*)?)?(?:\\?[^#\\x00-\\x20\"<>\\\\^`{|}]*)?(?:#[^\\x00-\\x20\"<>\\\\^`{|}]*)?"},
    {"ipv6", "(?:[0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4}|(?:[0-9a-fA-F]{1,4}:){1,7}:|(?:[0-9a-fA-F]{1,4}:){1,6}:[0-9a-fA-F]{1,4}|(?:[0-9a-fA-F]{1,4}:){1,5}(?::[0-9a-fA-F]{1,4}){1,2}|(?:[0-9a-fA-F]{1,4}:){1,4}(?::[0-9a-fA-F]{1,4}){1,3}|(?:[0-9a-fA-F]{1,4}:){1,3}(?::[0-9a-fA-F]{1,4}){1,4}|(?:[0-9a-fA-F]{1,4}:){1,2}(?::[0-9a-fA-F]{1,4}){1,5}|[0-9a-fA-F]{1,4}:(?::[0-9a-fA-F]{1,4}){1,6}|:(?:(?::[0-9a-fA-F]{1,4}){1,7}|:)|(?:[0-9a-fA-F]{1,4}:){6}(?:(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])|::(?:[fF]{4}(?::0{1,4})?:)?(?:(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])|(?:[0-9a-fA-F]{1,4}:){1,5}:(?:(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"},
    {"json-pointer", "(?:/(?:[^~/]|~[01])*)*"},
    {"relative-json-pointer", "(?:0|[1-9][0-9]*)(?:#|(?:/(?:[^~/]|~[01])*)*)"},
    {"iri", "[A-Za-z][A-Za-z0-9+.-]*:[^\\x00-\\x20\"<>\\\\^`{|}]*"},
    {"iri-reference", "[A-Za-z][A-Za-z0-9+.-]*:[^\\x00-\\x20\"<>\\\\^`{|}]*|(?://[^/?#\\x00-\\x20\"<>\\\\^`{|}]*(?:/[^?#\\x00-\\x20\"<>\\\\^`{|}]*)?|/[^?#\\x00-\\x20\"<>\\\\^`{|}]*|[^:/?#\\x00-\\x20\"<>\\\\^`{|}][^/?#\\x00-\\x20\"<>\\\\^`{|}]*(?:/[^?#\\x00-\\x20\"<>\\\\^`{|}]*)?)?(?:\\?[^#\\x00-\\x20\"<>\\\\^`{|}]*)?(?:#[^\\x00-\\x20\"<>\\\\^`{|}]*)?"},
    {"duration", "P(?:[0-9]+W|(?:[0-9]+Y)?(?:[0-9]+M)?(?:[0-9]+D)?(?:T(?:[0-9]+H)?(?:[0-9]+M)?(?:[0-9]+(?:\\.[0-9]+)?S)?)?)"},
};

int gr_sc_string(gr_sc *c, json_t *s, const char *ptr)
{
    json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    json_t *mnl = json_object_get(s, "minLength"), *mxl = json_object_get(s, "maxLength");
    int min = 0, max = -1, l;
    if (mnl) {
        if (gr_sc_count(mnl) < 0)
            return gr_sc_fail(c, ptr, "minLength", "minLength must be a non-negative integer");
        if (gr_sc_count(mnl) > GR_MAX_REPEAT)
            return gr_sc_fail(c, ptr, "minLength", "minLength over the engine's bound of 4096");
        min = (int)gr_sc_count(mnl);
    }
    if (mxl) {
        if (gr_sc_count(mxl) < 0)
            return gr_sc_fail(c, ptr, "maxLength", "maxLength must be a non-negative integer");
        if (gr_sc_count(mxl) > GR_MAX_REPEAT)
            return gr_sc_fail(c, ptr, "maxLength", "maxLength over the engine's bound of 4096");
        max = (int)gr_sc_count(mxl);
        if (max < min)
            return gr_sc_fail(c, ptr, "maxLength", "maxLength is below minLength");
    }
    const char *rx = NULL, *kw = "pattern";
    size_t rxlen = 0;
    int mode = GR_RX_SEARCH;
    if (pat) {
        if (!json_is_string(pat))
            return gr_sc_fail(c, ptr, "pattern", "pattern must be a string");
        rx = json_string_value(pat);
        rxlen = json_string_length(pat);   /* a pattern may hold \u0000 */
    }
    if (fmt && json_is_string(fmt)) {
        const char *f = json_string_value(fmt);
        const char *frx = NULL;
        for (size_t k = 0; k < sizeof FORMATS / sizeof *FORMATS; k++)
            if (!strcmp(f, FORMATS[k].name))
                frx = FORMATS[k].rx;
        /* the formats JSON Schema defines and this engine does not check: refused; any other
         * name is not a format of the spec, and the spec makes it an annotation */
        static const char *const UNCHECKED[] = {"idn-email", "idn-hostname", "uri-template", "regex", NULL};
        for (int k = 0; !frx && UNCHECKED[k]; k++)
            if (!strcmp(f, UNCHECKED[k]))
                return gr_sc_fail(c, ptr, "format", "format '%s' is not supported (docs/structured-outputs.md lists "
                                                    "the formats checked)", f);
        if (frx && rx)
            return gr_sc_fail(c, ptr, "format", "format together with pattern is not supported");
        if (frx) {
            rx = frx;
            rxlen = strlen(frx);
            kw = "format";
            mode = GR_RX_FULL;
        }
    }
    if (rx) {
        if (min > 0 || max >= 0)
            return gr_sc_fail(c, ptr, min > 0 ? "minLength" : "maxLength",
                              "a length bound together with a pattern or format is not supported");
        l = gr_lex_regex(c->b, rx, rxlen, mode, 1, 0, -1, c->err);
        return l < 0 ? gr_sc_where(c, ptr, kw) : l;
    }
    l = gr_lex_json_string(c->b, min, max, c->err);
    return l < 0 ? gr_sc_where(c, ptr, max >= 0 ? "maxLength" : "minLength") : l;
}

/* ---------------------------------------------------------------- constants -- */
int gr_sc_const(gr_sc *c, json_t *v, const char *ptr)
{
    if (json_is_object(v) || json_is_array(v)) {
        int nt = gr_nt(c->b, "const", c->err);
        if (nt < 0)
            return -1;
        int32_t syms[4096];
        int n = 0;
        size_t i;
        json_t *x;
        const char *k;
        if (json_is_object(v)) {
            if (json_object_size(v) * 4 + 2 > 4096)
                return gr_sc_fail(c, ptr, "const", "a constant object too large");
            syms[n++] = c->lx_lbrace;
            int first = 1;
            json_object_foreach(v, k, x) {
                if (!first)
                    syms[n++] = c->lx_comma;
                first = 0;
                json_t *ks = json_string(k);
                char *kd = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL;
                json_decref(ks);
                int kl = kd ? gr_lex_bytes(c->b, kd, strlen(kd), c->err) : -1;
                free(kd);
                int vs = gr_sc_const(c, x, ptr);
                if (kl < 0 || vs < 0)
                    return -1;
                syms[n++] = kl;
                syms[n++] = c->lx_colon;
                syms[n++] = vs;
            }
            syms[n++] = c->lx_rbrace;
        } else {
            if (json_array_size(v) * 2 + 2 > 4096)
                return gr_sc_fail(c, ptr, "const", "a constant array too large");
            syms[n++] = c->lx_lbrack;
            json_array_foreach(v, i, x) {
                if (i)
                    syms[n++] = c->lx_comma;
                int vs = gr_sc_const(c, x, ptr);
                if (vs < 0)
                    return -1;
                syms[n++] = vs;
            }
            syms[n++] = c->lx_rbrack;
        }
        return gr_rule(c->b, nt, syms, n, c->err) ? -1 : nt;
    }
    if (json_is_number(v)) {   /* a number equals its value however written: 2, 2.0, 2.50 */
        double x = json_number_value(v);
        char t[64], rx[160];
        if (json_is_integer(v) || (x == floor(x) && fabs(x) < 1e15)) {
            snprintf(t, sizeof t, "%lld", json_is_integer(v) ? (long long)json_integer_value(v) : (long long)x);
            snprintf(rx, sizeof rx, "%s%s(?:\\.0+)?", t[0] == '-' ? "\\-" : "", t + (t[0] == '-'));
        } else {
            for (int p = 1; p <= 17; p++) {   /* the shortest text of the value */
                snprintf(t, sizeof t, "%.*g", p, x);
                if (strtod(t, NULL) == x)
                    break;
            }
            if (strpbrk(t, "eE"))   /* written with an exponent: exactly so */
                return gr_lex_bytes(c->b, t, strlen(t), c->err);
            size_t o = 0;
            for (const char *q = t; *q && o + 3 < sizeof rx; q++) {
                if (*q == '.' || *q == '-')
                    rx[o++] = '\\';
                rx[o++] = *q;
            }
            snprintf(rx + o, sizeof rx - o, "0*");
        }
        int l = gr_lex_regex(c->b, rx, strlen(rx), GR_RX_FULL, 0, 0, -1, c->err);
        return l < 0 ? gr_sc_where(c, ptr, "enum") : l;
    }
    char *d = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!d)
        return gr_sc_fail(c, ptr, "const", "out of memory");
    int l = gr_lex_bytes(c->b, d, strlen(d), c->err);
    free(d);
    return l;
}
