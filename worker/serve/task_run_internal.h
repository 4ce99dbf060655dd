/* task_run_internal.h - the runner's insides, for the serving core's files that build
 * on it (task_run.c, exec_cont.c, summarize.c); not for other folders (they use the
 * accessors of task_run.h).
 *
 * Ownership: the runner owns every object below (task_run.h).  Thread: one thread
 * at a time per runner.
 */
#ifndef V4_TASK_RUN_INTERNAL_H
#define V4_TASK_RUN_INTERNAL_H

#include "cache/expert_provider.h"
#include "cache/model_files.h"
#include "chat.h"
#include "constrain.h"
#include "generate.h"
#include "kernels/v4/model.h"
#include "task_run.h"
#include "worker/tokenizer/tokenizer.h"

struct v4_runner {
    v4_model_files m;
    int m_open;
    v4_tokenizer *tok;
    v4_backend *be;
    v4_ctx *ctx;
    v4_xprov *xp;               /* paged experts; NULL = all resident */
    char name[128];             /* the served name (first of names) */
    char names[512];            /* "name[,alias...]" */
    long context;               /* prompt + max_tokens limit (v4_runner_context) */
    long default_max;           /* a missing max_tokens' bound (0: none; v4_runner_max_tokens) */
    long long generated;        /* tokens sampled by every generation (v4_runner_generated) */
    int max_batch;              /* sequences r->ctx may step at once */
    int threads;                /* CPU threads asked for (0: the default, cpu_budget.h) */
    int chunk;                  /* the prefill chunk: prompt positions of one task per step (step_rows.h) */
    int step_rows;              /* rows one step may carry: max_batch + a prefill chunk's spare
                                 * rows, fewer when paged experts must fit the host cache */
    char served_list[640];      /* "\"a\"" or "\"a\" (also \"b\", \"c\")" for error messages */
    /* Output constraints (docs/structured-outputs.md): compiled ones by their canonical
     * text, one cache per runner (its budget: v4_runner_opts.grammar_cache_bytes); the
     * tokenizer as the engine's vocabulary, made at the first constrained task. */
    v4g_cache *gcache;
    v4g_vocab *gvocab;
    int grammar_compact;        /* 1: JSON constraints without whitespace, for every task */
    int prefill_each;           /* 1: choices never fork (V4_N_PREFILL_EACH=1: the device path's way, for tests) */
    int max_n;                  /* most answers per task (n): v4_runner_opts.max_n, V4_MAX_N, else V4_TASK_MAX_N */
    int32_t eos;                /* the end token: the tokenizer's, else the model's */
    int32_t end_think;          /* </think>'s id (thinking mode: the answer starts after it); -1 none */
    struct v4pc *pc;            /* the prefix cache (worker/prefix/prefix_cache.h); NULL: off */
    char pc_off[160];           /* why it is off, when asked for ("" otherwise) */
};

/* One generation task between v4_runner_prepare and v4_runner_finish: what
 * v4_runner_run does around the generation loop, split so that the serial path (the
 * loop over one job) and the continuous-batching executor (many jobs, one v4_step for
 * all) produce the same v4_run_output.  The job must not move in memory while
 * prepared (the generation state points into it); t must outlive it. */
typedef struct v4_run_text {
    char *p;
    size_t n, cap;
    int oom;
} v4_run_text;

typedef struct v4_run_guard {
    double deadline_ms;
    int (*abort_fn)(void *);
    void *abort_ud;
    int why;                    /* 1 deadline, 2 abort */
} v4_run_guard;

typedef struct v4_run_job {
    v4_runner *r;
    v4_ids ids;
    v4_seq *seq;
    v4_gen_request req;
    v4_gen_state *gen;          /* step it: v4_gen_poll_cancel / input / accept */
    v4_run_text buf;
    v4_run_guard guard;
    v4_xcache_stats before;
    /* Paged experts under a batched executor: the cache serves the union of a step's
     * experts once, so each load is charged to the first row that needed it
     * (v4_runner_job_charge) instead of taken from before/after snapshots. */
    int shared_steps;
    long long charged_misses, charged_prefetched;
    /* The output constraint's state: the matcher of this job's sequence (the continuous
     * executor's per-row state lives here, in its slot's job); NULL: free text. */
    v4_constrain *cons;
    const char *cfield;         /* the request field it came from (the task's) */
    int thinking;               /* the task's thinking: the text splits at </think> (finish) */
    int cached;                 /* prompt positions restored from the prefix cache */
} v4_run_job;

/* Validate t, build the prompt, create the sequence and the generation state.
 * 0 (j ready: step j->gen on r->ctx), or -1 (e filled, out as v4_runner_run leaves it
 * on such a failure; j holds nothing). */
int v4_runner_prepare(v4_runner *r, const v4_task *t, double deadline_ms, int (*abort_fn)(void *), void *abort_ud,
                      v4_run_job *j, v4_run_output *out, v4_task_error *e);
/* The seed of choice i of a task whose seed is seed (choice 0: seed itself; choices.h). */
uint64_t v4_choice_seed(uint64_t seed, int i);
/* v4_runner_prepare for choice i of a task with n > 1 (choices.h): its seed is
 * v4_choice_seed(t->seed, i); with from (a sequence at the prompt's end) and logits
 * (the prompt's last position's) its sequence is a fork of from and its first token is
 * sampled at once (v4_gen_begin_forked: j->gen may be done already), else it prefills
 * the prompt itself.  v4_runner_prepare is choice 0 without from. */
int v4_runner_prepare_choice(v4_runner *r, const v4_task *t, int i, const v4_seq *from, const float *logits,
                             double deadline_ms, int (*abort_fn)(void *), void *abort_ud, v4_run_job *j,
                             v4_run_output *out, v4_task_error *e);
/* Step a prepared job alone to its end (v4_gen_step_alone on r->ctx), then
 * v4_runner_finish it into out; as v4_runner_run returns.  at_prompt_end (may be NULL)
 * is called once, after the step that forwarded the prompt's last position, with that
 * position's logits (choices.h takes its snapshot there). */
int v4_runner_run_job(v4_runner *r, v4_run_job *j, void (*at_prompt_end)(void *, const v4_run_job *, const float *),
                      void *ud, v4_run_output *out, v4_task_error *e);
/* Batched paged runs: charge this job with one step's loads for one of its rows
 * (v4_runner_charge_row). */
void v4_runner_job_charge(v4_run_job *j, long long misses, long long prefetched);
/* One row of a step over r's expert provider: its activations whose block the step's
 * acquire loaded (outcomes from v4_xprov_outcomes) and not charged to an earlier row
 * of the step are counted as its misses / prefetched, and marked charged in outcomes
 * (outcomes or tr NULL: nothing is charged). */
void v4_runner_charge_row(v4_runner *r, unsigned char *outcomes, const v4_trace *tr, long long *misses,
                          long long *prefetched);
/* The prefix cache of r asked for by ex (task_prefix.c): opened into r->pc, or left off
 * with the reason in r->pc_off where the steps do not run from the sequences' own state
 * (the CUDA resident step).  0, or -1 with err (a bad setting, out of memory). */
int v4_runner_open_prefix(v4_runner *r, const v4_runner_opts *ex, v4_error *err);
/* generate.h on_block for a job (ud: its v4_run_job): the job's sequence reached the block
 * end p inside its prompt; the block is cached (a failure only costs a later hit). */
void v4_runner_cache_block(void *ud, v4_seq *seq, int p);
/* Collect the result (failed: the generation stopped with err: cancel, step or accept
 * failure) and release j.  Returns as v4_runner_run: 0, -1 (e filled), -2 aborted. */
int v4_runner_finish(v4_run_job *j, int failed, const v4_error *err, v4_run_output *out, v4_task_error *e);

#endif
