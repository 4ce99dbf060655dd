/* tokenizer.h - the Hugging Face byte-level BPE tokenizer of DeepSeek (tokenizer.json +
 * tokenizer_config.json): text -> token ids (encode) and ids -> text (decode, also
 * streaming).
 *
 * What is supported (anything else in the files is rejected at load time with an
 * error naming the key, never silently ignored):
 *   normalizer     null or an empty Sequence
 *   pre_tokenizer  Sequence / Split (Regex or String pattern; Isolated, Removed,
 *                  MergedWithPrevious, MergedWithNext, Contiguous; invert) / ByteLevel
 *                  (add_prefix_space false; use_regex adds the GPT-2 split)
 *   model          BPE over the GPT-2 byte alphabet, merges by rank ("a b" strings or
 *                  [a, b] arrays), ignore_merges; no dropout, byte fallback, prefixes
 *   added_tokens   matched as whole strings before the pre-tokenizer (leftmost, then
 *                  longest), lstrip/rstrip honoured
 *   decoder        ByteLevel (added tokens decode to their content verbatim)
 * Encoding adds no special tokens (no BOS): special tokens written inside the text
 * are recognised (v4_tok_encode), or not inside literal parts (v4_tok_encode_parts:
 * user content stays text).  The input must be valid UTF-8.  Encoding is O(n log n) in the
 * input length (see tok_bpe.c); decoding is linear.
 *
 * Ownership: v4_tok_load returns a tokenizer the caller frees with v4_tok_free.
 * Ids are appended to a caller-owned v4_ids vector (v4_ids_free).  Text returned by
 * v4_tok_decode is malloc'd (caller frees); text returned by the stream functions is
 * owned by the stream and valid until its next call.
 * Thread: a loaded v4_tokenizer is read-only and may be shared by any number of
 * threads.  A v4_tok_encoder (regex match state + piece cache) and a v4_tok_stream
 * (one sequence's pending bytes) are used by one thread at a time; make one per
 * thread / per sequence.
 */
#ifndef V4_TOKENIZER_H
#define V4_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "config/error.h"

typedef struct v4_tokenizer v4_tokenizer;
typedef struct v4_tok_encoder v4_tok_encoder;
typedef struct v4_tok_stream v4_tok_stream;

/* A growable vector of token ids (zero-initialize it: v4_ids ids = {0}). */
typedef struct v4_ids {
    int32_t *v;
    size_t n, cap;
} v4_ids;

int v4_ids_push(v4_ids *ids, int32_t id, v4_error *err);
void v4_ids_free(v4_ids *ids);

/* ------------------------------------------------------------------ loading */

/* Load DIR/tokenizer.json and, if present, DIR/tokenizer_config.json. */
int v4_tok_load(const char *dir, v4_tokenizer **out, v4_error *err);
/* Same from explicit paths; config_path may be NULL (no config). */
int v4_tok_load_files(const char *json_path, const char *config_path, v4_tokenizer **out,
                      v4_error *err);
/* Same from memory (config may be NULL); where names the source in errors. */
int v4_tok_load_mem(const char *json, size_t json_len, const char *config, size_t config_len,
                    const char *where, v4_tokenizer **out, v4_error *err);
void v4_tok_free(v4_tokenizer *t);

/* --------------------------------------------------------------- lookups */

/* One past the largest token id (ids below it may still be unused holes). */
int32_t v4_tok_n_ids(const v4_tokenizer *t);
/* BOS / EOS ids and texts from tokenizer_config.json (bos_token, eos_token);
 * -1 / NULL when the config is absent or does not name them. */
int32_t v4_tok_bos(const v4_tokenizer *t);
int32_t v4_tok_eos(const v4_tokenizer *t);
const char *v4_tok_bos_text(const v4_tokenizer *t);
const char *v4_tok_eos_text(const v4_tokenizer *t);
/* Id of the token whose text is exactly s: an added token (by content) first, then a
 * vocabulary entry (by its decoded bytes); -1 if there is none. */
int32_t v4_tok_find(const v4_tokenizer *t, const char *s);
/* 1 if id is an added token marked "special" (BOS, EOS, ...), else 0. */
int v4_tok_is_special(const v4_tokenizer *t, int32_t id);
/* The bytes a token decodes to (not NUL-terminated; may be part of a UTF-8
 * character); NULL if id is not a token. */
const char *v4_tok_bytes(const v4_tokenizer *t, int32_t id, size_t *len);

/* --------------------------------------------------------------- encoding */

/* Append the ids of text[0..len) to out.  Convenience wrapper that makes a temporary
 * encoder; use an encoder to encode many texts. */
int v4_tok_encode(const v4_tokenizer *t, const char *text, size_t len, v4_ids *out,
                  v4_error *err);

/* One piece of a text to encode: literal 1 = its bytes are text, no added token (special
 * or not) is matched inside it (user content: markers written in it stay text); 0 =
 * added tokens are matched as v4_tok_encode matches them (the chat template's markers). */
typedef struct v4_tok_part {
    const char *text;
    size_t len;
    int literal;
} v4_tok_part;

/* Append the ids of the concatenated parts, encoded as one text (the pre-tokenizer and
 * added tokens' lstrip/rstrip see across the seams), except that an added token is
 * matched only where it lies wholly inside non-literal parts.  Without literal parts
 * this is exactly v4_tok_encode of the concatenation. */
int v4_tok_encode_parts(const v4_tokenizer *t, const v4_tok_part *parts, size_t n, v4_ids *out, v4_error *err);

v4_tok_encoder *v4_tok_encoder_new(const v4_tokenizer *t, v4_error *err);
int v4_tok_encoder_run(v4_tok_encoder *e, const char *text, size_t len, v4_ids *out,
                       v4_error *err);
void v4_tok_encoder_free(v4_tok_encoder *e);

/* --------------------------------------------------------------- decoding */

#define V4_TOK_SKIP_SPECIAL 1   /* decode flag: special added tokens produce no text */

/* Decode ids to text (malloc'd, NUL-terminated, *len without the NUL).  Byte
 * sequences that are not valid UTF-8 (e.g. ids that end inside a character) become
 * U+FFFD, one per maximal invalid subpart, like Rust's String::from_utf8_lossy.
 * An id >= 0 with no token (past the tokenizer's vocabulary but inside the model's, e.g.
 * DeepSeek-V3's 128815..129279, or a hole) gives no text, as Hugging Face tokenizers
 * drops it (v4_tok_count_unknown counts them); a negative id is an error (V4_ERR_RANGE). */
int v4_tok_decode(const v4_tokenizer *t, const int32_t *ids, size_t n, int flags, char **text,
                  size_t *len, v4_error *err);

/* Streaming decoder for one sequence: feed ids one at a time; each call returns only
 * complete UTF-8 (a token that ends inside a character is held back until the
 * character completes).  The concatenation of all returned chunks plus the flush
 * equals v4_tok_decode of all the ids. */
v4_tok_stream *v4_tok_stream_new(const v4_tokenizer *t, int flags, v4_error *err);
/* On error (a negative id) nothing is consumed and the stream is unchanged; an id with
 * no token gives no text and is counted (v4_tok_stream_unknown, since new or reset). */
int v4_tok_stream_feed(v4_tok_stream *s, int32_t id, const char **text, size_t *len,
                       v4_error *err);
size_t v4_tok_stream_unknown(const v4_tok_stream *s);
/* How many of ids (>= 0) have no token (they decode to nothing). */
size_t v4_tok_count_unknown(const v4_tokenizer *t, const int32_t *ids, size_t n);
/* End of the sequence: held-back bytes of an incomplete character become U+FFFD. */
void v4_tok_stream_flush(v4_tok_stream *s, const char **text, size_t *len);
void v4_tok_stream_reset(v4_tok_stream *s);
void v4_tok_stream_free(v4_tok_stream *s);

#endif
