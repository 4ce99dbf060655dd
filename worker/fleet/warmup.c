/* warmup.c - pre-load the hottest experts, run one short generation (see warmup.h).
 * Thread: the runner's thread. */
#include "warmup.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "telemetry/stats_redis.h"
#include "telemetry/stats_util.h"
#include "telemetry/util_redis.h"
#include "cache/expert_provider.h"
#include "config/model_config.h"
#include "worker/serve/task_run.h"

typedef struct ranked {
    uint64_t count;
    int layer, expert;
} ranked;

static int by_count_desc(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->count != y->count)
        return x->count < y->count ? 1 : -1;
    if (x->layer != y->layer)
        return x->layer - y->layer;
    return x->expert - y->expert;
}

/* The fleet's all-time counts of this model, ranked; NULL (note set) when there are none. */
static ranked *fetch_ranking(const v4_warmup_opts *o, const v4_config *mc, int *n, char *note, size_t nn)
{
    *n = 0;
    if (!o->redis_url || !o->redis_url[0] || !strcmp(o->redis_url, "off")) {
        snprintf(note, nn, "no Redis (V4_REDIS_URL=off): experts load on demand");
        return NULL;
    }
    v4_stats_redis *rc = NULL;
    v4_error err = {0};
    if (v4_stats_redis_open(o->redis_url, &rc, &err)) {
        snprintf(note, nn, "fleet statistics unavailable (%.100s: %.200s): experts load on demand", err.where, err.msg);
        return NULL;
    }
    char key[512];
    v4_util_key_total(o->prefix, o->model, key, sizeof key);
    v4_umat u = {0};
    int found = 0;
    ranked *out = NULL;
    if (v4_stats_read_hash(rc, key, &u, &found, &err)) {
        snprintf(note, nn, "fleet statistics unreadable (%.100s: %.200s): experts load on demand", err.where, err.msg);
    } else if (!found || !u.counts) {
        snprintf(note, nn, "no fleet statistics for model \"%.100s\" yet (%.200s): experts load on demand", o->model, key);
    } else if (u.layers != mc->n_layers || u.experts != mc->n_routed_experts) {
        snprintf(note, nn, "fleet statistics %.200s are for %d layers x %d experts, the model has %d x %d: not used",
                 key, u.layers, u.experts, mc->n_layers, mc->n_routed_experts);
    } else if ((out = malloc((size_t)u.layers * (size_t)u.experts * sizeof *out))) {
        for (int l = 0; l < u.layers; l++)
            for (int x = 0; x < u.experts; x++)
                if (u.counts[(size_t)l * (size_t)u.experts + (size_t)x])
                    out[(*n)++] = (ranked){u.counts[(size_t)l * (size_t)u.experts + (size_t)x], l, x};
        qsort(out, (size_t)*n, sizeof *out, by_count_desc);
        if (!*n)
            snprintf(note, nn, "the fleet statistics %.200s count no routed token yet", key);
    } else {
        snprintf(note, nn, "out of memory ranking the fleet statistics");
    }
    v4_umat_free(&u);
    v4_stats_redis_close(rc);
    return out;
}

/* Load want[0..k) (hottest first) into the host cache, coldest first, in groups whose
 * loads are started together (prefetch) and then waited for (acquire + release). */
static int preload(v4_xprov *xp, const ranked *want, int k, char *note, size_t nn)
{
    const v4_expert_provider *p = v4_xprov_provider(xp);
    enum { GROUP = 32 };
    int loaded = 0;
    for (int hi = k; hi > 0; hi -= GROUP) {
        int lo = hi > GROUP ? hi - GROUP : 0;
        for (int i = hi - 1; i >= lo; i--)
            if (p->prefetch)
                p->prefetch(p->ud, want[i].layer, &want[i].expert, 1);
        for (int i = hi - 1; i >= lo; i--) {
            v4_expert_w w;
            v4_error err = {0};
            if (p->acquire(p->ud, want[i].layer, &want[i].expert, 1, &w, &err)) {
                snprintf(note, nn, "pre-loading expert %d:%d failed (%.100s: %.200s); the rest load on demand", want[i].layer,
                         want[i].expert, err.where, err.msg);
                return loaded;
            }
            p->release(p->ud, want[i].layer, &want[i].expert, 1);
            loaded++;
        }
    }
    return loaded;
}

int v4_warmup(v4_runner *r, const v4_warmup_opts *o, v4_warmup_report *rep, v4_task_error *e)
{
    memset(rep, 0, sizeof *rep);
    const v4_config *mc = v4_runner_config(r);
    v4_xprov *xp = v4_runner_experts(r);
    double t0 = v4_now_ms();
    if (!xp) {
        snprintf(rep->note, sizeof rep->note, "experts resident: nothing to pre-load");
    } else {
        int n = 0;
        ranked *rk = fetch_ranking(o, mc, &n, rep->note, sizeof rep->note);
        rep->experts_ranked = n;
        v4_xcache_stats a, b;
        v4_xprov_stats(xp, &a);
        int headroom = mc->n_layers * mc->n_act_experts;
        int k = a.slots - headroom < n ? a.slots - headroom : n;
        if (rk && k <= 0 && n > 0)
            snprintf(rep->note, sizeof rep->note, "the host cache (%d slots) has no room beyond one token's experts",
                     a.slots);
        if (rk && k > 0) {
            rep->experts_loaded = preload(xp, rk, k, rep->note, sizeof rep->note);
            size_t at = 0;
            for (int i = 0; i < rep->experts_loaded && i < 8 && at < sizeof rep->hottest; i++)
                at += (size_t)snprintf(rep->hottest + at, sizeof rep->hottest - at, "%s%d:%d", i ? "," : "",
                                       rk[i].layer, rk[i].expert);
        }
        v4_xprov_stats(xp, &b);
        rep->bytes_loaded = b.bytes_read - a.bytes_read;
        free(rk);
    }
    double t1 = v4_now_ms();
    rep->experts_ms = t1 - t0;
    if (o->gen_tokens > 0) {
        int32_t prompt[1] = {mc->bos_id >= 0 && mc->bos_id < mc->vocab_size ? mc->bos_id : 0};
        v4_task t;
        memset(&t, 0, sizeof t);
        t.id = "warm-up";
        t.input_ids = prompt;
        t.n_input_ids = 1;
        t.has_input_ids = 1;
        t.max_tokens = o->gen_tokens;
        t.temperature = 0;
        t.top_p = 1;
        t.ignore_eos = 1;
        v4_run_output out;
        int rc = v4_runner_run(r, &t, t1 + 600000.0, NULL, NULL, &out, e);
        rep->gen_tokens = rc ? 0 : out.n_tokens;
        v4_run_output_free(&out);
        if (rc)
            return -1;
    }
    rep->gen_ms = v4_now_ms() - t1;
    return 0;
}
