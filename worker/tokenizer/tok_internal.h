/* tok_internal.h - the tokenizer's data structures, shared by its source files
 * (tok_load*.c, tok_tables.c, tok_regex.c, tok_pretok.c, tok_bpe.c, tok_encode.c,
 * tok_decode.c, tok_utf8.c, tokenizer.c).  Not for use outside the tokenizer, except
 * v4_tok_encoder_pieces (the pre-tokenizer alone, used by mktokenizer.c) and tests.
 *
 * Layout: every token id has an entry in `tokens` (bytes in the `bytes` arena).
 * Vocabulary entries are stored as raw bytes (the GPT-2 byte alphabet undone at load
 * time), so BPE runs on the UTF-8 bytes of the text directly and decoding is a
 * concatenation.  Merges are a hash table from (left id, right id) to (rank, merged
 * id).  Added tokens are a byte trie searched at every candidate position.
 *
 * Thread: everything in v4_tokenizer is written only while loading.
 */
#ifndef V4_TOK_INTERNAL_H
#define V4_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

/* ------------------------------------------------------------------ tables */

enum {
    TOK_VALID = 1,      /* the id is a token                                  */
    TOK_ADDED = 2,      /* an added token (decodes to its content)            */
    TOK_SPECIAL = 4,    /* added token with "special": true                   */
};

typedef struct tok_entry {
    uint32_t off, len;  /* bytes in t->bytes */
    uint32_t flags;
} tok_entry;

typedef struct tok_merge {
    uint64_t key;       /* (left << 32) | right; TOK_EMPTY_KEY = free slot */
    uint32_t rank;
    int32_t result;
} tok_merge;
#define TOK_EMPTY_KEY UINT64_MAX

typedef struct tok_trie_node {
    int32_t child;      /* first child, -1 none   */
    int32_t sibling;    /* next sibling, -1 none  */
    int32_t added;      /* index in t->added that ends here, -1 none */
    uint8_t byte;
} tok_trie_node;

typedef struct tok_added {
    int32_t id;
    uint32_t off, len;  /* content bytes in t->bytes */
    uint8_t lstrip, rstrip;
} tok_added;

enum { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS };

typedef struct tok_split {
    pcre2_code *re;
    int behavior;
    int invert;
} tok_split;

struct v4_tokenizer {
    tok_entry *tokens;          /* [n_ids] (capacity tokens_cap) */
    int32_t n_ids;
    size_t tokens_cap;
    char *bytes;                /* arena of token bytes */
    size_t bytes_len, bytes_cap;

    int32_t byte_id[256];       /* the vocabulary id of each single byte */

    tok_merge *merges;          /* open addressing, capacity mask + 1 */
    size_t merge_mask, n_merges;

    int32_t *vocab_index;       /* open addressing over vocab ids by their bytes; -1 free */
    size_t vocab_mask;
    int ignore_merges;

    tok_added *added;
    size_t n_added;
    tok_trie_node *trie;        /* node 0 = root */
    size_t n_trie, trie_cap;
    uint8_t added_first[256];   /* 1 if some added token starts with this byte */

    tok_split *splits;
    size_t n_splits, splits_cap;

    int32_t bos_id, eos_id;
    char *bos_text, *eos_text;
};

/* tok_tables.c */
int tok_arena_add(v4_tokenizer *t, const void *p, size_t n, uint32_t *off, v4_error *err);
int tok_set_entry(v4_tokenizer *t, int32_t id, const void *p, size_t n, uint32_t flags,
                  v4_error *err);
int tok_merges_init(v4_tokenizer *t, size_t n, v4_error *err);
/* Returns 1 if the pair was already there (the later rank replaces it). */
int tok_merge_put(v4_tokenizer *t, int32_t left, int32_t right, uint32_t rank, int32_t result);
static inline uint64_t tok_merge_hash(uint64_t key)
{
    key ^= key >> 29;
    key *= 0xbf58476d1ce4e5b9ull;
    return key ^ (key >> 32);
}
static inline const tok_merge *tok_merge_get(const v4_tokenizer *t, int32_t left, int32_t right)
{
    uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    for (size_t i = tok_merge_hash(key) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        const tok_merge *m = &t->merges[i];
        if (m->key == key)
            return m;
        if (m->key == TOK_EMPTY_KEY)
            return NULL;
    }
}
int tok_vocab_index_build(v4_tokenizer *t, v4_error *err);
/* Vocabulary (not added) id whose bytes are p[0..n), or -1. */
int32_t tok_vocab_lookup(const v4_tokenizer *t, const void *p, size_t n);
int tok_added_add(v4_tokenizer *t, int32_t id, const char *content, size_t len, int lstrip,
                  int rstrip, v4_error *err);
uint64_t tok_hash_bytes(const void *p, size_t n);

/* tok_unicode.c (generated) + tok_regex.c: split patterns are rewritten so that PCRE2
 * matches like the reference engine (see tok_regex.c). */
typedef struct tok_range {
    uint32_t lo, hi;
} tok_range;
typedef struct tok_unicode_delta {
    char cls;                   /* 'L', 'M', 'N', 'P', 'S'; 0 ends the table */
    const tok_range *r;
    size_t n;
} tok_unicode_delta;
extern const tok_unicode_delta tok_unicode_deltas[];
/* Rewrite a split regex (malloc'd, NUL-terminated, length in *out_len). */
int tok_regex_rewrite(const char *pat, size_t len, char **out, size_t *out_len, v4_error *err);

/* ------------------------------------------------------------------ UTF-8 */

/* Length of the UTF-8 character at s[0..n): >0 complete and valid; 0 = a valid but
 * incomplete prefix that reaches the end of the buffer; -k = the first k bytes are
 * an invalid maximal subpart (replace them with one U+FFFD). */
int tok_utf8_step(const unsigned char *s, size_t n);
/* Offset of the first invalid byte, or n if s is valid UTF-8. */
size_t tok_utf8_check(const char *s, size_t n);
/* Codepoint of the valid character at s (length k). */
uint32_t tok_utf8_decode(const unsigned char *s, int k);
int tok_utf8_encode(uint32_t cp, char out[4]);
/* The GPT-2 byte alphabet: the codepoint that stands for each byte, and back
 * (-1 for codepoints that stand for no byte). */
uint32_t tok_byte_to_cp(uint8_t b);
int tok_cp_to_byte(uint32_t cp);
/* Rust char::is_whitespace (Unicode White_Space). */
int tok_is_whitespace(uint32_t cp);

/* --------------------------------------------------------------- encoder */

typedef struct tok_cache_slot {
    uint64_t hash;
    uint32_t key_off, key_len;  /* in cache_bytes */
    uint32_t ids_off, ids_n;    /* in cache_ids   */
} tok_cache_slot;

typedef int (*tok_piece_fn)(v4_tok_encoder *e, const char *p, size_t n);

struct v4_tok_encoder {
    const v4_tokenizer *t;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack;

    /* BPE scratch (grown on demand) */
    int32_t *sym;               /* symbol ids            */
    int32_t *next, *prev;       /* linked list, -1 ends  */
    uint64_t *heap;             /* (rank << 32) | left symbol index */
    size_t sym_cap, heap_cap, heap_n;

    /* piece -> ids cache; cleared when full (contents never change results) */
    tok_cache_slot *cache;
    size_t cache_mask, cache_n;
    char *cache_bytes;
    size_t cache_bytes_n, cache_bytes_cap;
    int32_t *cache_ids;
    size_t cache_ids_n, cache_ids_cap;

    /* current run */
    v4_ids *out;
    v4_error *err;
    tok_piece_fn piece_fn;      /* what to do with each pre-token piece */
    void *piece_ctx;
};

/* tok_pretok.c: split one stretch of text (no added tokens in it) with the
 * pre-tokenizer steps, calling e->piece_fn on every piece. */
int tok_pretokenize(v4_tok_encoder *e, const char *p, size_t n);
/* tok_bpe.c: append the BPE ids of one piece to e->out. */
int tok_bpe_piece(v4_tok_encoder *e, const char *p, size_t n);
void tok_bpe_free(v4_tok_encoder *e);

/* tok_encode.c: run only the added-token split and the pre-tokenizer over text,
 * calling fn(e, piece, len) for every pre-token piece, and appending the ids of
 * added tokens to out (may be NULL: added tokens are then skipped).  Used to train
 * merges with the same pre-tokenizer (mktokenizer.c). */
int v4_tok_encoder_pieces(v4_tok_encoder *e, const char *text, size_t len, tok_piece_fn fn,
                          void *ctx, v4_ids *out, v4_error *err);

#endif
