/* fuzz_chat.c - libFuzzer harness for the chat prompt's encoding (worker/serve/chat.c over
 * worker/tokenizer/, v4_tok_encode_parts): the input is split at NUL bytes into a system
 * prompt and alternating user / assistant messages (any bytes: invalid UTF-8 must be an
 * error, never a crash).  Checked: every id is a token; no added-token id is produced
 * inside the texts (only the template's markers: BOS, one <｜User｜> per user turn, one
 * <｜Assistant｜> + </think>/<think> where the template puts them, EOS after each answer);
 * with markers_in_text the ids equal v4_tok_encode of v4_chat_prompt's string.
 * The tokenizer is tests/data/tokenizer (V4_FUZZ_TOKENIZER, set by CMake). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/serve/chat.h"

#ifndef V4_FUZZ_TOKENIZER
#define V4_FUZZ_TOKENIZER "tests/data/tokenizer"
#endif

static v4_tokenizer *tok;   /* loaded once (libFuzzer's process-wide setup) */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    v4_error err = {0};
    if (v4_tok_load(V4_FUZZ_TOKENIZER, &tok, &err)) {
        fprintf(stderr, "fuzz_chat: %s: %s\n", V4_FUZZ_TOKENIZER, err.msg);
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 8192)
        return 0;
    char *buf = malloc(size + 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    buf[size] = 0;
    /* pieces at NUL: the first is the system prompt, then user, assistant, user, ... */
    v4_chat_msg msgs[16];
    size_t n = 0;
    const char *system = buf;
    for (size_t i = strlen(buf); i < size && n < 16; i += strlen(buf + i + 1) + 1)
        msgs[n] = (v4_chat_msg){n % 2 ? V4_CHAT_ASSISTANT : V4_CHAT_USER, buf + i + 1}, n++;
    if (n % 2 == 0 && n > 0)
        n--;   /* end on a user turn */
    v4_chat_markers m;
    v4_chat_markers_init(&m, tok);
    for (int think = 0; think < 2; think++) {
        v4_error err = {0};
        v4_ids ids = {0}, ref = {0}, ex = {0};
        int rc = v4_chat_encode(tok, system, msgs, n, think, &ids, &err);
        if (rc) {
            if (!err.msg[0])
                abort();   /* a failure names its cause */
        } else {
            long markers = 0, want = 1;   /* BOS */
            for (size_t k = 0; k < n; k++)
                want += msgs[k].role == V4_CHAT_USER ? 1 + (k + 1 == n || msgs[k + 1].role == V4_CHAT_ASSISTANT) * 2 : 1;
            for (size_t k = 0; k < ids.n; k++) {
                size_t len;
                if (ids.v[k] < 0 || !v4_tok_bytes(tok, ids.v[k], &len))
                    abort();
                markers += ids.v[k] == m.bos_id || ids.v[k] == m.eos_id || ids.v[k] == m.user_id ||
                           ids.v[k] == m.assistant_id || (m.think_id >= 0 && ids.v[k] == m.think_id) ||
                           (m.end_think_id >= 0 && ids.v[k] == m.end_think_id);
            }
            /* the V3 test tokenizer has no <think> tokens: those markers are text there */
            if (m.think_id >= 0 && m.end_think_id >= 0 ? markers != want : markers > want)
                abort();
            char *p = NULL;
            size_t len = 0;
            if (v4_chat_prompt(&m, system, msgs, n, think, &p, &len, &err) || v4_tok_encode(tok, p, len, &ref, &err) ||
                v4_chat_encode_ex(tok, system, msgs, n, think, 1, &ex, &err) || ex.n != ref.n ||
                memcmp(ex.v, ref.v, ref.n * sizeof *ref.v))
                abort();
            free(p);
        }
        v4_ids_free(&ids);
        v4_ids_free(&ref);
        v4_ids_free(&ex);
    }
    free(buf);
    return 0;
}
