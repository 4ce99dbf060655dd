/* chat.c - see chat.h.  The prompt is built as pieces (the template's markers, the
 * caller's texts) and encoded in one call as one text (v4_tok_encode_parts), what the
 * reference does (encode_messages() then tokenizer.encode()), so the ids at the seams
 * between markers and text are the reference's; but no marker is matched inside a
 * caller's text: user content stays text (docs/tokenizer.md "Text stays text"). */
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "config/strbuf.h"

static const char BOS[] = "<｜begin▁of▁sentence｜>";
static const char EOS[] = "<｜end▁of▁sentence｜>";
static const char USER[] = "<｜User｜>";
static const char ASSISTANT[] = "<｜Assistant｜>";
static const char THINK[] = "<think>";
static const char END_THINK[] = "</think>";

void v4_chat_markers_init(v4_chat_markers *m, const v4_tokenizer *tok)
{
    const char *bos = tok && v4_tok_bos_text(tok) ? v4_tok_bos_text(tok) : BOS;
    const char *eos = tok && v4_tok_eos_text(tok) ? v4_tok_eos_text(tok) : EOS;
    *m = (v4_chat_markers){bos, eos, USER, ASSISTANT, THINK, END_THINK, -1, -1, -1, -1, -1, -1};
    if (!tok)
        return;
    m->bos_id = v4_tok_find(tok, m->bos);
    m->eos_id = v4_tok_find(tok, m->eos);
    m->user_id = v4_tok_find(tok, m->user);
    m->assistant_id = v4_tok_find(tok, m->assistant);
    m->think_id = v4_tok_find(tok, m->think);
    m->end_think_id = v4_tok_find(tok, m->end_think);
}


static int check(const v4_chat_msg *msgs, size_t n, v4_error *err)
{
    if (!n)
        return v4_err_set(err, V4_ERR_INVALID, "chat", "no messages");
    for (size_t i = 0; i < n; i++) {
        if (!msgs[i].text)
            return v4_err_set(err, V4_ERR_INVALID, "chat", "message %zu has no text", i);
        if (msgs[i].role != V4_CHAT_USER && msgs[i].role != V4_CHAT_ASSISTANT)
            return v4_err_set(err, V4_ERR_INVALID, "chat", "message %zu: unknown role", i);
        if (msgs[i].role == V4_CHAT_ASSISTANT && (i == 0 || msgs[i - 1].role != V4_CHAT_USER))
            return v4_err_set(err, V4_ERR_INVALID, "chat",
                              "message %zu: an assistant message must follow a user message", i);
    }
    if (msgs[n - 1].role != V4_CHAT_USER)
        return v4_err_set(err, V4_ERR_INVALID, "chat",
                          "the last message must be a user message (the prompt asks for the next answer)");
    return 0;
}

/* The prompt as pieces: the template's markers (literal 0) and the caller's texts
 * (literal 1: the system prompt and every message; markers written in them stay text). */
typedef struct pieces {
    v4_tok_part *p;
    size_t n, cap;
    int oom;
} pieces;

static void add(pieces *ps, const char *text, int literal)
{
    if (ps->n == ps->cap) {
        size_t cap = ps->cap ? ps->cap * 2 : 16;
        v4_tok_part *q = realloc(ps->p, cap * sizeof *q);
        if (!q) {
            ps->oom = 1;
            return;
        }
        ps->p = q;
        ps->cap = cap;
    }
    ps->p[ps->n++] = (v4_tok_part){text, strlen(text), literal};
}

static int build(const v4_chat_markers *m, const char *system, const v4_chat_msg *msgs, size_t n, int thinking,
                 pieces *ps, v4_error *err)
{
    if (check(msgs, n, err))
        return -1;
    add(ps, m->bos, 0);
    if (system)
        add(ps, system, 1);
    for (size_t i = 0; i < n; i++) {
        if (msgs[i].role == V4_CHAT_ASSISTANT) {
            add(ps, msgs[i].text, 1);
            add(ps, m->eos, 0);
            continue;
        }
        add(ps, m->user, 0);
        add(ps, msgs[i].text, 1);
        if (i + 1 == n || msgs[i + 1].role == V4_CHAT_ASSISTANT) {
            add(ps, m->assistant, 0);
            /* drop_thinking: only the turn being generated may open a reasoning block */
            add(ps, thinking && i + 1 == n ? m->think : m->end_think, 0);
        }
    }
    if (ps->oom) {
        free(ps->p);
        ps->p = NULL;
        return v4_err_set(err, V4_ERR_NOMEM, "chat", "out of memory");
    }
    return 0;
}

int v4_chat_prompt(const v4_chat_markers *m, const char *system, const v4_chat_msg *msgs,
                   size_t n, int thinking, char **out, size_t *len, v4_error *err)
{
    *out = NULL;
    *len = 0;
    pieces ps = {0};
    if (build(m, system, msgs, n, thinking, &ps, err))
        return -1;
    v4_strbuf b = {0};
    for (size_t k = 0; k < ps.n; k++)
        v4_sb_put(&b, ps.p[k].text);
    free(ps.p);
    if (b.oom) {
        free(b.p);
        return v4_err_set(err, V4_ERR_NOMEM, "chat", "out of memory");
    }
    *out = b.p;
    *len = b.n;
    return 0;
}

int v4_chat_encode(const v4_tokenizer *tok, const char *system, const v4_chat_msg *msgs,
                   size_t n, int thinking, v4_ids *out, v4_error *err)
{
    return v4_chat_encode_ex(tok, system, msgs, n, thinking, 0, out, err);
}

int v4_chat_encode_ex(const v4_tokenizer *tok, const char *system, const v4_chat_msg *msgs, size_t n, int thinking,
                      int markers_in_text, v4_ids *out, v4_error *err)
{
    v4_chat_markers m;
    v4_chat_markers_init(&m, tok);
    pieces ps = {0};
    if (build(&m, system, msgs, n, thinking, &ps, err))
        return -1;
    for (size_t k = 0; markers_in_text && k < ps.n; k++)
        ps.p[k].literal = 0;
    int rc = v4_tok_encode_parts(tok, ps.p, ps.n, out, err);
    free(ps.p);
    return rc;
}
