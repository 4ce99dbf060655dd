/* tok_load.c - read tokenizer.json (+ tokenizer_config.json) with jansson into the
 * tables of tok_internal.h: files, JSON parsing, the config's BOS/EOS, and the order
 * of the steps (model and added tokens: tok_load_model.c; normalizer, pre-tokenizer,
 * decoder: tok_load_pipeline.c; the JSON helpers they share: tok_json.c).
 *
 * Design: parse the whole JSON once, validate every component we rely on and reject
 * every feature we do not implement (an error naming the key, e.g.
 * "pre_tokenizer.pretokenizers[3]: type 'Metaspace' is not supported"), so that a
 * tokenizer either loads and encodes exactly like Hugging Face's or does not load.
 * Loading is linear in the file size (~0.2 s for DeepSeek's 7.8 MB file).
 *
 * Post-processor: ignored (it only adds special tokens / offsets when asked to; we
 * never add special tokens implicitly - the chat encoder writes BOS as text).
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tok_load.h"

/* ----------------------------------------------------------------- config */

/* bos_token / eos_token: a string or {"content": string}; absent or null = none. */
static int config_token(loader *L, const json_t *cfg, const char *key, int32_t *id, char **text)
{
    const json_t *v = json_object_get(cfg, key);
    if (json_is_object(v))
        v = json_object_get(v, "content");
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v))
        return tok_fail(L, V4_ERR_FORMAT, "%s: expected a string or {\"content\": string}", key);
    const char *s = json_string_value(v);
    *id = v4_tok_find(L->t, s);
    if (*id < 0)
        return tok_fail(L, V4_ERR_CONFIG, "%s \"%s\" is not a token of tokenizer.json", key, s);
    *text = strdup(s);
    return *text ? 0 : tok_fail(L, V4_ERR_NOMEM, "out of memory");
}

static json_t *parse(loader *L, const char *s, size_t n)
{
    json_error_t je;
    json_t *root = json_loadb(s, n, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        tok_fail(L, V4_ERR_FORMAT, "invalid JSON at line %d, column %d: %s", je.line, je.column, je.text);
    else if (!json_is_object(root)) {
        tok_fail(L, V4_ERR_FORMAT, "expected a JSON object");
        json_decref(root);
        root = NULL;
    }
    return root;
}

static int load_all(loader *L, const char *json, size_t json_len, const char *config,
                    size_t config_len, const char *config_where)
{
    json_t *root = parse(L, json, json_len);
    if (!root)
        return -1;
    int rc = tok_load_model(L, json_object_get(root, "model")) ||
             tok_load_added(L, json_object_get(root, "added_tokens")) ||
             tok_check_normalizer(L, json_object_get(root, "normalizer")) ||
             tok_load_pretok(L, json_object_get(root, "pre_tokenizer"), "pre_tokenizer", 0) ||
             tok_check_decoder(L, json_object_get(root, "decoder")) ||
             tok_vocab_index_build(L->t, L->err) ? -1 : 0;
    json_decref(root);
    if (rc || !config)
        return rc;
    L->where = config_where;
    json_t *cfg = parse(L, config, config_len);
    if (!cfg)
        return -1;
    rc = config_token(L, cfg, "bos_token", &L->t->bos_id, &L->t->bos_text) ||
         config_token(L, cfg, "eos_token", &L->t->eos_id, &L->t->eos_text) ? -1 : 0;
    json_decref(cfg);
    return rc;
}

static int load_mem2(const char *json, size_t json_len, const char *where, const char *config,
                     size_t config_len, const char *config_where, v4_tokenizer **out, v4_error *err)
{
    *out = NULL;
    v4_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return v4_err_set(err, V4_ERR_NOMEM, where, "out of memory");
    t->bos_id = t->eos_id = -1;
    loader L = {t, where ? where : "tokenizer.json", err, NULL, 0};
    int rc = load_all(&L, json, json_len, config, config_len,
                      config_where ? config_where : "tokenizer_config.json");
    free(L.buf);
    if (rc) {
        v4_tok_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

int v4_tok_load_mem(const char *json, size_t json_len, const char *config, size_t config_len,
                    const char *where, v4_tokenizer **out, v4_error *err)
{
    return load_mem2(json, json_len, where, config, config_len, where, out, err);
}

static int read_file(const char *path, char **buf, size_t *len, v4_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return v4_err_set(err, V4_ERR_IO, path, "cannot open: %s", strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    while (b) {
        n += fread(b + n, 1, cap - n, f);
        if (n < cap)
            break;
        char *nb = realloc(b, cap *= 2);
        if (!nb)
            free(b);
        b = nb;
    }
    int bad = ferror(f);
    fclose(f);
    if (!b)
        return v4_err_set(err, V4_ERR_NOMEM, path, "out of memory");
    if (bad) {
        free(b);
        return v4_err_set(err, V4_ERR_IO, path, "read error");
    }
    *buf = b;
    *len = n;
    return 0;
}

int v4_tok_load_files(const char *json_path, const char *config_path, v4_tokenizer **out,
                      v4_error *err)
{
    *out = NULL;
    char *json = NULL, *cfg = NULL;
    size_t json_len = 0, cfg_len = 0;
    if (read_file(json_path, &json, &json_len, err))
        return -1;
    if (config_path && read_file(config_path, &cfg, &cfg_len, err)) {
        free(json);
        return -1;
    }
    int rc = load_mem2(json, json_len, json_path, cfg, cfg_len, config_path, out, err);
    free(json);
    free(cfg);
    return rc;
}

int v4_tok_load(const char *dir, v4_tokenizer **out, v4_error *err)
{
    *out = NULL;
    char jp[4096], cp[4096];
    struct stat st;
    if (stat(dir, &st))
        return v4_err_set(err, V4_ERR_IO, dir, "cannot open the tokenizer directory: %s",
                          strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return v4_err_set(err, V4_ERR_IO, dir, "not a directory");
    if (snprintf(jp, sizeof jp, "%s/tokenizer.json", dir) >= (int)sizeof jp ||
        snprintf(cp, sizeof cp, "%s/tokenizer_config.json", dir) >= (int)sizeof cp)
        return v4_err_set(err, V4_ERR_INVALID, dir, "path too long");
    int have_cfg = stat(cp, &st) == 0;
    return v4_tok_load_files(jp, have_cfg ? cp : NULL, out, err);
}
