/* metrics.c - the metrics registry and its Prometheus text rendering (see metrics.h).
 *
 * Layout: families in a singly linked list (registration order), series in a linked
 * list per family (creation order); a series holds its label values, its value (counter
 * / gauge) or cumulative-free bucket counts + sum + count (histogram).  Bucket counts are
 * stored per bucket and accumulated at render time.  One registry mutex for everything.
 * Thread: any (see metrics.h).
 */
#include "metrics.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/strbuf.h"

struct v4m_series {
    v4m_series *next;
    v4m_family *fam;
    char *values[V4M_MAX_LABELS];
    double value;                           /* counter / gauge */
    double sum;                             /* histogram */
    unsigned long long count;
    unsigned long long buckets[V4M_MAX_BUCKETS + 1];   /* per bucket (last: above every bound) */
};

struct v4m_family {
    v4m_family *next;
    v4m_registry *reg;
    v4m_type type;
    char *name, *help;
    char *labels[V4M_MAX_LABELS];
    int n_labels;
    double bounds[V4M_MAX_BUCKETS];
    int n_bounds;
    v4m_series *series, *last;
};

struct v4m_registry {
    pthread_mutex_t mu;
    v4m_family *fams, *last;
};

v4m_registry *v4m_new(void)
{
    v4m_registry *r = calloc(1, sizeof *r);
    if (r)
        pthread_mutex_init(&r->mu, NULL);
    return r;
}

static void series_free(v4m_series *s, int n)
{
    for (int i = 0; i < n; i++)
        free(s->values[i]);
    free(s);
}

static void family_free(v4m_family *f)
{
    for (v4m_series *s = f->series, *nx; s; s = nx) {
        nx = s->next;
        series_free(s, f->n_labels);
    }
    for (int i = 0; i < f->n_labels; i++)
        free(f->labels[i]);
    free(f->name);
    free(f->help);
    free(f);
}

void v4m_free(v4m_registry *r)
{
    if (!r)
        return;
    for (v4m_family *f = r->fams, *nx; f; f = nx) {
        nx = f->next;
        family_free(f);
    }
    pthread_mutex_destroy(&r->mu);
    free(r);
}

v4m_family *v4m_family_new(v4m_registry *r, v4m_type type, const char *name, const char *help,
                           const char *const *labels, const double *bounds, int n_bounds)
{
    if (!r || !name || !*name || (type == V4M_HISTOGRAM && (n_bounds < 0 || n_bounds > V4M_MAX_BUCKETS)))
        return NULL;
    for (int i = 1; type == V4M_HISTOGRAM && i < n_bounds; i++)
        if (!(bounds[i] > bounds[i - 1]))
            return NULL;
    for (int i = 0; type == V4M_HISTOGRAM && i < n_bounds; i++)
        if (!isfinite(bounds[i]))
            return NULL;
    v4m_family *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->reg = r;
    f->type = type;
    f->name = strdup(name);
    f->help = strdup(help ? help : "");
    int bad = !f->name || !f->help;
    for (int i = 0; labels && labels[i] && !bad; i++) {
        if (i == V4M_MAX_LABELS || !(f->labels[i] = strdup(labels[i])))
            bad = 1;
        else
            f->n_labels = i + 1;
    }
    if (bad) {
        family_free(f);
        return NULL;
    }
    if (type == V4M_HISTOGRAM) {
        memcpy(f->bounds, bounds, (size_t)n_bounds * sizeof *bounds);
        f->n_bounds = n_bounds;
    }
    pthread_mutex_lock(&r->mu);
    if (r->last)
        r->last->next = f;
    else
        r->fams = f;
    r->last = f;
    pthread_mutex_unlock(&r->mu);
    return f;
}

/* Caller holds the registry lock. */
static v4m_series *find_or_add(v4m_family *f, const char *const *values)
{
    for (v4m_series *s = f->series; s; s = s->next) {
        int same = 1;
        for (int i = 0; i < f->n_labels && same; i++)
            same = !strcmp(s->values[i], values[i] ? values[i] : "");
        if (same)
            return s;
    }
    v4m_series *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->fam = f;
    for (int i = 0; i < f->n_labels; i++)
        if (!(s->values[i] = strdup(values[i] ? values[i] : ""))) {
            series_free(s, i);
            return NULL;
        }
    if (f->last)
        f->last->next = s;
    else
        f->series = s;
    f->last = s;
    return s;
}

v4m_series *v4m_series_of(v4m_family *f, const char *const *values)
{
    if (!f || (f->n_labels && !values))
        return NULL;
    pthread_mutex_lock(&f->reg->mu);
    v4m_series *s = find_or_add(f, values);
    pthread_mutex_unlock(&f->reg->mu);
    return s;
}

void v4m_add(v4m_series *s, double v)
{
    if (!s || s->fam->type == V4M_HISTOGRAM || (s->fam->type == V4M_COUNTER && !(v >= 0)))
        return;
    pthread_mutex_lock(&s->fam->reg->mu);
    s->value += v;
    pthread_mutex_unlock(&s->fam->reg->mu);
}

void v4m_set(v4m_series *s, double v)
{
    if (!s || s->fam->type == V4M_HISTOGRAM)
        return;
    pthread_mutex_lock(&s->fam->reg->mu);
    s->value = v;
    pthread_mutex_unlock(&s->fam->reg->mu);
}

void v4m_observe(v4m_series *s, double v)
{
    if (!s || s->fam->type != V4M_HISTOGRAM || isnan(v))
        return;
    const v4m_family *f = s->fam;
    int b = 0;
    while (b < f->n_bounds && v > f->bounds[b])
        b++;
    pthread_mutex_lock(&f->reg->mu);
    s->buckets[b]++;
    s->count++;
    s->sum += v;
    pthread_mutex_unlock(&f->reg->mu);
}

void v4m_fadd(v4m_family *f, double v)
{
    v4m_add(v4m_series_of(f, NULL), v);
}

void v4m_fset(v4m_family *f, double v)
{
    v4m_set(v4m_series_of(f, NULL), v);
}

void v4m_fobserve(v4m_family *f, double v)
{
    v4m_observe(v4m_series_of(f, NULL), v);
}

double v4m_value(v4m_series *s)
{
    if (!s)
        return 0;
    pthread_mutex_lock(&s->fam->reg->mu);
    double v = s->fam->type == V4M_HISTOGRAM ? (double)s->count : s->value;
    pthread_mutex_unlock(&s->fam->reg->mu);
    return v;
}

void v4m_format_double(double v, char *out, size_t n)
{
    if (isnan(v)) {
        snprintf(out, n, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(out, n, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    if (v == (double)(long long)v && v > -1e15 && v < 1e15) {   /* integers in full: counters */
        snprintf(out, n, "%lld", (long long)v);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, n, "%.*g", prec, v);
        if (strtod(out, NULL) == v)
            return;
    }
}

static void put_escaped(v4_strbuf *b, const char *s, int quote)
{
    for (; *s; s++) {
        if (*s == '\\')
            v4_sb_put(b, "\\\\");
        else if (*s == '\n')
            v4_sb_put(b, "\\n");
        else if (quote && *s == '"')
            v4_sb_put(b, "\\\"");
        else
            v4_sb_putn(b, s, 1);
    }
}

/* name{labels[,le="x"]} value\n; le may be NULL. */
static void put_sample(v4_strbuf *b, const v4m_family *f, const v4m_series *s, const char *suffix, const char *le,
                       double v)
{
    char num[40];
    v4_sb_put(b, f->name);
    v4_sb_put(b, suffix);
    if (f->n_labels || le) {
        v4_sb_put(b, "{");
        for (int i = 0; i < f->n_labels; i++) {
            v4_sb_put(b, i ? "," : "");
            v4_sb_put(b, f->labels[i]);
            v4_sb_put(b, "=\"");
            put_escaped(b, s->values[i], 1);
            v4_sb_put(b, "\"");
        }
        if (le) {
            v4_sb_put(b, f->n_labels ? ",le=\"" : "le=\"");
            v4_sb_put(b, le);
            v4_sb_put(b, "\"");
        }
        v4_sb_put(b, "}");
    }
    v4m_format_double(v, num, sizeof num);
    v4_sb_put(b, " ");
    v4_sb_put(b, num);
    v4_sb_put(b, "\n");
}

static void put_family(v4_strbuf *b, const v4m_family *f)
{
    static const char *const types[] = {"counter", "gauge", "histogram"};
    v4_sb_put(b, "# HELP ");
    v4_sb_put(b, f->name);
    v4_sb_put(b, " ");
    put_escaped(b, f->help, 0);
    v4_sb_put(b, "\n# TYPE ");
    v4_sb_put(b, f->name);
    v4_sb_put(b, " ");
    v4_sb_put(b, types[f->type]);
    v4_sb_put(b, "\n");
    for (const v4m_series *s = f->series; s; s = s->next) {
        if (f->type != V4M_HISTOGRAM) {
            put_sample(b, f, s, "", NULL, s->value);
            continue;
        }
        unsigned long long cum = 0;
        char le[40];
        for (int i = 0; i < f->n_bounds; i++) {
            cum += s->buckets[i];
            v4m_format_double(f->bounds[i], le, sizeof le);
            put_sample(b, f, s, "_bucket", le, (double)cum);
        }
        put_sample(b, f, s, "_bucket", "+Inf", (double)s->count);
        put_sample(b, f, s, "_sum", NULL, s->sum);
        put_sample(b, f, s, "_count", NULL, (double)s->count);
    }
}

char *v4m_render(v4m_registry *r, size_t *len)
{
    v4_strbuf b = {0};
    pthread_mutex_lock(&r->mu);
    for (const v4m_family *f = r->fams; f; f = f->next)
        put_family(&b, f);
    pthread_mutex_unlock(&r->mu);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    if (!b.p)
        b.p = calloc(1, 1);
    if (len)
        *len = b.p ? b.n : 0;
    return b.p;
}
