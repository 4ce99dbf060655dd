/* task_run.h - run one validated task on the engine and fill its result.
 *
 * Design: v4_runner holds what is loaded once per worker (model files, tokenizer,
 * backend, forward context); v4_runner_run() builds the prompt (messages -> the
 * DeepSeek-V4 chat prompt, prompt -> one user message, input_ids as given), checks
 * the model name, the context length and the deadline, creates a fresh sequence,
 * runs the generation state machine (generate.h) one position per forward step and
 * collects the text; a task's output constraint (task_fields.h) is compiled through the
 * runner's cache and decoded under (constrain.h; docs/structured-outputs.md), a constraint
 * that does not compile failing that task with invalid_field.  The same work split in two (v4_runner_prepare / finish in
 * task_run_internal.h) serves the continuous-batching executor, which steps many jobs
 * together, so both paths fill identical outputs.  Every failure becomes a task error code
 * (model_not_available, context_length_exceeded, deadline_exceeded, invalid_field,
 * internal), never a process exit.  The deadline is checked before the run and before
 * every forward step (the generation's cancel hook), so an overrunning task stops within
 * one step with deadline_exceeded; such a failure keeps the text generated before it in
 * v4_run_output.text (text_len; no token ids), the others leave the output empty.  The caller's abort callback (shutdown: the SIGTERM
 * grace period ran out; the queue worker's cancel messages) is polled at the same points;
 * an aborted run returns -2 and no result, its output keeping the text so far as after an
 * overrun (the caller requeues the task, or answers it itself: a cancelled task).
 *
 * Ownership: the runner owns the engine objects; v4_run_output owns its text,
 * tokens and logprobs (v4_run_output_free).  Thread: one thread at a time per runner.
 */
#ifndef V4_TASK_RUN_H
#define V4_TASK_RUN_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "result_packet.h"
#include "task_error.h"
#include "task_packet.h"
#include "worker/grammar/grammar.h"

typedef struct v4_runner v4_runner;

typedef struct v4_run_output {
    char *text;
    size_t text_len;
    int32_t *tokens;
    int n_tokens;
    int prompt_tokens;
    const char *finish_reason;
    double prefill_ms, decode_ms;
    /* Expert routing of the run, also filled when the task failed after starting:
     * counts [expert_layers * expert_n] routed tokens per (layer, expert) (NULL when
     * nothing ran), positions forwarded, and the result's experts figures (docs/
     * experts.md "Figures"): every activation (position x layer x selected expert, the
     * sum of the counts) is exactly one of hits (its block was in the host cache, or
     * loaded already for an earlier row of the same step), misses (loaded for it on
     * demand) and prefetched (loaded for it ahead of need); bytes_loaded = (misses +
     * prefetched) x the expert block's bytes.  All experts resident: hits only. */
    uint32_t *expert_counts;
    int expert_layers, expert_n, expert_k;
    long forwarded;
    long long expert_hits, expert_misses, expert_prefetched, expert_bytes_loaded;
    /* Summarize tasks: chunks summarized and summary levels (0, 0 otherwise). */
    int chunks, levels;
    /* Thinking tasks: the reasoning (the text before the first </think>; all of it when
     * the answer never began), malloc'd; text is then the answer after </think> only
     * (DeepSeek's reasoning_content / content).  NULL for other tasks. */
    char *reasoning;
    size_t reasoning_len;
    /* logprobs: true: the OpenAI chat logprobs content array (token_logprobs.h), one
     * entry per generated token less a final end-of-sequence token; NULL otherwise. */
    json_t *logprobs;
    /* A task with n > 1 (choices.h): every answer, index order (choice 0 repeats text,
     * tokens, finish_reason above); owned (v4_run_output_free).  NULL / 0 for n = 1.
     * n_tokens stays choice 0's; v4_run_output_completion sums the choices. */
    v4_result_choice *choices;
    int n_choices;
    /* Prompt positions restored from the prefix cache instead of prefilled (OpenAI's
     * usage.prompt_tokens_details.cached_tokens); summaries: summed over generations. */
    int cached_tokens;
} v4_run_output;

/* Completion tokens of o: the sum over its choices, else n_tokens. */
int v4_run_output_completion(const v4_run_output *o);

/* Engine options of a runner.  Routed experts: all resident (host_cache_bytes 0, the
 * mapped checkpoint), or paged through a host cache of host_cache_bytes filled from
 * the expert pack pack_dir ("" or NULL: from the safetensors) - cache/expert_provider.h.
 * Compute: threads (0 = one per core) and isa (NULL = auto / V4_CPU_ISA) of the CPU
 * backend; device / cuda_mode / gpu_expert_mem as the worker settings V4_DEVICE,
 * V4_CUDA_MODE, V4_GPU_EXPERT_MEM (NULL or "": the environment variable, engine.h). */
typedef struct v4_runner_opts {
    const char *pack_dir;
    long long host_cache_bytes;
    const char *policy;             /* lru | slru | lfru | next (NULL: next) */
    int io_threads;                 /* 0: default */
    int threads;
    const char *isa;
    int max_batch;                  /* sequences one forward step may carry (0: 1) */
    long max_context;               /* prompt + max_tokens limit per task (0: the model's) */
    const char *device;             /* cpu | cuda | cuda:N */
    const char *cuda_mode;          /* auto | resident | hybrid */
    const char *gpu_expert_mem;     /* GPU expert budget: bytes or P% */
    const char *numerics;           /* exact | fast (NULL: V4_NUMERICS, else exact) */
    int prefill_chunk;              /* prompt positions per step (0: the backend's default, step_rows.h) */
    /* V4_GPU_CACHE_POLICY and V4_GPU_WEIGHT_MEM (NULL or "": the environment, engine.h) */
    const char *gpu_cache_policy;   /* GPU expert slots: lru | slru | lfru | next */
    const char *gpu_weight_mem;     /* hybrid weight copies: bytes or P% of the device */
    const char *gpu_seq_mem;        /* resident step's sequence caches: bytes or P% of the device */
    /* 1: the router look-ahead of paged experts off (V4_LOOKAHEAD=0, --no-lookahead), on
     * the ctx and on the resident CUDA step; 0: the V4_LOOKAHEAD environment variable,
     * else on (engine.h v4_lookahead_on) */
    int no_lookahead;
    /* Output constraints (docs/structured-outputs.md): the compile cache's budget in bytes
     * (V4_GRAMMAR_CACHE_BYTES; 0 = V4_GRAMMAR_CACHE_DEFAULT) and 1 = JSON without
     * whitespace between tokens for every task (V4_GRAMMAR_COMPACT). */
    long long grammar_cache_bytes;
    int grammar_compact;
    /* The most answers one task may ask for (its n, choices.h): 1..V4_TASK_MAX_N; 0: the
     * V4_MAX_N environment variable, else V4_TASK_MAX_N.  A task over it fails with
     * invalid_field naming n. */
    int max_n;
    /* max_tokens of a generation task that leaves it out (v4_runner_max_tokens): the rest
     * of the context, bounded by this many tokens: > 0 that bound, < 0 no bound (the
     * whole rest of the context); 0: the V4_DEFAULT_MAX_TOKENS environment variable
     * (0 there = no bound), else V4_DEFAULT_MAX_TOKENS_DEFAULT. */
    long default_max_tokens;
    /* The prefix cache (docs/prefix-cache.md): 1 = on (a task resumes from the longest
     * cached block prefix of its prompt, and caches its prompt's blocks as it prefills),
     * 0 = off; its budget in bytes (0: V4PC_BUDGET_DEFAULT), block length in positions (0:
     * V4PC_BLOCK_DEFAULT) and eviction policy ("slru" | "lru" | "fifo"; NULL: slru).  Off by itself
     * where the context's steps do not run from the sequence's own state (the CUDA
     * resident step: v4_ctx_seq_forkable 0; the start-up line says so). */
    int prefix_cache;
    long long prefix_cache_bytes;
    int prefix_block;
    const char *prefix_policy;
} v4_runner_opts;

/* The bound of a missing max_tokens: long enough for a summary or a long answer, short
 * enough that a generation which never samples the end token (random weights, a loop)
 * stops and frees its slot, and that a sequence on a 1M-token context reserves at most
 * this many positions past its prompt (docs/queue-worker.md "max_tokens"). */
#define V4_DEFAULT_MAX_TOKENS_DEFAULT 4096

#define V4_GRAMMAR_CACHE_DEFAULT (64ll << 20)

/* model_names: "name[,alias...]", what this worker serves (tasks naming another model
 * are refused with model_not_available, the message lists the names); results carry
 * the first name.  ex may be NULL (defaults: experts resident, all cores). */
v4_runner *v4_runner_open(const char *model_dir, const char *model_names, const v4_runner_opts *ex,
                          v4_task_error *e);
/* One line describing how experts are served (for the worker's start-up log); with
 * paged experts it says whether the router look-ahead is on (the ctx's setting). */
void v4_runner_describe_experts(const v4_runner *r, char *out, size_t n);
void v4_runner_free(v4_runner *r);
const char *v4_runner_model_name(const v4_runner *r);
/* The host expert cache's cumulative figures (thread-safe: the cache has its own lock;
 * call it from the runner's thread or while the runner is not being freed).  Returns 0
 * and fills the fields when experts are paged, -1 (fields 0) when all are resident. */
typedef struct v4_runner_cache_figs {
    unsigned long long hits, misses, bytes_read, in_use_bytes, budget_bytes;
} v4_runner_cache_figs;
int v4_runner_cache_figs_get(const v4_runner *r, v4_runner_cache_figs *f);
/* The same figures for the GPU expert cache (engine.h v4_gpu_cache_figs_get: bytes_read
 * = bytes uploaded to the device); -1 (fields 0) without paged GPU experts.  Thread: the
 * runner's thread only (the device counters are not locked). */
int v4_runner_gpu_cache_figs_get(const v4_runner *r, v4_runner_cache_figs *f);
/* The memory split of an open runner (issue 20: logged at start and in /metrics).
 * Host: trunk = the checkpoint's tensors other than the routed experts (mapped, paged
 * in as used); experts = the host cache's budget when paged, else every routed expert
 * (mapped); sequences = max_batch sequences of the whole context (v4_seq_bytes_for:
 * an upper bound, large allocations are committed by the OS as positions are written).
 * GPU (gpu = 1 on a CUDA backend with a device engine or expert pool): engine.h
 * v4_gpu_memory (held, trunk, paged expert slots, the sequences' budget and what they
 * hold now).  Thread: the runner's. */
typedef struct v4_runner_memory {
    unsigned long long host_trunk, host_experts, host_sequences;
    int gpu;
    v4_gpu_memory g;
} v4_runner_memory;
void v4_runner_memory_get(const v4_runner *r, v4_runner_memory *m);
/* One line of those figures (for the start-up log). */
void v4_runner_describe_memory(const v4_runner *r, char *out, size_t n);
/* The context a task may use (prompt + max_tokens): max_context, capped by the model's
 * max_position_embeddings. */
long v4_runner_context(const v4_runner *r);
/* The max_tokens of task t once its prompt has n_prompt tokens: t's own when the packet
 * had one (or t->max_tokens > 0: tasks built in code, summary passes), else the rest of
 * the context (v4_runner_context - n_prompt) bounded by the runner's default
 * (v4_runner_opts.default_max_tokens); <= 0 when the prompt leaves no room. */
long v4_runner_max_tokens(const v4_runner *r, const v4_task *t, long n_prompt);
/* The bound above (0: none, the rest of the context). */
long v4_runner_default_max_tokens(const v4_runner *r);
/* Tokens generated on this runner so far, by every generation (tasks that fail later,
 * each choice of n > 1, each pass of a summary); it grows one by one as they are
 * sampled, so a caller polled before each forward step (the executor's abort_fn: batch
 * progress) sees tasks advance.  Thread: the runner's. */
long long v4_runner_generated(const v4_runner *r);
/* The prefix cache's figures (thread-safe); -1 (f zeroed) when the runner has none. */
struct v4pc_figs;
int v4_runner_prefix_figs(const v4_runner *r, struct v4pc_figs *f);
/* One line on the prefix cache for the start-up log ("prefix cache off (...)" or its
 * budget, block and policy). */
void v4_runner_describe_prefix(const v4_runner *r, char *out, size_t n);
/* The served model's shape (layers, routed experts, experts per token, ...). */
const struct v4_config *v4_runner_config(const v4_runner *r);
/* The compile cache of output constraints: bytes, entries, hits, misses (thread-safe). */
void v4_runner_grammar_figs(const v4_runner *r, v4g_cache_figs *f);
/* The numerics mode its engine runs: "exact" or "fast" (config/numerics_setting.h). */
const char *v4_runner_numerics(const v4_runner *r);
/* Its engine's fast-mode self-test verdict (engine.h v4_backend_fast_selftest: which
 * product failed, with which cuBLAS / CUDA status), copied into *out. */
void v4_runner_fast_selftest(const v4_runner *r, v4_fast_selftest *out);
/* One line on the CPU threads (for the start-up log): "2 CPU threads (set)" or, by
 * default, the CPU budget they came from (kernels/cpu/cpu_budget.h); "" on a GPU. */
void v4_runner_describe_threads(const v4_runner *r, char *out, size_t n);
/* The runner's host expert cache (cache/expert_provider.h; the runner owns it), NULL
 * when every expert is resident.  Its users (warm-up) run on the runner's thread. */
struct v4_xprov *v4_runner_experts(v4_runner *r);
/* One answer: a task's n (> 1: several answers) is served by v4_task_execute
 * (task_exec.h, choices.h); here it is only checked against the worker's limit.
 * deadline_ms: absolute CLOCK_MONOTONIC milliseconds the task must finish by.
 * abort (may be NULL): non-zero = stop now without a result.
 * Returns 0 (out filled), -1 (e filled: the task failed), -2 (aborted). */
int v4_runner_run(v4_runner *r, const v4_task *t, double deadline_ms, int (*abort_fn)(void *), void *abort_ud,
                  v4_run_output *out, v4_task_error *e);
void v4_run_output_free(v4_run_output *o);
double v4_now_ms(void);

#endif
