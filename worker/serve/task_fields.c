/* task_fields.c - the output constraint of a task and the fields that are not served
 * (see task_fields.h; docs/structured-outputs.md "Request fields").  Thread: any.
 */
#include "task_fields.h"
#include "task_sampling.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIELD(e, where, ...) v4_task_fail(e, V4_TASK_INVALID_FIELD, where, __VA_ARGS__)
#define UNSUPPORTED(e, where, ...) v4_task_fail(e, V4_TASK_UNSUPPORTED_FIELD, where, __VA_ARGS__)

/* ----------------------------------------------------------- field kinds -- */
typedef struct unserved {
    const char *name;
    v4_field_kind kind;
    const char *why;                /* the message: what is not served */
} unserved;

static const unserved UNSERVED[] = {
    {"tools", V4_FIELD_UNSERVED, "tool calls are not served (an empty array is accepted)"},
    {"tool_choice", V4_FIELD_UNSERVED, "tool calls are not served (only \"none\" is accepted)"},
    {"functions", V4_FIELD_UNSERVED, "function calls are not served (an empty array is accepted)"},
    {"function_call", V4_FIELD_UNSERVED, "function calls are not served (only \"none\" is accepted)"},
    {"parallel_tool_calls", V4_FIELD_UNSERVED, "must be true or false (tool calls are not served)"},
    {"stream", V4_FIELD_UNSERVED, "streaming is not served: the result comes whole (only false is accepted)"},
    {"audio", V4_FIELD_UNSERVED, "audio output is not served"},
    {"modalities", V4_FIELD_UNSERVED, "only text output is served (only [\"text\"] is accepted)"},
    {"prediction", V4_FIELD_UNSERVED, "predicted outputs are not served"},
    {"guided_whitespace_pattern", V4_FIELD_UNSERVED, "a whitespace pattern is not served (JSON constraints allow "
                                                     "runs of at most 8 whitespace bytes, or none with "
                                                     "structured_outputs.disable_any_whitespace)"},
};

static const char *const CONSTRAINT_FIELDS[] = {"response_format", "guided_json", "guided_regex", "guided_choice",
                                                "guided_grammar", "structured_outputs", NULL};
static const char *const NOOP_FIELDS[] = {"user", "store", "service_tier", "guided_decoding_backend", NULL};

static int listed(const char *const *l, const char *k)
{
    for (; *l; l++)
        if (!strcmp(*l, k))
            return 1;
    return 0;
}

static const unserved *find_unserved(const char *k)
{
    for (size_t i = 0; i < sizeof UNSERVED / sizeof UNSERVED[0]; i++)
        if (!strcmp(UNSERVED[i].name, k))
            return &UNSERVED[i];
    return NULL;
}

v4_field_kind v4_task_field_kind(const char *k)
{
    const unserved *u = find_unserved(k);
    if (u)
        return u->kind;
    if (v4_task_sampling_field(k))
        return V4_FIELD_SAMPLING;
    if (listed(CONSTRAINT_FIELDS, k))
        return V4_FIELD_CONSTRAINT;
    return listed(NOOP_FIELDS, k) ? V4_FIELD_NOOP : V4_FIELD_OTHER;
}

static int is_str(json_t *v, const char *s)
{
    return json_is_string(v) && !strcmp(json_string_value(v), s);
}

/* The value asks for nothing that is not served. */
static int noop_value(const char *k, json_t *v)
{
    if (json_is_null(v))
        return 1;
    if (!strcmp(k, "tools") || !strcmp(k, "functions"))
        return json_is_array(v) && !json_array_size(v);
    if (!strcmp(k, "tool_choice") || !strcmp(k, "function_call"))
        return is_str(v, "none");
    if (!strcmp(k, "parallel_tool_calls"))
        return json_is_boolean(v);
    if (!strcmp(k, "stream"))
        return json_is_false(v);
    if (!strcmp(k, "modalities"))
        return json_is_array(v) && json_array_size(v) == 1 && is_str(json_array_get(v, 0), "text");
    return 0;
}

int v4_task_field_check(const char *k, json_t *v, v4_task_error *e)
{
    const unserved *u = find_unserved(k);
    if (!u || noop_value(k, v))
        return 0;
    return UNSUPPORTED(e, k, "%s", u->why);
}

/* ----------------------------------------------------------- constraints -- */
void v4_task_constraint_free(v4_task_constraint *c)
{
    free(c->text);
    memset(c, 0, sizeof *c);
}

const char *v4_task_constraint_what(const v4_task_constraint *c)
{
    switch (c->kind) {
    case V4G_JSON_SCHEMA: return "the JSON Schema";
    case V4G_JSON_OBJECT: return "the JSON object constraint";
    case V4G_REGEX: return "the regex";
    case V4G_CHOICE: return "the choice";
    case V4G_GRAMMAR: return "the grammar";
    }
    return "the constraint";
}

/* c's text: v written compactly (JSON_COMPACT keeps the key order), or s as given. */
static int set_json(v4_task_constraint *c, v4g_kind kind, json_t *v, const char *where, v4_task_error *e)
{
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s)
        return v4_task_fail(e, V4_TASK_INTERNAL, where, "out of memory");
    c->kind = kind;
    c->text = s;
    c->len = strlen(s);
    c->on = 1;
    return 0;
}

static int set_text(v4_task_constraint *c, v4g_kind kind, const char *s, size_t n, const char *where,
                    v4_task_error *e)
{
    if (!(c->text = malloc(n + 1)))
        return v4_task_fail(e, V4_TASK_INTERNAL, where, "out of memory");
    memcpy(c->text, s, n);
    c->text[n] = 0;
    c->len = n;
    c->kind = kind;
    c->on = 1;
    return 0;
}

/* A schema: an object or a boolean (a string holding one, when text_ok). */
static int schema_value(v4_task_constraint *c, json_t *v, int text_ok, const char *where, v4_task_error *e)
{
    if (json_is_object(v) || json_is_boolean(v))
        return set_json(c, V4G_JSON_SCHEMA, v, where, e);
    if (!json_is_string(v) || !text_ok)
        return FIELD(e, where, "must be a JSON Schema (an object)%s", text_ok ? ", or a string holding one" : "");
    json_error_t je;
    json_t *s = json_loadb(json_string_value(v), json_string_length(v), JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (!s)
        return FIELD(e, where, "is a string but not JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    int rc = json_is_object(s) || json_is_boolean(s) ? set_json(c, V4G_JSON_SCHEMA, s, where, e)
                                                      : FIELD(e, where, "must hold a JSON Schema (an object)");
    json_decref(s);
    return rc;
}

static int regex_value(v4_task_constraint *c, json_t *v, const char *where, v4_task_error *e)
{
    if (!json_is_string(v) || !json_string_length(v))
        return FIELD(e, where, "must be a non-empty string (a regex)");
    if (memchr(json_string_value(v), 0, json_string_length(v)))
        return FIELD(e, where, "must not contain NUL characters");
    return set_text(c, V4G_REGEX, json_string_value(v), json_string_length(v), where, e);
}

/* A GBNF grammar (text).  Lark (`name: ...` rules, no `::=`) is named as such: only GBNF is read. */
static int grammar_value(v4_task_constraint *c, json_t *v, const char *where, v4_task_error *e)
{
    if (!json_is_string(v) || !json_string_length(v))
        return FIELD(e, where, "must be a non-empty string (a GBNF grammar: root ::= ...)");
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (memchr(s, 0, n))
        return FIELD(e, where, "must not contain NUL characters");
    if (!strstr(s, "::=")) {
        for (const char *l = s; l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
            const char *p = l + strspn(l, " \t");
            p += *p == '?' || *p == '!';
            size_t k = strspn(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.");
            if (k && p[k + strspn(p + k, " \t")] == ':')
                return FIELD(e, where, "looks like a Lark grammar (rules 'name: ...'): only GBNF is read "
                                       "(rules 'name ::= ...', starting at root)");
        }
    }
    return set_text(c, V4G_GRAMMAR, s, n, where, e);
}

static int choice_value(v4_task_constraint *c, json_t *v, const char *where, v4_task_error *e)
{
    if (!json_is_array(v) || !json_array_size(v))
        return FIELD(e, where, "must be a non-empty array of strings");
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) {
        if (!json_is_string(x))
            return FIELD(e, where, "must be a non-empty array of strings (item %zu is not a string)", i);
    }
    return set_json(c, V4G_CHOICE, v, where, e);
}

static int json_schema_obj(v4_task_constraint *c, json_t *js, v4_task_error *e)
{
    const char *W = "response_format.json_schema";
    if (!json_is_object(js))
        return FIELD(e, W, "must be an object {\"name\", \"schema\", \"strict\"} (type \"json_schema\")");
    const char *k;
    json_t *v;
    json_object_foreach(js, k, v) {
        char where[96];
        snprintf(where, sizeof where, "%s.%.40s", W, k);
        if (!strcmp(k, "name") || !strcmp(k, "description")) {
            if (!json_is_string(v) && !json_is_null(v))
                return FIELD(e, where, "must be a string");
        } else if (!strcmp(k, "strict")) {
            if (!json_is_boolean(v) && !json_is_null(v))
                return FIELD(e, where, "must be true or false");
        } else if (strcmp(k, "schema")) {
            return FIELD(e, where, "is not a field of json_schema (name, description, schema, strict)");
        }
    }
    json_t *s = json_object_get(js, "schema");
    if (!s || json_is_null(s))
        return FIELD(e, "response_format.json_schema.schema", "is required (the JSON Schema the answer must follow)");
    return schema_value(c, s, 0, "response_format.json_schema.schema", e);
}

static int response_format(v4_task_constraint *c, json_t *v, v4_task_error *e)
{
    const char *k;
    json_t *x;
    if (!json_is_object(v))
        return FIELD(e, "response_format", "must be an object {\"type\": \"text\" | \"json_object\" | \"json_schema\"}");
    json_t *type = json_object_get(v, "type");
    if (!json_is_string(type))
        return FIELD(e, "response_format.type", "must be \"text\", \"json_object\" or \"json_schema\"");
    const char *ty = json_string_value(type);
    json_object_foreach(v, k, x) {
        if (strcmp(k, "type") && !(!strcmp(k, "json_schema") && !strcmp(ty, "json_schema"))) {
            char where[80];
            snprintf(where, sizeof where, "response_format.%.40s", k);
            return FIELD(e, where, "is not a field of response_format with type \"%.40s\"", ty);
        }
    }
    if (!strcmp(ty, "text"))
        return 0;
    if (!strcmp(ty, "json_object"))
        return set_text(c, V4G_JSON_OBJECT, "", 0, "response_format", e);
    if (!strcmp(ty, "json_schema"))
        return json_schema_obj(c, json_object_get(v, "json_schema"), e);
    return FIELD(e, "response_format.type", "must be \"text\", \"json_object\" or \"json_schema\" (got \"%.60s\")", ty);
}

/* vLLM's structured_outputs: exactly one of json, regex, choice, grammar, json_object: true. */
static int structured_outputs(v4_task_constraint *c, json_t *v, v4_task_error *e)
{
    const char *W = "structured_outputs";
    if (!json_is_object(v))
        return FIELD(e, W, "must be an object with one of \"json\", \"regex\", \"choice\", \"json_object\"");
    const char *k, *first = NULL;
    json_t *x;
    json_object_foreach(v, k, x) {
        char where[80];
        snprintf(where, sizeof where, "%s.%.40s", W, k);
        if (json_is_null(x))
            continue;
        int rc = 0, is_constraint = 1;
        if (!strcmp(k, "json")) {
            rc = first ? 1 : schema_value(c, x, 1, where, e);
        } else if (!strcmp(k, "regex")) {
            rc = first ? 1 : regex_value(c, x, where, e);
        } else if (!strcmp(k, "choice")) {
            rc = first ? 1 : choice_value(c, x, where, e);
        } else if (!strcmp(k, "json_object")) {
            if (!json_is_boolean(x))
                return FIELD(e, where, "must be true or false");
            is_constraint = json_is_true(x);
            rc = !is_constraint ? 0 : first ? 1 : set_text(c, V4G_JSON_OBJECT, "", 0, where, e);
        } else if (!strcmp(k, "grammar")) {
            rc = first ? 1 : grammar_value(c, x, where, e);
        } else if (!strcmp(k, "structural_tag")) {
            return UNSUPPORTED(e, where, "structural tag constraints are not served yet (json, regex, choice, grammar "
                                         "and json_object are)");
        } else if (!strcmp(k, "whitespace_pattern")) {
            return UNSUPPORTED(e, where, "a whitespace pattern is not served (use disable_any_whitespace)");
        } else if (!strcmp(k, "disable_any_whitespace") || !strcmp(k, "disable_fallback") ||
                   !strcmp(k, "disable_additional_properties")) {
            if (!json_is_boolean(x))
                return FIELD(e, where, "must be true or false");
            if (!strcmp(k, "disable_additional_properties") && json_is_true(x))
                return UNSUPPORTED(e, where, "is not served (write \"additionalProperties\": false in the schema)");
            c->compact |= !strcmp(k, "disable_any_whitespace") && json_is_true(x);
            is_constraint = 0;
        } else {
            return FIELD(e, where, "is not a field of structured_outputs (json, regex, choice, json_object, "
                                   "disable_any_whitespace, disable_fallback)");
        }
        if (rc > 0)
            return FIELD(e, where, "only one of json, regex, choice, grammar and json_object may be given (%s is)", first);
        if (rc < 0)
            return -1;
        if (is_constraint)
            first = k;
    }
    if (!first)
        return FIELD(e, W, "must hold one of \"json\", \"regex\", \"choice\", \"json_object\": true");
    return 0;
}

int v4_task_constraint_parse(json_t *root, v4_task_constraint *c, v4_task_error *e)
{
    memset(c, 0, sizeof *c);
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        if (v4_task_field_kind(k) != V4_FIELD_CONSTRAINT || json_is_null(v))
            continue;
        v4_task_constraint one = {0};
        int rc = !strcmp(k, "response_format") ? response_format(&one, v, e)
                 : !strcmp(k, "guided_json")   ? schema_value(&one, v, 1, k, e)
                 : !strcmp(k, "guided_regex")  ? regex_value(&one, v, k, e)
                 : !strcmp(k, "guided_choice") ? choice_value(&one, v, k, e)
                 : !strcmp(k, "guided_grammar") ? grammar_value(&one, v, k, e)
                                               : structured_outputs(&one, v, e);
        if (rc) {
            v4_task_constraint_free(&one);
            return -1;
        }
        if (!one.on)   /* response_format text */
            continue;
        if (c->on) {
            v4_task_constraint_free(&one);
            return FIELD(e, k, "only one constraint per task: %s is given too", c->field);
        }
        *c = one;
        snprintf(c->field, sizeof c->field, "%s", k);
    }
    return 0;
}
