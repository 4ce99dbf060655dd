/* test_task_packet.c - the task packet parser and the result/error records:
 * a table of malformed packets with the exact error code and field (checklist R11,
 * parser side), the accepted forms, and the JSON shape of results. */
#include <string.h>

#include "testutil.h"
#include "worker/serve/result_packet.h"
#include "worker/serve/task_packet.h"

typedef struct bad_case {
    const char *body;
    v4_task_errcode code;
    const char *where;
    int line, column;   /* invalid_json: expected position (0 = not checked) */
} bad_case;

static const bad_case BAD[] = {
    {"", V4_TASK_INVALID_JSON, "body", 1, 0},
    {"not json", V4_TASK_INVALID_JSON, "body", 1, 3},
    {"{\"id\":\"a\",\"id\":\"b\",\"prompt\":\"x\"}", V4_TASK_INVALID_JSON, "body", 1, 14},
    {"{\"id\":\"a\",\"prompt\":NaN}", V4_TASK_INVALID_JSON, "body", 0, 0},
    {"{\"id\":\"a\",\"seed\":9223372036854775808,\"prompt\":\"x\"}", V4_TASK_INVALID_JSON, "body", 0, 0},
    {"{\"id\":\"a\",\"prompt\":\"a\\u0000b\"}", V4_TASK_INVALID_JSON, "body", 0, 0},
    {"{\"id\":\"a\",\"prompt\":\"\xff\"}", V4_TASK_INVALID_JSON, "body", 0, 0},
    {"{\"id\":\"a\",\"prompt\":\"x\"} {}", V4_TASK_INVALID_JSON, "body", 0, 0},
    {"\"just a string\"", V4_TASK_INVALID_JSON, "body", 0, 0},
    {"[1,2]", V4_TASK_INVALID_JSON, "body", 0, 0},
    {"{\"prompt\":\"x\"}", V4_TASK_INVALID_FIELD, "id", 0, 0},
    {"{\"id\":7,\"prompt\":\"x\"}", V4_TASK_INVALID_FIELD, "id", 0, 0},
    {"{\"id\":\"\",\"prompt\":\"x\"}", V4_TASK_INVALID_FIELD, "id", 0, 0},
    {"{\"id\":\"a\"}", V4_TASK_INVALID_FIELD, "messages", 0, 0},
    {"{\"id\":\"a\",\"prompt\":\"x\",\"input_ids\":[1]}", V4_TASK_INVALID_FIELD, "messages", 0, 0},
    {"{\"id\":\"a\",\"prompt\":5}", V4_TASK_INVALID_FIELD, "prompt", 0, 0},
    {"{\"id\":\"a\",\"prompt\":\"x\",\"max_tokens\":0}", V4_TASK_INVALID_FIELD, "max_tokens", 0, 0},
    {"{\"id\":\"a\",\"prompt\":\"x\",\"max_tokens\":1.5}", V4_TASK_INVALID_FIELD, "max_tokens", 0, 0},
    {"{\"id\":\"a\",\"prompt\":\"x\",\"max_tokens\":\"8\"}", V4_TASK_INVALID_FIELD, "max_tokens", 0, 0},
    {"{\"id\":\"a\",\"prompt\":\"x\",\"temperature\":-1}", V4_TASK_INVALID_FIELD, "temperature", 0, 0},
    {"{\"id\":\"a\",\"prompt\":\"x\",\"top_p\":0}", V4_TASK_INVALID_FIELD, "top_p", 0, 0},
    {"{\"id\":\"a\",\"prompt\":\"x\",\"top_p\":1.5}", V4_TASK_INVALID_FIELD, "top_p", 0, 0},
    {"{\"id\":\"a\",\"prompt\":\"x\",\"top_k\":-1}", V4_TASK_INVALID_FIELD, "top_k", 0, 0},
    {"{\"id\":\"a\",\"prompt\":\"x\",\"seed\":-1}", V4_TASK_INVALID_FIELD, "seed", 0, 0},
    {"{\"id\":\"a\",\"prompt\":\"x\",\"stop\":[1]}", V4_TASK_INVALID_FIELD, "stop[0]", 0, 0},
    {"{\"id\":\"a\",\"prompt\":\"x\",\"stop\":[\"\"]}", V4_TASK_INVALID_FIELD, "stop[0]", 0, 0},
    {"{\"id\":\"a\",\"prompt\":\"x\",\"stop\":\"\"}", V4_TASK_INVALID_FIELD, "stop", 0, 0},
    {"{\"id\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]}",
     V4_TASK_UNSUPPORTED_FIELD, "messages[0].content[0]", 0, 0},
    {"{\"id\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":5}]}]}",
     V4_TASK_INVALID_FIELD, "messages[0].content[0].text", 0, 0},
    {"{\"id\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":[7]}]}", V4_TASK_INVALID_FIELD,
     "messages[0].content[0]", 0, 0},
    {"{\"id\":\"a\",\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", V4_TASK_INVALID_FIELD,
     "messages[0].role", 0, 0},
    {"{\"id\":\"a\",\"prompt\":\"x\",\"thinking\":1}", V4_TASK_INVALID_FIELD, "thinking", 0, 0},
    {"{\"id\":\"a\",\"prompt\":\"x\",\"ignore_eos\":\"yes\"}", V4_TASK_INVALID_FIELD, "ignore_eos", 0, 0},
    {"{\"id\":\"a\",\"prompt\":\"x\",\"deadline_ms\":0}", V4_TASK_INVALID_FIELD, "deadline_ms", 0, 0},
    {"{\"id\":\"a\",\"input_ids\":[]}", V4_TASK_INVALID_FIELD, "input_ids", 0, 0},
    {"{\"id\":\"a\",\"input_ids\":[1,-2]}", V4_TASK_INVALID_FIELD, "input_ids[1]", 0, 0},
    {"{\"id\":\"a\",\"input_ids\":[1,2.0]}", V4_TASK_INVALID_FIELD, "input_ids[1]", 0, 0},
    {"{\"id\":\"a\",\"messages\":[]}", V4_TASK_INVALID_FIELD, "messages", 0, 0},
    {"{\"id\":\"a\",\"messages\":[{\"role\":\"bot\",\"content\":\"x\"}]}", V4_TASK_INVALID_FIELD, "messages[0].role", 0, 0},
    {"{\"id\":\"a\",\"messages\":[{\"role\":\"user\"}]}", V4_TASK_INVALID_FIELD, "messages[0].content", 0, 0},
    {"{\"id\":\"a\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"},{\"role\":\"assistant\",\"content\":\"a\"}]}",
     V4_TASK_INVALID_FIELD, "messages", 0, 0},
    /* type and the summarize fields */
    {"{\"id\":\"a\",\"type\":\"translate\",\"prompt\":\"x\"}", V4_TASK_INVALID_FIELD, "type", 0, 0},
    {"{\"id\":\"a\",\"type\":1,\"prompt\":\"x\"}", V4_TASK_INVALID_FIELD, "type", 0, 0},
    {"{\"id\":\"a\",\"type\":\"summarize\"}", V4_TASK_INVALID_FIELD, "document", 0, 0},
    {"{\"id\":\"a\",\"type\":\"summarize\",\"document\":\"\"}", V4_TASK_INVALID_FIELD, "document", 0, 0},
    {"{\"id\":\"a\",\"type\":\"summarize\",\"document\":[\"x\"]}", V4_TASK_INVALID_FIELD, "document", 0, 0},
    {"{\"id\":\"a\",\"type\":\"summarize\",\"document\":\"d\",\"prompt\":\"x\"}", V4_TASK_INVALID_FIELD, "prompt", 0, 0},
    {"{\"id\":\"a\",\"type\":\"summarize\",\"document\":\"d\",\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}",
     V4_TASK_INVALID_FIELD, "messages", 0, 0},
    {"{\"id\":\"a\",\"type\":\"summarize\",\"document\":\"d\",\"input_ids\":[1]}", V4_TASK_INVALID_FIELD, "input_ids", 0, 0},
    {"{\"id\":\"a\",\"type\":\"summarize\",\"document\":\"d\",\"max_tokens\":5}", V4_TASK_INVALID_FIELD, "max_tokens", 0, 0},
    {"{\"id\":\"a\",\"type\":\"summarize\",\"document\":\"d\",\"max_summary_tokens\":0}", V4_TASK_INVALID_FIELD,
     "max_summary_tokens", 0, 0},
    {"{\"id\":\"a\",\"type\":\"summarize\",\"document\":\"d\",\"max_summary_tokens\":1048577}", V4_TASK_INVALID_FIELD,
     "max_summary_tokens", 0, 0},
    {"{\"id\":\"a\",\"type\":\"summarize\",\"document\":\"d\",\"instructions\":7}", V4_TASK_INVALID_FIELD, "instructions", 0, 0},
    {"{\"id\":\"a\",\"prompt\":\"x\",\"document\":\"d\"}", V4_TASK_INVALID_FIELD, "document", 0, 0},
    {"{\"id\":\"a\",\"type\":\"generate\",\"prompt\":\"x\",\"instructions\":\"i\"}", V4_TASK_INVALID_FIELD, "instructions", 0, 0},
    {"{\"id\":\"a\",\"prompt\":\"x\",\"max_summary_tokens\":5}", V4_TASK_INVALID_FIELD, "max_summary_tokens", 0, 0},
};

static void test_bad(void)
{
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        const bad_case *c = &BAD[i];
        v4_task t;
        v4_task_error e;
        int rc = v4_task_parse(c->body, strlen(c->body), 4096, &t, &e);
        CHECK(rc == -1, "case %zu accepted: %s", i, c->body);
        CHECK(e.code == c->code, "case %zu: code %s, want %s (%s)", i, v4_task_errcode_name(e.code),
              v4_task_errcode_name(c->code), e.message);
        CHECK(!strcmp(e.where, c->where), "case %zu: where '%s', want '%s'", i, e.where, c->where);
        if (c->line)
            CHECK(e.line == c->line, "case %zu: line %d, want %d", i, e.line, c->line);
        if (c->column)
            CHECK(e.column == c->column && e.position == c->column, "case %zu: column %d position %ld, want %d", i,
                  e.column, e.position, c->column);
        CHECK(e.message[0], "case %zu: empty message", i);
        v4_task_free(&t);
    }
}

static void test_limits(void)
{
    /* oversize body */
    char big[300];
    memset(big, ' ', sizeof big);
    memcpy(big, "{\"id\":\"a\",\"prompt\":\"x\"}", 23);
    v4_task t;
    v4_task_error e;
    CHECK(v4_task_parse(big, sizeof big, 256, &t, &e) == -1 && e.code == V4_TASK_INVALID_JSON, "oversize accepted");
    CHECK(strstr(e.message, "exceeds") != NULL, "oversize message: %s", e.message);
    v4_task_free(&t);
    /* depth 3000 */
    static char deep[6100];
    size_t n = 0;
    n += (size_t)sprintf(deep, "{\"id\":\"a\",\"prompt\":\"x\",\"metadata\":");
    for (int i = 0; i < 3000; i++)
        deep[n++] = '[';
    for (int i = 0; i < 3000; i++)
        deep[n++] = ']';
    deep[n++] = '}';
    CHECK(v4_task_parse(deep, n, sizeof deep, &t, &e) == -1 && e.code == V4_TASK_INVALID_JSON, "depth 3000 accepted");
    v4_task_free(&t);
    /* id of 129 bytes; the id of a field error is kept */
    char body[400];
    snprintf(body, sizeof body, "{\"id\":\"%0129d\",\"prompt\":\"x\"}", 0);
    CHECK(v4_task_parse(body, strlen(body), 4096, &t, &e) == -1 && !strcmp(e.where, "id"), "long id accepted");
    v4_task_free(&t);
    const char *b2 = "{\"id\":\"keep\",\"prompt\":\"x\",\"top_k\":\"3\"}";
    CHECK(v4_task_parse(b2, strlen(b2), 4096, &t, &e) == -1 && t.id && !strcmp(t.id, "keep"), "id not kept");
    v4_task_free(&t);
}

static void test_good(void)
{
    const char *b = "{\"id\":\"t1\",\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"S\"},"
                    "{\"role\":\"user\",\"content\":\"Q\"}],\"max_tokens\":5,\"temperature\":0,\"top_p\":0.9,"
                    "\"top_k\":3,\"seed\":42,\"stop\":[\"a\",\"b\"],\"thinking\":true,\"ignore_eos\":true,\"deadline_ms\":1000,"
                    "\"metadata\":{\"x\":[1]},\"extra\":1}";
    v4_task t;
    v4_task_error e;
    CHECK(v4_task_parse(b, strlen(b), 4096, &t, &e) == 0, "good packet rejected: %s: %s", e.where, e.message);
    CHECK(!strcmp(t.id, "t1") && !strcmp(t.model, "m") && t.n_messages == 2 && t.max_tokens == 5, "fields");
    CHECK(t.temperature == 0 && t.top_p == 0.9 && t.top_k == 3 && t.seed == 42 && t.n_stops == 2, "sampling");
    CHECK(t.thinking == 1 && t.ignore_eos == 1 && t.deadline_ms == 1000 && json_is_object(t.metadata), "flags");
    CHECK(t.n_unknown == 1 && !strcmp(t.unknown[0], "extra"), "unknown fields listed");
    v4_task_free(&t);
    const char *b2 = "{\"id\":\"t2\",\"input_ids\":[0,5,7],\"stop\":\"zz\"}";
    CHECK(v4_task_parse(b2, strlen(b2), 4096, &t, &e) == 0 && t.n_input_ids == 3 && t.input_ids[2] == 7 &&
              t.n_stops == 1 && t.max_tokens == 0 && !t.has_max_tokens && t.temperature == 1.0,
          "input_ids form (max_tokens absent: 0, the runner's default)");
    CHECK(t.kind == V4_TASK_KIND_GENERATE && !t.document, "default type generate");
    v4_task_free(&t);
    const char *b3 = "{\"id\":\"s1\",\"type\":\"summarize\",\"document\":\"Long text.\\n\\nMore.\","
                     "\"instructions\":\"Bullet points\",\"max_summary_tokens\":40,\"temperature\":0,\"stop\":\"END\","
                     "\"deadline_ms\":500,\"metadata\":7,\"model\":\"m\"}";
    CHECK(v4_task_parse(b3, strlen(b3), 4096, &t, &e) == 0, "summarize packet rejected: %s: %s", e.where, e.message);
    CHECK(t.kind == V4_TASK_KIND_SUMMARIZE && t.document && !strcmp(t.document, "Long text.\n\nMore.") &&
              t.document_len == 17 && !strcmp(t.instructions, "Bullet points") && t.max_summary_tokens == 40 &&
              t.max_tokens == 40,
          "summarize fields");
    CHECK(t.temperature == 0 && t.n_stops == 1 && t.deadline_ms == 500 && json_is_integer(t.metadata) &&
              !strcmp(t.model, "m") && !t.has_messages && !t.has_prompt && t.n_unknown == 0,
          "summarize: the common fields apply");
    v4_task_free(&t);
    const char *b4 = "{\"id\":\"s2\",\"type\":\"summarize\",\"document\":\"x\"}";
    CHECK(v4_task_parse(b4, strlen(b4), 4096, &t, &e) == 0 && t.max_summary_tokens == V4_TASK_DEFAULT_SUMMARY_TOKENS &&
              t.max_tokens == V4_TASK_DEFAULT_SUMMARY_TOKENS && !t.instructions,
          "summarize defaults");
    v4_task_free(&t);
    /* OpenAI's message dialect: developer = system, content as text parts (joined) */
    const char *b6 = "{\"id\":\"d\",\"messages\":[{\"role\":\"developer\",\"content\":\"Be brief.\"},"
                     "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Hello, \"},"
                     "{\"type\":\"text\",\"text\":\"world\"}]}]}";
    CHECK(v4_task_parse(b6, strlen(b6), 4096, &t, &e) == 0 && t.n_messages == 2 && !strcmp(t.messages[0].role, "system") &&
              !strcmp(t.messages[0].content, "Be brief.") && !strcmp(t.messages[1].content, "Hello, world"),
          "developer role and text parts: %s: %s", e.where, e.message);
    v4_task_free(&t);
    const char *b5 = "{\"id\":\"g\",\"type\":\"generate\",\"prompt\":\"x\"}";
    CHECK(v4_task_parse(b5, strlen(b5), 4096, &t, &e) == 0 && t.kind == V4_TASK_KIND_GENERATE, "explicit generate");
    v4_task_free(&t);
}

static void test_results(void)
{
    int32_t ids[2] = {5, 9};
    json_t *meta = json_pack("{s:i}", "k", 1);
    v4_result_info ok = {.id = "t1", .model = "m", .worker = "w1", .metadata = meta, .text = "hi", .text_len = 2,
                         .token_ids = ids, .n_tokens = 2, .finish_reason = "length", .prompt_tokens = 3};
    char *s = v4_result_json(&ok);
    json_t *o = json_loads(s, 0, NULL);
    CHECK(o && !strcmp(json_string_value(json_object_get(o, "status")), "succeeded"), "status: %s", s);
    CHECK(json_integer_value(json_object_get(json_object_get(o, "usage"), "total_tokens")) == 5, "usage: %s", s);
    CHECK(json_array_size(json_object_get(json_object_get(o, "output"), "token_ids")) == 2, "token_ids: %s", s);
    CHECK(json_equal(json_object_get(o, "metadata"), meta) && !json_object_get(o, "error"), "metadata: %s", s);
    CHECK(!json_object_get(o, "summary"), "no summary object for generation: %s", s);
    CHECK(!json_object_get(json_object_get(o, "timing"), "numerics"), "no timing.numerics when not given: %s", s);
    json_decref(o);
    free(s);
    ok.numerics = "fast";
    s = v4_result_json(&ok);
    o = json_loads(s, 0, NULL);
    CHECK(o && !strcmp(json_string_value(json_object_get(json_object_get(o, "timing"), "numerics")), "fast"),
          "timing.numerics: %s", s);
    json_decref(o);
    free(s);
    ok.numerics = NULL;
    ok.chunks = 7;
    ok.levels = 2;
    s = v4_result_json(&ok);
    o = json_loads(s, 0, NULL);
    json_t *sum = json_object_get(o, "summary");
    CHECK(json_integer_value(json_object_get(sum, "chunks")) == 7 && json_integer_value(json_object_get(sum, "levels")) == 2 &&
              json_object_size(sum) == 2,
          "summary {chunks, levels}: %s", s);
    json_decref(o);
    free(s);
    v4_task_error e = {.code = V4_TASK_MODEL_NOT_AVAILABLE, .message = "serves m", .where = "model"};
    v4_result_info bad = {.id = "t2", .model = "m", .worker = "w1", .error = &e, .chunks = 3, .levels = 1};
    s = v4_result_json(&bad);
    o = json_loads(s, 0, NULL);
    CHECK(!json_object_get(o, "summary"), "no summary object on failure: %s", s);
    json_t *err = json_object_get(o, "error");
    CHECK(!strcmp(json_string_value(json_object_get(o, "status")), "failed") && !json_object_get(o, "output"), "%s", s);
    CHECK(!strcmp(json_string_value(json_object_get(err, "code")), "model_not_available"), "%s", s);
    json_decref(o);
    free(s);
    v4_task_error je = {.code = V4_TASK_INVALID_JSON, .message = "m", .where = "body", .line = 1, .column = 3,
                        .position = 3};
    s = v4_invalid_record_json(&je, NULL, "w1", "not json", 8);
    o = json_loads(s, 0, NULL);
    err = json_object_get(o, "error");
    CHECK(json_is_null(json_object_get(o, "id")) && json_integer_value(json_object_get(err, "column")) == 3 &&
              !strcmp(json_string_value(json_object_get(o, "body")), "not json"),
          "%s", s);
    json_decref(o);
    free(s);
    s = v4_invalid_record_json(&je, "x", "w1", "\xff\xfe", 2);
    o = json_loads(s, 0, NULL);
    CHECK(o && json_is_null(json_object_get(o, "body")), "binary body: %s", s);
    json_decref(o);
    free(s);
    json_decref(meta);
}

int main(void)
{
    test_bad();
    test_limits();
    test_good();
    test_results();
    TEST_DONE();
}
