/* stats_redis.c - see stats_redis.h.
 *
 * Every command goes through redisCommandArgv (binary-safe arguments, no format
 * string pitfalls with user-supplied prefixes).  SCAN MATCH patterns escape the
 * glob characters of the prefix and model, so "v4[x]" matches itself only; each key
 * returned is checked again by exact string comparison, because SCAN may return a
 * key more than once and MATCH is only a filter.
 */
#include "stats_redis.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "redis_conn.h"
#include "util_redis.h"

#define TIMEOUT_TEXT "2 s"   /* V4_STATS_TIMEOUT_MS, for messages */

struct v4_stats_redis {
    redisContext *c;
    char display[600];   /* the masked URL, for messages */
};

/* ---------------------------------------------------------------- commands */

/* Run argv; returns the reply or NULL with err filled (I/O error, timeout, or a
 * Redis error reply, which is freed). */
static redisReply *command(v4_stats_redis *r, int argc, const char **argv, v4_error *err)
{
    size_t lens[8];
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    redisReply *rep = redisCommandArgv(r->c, argc, argv, lens);
    if (!rep) {
        int timed_out = r->c->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK);
        v4_err_set(err, V4_ERR_IO, r->display, "%s: %s", argv[0],
                   timed_out ? "no reply within " TIMEOUT_TEXT " (timed out)" : r->c->errstr);
        return NULL;
    }
    if (rep->type == REDIS_REPLY_ERROR) {
        v4_err_set(err, V4_ERR_IO, r->display, "%s: %.*s", argv[0], (int)rep->len, rep->str);
        freeReplyObject(rep);
        return NULL;
    }
    return rep;
}

int v4_stats_redis_open(const char *url, v4_stats_redis **out, v4_error *err)
{
    *out = NULL;
    v4_stats_redis *r = calloc(1, sizeof *r);
    if (!r)
        return v4_err_set(err, V4_ERR_NOMEM, "redis", "out of memory");
    v4_redis_url_mask(url, r->display, sizeof r->display);
    if (!(r->c = v4_redis_connect(url, V4_STATS_TIMEOUT_MS, err))) {
        free(r);
        return -1;
    }
    *out = r;
    return 0;
}

const char *v4_stats_redis_display(const v4_stats_redis *r)
{
    return r->display;
}

void v4_stats_redis_close(v4_stats_redis *r)
{
    if (!r)
        return;
    if (r->c)
        redisFree(r->c);
    free(r);
}

/* ---------------------------------------------------------------- SCAN */

typedef struct names {
    char **v;
    size_t n, cap;
} names;

static int names_add(names *s, const char *p, size_t n)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 16;
        char **v = realloc(s->v, cap * sizeof *v);
        if (!v)
            return -1;
        s->v = v;
        s->cap = cap;
    }
    if (!(s->v[s->n] = strndup(p, n)))
        return -1;
    s->n++;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void names_sort_unique(names *s)
{
    if (!s->n)
        return;
    qsort(s->v, s->n, sizeof *s->v, cmp_str);
    size_t o = 1;
    for (size_t i = 1; i < s->n; i++) {
        if (!strcmp(s->v[i], s->v[o - 1]))
            free(s->v[i]);
        else
            s->v[o++] = s->v[i];
    }
    s->n = o;
}

void v4_stats_free_names(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* Append s to the pattern with the glob metacharacters escaped. */
static void glob_escape(char *out, size_t cap, size_t *o, const char *s)
{
    for (; *s && *o + 2 < cap; s++) {
        if (strchr("*?[]\\", *s))
            out[(*o)++] = '\\';
        out[(*o)++] = *s;
    }
    out[*o] = 0;
}

/* The text between head and tail of every key matching the SCAN pattern (keys
 * that do not start with head and end with tail are skipped). */
typedef int (*keep_fn)(const char *mid, size_t n);

static int scan_keys(v4_stats_redis *r, const char *pattern, const char *head, const char *tail,
                     keep_fn keep, names *out, v4_error *err)
{
    char cursor[32] = "0";
    size_t hn = strlen(head), tn = strlen(tail);
    do {
        const char *a[] = {"SCAN", cursor, "MATCH", pattern, "COUNT", "1000"};
        redisReply *rep = command(r, 6, a, err);
        if (!rep)
            return -1;
        if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
            rep->element[0]->type != REDIS_REPLY_STRING ||
            rep->element[0]->len >= sizeof cursor || rep->element[1]->type != REDIS_REPLY_ARRAY) {
            freeReplyObject(rep);
            return v4_err_set(err, V4_ERR_FORMAT, r->display, "SCAN: unexpected reply shape");
        }
        memcpy(cursor, rep->element[0]->str, rep->element[0]->len);
        cursor[rep->element[0]->len] = 0;
        redisReply *keys = rep->element[1];
        for (size_t i = 0; i < keys->elements; i++) {
            redisReply *k = keys->element[i];
            if (k->type != REDIS_REPLY_STRING || k->len < hn + tn || strlen(k->str) != k->len ||
                memcmp(k->str, head, hn) || memcmp(k->str + k->len - tn, tail, tn))
                continue;
            const char *mid = k->str + hn;
            size_t mn = k->len - hn - tn;
            if (!keep(mid, mn))
                continue;
            if (names_add(out, mid, mn)) {
                freeReplyObject(rep);
                return v4_err_set(err, V4_ERR_NOMEM, r->display, "SCAN: out of memory");
            }
        }
        freeReplyObject(rep);
    } while (strcmp(cursor, "0"));
    names_sort_unique(out);
    return 0;
}

static int keep_model(const char *mid, size_t n)
{
    (void)mid;
    return n > 0;
}

static int keep_bucket(const char *mid, size_t n)
{
    char name[13];
    time_t t;
    if (n != 12)
        return 0;
    memcpy(name, mid, 12);
    name[12] = 0;
    return v4_stats_bucket_time(name, &t) == 0;
}

static int list_common(v4_stats_redis *r, const char *head, const char *pat_head,
                       const char *tail, keep_fn keep, char ***v, size_t *n, v4_error *err)
{
    char pattern[1200];
    size_t o = 0;
    glob_escape(pattern, sizeof pattern - 16, &o, pat_head);
    snprintf(pattern + o, sizeof pattern - o, "*%s", tail);
    names s = {0};
    if (scan_keys(r, pattern, head, tail, keep, &s, err)) {
        v4_stats_free_names(s.v, s.n);
        return -1;
    }
    *v = s.v;
    *n = s.n;
    return 0;
}

int v4_stats_list_models(v4_stats_redis *r, const char *prefix, char ***v, size_t *n,
                         v4_error *err)
{
    /* the total key of a model "\n" (a byte no model name from SCAN is split at):
     * what comes before it is the head of every total key, what follows the tail */
    char key[600];
    v4_util_key_total(prefix, "\n", key, sizeof key);
    char *mark = strrchr(key, '\n');
    if (!mark)
        return v4_err_set(err, V4_ERR_INVALID, prefix, "prefix too long for a key");
    *mark = 0;
    return list_common(r, key, key, mark + 1, keep_model, v, n, err);
}

int v4_stats_list_buckets(v4_stats_redis *r, const char *prefix, const char *model,
                          char ***v, size_t *n, v4_error *err)
{
    char head[1100];
    v4_util_key_bucket_prefix(prefix, model, head, sizeof head);
    return list_common(r, head, head, "", keep_bucket, v, n, err);
}

/* ---------------------------------------------------------------- HGETALL */

int v4_stats_read_hash(v4_stats_redis *r, const char *key, v4_umat *u, int *found,
                       v4_error *err)
{
    *found = 0;
    const char *a[] = {"HGETALL", key};
    redisReply *rep = command(r, 2, a, err);
    if (!rep) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        return v4_err_set(err, err->code, key, "%s", msg);
    }
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements % 2) {
        freeReplyObject(rep);
        return v4_err_set(err, V4_ERR_FORMAT, key, "HGETALL: unexpected reply");
    }
    size_t n = rep->elements / 2;
    if (n == 0) {
        freeReplyObject(rep);
        return 0;
    }
    const char **f = malloc(n * sizeof *f), **val = malloc(n * sizeof *val);
    int rc = 0;
    if (!f || !val) {
        rc = v4_err_set(err, V4_ERR_NOMEM, key, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        redisReply *kf = rep->element[2 * i], *kv = rep->element[2 * i + 1];
        if (kf->type != REDIS_REPLY_STRING || kv->type != REDIS_REPLY_STRING ||
            strlen(kf->str) != kf->len || strlen(kv->str) != kv->len) {
            rc = v4_err_set(err, V4_ERR_FORMAT, key, "HGETALL: field %zu is not a plain string", i);
            goto out;
        }
        f[i] = kf->str;
        val[i] = kv->str;
    }
    rc = v4_umat_add_hash(u, key, f, val, n, err);
    if (rc == 0)
        *found = 1;
out:
    free(f);
    free(val);
    freeReplyObject(rep);
    return rc;
}

int v4_stats_bucket_time(const char *s, time_t *t)
{
    if (strlen(s) != 12 || strspn(s, "0123456789") != 12)
        return -1;
    struct tm tm = {0};
    int y, mo, d, h, mi;
    if (sscanf(s, "%4d%2d%2d%2d%2d", &y, &mo, &d, &h, &mi) != 5)
        return -1;
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    time_t v = timegm(&tm);
    struct tm back;
    if (v == (time_t)-1 || !gmtime_r(&v, &back) || back.tm_year != y - 1900 ||
        back.tm_mon != mo - 1 || back.tm_mday != d || back.tm_hour != h || back.tm_min != mi)
        return -1;
    *t = v;
    return 0;
}
