/* token_logprobs.h - a generation's log probabilities as OpenAI's chat shape
 * (docs/structured-outputs.md "Log probabilities"): the array that goes in
 * choices[0].logprobs.content of a batch line (worker/tools/batch_output.c) and in
 * output.logprobs of a task result (result_packet.c):
 *   [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}, ...]}, ...]
 * token is the token's bytes as text: valid UTF-8 as is, every byte of an invalid or
 * cut sequence written \xNN (as Python's decode(errors="backslashreplace"), the form
 * OpenAI shows), so bytes (the exact bytes, as integers) is what to join.  An id with no
 * token in the tokenizer gives token "" and bytes [].  A probability that is not
 * representable (a refused token) is V4_LOGPROB_FLOOR (-9999, OpenAI's).
 *
 * Ownership: the returned array is new (the caller owns the reference).  Thread: any
 * (the tokenizer is read-only).
 */
#ifndef V4_TOKEN_LOGPROBS_H
#define V4_TOKEN_LOGPROBS_H

#include <jansson.h>
#include <stdint.h>

#include "generate.h"
#include "worker/tokenizer/tokenizer.h"

/* Entries for tokens[0..n) (n <= lp->n).  NULL on allocation failure. */
json_t *v4_token_logprobs_json(const v4_tokenizer *tok, const int32_t *tokens, int n, const v4_gen_logprobs *lp);
/* The text form of bytes (see above), malloc'd and NUL-terminated (*out_len without
 * the NUL).  NULL on allocation failure. */
char *v4_token_text(const char *bytes, size_t len, size_t *out_len);

#endif
