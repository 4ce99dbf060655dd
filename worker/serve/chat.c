/* chat.c - see chat.h.  The prompt is built as one string and encoded in one call,
 * exactly what the reference does (encode_messages() then tokenizer.encode()), so
 * the ids at the seams between markers and text are the reference's. */
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

int v4_chat_prompt(const v4_chat_markers *m, const char *system, const v4_chat_msg *msgs,
                   size_t n, int thinking, char **out, size_t *len, v4_error *err)
{
    *out = NULL;
    *len = 0;
    if (check(msgs, n, err))
        return -1;
    v4_strbuf b = {0};
    v4_sb_put(&b, m->bos);
    if (system)
        v4_sb_put(&b, system);
    for (size_t i = 0; i < n; i++) {
        if (msgs[i].role == V4_CHAT_ASSISTANT) {
            v4_sb_put(&b, msgs[i].text);
            v4_sb_put(&b, m->eos);
            continue;
        }
        v4_sb_put(&b, m->user);
        v4_sb_put(&b, msgs[i].text);
        if (i + 1 == n || msgs[i + 1].role == V4_CHAT_ASSISTANT) {
            v4_sb_put(&b, m->assistant);
            /* drop_thinking: only the turn being generated may open a reasoning block */
            v4_sb_put(&b, thinking && i + 1 == n ? m->think : m->end_think);
        }
    }
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
    v4_chat_markers m;
    v4_chat_markers_init(&m, tok);
    char *prompt;
    size_t len;
    if (v4_chat_prompt(&m, system, msgs, n, thinking, &prompt, &len, err))
        return -1;
    int rc = v4_tok_encode(tok, prompt, len, out, err);
    free(prompt);
    return rc;
}
