/* util_redis_keys.c - the Redis key names of the utilization counters (see
 * util_redis_keys.h).  A leaf: the writer (util_redis.c, util_redis_eval.c) and the
 * readers (stats_redis.c, `v4fleet stats`, warm-up) all name keys here.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "util_redis_keys.h"

const char *v4_util_key_prefix(const char *prefix)
{
    return prefix && *prefix ? prefix : "v4";
}

void v4_util_key_total(const char *prefix, const char *model, char *out, size_t n)
{
    if (out && n)
        snprintf(out, n, "%s:util:%s:total", v4_util_key_prefix(prefix), model ? model : "");
}

void v4_util_key_bucket_prefix(const char *prefix, const char *model, char *out, size_t n)
{
    if (out && n)
        snprintf(out, n, "%s:util:%s:b:", v4_util_key_prefix(prefix), model ? model : "");
}

void v4_util_key_bucket(const char *prefix, const char *model, long long unix_s, long bucket_s, char *out,
                        size_t n)
{
    if (!out || !n)
        return;
    if (bucket_s <= 0)
        bucket_s = 3600;
    long long q = unix_s / bucket_s;
    if (unix_s % bucket_s != 0 && unix_s < 0)
        q--;                                  /* floor for times before 1970 */
    time_t start = (time_t)(q * bucket_s);
    struct tm tm;
    char stamp[32] = "000000000000";
    if (gmtime_r(&start, &tm))
        snprintf(stamp, sizeof stamp, "%04d%02d%02d%02d%02d", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                 tm.tm_hour, tm.tm_min);
    v4_util_key_bucket_prefix(prefix, model, out, n);
    size_t len = strlen(out);
    snprintf(out + len, n - len, "%s", stamp);
}

void v4_util_key_done(const char *prefix, const char *task_id, char *out, size_t n)
{
    if (out && n)
        snprintf(out, n, "%s:done:%s", v4_util_key_prefix(prefix), task_id ? task_id : "");
}
