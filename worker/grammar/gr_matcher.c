/* gr_matcher.c - the vocabulary's byte trie and the matcher: bytes fed to the lexer, a
 * finished lexeme scanned by the parser, a token allowed when all its bytes are taken.
 * The mask walks the trie in preorder (tokens sorted by bytes): a node's byte is fed
 * once for every token under it, and a refused node skips its whole subtree.
 * Whitespace (the skip lexeme) may stand between lexemes, one run at a time.  A lexer
 * state's walk is cached (fill_cache); inside JSON strings the cache comes from the
 * vocabulary's string cache instead (gr_strcache.c).
 */
#define _GNU_SOURCE   /* qsort_r */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "worker/grammar/gr_compile.h"
#include "worker/grammar/gr_internal.h"
#include "worker/grammar/grammar.h"

typedef struct mstate {
    int32_t lx, n_sets;
    uint8_t after_skip;
} mstate;

struct v4g_matcher {
    v4g_constraint *c;
    gr_grammar *g;
    const v4g_vocab *v;
    gr_parser p;
    int32_t lx;
    uint8_t after_skip, finished;
    uint64_t *allowed;     /* scratch: lex_words */
    mstate *st;            /* scratch: one per trie depth */
};

/* ------------------------------------------------------------------ vocab -- */
static int cmp_tok(const void *a, const void *b, void *vv)
{
    const v4g_vocab *v = vv;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    int64_t lx = v->off[x + 1] - v->off[x], ly = v->off[y + 1] - v->off[y];
    int c = memcmp(v->data + v->off[x], v->data + v->off[y], (size_t)(lx < ly ? lx : ly));
    if (c)
        return c;
    return lx < ly ? -1 : lx > ly ? 1 : (x < y ? -1 : x > y);
}

static int build_trie(v4g_vocab *v, v4_error *err)
{
    int32_t *ids = malloc((size_t)v->n * sizeof *ids);
    if (!ids)
        return v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory (vocabulary)");
    int32_t m = 0;
    int64_t total = 0;
    for (int32_t i = 0; i < v->n; i++)
        if (!v->special[i] && i != v->eos && v->off[i + 1] > v->off[i]) {
            ids[m++] = i;
            total += v->off[i + 1] - v->off[i];
        }
    qsort_r(ids, (size_t)m, sizeof *ids, cmp_tok, v);
    int64_t cap = total + 1;
    v->nb = malloc((size_t)cap);
    v->nd = malloc((size_t)cap * sizeof *v->nd);
    v->nsz = malloc((size_t)cap * sizeof *v->nsz);
    v->ntok = malloc((size_t)cap * sizeof *v->ntok);
    v->dup = malloc((size_t)v->n * sizeof *v->dup);
    int32_t *open = malloc(65537 * sizeof *open);   /* node index per depth */
    if (!v->nb || !v->nd || !v->nsz || !v->ntok || !v->dup || !open) {
        free(ids), free(open);
        return v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory (vocabulary trie)");
    }
    memset(v->dup, 0xFF, (size_t)v->n * sizeof *v->dup);
    int32_t nn = 0, depth = 0, maxd = 0;
    const char *prev = NULL;
    int64_t plen = 0;
    for (int32_t k = 0; k < m; k++) {
        int32_t id = ids[k];
        const char *s = v->data + v->off[id];
        int64_t len = v->off[id + 1] - v->off[id];
        if (len > 65535)
            len = 65535;
        int64_t l = 0;
        while (prev && l < plen && l < len && prev[l] == s[l])
            l++;
        while (depth > l) {   /* close the nodes below the common prefix */
            int32_t x = open[depth];
            v->nsz[x] = nn - x;
            depth--;
        }
        if (l == len && len == plen && prev) {   /* the same bytes as the previous token */
            int32_t x = open[depth];
            int32_t t = v->ntok[x];
            while (v->dup[t] >= 0)
                t = v->dup[t];
            v->dup[t] = id;
            continue;
        }
        for (int64_t j = l; j < len; j++) {
            v->nb[nn] = (uint8_t)s[j];
            v->nd[nn] = (uint16_t)(j + 1);
            v->ntok[nn] = -1;
            v->nsz[nn] = 1;
            open[j + 1] = nn++;
        }
        depth = (int32_t)len;
        if (depth > maxd)
            maxd = depth;
        v->ntok[open[depth]] = id;
        prev = s;
        plen = len;
    }
    while (depth > 0) {
        int32_t x = open[depth];
        v->nsz[x] = nn - x;
        depth--;
    }
    v->n_nodes = nn;
    v->max_depth = maxd;
    free(ids);
    free(open);
    return 0;
}

v4g_vocab *v4g_vocab_new(int32_t n, v4g_token_bytes_fn bytes, v4g_token_special_fn special, void *ctx, int32_t eos,
                         v4_error *err)
{
    if (n <= 0 || !bytes) {
        v4_err_set(err, V4_ERR_INVALID, "grammar", "an empty vocabulary");
        return NULL;
    }
    v4g_vocab *v = calloc(1, sizeof *v);
    if (!v) {
        v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory");
        return NULL;
    }
    v->n = n;
    v->eos = eos;
    v->off = malloc(((size_t)n + 1) * sizeof *v->off);
    v->special = calloc((size_t)n, 1);
    int64_t total = 0;
    if (v->off)
        for (int32_t i = 0; i < n; i++) {
            size_t len = 0;
            if (!bytes(ctx, i, &len))
                len = 0;
            v->off[i] = total;
            total += (int64_t)len;
        }
    v->data = malloc((size_t)total + 1);
    if (!v->off || !v->special || !v->data) {
        v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory");
        v4g_vocab_free(v);
        return NULL;
    }
    v->off[n] = total;
    for (int32_t i = 0; i < n; i++) {
        size_t len = 0;
        const char *b = bytes(ctx, i, &len);
        if (b && len)
            memcpy(v->data + v->off[i], b, len);
        v->special[i] = special ? (uint8_t)(special(ctx, i) != 0) : 0;
    }
    if (build_trie(v, err)) {
        v4g_vocab_free(v);
        return NULL;
    }
    gr_str_cache(v);
    return v;
}

void v4g_vocab_free(v4g_vocab *v)
{
    if (!v)
        return;
    free(v->off), free(v->data), free(v->special);
    free(v->nb), free(v->nd), free(v->nsz), free(v->ntok), free(v->dup);
    free(v->str_inner), free(v->str_bnd);
    free(v->str_cp), free(v->str_le), free(v->str_bnd_cp), free(v->str_bnd_tok);
    free(v);
}

int32_t v4g_vocab_size(const v4g_vocab *v)
{
    return v->n;
}

/* ---------------------------------------------------------------- matcher -- */
static mstate save(const v4g_matcher *m)
{
    return (mstate){.lx = m->lx, .n_sets = m->p.n_sets, .after_skip = m->after_skip};
}

static void restore(v4g_matcher *m, mstate s)
{
    m->lx = s.lx;
    m->after_skip = s.after_skip;
    gr_parser_pop_to(&m->p, s.n_sets);
}

/* the lexer state where the next lexeme starts: 1 refused (nothing may start), -1 error */
static int start(v4g_matcher *m)
{
    gr_grammar *g = m->g;
    const uint64_t *al = gr_parser_allowed(&m->p, g);
    const int W = g->lex_words;
    int any = 0;
    for (int w = 0; w < W; w++)
        any |= al[w] != 0;
    if (!any)
        return 1;
    memcpy(m->allowed, al, (size_t)W * 8);
    if (g->skip >= 0 && !m->after_skip)
        m->allowed[g->skip >> 6] |= 1ull << (g->skip & 63);
    int32_t s = gr_lex_start(g, m->allowed);
    if (s == -3)
        return -1;
    if (s < 0)
        return 1;
    m->lx = s;
    return 0;
}

/* the lexeme that ends in lexer state s goes to the parser (whitespace does not) */
static int end_lexeme(v4g_matcher *m, int32_t s)
{
    gr_grammar *g = m->g;
    const gr_dstate *d = &g->lx.ds[s];
    int32_t acc[16];
    int n = 0, skip = 0;
    for (int k = 0; k < d->n_acc; k++) {
        int32_t l = g->lx.accs[d->acc_off + k];
        if (l == g->skip)
            skip = 1;
        else if (n < 16)
            acc[n++] = l;
    }
    m->lx = -1;
    if (n == 0) {
        if (!skip)
            return 1;
        m->after_skip = 1;
        return 0;
    }
    int r = gr_parser_scan(&m->p, g, acc, n);
    if (r == -2)
        return -1;
    if (r == -1)
        return 1;
    m->after_skip = 0;
    return 0;
}

/* 0 taken, 1 refused (state possibly changed: the caller restores), -1 error */
static int feed_byte(v4g_matcher *m, uint8_t c)
{
    gr_grammar *g = m->g;
    int r;
    if (m->lx < 0 && (r = start(m)))
        return r;
    int32_t t = gr_lex_next(g, m->lx, c);
    if (t == -3)
        return -1;
    if (t < 0) {   /* the lexeme cannot go on: it ends here, and c starts the next one */
        if (!g->lx.ds[m->lx].n_acc)
            return 1;
        if ((r = end_lexeme(m, m->lx)) || (r = start(m)))
            return r;
        t = gr_lex_next(g, m->lx, c);
        if (t == -3)
            return -1;
        if (t < 0)
            return 1;
    }
    m->lx = t;
    if (!g->lx.ds[t].live)   /* nothing can follow inside the lexeme: end it now */
        return end_lexeme(m, t);
    return 0;
}

static int accepting_locked(v4g_matcher *m)
{
    if (m->finished)
        return 0;
    if (m->lx < 0)
        return gr_parser_accepts(&m->p, m->g);
    if (!m->g->lx.ds[m->lx].n_acc)
        return 0;
    mstate s = save(m);
    int ok = end_lexeme(m, m->lx) == 0 && gr_parser_accepts(&m->p, m->g);
    restore(m, s);
    return ok;
}

v4g_matcher *v4g_matcher_new(v4g_constraint *c, const v4g_vocab *v, v4_error *err)
{
    v4g_matcher *m = calloc(1, sizeof *m);
    if (!m) {
        v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory");
        return NULL;
    }
    m->c = v4g_constraint_ref(c);
    m->g = gr_constraint_grammar(c);
    m->v = v;
    m->lx = -1;
    m->allowed = calloc((size_t)m->g->lex_words + 1, sizeof *m->allowed);
    m->st = malloc(((size_t)v->max_depth + 2) * sizeof *m->st);
    if (!m->allowed || !m->st || gr_parser_init(&m->p, m->g, err)) {
        if (m->allowed && m->st)
            err = NULL;   /* gr_parser_init said why */
        else
            v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory");
        v4g_matcher_free(m);
        return NULL;
    }
    return m;
}

v4g_matcher *v4g_matcher_fork(const v4g_matcher *m, v4_error *err)
{
    v4g_matcher *f = v4g_matcher_new(m->c, m->v, err);
    if (!f)
        return NULL;
    gr_parser *d = &f->p;
    const gr_parser *s = &m->p;
    while (d->cap_sets < s->n_sets + 1 || d->cap_items < s->n_items) {
        /* grow by pushing through the same path as the parser: simplest is a realloc */
        int32_t cs = s->cap_sets;
        int64_t ci = s->cap_items;
        int32_t *so = realloc(d->set_off, ((size_t)cs + 1) * sizeof *so);
        uint64_t *al = so ? realloc(d->allowed, (size_t)cs * (size_t)m->g->lex_words * sizeof *al) : NULL;
        gr_item *it = al ? realloc(d->items, (size_t)ci * sizeof *it) : NULL;
        if (so)
            d->set_off = so;
        if (al)
            d->allowed = al;
        if (it)
            d->items = it;
        if (!so || !al || !it) {
            v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory");
            v4g_matcher_free(f);
            return NULL;
        }
        d->cap_sets = cs;
        d->cap_items = ci;
    }
    memcpy(d->set_off, s->set_off, ((size_t)s->n_sets + 1) * sizeof *s->set_off);
    memcpy(d->allowed, s->allowed, (size_t)s->n_sets * (size_t)m->g->lex_words * sizeof *s->allowed);
    memcpy(d->items, s->items, (size_t)s->n_items * sizeof *s->items);
    d->n_sets = s->n_sets;
    d->n_items = s->n_items;
    f->lx = m->lx;
    f->after_skip = m->after_skip;
    f->finished = m->finished;
    return f;
}

void v4g_matcher_free(v4g_matcher *m)
{
    if (!m)
        return;
    gr_parser_free(&m->p);
    free(m->allowed);
    free(m->st);
    v4g_constraint_unref(m->c);
    free(m);
}

/* The walk of trie nodes [first, last) with the matcher's full semantics, from the state
 * st[nd[first] - 1]: the tokens it takes get their bits.  0, or -1 out of memory. */
static int walk(v4g_matcher *m, int32_t first, int32_t last, uint32_t *bits)
{
    const v4g_vocab *v = m->v;
    int32_t prev_ok_depth = -1;   /* the state now is st[prev_ok_depth] */
    for (int32_t i = first; i < last;) {
        const int d = v->nd[i];
        if (prev_ok_depth != d - 1)
            restore(m, m->st[d - 1]);
        int r = feed_byte(m, v->nb[i]);
        if (r < 0)
            return -1;
        if (r) {
            prev_ok_depth = -1;
            i += v->nsz[i];
            continue;
        }
        m->st[d] = save(m);
        prev_ok_depth = d;
        for (int32_t t = v->ntok[i]; t >= 0; t = v->dup[t])
            bits[t >> 5] |= 1u << (t & 31);
        i++;
    }
    return 0;
}

/* The cache of lexer state s (gr_dstate.inner, .bnd): a walk of the whole trie over the
 * lexer alone.  A token whose bytes all lead to live states never ends a lexeme, so the
 * parser cannot refuse it; where a byte would end the lexeme (no transition from an
 * accepting state, or a state nothing can follow) the node is kept for a full walk. */
static int fill_cache(v4g_matcher *m, int32_t s)
{
    gr_grammar *g = m->g;
    const v4g_vocab *v = m->v;
    const size_t words = ((size_t)v->n + 31) / 32;
    if (g->lx.ds[s].generic && v->str_inner) {   /* string content: the vocabulary's cache */
        uint32_t *in = malloc(words * sizeof *in);
        int32_t *bn = malloc(((size_t)v->n_str_bnd * 2 + 1) * sizeof *bn);
        if (!in || !bn) {
            free(in);
            free(bn);
            return -1;
        }
        memcpy(in, v->str_inner, words * sizeof *in);
        for (int32_t k = 0; k < v->n_str_bnd; k++) {
            bn[2 * k] = v->str_bnd[k];
            bn[2 * k + 1] = s;
        }
        gr_dstate *ds = &g->lx.ds[s];
        ds->inner = in;
        ds->bnd = bn;
        ds->n_bnd = v->n_str_bnd;
        g->lx.bytes += words * sizeof *in + (size_t)v->n_str_bnd * 2 * sizeof *bn;
        g->lx.mask_bytes += words * sizeof *in + (size_t)v->n_str_bnd * 2 * sizeof *bn;
        return 0;
    }
    const int sf = gr_str_fill(g, v, s);   /* string content of other kinds: the same cache, filtered */
    if (sf)
        return sf < 0 ? -1 : 0;
    uint32_t *inner = calloc(words, sizeof *inner);
    int32_t *state = malloc(((size_t)v->max_depth + 2) * sizeof *state);
    int32_t **tab = malloc(((size_t)v->max_depth + 2) * sizeof *tab);   /* state[d]'s successor table */
    int32_t *bnd = NULL, n_bnd = 0, cap_bnd = 0;
    if (!inner || !state || !tab)
        goto oom;
    state[0] = s;
    tab[0] = g->lx.ds[s].next;
    for (int32_t i = 0; i < v->n_nodes;) {
        const int d = v->nd[i];
        const int32_t p = state[d - 1];
        const uint8_t c = v->nb[i];
        int32_t t = tab[d - 1] ? tab[d - 1][c] : -2;
        if (t == -2) {   /* not stepped yet: step (it makes p's table if p has none) */
            t = gr_lex_step(g, p, c);
            tab[d - 1] = g->lx.ds[p].next;
        }
        if (t == -3)
            goto oom;
        if (t >= 0 && g->lx.ds[t].live) {
            state[d] = t;
            tab[d] = g->lx.ds[t].next;
            for (int32_t k = v->ntok[i]; k >= 0; k = v->dup[k])
                inner[k >> 5] |= 1u << (k & 31);
            i++;
            continue;
        }
        if (t >= 0 || g->lx.ds[p].n_acc) {   /* the lexeme ends here: a full walk later */
            if (n_bnd + 2 > cap_bnd) {
                cap_bnd = cap_bnd ? cap_bnd * 2 : 64;
                int32_t *q = realloc(bnd, (size_t)cap_bnd * sizeof *q);
                if (!q)
                    goto oom;
                bnd = q;
            }
            bnd[n_bnd++] = i;
            bnd[n_bnd++] = p;
        }
        i += v->nsz[i];
    }
    free(tab);
    free(state);
    gr_dstate *ds = &g->lx.ds[s];
    ds->inner = inner;
    ds->bnd = bnd;
    ds->n_bnd = n_bnd / 2;
    g->lx.bytes += words * sizeof *inner + (size_t)n_bnd * sizeof *bnd;
    g->lx.mask_bytes += words * sizeof *inner + (size_t)n_bnd * sizeof *bnd;
    return 0;
oom:
    free(inner);
    free(state);
    free(tab);
    free(bnd);
    return -1;
}

/* the caches belong to one vocabulary at a time: another one empties them, and so does
 * a grammar whose caches outgrew their budget (they are filled again as needed) */
static void cache_for(v4g_matcher *m)
{
    gr_lexer *lx = &m->g->lx;
    if (lx->cache_vocab == m->v && lx->mask_bytes < GR_MASK_CACHE_BYTES)
        return;
    lx->bytes -= lx->mask_bytes;
    lx->mask_bytes = 0;
    for (int32_t i = 0; i < lx->n_ds; i++) {
        free(lx->ds[i].inner);
        free(lx->ds[i].bnd);
        lx->ds[i].inner = NULL;
        lx->ds[i].bnd = NULL;
        lx->ds[i].n_bnd = 0;
    }
    lx->cache_vocab = m->v;
}

int v4g_matcher_mask(v4g_matcher *m, uint32_t *bits, v4_error *err)
{
    const v4g_vocab *v = m->v;
    const size_t words = ((size_t)v->n + 31) / 32;
    memset(bits, 0, words * sizeof *bits);
    if (m->finished)
        return 0;
    pthread_mutex_lock(&m->g->mu);
    cache_for(m);
    const mstate base = save(m);
    int rc = 0;
    int r = m->lx < 0 ? start(m) : 0;   /* the lexer state the next byte meets */
    if (r < 0)
        rc = -1;
    if (r == 0 && m->lx >= 0) {
        const int32_t s = m->lx;
        if (!m->g->lx.ds[s].inner && fill_cache(m, s))
            rc = -1;
        if (!rc) {
            memcpy(bits, m->g->lx.ds[s].inner, words * sizeof *bits);
            /* the boundaries: lexer state p before node i, parser as now */
            const mstate here = save(m);
            for (int32_t k = 0; !rc && k < m->g->lx.ds[s].n_bnd; k++) {
                const int32_t i = m->g->lx.ds[s].bnd[2 * k], p = m->g->lx.ds[s].bnd[2 * k + 1];
                mstate at = here;
                at.lx = p;
                m->st[v->nd[i] - 1] = at;
                rc = walk(m, i, i + v->nsz[i], bits);
            }
        }
    }
    restore(m, base);
    if (rc)
        v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory (lexer cache full)");
    if (!rc && v->eos >= 0 && accepting_locked(m))
        bits[v->eos >> 5] |= 1u << (v->eos & 31);
    pthread_mutex_unlock(&m->g->mu);
    return rc;
}

int v4g_matcher_feed(v4g_matcher *m, const char *bytes, size_t len, size_t *at, v4_error *err)
{
    if (at)
        *at = 0;
    if (m->finished)
        return 1;
    pthread_mutex_lock(&m->g->mu);
    int rc = 0;
    for (size_t i = 0; i < len; i++) {
        const mstate s = save(m);
        int r = feed_byte(m, (uint8_t)bytes[i]);
        if (r) {
            restore(m, s);
            if (at)
                *at = i;
            rc = r < 0 ? v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory (lexer cache full)") : 1;
            break;
        }
    }
    if (!rc && at)
        *at = len;
    pthread_mutex_unlock(&m->g->mu);
    return rc;
}

int v4g_matcher_commit(v4g_matcher *m, int32_t tok, v4_error *err)
{
    const v4g_vocab *v = m->v;
    if (tok < 0 || tok >= v->n)
        return v4_err_set(err, V4_ERR_RANGE, "grammar", "token id %d outside the vocabulary (%d)", tok, v->n);
    if (m->finished)
        return 1;
    if (tok == v->eos) {
        int ok = v4g_matcher_accepting(m);
        if (ok)
            m->finished = 1;
        return ok ? 0 : 1;
    }
    if (v->special[tok])
        return 1;
    pthread_mutex_lock(&m->g->mu);
    const mstate base = save(m);
    int rc = 0;
    for (int64_t k = v->off[tok]; k < v->off[tok + 1]; k++) {
        int r = feed_byte(m, (uint8_t)v->data[k]);
        if (r) {
            restore(m, base);
            rc = r < 0 ? v4_err_set(err, V4_ERR_NOMEM, "grammar", "out of memory (lexer cache full)") : 1;
            break;
        }
    }
    pthread_mutex_unlock(&m->g->mu);
    return rc;
}

int v4g_matcher_accepting(v4g_matcher *m)
{
    pthread_mutex_lock(&m->g->mu);
    int ok = accepting_locked(m);
    pthread_mutex_unlock(&m->g->mu);
    return ok;
}

int v4g_matcher_finished(const v4g_matcher *m)
{
    return m->finished;
}
