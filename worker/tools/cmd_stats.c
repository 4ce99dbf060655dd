/* cmd_stats.c - `v4fleet stats`: fleet expert-utilization report from the per-
 * (layer, routed expert) token counters that the workers keep in Redis, as a text
 * table or JSON, optionally with a PNG heatmap.
 *
 * Design: options -> connect (stats_redis.c over telemetry/redis_conn.c: URL, 2 s timeouts,
 * AUTH/SELECT; key names from telemetry/util_redis.h) ->
 * pick the model (--model, else the only <prefix>:util:*:total key found by SCAN)
 * -> read the source into a v4_umat (stats_util.c): the total hash (default), one
 * bucket (--bucket), or the sum of the buckets that started in the last H hours
 * (--hours; bucket names are UTC start minutes, found by SCAN and filtered by name)
 * -> optional heatmap (heatmap_png.c; cell value = count / layer mean, drawn
 * linearly over 0 .. 2x the mean) -> report (stats_report.c).
 *
 * Ownership: everything is local to v4_cmd_stats and released before it returns.
 * Exit status: 0 ok; 1 Redis/data/file error or no data (one line "v4fleet stats:
 * <where>: <message>" on stderr); 2 usage error (message + usage on stderr).
 * Thread: main thread only.
 */
#include <math.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_util.h"
#include "commands.h"
#include "heatmap_png.h"
#include "stats_report.h"
#include "telemetry/stats_redis.h"
#include "telemetry/stats_util.h"
#include "telemetry/util_redis.h"

#define PROG "v4fleet stats"
#define DEFAULT_URL "redis://127.0.0.1:6379/0"
#define MAX_NAME 200

typedef struct stats_opts {
    const char *url, *prefix, *model, *bucket, *png, *counts;
    int hours, top, json, help;
} stats_opts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: v4fleet stats [--redis URL] [--prefix P] [--model NAME]\n"
            "                     [--bucket YYYYmmddHHMM | --hours H] [--top N] [--json] [--png FILE]\n"
            "                     [--counts FILE]\n"
            "\n"
            "Expert-utilization report of the fleet: per layer, the routed tokens, the\n"
            "busiest experts and the load balance (std, CV = std/mean, max/mean over all\n"
            "routed experts), from the counters the workers keep in Redis.\n"
            "\n"
            "options:\n"
            "  --redis URL     redis://[[user]:password@]host[:port][/db]\n"
            "                  (default: $V4_REDIS_URL, else " DEFAULT_URL ")\n"
            "  --prefix P      key prefix (default v4)\n"
            "  --model NAME    model name in the keys (default: the only one found)\n"
            "  --bucket T      one time bucket, T = its UTC start YYYYmmddHHMM\n"
            "  --hours H       sum the buckets that started in the last H hours\n"
            "                  (default: the all-time total)\n"
            "  --top N         busiest experts listed per layer (default 5, 0..1000)\n"
            "  --json          one JSON object instead of the table\n"
            "  --png FILE      also write an experts x layers heatmap PNG (x = expert,\n"
            "                  y = layer, color = count / layer mean, linear 0..2x, clamped;\n"
            "                  gray = layer without data)\n"
            "  --counts FILE   also write every expert's count, one 'layer expert count'\n"
            "                  line each (the routing skew for cachesim --popularity)\n"
            "  -h, --help      this help\n");
}

static int bad_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, PROG ": ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    usage(stderr);
    return -1;
}

static int parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

static int parse_args(int argc, char **argv, stats_opts *o)
{
    memset(o, 0, sizeof *o);
    o->prefix = "v4";
    o->top = 5;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            o->help = 1;
            continue;
        }
        if (!strcmp(a, "--json")) {
            o->json = 1;
            continue;
        }
        static const char *const with_value[] = {"--redis", "--prefix", "--model", "--bucket",
                                                 "--hours", "--top", "--png", "--counts"};
        int known = 0;
        for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++)
            known |= !strcmp(a, with_value[k]);
        if (!known)
            return bad_usage("unknown argument '%s'", a);
        if (i + 1 >= argc)
            return bad_usage("%s needs a value", a);
        const char *v = argv[++i];
        if (!strcmp(a, "--redis")) {
            o->url = v;
        } else if (!strcmp(a, "--prefix") || !strcmp(a, "--model")) {
            if (!*v || strlen(v) > MAX_NAME)
                return bad_usage("%s wants a non-empty name of at most 200 bytes", a);
            *(a[2] == 'p' ? &o->prefix : &o->model) = v;
        } else if (!strcmp(a, "--bucket")) {
            time_t t;
            if (v4_stats_bucket_time(v, &t))
                return bad_usage("--bucket wants a UTC minute YYYYmmddHHMM, got '%s'", v);
            o->bucket = v;
        } else if (!strcmp(a, "--hours")) {
            if (parse_int(v, 1, 24 * 366 * 10, &o->hours))
                return bad_usage("--hours wants an integer in [1, 87840], got '%s'", v);
        } else if (!strcmp(a, "--top")) {
            if (parse_int(v, 0, 1000, &o->top))
                return bad_usage("--top wants an integer in [0, 1000], got '%s'", v);
        } else {
            if (!*v)
                return bad_usage("%s wants a file name", a);
            *(!strcmp(a, "--png") ? &o->png : &o->counts) = v;
        }
    }
    if (o->bucket && o->hours)
        return bad_usage("--bucket and --hours exclude each other%s", "");
    return 0;
}

/* ---------------------------------------------------------------- model and source */

static int fail(const v4_error *e)
{
    v4_print_error("stats", e);
    return 1;
}

/* The model to report: --model, else the only model with a total hash. */
static int pick_model(v4_stats_redis *r, const stats_opts *o, char *model, size_t cap,
                      v4_error *err)
{
    if (o->model) {
        snprintf(model, cap, "%s", o->model);
        return 0;
    }
    char **names = NULL;
    size_t n = 0;
    if (v4_stats_list_models(r, o->prefix, &names, &n, err))
        return -1;
    if (n == 1) {
        snprintf(model, cap, "%s", names[0]);
        v4_stats_free_names(names, n);
        return 0;
    }
    char where[300];
    v4_util_key_total(o->prefix, "*", where, sizeof where);
    if (n == 0) {
        v4_err_set(err, V4_ERR_MISSING, where,
                   "no utilization data: no key matches (is the prefix right? --prefix)");
    } else {
        char list[400] = "";
        size_t len = 0;
        for (size_t i = 0; i < n && len + 8 < sizeof list; i++)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%s", i ? ", " : "", names[i]);
        if (len >= sizeof list)
            snprintf(list + sizeof list - 5, 5, "...");
        v4_err_set(err, V4_ERR_INVALID, where, "%zu models found (%s); choose one with --model",
                   n, list);
    }
    v4_stats_free_names(names, n);
    return -1;
}

/* The key of the bucket named name (YYYYmmddHHMM). */
static void bucket_key(const char *prefix, const char *model, const char *name, char *key, size_t n)
{
    v4_util_key_bucket_prefix(prefix, model, key, n);
    size_t len = strlen(key);
    snprintf(key + len, n - len, "%s", name);
}

/* --hours: the names of the buckets that started after now - H hours. */
static int recent_buckets(v4_stats_redis *r, const stats_opts *o, const char *model,
                          char ***out, size_t *n_out, v4_error *err)
{
    char **names = NULL;
    size_t n = 0;
    if (v4_stats_list_buckets(r, o->prefix, model, &names, &n, err))
        return -1;
    time_t cut = time(NULL) - (time_t)o->hours * 3600;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        time_t t;
        if (v4_stats_bucket_time(names[i], &t) == 0 && t > cut)
            names[k++] = names[i];
        else
            free(names[i]);
    }
    *out = names;
    *n_out = k;
    if (k == 0) {
        char where[600];
        bucket_key(o->prefix, model, "*", where, sizeof where);
        v4_err_set(err, V4_ERR_MISSING, where,
                   "no data: none of the %zu bucket%s started in the last %d hour%s", n,
                   n == 1 ? "" : "s", o->hours, o->hours == 1 ? "" : "s");
        return -1;
    }
    return 0;
}

/* Read the source into u; fills the bucket list for the report. */
static int read_source(v4_stats_redis *r, const stats_opts *o, const char *model, v4_umat *u,
                       char ***buckets, size_t *n_buckets, v4_error *err)
{
    char key[600];
    int found;
    *buckets = NULL;
    *n_buckets = 0;
    if (!o->hours) {
        if (o->bucket)
            bucket_key(o->prefix, model, o->bucket, key, sizeof key);
        else
            v4_util_key_total(o->prefix, model, key, sizeof key);
        if (v4_stats_read_hash(r, key, u, &found, err))
            return -1;
        if (!found)
            return v4_err_set(err, V4_ERR_MISSING, key, "no data: the key does not exist%s",
                              o->model ? " (is the model name right? --model)" : "");
        if (o->bucket) {
            if (!(*buckets = malloc(sizeof **buckets)) || !(**buckets = strdup(o->bucket))) {
                free(*buckets);
                *buckets = NULL;
                return v4_err_set(err, V4_ERR_NOMEM, key, "out of memory");
            }
            *n_buckets = 1;
        }
        return 0;
    }
    char **names = NULL;
    size_t n = 0;
    if (recent_buckets(r, o, model, &names, &n, err)) {
        v4_stats_free_names(names, n);
        return -1;
    }
    size_t k = 0;   /* buckets actually read: one may expire between SCAN and HGETALL */
    for (size_t i = 0; i < n; i++) {
        bucket_key(o->prefix, model, names[i], key, sizeof key);
        if (v4_stats_read_hash(r, key, u, &found, err)) {
            v4_stats_free_names(names, n);
            return -1;
        }
        if (found)
            names[k++] = names[i];
        else
            free(names[i]);
    }
    *buckets = names;
    *n_buckets = k;
    if (!k)
        return v4_err_set(err, V4_ERR_MISSING, model, "no data: the recent buckets expired");
    return 0;
}

/* ---------------------------------------------------------------- heatmap */

/* count / layer mean for every cell; NaN for a layer without data. */
static int write_heatmap(const char *path, const v4_umat *u, int *w, int *h, v4_error *err)
{
    float *v = malloc(sizeof *v * (size_t)u->layers * (size_t)u->experts);
    if (!v)
        return v4_err_set(err, V4_ERR_NOMEM, path, "out of memory for the heatmap");
    for (int l = 0; l < u->layers; l++) {
        v4_umat_layer s;
        v4_umat_layer_stats(u, l, 0, NULL, &s);
        for (int e = 0; e < u->experts; e++) {
            size_t i = (size_t)l * (size_t)u->experts + (size_t)e;
            v[i] = s.mean > 0 ? (float)((double)u->counts[i] / s.mean) : NAN;
        }
    }
    v4_heatmap hm = {.v = v, .rows = u->layers, .cols = u->experts, .vmin = 0.0f, .vmax = 2.0f};
    v4_heatmap_cell_size(hm.rows, hm.cols, &hm.cell_w, &hm.cell_h);
    int rc = v4_heatmap_write_png(path, &hm, err);
    free(v);
    *w = hm.cols * hm.cell_w;
    *h = hm.rows * hm.cell_h;
    return rc;
}

/* Every (layer, expert) count of u as text lines "layer expert count" after a comment
 * header naming the source: the format `cachesim --popularity` reads. */
static int write_counts(const char *path, const v4_umat *u, const char *model, const v4_stats_report *rep,
                        v4_error *err)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return v4_err_set(err, V4_ERR_IO, path, "cannot create: %s", strerror(errno));
    fprintf(f, "# v4fleet stats --counts: model %s, %d layers x %d experts, top-%d, %llu tokens, %s\n"
               "# layer expert count\n",
            model, u->layers, u->experts, u->top_k, (unsigned long long)u->tokens,
            rep->hours ? "recent buckets" : rep->n_buckets ? "one bucket" : "all-time total");
    for (int l = 0; l < u->layers; l++)
        for (int e = 0; e < u->experts; e++)
            fprintf(f, "%d %d %llu\n", l, e, (unsigned long long)u->counts[(size_t)l * u->experts + e]);
    if (ferror(f) | fclose(f))
        return v4_err_set(err, V4_ERR_IO, path, "write failed: %s", strerror(errno));
    return 0;
}

/* ---------------------------------------------------------------- entry point */

int v4_cmd_stats(int argc, char **argv)
{
    stats_opts o;
    if (parse_args(argc, argv, &o))
        return 2;
    if (o.help) {
        usage(stdout);
        return 0;
    }
    if (!o.url) {
        const char *env = getenv("V4_REDIS_URL");
        o.url = env && *env ? env : DEFAULT_URL;
    }
    v4_error err;
    v4_err_clear(&err);
    v4_stats_redis *r;
    if (v4_stats_redis_open(o.url, &r, &err))
        return fail(&err);

    char model[MAX_NAME + 1];
    v4_umat u = {0};
    char **buckets = NULL;
    size_t n_buckets = 0;
    int rc = 1;
    if (pick_model(r, &o, model, sizeof model, &err) ||
        read_source(r, &o, model, &u, &buckets, &n_buckets, &err)) {
        fail(&err);
        goto out;
    }
    v4_stats_report rep = {
        .model = model, .prefix = o.prefix, .redis = v4_stats_redis_display(r),
        .buckets = (const char *const *)buckets, .n_buckets = n_buckets, .hours = o.hours,
        .top_n = o.top < u.experts ? o.top : u.experts,
    };
    if (o.png) {
        if (write_heatmap(o.png, &u, &rep.png_w, &rep.png_h, &err)) {
            fail(&err);
            goto out;
        }
        rep.png_path = o.png;
    }
    if (o.counts && write_counts(o.counts, &u, model, &rep, &err)) {
        fail(&err);
        goto out;
    }
    if (o.json) {
        if (v4_stats_print_json(stdout, &rep, &u, &err)) {
            fail(&err);
            goto out;
        }
    } else {
        v4_stats_print_text(stdout, &rep, &u);
    }
    rc = fflush(stdout) ? 1 : 0;
out:
    v4_stats_free_names(buckets, n_buckets);
    v4_umat_free(&u);
    v4_stats_redis_close(r);
    return rc;
}
