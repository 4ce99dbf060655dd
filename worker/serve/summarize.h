/* summarize.h - the "summarize" task type: a summary of a document of any length,
 * made of ordinary generations (v4_runner_run) so that every prompt fits the
 * runner's context (v4_runner_context: prompt + max_tokens).
 *
 * Design:
 *   - One pass: when the prompt (system: the task's instructions or a default; user:
 *     a short request + the document) plus max_summary_tokens fits the context, the
 *     summary is one generation.  chunks 1, levels 1.
 *   - Map/reduce otherwise: the document's tokens are split into chunks whose prompt
 *     plus max_summary_tokens fits (v4_summ_split: each cut is looked for backwards
 *     from the chunk limit, down to half the chunk, at a paragraph break, else a
 *     sentence end or line break, else any token boundary that is also a UTF-8
 *     character boundary; consecutive chunks overlap by V4_SUMM_OVERLAP_PCT percent
 *     of the chunk budget).  Every chunk is summarized; the summaries, in order and
 *     separated by blank lines, are the next level's text, which is summarized in
 *     one pass if it fits, else split again.  levels = the summarization rounds
 *     including the final pass; chunks = the number of chunks of the first level
 *     (the document's split).
 *   - Non-shrinking levels fail: when a level's summaries are not fewer tokens than
 *     its input (max_summary_tokens too large for the context), the task fails with
 *     context_length_exceeded (where max_summary_tokens) instead of looping; so does a
 *     document that still does not fit after V4_SUMM_MAX_LEVELS levels, and a context
 *     so small that fewer than V4_SUMM_MIN_CHUNK document tokens fit next to the
 *     prompt and max_summary_tokens.
 *   - Prompts: the system message, then the user message = the task's instructions (when
 *     given, the same text first in every generation, so the generations of one tree share
 *     a prefix for the prefix cache), the stage's request, the text.
 *   - Every generation is the task itself turned into a two-message chat task
 *     (sampling, stop, thinking, ignore_eos, model carried over; max_tokens =
 *     max_summary_tokens), so model checks, deadline and abort behave as for
 *     generation tasks: the absolute deadline covers the whole summary, an abort
 *     returns -2 at once.
 *   - Output: text/token_ids/finish_reason are the final pass's; usage prompt_tokens
 *     is the sum over every generation's prompt, completion tokens those of the final
 *     summary (intermediate summaries are counted again as prompt tokens of the next
 *     level); prefill/decode times, expert counts, hits, misses, bytes and positions
 *     forwarded are summed over all generations (also when the task fails midway).
 *
 * State machine: v4_summarize_run is the serial driver of v4_summ, which hands out
 * one generation task at a time and takes its output back; the continuous-batching
 * executor (exec_cont.c) drives the same v4_summ and steps each generation
 * with the other tasks in flight, so a long summary never stalls them:
 *   v4_summ_begin(r, t, out, e, &s)          checks the task (-1: e filled)
 *   while (v4_summ_next(s, &g))              the next generation (chunk or final)
 *       v4_summ_accept(s, run_or_step(g), &o)   its rc (as v4_runner_run) and output
 *   rc = v4_summ_end(s)                      0, -1 (e filled) or -2 (aborted); frees s
 * Deadline and abort belong to the driver: it runs every generation under the task's
 * absolute deadline and abort hook.
 *
 * Ownership: out is owned by the caller (v4_run_output_free), also on failure; v4_summ
 * borrows r, t, out and e until v4_summ_end; the task *g stays valid until the next
 * v4_summ_accept.  v4_summ_accept takes the contents of o (frees them).
 * Thread: one thread at a time per runner (as v4_runner_run); the split helpers
 * (summarize_split.c) are pure and reentrant.
 */
#ifndef V4_SUMMARIZE_H
#define V4_SUMMARIZE_H

#include <stddef.h>
#include <stdint.h>

#include "task_run.h"
#include "worker/tokenizer/tokenizer.h"

#define V4_SUMM_OVERLAP_PCT 10      /* chunk overlap, percent of the chunk budget */
#define V4_SUMM_MAX_LEVELS 8
#define V4_SUMM_MIN_CHUNK 16        /* fewest document tokens per chunk */

/* Returns 0 (out filled), -1 (e filled: the task failed), -2 (aborted, no result). */
int v4_summarize_run(v4_runner *r, const v4_task *t, double deadline_ms, int (*abort_fn)(void *), void *abort_ud,
                     v4_run_output *out, v4_task_error *e);

typedef struct v4_summ v4_summ;

/* 0 (*s ready; out zeroed) or -1 (e filled: the task is invalid; *s NULL). */
int v4_summ_begin(v4_runner *r, const v4_task *t, v4_run_output *out, v4_task_error *e, v4_summ **s);
/* 1: *g is the next generation to run; 0: finished (v4_summ_end gives the status). */
int v4_summ_next(v4_summ *s, const v4_task **g);
/* The outcome of the generation from v4_summ_next: rc 0 / -1 (e filled) / -2 as
 * v4_runner_run returns, o its output (taken: freed here). */
void v4_summ_accept(v4_summ *s, int rc, v4_run_output *o);
/* The task's status (0, -1 e filled, -2 aborted); a summary stopped before it finished
 * is -1 (internal).  Frees s (NULL: -1). */
int v4_summ_end(v4_summ *s);

/* ------------------------------------------------------------ split helpers */

typedef struct v4_summ_span {
    size_t begin, end;              /* token indices [begin, end) */
} v4_summ_span;

/* The byte offset of every token of ids in text (offs[n] = len): malloc'd n + 1
 * entries.  Tokens map to the text's bytes in order (byte-level BPE); whitespace an
 * added token stripped is skipped.  -1 (err) when the tokens do not spell the text. */
int v4_summ_offsets(const v4_tokenizer *tok, const char *text, size_t len, const int32_t *ids, size_t n,
                    size_t **offs, v4_error *err);
/* What kind of break the boundary at byte off of text is: 2 paragraph (a blank line
 * just before), 1 sentence end (. ! ? followed by whitespace) or line break, 0 none. */
int v4_summ_break_kind(const char *text, size_t len, size_t off);
/* Split n tokens (byte offsets offs[0..n], text) into chunks of at most budget
 * tokens, consecutive chunks overlapping by overlap tokens (less when a chunk is
 * short).  The chunks cover every token, in order.  *spans is malloc'd.  -1 when
 * budget < 2 or out of memory. */
int v4_summ_split(const char *text, const size_t *offs, size_t n, size_t budget, size_t overlap,
                  v4_summ_span **spans, size_t *n_spans);

#endif
