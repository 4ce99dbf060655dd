/* mktok_internal.h - the parts of mktokenizer.c: the built-in corpus (mktok_corpus.c)
 * and the BPE trainer (mktok_train.c).  Internal to the generator.
 * Ownership: a mktok_vocab owns its arrays (mktok_vocab_free).  Thread: reentrant. */
#ifndef V4_MKTOK_INTERNAL_H
#define V4_MKTOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

/* The training text (malloc'd, NUL-terminated); NULL when out of memory. */
char *mktok_corpus(size_t *len);

/* Trained vocabulary: token k has bytes[tok[k].off .. + tok[k].len); tokens 0..255
 * are the single bytes; merges[m] = the two tokens merge m joins (result: the token
 * whose bytes are their concatenation). */
typedef struct mktok_tok {
    uint32_t off, len;
} mktok_tok;

typedef struct mktok_vocab {
    char *bytes;
    size_t bytes_n, bytes_cap;
    mktok_tok *tok;
    size_t n, cap;
    int32_t (*merges)[2];
    size_t n_merges, merges_cap;
} mktok_vocab;

/* Learn merges on the pre-tokens of text (split by pretok, a tokenizer whose
 * pre-tokenizer is the target's) until the vocabulary has n_tokens tokens. */
int mktok_train(const v4_tokenizer *pretok, const char *text, size_t len, size_t n_tokens,
                mktok_vocab *v, v4_error *err);
void mktok_vocab_free(mktok_vocab *v);

#endif
