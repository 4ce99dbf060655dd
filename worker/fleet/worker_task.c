/* worker_task.c - one task of the queue worker: take a delivery (parse, validate,
 * answer invalid packets on the invalid queue and on reply_to, fix the deadline from the
 * sender's clock, answer a task already past it or already cancelled without running it,
 * submit the others to the executor), complete what the executor hands back (Redis counters, result, metrics,
 * one log line).  Results and answers to a reply_to queue that the broker returns as
 * unroutable (the queue is gone) go to the unroutable queue and the task is acked
 * (queue/service.h); a returned result for the results exchange is requeued (R22).  The contract:
 * docs/queue-worker.md "Contract".  See worker_ctx.h and worker_main.c.
 *
 * Cancellation (docs/queue-worker.md "Cancellation"): the job's abort hook asks the
 * service (v4q_cancelled) before every forward step whether a cancel message named the
 * task; if so the executor stops it (rc -2, the text so far kept) and v4w_complete
 * answers it `cancelled` with that text, published and acked like any result.  A task
 * named before it is taken is answered `cancelled` at once, not run.
 *
 * Expert utilization: each run's per-(layer, expert) routing counts go to the Redis
 * counter thread (telemetry/util_redis.h) before the result is published; that never
 * waits for Redis, so Redis being slow or down never delays a task or its ack.
 * Thread: the main (inference) thread. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "worker/serve/result_packet.h"
#include "worker/serve/task_packet.h"
#include "worker_ctx.h"

void v4w_log(worker *w, int level, const char *task, const char *fmt, ...)
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

void v4w_set_phase(worker *w, int phase, v4q_service *svc, v4_util *util)
{
    pthread_mutex_lock(&w->h.mu);
    w->h.phase = phase;
    w->h.svc = svc;
    w->h.util = util;
    pthread_mutex_unlock(&w->h.mu);
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

/* 0 when the broker confirmed the n messages (each to its destination, or a returned
 * one marked divert_unroutable to the unroutable queue: counted and logged once here)
 * and the task was acked; -1 (logged) when not: the broker redelivers the task, so
 * nothing of this attempt may be counted as done. */
static int publish(worker *w, const v4q_delivery *d, const v4q_message *m, int n, const char *id, const char *what)
{
    v4_error err = {0};
    unsigned diverted = 0;
    int rc = v4q_finish_all(w->svc, d, m, n, &diverted, &err);
    for (int i = 0; i < n; i++) {
        if (!(diverted & (1u << i)))
            continue;
        w->unroutable++;
        v4m_fadd(w->m.unroutable, 1);
        if (m[i].reply_to)
            v4w_log(w, 1, id, "task %s: %s unroutable: reply_to queue '%s' not found (the broker returned it); kept in "
                    "'%s' with the reason, task acked, not run again", id ? id : "?", what, m[i].reply_to,
                    w->cfg.unroutable_queue);
        else
            v4w_log(w, 1, id, "task %s: %s unroutable: no route from exchange '%s' with routing key '%s'; kept in "
                    "'%s' with the reason, task acked, not run again", id ? id : "?", what, m[i].exchange,
                    m[i].routing_key, w->cfg.unroutable_queue);
    }
    if (!rc)
        return 0;
    v4w_log(w, 0, id, "task %s: %s not confirmed, task not acked (will be redelivered): %s: %s", id ? id : "?", what,
            err.where, err.msg);
    return -1;
}

/* An invalid packet: its error record to the invalid queue and, when the sender gave a
 * reply_to, the same error as a failed result there (with its correlation_id), both
 * confirmed before the ack. */
static void handle_invalid(worker *w, const v4q_delivery *d, const v4_task *t, const v4_task_error *e)
{
    const char *id = t->id ? t->id : d->message_id;
    char *rec = v4_invalid_record_json(e, id, w->cfg.worker_id, d->body, d->len), *ans = NULL;
    if (d->reply_to) {
        v4_result_info ri = {.id = id, .model = v4_runner_model_name(w->runner), .worker = w->cfg.worker_id,
                             .error = e, .numerics = v4_runner_numerics(w->runner)};
        ans = v4_result_json(&ri);
    }
    v4w_log(w, 1, id, "task %s: invalid packet: %s: %s: %s", id ? id : "(no id)", v4_task_errcode_name(e->code), e->where,
         e->message);
    w->invalid++;
    v4m_fadd(w->m.invalid, 1);
    if (!rec || (d->reply_to && !ans)) {
        v4w_log(w, 0, id, "out of memory building an error record; requeueing");
        v4q_requeue(w->svc, d);
        free(rec);
        free(ans);
        return;
    }
    v4q_message m[2] = {{.exchange = "", .routing_key = w->cfg.invalid_queue, .body = rec, .len = strlen(rec),
                         .message_id = id, .correlation_id = d->correlation_id},
                        {.exchange = "", .routing_key = d->reply_to, .body = ans, .len = ans ? strlen(ans) : 0,
                         .message_id = id, .correlation_id = d->correlation_id, .divert_unroutable = 1,
                         .reply_to = d->reply_to}};
    publish(w, d, m, d->reply_to ? 2 : 1, id, "error record");
    free(rec);
    free(ans);
}

static double epoch_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return tv.tv_sec * 1e3 + tv.tv_usec / 1e3;
}

/* The task's deadline on the CLOCK_MONOTONIC scale of t0 (taken), from the sender's
 * clock (docs/queue-worker.md "Deadlines"): the earliest of deadline_ms (else, unless an
 * x-deadline-at is given, V4_DEADLINE_MS) counted from the AMQP timestamp (seconds; from
 * receipt without one, or when it lies in the future), the x-deadline-at header (Unix epoch
 * ms) and timestamp + the AMQP expiration.  *where and how name the earliest. */
static double deadline_of(const worker *w, const v4q_delivery *d, const v4_task *t, double t0, const char **where,
                          char *how, size_t n)
{
    double now = epoch_ms();
    int ts = d->timestamp_s > 0;
    double anchor = ts && d->timestamp_s * 1e3 < now ? d->timestamp_s * 1e3 : now;
    double best = 1e300;
    long budget = t->deadline_ms ? t->deadline_ms : d->deadline_at_ms > 0 ? 0 : w->cfg.deadline_ms;
    *where = "deadline_ms";
    how[0] = 0;
    if (budget) {
        best = anchor + (double)budget;
        snprintf(how, n, "%s %ld ms from %s", t->deadline_ms ? "deadline_ms" : "V4_DEADLINE_MS", budget,
                 ts ? "the AMQP timestamp" : "receipt");
    }
    if (d->deadline_at_ms > 0 && (double)d->deadline_at_ms < best) {
        best = (double)d->deadline_at_ms;
        *where = "x-deadline-at";
        snprintf(how, n, "x-deadline-at %lld", d->deadline_at_ms);
    }
    if (ts && d->expiration_ms >= 0 && d->timestamp_s * 1e3 + (double)d->expiration_ms < best) {
        best = d->timestamp_s * 1e3 + (double)d->expiration_ms;
        *where = "expiration";
        snprintf(how, n, "expiration %lld ms from the AMQP timestamp", d->expiration_ms);
    }
    return best >= 1e300 ? 1e300 : t0 + (best - now);
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
                       .e2e_s = total_ms / 1e3, .prompt_tokens = out->prompt_tokens,
                       .gen_tokens = v4_run_output_completion(out),
                       .expert_hits = out->expert_hits, .expert_misses = out->expert_misses,
                       .expert_prefetched = out->expert_prefetched};
    v4_wmetrics_task(&w->m, &f);
    v4_wmetrics_runner_caches(&w->m, w->runner);
    v4_wmetrics_memory(&w->m, w->runner);     /* the GPU sequences' bytes move with the tasks */
    if (w->log.level < 1)
        return;
    char msg[1024];
    snprintf(msg, sizeof msg, "task %s: %s%s, %d+%d tokens (%d cached), %.1f ms", t->id, rc ? "failed " : "succeeded",
             rc ? v4_task_errcode_name(e->code) : "", out->prompt_tokens, v4_run_output_completion(out),
             out->cached_tokens, total_ms);
    json_t *fields = json_pack("{s:s, s:i, s:i, s:f, s:f, s:f, s:f, s:I, s:I, s:I, s:I}", "status",
                               rc ? "failed" : "succeeded", "prompt_tokens", out->prompt_tokens, "completion_tokens",
                               v4_run_output_completion(out), "queue_ms", queue_ms, "prefill_ms", out->prefill_ms, "decode_ms",
                               out->decode_ms, "total_ms", total_ms, "expert_hits", (json_int_t)out->expert_hits,
                               "expert_misses", (json_int_t)out->expert_misses, "expert_prefetched",
                               (json_int_t)out->expert_prefetched, "expert_bytes_loaded",
                               (json_int_t)out->expert_bytes_loaded);
    if (fields)
        json_object_set_new(fields, "cached_tokens", json_integer(out->cached_tokens));
    if (fields && rc)
        json_object_set_new(fields, "code", json_string(v4_task_errcode_name(e->code)));
    v4_log_emit(&w->log, 1, NULL, t->id, fields, msg);
}

/* {"text": the partial text} (a cut multi-byte character at its end dropped). */
static json_t *partial_output(const char *text, size_t len)
{
    json_t *s = NULL;
    for (size_t cut = 0; !s && cut < 4 && cut <= len; cut++)
        s = json_stringn(text, len - cut);
    json_t *o = json_object();
    if (o)
        json_object_set_new(o, "text", s ? s : json_string(""));
    else
        json_decref(s);
    return o;
}

static void running_gauge(worker *w)
{
    v4m_fset(w->m.running, w->in_flight);
}

/* A job the executor still held when it was destroyed: freed with its delivery copy. */
static void release_job(v4_job *job)
{
    v4w_job *j = (v4w_job *)job;   /* job is v4w_job's first member */
    v4_job_free(&j->job);
    v4q_delivery_free(j->d);
    free(j);
}

/* The job's own abort poll (executor.h): the connection that delivered the task is
 * gone, so the broker has requeued it and no result of this run can be acked; the
 * executor stops it at its next step and frees its slot. */
static int delivery_lost(const v4_job *job)
{
    const v4w_job *j = (const v4w_job *)job;
    return v4q_generation(j->svc) != j->d->generation;
}

/* The job's abort hook: its delivery lost (above), or a cancel message named it (noted
 * in the job: v4w_complete answers it cancelled). */
static int job_stop(const v4_job *job)
{
    v4w_job *j = (v4w_job *)job;   /* the worker's own record (allocated in v4w_take, not const) */
    if (delivery_lost(job))
        return 1;
    if (!j->cancelled && v4q_cancelled(j->svc, job->task.id, &j->cancel_seen))
        j->cancelled = 1;
    return j->cancelled != 0;
}

/* The lane named in the log: urgent, affinity (this worker's own queue), fallback (the
 * task queue, dead-lettered from a worker's own queue) or normal. */
static const char *lane_of(const v4q_delivery *d)
{
    return d->urgent ? "urgent" : d->affinity ? "affinity" : d->dead_lettered ? "fallback" : "normal";
}

void v4w_take(worker *w, v4q_delivery *d)
{
    double t0 = v4_now_ms();
    if (d->delivery_limit_spent && !d->affinity) {
        /* Fleet affinity: it spent the delivery limit in a worker's own queue (which
         * dead-letters to the task queue): rejected to the task queue's dead-letter
         * exchange, so a poison task gets V4_DELIVERY_LIMIT tries in all, as without
         * affinity (docs/queue-worker.md "Fleet affinity"). */
        v4w_log(w, 0, d->message_id, "task %s: its x-death header says it spent the delivery limit (%d) in a "
                "worker's affinity queue; rejected to %s", d->message_id ? d->message_id : "?",
                w->cfg.delivery_limit, w->cfg.dlx_exchange);
        v4q_reject(w->svc, d);
        v4q_delivery_free(d);
        return;
    }
    v4w_job *j = calloc(1, sizeof *j);
    v4_task_error e;
    if (!j) {
        v4w_log(w, 0, NULL, "out of memory taking a task; requeueing it");
        v4q_requeue(w->svc, d);
        v4q_delivery_free(d);
        return;
    }
    v4_task *t = &j->job.task;
    if (v4_task_parse(d->body, d->len, (size_t)w->cfg.max_body_bytes, t, &e)) {
        handle_invalid(w, d, t, &e);
        v4_task_free(t);
        v4q_delivery_free(d);
        free(j);
        return;
    }
    if (d->deadline_at_ms < 0) {
        v4_task_fail(&e, V4_TASK_INVALID_FIELD, "x-deadline-at",
                     "the AMQP header x-deadline-at must be Unix epoch milliseconds (an integer or a string of digits)");
        handle_invalid(w, d, t, &e);
        v4_task_free(t);
        v4q_delivery_free(d);
        free(j);
        return;
    }
    for (int i = 0; i < t->n_unknown; i++)
        v4w_log(w, 2, t->id, "task %s: unknown field '%s' ignored", t->id, t->unknown[i]);
    j->job.release = release_job;
    j->job.abort_job = job_stop;
    j->svc = w->svc;
    const char *dl_where;
    char dl_how[160];
    j->job.deadline_ms = deadline_of(w, d, t, t0, &dl_where, dl_how, sizeof dl_how);
    j->d = d;
    j->t0 = t0;
    j->queue_ms = queue_ms_of(d);
    if (v4q_cancelled(w->svc, t->id, NULL)) {   /* named by a cancel message before it was taken: not run */
        j->cancelled = 2;
        j->job.rc = v4_task_fail(&j->job.err, V4_TASK_CANCELLED, "cancel",
                                 "a cancel message (exchange '%s') named the task before it started; not run",
                                 w->cfg.cancel_exchange);
        w->in_flight++;
        v4w_complete(w, j);
        return;
    }
    if (j->job.deadline_ms <= t0) {   /* past its deadline when taken: answered, acked, not run */
        j->job.rc = v4_task_fail(&j->job.err, V4_TASK_DEADLINE_EXCEEDED, dl_where,
                                 "the deadline (%s) passed %.0f ms before the task was taken; not run", dl_how,
                                 t0 - j->job.deadline_ms);
        w->in_flight++;
        v4w_complete(w, j);
        return;
    }
    if (w->x->ops->submit(w->x, &j->job)) {   /* the loop admits only while a slot is free */
        v4w_log(w, 0, t->id, "task %s: no free slot (internal); requeueing it", t->id);
        v4q_requeue(w->svc, d);
        v4_job_free(&j->job);
        v4q_delivery_free(d);
        free(j);
        return;
    }
    w->in_flight++;
    running_gauge(w);
    v4_wmetrics_taken(&w->m, d->urgent);
    v4w_log(w, 1, t->id, "start of task %s (%s lane, %d running)", t->id, lane_of(d), w->in_flight);
}

void v4w_complete(worker *w, v4w_job *j)
{
    const v4q_delivery *d = j->d;
    const v4_task *t = &j->job.task;
    v4_run_output *out = &j->job.out;
    v4_task_error *e = &j->job.err;
    int rc = j->job.rc;
    w->in_flight--;
    running_gauge(w);
    if (delivery_lost(&j->job)) {
        /* The broker requeued the task when the connection went: whatever this run
         * produced cannot be acked, and the redelivered run is the one that counts. */
        v4w_log(w, 1, t->id, "task %s: abandoned: the broker connection that delivered it was lost (the broker "
                "requeued it); %s", t->id, rc == -2 ? "stopped at the next step" : "it ended first, result dropped");
        w->abandoned++;
        v4m_fadd(w->m.abandoned, 1);
        goto out;
    }
    if (rc == -2 && j->cancelled) {   /* stopped by a cancel message: answered with the text so far */
        rc = j->job.rc = v4_task_fail(e, V4_TASK_CANCELLED, "cancel",
                                      "a cancel message (exchange '%s') stopped the task while it ran; output.text "
                                      "holds the %zu bytes of text generated before", w->cfg.cancel_exchange,
                                      out->text ? out->text_len : (size_t)0);
    }
    if (rc == -2) {
        v4w_log(w, 1, t->id, "task %s: grace period over, requeued without a result", t->id);
        v4q_requeue(w->svc, d);
        w->requeued++;
        v4m_fadd(w->m.requeued, 1);
        goto out;
    }
    /* Utilization counters: queued for the Redis thread (never waits for Redis); the
     * done:{id} guard there keeps a redelivered task from being counted twice. */
    if (w->util && out->expert_counts && out->forwarded > 0) {
        v4_util_figs figs = {clamp_u32(out->expert_hits), clamp_u32(out->expert_misses),
                             clamp_u32(out->expert_bytes_loaded / 1024), clamp_u32(out->expert_prefetched)};
        v4_util_record_ex(w->util, t->id, out->expert_counts, out->forwarded, &figs);
    }
    if (w->cfg.fault_exit_before_ack && w->util)
        v4_util_flush(w->util, 5000);   /* test hook: make the counters land before the crash */
    v4_result_info ri = {
        .id = t->id, .model = v4_runner_model_name(w->runner), .worker = w->cfg.worker_id, .metadata = t->metadata,
        .text = out->text, .text_len = out->text_len, .token_ids = out->tokens, .n_tokens = out->n_tokens,
        .finish_reason = out->finish_reason, .prompt_tokens = out->prompt_tokens, .cached_tokens = out->cached_tokens,
        .choices = out->choices,
        .n_choices = out->n_choices, .queue_ms = j->queue_ms,
        .prefill_ms = out->prefill_ms, .decode_ms = out->decode_ms, .total_ms = v4_now_ms() - j->t0,
        .expert_hits = out->expert_hits, .expert_misses = out->expert_misses,
        .expert_prefetched = out->expert_prefetched,
        .expert_bytes_loaded = out->expert_bytes_loaded, .chunks = out->chunks, .levels = out->levels,
        .error = rc ? e : NULL, .numerics = v4_runner_numerics(w->runner), .logprobs = out->logprobs,
        .reasoning = out->reasoning, .reasoning_len = out->reasoning_len};
    json_t *ro = v4_result_object(&ri);
    if (ro && rc && (e->code == V4_TASK_DEADLINE_EXCEEDED || e->code == V4_TASK_CANCELLED) &&
        out->text)   /* the text generated before the overrun or the cancel */
        json_object_set_new(ro, "output", partial_output(out->text, out->text_len));
    char *json = ro ? json_dumps(ro, JSON_COMPACT) : NULL;
    json_decref(ro);
    if (!json) {
        v4w_log(w, 0, t->id, "task %s: out of memory building the result; requeueing", t->id);
        v4q_requeue(w->svc, d);
    } else {
        v4q_message m = {.exchange = d->reply_to ? "" : w->cfg.results_exchange,
                         .routing_key = d->reply_to ? d->reply_to : w->cfg.results_routing_key, .body = json,
                         .len = strlen(json), .message_id = t->id, .correlation_id = d->correlation_id,
                         .fault_exit_before_ack = w->cfg.fault_exit_before_ack,
                         .divert_unroutable = d->reply_to != NULL, .reply_to = d->reply_to};
        /* a vanished reply_to queue is no reason to run the task again (-> the unroutable
         * queue); an unbound results exchange is the operator's to fix (checklist R22: not
         * acked, requeued, dead-lettered past the delivery limit) */
        /* counted (metrics, the finished line, the exit summary) only once the broker
         * has the result: an unconfirmed one is redelivered and counted then */
        if (publish(w, d, &m, 1, t->id, "result") == 0) {
            observe(w, t, out, rc, e, j->queue_ms, d->timestamp_s != 0, j->t0,
                    j->job.start_ms > 0 ? j->job.start_ms : j->t0);
            rc ? w->failed++ : w->done++;
            if (j->cancelled && rc && e->code == V4_TASK_CANCELLED) {
                w->cancelled++;
                v4_wmetrics_cancelled(&w->m, j->cancelled == 1);
                v4w_log(w, 1, t->id, "task %s: cancelled %s", t->id,
                        j->cancelled == 1 ? "while running: answered with the text so far" : "before it started: not run");
            }
        } else {
            w->unconfirmed++;
            v4m_fadd(w->m.unconfirmed, 1);
        }
    }
    free(json);
out:
    v4_job_free(&j->job);
    v4q_delivery_free(j->d);
    free(j);
}
