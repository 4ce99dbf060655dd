/* cmd_worker.c - `v4fleet worker`: the stateless queue worker.
 *
 * Loop (main thread = inference thread): take a delivery from the AMQP thread
 * (queue/service.h) -> parse/validate the task packet -> invalid: publish one error
 * record to the invalid queue, wait for its confirm, ack -> valid: run it on the engine
 * (task_run.h) -> publish the result (to the AMQP reply_to queue with the delivery's
 * correlation_id when present, else to the results exchange; message_id = task id) ->
 * the AMQP thread acks the task only after the broker confirmed the result.
 * Settings come from environment variables and/or a config file (--config FILE or
 * V4_CONFIG_FILE; config/worker_config.h); only masked URLs are ever logged.
 *
 * Expert utilization: each run's per-(layer, expert) routing counts go to the Redis
 * counter thread (cache/util_redis.h) before the result is published; that never
 * waits for Redis, so Redis being slow or down never delays a task or its ack.
 *
 * Observability: one logger (log.h; JSON lines unless V4_LOG_FORMAT=text or stderr is a
 * terminal) for this thread and, through callbacks, the AMQP and Redis threads; a
 * metrics registry (worker_metrics.h) fed by this thread after every task; an HTTP
 * thread (http_server.h, V4_HTTP_PORT) that serves /healthz, /readyz and /metrics and
 * reads the shared state below through `health` (mutex): the phase (loading -> serving
 * -> draining) and the service/counter-thread pointers, cleared before they are freed.
 * An explicit V4_HTTP_PORT that cannot be bound is fatal; the default 9090 taken (several
 * workers on one host) is logged as an error and the worker runs without the endpoint.
 * Ready = model loaded, service started, broker connected, not draining.
 *
 * Signals: SIGTERM/SIGINT set a sig_atomic_t flag (the one piece of process-wide
 * mutable state, written only by the handler).  It is polled every 200 ms between
 * tasks and before every forward step of a running task: at the first sight the
 * consumer is cancelled (unstarted deliveries are requeued by the AMQP thread); the
 * running task may finish within V4_GRACE_MS, after that it is aborted and requeued
 * (nack) without a result; then the command returns 0.
 * Thread: main thread; the AMQP thread is owned by the service.
 */
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "../cache/util_redis.h"
#include "../config/model_config.h"
#include "../config/worker_config.h"
#include "../queue/service.h"
#include "commands.h"
#include "http_server.h"
#include "log.h"
#include "result_packet.h"
#include "task_exec.h"
#include "task_packet.h"
#include "task_run.h"
#include "worker_metrics.h"

#define PROG "worker"

static volatile sig_atomic_t g_stop_signal;

static void on_signal(int sig)
{
    g_stop_signal = sig;
}

enum { PHASE_LOADING, PHASE_SERVING, PHASE_DRAINING };

/* What the HTTP thread may read; everything under mu. */
typedef struct health {
    pthread_mutex_t mu;
    int phase;
    v4q_service *svc;           /* NULL until started and once being freed */
    v4_util *util;
} health;

typedef struct worker {
    v4_worker_config cfg;
    v4_log log;
    v4_wmetrics m;
    health h;
    v4q_service *svc;
    v4_runner *runner;
    v4_util *util;              /* Redis expert counters; NULL when V4_REDIS_URL=off */
    long done, failed, invalid, requeued;
    int stopping;               /* the consumer was cancelled after a signal */
    double stop_at_ms;          /* when the signal was first seen */
} worker;

static void set_phase(worker *w, int phase, v4q_service *svc, v4_util *util)
{
    pthread_mutex_lock(&w->h.mu);
    w->h.phase = phase;
    w->h.svc = svc;
    w->h.util = util;
    pthread_mutex_unlock(&w->h.mu);
}

/* HTTP thread: readiness, and the broker figures for the metrics (caller holds h.mu). */
static int ready_locked(worker *w, char *why, size_t n)
{
    uint64_t connects = 0;
    int connected = w->h.svc ? v4q_connected(w->h.svc, &connects) : 0;
    v4_wmetrics_broker(&w->m, connected, connects);
    const char *r = w->h.phase == PHASE_LOADING ? "loading the model"
                    : w->h.phase == PHASE_DRAINING ? "draining (stop signal): not taking tasks"
                    : !w->h.svc ? "starting"
                    : !connected ? "not connected to the broker"
                                 : NULL;
    if (why)
        snprintf(why, n, "%s", r ? r : "");
    v4m_fset(w->m.ready, !r);
    return !r;
}

static int http_ready(void *ud, char *why, size_t n)
{
    worker *w = ud;
    pthread_mutex_lock(&w->h.mu);
    int ok = ready_locked(w, why, n);
    pthread_mutex_unlock(&w->h.mu);
    return ok;
}

static char *http_metrics(void *ud, size_t *len)
{
    worker *w = ud;
    pthread_mutex_lock(&w->h.mu);
    ready_locked(w, NULL, 0);
    if (w->h.util) {
        v4_util_stats us;
        v4_util_get_stats(w->h.util, &us);
        v4_wmetrics_redis(&w->m, &us);
    }
    pthread_mutex_unlock(&w->h.mu);
    return v4m_render(w->m.reg, len);
}

static void wlog(worker *w, int level, const char *task, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* First sight of a signal: cancel the consumer at once, remember when. */
static void notice_signal(worker *w)
{
    if (!g_stop_signal || w->stopping)
        return;
    w->stopping = 1;
    w->stop_at_ms = v4_now_ms();
    set_phase(w, PHASE_DRAINING, w->svc, w->util);
    wlog(w, 1, NULL, "signal %d: stop consuming, requeue unstarted tasks (grace %ld ms for the running one)",
         (int)g_stop_signal, w->cfg.grace_ms);
    v4q_stop_consuming(w->svc);
}

/* The running task's abort check (inference thread, before every forward step). */
static int shutdown_abort(void *ud)
{
    worker *w = ud;
    notice_signal(w);
    return w->stopping && v4_now_ms() - w->stop_at_ms > (double)w->cfg.grace_ms;
}

static void wlog(worker *w, int level, const char *task, const char *fmt, ...)
{
    if (level > w->log.level)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    v4_log_emit(&w->log, level, NULL, task, NULL, line);
}

static uint32_t clamp_u32(long long v)
{
    return v < 0 ? 0 : v > 0xFFFFFFFFll ? 0xFFFFFFFFu : (uint32_t)v;
}

static double queue_ms_of(const v4q_delivery *d)
{
    if (!d->timestamp_s)
        return 0;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    double ms = (tv.tv_sec - d->timestamp_s) * 1e3 + tv.tv_usec / 1e3;
    return ms > 0 ? ms : 0;
}

static void publish(worker *w, const v4q_delivery *d, const v4q_message *m, const char *id, const char *what)
{
    v4_error err = {0};
    if (v4q_finish(w->svc, d, m, &err))
        wlog(w, 0, id, "task %s: %s not confirmed, task not acked (will be redelivered): %s: %s", id ? id : "?", what,
             err.where, err.msg);
}

static void handle_invalid(worker *w, const v4q_delivery *d, const v4_task *t, const v4_task_error *e)
{
    const char *id = t->id ? t->id : d->message_id;
    char *rec = v4_invalid_record_json(e, id, w->cfg.worker_id, d->body, d->len);
    wlog(w, 1, id, "task %s: invalid packet: %s: %s: %s", id ? id : "(no id)", v4_task_errcode_name(e->code), e->where,
         e->message);
    w->invalid++;
    v4m_fadd(w->m.invalid, 1);
    if (!rec) {
        wlog(w, 0, id, "out of memory building an error record; requeueing");
        v4q_requeue(w->svc, d);
        return;
    }
    v4q_message m = {.exchange = "", .routing_key = w->cfg.invalid_queue, .body = rec, .len = strlen(rec),
                     .message_id = id, .correlation_id = d->correlation_id};
    publish(w, d, &m, id, "error record");
    free(rec);
}

/* The task's figures into the metrics and its one "finished" log line. */
static void observe(worker *w, const v4_task *t, const v4_run_output *out, int rc, const v4_task_error *e,
                    double queue_ms, int has_ts, double t0, double t_run)
{
    double total_ms = v4_now_ms() - t0;
    v4_wtask_figs f = {.error_code = rc ? v4_task_errcode_name(e->code) : NULL,
                       .queue_s = has_ts ? queue_ms / 1e3 : -1,
                       .ttft_s = !rc && out->n_tokens >= 1 ? (t_run - t0 + out->prefill_ms) / 1e3 : -1,
                       .itl_s = !rc && out->n_tokens >= 2 ? out->decode_ms / (out->n_tokens - 1) / 1e3 : -1,
                       .e2e_s = total_ms / 1e3, .prompt_tokens = out->prompt_tokens, .gen_tokens = out->n_tokens};
    v4_wmetrics_task(&w->m, &f);
    v4_runner_cache_figs cf;
    if (v4_runner_cache_figs_get(w->runner, &cf) == 0)
        v4_wmetrics_cache(&w->m, &cf);
    if (w->log.level < 1)
        return;
    char msg[1024];
    snprintf(msg, sizeof msg, "task %s: %s%s, %d+%d tokens, %.1f ms", t->id, rc ? "failed " : "succeeded",
             rc ? v4_task_errcode_name(e->code) : "", out->prompt_tokens, out->n_tokens, total_ms);
    json_t *fields = json_pack("{s:s, s:i, s:i, s:f, s:f, s:f, s:f, s:I, s:I, s:I}", "status",
                               rc ? "failed" : "succeeded", "prompt_tokens", out->prompt_tokens, "completion_tokens",
                               out->n_tokens, "queue_ms", queue_ms, "prefill_ms", out->prefill_ms, "decode_ms",
                               out->decode_ms, "total_ms", total_ms, "expert_hits", (json_int_t)out->expert_hits,
                               "expert_misses", (json_int_t)out->expert_misses, "expert_bytes_loaded",
                               (json_int_t)out->expert_bytes_loaded);
    if (fields && rc)
        json_object_set_new(fields, "code", json_string(v4_task_errcode_name(e->code)));
    v4_log_emit(&w->log, 1, NULL, t->id, fields, msg);
}

static void handle(worker *w, const v4q_delivery *d)
{
    double t0 = v4_now_ms();
    v4_task t;
    v4_task_error e;
    if (v4_task_parse(d->body, d->len, (size_t)w->cfg.max_body_bytes, &t, &e)) {
        handle_invalid(w, d, &t, &e);
        v4_task_free(&t);
        return;
    }
    for (int i = 0; i < t.n_unknown; i++)
        wlog(w, 2, t.id, "task %s: unknown field '%s' ignored", t.id, t.unknown[i]);
    double deadline = t0 + (double)(t.deadline_ms ? t.deadline_ms : w->cfg.deadline_ms);
    v4_run_output out;
    memset(&e, 0, sizeof e);
    double queue_ms = queue_ms_of(d), t_run = v4_now_ms();
    v4m_fset(w->m.running, 1);
    int rc = v4_task_execute(w->runner, &t, deadline, shutdown_abort, w, &out, &e);
    v4m_fset(w->m.running, 0);
    if (rc == -2) {
        wlog(w, 1, t.id, "task %s: grace period over, requeued without a result", t.id);
        v4q_requeue(w->svc, d);
        w->requeued++;
        v4m_fadd(w->m.requeued, 1);
        v4_run_output_free(&out);
        v4_task_free(&t);
        return;
    }
    /* Utilization counters: queued for the Redis thread (never waits for Redis); the
     * done:{id} guard there keeps a redelivered task from being counted twice. */
    if (w->util && out.expert_counts && out.forwarded > 0) {
        v4_util_figs figs = {clamp_u32(out.expert_hits), clamp_u32(out.expert_misses),
                             clamp_u32(out.expert_bytes_loaded / 1024)};
        v4_util_record_ex(w->util, t.id, out.expert_counts, out.forwarded, &figs);
    }
    if (w->cfg.fault_exit_before_ack && w->util)
        v4_util_flush(w->util, 5000);   /* test hook: make the counters land before the crash */
    v4_result_info ri = {
        .id = t.id, .model = v4_runner_model_name(w->runner), .worker = w->cfg.worker_id, .metadata = t.metadata,
        .text = out.text, .text_len = out.text_len, .token_ids = out.tokens, .n_tokens = out.n_tokens,
        .finish_reason = out.finish_reason, .prompt_tokens = out.prompt_tokens, .queue_ms = queue_ms,
        .prefill_ms = out.prefill_ms, .decode_ms = out.decode_ms, .total_ms = v4_now_ms() - t0,
        .expert_hits = out.expert_hits, .expert_misses = out.expert_misses,
        .expert_bytes_loaded = out.expert_bytes_loaded, .chunks = out.chunks, .levels = out.levels,
        .error = rc ? &e : NULL};
    char *json = v4_result_json(&ri);
    if (!json) {
        wlog(w, 0, t.id, "task %s: out of memory building the result; requeueing", t.id);
        v4q_requeue(w->svc, d);
    } else {
        v4q_message m = {.exchange = d->reply_to ? "" : w->cfg.results_exchange,
                         .routing_key = d->reply_to ? d->reply_to : w->cfg.results_routing_key, .body = json,
                         .len = strlen(json), .message_id = t.id, .correlation_id = d->correlation_id,
                         .fault_exit_before_ack = w->cfg.fault_exit_before_ack};
        publish(w, d, &m, t.id, "result");
        observe(w, &t, &out, rc, &e, queue_ms, d->timestamp_s != 0, t0, t_run);
        rc ? w->failed++ : w->done++;
    }
    free(json);
    v4_run_output_free(&out);
    v4_task_free(&t);
}

static int usage(int rc)
{
    fprintf(rc ? stderr : stdout,
            "usage: v4fleet worker [--config FILE] [--log-format json|text|auto]\n"
            "  settings: environment variables V4_*, their V4_*_FILE forms (secrets), or FILE\n"
            "  (NAME=value lines, also via V4_CONFIG_FILE); the environment wins.  See README \"Queue worker\".\n"
            "  --log-format overrides V4_LOG_FORMAT (auto: JSON lines unless stderr is a terminal).\n"
            "  HTTP endpoint (V4_HTTP_PORT, default 9090; 0 = off): /healthz /readyz /metrics.\n");
    return rc;
}

/* Stop the HTTP thread, free the metrics and the logger (end of every path after they started). */
static int finish(worker *w, v4_http *http, int rc)
{
    v4_http_stop(http);
    v4_wmetrics_free(&w->m);
    pthread_mutex_destroy(&w->h.mu);
    v4_log_destroy(&w->log);
    return rc;
}

int v4_cmd_worker(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {   /* setenv before any thread starts */
        if (!strcmp(argv[i], "--help"))
            return usage(0);
        if (i + 1 < argc && !strcmp(argv[i], "--config"))
            setenv("V4_CONFIG_FILE", argv[++i], 1);
        else if (i + 1 < argc && !strcmp(argv[i], "--log-format"))
            setenv("V4_LOG_FORMAT", argv[++i], 1);
        else
            return usage(2);
    }
    worker w = {0};
    v4_error err = {0};
    if (v4_worker_config_from_env(&w.cfg, &err)) {
        fprintf(stderr, "v4fleet %s: %s: %s\n", PROG, err.where, err.msg);
        return 2;
    }
    if (v4_log_init(&w.log, w.cfg.log_format, w.cfg.log_level, w.cfg.worker_id, stderr, &err)) {
        fprintf(stderr, "v4fleet %s: %s: %s\n", PROG, err.where, err.msg);
        return 2;
    }
    json_object_seed(0);   /* before any thread starts (jansson thread-safety note) */
    pthread_mutex_init(&w.h.mu, NULL);
    w.h.phase = PHASE_LOADING;
    if (v4_wmetrics_init(&w.m, w.cfg.model_name, w.cfg.worker_id)) {
        wlog(&w, 0, NULL, "out of memory creating the metrics");
        return finish(&w, NULL, 1);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    v4_http *http = NULL;
    if (w.cfg.http_port) {   /* first, so that /healthz answers while the model loads */
        v4_http_handlers hh = {http_ready, http_metrics, &w};
        http = v4_http_start(w.cfg.http_addr, w.cfg.http_port, &hh, &w.log, &err);
        if (!http && (w.cfg.http_port_set || strcmp(err.where, "V4_HTTP_PORT"))) {
            wlog(&w, 0, NULL, "%s: %s", err.where, err.msg);
            return finish(&w, NULL, 1);
        }
        if (http)
            wlog(&w, 1, NULL, "http: listening on %s port %d (/healthz /readyz /metrics)", w.cfg.http_addr,
                 w.cfg.http_port);
        else   /* the default port is taken (several workers on one host): run without */
            wlog(&w, 0, NULL, "%s: %s; running WITHOUT the health/metrics endpoint (set V4_HTTP_PORT to a free "
                 "port, or 0 to silence this)", err.where, err.msg);
    }
    v4_task_error te = {0};
    v4_runner_opts rx = {w.cfg.expert_pack, w.cfg.host_cache_bytes, w.cfg.cache_policy, w.cfg.io_threads, 0, NULL, 1, w.cfg.max_context};
    if (!(w.runner = v4_runner_open(w.cfg.model_dir, w.cfg.model_names, &rx, &te))) {
        wlog(&w, 0, NULL, "%s: %s", te.where, te.message);
        return finish(&w, http, 1);
    }
    v4_runner_cache_figs cf;
    if (v4_runner_cache_figs_get(w.runner, &cf) == 0)
        v4_wmetrics_cache(&w.m, &cf);
    char masked[V4_CFG_STR], experts[256];
    v4_mask_url(w.cfg.amqp_url, masked, sizeof masked);
    v4_runner_describe_experts(w.runner, experts, sizeof experts);
    wlog(&w, 1, NULL, "%s", experts);
    wlog(&w, 1, NULL, "worker %s serving model \"%s\" (names: %s) from %s; broker %s%s%s", w.cfg.worker_id,
         w.cfg.model_name, w.cfg.model_names, w.cfg.model_dir, masked, w.cfg.config_file[0] ? "; settings file " : "",
         w.cfg.config_file);
    if (strcmp(w.cfg.redis_url, "off")) {
        const v4_config *mc = v4_runner_config(w.runner);
        v4_util_opts uo = {.redis_url = w.cfg.redis_url, .prefix = w.cfg.redis_prefix, .model = w.cfg.model_name,
                           .n_layers = mc->n_layers, .n_experts = mc->n_routed_experts, .top_k = mc->n_act_experts,
                           .bucket_s = w.cfg.redis_bucket_s, .bucket_ttl_s = w.cfg.redis_bucket_ttl_s,
                           .done_ttl_s = w.cfg.redis_done_ttl_s, .timeout_ms = w.cfg.redis_timeout_ms,
                           .max_backlog = (size_t)w.cfg.redis_backlog};
        if (!(w.util = v4_util_start(&uo, v4_log_redis_cb, &w.log, &err))) {
            wlog(&w, 0, NULL, "%s: %s", err.where, err.msg);
            v4_runner_free(w.runner);
            return finish(&w, http, 1);
        }
    } else {
        wlog(&w, 1, NULL, "V4_REDIS_URL=off: expert utilization is not recorded");
    }
    if (!(w.svc = v4q_service_start(&w.cfg, v4_log_amqp_cb, &w.log, &err))) {
        wlog(&w, 0, NULL, "%s: %s", err.where, err.msg);
        v4_util_free(w.util);
        v4_runner_free(w.runner);
        return finish(&w, http, 1);
    }
    set_phase(&w, PHASE_SERVING, w.svc, w.util);
    for (;;) {
        notice_signal(&w);
        v4q_delivery *d = NULL;
        int r = v4q_next(w.svc, &d, 200);
        if (r < 0)
            break;
        if (r == 0)
            continue;
        if (w.stopping)
            v4q_requeue(w.svc, d);
        else
            handle(&w, d);
        v4q_delivery_free(d);
    }
    wlog(&w, 1, NULL, "exiting: %ld succeeded, %ld failed, %ld invalid, %ld requeued", w.done, w.failed, w.invalid,
         w.requeued);
    set_phase(&w, PHASE_DRAINING, NULL, NULL);   /* the HTTP thread stops using them */
    v4q_service_free(w.svc);
    if (w.util) {
        v4_util_flush(w.util, 2000);
        v4_util_stats us;
        v4_util_get_stats(w.util, &us);
        wlog(&w, 1, NULL, "redis counters: %llu recorded, %llu sent, %llu duplicates, %llu dropped, %llu pending",
             (unsigned long long)us.recorded, (unsigned long long)us.sent, (unsigned long long)us.duplicates,
             (unsigned long long)us.dropped, (unsigned long long)us.pending);
        v4_util_free(w.util);
    }
    v4_runner_free(w.runner);
    return finish(&w, http, 0);
}
