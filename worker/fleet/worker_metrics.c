/* worker_metrics.c - registration and updates of the worker's metrics (see
 * worker_metrics.h).  Bucket bounds: latency in seconds, from 1 ms (tiny models on a
 * CPU) to tens of minutes (long generations / long queues).  Thread: any. */
#include "worker_metrics.h"

#include <stdio.h>
#include <string.h>

#include "worker/prefix/prefix_cache.h"
#include "worker/serve/task_error.h"

static const double TTFT_B[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1,
                                2.5,   5,     7.5,  10,   20,   40,   80,   160, 320,  640};
static const double ITL_B[] = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15,
                               0.2,   0.3,    0.4,   0.5,  0.75, 1,    2.5,  5,    10};
static const double E2E_B[] = {0.01, 0.05, 0.1, 0.3, 0.5, 1, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920};
static const double QUEUE_B[] = {0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200};

#define N(a) ((int)(sizeof(a) / sizeof(a)[0]))

int v4_wmetrics_init(v4_wmetrics *m, const char *model, const char *worker)
{
    memset(m, 0, sizeof *m);
    if (!(m->reg = v4m_new()))
        return -1;
    v4m_registry *r = m->reg;
    static const char *const code_l[] = {"code", NULL};
    static const char *const tier_l[] = {"tier", NULL};
    static const char *const state_l[] = {"state", NULL};
    static const char *const info_l[] = {"model", "worker", NULL};
    m->ttft = v4m_family_new(r, V4M_HISTOGRAM, "v4fleet:time_to_first_token_seconds",
                             "Time from taking a task to its first generated token (parse + prompt + prefill).",
                             NULL, TTFT_B, N(TTFT_B));
    m->itl = v4m_family_new(r, V4M_HISTOGRAM, "v4fleet:inter_token_latency_seconds",
                            "Mean time between generated tokens of a task (decode time / (tokens - 1)).", NULL, ITL_B,
                            N(ITL_B));
    m->e2e = v4m_family_new(r, V4M_HISTOGRAM, "v4fleet:e2e_request_latency_seconds",
                            "Time from taking a task to its result.", NULL, E2E_B, N(E2E_B));
    m->queue_wait = v4m_family_new(r, V4M_HISTOGRAM, "v4fleet:queue_wait_seconds",
                                   "Time a task waited in the queue (AMQP timestamp to taken; 1 s resolution).", NULL,
                                   QUEUE_B, N(QUEUE_B));
    m->success = v4m_family_new(r, V4M_COUNTER, "v4fleet:request_success_total", "Tasks that succeeded.", NULL, NULL, 0);
    m->failure = v4m_family_new(r, V4M_COUNTER, "v4fleet:request_failure_total",
                                "Tasks that failed (a result with an error), by error code.", code_l, NULL, 0);
    m->invalid = v4m_family_new(r, V4M_COUNTER, "v4fleet:invalid_packets_total",
                                "Task packets rejected to the invalid queue.", NULL, NULL, 0);
    m->requeued = v4m_family_new(r, V4M_COUNTER, "v4fleet:requests_requeued_total",
                                 "Tasks requeued without a result (shutdown grace period over).", NULL, NULL, 0);
    m->unconfirmed = v4m_family_new(r, V4M_COUNTER, "v4fleet:results_unconfirmed_total",
                                    "Results the broker did not confirm: the task is redelivered and counted then.",
                                    NULL, NULL, 0);
    m->unroutable = v4m_family_new(r, V4M_COUNTER, "v4fleet:results_unroutable_total",
                                   "Results (and error answers) the broker returned as unroutable (reply_to queue "
                                   "gone), republished to the unroutable queue; the task was acked, not run again.",
                                   NULL, NULL, 0);
    m->abandoned = v4m_family_new(r, V4M_COUNTER, "v4fleet:tasks_abandoned_total",
                                  "Tasks stopped without a result because the broker connection that delivered "
                                  "them was lost (the broker requeued them).",
                                  NULL, NULL, 0);
    static const char *const outcome_l[] = {"outcome", NULL};
    m->activations = v4m_family_new(r, V4M_COUNTER, "v4fleet:expert_activations_total",
                                    "Routed-expert activations of the counted tasks by outcome (the results' "
                                    "experts figures: hit, miss = loaded on demand, prefetched = loaded ahead).",
                                    outcome_l, NULL, 0);
    m->prompt_tokens = v4m_family_new(r, V4M_COUNTER, "v4fleet:prompt_tokens_total", "Prompt tokens processed.", NULL,
                                      NULL, 0);
    m->gen_tokens = v4m_family_new(r, V4M_COUNTER, "v4fleet:generation_tokens_total", "Tokens generated.", NULL, NULL,
                                   0);
    m->running = v4m_family_new(r, V4M_GAUGE, "v4fleet:num_requests_running", "Tasks running now.", NULL, NULL, 0);
    m->xhits = v4m_family_new(r, V4M_COUNTER, "v4fleet:expert_cache_hits_total",
                              "Expert acquisitions served from the cache.", tier_l, NULL, 0);
    m->xmisses = v4m_family_new(r, V4M_COUNTER, "v4fleet:expert_cache_misses_total",
                                "Expert acquisitions that had to load the expert.", tier_l, NULL, 0);
    m->xbytes = v4m_family_new(r, V4M_COUNTER, "v4fleet:expert_cache_bytes_read_total",
                               "Bytes loaded into the expert cache (host: read from the checkpoint; gpu: uploaded "
                               "to the device).", tier_l, NULL, 0);
    m->xin_use = v4m_family_new(r, V4M_GAUGE, "v4fleet:expert_cache_bytes_in_use", "Expert cache bytes holding experts.",
                                tier_l, NULL, 0);
    m->xbudget = v4m_family_new(r, V4M_GAUGE, "v4fleet:expert_cache_budget_bytes", "Expert cache budget.", tier_l,
                                NULL, 0);
    m->reconnects = v4m_family_new(r, V4M_COUNTER, "v4fleet:broker_reconnects_total",
                                   "Broker connections made after the first.", NULL, NULL, 0);
    m->connected = v4m_family_new(r, V4M_GAUGE, "v4fleet:broker_connected", "1 while connected to the broker.", NULL,
                                  NULL, 0);
    m->redis_records = v4m_family_new(r, V4M_GAUGE, "v4fleet:redis_counter_records",
                                      "Expert-utilization records for Redis by state (sent, duplicate and dropped "
                                      "since start; pending now).",
                                      state_l, NULL, 0);
    m->ready = v4m_family_new(r, V4M_GAUGE, "v4fleet:ready", "1 when /readyz answers 200.", NULL, NULL, 0);
    static const char *const result_l[] = {"result", NULL};
    m->warmup_s = v4m_family_new(r, V4M_GAUGE, "v4fleet:warmup_seconds",
                                 "Duration of the last warm-up (pre-loading experts + one generation).", NULL, NULL, 0);
    m->warmup_x = v4m_family_new(r, V4M_GAUGE, "v4fleet:warmup_experts_loaded",
                                 "Experts the last warm-up pre-loaded into the host cache.", NULL, NULL, 0);
    m->reloads = v4m_family_new(r, V4M_COUNTER, "v4fleet:model_reloads_total",
                                "Model reloads (SIGHUP or a new model directory) by result.", result_l, NULL, 0);
    m->info = v4m_family_new(r, V4M_GAUGE, "v4fleet:info", "The served model and this worker's id.", info_l, NULL, 0);
    static const char *const mode_l[] = {"mode", NULL};
    m->numerics = v4m_family_new(r, V4M_GAUGE, "v4fleet:numerics",
                                 "The engine's numerics mode (1: the mode it runs; docs/numerics.md).", mode_l, NULL, 0);
    static const char *const fast_l[] = {"result", "product", "status", "code", NULL};
    m->fast_selftest = v4m_family_new(r, V4M_GAUGE, "v4fleet:fast_selftest",
                                      "The fast numerics mode's start-up self-test on a GPU (1: the engine serving "
                                      "now): passed, or failed / unavailable with the product that failed and the "
                                      "cuBLAS or CUDA status name and number; exact products run after a failure.",
                                      fast_l, NULL, 0);
    m->ghits = v4m_family_new(r, V4M_COUNTER, "v4fleet:grammar_cache_hits_total",
                              "Output constraints found compiled in the cache (docs/structured-outputs.md).", NULL,
                              NULL, 0);
    m->gmisses = v4m_family_new(r, V4M_COUNTER, "v4fleet:grammar_cache_misses_total",
                                "Output constraints compiled (not in the cache; failed compiles included).", NULL,
                                NULL, 0);
    m->gbytes = v4m_family_new(r, V4M_GAUGE, "v4fleet:grammar_cache_bytes",
                               "Bytes held by the compiled constraints in the cache (their mask caches included).",
                               NULL, NULL, 0);
    m->gentries = v4m_family_new(r, V4M_GAUGE, "v4fleet:grammar_cache_entries", "Compiled constraints in the cache.",
                                 NULL, NULL, 0);
    static const char *const mem_l[] = {"device", "part", NULL};
    m->memory = v4m_family_new(r, V4M_GAUGE, "v4fleet:memory_bytes",
                               "The served model's memory split: host trunk, experts (cache budget or mapped) and "
                               "sequences (upper bound); GPU bytes held, trunk, expert slots, the sequences' budget "
                               "and what they hold now.",
                               mem_l, NULL, 0);
    static const char *const kind_l[] = {"kind", NULL};
    m->mem_waits = v4m_family_new(r, V4M_COUNTER, "v4fleet:memory_waits_total",
                                  "Continuous batching waiting for device memory, by kind: admission (steps a task's "
                                  "start waited), retry (first steps refused and retried), stall (steps a running "
                                  "task sat out while its sequence could not grow).  Tasks wait, they do not fail.",
                                  kind_l, NULL, 0);
    static const char *const stage_l[] = {"stage", NULL}, *const lane_l[] = {"lane", NULL};
    m->cancelled = v4m_family_new(r, V4M_COUNTER, "v4fleet:tasks_cancelled_total",
                                  "Tasks answered cancelled (a cancel message named them), by stage: running "
                                  "(stopped at its next step, partial text kept) or queued (not run).",
                                  stage_l, NULL, 0);
    m->cancel_msgs = v4m_family_new(r, V4M_COUNTER, "v4fleet:cancel_messages_total",
                                    "Well-formed cancel messages received on the cancel exchange.", NULL, NULL, 0);
    m->taken = v4m_family_new(r, V4M_COUNTER, "v4fleet:tasks_taken_total",
                              "Valid tasks taken, by lane (urgent: from the urgent queue, taken first).", lane_l,
                              NULL, 0);
    static const char *const res_l[] = {"result", NULL};
    m->plookups = v4m_family_new(r, V4M_COUNTER, "v4fleet:prefix_cache_lookups_total",
                                 "Prompts looked up in the prefix cache: hit = resumed from at least one cached block "
                                 "(docs/prefix-cache.md).", res_l, NULL, 0);
    m->psaved = v4m_family_new(r, V4M_COUNTER, "v4fleet:prefix_cache_tokens_saved_total",
                               "Prompt positions restored from the prefix cache instead of prefilled.", NULL, NULL, 0);
    m->pevict = v4m_family_new(r, V4M_COUNTER, "v4fleet:prefix_cache_evictions_total",
                               "Prefix cache blocks evicted to stay within the budget.", NULL, NULL, 0);
    m->pbytes = v4m_family_new(r, V4M_GAUGE, "v4fleet:prefix_cache_bytes", "Bytes the prefix cache holds.", NULL,
                               NULL, 0);
    m->pbudget = v4m_family_new(r, V4M_GAUGE, "v4fleet:prefix_cache_budget_bytes",
                                "The prefix cache's budget (V4_PREFIX_CACHE_BYTES).", NULL, NULL, 0);
    m->pblocks = v4m_family_new(r, V4M_GAUGE, "v4fleet:prefix_cache_blocks", "Prompt blocks the prefix cache holds.",
                                NULL, NULL, 0);
    if (!m->plookups || !m->psaved || !m->pevict || !m->pbytes || !m->pbudget || !m->pblocks) {
        v4_wmetrics_free(m);
        return -1;
    }
    if (!m->ttft || !m->itl || !m->e2e || !m->queue_wait || !m->success || !m->failure || !m->invalid ||
        !m->requeued || !m->unconfirmed || !m->unroutable || !m->abandoned || !m->activations || !m->prompt_tokens || !m->gen_tokens || !m->running || !m->xhits || !m->xmisses ||
        !m->xbytes || !m->xin_use || !m->xbudget || !m->reconnects || !m->connected || !m->redis_records ||
        !m->ready || !m->info || !m->warmup_s || !m->warmup_x || !m->reloads || !m->numerics ||
        !m->memory || !m->mem_waits || !m->fast_selftest || !m->ghits || !m->gmisses || !m->gbytes || !m->gentries ||
        !m->cancelled || !m->cancel_msgs || !m->taken) {
        v4_wmetrics_free(m);
        return -1;
    }
    /* Zero-valued series up front, so rates and alerts have a baseline. */
    v4m_fadd(m->success, 0);
    for (int c = V4_TASK_INVALID_JSON; c <= V4_TASK_ERRCODE_LAST; c++) {
        const char *v[] = {v4_task_errcode_name((v4_task_errcode)c)};
        v4m_add(v4m_series_of(m->failure, v), 0);
    }
    v4m_fadd(m->invalid, 0);
    v4m_fadd(m->requeued, 0);
    v4m_fadd(m->unconfirmed, 0);
    v4m_fadd(m->unroutable, 0);
    v4m_fadd(m->abandoned, 0);
    v4m_fadd(m->cancel_msgs, 0);
    for (int i = 0; i < 2; i++) {
        const char *st[] = {i ? "queued" : "running"}, *ln[] = {i ? "urgent" : "normal"};
        v4m_add(v4m_series_of(m->cancelled, st), 0);
        v4m_add(v4m_series_of(m->taken, ln), 0);
    }
    const char *const outcomes[3] = {"hit", "miss", "prefetched"};
    for (int i = 0; i < 3; i++)
        v4m_add(v4m_series_of(m->activations, &outcomes[i]), 0);
    v4m_fadd(m->prompt_tokens, 0);
    v4m_fadd(m->gen_tokens, 0);
    v4m_fset(m->running, 0);
    v4m_fadd(m->reconnects, 0);
    v4m_fset(m->connected, 0);
    v4m_fset(m->ready, 0);
    const char *ok[] = {"ok"}, *failed[] = {"failed"};
    v4m_add(v4m_series_of(m->reloads, ok), 0);
    v4_wmetrics_memory_waits(m, 0, 0, 0);
    v4m_add(v4m_series_of(m->reloads, failed), 0);
    const char *iv[] = {model, worker};
    v4m_set(v4m_series_of(m->info, iv), 1);
    return 0;
}

void v4_wmetrics_numerics(v4_wmetrics *m, const char *mode)
{
    static const char *const modes[] = {"exact", "fast"};
    for (int k = 0; k < 2; k++) {
        const char *v[] = {modes[k]};
        v4m_set(v4m_series_of(m->numerics, v), mode && !strcmp(mode, modes[k]) ? 1 : 0);
    }
}

void v4_wmetrics_fast_selftest(v4_wmetrics *m, const v4_fast_selftest *v)
{
    if (m->fast_last)
        v4m_set(m->fast_last, 0);
    m->fast_last = NULL;
    if (v->state == V4_FAST_NOT_RUN)
        return;
    const int passed = v->state == V4_FAST_PASSED;
    char code[16];
    snprintf(code, sizeof code, "%d", passed ? 0 : v->code);
    const char *vals[] = {v4_fast_state_name(v->state), passed ? "all" : v->product[0] ? v->product : "unknown",
                          passed ? "ok" : v->status[0] ? v->status : "unknown", code};
    v4m_series *s = v4m_series_of(m->fast_selftest, vals);
    v4m_set(s, 1);
    m->fast_last = s;
}

void v4_wmetrics_memory(v4_wmetrics *m, const v4_runner *r)
{
    v4_runner_memory mm;
    v4_runner_memory_get(r, &mm);
    const struct { const char *device, *part; unsigned long long v; int on; } s[] = {
        {"host", "trunk", mm.host_trunk, 1},        {"host", "experts", mm.host_experts, 1},
        {"host", "sequences", mm.host_sequences, 1}, {"gpu", "held", mm.g.held, mm.gpu},
        {"gpu", "trunk", mm.g.trunk, mm.gpu},        {"gpu", "experts", mm.g.experts, mm.gpu},
        {"gpu", "sequences", mm.g.seq_budget, mm.gpu}, {"gpu", "sequences_held", mm.g.seq_held, mm.gpu}};
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
        if (s[i].on) {
            const char *v[] = {s[i].device, s[i].part};
            v4m_set(v4m_series_of(m->memory, v), (double)s[i].v);
        }
}

void v4_wmetrics_memory_waits(v4_wmetrics *m, long admission, long retry, long stall)
{
    const char *const kinds[3] = {"admission", "retry", "stall"};
    const long d[3] = {admission, retry, stall};
    for (int i = 0; i < 3; i++)
        v4m_add(v4m_series_of(m->mem_waits, &kinds[i]), d[i] > 0 ? (double)d[i] : 0);
}

void v4_wmetrics_free(v4_wmetrics *m)
{
    v4m_free(m->reg);
    memset(m, 0, sizeof *m);
}

void v4_wmetrics_task(v4_wmetrics *m, const v4_wtask_figs *f)
{
    if (f->error_code) {
        const char *v[] = {f->error_code};
        v4m_add(v4m_series_of(m->failure, v), 1);
    } else {
        v4m_fadd(m->success, 1);
    }
    if (f->queue_s >= 0)
        v4m_fobserve(m->queue_wait, f->queue_s);
    if (f->ttft_s >= 0)
        v4m_fobserve(m->ttft, f->ttft_s);
    if (f->itl_s >= 0)
        v4m_fobserve(m->itl, f->itl_s);
    if (f->e2e_s >= 0)
        v4m_fobserve(m->e2e, f->e2e_s);
    v4m_fadd(m->prompt_tokens, (double)f->prompt_tokens);
    v4m_fadd(m->gen_tokens, (double)f->gen_tokens);
    const char *hit[] = {"hit"}, *miss[] = {"miss"}, *pre[] = {"prefetched"};
    v4m_add(v4m_series_of(m->activations, hit), (double)f->expert_hits);
    v4m_add(v4m_series_of(m->activations, miss), (double)f->expert_misses);
    v4m_add(v4m_series_of(m->activations, pre), (double)f->expert_prefetched);
}

void v4_wmetrics_cache(v4_wmetrics *m, const char *tier, const v4_runner_cache_figs *f)
{
    const char *t[] = {tier};
    v4m_set(v4m_series_of(m->xhits, t), (double)f->hits);
    v4m_set(v4m_series_of(m->xmisses, t), (double)f->misses);
    v4m_set(v4m_series_of(m->xbytes, t), (double)f->bytes_read);
    v4m_set(v4m_series_of(m->xin_use, t), (double)f->in_use_bytes);
    v4m_set(v4m_series_of(m->xbudget, t), (double)f->budget_bytes);
}

void v4_wmetrics_runner_caches(v4_wmetrics *m, const v4_runner *r)
{
    v4_runner_cache_figs f;
    if (v4_runner_cache_figs_get(r, &f) == 0)
        v4_wmetrics_cache(m, "host", &f);
    if (v4_runner_gpu_cache_figs_get(r, &f) == 0)
        v4_wmetrics_cache(m, "gpu", &f);
    v4g_cache_figs g;
    v4_runner_grammar_figs(r, &g);
    v4m_fset(m->ghits, (double)g.hits);
    v4m_fset(m->gmisses, (double)g.misses);
    v4m_fset(m->gbytes, (double)g.bytes);
    v4m_fset(m->gentries, (double)g.entries);
    v4pc_figs p;
    if (v4_runner_prefix_figs(r, &p))
        return;
    const char *hit[] = {"hit"}, *miss[] = {"miss"};
    v4m_set(v4m_series_of(m->plookups, hit), (double)p.hits);
    v4m_set(v4m_series_of(m->plookups, miss), (double)p.misses);
    v4m_fset(m->psaved, (double)p.tokens_saved);
    v4m_fset(m->pevict, (double)p.evictions);
    v4m_fset(m->pbytes, (double)p.bytes);
    v4m_fset(m->pbudget, (double)p.budget);
    v4m_fset(m->pblocks, (double)p.blocks);
}

void v4_wmetrics_broker(v4_wmetrics *m, int connected, uint64_t connects)
{
    v4m_fset(m->connected, connected);
    v4m_fset(m->reconnects, connects > 1 ? (double)(connects - 1) : 0);
}

void v4_wmetrics_cancel_messages(v4_wmetrics *m, uint64_t received)
{
    v4m_fset(m->cancel_msgs, (double)received);
}

void v4_wmetrics_cancelled(v4_wmetrics *m, int running)
{
    const char *v[] = {running ? "running" : "queued"};
    v4m_add(v4m_series_of(m->cancelled, v), 1);
}

void v4_wmetrics_taken(v4_wmetrics *m, int urgent)
{
    const char *v[] = {urgent ? "urgent" : "normal"};
    v4m_add(v4m_series_of(m->taken, v), 1);
}

void v4_wmetrics_redis(v4_wmetrics *m, const v4_util_stats *s)
{
    static const char *const names[] = {"sent", "duplicate", "dropped", "pending"};
    const uint64_t vals[] = {s->sent, s->duplicates, s->dropped, s->pending};
    for (int i = 0; i < 4; i++) {
        const char *v[] = {names[i]};
        v4m_set(v4m_series_of(m->redis_records, v), (double)vals[i]);
    }
}

void v4_wmetrics_warmup(v4_wmetrics *m, double seconds, int experts_loaded)
{
    v4m_fset(m->warmup_s, seconds);
    v4m_fset(m->warmup_x, experts_loaded);
}

void v4_wmetrics_reload(v4_wmetrics *m, int ok)
{
    const char *v[] = {ok ? "ok" : "failed"};
    v4m_add(v4m_series_of(m->reloads, v), 1);
}
