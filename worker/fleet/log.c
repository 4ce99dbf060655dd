/* log.c - JSON / text log lines (see log.h).  Thread: any after v4_log_init. */
#include "log.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

int v4_log_init(v4_log *l, const char *format, int level, const char *worker_id, FILE *out, v4_error *err)
{
    memset(l, 0, sizeof *l);
    if (!format || !*format || !strcmp(format, "auto"))
        l->json = !isatty(fileno(out));
    else if (!strcmp(format, "json"))
        l->json = 1;
    else if (!strcmp(format, "text"))
        l->json = 0;
    else
        return v4_err_set(err, V4_ERR_CONFIG, "V4_LOG_FORMAT", "'%s' is not json, text or auto", format);
    l->level = level;
    l->out = out;
    snprintf(l->worker_id, sizeof l->worker_id, "%s", worker_id ? worker_id : "");
    pthread_mutex_init(&l->mu, NULL);
    return 0;
}

void v4_log_destroy(v4_log *l)
{
    pthread_mutex_destroy(&l->mu);
}

static const char *level_name(int level)
{
    return level <= V4_LOG_ERROR ? "error" : level == V4_LOG_INFO ? "info" : "debug";
}

static void write_line(v4_log *l, const char *s, size_t n)
{
    pthread_mutex_lock(&l->mu);
    fwrite(s, 1, n, l->out);
    fflush(l->out);
    pthread_mutex_unlock(&l->mu);
}

void v4_log_emit(v4_log *l, int level, const char *component, const char *task_id, json_t *fields,
                 const char *msg)
{
    if (level > l->level) {
        json_decref(fields);
        return;
    }
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char line[1200];
    if (!l->json) {
        int n = snprintf(line, sizeof line, "%02d:%02d:%02d.%03ld v4fleet worker %s: %s\n", tm.tm_hour, tm.tm_min,
                         tm.tm_sec, (long)(tv.tv_usec / 1000), level_name(level), msg);
        if (n >= (int)sizeof line) {   /* long message: keep the line whole */
            n = (int)sizeof line - 1;
            line[n - 1] = '\n';
        }
        write_line(l, line, (size_t)n);
        json_decref(fields);
        return;
    }
    char ts[80];
    snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
             tm.tm_hour, tm.tm_min, tm.tm_sec, (long)(tv.tv_usec / 1000));
    json_t *o = json_object();
    /* jansson refuses invalid UTF-8 (json_string -> NULL); such a task id or message
     * must not lose the line, so it is replaced (task id) or copied lossily (message). */
    json_object_set_new(o, "time", json_string(ts));
    json_object_set_new(o, "level", json_string(level_name(level)));
    json_object_set_new(o, "worker", json_string(l->worker_id));
    json_object_set_new(o, "component", json_string(component ? component : "worker"));
    if (task_id) {
        json_t *t = json_string(task_id);
        json_object_set_new(o, "task", t ? t : json_string("(invalid utf-8)"));
    }
    json_t *m = json_string(msg);
    if (!m) {   /* not UTF-8: replace every byte >= 0x80 by '?' */
        char *c = strdup(msg);
        for (char *p = c; p && *p; p++)
            if ((unsigned char)*p >= 0x80)
                *p = '?';
        m = json_string(c ? c : "");
        free(c);
    }
    json_object_set_new(o, "msg", m);
    const char *k;
    json_t *v;
    json_object_foreach(fields, k, v)
        if (!json_object_get(o, k))
            json_object_set(o, k, v);
    json_decref(fields);
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (!s)
        return;
    size_t n = strlen(s);
    char *withnl = realloc(s, n + 2);
    if (!withnl) {
        free(s);
        return;
    }
    withnl[n] = '\n';
    withnl[n + 1] = 0;
    write_line(l, withnl, n + 1);
    free(withnl);
}

void v4_logf(v4_log *l, int level, const char *task_id, const char *fmt, ...)
{
    if (level > l->level)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    v4_log_emit(l, level, NULL, task_id, NULL, msg);
}

void v4_log_amqp_cb(void *ud, int level, const char *line)
{
    v4_log_emit(ud, level, "amqp", NULL, NULL, line);
}

void v4_log_redis_cb(void *ud, int level, const char *line)
{
    v4_log_emit(ud, level, "redis", NULL, NULL, line);
}
