/* test_cli.c - the command-line contract of `v4fleet logits` and `v4fleet generate`
 * on the golden tiny model, and their behaviour on bad input (one clear error line,
 * non-zero exit, no crash).  Runs the real binary ($V4_BIN). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "testutil.h"

static char bin[4096], data[4096], tmp[4096], model[4300];

/* Run a shell command; capture stdout+stderr into out (truncated). Returns exit status. */
static int run(char *out, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int run(char *out, size_t cap, const char *fmt, ...)
{
    char cmd[16384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    strncat(cmd, " 2>&1", sizeof cmd - strlen(cmd) - 1);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static long file_size(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

int main(void)
{
    snprintf(bin, sizeof bin, "%s", t_env("V4_BIN", "build/v4fleet"));
    snprintf(data, sizeof data, "%s/golden/tiny", t_env("V4_TEST_DATA", "tests/data"));
    snprintf(tmp, sizeof tmp, "%s", t_env("V4_TMP", "/tmp"));
    snprintf(model, sizeof model, "%s/model", data);
    static char out[1 << 16];
    char path[8192], path2[8192];

    /* logits over the first 64 positions of the golden sequence */
    json_error_t je;
    snprintf(path, sizeof path, "%s/tokens.json", data);
    json_t *tok = json_load_file(path, 0, &je);
    CHECK(tok, "tokens.json");
    json_t *seq = json_array();
    for (size_t i = 0; i < 64; i++)
        json_array_append(seq, json_array_get(json_object_get(tok, "sequence"), i));
    snprintf(path, sizeof path, "%s/cli_tokens.json", tmp);
    json_dump_file(seq, path, 0);
    snprintf(path2, sizeof path2, "%s/cli_logits.bin", tmp);
    int rc = run(out, sizeof out, "'%s' logits --model '%s' --tokens '%s' --out '%s' --trace '%s/cli_trace.jsonl'",
                 bin, model, path, path2, tmp);
    CHECK(rc == 0, "logits exit %d: %s", rc, out);
    CHECK(file_size(path2) == 64L * 4096 * 4, "logits file size %ld", file_size(path2));
    rc = run(out, sizeof out, "cmp -n %ld '%s' '%s/logits.bin'", 64L * 4096 * 4, path2, data);
    CHECK(rc == 0, "logits differ from the golden: %s", out);
    snprintf(path, sizeof path, "%s/cli_trace.jsonl", tmp);
    FILE *f = fopen(path, "r");
    int lines = 0, ok = f != NULL;
    char line[1 << 14];
    while (f && fgets(line, sizeof line, f)) {
        json_t *o = json_loads(line, 0, &je);
        json_t *layers = o ? json_object_get(o, "layers") : NULL;
        ok &= o && json_integer_value(json_object_get(o, "pos")) == lines && json_array_size(layers) == 4 &&
              json_array_size(json_object_get(json_array_get(layers, 2), "experts")) == 4 &&
              json_is_null(json_object_get(json_array_get(layers, 0), "indexer")) &&
              json_is_array(json_object_get(json_array_get(layers, 1), "indexer"));
        json_decref(o);
        lines++;
    }
    if (f)
        fclose(f);
    CHECK(ok && lines == 64, "trace: %d well-formed lines", lines);

    /* greedy generation reproduces the golden continuation */
    json_t *prompt = json_object_get(tok, "prompt"), *gen = json_object_get(tok, "generated");
    snprintf(path, sizeof path, "%s/cli_prompt.json", tmp);
    json_dump_file(prompt, path, 0);
    rc = run(out, sizeof out, "'%s' generate --model '%s' --prompt-ids '%s' --max-tokens 32 --greedy --ignore-eos",
             bin, model, path);
    json_t *got = json_loads(out, JSON_DISABLE_EOF_CHECK, &je);
    CHECK(rc == 0 && got && json_equal(got, gen), "generate output: %s", out);
    json_decref(got);

    /* bad input: one error line, non-zero exit */
    struct { const char *tokens, *expect; } bad[] = {
        {"[1, 2, 99999]", "element 2"},
        {"[1, 2", "invalid JSON"},
        {"{\"a\": 1}", "JSON array"},
        {"[1, -3]", "element 1"},
        {"[]", "no token ids"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(path, sizeof path, "%s/cli_bad.json", tmp);
        write_file(path, bad[i].tokens);
        rc = run(out, sizeof out, "'%s' logits --model '%s' --tokens '%s' --out '%s/cli_bad.bin'", bin, model, path, tmp);
        CHECK(rc == 1 && strstr(out, bad[i].expect) && count_lines(out) == 1,
              "bad tokens %s: exit %d, output: %s", bad[i].tokens, rc, out);
    }
    rc = run(out, sizeof out, "'%s' logits --model '%s/nonexistent' --tokens '%s' --out '%s/x.bin'", bin, tmp, path, tmp);
    CHECK(rc == 1 && count_lines(out) == 1 && strstr(out, "nonexistent"), "missing model: exit %d: %s", rc, out);
    rc = run(out, sizeof out, "'%s' logits --model '%s'", bin, model);
    CHECK(rc == 2 && strstr(out, "usage"), "missing options: exit %d: %s", rc, out);
    rc = run(out, sizeof out, "'%s' frobnicate", bin);
    CHECK(rc == 2 && strstr(out, "unknown command"), "unknown command: exit %d", rc);
    json_decref(seq);
    json_decref(tok);
    TEST_DONE();
}
