/* stats_redis.h - the Redis side of `v4fleet stats`: connect (the shared
 * telemetry/redis_conn.c parser and connect: 2 s connect and command timeouts, AUTH,
 * SELECT), find utilization keys with SCAN (never KEYS) and read one utilization
 * hash into a v4_umat.
 *
 * Key schema: written by the workers and owned by telemetry/util_redis.h (key names are
 * built with its v4_util_key_* functions, never spelled out here):
 *   <prefix>:util:<model>:total               all-time totals
 *   <prefix>:util:<model>:b:<YYYYmmddHHMM>    one time bucket (UTC start)
 *
 * The password is never printed: v4_stats_redis_display gives the URL as masked by
 * v4_redis_url_mask (redis://user:***@host:port/db).
 *
 * Ownership: a v4_stats_redis owns its hiredis context (v4_stats_redis_close);
 * name lists are malloc'd arrays of malloc'd strings (v4_stats_free_names).
 * Thread: one thread per connection.
 */
#ifndef V4_STATS_REDIS_H
#define V4_STATS_REDIS_H

#include <stddef.h>
#include <time.h>

#include "../config/error.h"
#include "stats_util.h"

typedef struct v4_stats_redis v4_stats_redis;

/* Connects with v4_redis_connect (timeout V4_STATS_TIMEOUT_MS); errors are the shared
 * parser's and connect's (where = the masked URL). */
#define V4_STATS_TIMEOUT_MS 2000
int v4_stats_redis_open(const char *url, v4_stats_redis **out, v4_error *err);
void v4_stats_redis_close(v4_stats_redis *r);
/* The masked URL ("***" for the password), safe to print; valid until close. */
const char *v4_stats_redis_display(const v4_stats_redis *r);

/* Models with a <prefix>:util:<model>:total key, sorted, without duplicates. */
int v4_stats_list_models(v4_stats_redis *r, const char *prefix, char ***names, size_t *n,
                         v4_error *err);
/* Bucket names (the 12-digit YYYYmmddHHMM suffixes that are valid UTC times) of
 * <prefix>:util:<model>:b:*, sorted ascending, without duplicates. */
int v4_stats_list_buckets(v4_stats_redis *r, const char *prefix, const char *model,
                          char ***names, size_t *n, v4_error *err);
void v4_stats_free_names(char **names, size_t n);

/* Add the hash at key to u; *found = 0 (and u untouched) when the key does not exist. */
int v4_stats_read_hash(v4_stats_redis *r, const char *key, v4_umat *u, int *found,
                       v4_error *err);

/* "YYYYmmddHHMM" (exactly 12 digits, a real UTC minute) -> time_t; -1 if invalid. */
int v4_stats_bucket_time(const char *name, time_t *t);

#endif
