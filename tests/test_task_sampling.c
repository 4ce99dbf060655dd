/* test_task_sampling.c - the sampling fields of worker/serve/task_sampling.h through the
 * task parser (v4_task_parse): served values land in v4_task.sampling (logit_bias
 * entries in order, penalties, min_p, logprobs / top_logprobs), null and the neutral
 * values are accepted, and a table of bad values gives invalid_field naming the field
 * and the range; n stays refused above 1; logprobs on a summarize task is refused.
 * Then the task's fields as sampler parameters (v4_task_sampling_apply) pass
 * v4_sampling_validate.  No model.  docs/structured-outputs.md "Sampling fields".
 */
#include <string.h>

#include "testutil.h"
#include "worker/serve/task_packet.h"

#define P "{\"id\":\"a\",\"prompt\":\"x\","

typedef struct bad_case {
    const char *body;
    v4_task_errcode code;
    const char *where;
    const char *in_msg;     /* a piece of the message (NULL: not checked) */
} bad_case;

static const bad_case BAD[] = {
    {P "\"logit_bias\":[1]}", V4_TASK_INVALID_FIELD, "logit_bias", "object"},
    {P "\"logit_bias\":{\"x\":1}}", V4_TASK_INVALID_FIELD, "logit_bias.x", "token id"},
    {P "\"logit_bias\":{\"-1\":1}}", V4_TASK_INVALID_FIELD, "logit_bias.-1", "token id"},
    {P "\"logit_bias\":{\"007\":1}}", V4_TASK_INVALID_FIELD, "logit_bias.007", "leading zeros"},
    {P "\"logit_bias\":{\"99999999999\":1}}", V4_TASK_INVALID_FIELD, "logit_bias.99999999999", NULL},
    {P "\"logit_bias\":{\"5\":100.5}}", V4_TASK_INVALID_FIELD, "logit_bias.5", "[-100, 100]"},
    {P "\"logit_bias\":{\"5\":\"1\"}}", V4_TASK_INVALID_FIELD, "logit_bias.5", "[-100, 100]"},
    {P "\"presence_penalty\":2.5}", V4_TASK_INVALID_FIELD, "presence_penalty", "[-2, 2]"},
    {P "\"frequency_penalty\":-3}", V4_TASK_INVALID_FIELD, "frequency_penalty", "[-2, 2]"},
    {P "\"frequency_penalty\":\"1\"}", V4_TASK_INVALID_FIELD, "frequency_penalty", "number"},
    {P "\"repetition_penalty\":0}", V4_TASK_INVALID_FIELD, "repetition_penalty", "(0,"},
    {P "\"repetition_penalty\":-1}", V4_TASK_INVALID_FIELD, "repetition_penalty", NULL},
    {P "\"min_p\":1.5}", V4_TASK_INVALID_FIELD, "min_p", "[0, 1]"},
    {P "\"min_p\":-0.1}", V4_TASK_INVALID_FIELD, "min_p", "[0, 1]"},
    {P "\"logprobs\":1}", V4_TASK_INVALID_FIELD, "logprobs", "true or false"},
    {P "\"top_logprobs\":21,\"logprobs\":true}", V4_TASK_INVALID_FIELD, "top_logprobs", "[0, 20]"},
    {P "\"top_logprobs\":2.5,\"logprobs\":true}", V4_TASK_INVALID_FIELD, "top_logprobs", "integer"},
    {P "\"top_logprobs\":3}", V4_TASK_INVALID_FIELD, "top_logprobs", "logprobs"},
    {P "\"top_logprobs\":3,\"logprobs\":false}", V4_TASK_INVALID_FIELD, "top_logprobs", "logprobs"},
    {P "\"n\":17}", V4_TASK_INVALID_FIELD, "n", NULL},   /* n is served (1..16): test_task_fields.c */
    {"{\"id\":\"a\",\"type\":\"summarize\",\"document\":\"d\",\"logprobs\":true}", V4_TASK_UNSUPPORTED_FIELD,
     "logprobs", "summarize"},
};

int main(void)
{
    /* served values */
    const char *ok = P "\"logit_bias\":{\"17\":100,\"0\":-100,\"2147483647\":0.5},\"presence_penalty\":-2,"
                       "\"frequency_penalty\":1.5,\"repetition_penalty\":1.3,\"min_p\":0.05,\"logprobs\":true,"
                       "\"top_logprobs\":20,\"n\":1}";
    v4_task t;
    v4_task_error e;
    int rc = v4_task_parse(ok, strlen(ok), 1 << 20, &t, &e);
    CHECK(rc == 0, "served fields parse: %s (%s)", e.message, e.where);
    const v4_task_sampling *s = &t.sampling;
    CHECK(s->n_bias == 3 && s->bias[0].id == 17 && s->bias[0].bias == 100.0f && s->bias[1].id == 0 &&
              s->bias[1].bias == -100.0f && s->bias[2].id == 2147483647 && s->bias[2].bias == 0.5f,
          "logit_bias entries in order (%d)", s->n_bias);
    CHECK(s->presence_penalty == -2 && s->frequency_penalty == 1.5 && s->repetition_penalty == 1.3 &&
              s->min_p == 0.05 && s->logprobs == 1 && s->top_logprobs == 20,
          "penalties, min_p, logprobs");
    CHECK(t.n_unknown == 0, "no unknown field (%d)", t.n_unknown);
    v4_sampling_params sp = {.temperature = 1, .top_p = 1};
    v4_task_sampling_apply(s, &sp);
    v4_error err = {0};
    CHECK(sp.n_bias == 3 && sp.bias == s->bias && sp.repetition_penalty == 1.3 && sp.top_logprobs == 20 &&
              v4_sampling_validate(&sp, &err) == 0,
          "as sampler parameters: %s", err.msg);
    v4_task_free(&t);

    /* absent, null and neutral values: the sampler is left as before */
    const char *neutral = P "\"logit_bias\":{},\"presence_penalty\":0,\"frequency_penalty\":null,"
                            "\"repetition_penalty\":1,\"min_p\":0,\"logprobs\":false,\"top_logprobs\":0}";
    rc = v4_task_parse(neutral, strlen(neutral), 1 << 20, &t, &e);
    CHECK(rc == 0 && t.sampling.n_bias == 0 && !t.sampling.logprobs && t.sampling.min_p == 0,
          "neutral values accepted: %s", e.message);
    v4_task_free(&t);
    const char *none = P "\"max_tokens\":3}";
    rc = v4_task_parse(none, strlen(none), 1 << 20, &t, &e);
    sp = (v4_sampling_params){.temperature = 1, .top_p = 1};
    v4_task_sampling_apply(&t.sampling, &sp);
    CHECK(rc == 0 && sp.n_bias == 0 && sp.repetition_penalty == 0 && sp.presence_penalty == 0 && sp.min_p == 0 &&
              !sp.logprobs,
          "absent fields: all off");
    v4_task_free(&t);
    /* top_logprobs given with logprobs, in either key order */
    const char *order = P "\"top_logprobs\":2,\"logprobs\":true}";
    rc = v4_task_parse(order, strlen(order), 1 << 20, &t, &e);
    CHECK(rc == 0 && t.sampling.top_logprobs == 2, "top_logprobs before logprobs: %s", e.message);
    v4_task_free(&t);

    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        rc = v4_task_parse(BAD[i].body, strlen(BAD[i].body), 1 << 20, &t, &e);
        CHECK(rc != 0, "bad case %zu accepted: %s", i, BAD[i].body);
        CHECK(e.code == BAD[i].code, "bad case %zu: code %s, want %s (%s)", i, v4_task_errcode_name(e.code),
              v4_task_errcode_name(BAD[i].code), e.message);
        CHECK(!strcmp(e.where, BAD[i].where), "bad case %zu: where '%s', want '%s'", i, e.where, BAD[i].where);
        CHECK(!BAD[i].in_msg || strstr(e.message, BAD[i].in_msg), "bad case %zu: message '%s' lacks '%s'", i,
              e.message, BAD[i].in_msg);
        v4_task_free(&t);
    }
    TEST_DONE();
}
