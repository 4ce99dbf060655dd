/* util_redis.h - fleet-wide expert-utilization counters in Redis, off the task path.
 *
 * The worker records, per task, how many tokens each (layer, routed expert) pair
 * received (v4_util_record).  One owned thread ships the records to Redis.
 *
 * Key schema (shared with `v4fleet stats`; keep it exact):
 *   <prefix>:util:<model>:total               hash, never expires
 *   <prefix>:util:<model>:b:<YYYYmmddHHMM>    hash per time bucket (start of the bucket,
 *                                             UTC), EXPIRE bucket_ttl_s after each write
 *     fields "<layer>:<expert>" (decimal, "3:117") = routed tokens (HINCRBY),
 *            "_tasks" (+1 per task), "_tokens" (+tokens per task), "_shape" = "L,E,K" (HSET)
 *   <prefix>:done:<task_id>                   "1", SET NX EX done_ttl_s: the R13 guard
 * The bucket of a record is fixed when it is recorded (not when it is sent), so a record
 * delayed by an outage still lands in the bucket of its task.
 *
 * Wire: at most ONE EVAL per task (R19), usually far fewer: the thread sends the pending
 * records as batches, ONE EVAL per batch.  A batch is a prefix of the backlog whose records
 * all fall in the same time bucket, at most max_batch (default 64) records, 1 Mi non-zero
 * cells and 16 MiB of arguments.  Batches form by themselves under load: while one EVAL is
 * in flight the next records wait, and the next EVAL takes them all (an idle fleet still
 * sends one record per EVAL, at once).  The Lua script (KEYS = {total, bucket, done of
 * each record}; atomic as a whole) refuses with WRONGTYPE before any write unless both
 * hashes are hashes or absent, then does SET done 1 NX EX for each record, and for the
 * records whose guard it set, ONE HINCRBY per distinct field on each hash (plus _tasks,
 * _tokens, HSET _shape, EXPIRE of the bucket).  The client sends the batch's aggregate
 * (field, summed count pairs: what the script writes when no record is a duplicate) and,
 * per record, its counts as one compact msgpack string of (field index, count) pairs; only
 * the duplicates' strings are unpacked, summed in a Lua table and subtracted.  It returns
 * one flag per record, 1 applied or 0 duplicate (the task was already counted), so
 * stats.sent/duplicates stay per record.  Cost (bench/bench_util_redis.c, V4-Flash shape
 * 43 x 256, every cell touched): the Redis time of an EVAL is dominated by its HINCRBYs
 * (one per field and hash), so one task alone costs ~9-12 ms as before, a batch of 64
 * ~20-40 ms in all (0.3-0.6 ms a task); that is also how long one EVAL holds Redis (lower
 * max_batch to bound it).
 *
 * Design: a bounded FIFO backlog (mutex + condvar) filled by v4_util_record (copies the
 * non-zero counts, never does I/O, never waits for Redis) and drained by the thread,
 * which owns a sync hiredis context (redis_conn.c: connect/command timeouts, keepalive).
 * Records stay in the backlog until Redis confirmed them, so "pending" includes the
 * ones in flight.  The thread also owns the scratch of a batch (EVAL arguments and the
 * per-cell aggregate, n_layers x n_experts x 16 bytes, allocated at the first batch).
 * On any error the context is freed (hiredis: not reusable), the
 * unconfirmed records stay (a record whose reply was lost may be re-sent: the done
 * guard makes that safe; it then counts as a duplicate), and the thread reconnects with
 * exponential backoff + jitter (100 ms .. 10 s) sleeping on the condvar.  A frozen
 * Redis makes commands time out after timeout_ms.  The thread connects once at start
 * (so a bad password or db shows in the log at once), later only when records wait.
 * State changes are logged once, not per record or attempt: "connected" (info), "lost:
 * reason", "URL unreachable: reason" (first failed attempt of an outage; the later
 * ones at debug level), "backlog full" (error) and "backlog below half again" (info);
 * the password is masked ("***") in every line.
 * Redis Cluster is not supported (the keys of a batch do not share a hash slot).
 *
 * Backlog-full policy: DROP NEWEST.  When max_backlog records (or max_backlog_bytes of
 * copied counts) are pending, v4_util_record refuses the new record, returns 1 and
 * counts it in stats.dropped.  Older records, already waiting longest, are kept: after
 * an outage the counters hold a contiguous prefix of the tasks of that outage.
 *
 * Server error replies: LOADING/BUSY/TRYAGAIN/MASTERDOWN/READONLY/OOM are transient
 * (the records stay; reconnect with backoff); any other error reply (WRONGTYPE, script
 * error) is permanent for the EVAL: its records are discarded and each is counted in
 * stats.rejected.
 *
 * Ownership: v4_util owns its thread, context, backlog and copies of all options
 * strings.  Threads: v4_util_record / v4_util_get_stats / v4_util_flush may be called
 * from any thread concurrently; v4_util_free once, from one thread, after the others
 * stopped calling.  The log callback is called from the util thread (and from
 * v4_util_free's thread for the final line).  All functions accept u == NULL (disabled).
 */
#ifndef V4_UTIL_REDIS_H
#define V4_UTIL_REDIS_H

#include <stddef.h>
#include <stdint.h>

#include "../config/error.h"
#include "redis_conn.h"
#include "util_redis_keys.h"   /* the key names */

typedef struct v4_util_opts {
    const char *redis_url;   /* redis://[user:password@]host[:port][/db]; NULL or "" = disabled:
                                v4_util_start returns NULL with err->code V4_OK */
    const char *prefix;      /* key prefix, default "v4" when NULL or "" */
    const char *model;       /* served model name, part of the keys (required) */
    int n_layers, n_experts, top_k;  /* shape of the counts array; field "_shape" = "L,E,K" */
    long bucket_s;           /* time-bucket width in seconds (<= 0: 3600) */
    long bucket_ttl_s;       /* EXPIRE of a bucket hash (<= 0: 172800) */
    long done_ttl_s;         /* EX of the done:{id} guard (<= 0: 604800) */
    long timeout_ms;         /* connect and command timeout (<= 0: 1000) */
    size_t max_backlog;      /* records kept in memory while Redis is unreachable (0: 10000) */
    size_t max_backlog_bytes;/* bytes of copied counts kept in memory (0: 64 MiB) */
    size_t max_batch;        /* records per EVAL (0 or > 64: 64); 1 = one EVAL per record */
} v4_util_opts;

typedef struct v4_util v4_util;

typedef struct v4_util_stats {
    uint64_t recorded;   /* v4_util_record calls accepted */
    uint64_t sent;       /* records applied by Redis (script returned 1) */
    uint64_t duplicates; /* records Redis refused because done:{id} existed (redelivered task) */
    uint64_t dropped;    /* records thrown away: backlog full (and left unsent at v4_util_free) */
    uint64_t pending;    /* records in memory now (queued + in flight) */
    uint64_t reconnects; /* successful (re)connections after the first */
    uint64_t errors;     /* failed connects / commands (one per failed attempt or batch) */
    uint64_t rejected;   /* records Redis answered with a permanent error (discarded) */
    uint64_t connects;   /* successful connections, the first included */
    uint64_t batches;    /* EVALs written (one per batch of 1..max_batch records) */
} v4_util_stats;

typedef void (*v4_util_log_fn)(void *ud, int level, const char *line);  /* 0 error 1 info 2 debug */

/* Validates the options (V4_ERR_CONFIG naming the option) and starts the thread; does
 * not wait for Redis (starts even if Redis is down).  log may be NULL. */
v4_util *v4_util_start(const v4_util_opts *o, v4_util_log_fn log, void *ud, v4_error *err);

/* counts: [n_layers * n_experts] routed-token counts of one task; tokens: positions the
 * task forwarded.  Copies the non-zero entries; O(counts) under a mutex, no I/O.
 * Returns 0 queued, 1 dropped (backlog full; stats.dropped), -1 invalid arguments
 * (NULL/empty task id or one longer than 512 bytes, NULL counts, tokens < 0). */
int v4_util_record(v4_util *u, const char *task_id, const uint32_t *counts, long tokens);
/* The same with the task's experts figures (the result's, worker/serve/task_run.h),
 * added to the hashes' fields _hits, _misses, _kib_loaded and _prefetched (guarded by
 * the same done key). */
#define V4_UTIL_NFIGS 4
typedef struct v4_util_figs {
    uint32_t hits, misses, kib_loaded, prefetched;
} v4_util_figs;
int v4_util_record_ex(v4_util *u, const char *task_id, const uint32_t *counts, long tokens, const v4_util_figs *figs);

void v4_util_get_stats(v4_util *u, v4_util_stats *s);

/* Wait up to timeout_ms for the backlog to drain; returns the records still pending. */
long v4_util_flush(v4_util *u, long timeout_ms);

/* Flushes for about timeout_ms (connects and commands started after the call get the
 * time left as their timeout; one already in flight may add up to timeout_ms), counts
 * and logs what is dropped, joins the thread, frees. */
void v4_util_free(v4_util *u);

#endif
