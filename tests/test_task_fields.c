/* test_task_fields.c - the request fields of worker/serve/task_fields.h through the task
 * parser (v4_task_parse): every constraint form gives the constraint kind and canonical
 * text it should (schemas written compactly with their key order, the field named), a
 * table of malformed or unserved values gives the exact code and field, values that ask
 * for nothing are accepted, and the canonical texts of equal schemas are equal (the
 * compile cache's key).  No model.  docs/structured-outputs.md "Request fields".
 */
#include <string.h>

#include "testutil.h"
#include "worker/serve/task_packet.h"

typedef struct ok_case {
    const char *body;
    int on;
    v4g_kind kind;
    const char *text;       /* the canonical text (NULL: not checked) */
    const char *field;
    int compact;
} ok_case;

#define P "{\"id\":\"a\",\"prompt\":\"x\","
static const ok_case OK[] = {
    {P "\"response_format\":{\"type\":\"text\"}}", 0, 0, NULL, "", 0},
    {P "\"response_format\":null}", 0, 0, NULL, "", 0},
    {P "\"response_format\":{\"type\":\"json_object\"}}", 1, V4G_JSON_OBJECT, "", "response_format", 0},
    {P "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"p\",\"strict\":true,\"schema\":"
       "{\"type\": \"object\", \"properties\": {\"z\": {\"type\": \"integer\"}, \"a\": {\"enum\": [1, 2]}}}}}}",
     1, V4G_JSON_SCHEMA, "{\"type\":\"object\",\"properties\":{\"z\":{\"type\":\"integer\"},\"a\":{\"enum\":[1,2]}}}",
     "response_format", 0},
    {P "\"guided_json\":{\"type\":\"string\",\"maxLength\":3}}", 1, V4G_JSON_SCHEMA,
     "{\"type\":\"string\",\"maxLength\":3}", "guided_json", 0},
    {P "\"guided_json\":\"{ \\\"type\\\" : \\\"boolean\\\" }\"}", 1, V4G_JSON_SCHEMA, "{\"type\":\"boolean\"}",
     "guided_json", 0},
    {P "\"guided_regex\":\"[a-z]{2,4}\"}", 1, V4G_REGEX, "[a-z]{2,4}", "guided_regex", 0},
    {P "\"guided_choice\":[\"yes\", \"no\"]}", 1, V4G_CHOICE, "[\"yes\",\"no\"]", "guided_choice", 0},
    {P "\"guided_grammar\":\"root ::= \\\"a\\\" b\\nb ::= [0-9]+\"}", 1, V4G_GRAMMAR,
     "root ::= \"a\" b\nb ::= [0-9]+", "guided_grammar", 0},
    {P "\"structured_outputs\":{\"grammar\":\"root ::= x\\nx ::= \\\"y\\\"\"}}", 1, V4G_GRAMMAR,
     "root ::= x\nx ::= \"y\"", "structured_outputs", 0},
    {P "\"structured_outputs\":{\"regex\":\"a+\"}}", 1, V4G_REGEX, "a+", "structured_outputs", 0},
    {P "\"structured_outputs\":{\"json\":{\"type\":\"null\"},\"disable_any_whitespace\":true}}", 1, V4G_JSON_SCHEMA,
     "{\"type\":\"null\"}", "structured_outputs", 1},
    {P "\"structured_outputs\":{\"choice\":[\"a\"],\"disable_fallback\":false}}", 1, V4G_CHOICE, "[\"a\"]",
     "structured_outputs", 0},
    {P "\"structured_outputs\":{\"json_object\":true}}", 1, V4G_JSON_OBJECT, "", "structured_outputs", 0},
    {P "\"response_format\":{\"type\":\"text\"},\"guided_regex\":\"b\"}", 1, V4G_REGEX, "b", "guided_regex", 0},
    /* values that ask for nothing, fields that change nothing */
    {P "\"tools\":[],\"tool_choice\":\"none\",\"stream\":false,\"parallel_tool_calls\":true,\"modalities\":[\"text\"],"
       "\"functions\":null,\"audio\":null,\"logprobs\":false,\"top_logprobs\":0,\"n\":1,\"presence_penalty\":0,"
       "\"frequency_penalty\":0.0,\"repetition_penalty\":1,\"logit_bias\":{},\"user\":\"u\",\"store\":true,"
       "\"service_tier\":\"auto\",\"guided_decoding_backend\":\"x\"}", 0, 0, NULL, "", 0},
};

typedef struct bad_case {
    const char *body;
    v4_task_errcode code;
    const char *where;
    const char *in_msg;     /* a piece of the message (NULL: not checked) */
} bad_case;

static const bad_case BAD[] = {
    {P "\"response_format\":\"json\"}", V4_TASK_INVALID_FIELD, "response_format", NULL},
    {P "\"response_format\":{}}", V4_TASK_INVALID_FIELD, "response_format.type", NULL},
    {P "\"response_format\":{\"type\":\"yaml\"}}", V4_TASK_INVALID_FIELD, "response_format.type", "yaml"},
    {P "\"response_format\":{\"type\":\"json_schema\"}}", V4_TASK_INVALID_FIELD, "response_format.json_schema", NULL},
    {P "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\"}}}", V4_TASK_INVALID_FIELD,
     "response_format.json_schema.schema", "required"},
    {P "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":[1]}}}", V4_TASK_INVALID_FIELD,
     "response_format.json_schema.schema", NULL},
    {P "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{},\"strict\":1}}}",
     V4_TASK_INVALID_FIELD, "response_format.json_schema.strict", NULL},
    {P "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{},\"extra\":1}}}",
     V4_TASK_INVALID_FIELD, "response_format.json_schema.extra", NULL},
    {P "\"response_format\":{\"type\":\"json_object\",\"json_schema\":{}}}", V4_TASK_INVALID_FIELD,
     "response_format.json_schema", NULL},
    {P "\"guided_json\":\"{not json\"}", V4_TASK_INVALID_FIELD, "guided_json", "not JSON"},
    {P "\"guided_json\":\"[1]\"}", V4_TASK_INVALID_FIELD, "guided_json", NULL},
    {P "\"guided_json\":7}", V4_TASK_INVALID_FIELD, "guided_json", NULL},
    {P "\"guided_regex\":\"\"}", V4_TASK_INVALID_FIELD, "guided_regex", NULL},
    {P "\"guided_regex\":[\"a\"]}", V4_TASK_INVALID_FIELD, "guided_regex", NULL},
    {P "\"guided_choice\":[]}", V4_TASK_INVALID_FIELD, "guided_choice", NULL},
    {P "\"guided_choice\":[\"a\",2]}", V4_TASK_INVALID_FIELD, "guided_choice", "item 1"},
    {P "\"guided_choice\":\"a\"}", V4_TASK_INVALID_FIELD, "guided_choice", NULL},
    {P "\"guided_grammar\":\"start: \\\"a\\\" | b\\nb: /x+/\"}", V4_TASK_INVALID_FIELD, "guided_grammar", "only GBNF"},
    {P "\"guided_grammar\":\"\"}", V4_TASK_INVALID_FIELD, "guided_grammar", "GBNF"},
    {P "\"guided_grammar\":[\"root ::= x\"]}", V4_TASK_INVALID_FIELD, "guided_grammar", NULL},
    {P "\"structured_outputs\":{\"grammar\":\"?start : x\"}}", V4_TASK_INVALID_FIELD,
     "structured_outputs.grammar", "Lark"},
    {P "\"structured_outputs\":{\"grammar\":\"root ::= x\",\"regex\":\"a\"}}", V4_TASK_INVALID_FIELD,
     "structured_outputs.regex", "only one"},
    {P "\"structured_outputs\":{\"structural_tag\":{}}}", V4_TASK_UNSUPPORTED_FIELD,
     "structured_outputs.structural_tag", "structural tag"},
    {P "\"structured_outputs\":{}}", V4_TASK_INVALID_FIELD, "structured_outputs", NULL},
    {P "\"structured_outputs\":{\"regex\":\"a\",\"choice\":[\"b\"]}}", V4_TASK_INVALID_FIELD,
     "structured_outputs.choice", "only one"},
    {P "\"structured_outputs\":{\"regex\":\"a\",\"bogus\":1}}", V4_TASK_INVALID_FIELD, "structured_outputs.bogus", NULL},
    {P "\"structured_outputs\":{\"regex\":\"a\",\"disable_any_whitespace\":\"yes\"}}", V4_TASK_INVALID_FIELD,
     "structured_outputs.disable_any_whitespace", NULL},
    {P "\"guided_regex\":\"a\",\"guided_choice\":[\"b\"]}", V4_TASK_INVALID_FIELD, "guided_choice", "only one"},
    {P "\"guided_regex\":\"a\",\"ignore_eos\":true}", V4_TASK_INVALID_FIELD, "ignore_eos", NULL},
    {"{\"id\":\"a\",\"type\":\"summarize\",\"document\":\"d\",\"guided_regex\":\"a\"}", V4_TASK_UNSUPPORTED_FIELD,
     "guided_regex", "summarize"},
    {P "\"tools\":[{\"type\":\"function\"}]}", V4_TASK_UNSUPPORTED_FIELD, "tools", "tool"},
    {P "\"tool_choice\":\"auto\"}", V4_TASK_UNSUPPORTED_FIELD, "tool_choice", NULL},
    {P "\"functions\":[{}]}", V4_TASK_UNSUPPORTED_FIELD, "functions", NULL},
    {P "\"function_call\":\"auto\"}", V4_TASK_UNSUPPORTED_FIELD, "function_call", NULL},
    {P "\"parallel_tool_calls\":3}", V4_TASK_UNSUPPORTED_FIELD, "parallel_tool_calls", NULL},
    {P "\"stream\":true}", V4_TASK_UNSUPPORTED_FIELD, "stream", "stream"},
    {P "\"audio\":{\"voice\":\"x\"}}", V4_TASK_UNSUPPORTED_FIELD, "audio", NULL},
    {P "\"modalities\":[\"text\",\"audio\"]}", V4_TASK_UNSUPPORTED_FIELD, "modalities", NULL},
    {P "\"prediction\":{\"type\":\"content\"}}", V4_TASK_UNSUPPORTED_FIELD, "prediction", NULL},
    {P "\"n\":0}", V4_TASK_INVALID_FIELD, "n", NULL},
    {P "\"n\":17}", V4_TASK_INVALID_FIELD, "n", NULL},
    {P "\"n\":-1}", V4_TASK_INVALID_FIELD, "n", NULL},
    {P "\"n\":2.5}", V4_TASK_INVALID_FIELD, "n", NULL},
    {P "\"n\":\"3\"}", V4_TASK_INVALID_FIELD, "n", NULL},
    {"{\"id\":\"a\",\"type\":\"summarize\",\"document\":\"d\",\"n\":2}", V4_TASK_UNSUPPORTED_FIELD, "n",
     "summarize"},
};

int main(void)
{
    for (size_t i = 0; i < sizeof OK / sizeof OK[0]; i++) {
        v4_task t;
        v4_task_error e;
        int rc = v4_task_parse(OK[i].body, strlen(OK[i].body), 1 << 20, &t, &e);
        CHECK(rc == 0, "ok case %zu: %s: %s (%s)", i, OK[i].body, e.message, e.where);
        if (rc == 0) {
            const v4_task_constraint *c = &t.constraint;
            CHECK(c->on == OK[i].on, "case %zu: on %d", i, c->on);
            CHECK(!c->on || c->kind == OK[i].kind, "case %zu: kind %d", i, (int)c->kind);
            CHECK(!OK[i].text || (c->text && !strcmp(c->text, OK[i].text) && c->len == strlen(OK[i].text)),
                  "case %zu: text '%s'", i, c->text ? c->text : "(null)");
            CHECK(!strcmp(c->field, OK[i].field), "case %zu: field '%s'", i, c->field);
            CHECK(c->compact == OK[i].compact, "case %zu: compact %d", i, c->compact);
            CHECK(t.n_unknown == 0, "case %zu: %d unknown fields", i, t.n_unknown);
        }
        v4_task_free(&t);
    }
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        v4_task t;
        v4_task_error e;
        int rc = v4_task_parse(BAD[i].body, strlen(BAD[i].body), 1 << 20, &t, &e);
        CHECK(rc != 0, "bad case %zu accepted: %s", i, BAD[i].body);
        CHECK(e.code == BAD[i].code, "bad case %zu: code %s, want %s (%s)", i, v4_task_errcode_name(e.code),
              v4_task_errcode_name(BAD[i].code), e.message);
        CHECK(!strcmp(e.where, BAD[i].where), "bad case %zu: where '%s', want '%s'", i, e.where, BAD[i].where);
        CHECK(!BAD[i].in_msg || strstr(e.message, BAD[i].in_msg), "bad case %zu: message '%s' lacks '%s'", i,
              e.message, BAD[i].in_msg);
        CHECK(t.id && !strcmp(t.id, "a"), "bad case %zu: the id is kept for the error record", i);
        v4_task_free(&t);
    }
    /* the same schema written differently (spaces, a string) gives one canonical text */
    const char *a = P "\"guided_json\":{\"type\": \"object\",  \"required\": [\"k\"]}}";
    const char *b = P "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":"
                      "{\"type\":\"object\",\"required\":[\"k\"]}}}}";
    const char *c = P "\"structured_outputs\":{\"json\":\"{\\\"type\\\":\\\"object\\\",\\\"required\\\":[\\\"k\\\"]}\"}}";
    v4_task ta, tb, tc;
    v4_task_error e;
    CHECK(!v4_task_parse(a, strlen(a), 1 << 20, &ta, &e) && !v4_task_parse(b, strlen(b), 1 << 20, &tb, &e) &&
              !v4_task_parse(c, strlen(c), 1 << 20, &tc, &e),
          "canonical cases parse: %s", e.message);
    CHECK(ta.constraint.text && tb.constraint.text && tc.constraint.text &&
              !strcmp(ta.constraint.text, tb.constraint.text) && !strcmp(ta.constraint.text, tc.constraint.text),
          "one canonical text");
    v4_task_free(&ta);
    v4_task_free(&tb);
    v4_task_free(&tc);
    /* n: default 1, 1..16 accepted (several answers from one prefill, choices.h) */
    static const struct { const char *body; int n; } NS[] = {
        {P "\"n\":1}", 1}, {P "\"n\":3}", 3}, {P "\"n\":16}", 16}, {P "\"seed\":4}", 1}};
    for (size_t i = 0; i < sizeof NS / sizeof NS[0]; i++) {
        v4_task tn;
        CHECK(!v4_task_parse(NS[i].body, strlen(NS[i].body), 1 << 20, &tn, &e) && tn.n == NS[i].n && !tn.n_unknown,
              "n case %zu: n %d, want %d (%s)", i, tn.n, NS[i].n, e.message);
        v4_task_free(&tn);
    }
    /* unknown fields are still ignored and listed */
    const char *u = P "\"frobnicate\":1}";
    v4_task tu;
    CHECK(!v4_task_parse(u, strlen(u), 1 << 20, &tu, &e) && tu.n_unknown == 1, "unknown fields listed");
    v4_task_free(&tu);
    TEST_DONE();
}
