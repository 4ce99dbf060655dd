/* test_metrics.c - the metrics registry (worker/fleet/metrics.h): exact Prometheus text of a
 * small registry (HELP/TYPE, counters, gauges, labels in creation order), histogram
 * buckets (cumulative, le bounds, +Inf, _sum, _count, a value on a bound), label and
 * HELP escaping, number formatting, bad registrations, and a concurrency smoke test
 * (8 threads updating one counter, one labelled counter and one histogram while a
 * ninth renders: totals exact, every rendering consistent); the worker's families, among
 * them v4fleet:fast_selftest (the failed product and its cuBLAS / CUDA status, a reload
 * zeroing the replaced engine's verdict, none for an engine without a self-test). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/cpu/cpu_backend.h"
#include "testutil.h"
#include "worker/fleet/metrics.h"
#include "worker/fleet/worker_metrics.h"
#include "worker/tools/cli_util.h"

static void t_exact(void)
{
    v4m_registry *r = v4m_new();
    static const char *const lab[] = {"code", NULL};
    v4m_family *c = v4m_family_new(r, V4M_COUNTER, "v4fleet:req_total", "Requests.", NULL, NULL, 0);
    v4m_family *f = v4m_family_new(r, V4M_COUNTER, "v4fleet:fail_total", "Failures by code.", lab, NULL, 0);
    v4m_family *g = v4m_family_new(r, V4M_GAUGE, "v4fleet:temp", "A gauge.", NULL, NULL, 0);
    v4m_family *e = v4m_family_new(r, V4M_GAUGE, "v4fleet:empty", "No series yet.", NULL, NULL, 0);
    CHECK(c && f && g && e, "families");
    v4m_fadd(c, 2);
    v4m_fadd(c, 1);
    v4m_fadd(c, -5);   /* counters never go down */
    const char *a[] = {"a"}, *b[] = {"b"};
    v4m_add(v4m_series_of(f, b), 1);
    v4m_add(v4m_series_of(f, a), 4);
    v4m_add(v4m_series_of(f, b), 1);
    v4m_fset(g, 0.25);
    v4m_fadd(g, -1);
    char *txt = v4m_render(r, NULL);
    const char *want = "# HELP v4fleet:req_total Requests.\n"
                       "# TYPE v4fleet:req_total counter\n"
                       "v4fleet:req_total 3\n"
                       "# HELP v4fleet:fail_total Failures by code.\n"
                       "# TYPE v4fleet:fail_total counter\n"
                       "v4fleet:fail_total{code=\"b\"} 2\n"
                       "v4fleet:fail_total{code=\"a\"} 4\n"
                       "# HELP v4fleet:temp A gauge.\n"
                       "# TYPE v4fleet:temp gauge\n"
                       "v4fleet:temp -0.75\n"
                       "# HELP v4fleet:empty No series yet.\n"
                       "# TYPE v4fleet:empty gauge\n";
    CHECK(txt && !strcmp(txt, want), "exact text:\n%s\n--- want:\n%s", txt ? txt : "(null)", want);
    CHECK(v4m_value(v4m_series_of(f, b)) == 2, "value of a series");
    free(txt);
    v4m_free(r);
}

static void t_histogram(void)
{
    v4m_registry *r = v4m_new();
    static const double bounds[] = {0.1, 1, 2.5};
    static const char *const lab[] = {"tier", NULL};
    v4m_family *h = v4m_family_new(r, V4M_HISTOGRAM, "lat_seconds", "Latency.", lab, bounds, 3);
    const char *host[] = {"host"};
    v4m_series *s = v4m_series_of(h, host);
    static const double obs[] = {0.05, 0.1, 0.5, 1, 3, 100, 2.5};
    for (size_t i = 0; i < sizeof obs / sizeof obs[0]; i++)
        v4m_observe(s, obs[i]);
    char *txt = v4m_render(r, NULL);
    /* _sum / _count carry the labels too */
    const char *want2 = "# HELP lat_seconds Latency.\n"
                        "# TYPE lat_seconds histogram\n"
                        "lat_seconds_bucket{tier=\"host\",le=\"0.1\"} 2\n"
                        "lat_seconds_bucket{tier=\"host\",le=\"1\"} 4\n"
                        "lat_seconds_bucket{tier=\"host\",le=\"2.5\"} 5\n"
                        "lat_seconds_bucket{tier=\"host\",le=\"+Inf\"} 7\n"
                        "lat_seconds_sum{tier=\"host\"} 107.15\n"
                        "lat_seconds_count{tier=\"host\"} 7\n";
    CHECK(txt && !strcmp(txt, want2), "histogram text:\n%s", txt ? txt : "(null)");
    CHECK(v4m_value(s) == 7, "histogram count");
    free(txt);
    /* unlabelled histogram: le is the only label */
    v4m_family *u = v4m_family_new(r, V4M_HISTOGRAM, "u", "U.", NULL, bounds, 1);
    v4m_fobserve(u, 0.5);
    txt = v4m_render(r, NULL);
    CHECK(txt && strstr(txt, "\nu_bucket{le=\"0.1\"} 0\nu_bucket{le=\"+Inf\"} 1\nu_sum 0.5\nu_count 1\n"), "unlabelled: %s",
          txt);
    free(txt);
    /* bad registrations */
    static const double unsorted[] = {1, 0.5};
    CHECK(!v4m_family_new(r, V4M_HISTOGRAM, "x", "", NULL, unsorted, 2), "unsorted bounds refused");
    CHECK(!v4m_family_new(r, V4M_COUNTER, "", "", NULL, NULL, 0), "empty name refused");
    static const char *const five[] = {"a", "b", "c", "d", "e", NULL};
    CHECK(!v4m_family_new(r, V4M_COUNTER, "y", "", five, NULL, 0), "too many labels refused");
    CHECK(v4m_series_of(u, NULL) != NULL, "unlabelled series");
    static const char *const one[] = {"k", NULL};
    v4m_family *l = v4m_family_new(r, V4M_COUNTER, "z", "", one, NULL, 0);
    CHECK(l && !v4m_series_of(l, NULL), "labelled family without values refused");
    v4m_free(r);
}

static void t_escaping(void)
{
    v4m_registry *r = v4m_new();
    static const char *const lab[] = {"model", "worker", NULL};
    v4m_family *f = v4m_family_new(r, V4M_GAUGE, "v4fleet:info", "Back\\slash and\nnewline \"quoted\".", lab, NULL, 0);
    const char *v[] = {"m\"1\\x", "w\nid"};
    v4m_set(v4m_series_of(f, v), 1);
    char *txt = v4m_render(r, NULL);
    const char *want = "# HELP v4fleet:info Back\\\\slash and\\nnewline \"quoted\".\n"
                       "# TYPE v4fleet:info gauge\n"
                       "v4fleet:info{model=\"m\\\"1\\\\x\",worker=\"w\\nid\"} 1\n";
    CHECK(txt && !strcmp(txt, want), "escaping:\n%s", txt ? txt : "(null)");
    free(txt);
    v4m_free(r);

    static const struct { double v; const char *s; } nums[] = {
        {0, "0"}, {3, "3"}, {0.1, "0.1"}, {1e21, "1e+21"}, {123456789012.0, "123456789012"}, {-2.5, "-2.5"},
        {1.0 / 3.0, "0.3333333333333333"}};
    char out[64];
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        v4m_format_double(nums[i].v, out, sizeof out);
        CHECK(!strcmp(out, nums[i].s), "format %.17g -> %s (want %s)", nums[i].v, out, nums[i].s);
    }
    v4m_format_double(1.0 / 0.0, out, sizeof out);
    CHECK(!strcmp(out, "+Inf"), "+Inf: %s", out);
}

typedef struct smoke {
    v4m_family *c, *lc, *h;
    int id;
} smoke;

#define THREADS 8
#define ROUNDS 20000

static void *smoke_thread(void *arg)
{
    smoke *s = arg;
    const char *v[] = {s->id % 2 ? "odd" : "even"};
    for (int i = 0; i < ROUNDS; i++) {
        v4m_fadd(s->c, 1);
        v4m_add(v4m_series_of(s->lc, v), 1);
        v4m_fobserve(s->h, (i % 4) * 0.5);
    }
    return NULL;
}

typedef struct render_arg {
    v4m_registry *r;
    volatile int stop;
    int renders, bad;
} render_arg;

/* Every rendering must be self-consistent: the +Inf bucket equals _count. */
static void *render_thread(void *arg)
{
    render_arg *ra = arg;
    while (!ra->stop) {
        char *t = v4m_render(ra->r, NULL);
        const char *inf = t ? strstr(t, "h_bucket{le=\"+Inf\"} ") : NULL;
        const char *cnt = t ? strstr(t, "h_count ") : NULL;
        if (!inf || !cnt || strtoull(inf + strlen("h_bucket{le=\"+Inf\"} "), NULL, 10) != strtoull(cnt + 8, NULL, 10))
            ra->bad++;
        ra->renders++;
        free(t);
    }
    return NULL;
}

static void t_concurrency(void)
{
    v4m_registry *r = v4m_new();
    static const double b[] = {0.25, 1};
    static const char *const lab[] = {"parity", NULL};
    smoke s[THREADS];
    v4m_family *c = v4m_family_new(r, V4M_COUNTER, "c_total", "", NULL, NULL, 0);
    v4m_family *lc = v4m_family_new(r, V4M_COUNTER, "lc_total", "", lab, NULL, 0);
    v4m_family *h = v4m_family_new(r, V4M_HISTOGRAM, "h", "", NULL, b, 2);
    v4m_fobserve(h, 0);   /* the series exists before the renderer starts */
    render_arg ra = {r, 0, 0, 0};
    pthread_t th[THREADS], rt;
    pthread_create(&rt, NULL, render_thread, &ra);
    for (int i = 0; i < THREADS; i++) {
        s[i] = (smoke){c, lc, h, i};
        pthread_create(&th[i], NULL, smoke_thread, &s[i]);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    ra.stop = 1;
    pthread_join(rt, NULL);
    const char *odd[] = {"odd"}, *even[] = {"even"};
    CHECK(v4m_value(v4m_series_of(c, NULL)) == THREADS * ROUNDS, "counter total %g",
          v4m_value(v4m_series_of(c, NULL)));
    CHECK(v4m_value(v4m_series_of(lc, odd)) == THREADS / 2 * ROUNDS &&
              v4m_value(v4m_series_of(lc, even)) == THREADS / 2 * ROUNDS,
          "labelled totals");
    CHECK(v4m_value(v4m_series_of(h, NULL)) == THREADS * ROUNDS + 1, "histogram count");
    char *t = v4m_render(r, NULL);
    char want[200];
    /* per thread: i%4 = 0 -> 0 (<= 0.25), 1 -> 0.5 (<= 1), 2 -> 1.0 (<= 1), 3 -> 1.5 (+Inf) */
    snprintf(want, sizeof want, "h_bucket{le=\"0.25\"} %d\nh_bucket{le=\"1\"} %d\nh_bucket{le=\"+Inf\"} %d\nh_sum %d\n",
             THREADS * ROUNDS / 4 + 1, THREADS * ROUNDS * 3 / 4 + 1, THREADS * ROUNDS + 1, THREADS * ROUNDS / 4 * 3);
    CHECK(t && strstr(t, want), "concurrent histogram:\n%s\nwant:\n%s", t, want);
    CHECK(ra.renders > 0 && ra.bad == 0, "%d renders, %d inconsistent", ra.renders, ra.bad);
    free(t);
    v4m_free(r);
}

/* The worker's metric set: every family documented, zero baselines, info labels. */
static void t_worker_set(void)
{
    v4_wmetrics m;
    CHECK(v4_wmetrics_init(&m, "tiny", "w-1") == 0, "init");
    v4_wtask_figs ok = {NULL, 0.5, 0.02, 0.004, 0.1, 7, 5, 90, 4, 2};
    v4_wtask_figs bad = {"model_not_available", -1, -1, -1, 0.001, 0, 0, 0, 0, 0};
    v4_wmetrics_task(&m, &ok);
    v4_wmetrics_task(&m, &bad);
    v4_wmetrics_broker(&m, 1, 3);
    v4_util_stats us = {.sent = 4, .dropped = 1, .pending = 2};
    v4_wmetrics_redis(&m, &us);
    char *t = v4m_render(m.reg, NULL);
    static const char *const must[] = {
        "v4fleet:request_success_total 1\n", "v4fleet:request_failure_total{code=\"model_not_available\"} 1\n",
        "v4fleet:request_failure_total{code=\"deadline_exceeded\"} 0\n", "v4fleet:prompt_tokens_total 7\n",
        "v4fleet:generation_tokens_total 5\n", "v4fleet:time_to_first_token_seconds_count 1\n",
        "v4fleet:inter_token_latency_seconds_count 1\n", "v4fleet:e2e_request_latency_seconds_count 2\n",
        "v4fleet:queue_wait_seconds_count 1\n", "v4fleet:broker_reconnects_total 2\n", "v4fleet:broker_connected 1\n",
        "v4fleet:redis_counter_records{state=\"sent\"} 4\n", "v4fleet:redis_counter_records{state=\"dropped\"} 1\n",
        "v4fleet:redis_counter_records{state=\"pending\"} 2\n",
        "v4fleet:expert_activations_total{outcome=\"hit\"} 90\n",
        "v4fleet:expert_activations_total{outcome=\"miss\"} 4\n",
        "v4fleet:expert_activations_total{outcome=\"prefetched\"} 2\n", "v4fleet:tasks_abandoned_total 0\n",
        "v4fleet:model_reloads_total{result=\"ok\"} 0\n", "v4fleet:model_reloads_total{result=\"failed\"} 0\n", "v4fleet:info{model=\"tiny\",worker=\"w-1\"} 1\n",
        "# TYPE v4fleet:expert_cache_hits_total counter\n", "# TYPE v4fleet:ready gauge\n",
        "v4fleet:time_to_first_token_seconds_bucket{le=\"0.02\"} 1\n",
        "v4fleet:time_to_first_token_seconds_bucket{le=\"0.01\"} 0\n"};
    for (size_t i = 0; i < sizeof must / sizeof must[0]; i++)
        CHECK(t && strstr(t, must[i]), "worker metrics lack: %s", must[i]);
    CHECK(t && !strstr(t, "tier=\"host\""), "no host-cache series while experts are resident");
    free(t);
    v4_wmetrics_numerics(&m, "fast");
    t = v4m_render(m.reg, NULL);
    CHECK(t && strstr(t, "v4fleet:numerics{mode=\"fast\"} 1\n") && strstr(t, "v4fleet:numerics{mode=\"exact\"} 0\n"),
          "numerics series (fast)");
    free(t);
    /* the fast mode's self-test: none before a verdict, then which product failed and how */
    t = v4m_render(m.reg, NULL);
    CHECK(t && strstr(t, "# TYPE v4fleet:fast_selftest gauge\n") && !strstr(t, "v4fleet:fast_selftest{"),
          "fast_selftest: the family, no series yet");
    free(t);
    v4_fast_selftest none = {.state = V4_FAST_NOT_RUN};
    v4_wmetrics_fast_selftest(&m, &none);
    v4_fast_selftest bad_st = {.state = V4_FAST_FAILED, .product = "fp8 block-scaled",
                               .status = "CUBLAS_STATUS_NOT_SUPPORTED", .code = 15,
                               .detail = "self-test: fp8 block-scaled product: fast-mode plan: not supported"};
    v4_wmetrics_fast_selftest(&m, &bad_st);
    t = v4m_render(m.reg, NULL);
    CHECK(t && strstr(t, "v4fleet:fast_selftest{result=\"failed\",product=\"fp8 block-scaled\","
                         "status=\"CUBLAS_STATUS_NOT_SUPPORTED\",code=\"15\"} 1\n"),
          "fast_selftest: the failed product and its cuBLAS status:\n%s", t ? t : "(none)");
    free(t);
    /* a reload onto an engine whose self-test passed: the old verdict 0, the new one 1 */
    v4_fast_selftest ok_st = {.state = V4_FAST_PASSED};
    v4_wmetrics_fast_selftest(&m, &ok_st);
    t = v4m_render(m.reg, NULL);
    CHECK(t && strstr(t, "v4fleet:fast_selftest{result=\"passed\",product=\"all\",status=\"ok\",code=\"0\"} 1\n") &&
              strstr(t, "v4fleet:fast_selftest{result=\"failed\",product=\"fp8 block-scaled\","
                        "status=\"CUBLAS_STATUS_NOT_SUPPORTED\",code=\"15\"} 0\n"),
          "fast_selftest after a reload");
    free(t);
    v4_fast_selftest cu_st = {.state = V4_FAST_UNAVAILABLE, .product = "setup",
                              .status = "cudaErrorMemoryAllocation", .code = 2};
    v4_wmetrics_fast_selftest(&m, &cu_st);
    t = v4m_render(m.reg, NULL);
    CHECK(t && strstr(t, "v4fleet:fast_selftest{result=\"unavailable\",product=\"setup\","
                         "status=\"cudaErrorMemoryAllocation\",code=\"2\"} 1\n") &&
              strstr(t, "v4fleet:fast_selftest{result=\"passed\",product=\"all\",status=\"ok\",code=\"0\"} 0\n"),
          "fast_selftest: cuBLASLt unavailable");
    free(t);
    v4_wmetrics_fast_selftest(&m, &none);   /* an engine without a self-test: every series 0 */
    t = v4m_render(m.reg, NULL);
    CHECK(t && !strstr(t, "v4fleet:fast_selftest{result=\"unavailable\",product=\"setup\","
                          "status=\"cudaErrorMemoryAllocation\",code=\"2\"} 1\n"),
          "fast_selftest: no verdict of a replaced engine stays 1");
    {   /* a CPU backend ran no self-test: the engine says not_run */
        v4_error err = {0};
        v4_backend *cb = v4_cpu_backend_create(1, "scalar", &err);
        v4_fast_selftest ft = {.state = V4_FAST_FAILED};
        if (cb)
            v4_backend_fast_selftest(cb, &ft);
        CHECK(cb && ft.state == V4_FAST_NOT_RUN && !ft.product[0] && !strcmp(v4_fast_state_name(ft.state), "not_run"),
              "CPU backend: fast self-test not run");
        if (cb)
            cb->ops->destroy(cb);
    }
    v4_runner_cache_figs cf = {10, 2, 4096, 2048, 8192};
    v4_wmetrics_cache(&m, "host", &cf);
    free(t);
    t = v4m_render(m.reg, NULL);
    CHECK(t && strstr(t, "v4fleet:expert_cache_hits_total{tier=\"host\"} 10\n") &&
              strstr(t, "v4fleet:expert_cache_bytes_in_use{tier=\"host\"} 2048\n") &&
              strstr(t, "v4fleet:expert_cache_budget_bytes{tier=\"host\"} 8192\n"),
          "host cache series");
    CHECK(t && !strstr(t, "tier=\"gpu\""), "no GPU-cache series before a GPU cache reports");
    {   /* a CPU backend has no GPU tier: the worker adds no gpu series */
        v4_error err = {0};
        v4_backend *cb = v4_cpu_backend_create(1, "scalar", &err);
        v4_runner_cache_figs g0 = {1, 1, 1, 1, 1};
        CHECK(cb && v4_gpu_cache_figs_get(cb, &g0) == -1 && g0.hits == 0 && g0.budget_bytes == 0,
              "CPU backend: no GPU cache figures");
        if (cb)
            cb->ops->destroy(cb);
    }
    v4_runner_cache_figs gf = {7, 3, 1 << 20, 1 << 22, 1 << 22};
    v4_wmetrics_cache(&m, "gpu", &gf);
    free(t);
    t = v4m_render(m.reg, NULL);
    CHECK(t && strstr(t, "v4fleet:expert_cache_misses_total{tier=\"gpu\"} 3\n") &&
              strstr(t, "v4fleet:expert_cache_bytes_read_total{tier=\"gpu\"} 1048576\n") &&
              strstr(t, "v4fleet:expert_cache_budget_bytes{tier=\"gpu\"} 4194304\n") &&
              strstr(t, "v4fleet:expert_cache_hits_total{tier=\"host\"} 10\n"),
          "GPU cache series next to the host's");
    /* every family has HELP and TYPE, every sample line belongs to a documented family */
    int fams = 0;
    for (const char *p = t; p && (p = strstr(p, "# TYPE ")); p++)
        fams++;
    CHECK(fams == 45, "%d families", fams);   /* 24 + numerics, results_unconfirmed_total, tasks_abandoned_total,
                                               * expert_activations_total, memory_bytes, memory_waits_total,
                                               * fast_selftest, grammar_cache_{hits,misses}_total,
                                               * grammar_cache_{bytes,entries}, results_unroutable_total,
                                               * tasks_cancelled_total, cancel_messages_total, tasks_taken_total,
                                               * prefix_cache_{lookups,tokens_saved,evictions}_total,
                                               * prefix_cache_{bytes,budget_bytes,blocks} */
    CHECK(t && strstr(t, "# TYPE v4fleet:prefix_cache_lookups_total counter\n") &&
              strstr(t, "# TYPE v4fleet:prefix_cache_budget_bytes gauge\n") &&
              !strstr(t, "\nv4fleet:prefix_cache_bytes "),
          "prefix cache families documented, no series before a runner with a cache reports");
    CHECK(t && strstr(t, "v4fleet:tasks_cancelled_total{stage=\"running\"} 0\n") &&
              strstr(t, "v4fleet:tasks_cancelled_total{stage=\"queued\"} 0\n") &&
              strstr(t, "v4fleet:cancel_messages_total 0\n") &&
              strstr(t, "v4fleet:tasks_taken_total{lane=\"urgent\"} 0\n") &&
              strstr(t, "v4fleet:request_failure_total{code=\"cancelled\"} 0\n"),
          "cancellation and lane counters, zero from the start");
    CHECK(t && strstr(t, "# TYPE v4fleet:results_unroutable_total counter\n") &&
              strstr(t, "v4fleet:results_unroutable_total 0\n"),
          "the unroutable results counter, zero from the start");
    CHECK(t && strstr(t, "# TYPE v4fleet:memory_bytes gauge\n"), "the memory split family");
    CHECK(t && strstr(t, "# TYPE v4fleet:memory_waits_total counter\n") &&
              strstr(t, "v4fleet:memory_waits_total{kind=\"stall\"} 0\n"),
          "the memory waits family, zero from the start");
    free(t);
    /* memory waits: deltas add up, a negative one (a new executor) counts 0 */
    v4_wmetrics_memory_waits(&m, 2, 1, 5);
    v4_wmetrics_memory_waits(&m, 0, -1, 3);
    t = v4m_render(m.reg, NULL);
    CHECK(t && strstr(t, "v4fleet:memory_waits_total{kind=\"admission\"} 2\n") &&
              strstr(t, "v4fleet:memory_waits_total{kind=\"retry\"} 1\n") &&
              strstr(t, "v4fleet:memory_waits_total{kind=\"stall\"} 8\n"),
          "memory waits counted: %s", t ? strstr(t, "v4fleet:memory_waits_total{") : "(none)");
    free(t);
    v4_wmetrics_warmup(&m, 1.5, 12);
    v4_wmetrics_reload(&m, 1);
    v4_wmetrics_reload(&m, 0);
    v4_wmetrics_reload(&m, 0);
    t = v4m_render(m.reg, NULL);
    CHECK(t && strstr(t, "v4fleet:warmup_seconds 1.5\n") && strstr(t, "v4fleet:warmup_experts_loaded 12\n") &&
              strstr(t, "v4fleet:model_reloads_total{result=\"ok\"} 1\n") &&
              strstr(t, "v4fleet:model_reloads_total{result=\"failed\"} 2\n"),
          "warm-up and reload series");
    free(t);
    v4_wmetrics_free(&m);
}

int main(void)
{
    t_exact();
    t_histogram();
    t_escaping();
    t_concurrency();
    t_worker_set();
    TEST_DONE();
}
