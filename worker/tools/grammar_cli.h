/* grammar_cli.h - what `v4fleet grammar-check` and `v4fleet grammar-bench` share: JSON
 * written the way a model writes it (compact or with single spaces, reals in their
 * shortest form).  The engine's vocabulary made from a tokenizer is the serving core's
 * (worker/serve/constrain.h v4_grammar_vocab), so the tools see the tokens as serving does.
 * Ownership: returned objects and strings are the caller's (v4g_vocab_free / free).
 * Thread: the calling thread (commands run on the main thread).
 */
#ifndef V4_GRAMMAR_CLI_H
#define V4_GRAMMAR_CLI_H

#include <jansson.h>

#include "worker/grammar/grammar.h"
#include "worker/serve/constrain.h"
#include "worker/tokenizer/tokenizer.h"

/* v as JSON text: spaced 0 = no whitespace, 1 = ", " and ": " (Python's json.dumps);
 * objects' keys in the order the engine writes them under schema (may be NULL). */
char *v4_json_text(const json_t *v, const json_t *schema, int spaced);
/* JSON text whose integer literals too long for jansson (over 18 digits) become strings
 * "\x01BIG:<digits>", which v4_json_text writes back as the number (malloc'd; NULL: memory). */
char *v4_json_protect_bigints(const char *text, size_t len);

#endif
