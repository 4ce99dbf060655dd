/* cmd_tokenize.c - `v4fleet tokenize` and `v4fleet detokenize`.
 *
 *   v4fleet tokenize   --tokenizer DIR [--jsonl]
 *       stdin: UTF-8 text -> stdout: its ids as one JSON array (no special tokens
 *       added; special tokens written in the text are recognised).
 *       --jsonl: every stdin line is a JSON object with a "text" string; every output
 *       line is the JSON array of its ids (blank lines are skipped).
 *   v4fleet detokenize --tokenizer DIR [--jsonl] [--skip-special]
 *       stdin: a JSON array of ids -> stdout: the text, exactly (no newline added).
 *       --jsonl: every stdin line is a JSON array of ids (or an object with "ids");
 *       every output line is {"text": "..."}.
 *
 * Errors: one line "v4fleet CMD: WHERE: MESSAGE" on stderr and exit 1 (WHERE is the
 * file, or "stdin line N"); usage errors exit 2.  DIR holds tokenizer.json (and
 * optionally tokenizer_config.json), e.g. a model directory.
 *
 * Design: one process handles any number of --jsonl lines with one encoder (its
 * piece cache warms up across lines); output goes through stdio's buffer and ids
 * are formatted by hand, so the CLI is not slower than the tokenizer.
 * Thread: main thread (a command).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "commands.h"
#include "worker/tokenizer/tokenizer.h"

typedef struct opts {
    const char *dir;
    int jsonl, skip_special;
} opts;

static void usage(FILE *f, const char *cmd)
{
    if (!strcmp(cmd, "tokenize"))
        fprintf(f, "usage: v4fleet tokenize --tokenizer DIR [--jsonl]\n\n"
                   "Read UTF-8 text on stdin, print its token ids as a JSON array.\n"
                   "  --tokenizer DIR  directory with tokenizer.json (+ tokenizer_config.json)\n"
                   "  --jsonl          each stdin line is {\"text\": ...}; print one array per line\n");
    else
        fprintf(f, "usage: v4fleet detokenize --tokenizer DIR [--jsonl] [--skip-special]\n\n"
                   "Read a JSON array of token ids on stdin, print the text.\n"
                   "  --tokenizer DIR  directory with tokenizer.json (+ tokenizer_config.json)\n"
                   "  --jsonl          each stdin line is an array of ids (or {\"ids\": [...]});\n"
                   "                   print {\"text\": ...} per line\n"
                   "  --skip-special   special tokens (BOS, EOS, ...) produce no text\n");
}

/* 0 = ok, 1 = --help printed, -1 = usage error (printed). */
static int parse_args(int argc, char **argv, const char *cmd, opts *o)
{
    *o = (opts){NULL, 0, 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout, cmd);
            return 1;
        } else if (!strcmp(a, "--jsonl")) {
            o->jsonl = 1;
        } else if (!strcmp(a, "--skip-special") && !strcmp(cmd, "detokenize")) {
            o->skip_special = 1;
        } else if (!strcmp(a, "--tokenizer") && i + 1 < argc) {
            o->dir = argv[++i];
        } else {
            fprintf(stderr, "v4fleet %s: unknown or incomplete option '%s'\n", cmd, a);
            usage(stderr, cmd);
            return -1;
        }
    }
    if (!o->dir) {
        fprintf(stderr, "v4fleet %s: --tokenizer DIR is required\n", cmd);
        usage(stderr, cmd);
        return -1;
    }
    return 0;
}

static int read_all(FILE *f, char **buf, size_t *len, v4_error *err)
{
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    while (b) {
        n += fread(b + n, 1, cap - n - 1, f);
        if (n < cap - 1)
            break;
        char *nb = realloc(b, cap *= 2);
        if (!nb)
            free(b);
        b = nb;
    }
    if (!b)
        return v4_err_set(err, V4_ERR_NOMEM, "stdin", "out of memory");
    if (ferror(f)) {
        free(b);
        return v4_err_set(err, V4_ERR_IO, "stdin", "read error");
    }
    b[n] = 0;
    *buf = b;
    *len = n;
    return 0;
}

static void print_ids(FILE *out, const v4_ids *ids)
{
    char tmp[16];
    putc('[', out);
    for (size_t i = 0; i < ids->n; i++) {
        uint32_t v = (uint32_t)ids->v[i];
        int k = (int)sizeof tmp;
        do
            tmp[--k] = (char)('0' + v % 10);
        while (v /= 10);
        if (i)
            putc(',', out);
        fwrite(tmp + k, 1, sizeof tmp - (size_t)k, out);
    }
    fputs("]\n", out);
}

/* Re-label the place of an error already in err (keeps code and message). */
static int at(v4_error *err, const char *where)
{
    snprintf(err->where, sizeof err->where, "%s", where);
    return -1;
}

static int blank(const char *s)
{
    return s[strspn(s, " \t\r\n")] == 0;
}

/* Run fn on the JSON value of every non-blank stdin line; where = "stdin line N".
 * Stops at the first error. */
typedef int (*json_line_fn)(const json_t *v, const char *where, void *ud, v4_error *err);

static int each_json_line(size_t jflags, json_line_fn fn, void *ud, v4_error *err)
{
    char *line = NULL, where[64];
    size_t cap = 0;
    long lineno = 0;
    int rc = 0;
    while (!rc && getline(&line, &cap, stdin) > 0) {
        lineno++;
        if (blank(line))
            continue;
        snprintf(where, sizeof where, "stdin line %ld", lineno);
        json_error_t je;
        json_t *v = json_loads(line, jflags, &je);
        rc = v ? fn(v, where, ud, err) : v4_err_set(err, V4_ERR_FORMAT, where, "invalid JSON: %s", je.text);
        json_decref(v);
    }
    if (!rc && ferror(stdin))
        rc = v4_err_set(err, V4_ERR_IO, "stdin", "read error");
    free(line);
    return rc;
}

typedef struct tok_line {
    v4_tok_encoder *enc;
    v4_ids ids;
} tok_line;

static int tokenize_line(const json_t *o, const char *where, void *ud, v4_error *err)
{
    tok_line *t = ud;
    const json_t *text = json_object_get(o, "text");
    t->ids.n = 0;
    if (!json_is_string(text))
        return v4_err_set(err, V4_ERR_FORMAT, where, "expected an object with a \"text\" string");
    if (v4_tok_encoder_run(t->enc, json_string_value(text), json_string_length(text), &t->ids, err))
        return at(err, where);
    print_ids(stdout, &t->ids);
    return 0;
}

static int tokenize_jsonl(v4_tok_encoder *enc, v4_error *err)
{
    tok_line t = {enc, {0}};
    int rc = each_json_line(JSON_ALLOW_NUL, tokenize_line, &t, err);
    v4_ids_free(&t.ids);
    return rc;
}

static int tokenize_all(v4_tok_encoder *enc, v4_error *err)
{
    char *text;
    size_t len;
    if (read_all(stdin, &text, &len, err))
        return -1;
    v4_ids ids = {0};
    int rc = v4_tok_encoder_run(enc, text, len, &ids, err);
    if (rc)
        at(err, "stdin");
    else
        print_ids(stdout, &ids);
    v4_ids_free(&ids);
    free(text);
    return rc;
}

/* Flush stdout; a failed write (full disk, closed pipe) is an error. */
static int finish(int rc, v4_error *err)
{
    if (fflush(stdout) || ferror(stdout))
        return rc ? rc : v4_err_set(err, V4_ERR_IO, "stdout", "write error");
    return rc;
}

int v4_cmd_tokenize(int argc, char **argv)
{
    opts o;
    int a = parse_args(argc, argv, "tokenize", &o);
    if (a)
        return a > 0 ? 0 : 2;
    v4_error err = {0};
    v4_tokenizer *t = NULL;
    v4_tok_encoder *enc = NULL;
    int rc = v4_tok_load(o.dir, &t, &err);
    if (!rc && !(enc = v4_tok_encoder_new(t, &err)))
        rc = -1;
    if (!rc)
        rc = o.jsonl ? tokenize_jsonl(enc, &err) : tokenize_all(enc, &err);
    rc = finish(rc, &err);
    v4_tok_encoder_free(enc);
    v4_tok_free(t);
    if (rc) {
        v4_print_error("tokenize", &err);
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------- detokenize */

/* ids from a JSON array (or an object's "ids" array). */
static int json_ids(const json_t *v, const char *where, v4_ids *ids, v4_error *err)
{
    if (json_is_object(v))
        v = json_object_get(v, "ids");
    if (!json_is_array(v))
        return v4_err_set(err, V4_ERR_FORMAT, where, "expected a JSON array of token ids");
    ids->n = 0;
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *x = json_array_get(v, i);
        json_int_t id = json_is_integer(x) ? json_integer_value(x) : -1;
        if (!json_is_integer(x) || id < 0 || id > INT32_MAX)
            return v4_err_set(err, V4_ERR_RANGE, where, "element %zu is not a token id", i);
        if (v4_ids_push(ids, (int32_t)id, err))
            return -1;
    }
    return 0;
}

static int decode_to(const v4_tokenizer *t, const v4_ids *ids, int flags, const char *where,
                     int as_json, v4_error *err)
{
    char *text;
    size_t len;
    if (v4_tok_decode(t, ids->v, ids->n, flags, &text, &len, err))
        return at(err, where);
    const size_t unknown = v4_tok_count_unknown(t, ids->v, ids->n);
    if (unknown)   /* as Hugging Face tokenizers: dropped, not an error */
        fprintf(stderr, "v4fleet detokenize: %s: %zu id%s with no token in the vocabulary decoded to nothing\n", where,
                unknown, unknown == 1 ? "" : "s");
    if (!as_json) {
        fwrite(text, 1, len, stdout);
    } else {
        json_t *o = json_pack("{s:s%}", "text", text, len);
        char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
        if (s)
            printf("%s\n", s);
        free(s);
        json_decref(o);
        if (!s) {
            free(text);
            return v4_err_set(err, V4_ERR_NOMEM, where, "cannot build JSON");
        }
    }
    free(text);
    return 0;
}

typedef struct detok_line {
    const v4_tokenizer *tok;
    int flags;
    v4_ids ids;
} detok_line;

static int detokenize_line(const json_t *v, const char *where, void *ud, v4_error *err)
{
    detok_line *d = ud;
    return json_ids(v, where, &d->ids, err) || decode_to(d->tok, &d->ids, d->flags, where, 1, err) ? -1 : 0;
}

static int detokenize_jsonl(const v4_tokenizer *t, int flags, v4_error *err)
{
    detok_line d = {t, flags, {0}};
    int rc = each_json_line(0, detokenize_line, &d, err);
    v4_ids_free(&d.ids);
    return rc;
}

static int detokenize_all(const v4_tokenizer *t, int flags, v4_error *err)
{
    char *buf;
    size_t len;
    if (read_all(stdin, &buf, &len, err))
        return -1;
    json_error_t je;
    json_t *v = json_loadb(buf, len, 0, &je);
    free(buf);
    if (!v)
        return v4_err_set(err, V4_ERR_FORMAT, "stdin", "invalid JSON at line %d, column %d: %s", je.line,
                          je.column, je.text);
    v4_ids ids = {0};
    int rc = json_ids(v, "stdin", &ids, err) || decode_to(t, &ids, flags, "stdin", 0, err) ? -1 : 0;
    v4_ids_free(&ids);
    json_decref(v);
    return rc;
}

int v4_cmd_detokenize(int argc, char **argv)
{
    opts o;
    int a = parse_args(argc, argv, "detokenize", &o);
    if (a)
        return a > 0 ? 0 : 2;
    v4_error err = {0};
    v4_tokenizer *t = NULL;
    int rc = v4_tok_load(o.dir, &t, &err);
    int flags = o.skip_special ? V4_TOK_SKIP_SPECIAL : 0;
    if (!rc)
        rc = o.jsonl ? detokenize_jsonl(t, flags, &err) : detokenize_all(t, flags, &err);
    rc = finish(rc, &err);
    v4_tok_free(t);
    if (rc) {
        v4_print_error("detokenize", &err);
        return 1;
    }
    return 0;
}
