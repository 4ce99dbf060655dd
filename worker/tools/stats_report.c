/* stats_report.c - see stats_report.h.
 *
 * Both printers walk the layers once with v4_umat_layer_stats; the fleet figures
 * are accumulated on the way (fleet_acc) so text and JSON agree by construction.
 */
#include "stats_report.h"

#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>

typedef struct fleet_acc {
    int with_data;
    double sum_cv, max_cv;
    int max_cv_layer;     /* -1: none */
    long long idle;
} fleet_acc;

static void fleet_add(fleet_acc *a, int layer, const v4_umat_layer *s)
{
    a->idle += s->idle;
    if (isnan(s->cv))
        return;
    a->with_data++;
    a->sum_cv += s->cv;
    if (a->max_cv_layer < 0 || s->cv > a->max_cv) {
        a->max_cv = s->cv;
        a->max_cv_layer = layer;
    }
}

static double share_pct(const v4_umat *u, int layer, int e, uint64_t assignments)
{
    uint64_t c = u->counts[(size_t)layer * (size_t)u->experts + (size_t)e];
    return assignments ? 100.0 * (double)c / (double)assignments : 0.0;
}

static void fmt_routed(char *buf, size_t cap, const v4_umat_layer *s, int k)
{
    if (s->assignments % (uint64_t)k == 0)
        snprintf(buf, cap, "%" PRIu64, s->assignments / (uint64_t)k);
    else
        snprintf(buf, cap, "%.1f", s->routed_tokens);
}

static void fmt_opt(char *buf, size_t cap, const char *fmt, double v)
{
    if (isnan(v))
        snprintf(buf, cap, "-");
    else
        snprintf(buf, cap, fmt, v);
}

static void print_source_text(FILE *f, const v4_stats_report *r)
{
    if (!r->n_buckets) {
        fprintf(f, "source: total (%s:util:%s:total)\n", r->prefix, r->model);
    } else if (r->hours) {
        fprintf(f, "source: %zu bucket%s started in the last %d hour%s (%s .. %s UTC)\n",
                r->n_buckets, r->n_buckets == 1 ? "" : "s", r->hours, r->hours == 1 ? "" : "s",
                r->buckets[0], r->buckets[r->n_buckets - 1]);
    } else {
        fprintf(f, "source: bucket %s UTC (%s:util:%s:b:%s)\n", r->buckets[0], r->prefix,
                r->model, r->buckets[0]);
    }
}

void v4_stats_print_text(FILE *f, const v4_stats_report *r, const v4_umat *u)
{
    fprintf(f, "model: %s   prefix: %s   redis: %s\n", r->model, r->prefix, r->redis);
    print_source_text(f, r);
    fprintf(f, "tasks: %" PRIu64 "   tokens: %" PRIu64 "   shape: %d layers, %d routed experts, "
            "top-%d\n", u->tasks, u->tokens, u->layers, u->experts, u->top_k);
    if (u->hits + u->misses + u->prefetched)
        fprintf(f,
                "expert cache: %" PRIu64 " hits, %" PRIu64 " misses, %" PRIu64
                " prefetched (hit rate %.1f%%), %.1f MiB loaded\n",
                u->hits, u->misses, u->prefetched,
                100.0 * (double)u->hits / (double)(u->hits + u->misses + u->prefetched), u->kib_loaded / 1024.0);
    fprintf(f, "%5s %12s %12s %7s %8s %5s  %s\n", "layer", "routed", "std", "cv", "max/mean",
            "idle", r->top_n ? "top experts: id(share of the layer's assignments)" : "");
    int *top = r->top_n ? malloc(sizeof *top * (size_t)r->top_n) : NULL;
    int top_n = top ? r->top_n : 0;
    fleet_acc fa = {0, 0, 0, -1, 0};
    for (int l = 0; l < u->layers; l++) {
        v4_umat_layer s;
        v4_umat_layer_stats(u, l, top_n, top, &s);
        fleet_add(&fa, l, &s);
        char routed[32], cv[32], mm[32];
        fmt_routed(routed, sizeof routed, &s, u->top_k);
        fmt_opt(cv, sizeof cv, "%.3f", s.cv);
        fmt_opt(mm, sizeof mm, "%.2f", s.max_over_mean);
        fprintf(f, "%5d %12s %12.2f %7s %8s %5d ", l, routed, s.std, cv, mm, s.idle);
        for (int k = 0; k < s.n_top; k++)
            fprintf(f, " %d(%.1f%%)", top[k], share_pct(u, l, top[k], s.assignments));
        if (r->top_n && !s.n_top)
            fprintf(f, " -");
        fputc('\n', f);
    }
    free(top);
    if (fa.with_data)
        fprintf(f, "fleet: mean CV %.3f over %d/%d layers with data; max CV %.3f (layer %d); "
                "%lld idle of %lld experts\n", fa.sum_cv / fa.with_data, fa.with_data, u->layers,
                fa.max_cv, fa.max_cv_layer, fa.idle, (long long)u->layers * u->experts);
    else
        fprintf(f, "fleet: no routed tokens recorded at any layer\n");
    if (r->png_path)
        fprintf(f, "heatmap: %s (%d x %d px: x = expert, y = layer; color = count / layer mean, "
                "linear 0 .. 2x, gray = layer without data)\n", r->png_path, r->png_w, r->png_h);
}

/* ---------------------------------------------------------------- JSON */

static json_t *real_or_null(double v)
{
    return isnan(v) ? json_null() : json_real(v);
}

static json_t *source_json(const v4_stats_report *r)
{
    if (!r->n_buckets)
        return json_pack("{s:s}", "kind", "total");
    json_t *o = json_pack("{s:s, s:I, s:s, s:s}", "kind", r->hours ? "buckets" : "bucket",
                          "count", (json_int_t)r->n_buckets, "first", r->buckets[0], "last",
                          r->buckets[r->n_buckets - 1]);
    if (o && r->hours)
        json_object_set_new(o, "hours", json_integer(r->hours));
    return o;
}

static json_t *layer_json(const v4_umat *u, int l, const v4_umat_layer *s, const int *top)
{
    json_t *jt = json_array();
    for (int k = 0; jt && k < s->n_top; k++) {
        uint64_t c = u->counts[(size_t)l * (size_t)u->experts + (size_t)top[k]];
        json_array_append_new(jt, json_pack("{s:i, s:I, s:f}", "expert", top[k], "count",
                                            (json_int_t)c, "share",
                                            share_pct(u, l, top[k], s->assignments) / 100.0));
    }
    return json_pack("{s:i, s:f, s:I, s:f, s:f, s:o, s:o, s:i, s:o}", "layer", l,
                     "routed_tokens", s->routed_tokens, "assignments", (json_int_t)s->assignments,
                     "mean", s->mean, "std", s->std, "cv", real_or_null(s->cv),
                     "max_over_mean", real_or_null(s->max_over_mean), "idle", s->idle, "top", jt);
}

int v4_stats_print_json(FILE *f, const v4_stats_report *r, const v4_umat *u, v4_error *err)
{
    json_t *layers = json_array();
    int *top = r->top_n ? malloc(sizeof *top * (size_t)r->top_n) : NULL;
    if (!layers || (r->top_n && !top)) {
        json_decref(layers);
        free(top);
        return v4_err_set(err, V4_ERR_NOMEM, "json", "out of memory");
    }
    fleet_acc fa = {0, 0, 0, -1, 0};
    for (int l = 0; l < u->layers; l++) {
        v4_umat_layer s;
        v4_umat_layer_stats(u, l, r->top_n, top, &s);
        fleet_add(&fa, l, &s);
        json_array_append_new(layers, layer_json(u, l, &s, top));
    }
    free(top);
    json_t *fleet = json_pack("{s:i, s:o, s:o, s:o, s:I}", "layers_with_data", fa.with_data,
                              "mean_cv", fa.with_data ? json_real(fa.sum_cv / fa.with_data) : json_null(),
                              "max_cv", fa.with_data ? json_real(fa.max_cv) : json_null(),
                              "max_cv_layer", fa.with_data ? json_integer(fa.max_cv_layer) : json_null(),
                              "idle_experts", (json_int_t)fa.idle);
    json_t *root = json_pack("{s:s, s:s, s:s, s:o, s:I, s:I, s:{s:i, s:i, s:i}, s:o, s:o}",
                             "model", r->model, "prefix", r->prefix, "redis", r->redis,
                             "source", source_json(r), "tasks", (json_int_t)u->tasks,
                             "tokens", (json_int_t)u->tokens, "shape", "layers", u->layers,
                             "experts", u->experts, "top_k", u->top_k, "layers", layers,
                             "fleet", fleet);
    if (root)
        json_object_set_new(root, "expert_cache", json_pack("{s:I, s:I, s:I, s:I}", "hits", (json_int_t)u->hits,
                                                            "misses", (json_int_t)u->misses, "prefetched",
                                                            (json_int_t)u->prefetched, "kib_loaded",
                                                            (json_int_t)u->kib_loaded));
    if (root && r->png_path)
        json_object_set_new(root, "heatmap", json_pack("{s:s, s:i, s:i}", "path", r->png_path,
                                                       "width", r->png_w, "height", r->png_h));
    char *s = root ? json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(10)) : NULL;
    json_decref(root);
    if (!s)
        return v4_err_set(err, V4_ERR_NOMEM, "json", "cannot build the JSON report");
    fprintf(f, "%s\n", s);
    free(s);
    return 0;
}
