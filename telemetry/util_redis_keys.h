/* util_redis_keys.h - the Redis key names of the expert-utilization counters (the
 * schema is in util_redis.h): "<prefix>:util:<model>:total", the time buckets
 * "<prefix>:util:<model>:b:YYYYmmddHHMM" (UTC start of the bucket) and the
 * "<prefix>:done:<task id>" guard.  The prefix defaults to "v4" when NULL or "".
 * Ownership: the caller owns out.  Thread: any (reentrant).
 */
#ifndef V4_UTIL_REDIS_KEYS_H
#define V4_UTIL_REDIS_KEYS_H

#include <stddef.h>

/* The prefix in effect: prefix, or "v4" when prefix is NULL or "". */
const char *v4_util_key_prefix(const char *prefix);
/* Key names (see the schema above); truncated to n like snprintf. */
void v4_util_key_total(const char *prefix, const char *model, char *out, size_t n);
void v4_util_key_bucket(const char *prefix, const char *model, long long unix_s, long bucket_s, char *out,
                        size_t n);
void v4_util_key_done(const char *prefix, const char *task_id, char *out, size_t n);
/* "<prefix>:util:<model>:b:": the bucket keys are this + YYYYmmddHHMM. */
void v4_util_key_bucket_prefix(const char *prefix, const char *model, char *out, size_t n);

#endif
