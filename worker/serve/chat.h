/* chat.h - the DeepSeek-V4 chat prompt (spec v4-decode.md §6, encoding_dsv4.py with
 * drop_thinking and no tools):
 *
 *   BOS {system}  then per message
 *     user       <｜User｜>{text}   followed, when the next message is an assistant
 *                answer or this is the last message, by <｜Assistant｜> and
 *                </think> (chat mode; and for every earlier turn) or <think>
 *                (thinking mode, last user turn only)
 *     assistant  {text}<｜end▁of▁sentence｜>   (earlier answers, reasoning dropped)
 *
 * e.g. chat:     <｜begin▁of▁sentence｜>SYS<｜User｜>Q<｜Assistant｜></think>
 *      thinking: <｜begin▁of▁sentence｜>SYS<｜User｜>Q<｜Assistant｜><think>
 *
 * The marker strings are DeepSeek's names (BOS / EOS from tokenizer_config.json when
 * it names them); their ids come from the tokenizer (found by content), -1 when the
 * tokenizer lacks them (the V3 file has no <think> / </think>: they are then encoded
 * as ordinary text; a V4 tokenizer.json has them as added tokens).  The prompt is
 * encoded as one text (the same ids as the reference's encode of the whole string,
 * seams included), except that the system prompt and the messages are literal: a
 * marker or any other added token written inside them is encoded as ordinary text,
 * never as its special id, so a document cannot end the user turn and write the
 * assistant's (OpenAI's and DeepSeek's APIs treat content as text too; trusted callers
 * that need markers send input_ids, or v4_chat_encode_ex with markers_in_text).
 *
 * Ownership: strings in v4_chat_markers point into the tokenizer or are static; the
 * prompt string and ids are returned in caller-owned memory.
 * Thread: all functions are reentrant; the tokenizer is only read.
 */
#ifndef V4_CHAT_H
#define V4_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "config/error.h"
#include "worker/tokenizer/tokenizer.h"

typedef enum v4_chat_role { V4_CHAT_USER, V4_CHAT_ASSISTANT } v4_chat_role;

typedef struct v4_chat_msg {
    v4_chat_role role;
    const char *text;           /* UTF-8, NUL-terminated */
} v4_chat_msg;

typedef struct v4_chat_markers {
    const char *bos, *eos, *user, *assistant, *think, *end_think;
    int32_t bos_id, eos_id, user_id, assistant_id, think_id, end_think_id;   /* -1: none */
} v4_chat_markers;

/* DeepSeek's marker strings and, if tok is not NULL, their ids in tok. */
void v4_chat_markers_init(v4_chat_markers *m, const v4_tokenizer *tok);

/* Build the prompt text (malloc'd, NUL-terminated; *len without the NUL).
 * system may be NULL or "".  The messages must end with a user message; an
 * assistant message must follow a user message. */
int v4_chat_prompt(const v4_chat_markers *m, const char *system, const v4_chat_msg *msgs,
                   size_t n, int thinking, char **out, size_t *len, v4_error *err);

/* Build the prompt with tok's markers and append its ids to out (texts literal). */
int v4_chat_encode(const v4_tokenizer *tok, const char *system, const v4_chat_msg *msgs,
                   size_t n, int thinking, v4_ids *out, v4_error *err);
/* The same; markers_in_text 1: added tokens written in the texts are matched too (the
 * reference's behaviour: for trusted callers only). */
int v4_chat_encode_ex(const v4_tokenizer *tok, const char *system, const v4_chat_msg *msgs, size_t n, int thinking,
                      int markers_in_text, v4_ids *out, v4_error *err);

#endif
