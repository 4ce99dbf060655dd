/* worker_reload.c - the queue worker's runner life cycle: open + warm up (warmup.h),
 * the executor over it, the Redis counter thread for its shape, and reloads (SIGHUP or
 * V4_MODEL_WATCH_S; see worker_main.c for the semantics).  Thread: the main thread. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/model_config.h"
#include "warmup.h"
#include "worker/serve/task_packet.h"
#include "worker_ctx.h"

/* Open a runner with c's model and engine settings and warm it up (phase: loading, then
 * warming).  0 = *out ready; -1 = nothing opened (logged). */
int v4w_open_runner(worker *w, const v4_worker_config *c, int phase, v4_runner **out)
{
    v4_task_error te = {0};
    const v4_runner_opts rx = {.pack_dir = c->expert_pack,
                               .host_cache_bytes = c->host_cache_bytes,
                               .policy = c->cache_policy,
                               .io_threads = c->io_threads,
                               .threads = c->threads,
                               .max_batch = c->concurrency,
                               .max_context = c->max_context,
                               .device = c->device,
                               .cuda_mode = c->cuda_mode,
                               .gpu_expert_mem = c->gpu_expert_mem,
                               .numerics = c->numerics,
                               .prefill_chunk = c->prefill_chunk,
                               .gpu_cache_policy = c->gpu_cache_policy,
                               .gpu_weight_mem = c->gpu_weight_mem,
                               .gpu_seq_mem = c->gpu_seq_mem,
                               .no_lookahead = !c->lookahead,
                               .grammar_cache_bytes = c->grammar_cache_bytes,
                               .grammar_compact = c->grammar_compact,
                               .max_n = c->max_n,
                               .default_max_tokens = c->default_max_tokens ? c->default_max_tokens : -1,
                               .prefix_cache = c->prefix_cache,
                               .prefix_cache_bytes = c->prefix_cache_bytes,
                               .prefix_block = c->prefix_block,
                               .prefix_policy = c->prefix_policy};
    double t0 = v4_now_ms();
    *out = NULL;
    v4_runner *r = v4_runner_open(c->model_dir, c->model_names, &rx, &te);
    if (!r) {
        v4w_log(w, 0, NULL, "%s: %s", te.where, te.message);
        return -1;
    }
    char experts[256], threads[800], prefix[200];
    v4_runner_describe_experts(r, experts, sizeof experts);
    v4_runner_describe_threads(r, threads, sizeof threads);
    v4_runner_describe_prefix(r, prefix, sizeof prefix);
    v4w_log(w, 1, NULL, "model %s opened in %.0f ms; %s; numerics %s%s%s; %s", c->model_dir, v4_now_ms() - t0, experts,
            v4_runner_numerics(r), *threads ? "; " : "", threads, prefix);
    v4_fast_selftest ft;
    v4_runner_fast_selftest(r, &ft);
    if (ft.state == V4_FAST_FAILED || ft.state == V4_FAST_UNAVAILABLE)   /* /metrics: v4fleet:fast_selftest */
        v4w_log(w, 0, NULL, "fast numerics %s, exact products instead: product %s, status %s (%d): %s",
                ft.state == V4_FAST_FAILED ? "failed its self-test" : "unavailable", ft.product, ft.status, ft.code,
                ft.detail);
    char mem[400];
    v4_runner_describe_memory(r, mem, sizeof mem);
    v4w_log(w, 1, NULL, "%s", mem);
    if (phase == PHASE_LOADING)
        v4w_set_phase(w, PHASE_WARMING, NULL, NULL);
    v4_warmup_opts wo = {c->warmup_experts ? c->redis_url : NULL, c->redis_prefix, c->model_name, c->warmup_tokens};
    v4_warmup_report rep;
    if (v4_warmup(r, &wo, &rep, &te)) {
        v4w_log(w, 0, NULL, "warm-up generation failed: %s: %s: %s", v4_task_errcode_name(te.code), te.where, te.message);
        v4_runner_free(r);
        return -1;
    }
    if (rep.experts_loaded)
        v4w_log(w, 1, NULL, "warm-up: pre-loaded %d of %d ranked experts (%.1f MiB, %.0f ms; hottest %s)%s%s",
             rep.experts_loaded, rep.experts_ranked, rep.bytes_loaded / 1048576.0, rep.experts_ms, rep.hottest,
             rep.note[0] ? "; " : "", rep.note);
    else
        v4w_log(w, 1, NULL, "warm-up: no expert pre-loaded: %s", c->warmup_experts ? rep.note : "V4_WARMUP_EXPERTS=0");
    v4w_log(w, 1, NULL, "warm-up: generation of %d tokens in %.1f ms", rep.gen_tokens, rep.gen_ms);
    v4_wmetrics_warmup(&w->m, (rep.experts_ms + rep.gen_ms) / 1e3, rep.experts_loaded);
    v4_wmetrics_runner_caches(&w->m, r);
    v4_wmetrics_memory(&w->m, r);
    *out = r;
    return 0;
}

/* Start the Redis counter thread for runner r's model shape. */
int v4w_start_util(worker *w, const v4_worker_config *c, v4_runner *r)
{
    const v4_config *mc = v4_runner_config(r);
    v4_util_opts uo = {.redis_url = c->redis_url, .prefix = c->redis_prefix, .model = c->model_name,
                       .n_layers = mc->n_layers, .n_experts = mc->n_routed_experts, .top_k = mc->n_act_experts,
                       .bucket_s = c->redis_bucket_s, .bucket_ttl_s = c->redis_bucket_ttl_s,
                       .done_ttl_s = c->redis_done_ttl_s, .timeout_ms = c->redis_timeout_ms,
                       .max_backlog = (size_t)c->redis_backlog};
    v4_error err = {0};
    if (!(w->util = v4_util_start(&uo, v4_log_redis_cb, &w->log, &err))) {
        v4w_log(w, 0, NULL, "%s: %s", err.where, err.msg);
        return -1;
    }
    return 0;
}

/* V4_CONCURRENCY 1: the serial executor; N > 1: continuous batching over N slots (the
 * runner was opened with max_batch N).  NULL: logged. */
static v4_exec *new_exec(worker *w, v4_runner *r, int n)
{
    char err[256] = "out of memory";
    v4_exec *x = n > 1 ? v4_exec_continuous(r, n, w->abort_fn, w, err, sizeof err)
                             : v4_exec_serial(r, w->abort_fn, w);
    if (!x)
        v4w_log(w, 0, NULL, "cannot create the task executor (%d slots): %s", n, err);
    return x;
}

int v4w_make_exec(worker *w)
{
    if (!(w->x = new_exec(w, w->runner, w->cfg.concurrency)))
        return -1;
    v4w_log(w, 1, NULL, "%d task slot%s (%s)", w->cfg.concurrency, w->cfg.concurrency > 1 ? "s" : "",
            w->cfg.concurrency > 1 ? "continuous batching: one forward step advances every running task"
                                   : "one task at a time");
    return 0;
}

/* The reload itself (see the top of the file); never fails a task, never exits. */
static void reload(worker *w, const char *why)
{
    double t0 = v4_now_ms();
    v4w_log(w, 1, NULL, "reload (%s): not taking tasks until the new model is warm", why);
    v4w_set_phase(w, PHASE_RELOADING, w->svc, w->util);
    v4_worker_config nc;
    v4_error err = {0};
    v4_runner *nr = NULL;
    int cfg_rc = v4_worker_config_from_env(&nc, &err);
    nc.concurrency = w->cfg.concurrency;   /* slots and prefetch stay until a restart */
    if (cfg_rc) {
        v4w_log(w, 0, NULL, "reload failed: settings: %s: %s; still serving %s", err.where, err.msg, w->cfg.model_dir);
    } else if (v4w_open_runner(w, &nc, PHASE_RELOADING, &nr)) {
        v4w_log(w, 0, NULL, "reload failed: model %s did not open or warm up (above); still serving %s", nc.model_dir,
             w->cfg.model_dir);
    }
    v4_exec *nx = nr ? new_exec(w, nr, w->cfg.concurrency) : NULL;
    if (nr && !nx) {
        v4w_log(w, 0, NULL, "reload failed: no executor for the new model; still serving %s", w->cfg.model_dir);
        v4_runner_free(nr);
        nr = NULL;
    }
    if (!nr) {
        v4_wmetrics_reload(&w->m, 0);
        v4w_set_phase(w, PHASE_SERVING, w->svc, w->util);
        return;
    }
    const v4_config *a = v4_runner_config(w->runner), *b = v4_runner_config(nr);
    if (w->util && (strcmp(nc.model_name, w->cfg.model_name) || a->n_layers != b->n_layers ||
                    a->n_routed_experts != b->n_routed_experts || a->n_act_experts != b->n_act_experts)) {
        v4_util *old = w->util;   /* new name or shape: new counter keys */
        v4w_set_phase(w, PHASE_RELOADING, w->svc, NULL);
        v4_util_flush(old, 2000);
        v4_util_free(old);
        w->util = NULL;
        if (v4w_start_util(w, &nc, nr))
            v4w_log(w, 0, NULL, "expert utilization is not recorded until the worker restarts");
    }
    w->x->ops->destroy(w->x);   /* nothing in flight: it holds no job */
    w->x = nx;
    memset(&w->x_seen, 0, sizeof w->x_seen);   /* the new executor counts from 0 */
    v4_runner_free(w->runner);
    w->runner = nr;
    v4_wmetrics_numerics(&w->m, v4_runner_numerics(nr));
    v4_fast_selftest ft;
    v4_runner_fast_selftest(nr, &ft);
    v4_wmetrics_fast_selftest(&w->m, &ft);
    memcpy(w->cfg.model_dir, nc.model_dir, sizeof nc.model_dir);
    memcpy(w->cfg.model_name, nc.model_name, sizeof nc.model_name);
    memcpy(w->cfg.model_names, nc.model_names, sizeof nc.model_names);
    memcpy(w->cfg.expert_pack, nc.expert_pack, sizeof nc.expert_pack);
    memcpy(w->cfg.cache_policy, nc.cache_policy, sizeof nc.cache_policy);
    w->cfg.host_cache_bytes = nc.host_cache_bytes;
    w->cfg.io_threads = nc.io_threads;
    w->cfg.lookahead = nc.lookahead;
    w->cfg.threads = nc.threads;
    memcpy(w->cfg.device, nc.device, sizeof nc.device);
    memcpy(w->cfg.cuda_mode, nc.cuda_mode, sizeof nc.cuda_mode);
    memcpy(w->cfg.gpu_expert_mem, nc.gpu_expert_mem, sizeof nc.gpu_expert_mem);
    memcpy(w->cfg.gpu_cache_policy, nc.gpu_cache_policy, sizeof nc.gpu_cache_policy);
    memcpy(w->cfg.gpu_weight_mem, nc.gpu_weight_mem, sizeof nc.gpu_weight_mem);
    memcpy(w->cfg.gpu_seq_mem, nc.gpu_seq_mem, sizeof nc.gpu_seq_mem);
    w->cfg.max_context = nc.max_context;
    w->cfg.grammar_cache_bytes = nc.grammar_cache_bytes;
    w->cfg.grammar_compact = nc.grammar_compact;
    w->cfg.max_n = nc.max_n;
    w->cfg.default_max_tokens = nc.default_max_tokens;
    w->cfg.prefix_cache = nc.prefix_cache;
    w->cfg.prefix_cache_bytes = nc.prefix_cache_bytes;
    w->cfg.prefix_block = nc.prefix_block;
    memcpy(w->cfg.prefix_policy, nc.prefix_policy, sizeof nc.prefix_policy);
    w->cfg.prefill_chunk = nc.prefill_chunk;
    w->cfg.deadline_ms = nc.deadline_ms;
    w->cfg.warmup_tokens = nc.warmup_tokens;
    w->cfg.warmup_experts = nc.warmup_experts;
    w->cfg.model_watch_s = nc.model_watch_s;
    if (!realpath(w->cfg.model_dir, w->model_real))
        w->model_real[0] = 0;
    v4_wmetrics_reload(&w->m, 1);
    v4w_set_phase(w, PHASE_SERVING, w->svc, w->util);
    v4w_log(w, 1, NULL, "reload done in %.0f ms: serving model \"%s\" (names: %s) from %s", v4_now_ms() - t0,
         w->cfg.model_name, w->cfg.model_names, w->cfg.model_dir);
}

void v4w_reload_poll(worker *w, int hup)
{
    if (hup) {
        snprintf(w->reload_why, sizeof w->reload_why, "SIGHUP");
    } else if (w->cfg.model_watch_s && !w->reload_why[0] && v4_now_ms() >= w->next_watch_ms) {
        w->next_watch_ms = v4_now_ms() + (double)w->cfg.model_watch_s * 1e3;
        char now[sizeof w->model_real];
        if (realpath(w->cfg.model_dir, now) && strcmp(now, w->model_real))
            snprintf(w->reload_why, sizeof w->reload_why, "V4_MODEL_DIR now resolves to %s", now);
    }
    if (!w->reload_why[0] || w->in_flight)
        return;
    char why[sizeof w->reload_why];
    memcpy(why, w->reload_why, sizeof why);
    w->reload_why[0] = 0;
    reload(w, why);
}
