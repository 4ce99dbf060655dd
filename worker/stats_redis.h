/* stats_redis.h - the Redis side of `v4fleet stats`: parse a redis:// URL, connect
 * (2 s connect and command timeouts, AUTH, SELECT), find utilization keys with
 * SCAN (never KEYS) and read one utilization hash into a v4_umat.
 *
 * Key schema (written by the workers, cache/util_redis.c):
 *   <prefix>:util:<model>:total               all-time totals
 *   <prefix>:util:<model>:b:<YYYYmmddHHMM>    one time bucket (UTC start)
 *
 * The URL parser is private to `stats` for now (a shared one will replace it).
 * URL form: redis://[[user]:password@]host[:port][/db]; user and password may be
 * %XX-escaped; host may be an [IPv6] literal.  The password is never printed:
 * v4_stats_redis_url_display gives redis://user:***@host:port/db.
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

typedef struct v4_stats_url {
    char host[256];
    int port;                /* default 6379 */
    int db;                  /* default 0 */
    char user[128];          /* "" = none (password-only AUTH) */
    char password[256];
    int has_password;
} v4_stats_url;

typedef struct v4_stats_redis v4_stats_redis;

int v4_stats_parse_url(const char *url, v4_stats_url *u, v4_error *err);
/* "redis://[user:***@]host:port/db" - safe to print. */
void v4_stats_url_display(const v4_stats_url *u, char *out, size_t cap);

int v4_stats_redis_open(const v4_stats_url *u, v4_stats_redis **out, v4_error *err);
void v4_stats_redis_close(v4_stats_redis *r);

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
