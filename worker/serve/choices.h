/* choices.h - several answers to one generation task (the task field n > 1, OpenAI's
 * `n`): n choices from one prompt, each with its own seed, stop matcher, output
 * constraint state, text, token count and finish_reason (docs/queue-worker.md "Several
 * answers (n)").
 *
 * Design (the simplest that is correct; both executors run it, so their results are
 * the same):
 *   - Choice 0 is the task run as if n were 1 (same seed, same prompt, same steps): its
 *     answer equals the n = 1 answer.
 *   - Its prefill is shared: right after the step that forwarded the prompt's last
 *     position, the driver hands the sequence and that position's logits to
 *     v4_choices_capture, which keeps a fork of the sequence (v4_seq_fork: the exact CPU
 *     state) and a copy of the logits.  Each later choice starts from a new fork of
 *     that snapshot and samples its first token from those logits with its own sampler
 *     (generate.h v4_gen_begin_forked): no prompt position is forwarded again.
 *   - Where the context's steps do not run from the v4_seq's own state (the CUDA
 *     engine: v4_ctx_seq_forkable 0), or the snapshot could not be allocated, a choice
 *     prefills the prompt again instead: the same answer, only slower.  The environment
 *     variable V4_N_PREFILL_EACH=1 forces that way on the CPU too (tests compare it).  (The GPU path
 *     is untested here: no device was available while it was written.)
 *   - The choices run one after another in the task's executor slot (the serial
 *     executor: in its one run; the continuous executor: in the slot the task was
 *     admitted to, the way a summarize task runs its generations), so a task holds at
 *     most two sequences at a time (the snapshot and the running choice) and admission
 *     sees each choice's sequence as it comes.  The decode of the choices is therefore
 *     not batched with each other (only with the other tasks in flight).
 *   - Seeds: choice 0 uses the task's seed; choice i > 0 uses v4_choice_seed(seed, i),
 *     the splitmix64 finalizer of seed + i * 0x9E3779B97F4A7C15 (mod 2^64) with its top
 *     bit cleared, so that it is a seed a task may carry (0..2^63-1): a task with n = 1
 *     and that seed gives the same answer as choice i (tests/test_batch_n.sh).
 *   - Output: the task's single-answer fields (text, tokens, finish_reason) stay choice
 *     0's; v4_run_output.choices lists all n (index order); usage counts the prompt
 *     once and completion tokens summed over the choices (v4_run_output_completion).
 *     Timings and experts figures add up every choice's work.  A choice that fails
 *     fails the task (its error).
 *
 * Driver (v4_choices_run for the serial path, exec_cont.c per slot):
 *   ch = v4_choices_new(r, t, e)
 *   v4_runner_prepare(... choice 0 into out ...); step it, calling
 *       v4_choices_capture(ch, j, logits) once the prompt's last row is forwarded
 *   rc = v4_choices_accept(ch, v4_runner_finish(... out ...), out, out, e)
 *   while (!rc && (k = v4_choices_next(ch, ..., j, &sub, e)) == 1)
 *       step j to the end; rc = v4_choices_accept(ch, v4_runner_finish(...), &sub, out, e)
 *   rc = v4_choices_end(ch, k < 0 ? -1 : rc, out)
 *
 * Ownership: v4_choices borrows r and t (they outlive it) and owns its snapshot and the
 * answers until v4_choices_end moves them into out (v4_run_output_free frees them).
 * Thread: the runner's thread.
 */
#ifndef V4_CHOICES_H
#define V4_CHOICES_H

#include <stdint.h>

#include "task_run_internal.h"

/* The serial driver: a task with any n (n <= 1: v4_runner_run) run whole on r, as
 * v4_runner_run returns.  v4_task_execute calls it for generation tasks. */
int v4_choices_run(v4_runner *r, const v4_task *t, double deadline_ms, int (*abort_fn)(void *), void *abort_ud,
                   v4_run_output *out, v4_task_error *e);

typedef struct v4_choices v4_choices;

/* NULL with e filled (internal: out of memory). */
v4_choices *v4_choices_new(v4_runner *r, const v4_task *t, v4_task_error *e);
/* j (choice 0, or a choice that prefilled again) has just forwarded its prompt's last
 * position (its sequence is at the prompt's end) and logits are that position's: keep
 * the snapshot the later choices fork from.  A no-op once captured, or when the context
 * cannot fork (those choices then prefill again). */
void v4_choices_capture(v4_choices *c, const v4_run_job *j, const float *logits);
/* Whether j, about to accept a row whose logits are given, is at the prompt's last
 * position with no snapshot taken yet (the continuous executor asks before accepting). */
int v4_choices_wants(const v4_choices *c, const v4_run_job *j);
/* The choice running now (0 first; the one v4_choices_accept will take). */
int v4_choices_current(const v4_choices *c);
/* Prepare the next choice into j (its output into sub, zeroed): 1 (j ready; it may
 * already be done: v4_gen_done), 0 when every choice has run, -1 (e filled). */
int v4_choices_next(v4_choices *c, double deadline_ms, int (*abort_fn)(void *), void *abort_ud, v4_run_job *j,
                    v4_run_output *sub, v4_task_error *e);
/* The outcome of the choice that just finished: rc as v4_runner_finish returned, o its
 * output (choice 0: the task's out itself, kept; later ones: taken, figures added to
 * out).  Returns rc, or -1 (e: internal) when out of memory. */
int v4_choices_accept(v4_choices *c, int rc, v4_run_output *o, v4_run_output *out, v4_task_error *e);
/* The task's status: rc (0 when every choice ran: the answers go into out); frees c. */
int v4_choices_end(v4_choices *c, int rc, v4_run_output *out);

#endif
