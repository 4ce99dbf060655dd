/* worker_main.c - `v4fleet worker`: the stateless queue worker.
 *
 * Loop (main thread = inference thread; worker_ctx.h, worker_task.c): while one of the
 * executor's slots is free (V4_CONCURRENCY; the AMQP prefetch is at least that), take a
 * delivery from the AMQP thread (queue/service.h; an urgent-lane delivery first when the
 * mailbox holds one: no running task is pre-empted) -> parse/validate the task packet ->
 * invalid: publish one error record to the invalid queue, wait for its confirm, ack ->
 * valid: submit it to the executor (executor.h); then advance the executor one step
 * and, for each task it hands back, publish the result (to the AMQP reply_to queue with
 * the delivery's correlation_id when present, else to the results exchange; message_id =
 * task id) -> the AMQP thread acks the task only after the broker confirmed the result.
 * Settings come from environment variables and/or a config file (--config FILE or
 * V4_CONFIG_FILE; config/worker_config.h); only masked URLs are ever logged.
 *
 * Observability: one logger (log.h; JSON lines unless V4_LOG_FORMAT=text or stderr is a
 * terminal) for this thread and, through callbacks, the AMQP and Redis threads; a
 * metrics registry (worker_metrics.h) fed by this thread after every task; an HTTP
 * thread (http_server.h, V4_HTTP_PORT) that serves /healthz, /readyz and /metrics and
 * reads the shared state through `health` (mutex): the phase (loading -> warming ->
 * serving <-> reloading -> draining) and the service/counter-thread pointers, cleared before they are freed.
 * An explicit V4_HTTP_PORT that cannot be bound is fatal; the default 9090 taken (several
 * workers on one host) is logged as an error and the worker runs without the endpoint.
 * Ready = model loaded and warm, service started, broker connected, not reloading or
 * draining.
 *
 * Warm-up (warmup.h), before the service starts consuming: the fleet's hottest experts
 * (Redis statistics) into the host cache, then one short generation.
 *
 * Reload (SIGHUP, or V4_MODEL_WATCH_S: V4_MODEL_DIR resolves to another directory, as
 * when a symlink is flipped to a new model version): between tasks, so the running
 * task finishes on the old model; no new task is taken meanwhile (a prefetched delivery
 * waits, unacked, in the AMQP thread, which keeps the connection's heartbeats going).
 * The settings are read again (environment + file); the model and engine settings
 * (V4_MODEL_DIR, V4_MODEL_NAME, expert paging, V4_MAX_CONTEXT, V4_DEADLINE_MS,
 * warm-up) take effect, the others need a restart.  The new runner is opened and warmed
 * up while the old one still exists; only then are they swapped.  A new model that does
 * not open or warm up is dropped and the old one keeps serving: no task fails because
 * of a reload.  Peak memory during a reload is both models.
 *
 * Signals: SIGTERM/SIGINT set a stop flag, SIGHUP bumps a counter (sig_atomic_t, the
 * only process-wide mutable state, written only by the handler).  The stop flag is
 * polled every 200 ms between tasks and before every forward step: at the first sight
 * the consumer is cancelled (unstarted deliveries are requeued by the AMQP thread); the
 * running tasks may finish within V4_GRACE_MS, after that they are aborted and requeued
 * (nack) without a result; then the command returns 0.
 * Thread: main thread; the AMQP thread is owned by the service.
 */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fleet.h"
#include "http_server.h"
#include "worker_ctx.h"

#define PROG "worker"

static volatile sig_atomic_t g_stop_signal, g_reload_count;

static void on_signal(int sig)
{
    if (sig == SIGHUP)
        g_reload_count++;
    else
        g_stop_signal = sig;
}

/* HTTP thread: readiness, and the broker figures for the metrics (caller holds h.mu). */
static int ready_locked(worker *w, char *why, size_t n)
{
    uint64_t connects = 0;
    int connected = w->h.svc ? v4q_connected(w->h.svc, &connects) : 0;
    v4_wmetrics_broker(&w->m, connected, connects);
    if (w->h.svc)
        v4_wmetrics_cancel_messages(&w->m, v4q_cancels_received(w->h.svc));
    const char *r = w->h.phase == PHASE_LOADING ? "loading the model"
                    : w->h.phase == PHASE_WARMING ? "warming up (pre-loading experts, one short generation)"
                    : w->h.phase == PHASE_RELOADING ? "reloading the model (not taking tasks)"
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

/* First sight of a signal: cancel the consumer at once, remember when. */
static void notice_signal(worker *w)
{
    if (!g_stop_signal || w->stopping)
        return;
    w->stopping = 1;
    w->stop_at_ms = v4_now_ms();
    v4w_set_phase(w, PHASE_DRAINING, w->svc, w->util);
    v4w_log(w, 1, NULL, "signal %d: stop consuming, requeue unstarted tasks (grace %ld ms for the running one)",
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

static int usage(int rc)
{
    fprintf(rc ? stderr : stdout,
            "usage: v4fleet worker [--config FILE] [--log-format json|text|auto]\n"
            "  settings: environment variables V4_*, their V4_*_FILE forms (secrets), or FILE\n"
            "  (NAME=value lines, also via V4_CONFIG_FILE); the environment wins.  See docs/queue-worker.md.\n"
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
        v4w_log(&w, 0, NULL, "out of memory creating the metrics");
        return finish(&w, NULL, 1);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    v4_http *http = NULL;
    if (w.cfg.http_port) {   /* first, so that /healthz answers while the model loads */
        v4_http_handlers hh = {http_ready, http_metrics, &w};
        http = v4_http_start(w.cfg.http_addr, w.cfg.http_port, &hh, &w.log, &err);
        if (!http && (w.cfg.http_port_set || strcmp(err.where, "V4_HTTP_PORT"))) {
            v4w_log(&w, 0, NULL, "%s: %s", err.where, err.msg);
            return finish(&w, NULL, 1);
        }
        if (http)
            v4w_log(&w, 1, NULL, "http: listening on %s port %d (/healthz /readyz /metrics)", w.cfg.http_addr,
                 w.cfg.http_port);
        else   /* the default port is taken (several workers on one host): run without */
            v4w_log(&w, 0, NULL, "%s: %s; running WITHOUT the health/metrics endpoint (set V4_HTTP_PORT to a free "
                 "port, or 0 to silence this)", err.where, err.msg);
    }
    if (v4w_open_runner(&w, &w.cfg, PHASE_LOADING, &w.runner))
        return finish(&w, http, 1);
    v4_wmetrics_numerics(&w.m, v4_runner_numerics(w.runner));
    v4_fast_selftest ft;
    v4_runner_fast_selftest(w.runner, &ft);
    v4_wmetrics_fast_selftest(&w.m, &ft);
    if (!realpath(w.cfg.model_dir, w.model_real))
        w.model_real[0] = 0;
    char masked[V4_CFG_STR];
    v4_mask_url(w.cfg.amqp_url, masked, sizeof masked);
    v4w_log(&w, 1, NULL, "worker %s serving model \"%s\" (names: %s) from %s; numerics %s; broker %s%s%s",
         w.cfg.worker_id, w.cfg.model_name, w.cfg.model_names, w.cfg.model_dir, v4_runner_numerics(w.runner), masked,
         w.cfg.config_file[0] ? "; settings file " : "", w.cfg.config_file);
    if (w.cfg.affinity)
        v4w_log(&w, 1, NULL, "fleet affinity: consuming %s (bound to the x-consistent-hash exchange %s, weight %d; "
                "tasks waiting there longer than %ld ms fall through to %s)", w.cfg.affinity_queue,
                w.cfg.affinity_exchange, w.cfg.affinity_weight, w.cfg.affinity_ttl_ms, w.cfg.task_queue);
    if (strcmp(w.cfg.redis_url, "off")) {
        if (v4w_start_util(&w, &w.cfg, w.runner)) {
            v4_runner_free(w.runner);
            return finish(&w, http, 1);
        }
    } else {
        v4w_log(&w, 1, NULL, "V4_REDIS_URL=off: expert utilization is not recorded");
    }
    w.abort_fn = shutdown_abort;
    if (v4w_make_exec(&w)) {
        v4_util_free(w.util);
        v4_runner_free(w.runner);
        return finish(&w, http, 1);
    }
    if (!(w.svc = v4q_service_start(&w.cfg, v4_log_amqp_cb, &w.log, &err))) {
        w.x->ops->destroy(w.x);
        v4w_log(&w, 0, NULL, "%s: %s", err.where, err.msg);
        v4_util_free(w.util);
        v4_runner_free(w.runner);
        return finish(&w, http, 1);
    }
    v4w_set_phase(&w, PHASE_SERVING, w.svc, w.util);
    w.next_watch_ms = v4_now_ms() + (double)w.cfg.model_watch_s * 1e3;
    int cap = w.x->ops->capacity(w.x), ended = 0;
    sig_atomic_t hups_seen = 0;
    for (;;) {
        notice_signal(&w);
        if (!w.stopping) {
            sig_atomic_t hups = g_reload_count;
            v4w_reload_poll(&w, hups != hups_seen);
            hups_seen = hups;
        }
        /* admit while a slot is free (no new task while a reload is due) */
        while (!ended && w.in_flight < cap && !w.reload_why[0]) {
            v4q_delivery *d = NULL;
            int r = v4q_next(w.svc, &d, w.in_flight ? 0 : 200);
            if (r < 0)
                ended = 1;
            if (r <= 0)
                break;
            if (w.stopping) {
                v4q_requeue(w.svc, d);
                v4q_delivery_free(d);
                continue;
            }
            v4w_take(&w, d);
        }
        if (w.in_flight) {
            v4_job *fin[64];
            int n = w.x->ops->step(w.x, fin, 64);
            for (int i = 0; i < n; i++)
                v4w_complete(&w, (v4w_job *)fin[i]);
            v4_exec_figs f;     /* memory waits of this step into the metrics */
            v4_exec_figs_get(w.x, &f);
            v4_wmetrics_memory_waits(&w.m, f.admit_waits - w.x_seen.admit_waits, f.oom_retries - w.x_seen.oom_retries,
                                     f.mem_stalls - w.x_seen.mem_stalls);
            w.x_seen = f;
        } else if (ended) {
            break;
        }
    }
    v4w_log(&w, 1, NULL, "exiting: %ld succeeded, %ld failed (%ld of them cancelled), %ld invalid, %ld requeued, "
                         "%ld results unconfirmed (redelivered), %ld unroutable (kept in %s), %ld abandoned (their "
                         "delivering connection gone)",
            w.done, w.failed, w.cancelled, w.invalid, w.requeued, w.unconfirmed, w.unroutable, w.cfg.unroutable_queue,
            w.abandoned);
    v4w_set_phase(&w, PHASE_DRAINING, NULL, NULL);   /* the HTTP thread stops using them */
    v4q_service_free(w.svc);
    if (w.util) {
        v4_util_flush(w.util, 2000);
        v4_util_stats us;
        v4_util_get_stats(w.util, &us);
        v4w_log(&w, 1, NULL, "redis counters: %llu recorded, %llu sent, %llu duplicates, %llu dropped, %llu pending",
             (unsigned long long)us.recorded, (unsigned long long)us.sent, (unsigned long long)us.duplicates,
             (unsigned long long)us.dropped, (unsigned long long)us.pending);
        v4_util_free(w.util);
    }
    w.x->ops->destroy(w.x);
    v4_runner_free(w.runner);
    return finish(&w, http, 0);
}
