/* test_mktokenizer.c - the synthetic tokenizer that mkmodel writes: deterministic,
 * loads with the real loader, has exactly vocab_size ids (every id decodes), the
 * DeepSeek special tokens at 0..5 with BOS/EOS from its config, byte tokens at
 * 6..261, learned merges that compress English, exact round trips, and the V4 chat
 * prompt ids (<think> / </think> are real tokens here). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "worker/serve/chat.h"
#include "worker/tokenizer/mktokenizer.h"

static v4_tokenizer *build(int vocab, char **json_out)
{
    char *j = NULL, *c = NULL;
    v4_error err = {0};
    int rc = v4_mktokenizer(vocab, &j, &c, &err);
    CHECK(!rc, "mktokenizer(%d): %s", vocab, err.msg);
    if (rc)
        return NULL;
    v4_tokenizer *t = NULL;
    CHECK(!v4_tok_load_mem(j, strlen(j), c, strlen(c), "generated", &t, &err), "load: %s", err.msg);
    if (json_out)
        *json_out = j;
    else
        free(j);
    free(c);
    return t;
}

static void round_trip(const v4_tokenizer *t, const char *s, size_t *n_ids)
{
    v4_error err = {0};
    v4_ids ids = {0};
    char *back = NULL;
    size_t len = 0;
    int rc = v4_tok_encode(t, s, strlen(s), &ids, &err) || v4_tok_decode(t, ids.v, ids.n, 0, &back, &len, &err);
    CHECK(!rc && len == strlen(s) && !memcmp(back, s, len), "round trip of \"%.40s\"", s);
    if (n_ids)
        *n_ids = ids.n;
    free(back);
    v4_ids_free(&ids);
}

static void test_tiny(void)
{
    char *j1 = NULL, *j2 = NULL;
    v4_tokenizer *t = build(4096, &j1), *t2 = build(4096, &j2);
    CHECK(j1 && j2 && !strcmp(j1, j2), "deterministic output");
    free(j1);
    free(j2);
    v4_tok_free(t2);
    if (!t)
        return;
    CHECK(v4_tok_n_ids(t) == 4096, "n_ids %d", v4_tok_n_ids(t));
    int holes = 0;
    for (int32_t id = 0; id < 4096; id++) {
        size_t len;
        holes += !v4_tok_bytes(t, id, &len) || !len;
    }
    CHECK(holes == 0, "%d ids do not decode", holes);
    CHECK(v4_tok_bos(t) == 0 && v4_tok_eos(t) == 1, "bos %d eos %d", v4_tok_bos(t), v4_tok_eos(t));
    CHECK(v4_tok_find(t, "<｜User｜>") == 2 && v4_tok_find(t, "<｜Assistant｜>") == 3 &&
              v4_tok_find(t, "<think>") == 4 && v4_tok_find(t, "</think>") == 5, "special ids");
    CHECK(v4_tok_is_special(t, 0) && v4_tok_is_special(t, 1) && !v4_tok_is_special(t, 2), "special flags");
    int bytes_ok = 1;
    for (int b = 0; b < 256; b++) {
        size_t len;
        const char *p = v4_tok_bytes(t, 6 + b, &len);
        bytes_ok &= p && len == 1 && (unsigned char)p[0] == b;
    }
    CHECK(bytes_ok, "byte tokens at 6..261");

    const char *english = "The river ran slowly through the old town, and the children ran down to "
                          "the water to see what the fishermen had caught.";
    size_t n = 0;
    round_trip(t, english, &n);
    CHECK(n * 3 < strlen(english), "merges compress English: %zu ids for %zu bytes", n, strlen(english));
    round_trip(t, "int main(void) { return 0; }\n\tx += 42;\r\n", NULL);
    round_trip(t, "中文 テキスト 한국어 العربية naïve 😀 ❤️ \u00a0\u3000 2026-11-29", NULL);
    round_trip(t, "<｜begin▁of▁sentence｜>a<｜User｜>b<｜Assistant｜><think>c</think>d<｜end▁of▁sentence｜>", NULL);

    /* the V4 chat prompt: every marker is one token */
    v4_ids ids = {0};
    v4_error err = {0};
    const v4_chat_msg msg[] = {{V4_CHAT_USER, "Hello"}};
    CHECK(!v4_chat_encode(t, NULL, msg, 1, 0, &ids, &err), "%s", err.msg);
    CHECK(ids.n >= 5 && ids.v[0] == 0 && ids.v[1] == 2 && ids.v[ids.n - 2] == 3 && ids.v[ids.n - 1] == 5,
          "chat ids [0, 2, ..., 3, 5]");
    ids.n = 0;
    CHECK(!v4_chat_encode(t, NULL, msg, 1, 1, &ids, &err) && ids.n >= 5 && ids.v[ids.n - 1] == 4,
          "thinking ends with <think> = 4");
    v4_ids_free(&ids);
    v4_tok_free(t);
}

static void test_sizes(void)
{
    v4_tokenizer *t = build(V4_MKTOK_MIN_VOCAB, NULL);
    CHECK(t && v4_tok_n_ids(t) == V4_MKTOK_MIN_VOCAB, "bytes only");
    if (t)
        round_trip(t, "bytes only: ok", NULL);
    v4_tok_free(t);
    t = build(32768, NULL);     /* the small preset */
    CHECK(t && v4_tok_n_ids(t) == 32768, "small preset: 32768 ids");
    if (t)
        round_trip(t, "The small preset has a larger vocabulary.", NULL);
    v4_tok_free(t);
    char *j, *c;
    v4_error err = {0};
    CHECK(v4_mktokenizer(V4_MKTOK_MIN_VOCAB - 1, &j, &c, &err) && err.code == V4_ERR_RANGE && !j,
          "too small: %s", err.msg);
}

int main(void)
{
    test_tiny();
    test_sizes();
    TEST_DONE();
}
