/* tok_pretok.c - the pre-tokenizer: the Split steps of tokenizer.json applied one
 * after the other, each to every piece the previous step produced.
 *
 * Design: depth-first.  Step k runs its regex over one piece and hands every
 * resulting piece straight to step k+1 (the last step hands it to the piece
 * function, normally BPE), so no list of pieces is ever materialised and memory
 * stays O(1) in the input.  Each regex sees only its piece as the subject, so a
 * look-ahead such as \s+(?!\S) stops at the piece end exactly as in HF tokenizers.
 *
 * The split behaviours reproduce HF's SplitDelimiterBehavior folds (split.rs) as a
 * streaming state machine over the (gap, match) spans: Isolated and Removed emit
 * directly; MergedWithPrevious, MergedWithNext and Contiguous hold one pending
 * piece.  Empty matches are zero-length spans (a boundary), empty pieces are dropped.
 *
 * Matching uses PCRE2 (UTF + UCP, JIT when available) with PCRE2_NO_UTF_CHECK: the
 * whole input is validated once by the encoder, and a per-call UTF check would make
 * the scan quadratic.
 */
#include "tok_internal.h"

typedef struct emitter {
    v4_tok_encoder *e;
    size_t k;               /* this step */
    const char *p;          /* the piece being split */
    int behavior;
    int have, prev_m;       /* pending piece [ps, pe) exists; previous span was a match */
    size_t ps, pe;
} emitter;

static int split_step(v4_tok_encoder *e, size_t k, const char *p, size_t n);

static int emit(emitter *m, size_t s, size_t end)
{
    return end > s ? split_step(m->e, m->k + 1, m->p + s, end - s) : 0;
}

static int flush(emitter *m)
{
    if (!m->have)
        return 0;
    m->have = 0;
    return emit(m, m->ps, m->pe);
}

static int hold(emitter *m, size_t s, size_t end)
{
    if (flush(m))
        return -1;
    m->have = 1;
    m->ps = s;
    m->pe = end;
    return 0;
}

/* One span [s, end) of the piece; is_match after inversion. */
static int span(emitter *m, size_t s, size_t end, int is_match)
{
    int rc = 0;
    switch (m->behavior) {
    case SPLIT_ISOLATED:
        return emit(m, s, end);
    case SPLIT_REMOVED:
        return is_match ? 0 : emit(m, s, end);
    case SPLIT_MERGED_PREV:     /* a match joins the piece before it, unless that was a match */
        if (is_match && !m->prev_m && m->have)
            m->pe = end;
        else
            rc = hold(m, s, end);
        break;
    case SPLIT_CONTIGUOUS:      /* runs of equal kind join */
        if (is_match == m->prev_m && m->have)
            m->pe = end;
        else
            rc = hold(m, s, end);
        break;
    case SPLIT_MERGED_NEXT:     /* a match joins the gap after it (pending = a match) */
        if (!is_match && m->have) {
            m->have = 0;
            rc = emit(m, m->ps, end);
        } else if (is_match) {
            rc = hold(m, s, end);
        } else {
            rc = emit(m, s, end);
        }
        break;
    }
    m->prev_m = is_match;
    return rc;
}

static int char_len(const char *p, size_t n)
{
    int k = tok_utf8_step((const unsigned char *)p, n);
    return k > 0 ? k : 1;
}

static int split_step(v4_tok_encoder *e, size_t k, const char *p, size_t n)
{
    const v4_tokenizer *t = e->t;
    if (k == t->n_splits)
        return e->piece_fn(e, p, n);
    const tok_split *sp = &t->splits[k];
    emitter m = {e, k, p, sp->behavior, 0, 0, 0, 0};
    int inv = sp->invert;
    size_t pos = 0, prev = 0;
    while (pos < n) {
        int rc = pcre2_match(sp->re, (PCRE2_SPTR)p, n, pos, PCRE2_NO_UTF_CHECK, e->md, e->mctx);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return v4_err_set(e->err, V4_ERR_INTERNAL, "tokenizer",
                              "pre-tokenizer step %zu: regex match failed: %s", k, (char *)msg);
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
        size_t s = ov[0], end = ov[1];
        if (s > prev && span(&m, prev, s, inv))
            return -1;
        if (span(&m, s, end, !inv))
            return -1;
        prev = end;
        if (end > s)
            pos = end;
        else if (end < n)
            pos = end + (size_t)char_len(p + end, n - end);   /* empty match: step one char */
        else
            break;
    }
    if (prev < n && span(&m, prev, n, inv))
        return -1;
    return flush(&m);
}

int tok_pretokenize(v4_tok_encoder *e, const char *p, size_t n)
{
    return n ? split_step(e, 0, p, n) : 0;
}
