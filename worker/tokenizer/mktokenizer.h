/* mktokenizer.h - a small, real-format DeepSeek-style tokenizer for synthetic models
 * (`v4fleet mkmodel` writes it next to the weights).
 *
 * The files have the structure of DeepSeek's tokenizer.json (the same pre-tokenizer
 * Split regexes + ByteLevel, ByteLevel decoder and post-processor, BPE model with
 * "a b" merges) so the same loader reads them.  Ids:
 *   0 <｜begin▁of▁sentence｜> (special; = config bos_token_id)
 *   1 <｜end▁of▁sentence｜>   (special; = config eos_token_id)
 *   2 <｜User｜>  3 <｜Assistant｜>  4 <think>  5 </think>
 *   6 .. 261   the 256 byte tokens, in byte order
 *   262 ..     merges learned by BPE from a built-in English/code/number corpus (most
 *              frequent pair first, ties to the lower ids), then deterministic filler
 *              merges if the corpus runs out, until exactly vocab_size ids exist - so
 *              every id a model with that vocabulary can emit decodes.
 * The output depends only on vocab_size.
 *
 * Ownership: the two JSON texts are malloc'd; the caller frees them.
 * Thread: reentrant.
 */
#ifndef V4_MKTOKENIZER_H
#define V4_MKTOKENIZER_H

#include "config/error.h"

#define V4_MKTOK_MIN_VOCAB 262

/* Build tokenizer.json and tokenizer_config.json texts for vocab_size ids
 * (V4_MKTOK_MIN_VOCAB <= vocab_size <= 1 << 20). */
int v4_mktokenizer(int vocab_size, char **tokenizer_json, char **config_json, v4_error *err);

#endif
