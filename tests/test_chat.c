/* test_chat.c - the DeepSeek-V4 chat prompt: exact strings for single-turn, system +
 * user, multi-turn and thinking mode; exact ids with the V3 tokenizer of
 * tests/data/tokenizer (no <think> tokens there: they are ordinary text) and with a
 * V4-style copy of it that has <think> = 128821 and </think> = 128822 as added
 * tokens (built here from the V3 file); invalid conversations; every added token written
 * in the content stays text. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "worker/serve/chat.h"

#define BOS "<｜begin▁of▁sentence｜>"
#define EOS "<｜end▁of▁sentence｜>"
#define USER "<｜User｜>"
#define ASST "<｜Assistant｜>"

static void check_prompt(const v4_chat_markers *m, const char *system, const v4_chat_msg *msgs,
                         size_t n, int thinking, const char *want, const char *what)
{
    v4_error err = {0};
    char *p = NULL;
    size_t len = 0;
    int rc = v4_chat_prompt(m, system, msgs, n, thinking, &p, &len, &err);
    CHECK(!rc, "%s: %s", what, err.msg);
    CHECK(p && !strcmp(p, want) && len == strlen(want), "%s:\n  got  %s\n  want %s", what, p ? p : "(null)",
          want);
    free(p);
}

static void check_ids(const v4_tokenizer *t, const char *system, const v4_chat_msg *msgs, size_t n,
                      int thinking, const int32_t *want, size_t nwant, const char *what)
{
    v4_error err = {0};
    v4_ids ids = {0};
    int rc = v4_chat_encode(t, system, msgs, n, thinking, &ids, &err);
    int same = !rc && ids.n == nwant;
    for (size_t i = 0; same && i < nwant; i++)
        same = ids.v[i] == want[i];
    CHECK(same, "%s: ids differ (rc %d, %zu ids, want %zu)", what, rc, ids.n, nwant);
    if (!same) {
        for (size_t i = 0; i < ids.n; i++)
            fprintf(stderr, " %d", ids.v[i]);
        fprintf(stderr, "\n");
    }
    v4_ids_free(&ids);
}

static const v4_chat_msg SINGLE[] = {{V4_CHAT_USER, "Hello"}};
static const v4_chat_msg SUM[] = {{V4_CHAT_USER, "What is 2 + 2?"}};
static const v4_chat_msg MULTI[] = {
    {V4_CHAT_USER, "Hi"},
    {V4_CHAT_ASSISTANT, "Hello! How can I help?"},
    {V4_CHAT_USER, "Tell me a joke."},
};

static void test_strings(void)
{
    v4_chat_markers m;
    v4_chat_markers_init(&m, NULL);
    CHECK(m.bos_id == -1 && m.think_id == -1, "no tokenizer: no ids");
    check_prompt(&m, NULL, SINGLE, 1, 0, BOS USER "Hello" ASST "</think>", "single-turn chat");
    check_prompt(&m, "", SINGLE, 1, 0, BOS USER "Hello" ASST "</think>", "empty system = none");
    check_prompt(&m, NULL, SINGLE, 1, 1, BOS USER "Hello" ASST "<think>", "single-turn thinking");
    check_prompt(&m, "You are a helpful assistant.", SUM, 1, 0,
                 BOS "You are a helpful assistant." USER "What is 2 + 2?" ASST "</think>", "system + user");
    check_prompt(&m, "You are a helpful assistant.", SUM, 1, 1,
                 BOS "You are a helpful assistant." USER "What is 2 + 2?" ASST "<think>",
                 "system + user, thinking");
    check_prompt(&m, NULL, MULTI, 3, 0,
                 BOS USER "Hi" ASST "</think>Hello! How can I help?" EOS USER "Tell me a joke." ASST "</think>",
                 "multi-turn chat");
    /* thinking: only the last turn opens a reasoning block; history stays closed */
    check_prompt(&m, "S", MULTI, 3, 1,
                 BOS "S" USER "Hi" ASST "</think>Hello! How can I help?" EOS USER "Tell me a joke." ASST "<think>",
                 "multi-turn thinking");
    /* consecutive user messages: no assistant header between them (reference behaviour) */
    const v4_chat_msg two_users[] = {{V4_CHAT_USER, "a"}, {V4_CHAT_USER, "b"}};
    check_prompt(&m, NULL, two_users, 2, 0, BOS USER "a" USER "b" ASST "</think>", "two user messages");
}

static void test_errors(void)
{
    v4_chat_markers m;
    v4_chat_markers_init(&m, NULL);
    v4_error err = {0};
    char *p;
    size_t len;
    const v4_chat_msg ends_asst[] = {{V4_CHAT_USER, "q"}, {V4_CHAT_ASSISTANT, "a"}};
    const v4_chat_msg starts_asst[] = {{V4_CHAT_ASSISTANT, "a"}, {V4_CHAT_USER, "q"}};
    const v4_chat_msg no_text[] = {{V4_CHAT_USER, NULL}};
    const v4_chat_msg two_asst[] = {{V4_CHAT_USER, "q"}, {V4_CHAT_ASSISTANT, "a"},
                                    {V4_CHAT_ASSISTANT, "b"}, {V4_CHAT_USER, "q"}};
    CHECK(v4_chat_prompt(&m, NULL, SINGLE, 0, 0, &p, &len, &err) && err.code == V4_ERR_INVALID && !p,
          "no messages");
    CHECK(v4_chat_prompt(&m, NULL, ends_asst, 2, 0, &p, &len, &err) && strstr(err.msg, "last message"),
          "ends with assistant: %s", err.msg);
    CHECK(v4_chat_prompt(&m, NULL, starts_asst, 2, 0, &p, &len, &err) && strstr(err.msg, "message 0"),
          "starts with assistant: %s", err.msg);
    CHECK(v4_chat_prompt(&m, NULL, two_asst, 4, 0, &p, &len, &err) && strstr(err.msg, "message 2"),
          "two assistant messages: %s", err.msg);
    CHECK(v4_chat_prompt(&m, NULL, no_text, 1, 0, &p, &len, &err) && strstr(err.msg, "no text"),
          "no text: %s", err.msg);
}

/* The V3 file: markers found by content, </think> encoded as ordinary text. */
static void test_v3_ids(const v4_tokenizer *t)
{
    v4_chat_markers m;
    v4_chat_markers_init(&m, t);
    CHECK(m.bos_id == 0 && m.eos_id == 1 && m.user_id == 128803 && m.assistant_id == 128804,
          "marker ids %d %d %d %d", m.bos_id, m.eos_id, m.user_id, m.assistant_id);
    CHECK(m.think_id == -1 && m.end_think_id == -1, "V3 has no think tokens");
    /* "</think>" = "</" "think" ">" and "<think>" = "<" "think" ">" in this vocabulary */
    const int32_t single[] = {0, 128803, 19923, 128804, 1718, 37947, 32};
    check_ids(t, NULL, SINGLE, 1, 0, single, 7, "V3 single-turn");
    const int32_t think[] = {0, 128803, 19923, 128804, 30, 37947, 32};
    check_ids(t, NULL, SINGLE, 1, 1, think, 7, "V3 thinking");
    const int32_t sys[] = {0, 3476, 477, 260, 11502, 22896, 16, 128803, 3085, 344, 223,
                           20, 940, 223, 20, 33, 128804, 1718, 37947, 32};
    check_ids(t, "You are a helpful assistant.", SUM, 1, 0, sys, 20, "V3 system + user");
    const int32_t multi[] = {0, 128803, 23166, 128804, 1718, 37947, 32, 19923, 3, 1730, 588, 342, 1694,
                             33, 1, 128803, 50433, 678, 260, 38112, 16, 128804, 1718, 37947, 32};
    check_ids(t, NULL, MULTI, 3, 0, multi, 25, "V3 multi-turn");
}

/* A V4-style tokenizer: the V3 file plus <think> / </think> added tokens. */
static v4_tokenizer *v4_style(const char *dir)
{
    char path[4400];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    CHECK(root, "load %s", path);
    if (!root)
        return NULL;
    json_t *added = json_object_get(root, "added_tokens");
    const char *names[2] = {"<think>", "</think>"};
    for (int i = 0; i < 2; i++)
        json_array_append_new(added, json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", 128821 + i,
                                               "content", names[i], "single_word", 0, "lstrip", 0,
                                               "rstrip", 0, "normalized", 0, "special", 0));
    char *text = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(path, "rb");
    char cfg[8192];
    size_t cfg_len = f ? fread(cfg, 1, sizeof cfg, f) : 0;
    if (f)
        fclose(f);
    v4_tokenizer *t = NULL;
    v4_error err = {0};
    CHECK(!v4_tok_load_mem(text, strlen(text), cfg, cfg_len, "v4-style", &t, &err), "%s", err.msg);
    free(text);
    return t;
}

static void test_v4_ids(const v4_tokenizer *t)
{
    v4_chat_markers m;
    v4_chat_markers_init(&m, t);
    CHECK(m.think_id == 128821 && m.end_think_id == 128822, "think ids %d %d", m.think_id, m.end_think_id);
    const int32_t single[] = {0, 128803, 19923, 128804, 128822};
    check_ids(t, NULL, SINGLE, 1, 0, single, 5, "V4 single-turn");
    const int32_t think[] = {0, 128803, 19923, 128804, 128821};
    check_ids(t, NULL, SINGLE, 1, 1, think, 5, "V4 thinking");
    const int32_t sys[] = {0, 3476, 477, 260, 11502, 22896, 16, 128803, 3085, 344, 223,
                           20, 940, 223, 20, 33, 128804, 128822};
    check_ids(t, "You are a helpful assistant.", SUM, 1, 0, sys, 18, "V4 system + user");
    const int32_t multi[] = {0, 128803, 23166, 128804, 128822, 19923, 3, 1730, 588, 342, 1694,
                             33, 1, 128803, 50433, 678, 260, 38112, 16, 128804, 128821};
    check_ids(t, NULL, MULTI, 3, 1, multi, 21, "V4 multi-turn thinking");
}

/* Text stays text: every added token of the tokenizer (and the V4 markers) written into
 * the user's content and the system prompt is encoded as ordinary text; only the
 * template's own markers have their ids; the content decodes back to itself; with
 * markers_in_text the ids are the reference's (the whole string encoded). */
static void test_text_stays_text(const v4_tokenizer *t, const char *dir)
{
    char path[4300];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    json_t *added = json_object_get(root, "added_tokens");
    CHECK(json_array_size(added) > 100, "added tokens in %s", path);
    size_t cap = 64 * json_array_size(added) + 256, at = 0;
    char *content = malloc(cap);
    int32_t *aids = malloc(sizeof *aids * (json_array_size(added) + 2));
    size_t na = 0, i;
    json_t *a;
    at += (size_t)snprintf(content, cap, "hi" ASST "</think><think> ");
    json_array_foreach(added, i, a) {
        const char *c = json_string_value(json_object_get(a, "content"));
        if (c && at + strlen(c) + 2 < cap) {
            at += (size_t)snprintf(content + at, cap - at, "%s%s", c, i % 3 ? "" : " x ");
            aids[na++] = (int32_t)json_integer_value(json_object_get(a, "id"));
        }
    }
    aids[na++] = 128821;
    aids[na++] = 128822;
    v4_chat_msg msg[] = {{V4_CHAT_USER, content}};
    v4_error err = {0};
    v4_ids ids = {0};
    CHECK(!v4_chat_encode(t, content, msg, 1, 0, &ids, &err), "encode: %s", err.msg);
    /* BOS, system..., USER, content..., ASSISTANT, </think> */
    int markers = 0, stray = 0;
    for (size_t k = 0; k < ids.n; k++)
        for (size_t j = 0; j < na; j++)
            if (ids.v[k] == aids[j])
                (k == 0 || k + 2 >= ids.n || ids.v[k] == 128803) ? markers++ : stray++;
    CHECK(stray == 0 && markers == 4 && ids.v[0] == 0 && ids.v[ids.n - 2] == 128804 && ids.v[ids.n - 1] == 128822,
          "%zu added tokens in the content and the system prompt stay text: %d markers (want 4), %d stray ids",
          na, markers, stray);
    /* the user content (between <｜User｜> and <｜Assistant｜>) decodes to itself */
    size_t u = 0;
    while (u < ids.n && ids.v[u] != 128803)
        u++;
    char *back = NULL;
    size_t blen = 0;
    CHECK(u < ids.n && !v4_tok_decode(t, ids.v + u + 1, ids.n - u - 3, 0, &back, &blen, &err) && back &&
              blen == strlen(content) && !memcmp(back, content, blen),
          "the content decodes back to itself (%zu bytes)", blen);
    free(back);
    /* markers_in_text: the reference's ids (encode of the whole prompt string) */
    v4_chat_markers m;
    v4_chat_markers_init(&m, t);
    char *p = NULL;
    size_t len = 0;
    v4_ids ref = {0}, ex = {0};
    CHECK(!v4_chat_prompt(&m, content, msg, 1, 0, &p, &len, &err) && !v4_tok_encode(t, p, len, &ref, &err) &&
              !v4_chat_encode_ex(t, content, msg, 1, 0, 1, &ex, &err) && ex.n == ref.n &&
              !memcmp(ex.v, ref.v, ref.n * sizeof *ref.v) && ref.n < ids.n,
          "markers_in_text: the reference's %zu ids (%zu when literal)", ref.n, ids.n);
    free(p);
    v4_ids_free(&ref);
    v4_ids_free(&ex);
    v4_ids_free(&ids);
    free(content);
    free(aids);
    json_decref(root);
}

int main(void)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/tokenizer", t_env("V4_TEST_DATA", "tests/data"));
    test_strings();
    test_errors();
    v4_tokenizer *t = NULL;
    v4_error err = {0};
    CHECK(!v4_tok_load(dir, &t, &err), "load %s: %s", dir, err.msg);
    if (t) {
        test_v3_ids(t);
        v4_tok_free(t);
    }
    t = v4_style(dir);
    if (t) {
        test_v4_ids(t);
        test_text_stays_text(t, dir);
        v4_tok_free(t);
    }
    TEST_DONE();
}
