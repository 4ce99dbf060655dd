/* mktokenizer.c - see mktokenizer.h.
 *
 * Steps: (1) a bootstrap tokenizer with only the 256 byte tokens and the target's
 * pre-tokenizer is loaded through the normal loader, so that training splits text
 * exactly as the final tokenizer will; (2) mktok_train learns merges on the built-in
 * corpus (mktok_corpus.c) until 256 + merges = vocab_size - 6 tokens; (3) the
 * tokenizer.json / tokenizer_config.json texts are built with jansson (insertion
 * order kept: vocab in id order, merges in rank order); (4) the result is loaded
 * back and checked (id count, BOS/EOS ids, a round trip) before it is returned, so a
 * generator bug cannot write a tokenizer that the engine rejects.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mktok_internal.h"
#include "mktokenizer.h"
#include "tok_internal.h"

static const char *const SPECIALS[] = {
    "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
    "<think>", "</think>",
};
#define N_SPECIAL 6   /* ids 0..5; BOS = 0, EOS = 1 are "special" */

/* DeepSeek's pre-tokenizer regexes, byte for byte (the third has literal CR/LF). */
static const char PAT_DIGITS[] = "\\p{N}{1,3}";
static const char PAT_CJK[] = "[一-龥぀-ゟ゠-ヿ]+";
static const char PAT_MAIN[] =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";

static json_t *split(const char *pattern)
{
    return json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern", "Regex", pattern,
                     "behavior", "Isolated", "invert", 0);
}

static json_t *pre_tokenizer(void)
{
    return json_pack("{s:s, s:[o, o, o, {s:s, s:b, s:b, s:b}]}", "type", "Sequence", "pretokenizers",
                     split(PAT_DIGITS), split(PAT_CJK), split(PAT_MAIN), "type", "ByteLevel",
                     "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 0);
}

static json_t *byte_level(int prefix, int trim)
{
    return json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", prefix,
                     "trim_offsets", trim, "use_regex", 1);
}

/* Byte-level (GPT-2 alphabet) spelling of raw bytes. */
static char *byte_string(const char *p, size_t n)
{
    char *s = malloc(2 * n + 1), *o = s;
    if (!s)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        char u[4];
        int k = tok_utf8_encode(tok_byte_to_cp((uint8_t)p[i]), u);   /* 1 or 2 bytes */
        memcpy(o, u, (size_t)k);
        o += k;
    }
    *o = 0;
    return s;
}

static json_t *added_token(int id)
{
    int special = id < 2, normalized = id == 2 || id == 3;
    return json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", id, "content", SPECIALS[id],
                     "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", normalized,
                     "special", special);
}

/* The model object: vocab (token k -> id N_SPECIAL + k) and merges. */
static json_t *model(const mktok_vocab *v)
{
    json_t *vocab = json_object(), *merges = json_array();
    json_t *m = json_pack("{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:o, s:o}", "type", "BPE", "dropout",
                          "unk_token", "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk", 0,
                          "byte_fallback", 0, "vocab", vocab, "merges", merges);
    if (!m)
        return NULL;
    for (size_t k = 0; k < v->n; k++) {
        char *s = byte_string(v->bytes + v->tok[k].off, v->tok[k].len);
        if (!s || json_object_set_new(vocab, s, json_integer(N_SPECIAL + (json_int_t)k))) {
            free(s);
            json_decref(m);
            return NULL;
        }
        free(s);
    }
    for (size_t i = 0; i < v->n_merges; i++) {
        const mktok_tok *a = &v->tok[v->merges[i][0]], *b = &v->tok[v->merges[i][1]];
        char *sa = byte_string(v->bytes + a->off, a->len), *sb = byte_string(v->bytes + b->off, b->len);
        char *both = sa && sb ? malloc(strlen(sa) + strlen(sb) + 2) : NULL;
        if (both)
            sprintf(both, "%s %s", sa, sb);
        int bad = !both || json_array_append_new(merges, json_string(both));
        free(sa);
        free(sb);
        free(both);
        if (bad) {
            json_decref(m);
            return NULL;
        }
    }
    return m;
}

static json_t *tokenizer_json(const mktok_vocab *v)
{
    json_t *added = json_array();
    for (int id = 0; id < N_SPECIAL; id++)
        json_array_append_new(added, added_token(id));
    return json_pack("{s:s, s:n, s:n, s:o, s:{s:s, s:[]}, s:o, s:o, s:o, s:o}", "version", "1.0",
                     "truncation", "padding", "added_tokens", added, "normalizer", "type", "Sequence",
                     "normalizers", "pre_tokenizer", pre_tokenizer(), "post_processor",
                     byte_level(1, 0), "decoder", byte_level(1, 1), "model", model(v));
}

static json_t *config_token(const char *content)
{
    return json_pack("{s:s, s:s, s:b, s:b, s:b, s:b}", "__type", "AddedToken", "content", content,
                     "lstrip", 0, "normalized", 1, "rstrip", 0, "single_word", 0);
}

static json_t *config_json(void)
{
    return json_pack("{s:b, s:b, s:o, s:b, s:o, s:b, s:i, s:o, s:{}, s:n, s:s}", "add_bos_token", 0,
                     "add_eos_token", 0, "bos_token", config_token(SPECIALS[0]),
                     "clean_up_tokenization_spaces", 0, "eos_token", config_token(SPECIALS[1]),
                     "legacy", 1, "model_max_length", 1048576, "pad_token", config_token(SPECIALS[1]),
                     "sp_model_kwargs", "unk_token", "tokenizer_class", "PreTrainedTokenizerFast");
}

/* A tokenizer with the byte tokens only and the target pre-tokenizer. */
static int bootstrap(v4_tokenizer **out, v4_error *err)
{
    json_t *vocab = json_object();
    for (int b = 0; b < 256; b++) {
        char c = (char)b, *s = byte_string(&c, 1);
        if (s)
            json_object_set_new(vocab, s, json_integer(b));
        free(s);
    }
    json_t *root = json_pack("{s:{s:s, s:o, s:[]}, s:o, s:o}", "model", "type", "BPE", "vocab", vocab,
                             "merges", "pre_tokenizer", pre_tokenizer(), "decoder", byte_level(1, 1));
    char *text = root ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    if (!text)
        return v4_err_set(err, V4_ERR_NOMEM, "mktokenizer", "cannot build JSON");
    int rc = v4_tok_load_mem(text, strlen(text), NULL, 0, "mktokenizer bootstrap", out, err);
    free(text);
    return rc;
}

static int verify(const char *json, const char *cfg, int vocab_size, v4_error *err)
{
    v4_tokenizer *t = NULL;
    if (v4_tok_load_mem(json, strlen(json), cfg, strlen(cfg), "generated tokenizer", &t, err))
        return -1;
    static const char sample[] = "<｜begin▁of▁sentence｜>The model reads 1234 tokens.<｜User｜>héllo 世界";
    v4_ids ids = {0};
    char *back = NULL;
    size_t len = 0;
    int rc = v4_tok_n_ids(t) != vocab_size || v4_tok_bos(t) != 0 || v4_tok_eos(t) != 1 ||
             v4_tok_encode(t, sample, strlen(sample), &ids, err) ||
             v4_tok_decode(t, ids.v, ids.n, 0, &back, &len, err) || strcmp(back, sample);
    if (rc)
        v4_err_set(err, V4_ERR_INTERNAL, "mktokenizer", "the generated tokenizer does not check out");
    free(back);
    v4_ids_free(&ids);
    v4_tok_free(t);
    return rc ? -1 : 0;
}

int v4_mktokenizer(int vocab_size, char **json_out, char **config_json_out, v4_error *err)
{
    *json_out = *config_json_out = NULL;
    if (vocab_size < V4_MKTOK_MIN_VOCAB || vocab_size > (1 << 20))
        return v4_err_set(err, V4_ERR_RANGE, "mktokenizer", "vocab_size %d outside [%d, %d]",
                          vocab_size, V4_MKTOK_MIN_VOCAB, 1 << 20);
    v4_tokenizer *pre = NULL;
    if (bootstrap(&pre, err))
        return -1;
    size_t len = 0;
    char *corpus = mktok_corpus(&len);
    mktok_vocab v;
    int rc = corpus ? mktok_train(pre, corpus, len, (size_t)vocab_size - N_SPECIAL, &v, err)
                    : v4_err_set(err, V4_ERR_NOMEM, "mktokenizer", "out of memory");
    free(corpus);
    v4_tok_free(pre);
    if (rc)
        return -1;
    json_t *tj = tokenizer_json(&v), *cj = config_json();
    mktok_vocab_free(&v);
    char *ts = tj ? json_dumps(tj, JSON_INDENT(2)) : NULL, *cs = cj ? json_dumps(cj, JSON_INDENT(2)) : NULL;
    json_decref(tj);
    json_decref(cj);
    if (!ts || !cs) {
        free(ts);
        free(cs);
        return v4_err_set(err, V4_ERR_NOMEM, "mktokenizer", "cannot build JSON");
    }
    if (verify(ts, cs, vocab_size, err)) {
        free(ts);
        free(cs);
        return -1;
    }
    *json_out = ts;
    *config_json_out = cs;
    return 0;
}
