/* util_redis_internal.h - state shared by util_redis.c (backlog, thread, start/free) and
 * util_redis_eval.c (the Lua script and the EVAL of one batch).  Not a public header.
 * Thread: the v4_util fields are documented where declared (under mu, immutable after
 * start, or thread-only). */
#ifndef V4_UTIL_REDIS_INTERNAL_H
#define V4_UTIL_REDIS_INTERNAL_H

#include "util_redis.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LOGP "util-redis: "
#define MAX_TASK_ID 512
#define MAX_CELLS (1u << 24)
#define BATCH_MAX_RECS 64                 /* records per EVAL (default and upper limit of max_batch) */
#define BATCH_MAX_CELLS ((size_t)1 << 20) /* non-zero cells per EVAL: bounds the script's run time */
#define BATCH_MAX_BYTES ((size_t)16 << 20)/* EVAL argument bytes (msgpack counts + keys) */
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 10000

typedef struct rec {
    struct rec *next;
    long long unix_s;   /* time of the record: selects the bucket */
    long tokens;
    uint32_t n;         /* non-zero cells */
    uint32_t *idx;      /* cell index layer * n_experts + expert */
    uint32_t *cnt;
    size_t bytes;       /* size of the allocation */
    char id[];          /* task id; the arrays follow, 4-byte aligned */
} rec;

typedef enum { ACT_EXIT, ACT_NOTE, ACT_CONNECT, ACT_SEND } action;

struct v4_util {
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* the thread: new work, stop, backlog note */
    pthread_cond_t drained;  /* v4_util_flush: the backlog shrank */
    rec *head, *tail;
    size_t n_pending, bytes_pending;
    v4_util_stats st;        /* under mu (pending is n_pending) */
    int stop;
    struct timespec stop_deadline;
    struct timespec next_attempt;  /* earliest next connect attempt */
    int full;                /* a drop episode is open (set by record, closed by the thread) */
    int full_logged;         /* its "backlog full" line was logged */
    uint64_t dropped_at_note;/* stats.dropped before the episode */

    /* configuration (immutable after start) */
    char *url, *url_masked, *prefix, *model;
    char shape[64];
    long bucket_s, bucket_ttl_s, done_ttl_s, timeout_ms;
    size_t max_backlog, max_backlog_bytes;
    int max_batch;           /* records per EVAL */
    size_t n_cells;          /* n_layers * n_experts routing cells + V4_UTIL_NFIGS cache figures */
    int n_experts;
    v4_util_log_fn log;
    void *ud;
    pthread_t th;

    /* thread-only state */
    redisContext *c;
    int fails;               /* failed attempts since the last good batch: backoff exponent */
    int down_logged;         /* "unreachable" logged for this outage */
    int lost_logged;         /* "lost" logged for this outage */
    int attempted;           /* the first (eager) connect attempt was made */
    uint64_t rng;
    uint64_t rejected_logged;
    const char **argv;
    size_t *argl;
    size_t argcap;
    char *num;
    size_t numcap;
    uint64_t *agg;           /* [n_cells] batch sums (all 0 between batches), allocated at first use */
    uint32_t *agg_pos;       /* [n_cells] index of a cell's field in the batch aggregate */
    uint32_t *agg_cells;     /* [n_cells] the cells of the aggregate, in order */
};

enum { RES_KEEP = -1, RES_DUP = 0, RES_SENT = 1, RES_REJECTED = 2 };

/* util_redis_eval.c */
size_t v4u_rec_arg_bytes(const v4_util *u, const rec *r);
long long v4u_bucket_of(const v4_util *u, long long unix_s);
int v4u_send_batch(v4_util *u, rec **batch, int n, int *res, char *reason, size_t rn, char *rej, size_t rjn);

#endif
