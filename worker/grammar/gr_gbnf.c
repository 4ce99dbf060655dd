/* gr_gbnf.c - the GBNF parser: text -> productions over code point sets (gr_gbnf.h).
 *
 * The notation (llama.cpp's grammars/README.md): rules `name ::= alternatives`, names of
 * letters, digits, '-' and '_'; literals "..." and classes [...] / [^...] with ranges and the
 * escapes \n \r \t \\ \" \' \[ \] \- \^ \/ \xHH \uHHHH \UHHHHHHHH; '.' any character;
 * groups ( ); alternation |; * + ? {m} {m,} {m,n}; # comments to the end of the line.  A
 * rule ends at a newline unless the next line is indented (and is no `name ::=`), starts
 * with '|', or the newline is inside ( ) or right after '|'.  Repetitions become helper
 * rules (left-recursive, which Earley likes); every rule is a nonterminal, so recursion
 * and left recursion just work.  Errors say "gbnf:LINE:COLUMN: what" (column in bytes).
 * docs/grammar.md "GBNF".
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/grammar/gr_gbnf.h"

#define GB_MAX_DEPTH 100          /* nested groups */
#define GB_MAX_SYMS (1 << 22)     /* symbols in all productions: past this a compile error */

typedef struct gb_name {
    char *s;
    int32_t nt;
    size_t ref_at, def_at;     /* first reference, definition (offsets) */
    uint8_t defined, referenced;
} gb_name;

typedef struct gb_seq {
    int32_t *s;
    int n, cap;
} gb_seq;

typedef struct gb {
    const char *src;
    size_t n, i;
    gr_builder *b;
    gb_out *o;
    v4_error *err;
    gb_name *nm;
    int n_nm, cap_nm;
    int32_t *ht;               /* set contents -> index, open addressing */
    int32_t ht_cap;
    int depth;
} gb;

/* ---------------------------------------------------------------- errors -- */
static int fail_at(gb *g, size_t at, v4_errcode code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void line_col(const gb *g, size_t at, int *line, int *col)
{
    *line = 1, *col = 1;
    for (size_t k = 0; k < at && k < g->n; k++) {
        if (g->src[k] == '\n')
            ++*line, *col = 1;
        else
            ++*col;
    }
}

/* "LINE:COL" of offset at, for messages that point back */
static const char *lc(const gb *g, size_t at, char *buf, size_t n)
{
    int line, col;
    line_col(g, at, &line, &col);
    snprintf(buf, n, "%d:%d", line, col);
    return buf;
}

static int fail_at(gb *g, size_t at, v4_errcode code, const char *fmt, ...)
{
    int line, col;
    line_col(g, at, &line, &col);
    char where[48], msg[400];
    snprintf(where, sizeof where, "gbnf:%d:%d", line, col);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return v4_err_set(g->err, code, where, "%s: %s", where, msg);
}
#define FAIL(g, at, ...) fail_at(g, at, V4_ERR_INVALID, __VA_ARGS__)
#define NOMEM(g) fail_at(g, (g)->i, V4_ERR_NOMEM, "out of memory")

/* what stands at offset at, for "got ..." */
static const char *shown(gb *g, size_t at, char *buf, size_t n)
{
    if (at >= g->n)
        return "the end of the grammar";
    unsigned char c = (unsigned char)g->src[at];
    if (c == '\n')
        return "the end of the line";
    if (c < 0x20 || c >= 0x7F)
        snprintf(buf, n, "byte 0x%02X", c);
    else
        snprintf(buf, n, "'%c'", c);
    return buf;
}

/* ------------------------------------------------------------- growables -- */
static int seq_push(gb *g, gb_seq *q, int32_t s)
{
    if (q->n == q->cap) {
        int nc = q->cap ? q->cap * 2 : 8;
        int32_t *p = realloc(q->s, (size_t)nc * sizeof *p);
        if (!p)
            return NOMEM(g);
        q->s = p;
        q->cap = nc;
    }
    q->s[q->n++] = s;
    return 0;
}

/* a production lhs -> syms[0..n) into the output (rules are made at emission) */
static int prod(gb *g, int32_t lhs, const int32_t *syms, int n)
{
    gb_out *o = g->o;
    if (o->n_syms + n > GB_MAX_SYMS || o->n_prods >= GR_MAX_PRODS)
        return FAIL(g, g->i, "the grammar is too large (over %d symbols or %d alternatives once repetitions "
                             "are expanded)", GB_MAX_SYMS, GR_MAX_PRODS);
    return gr_gbnf_out_add(o, lhs, syms, n) ? NOMEM(g) : 0;
}

static int nt(gb *g, const char *hint)
{
    int r = gr_nt(g->b, hint, g->err);
    return r < 0 ? NOMEM(g) : r;
}

/* ------------------------------------------------------- code point sets -- */
static uint64_t set_hash(const gr_cset *s)
{
    uint64_t h = 1469598103934665603ull;
    for (int k = 0; k < 2 * s->n; k++)
        h = (h ^ s->r[k]) * 1099511628211ull;
    return h;
}

static int set_eq(const gr_cset *a, const gr_cset *b)
{
    return a->n == b->n && !memcmp(a->r, b->r, (size_t)a->n * 2 * sizeof *a->r);
}

/* the index of set s (normalized; taken over: freed if already known) */
static int set_index(gb *g, gr_cset *s)
{
    gb_out *o = g->o;
    if ((int64_t)(o->n_sets + 1) * 2 > g->ht_cap) {
        int32_t nc = g->ht_cap ? g->ht_cap * 2 : 256;
        int32_t *ht = malloc((size_t)nc * sizeof *ht);
        if (!ht) {
            gr_cset_free(s);
            return NOMEM(g);
        }
        memset(ht, 0xFF, (size_t)nc * sizeof *ht);
        for (int32_t k = 0; k < o->n_sets; k++) {
            uint64_t i = set_hash(&o->sets[k]) & (uint64_t)(nc - 1);
            while (ht[i] >= 0)
                i = (i + 1) & (uint64_t)(nc - 1);
            ht[i] = k;
        }
        free(g->ht);
        g->ht = ht;
        g->ht_cap = nc;
    }
    uint64_t i = set_hash(s) & (uint64_t)(g->ht_cap - 1);
    for (; g->ht[i] >= 0; i = (i + 1) & (uint64_t)(g->ht_cap - 1))
        if (set_eq(&o->sets[g->ht[i]], s)) {
            gr_cset_free(s);
            return g->ht[i];
        }
    if (o->n_sets == o->cap_sets) {
        int32_t nc = o->cap_sets ? o->cap_sets * 2 : 64;
        gr_cset *p = realloc(o->sets, (size_t)nc * sizeof *p);
        if (!p) {
            gr_cset_free(s);
            return NOMEM(g);
        }
        o->sets = p;
        o->cap_sets = nc;
    }
    o->sets[o->n_sets] = *s;
    memset(s, 0, sizeof *s);
    g->ht[i] = o->n_sets;
    return o->n_sets++;
}

static int single(gb *g, uint32_t cp)
{
    gr_cset s = {0};
    if (gr_cset_add(&s, cp, cp))
        return NOMEM(g);
    return set_index(g, &s);
}

/* ----------------------------------------------------------------- lexing -- */
static int cur(const gb *g)
{
    return g->i < g->n ? (unsigned char)g->src[g->i] : -1;
}

static int name_char(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* spaces, tabs, CRs and comments; newlines too when nl */
static void ws(gb *g, int nl)
{
    while (g->i < g->n) {
        char c = g->src[g->i];
        if (c == ' ' || c == '\t' || c == '\r' || (c == '\n' && nl)) {
            g->i++;
        } else if (c == '#') {
            while (g->i < g->n && g->src[g->i] != '\n')
                g->i++;
        } else {
            break;
        }
    }
}

/* at k: `name ::=` */
static int is_def(const gb *g, size_t k)
{
    size_t j = k;
    while (j < g->n && name_char((unsigned char)g->src[j]))
        j++;
    if (j == k)
        return 0;
    while (j < g->n && (g->src[j] == ' ' || g->src[j] == '\t'))
        j++;
    return j + 3 <= g->n && !memcmp(g->src + j, "::=", 3);
}

/* At a newline ending a top-level sequence: does the rule go on on a later line (indented
 * and no definition, or starting with '|')?  Then g->i moves there. */
static int continues(gb *g)
{
    size_t j = g->i;   /* at '\n' */
    for (;;) {
        size_t line = j + 1, k = line;
        while (k < g->n && (g->src[k] == ' ' || g->src[k] == '\t' || g->src[k] == '\r'))
            k++;
        if (k >= g->n)
            return 0;
        if (g->src[k] == '#')
            while (k < g->n && g->src[k] != '\n')
                k++;
        if (k >= g->n)
            return 0;
        if (g->src[k] == '\n') {   /* a blank or comment line */
            j = k;
            continue;
        }
        if (g->src[k] != '|' && (k == line || is_def(g, k)))
            return 0;
        g->i = k;
        return 1;
    }
}

static int utf8(gb *g, uint32_t *cp)
{
    const unsigned char *p = (const unsigned char *)g->src + g->i;
    size_t left = g->n - g->i;
    unsigned c = p[0];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    uint32_t v = len == 1 ? c : c & (0x7Fu >> len);
    int ok = len && (size_t)len <= left;
    for (int k = 1; ok && k < len; k++) {
        ok = (p[k] & 0xC0) == 0x80;
        v = (v << 6) | (p[k] & 0x3F);
    }
    static const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (!ok || v < least[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return FAIL(g, g->i, "invalid UTF-8");
    g->i += (size_t)len;
    *cp = v;
    return 0;
}

static int hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* one character of a literal or class (g->i not at its end) */
static int char_at(gb *g, uint32_t *cp)
{
    if (cur(g) != '\\')
        return utf8(g, cp);
    size_t at = g->i++;
    int c = cur(g);
    if (c < 0)
        return FAIL(g, at, "a backslash at the end of the grammar");
    g->i++;
    int digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (digits) {
        uint32_t v = 0;
        for (int k = 0; k < digits; k++) {
            int h = hexval(cur(g));
            if (h < 0)
                return FAIL(g, g->i, "expected %d hex digits after '\\%c'", digits, c);
            v = v * 16 + (uint32_t)h;
            g->i++;
        }
        if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
            return FAIL(g, at, "'\\%c' escape U+%X is not a Unicode scalar value", c, v);
        *cp = v;
        return 0;
    }
    static const char plain[] = "\\\"'[]-^/.|(){}*+?#";
    if (c == 'n' || c == 'r' || c == 't' || c == '0') {
        *cp = c == 'n' ? '\n' : c == 'r' ? '\r' : c == 't' ? '\t' : 0;
        return 0;
    }
    if (c > 0 && strchr(plain, c)) {
        *cp = (uint32_t)c;
        return 0;
    }
    char b[16];
    return FAIL(g, at, "unknown escape '\\' then %s (known: \\n \\r \\t \\\\ \\\" \\[ \\] \\- \\xHH \\uHHHH "
                       "\\UHHHHHHHH)", shown(g, at + 1, b, sizeof b));
}

/* "..." -> one set per character, appended to q */
static int literal(gb *g, gb_seq *q)
{
    size_t open = g->i++;
    for (;;) {
        if (g->i >= g->n)
            return FAIL(g, open, "unterminated string literal (no closing '\"')");
        if (cur(g) == '"') {
            g->i++;
            return 0;
        }
        uint32_t cp;
        int s;
        if (char_at(g, &cp) || (s = single(g, cp)) < 0 || seq_push(g, q, s))
            return -1;
    }
}

/* [...] or [^...] -> one set */
static int char_class(gb *g)
{
    size_t open = g->i++;
    int neg = cur(g) == '^';
    g->i += (size_t)neg;
    gr_cset s = {0};
    for (;;) {
        if (g->i >= g->n) {
            gr_cset_free(&s);
            return FAIL(g, open, "unterminated character class (no closing ']')");
        }
        if (cur(g) == ']') {
            g->i++;
            break;
        }
        size_t at = g->i;
        uint32_t lo, hi;
        if (char_at(g, &lo)) {
            gr_cset_free(&s);
            return -1;
        }
        hi = lo;
        if (cur(g) == '-' && g->i + 1 < g->n && g->src[g->i + 1] != ']') {
            g->i++;
            if (char_at(g, &hi)) {
                gr_cset_free(&s);
                return -1;
            }
            if (hi < lo) {
                gr_cset_free(&s);
                return FAIL(g, at, "character range out of order (U+%04X after U+%04X)", hi, lo);
            }
        }
        if (gr_cset_add(&s, lo, hi)) {
            gr_cset_free(&s);
            return NOMEM(g);
        }
    }
    gr_cset_norm(&s);
    if (neg) {
        gr_cset t;
        int rc = gr_cset_negate(&s, &t);
        gr_cset_free(&s);
        if (rc) {
            gr_cset_free(&t);
            return NOMEM(g);
        }
        s = t;
    }
    return set_index(g, &s);
}

static int rule_ref(gb *g, size_t at, size_t len, int def)
{
    for (int k = 0; k < g->n_nm; k++)
        if (strlen(g->nm[k].s) == len && !memcmp(g->nm[k].s, g->src + at, len)) {
            if (def && g->nm[k].defined)
            {
                char p[32];
                return FAIL(g, at, "rule '%s' is defined twice (first at %s)", g->nm[k].s,
                            lc(g, g->nm[k].def_at, p, sizeof p));
            }
            if (!def && !g->nm[k].referenced)
                g->nm[k].referenced = 1, g->nm[k].ref_at = at;
            if (def)
                g->nm[k].defined = 1, g->nm[k].def_at = at;
            return g->nm[k].nt;
        }
    if (g->n_nm == g->cap_nm) {
        int nc = g->cap_nm ? g->cap_nm * 2 : 32;
        gb_name *p = realloc(g->nm, (size_t)nc * sizeof *p);
        if (!p)
            return NOMEM(g);
        g->nm = p;
        g->cap_nm = nc;
    }
    char *s = strndup(g->src + at, len);
    int id = s ? nt(g, s) : NOMEM(g);
    if (id < 0) {
        free(s);
        return -1;
    }
    g->nm[g->n_nm++] = (gb_name){.s = s, .nt = id, .ref_at = at, .def_at = at, .defined = (uint8_t)def,
                                 .referenced = (uint8_t)!def};
    return id;
}

/* ----------------------------------------------------------- repetitions -- */
/* q (one item's symbols) as one symbol */
static int as_one(gb *g, gb_seq *q)
{
    if (q->n == 1)
        return q->s[0];
    int w = nt(g, "seq");
    if (w < 0 || prod(g, w, q->s, q->n))
        return -1;
    q->n = 0;
    return seq_push(g, q, w) ? -1 : w;
}

/* x repeated min..max times (max < 0: no bound) replaces q */
static int repeat(gb *g, gb_seq *q, long min, long max)
{
    int x = as_one(g, q);
    if (x < 0)
        return -1;
    q->n = 0;
    for (long k = 0; k < min; k++)
        if (seq_push(g, q, x))
            return -1;
    if (max < 0) {   /* R -> | R x */
        int r = nt(g, "rep");
        if (r < 0 || prod(g, r, NULL, 0) || prod(g, r, (int32_t[]){r, x}, 2))
            return -1;
        return seq_push(g, q, r);
    }
    int tail = -1;   /* O_k -> | x O_(k-1) */
    for (long k = min; k < max; k++) {
        int o = nt(g, "opt");
        if (o < 0 || prod(g, o, NULL, 0) || prod(g, o, (int32_t[]){x, tail}, tail < 0 ? 1 : 2))
            return -1;
        tail = o;
    }
    return tail >= 0 ? seq_push(g, q, tail) : 0;
}

static int number(gb *g, long *v)
{
    size_t at = g->i;
    long x = 0;
    while (cur(g) >= '0' && cur(g) <= '9') {
        x = x * 10 + (cur(g) - '0');
        g->i++;
        if (x > GR_MAX_REPEAT)
            return FAIL(g, at, "a repetition bound over %d", GR_MAX_REPEAT);
    }
    if (g->i == at) {
        char b[16];
        return FAIL(g, at, "expected a number in the repetition, got %s", shown(g, at, b, sizeof b));
    }
    *v = x;
    return 0;
}

/* {m} {m,} {m,n} */
static int braces(gb *g, long *min, long *max)
{
    size_t open = g->i++;
    ws(g, 1);
    if (number(g, min))
        return -1;
    ws(g, 1);
    *max = *min;
    if (cur(g) == ',') {
        g->i++;
        ws(g, 1);
        *max = -1;
        if (cur(g) != '}' && number(g, max))
            return -1;
        ws(g, 1);
    }
    if (cur(g) != '}') {
        char b[16];
        char p[32];
        return FAIL(g, g->i, "expected '}' to close the repetition opened at %s, got %s", lc(g, open, p, sizeof p),
                    shown(g, g->i, b, sizeof b));
    }
    g->i++;
    if (*max >= 0 && *max < *min)
        return FAIL(g, open, "repetition {%ld,%ld}: the maximum is below the minimum", *min, *max);
    return 0;
}

/* ------------------------------------------------------------- structure -- */
static int alternatives(gb *g, int32_t lhs, int nested);

/* one item (a primary and its postfix operators) appended to out */
static int item(gb *g, gb_seq *out)
{
    gb_seq q = {0};
    size_t at = g->i;
    int c = cur(g), rc = 0;
    char b[16];
    if (c == '"') {
        rc = literal(g, &q);
    } else if (c == '[') {
        int s = char_class(g);
        rc = s < 0 || seq_push(g, &q, s);
    } else if (c == '.') {
        g->i++;
        gr_cset s = {0};
        int k = gr_cset_add(&s, 0, 0x10FFFF) ? NOMEM(g) : set_index(g, &s);
        rc = k < 0 || seq_push(g, &q, k);
    } else if (c == '(') {
        if (++g->depth > GB_MAX_DEPTH)
            return FAIL(g, at, "groups nested over %d deep", GB_MAX_DEPTH);
        g->i++;
        int grp = nt(g, "group");
        rc = grp < 0 || alternatives(g, grp, 1);
        char p[32];
        if (!rc && cur(g) != ')')
            rc = FAIL(g, g->i, "expected ')' to close the group opened at %s, got %s", lc(g, at, p, sizeof p),
                      shown(g, g->i, b, sizeof b));
        g->i += !rc;
        g->depth--;
        rc = rc || seq_push(g, &q, grp);
    } else if (name_char(c)) {
        while (name_char(cur(g)))
            g->i++;
        size_t j = g->i;
        while (j < g->n && (g->src[j] == ' ' || g->src[j] == '\t'))
            j++;
        if (j + 3 <= g->n && !memcmp(g->src + j, "::=", 3)) {
            free(q.s);
            return FAIL(g, at, "a new rule '%.*s ::=' inside the previous one (a rule ends at a newline)",
                        (int)(g->i - at), g->src + at);
        }
        int r = rule_ref(g, at, g->i - at, 0);
        rc = r < 0 || seq_push(g, &q, r);
    } else if (c == '<') {
        rc = FAIL(g, at, "token references (<...>) are not supported: write the text as a literal");
    } else {
        rc = FAIL(g, at, "expected a rule name, a \"literal\", a [class], '.' or '(', got %s", shown(g, at, b, sizeof b));
    }
    for (;;) {   /* postfix operators */
        if (rc)
            break;
        size_t j = g->i;
        while (j < g->n && (g->src[j] == ' ' || g->src[j] == '\t'))
            j++;   /* llama.cpp takes `x *` too */
        c = j < g->n ? (unsigned char)g->src[j] : -1;
        if (c != '*' && c != '+' && c != '?' && c != '{')
            break;
        g->i = j;
        long min = c == '+', max = c == '?' ? 1 : -1;
        if (c == '{')
            rc = braces(g, &min, &max);
        else
            g->i++;
        rc = rc || repeat(g, &q, min, max);
    }
    for (int k = 0; !rc && k < q.n; k++)
        rc = seq_push(g, out, q.s[k]);
    free(q.s);
    return rc ? -1 : 0;
}

/* items until '|', ')' or the end of the rule */
static int sequence(gb *g, gb_seq *out, int nested)
{
    for (;;) {
        ws(g, nested);
        int c = cur(g);
        if (c < 0 || c == '|' || c == ')')
            return 0;
        if (c == '\n') {
            if (nested || !continues(g))
                return 0;
            if (cur(g) == '|')
                return 0;
            continue;
        }
        if (item(g, out))
            return -1;
    }
}

static int alternatives(gb *g, int32_t lhs, int nested)
{
    for (;;) {
        gb_seq q = {0};
        ws(g, 1);   /* after '::=', '(' or '|' a newline does not end the rule */
        int rc = sequence(g, &q, nested) || prod(g, lhs, q.s, q.n);
        free(q.s);
        if (rc)
            return -1;
        if (cur(g) != '|')
            return 0;
        g->i++;
    }
}

static int rule(gb *g)
{
    size_t at = g->i;
    char b[16];
    if (!name_char(cur(g)))
        return FAIL(g, at, "expected a rule definition 'name ::= ...', got %s", shown(g, at, b, sizeof b));
    while (name_char(cur(g)))
        g->i++;
    size_t len = g->i - at;
    ws(g, 0);
    if (g->i + 3 > g->n || memcmp(g->src + g->i, "::=", 3))
        return FAIL(g, g->i, "expected '::=' after the rule name '%.*s', got %s", (int)len, g->src + at,
                    shown(g, g->i, b, sizeof b));
    g->i += 3;
    int lhs = rule_ref(g, at, len, 1);
    if (lhs < 0 || alternatives(g, lhs, 0))
        return -1;
    if (cur(g) == ')')
        return FAIL(g, g->i, "')' without an opening '('");
    return 0;
}

void gr_gbnf_out_free(gb_out *o)
{
    for (int32_t k = 0; k < o->n_sets; k++)
        gr_cset_free(&o->sets[k]);
    free(o->sets);
    free(o->prods);
    free(o->syms);
    memset(o, 0, sizeof *o);
}

int gr_gbnf_parse(gr_builder *b, const char *text, size_t len, gb_out *o, v4_error *err)
{
    gb g = {.src = text ? text : "", .n = text ? len : 0, .b = b, .o = o, .err = err};
    memset(o, 0, sizeof *o);
    int rc = 0;
    for (;;) {
        ws(&g, 1);
        if (g.i >= g.n)
            break;
        if ((rc = rule(&g)))
            break;
    }
    int root = -1;
    for (int k = 0; !rc && k < g.n_nm; k++) {
        if (!g.nm[k].defined)
            rc = FAIL(&g, g.nm[k].ref_at, "undefined rule '%s'", g.nm[k].s);
        else if (!strcmp(g.nm[k].s, "root"))
            root = g.nm[k].nt;
    }
    if (!rc && root < 0)
        rc = v4_err_set(err, V4_ERR_INVALID, "gbnf", "gbnf: no root rule (the grammar starts at 'root ::= ...')");
    for (int k = 0; k < g.n_nm; k++)
        free(g.nm[k].s);
    free(g.nm);
    free(g.ht);
    if (rc) {
        gr_gbnf_out_free(o);
        return -1;
    }
    b->start = root;
    return 0;
}

int gr_gbnf_compile(gr_builder *b, const char *text, size_t len, v4_error *err)
{
    gb_out o;
    if (gr_gbnf_parse(b, text, len, &o, err))
        return -1;
    int rc = gr_gbnf_emit(b, &o, err);
    gr_gbnf_out_free(&o);
    return rc;
}
