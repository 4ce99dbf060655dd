/* worker_metrics.h - the queue worker's Prometheus metrics (names modelled on vLLM's,
 * prefix "v4fleet:"), on top of the generic registry (metrics.h).
 *
 * Families (HELP/TYPE always rendered; a series appears once it has a value):
 *   v4fleet:time_to_first_token_seconds   histogram  task taken -> first token (parse +
 *                                                    prompt build + prefill), succeeded tasks
 *   v4fleet:inter_token_latency_seconds   histogram  decode time / (tokens - 1), one
 *                                                    observation per task with >= 2 tokens
 *   v4fleet:e2e_request_latency_seconds   histogram  task taken -> result built
 *   v4fleet:queue_wait_seconds            histogram  AMQP timestamp -> task taken (tasks
 *                                                    published with a timestamp; 1 s resolution)
 *   v4fleet:request_success_total         counter
 *   v4fleet:request_failure_total{code}   counter    task error codes (every code pre-created at 0)
 *   v4fleet:invalid_packets_total         counter    packets sent to the invalid queue
 *   v4fleet:requests_requeued_total       counter    tasks requeued without a result (shutdown)
 *   v4fleet:results_unconfirmed_total     counter    results the broker did not confirm (the task is
 *                                                    redelivered; not counted as success or failure)
 *   v4fleet:results_unroutable_total      counter    results / error answers the broker returned (their
 *                                                    reply_to queue gone), republished to the unroutable
 *                                                    queue (V4_UNROUTABLE_QUEUE); the task was acked
 *   v4fleet:tasks_abandoned_total         counter    tasks stopped without a result because the
 *                                                    connection that delivered them was lost
 *   v4fleet:tasks_cancelled_total{stage="running|queued"}  counter  tasks answered cancelled
 *                                                    (docs/queue-worker.md "Cancellation")
 *   v4fleet:cancel_messages_total         counter    well-formed cancel messages received
 *   v4fleet:tasks_taken_total{lane="normal|urgent"}  counter  valid tasks taken per lane
 *   v4fleet:prompt_tokens_total, v4fleet:generation_tokens_total   counters
 *   v4fleet:expert_activations_total{outcome="hit|miss|prefetched"}  counter  the results'
 *                                         experts figures summed (task_run.h: every routed-expert
 *                                         activation of a counted task is one of the three)
 *   v4fleet:num_requests_running          gauge      0/1
 *   v4fleet:expert_cache_hits_total{tier="host|gpu"}, _misses_total, _bytes_read_total  counters
 *                                         (the cache's own: acquisitions, one per step, layer and
 *                                         distinct expert; host hits include prefetched blocks)
 *   v4fleet:expert_cache_bytes_in_use{tier="host|gpu"}, _budget_bytes   gauges
 *                                         (a tier's series only when experts are paged there:
 *                                         host = the NVMe-backed host cache, gpu = the device's
 *                                         expert slots, bytes_read = bytes uploaded)
 *   v4fleet:broker_reconnects_total       counter    broker connections after the first
 *   v4fleet:broker_connected              gauge
 *   v4fleet:redis_counter_records{state="sent|duplicate|dropped|pending"}  gauge
 *   v4fleet:ready                         gauge      what /readyz answers (1/0)
 *   v4fleet:warmup_seconds                gauge      the last warm-up (start or reload)
 *   v4fleet:warmup_experts_loaded         gauge      experts it pre-loaded
 *   v4fleet:model_reloads_total{result="ok|failed"}  counter
 *   v4fleet:info{model,worker}            gauge      always 1
 *   v4fleet:numerics{mode="exact|fast"}   gauge      1 for the mode the engine runs, 0 for the other
 *   v4fleet:fast_selftest{result="passed|failed|unavailable",product,status,code}  gauge
 *                                         the fast mode's start-up self-test on a GPU
 *                                         (kernels/cuda/cuda_lt_policy.h): 1 for the engine
 *                                         serving now, 0 for a replaced one; failed says which
 *                                         product ("fp8 block-scaled", "fp4 w4a8", "bf16",
 *                                         "setup") with the cuBLAS / CUDA status name and
 *                                         number; passed: product "all", status "ok"; no series
 *                                         when no self-test ran (CPU, exact)
 *   v4fleet:memory_bytes{device="host",part="trunk|experts|sequences"}  gauge
 *                                         the served model's memory split (task_run.h
 *                                         v4_runner_memory: trunk, expert cache budget or
 *                                         mapped experts, sequences' upper bound)
 *   v4fleet:memory_bytes{device="gpu",part="held|trunk|experts|sequences|sequences_held"}
 *                                         gauge  (CUDA engines only; engine.h v4_gpu_memory)
 *   v4fleet:memory_waits_total{kind="admission|retry|stall"}  counter
 *                                         continuous batching waiting for memory (executor.h
 *                                         v4_exec_figs: admit_waits, oom_retries, mem_stalls)
 *   v4fleet:prefix_cache_lookups_total{result="hit|miss"}  counter  prompts looked up in the
 *                                         prefix cache (docs/prefix-cache.md): hit = resumed
 *                                         from >= 1 cached block
 *   v4fleet:prefix_cache_tokens_saved_total  counter  prompt positions restored, not prefilled
 *   v4fleet:prefix_cache_evictions_total  counter    blocks evicted for the budget
 *   v4fleet:prefix_cache_bytes, _budget_bytes, _blocks  gauges  what it holds now, its budget
 *                                         (no prefix_cache series while the cache is off)
 *
 * Ownership: v4_wmetrics owns the registry.  Thread: every function but init/free from
 * any thread (the registry is locked).
 */
#ifndef V4_WORKER_METRICS_H
#define V4_WORKER_METRICS_H

#include <stdint.h>

#include "metrics.h"
#include "telemetry/util_redis.h"
#include "worker/serve/task_run.h"

typedef struct v4_wmetrics {
    v4m_registry *reg;
    v4m_family *ttft, *itl, *e2e, *queue_wait, *success, *failure, *invalid, *requeued, *unconfirmed, *unroutable, *abandoned,
        *activations, *prompt_tokens,
        *gen_tokens, *running, *xhits, *xmisses, *xbytes, *xin_use, *xbudget, *reconnects, *connected,
        *redis_records, *ready, *info, *warmup_s, *warmup_x, *reloads, *numerics, *memory, *mem_waits,
        *fast_selftest, *ghits, *gmisses, *gbytes, *gentries, *cancelled, *cancel_msgs, *taken, *plookups, *psaved,
        *pbytes, *pbudget, *pblocks, *pevict;
    v4m_series *fast_last;      /* the fast_selftest series set to 1 last (NULL: none) */
} v4_wmetrics;

/* One finished task (a result was built).  Seconds; < 0 = not observed. */
typedef struct v4_wtask_figs {
    const char *error_code;     /* NULL: succeeded */
    double queue_s, ttft_s, itl_s, e2e_s;
    long prompt_tokens, gen_tokens;
    long long expert_hits, expert_misses, expert_prefetched;
} v4_wtask_figs;

int v4_wmetrics_init(v4_wmetrics *m, const char *model, const char *worker);
void v4_wmetrics_free(v4_wmetrics *m);
/* The numerics mode the (new) engine runs: "exact" or "fast". */
void v4_wmetrics_numerics(v4_wmetrics *m, const char *mode);
/* The (new) engine's fast-mode self-test verdict (v4_runner_fast_selftest): its series
 * {result,product,status,code} set to 1 and the previous engine's to 0; V4_FAST_NOT_RUN
 * adds no series.  Thread: one caller at a time (the worker's main thread: start and
 * reload), beside any number of renderers. */
void v4_wmetrics_fast_selftest(v4_wmetrics *m, const v4_fast_selftest *v);
/* The (new) runner's memory split (v4fleet:memory_bytes). */
void v4_wmetrics_memory(v4_wmetrics *m, const v4_runner *r);
/* Memory waits since the last call (v4fleet:memory_waits_total; negative deltas, as
 * from a new executor, count 0): steps a task's admission waited, first steps
 * retried, steps a running task sat out. */
void v4_wmetrics_memory_waits(v4_wmetrics *m, long admission, long retry, long stall);
void v4_wmetrics_task(v4_wmetrics *m, const v4_wtask_figs *f);
/* One expert cache's figures as the series {tier="host"|"gpu"}. */
void v4_wmetrics_cache(v4_wmetrics *m, const char *tier, const v4_runner_cache_figs *f);
/* The runner's host and GPU expert caches (those it has) and its compile cache of output
 * constraints (v4fleet:grammar_cache_*); call on the runner's thread. */
void v4_wmetrics_runner_caches(v4_wmetrics *m, const v4_runner *r);
void v4_wmetrics_broker(v4_wmetrics *m, int connected, uint64_t connects);
void v4_wmetrics_redis(v4_wmetrics *m, const v4_util_stats *s);
/* Cancel messages received so far (v4q_cancels_received). */
void v4_wmetrics_cancel_messages(v4_wmetrics *m, uint64_t received);
/* One task answered cancelled: running 1 (stopped in the run) or 0 (before it started). */
void v4_wmetrics_cancelled(v4_wmetrics *m, int running);
/* One valid task taken from the urgent (1) or the normal (0) lane. */
void v4_wmetrics_taken(v4_wmetrics *m, int urgent);
void v4_wmetrics_warmup(v4_wmetrics *m, double seconds, int experts_loaded);
/* One reload attempt: ok 1 (swapped) or 0 (the old model kept serving). */
void v4_wmetrics_reload(v4_wmetrics *m, int ok);

#endif
