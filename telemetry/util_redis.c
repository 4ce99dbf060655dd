/* util_redis.c - expert-utilization counters shipped to Redis by one owned thread;
 * see util_redis.h for the key schema, the wire protocol and the failure policy.
 *
 * Backlog: a singly linked FIFO (head/tail) under u->mu.  v4_util_record builds the
 * record (one malloc: header + task id + sparse (index, count) pairs) outside the lock
 * and only links it in under the lock.  The thread is the only one that unlinks; it
 * snapshots the first N records of the list under the lock and reads them without it
 * (a record's contents are immutable once linked; producers only touch tail->next).
 *
 * Thread loop: lock, decide one action (exit, log a backlog note, wait, connect, send a
 * batch = one EVAL), unlock, do it (I/O and log callbacks always run unlocked), repeat.
 * Memory: the thread owns the redisContext, a scratch buffer for EVAL arguments and the
 * per-cell aggregate of a batch; v4_util_free frees whatever is left in the backlog.
 */
#include "util_redis_internal.h"

/* ---- helpers ---------------------------------------------------------------------- */

static void now_mono(struct timespec *t)
{
    clock_gettime(CLOCK_MONOTONIC, t);
}

static void ts_add_ms(struct timespec *t, long ms)
{
    t->tv_sec += ms / 1000;
    t->tv_nsec += (ms % 1000) * 1000000L;
    if (t->tv_nsec >= 1000000000L) {
        t->tv_sec++;
        t->tv_nsec -= 1000000000L;
    }
}

static int ts_before(const struct timespec *a, const struct timespec *b)
{
    return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

static long ts_ms_until(const struct timespec *t)
{
    struct timespec n;
    now_mono(&n);
    return (long)((t->tv_sec - n.tv_sec) * 1000 + (t->tv_nsec - n.tv_nsec) / 1000000L);
}

static void ulog(v4_util *u, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void ulog(v4_util *u, int level, const char *fmt, ...)
{
    if (!u->log)
        return;
    char line[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    u->log(u->ud, level, line);
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static char *dupstr(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* ---- backlog ------------------------------------------------------------------------ */

static void rec_unlink(v4_util *u, rec *prev, rec *r)
{
    if (prev)
        prev->next = r->next;
    else
        u->head = r->next;
    if (u->tail == r)
        u->tail = prev;
    u->n_pending--;
    u->bytes_pending -= r->bytes;
}

/* Cell i of a record: a routing count, or one of the cache figures after them. */
static uint32_t cell_of(const v4_util *u, const uint32_t *counts, const v4_util_figs *f, size_t i)
{
    size_t nr = u->n_cells - V4_UTIL_NFIGS;
    if (i < nr)
        return counts[i];
    if (!f)
        return 0;
    return i == nr ? f->hits : i == nr + 1 ? f->misses : i == nr + 2 ? f->kib_loaded : f->prefetched;
}

int v4_util_record(v4_util *u, const char *task_id, const uint32_t *counts, long tokens)
{
    return v4_util_record_ex(u, task_id, counts, tokens, NULL);
}

int v4_util_record_ex(v4_util *u, const char *task_id, const uint32_t *counts, long tokens, const v4_util_figs *figs)
{
    if (!u)
        return 0;
    if (!task_id || !*task_id || !counts || tokens < 0)
        return -1;
    size_t idlen = strnlen(task_id, MAX_TASK_ID + 1);
    if (idlen > MAX_TASK_ID)
        return -1;
    uint32_t nz = 0;
    for (size_t i = 0; i < u->n_cells; i++)
        nz += cell_of(u, counts, figs, i) != 0;
    size_t off = (sizeof(rec) + idlen + 1 + 3) & ~(size_t)3;
    size_t bytes = off + (size_t)nz * 2 * sizeof(uint32_t);
    rec *r = malloc(bytes);
    if (r) {
        r->next = NULL;
        r->unix_s = (long long)time(NULL);
        r->tokens = tokens;
        r->n = nz;
        r->bytes = bytes;
        memcpy(r->id, task_id, idlen + 1);
        r->idx = (uint32_t *)((char *)r + off);
        r->cnt = r->idx + nz;
        uint32_t k = 0;
        for (size_t i = 0; i < u->n_cells; i++) {
            uint32_t v = cell_of(u, counts, figs, i);
            if (v) {
                r->idx[k] = (uint32_t)i;
                r->cnt[k++] = v;
            }
        }
    }
    pthread_mutex_lock(&u->mu);
    int dropped = !r || u->n_pending >= u->max_backlog || u->bytes_pending + bytes > u->max_backlog_bytes;
    if (dropped) {
        u->st.dropped++;
        if (!u->full) {
            u->full = 1;
            u->dropped_at_note = u->st.dropped - 1;
            pthread_cond_signal(&u->cv);   /* the thread logs "dropping started" once */
        }
    } else {
        u->st.recorded++;
        if (u->tail)
            u->tail->next = r;
        else
            u->head = r;
        u->tail = r;
        u->n_pending++;
        u->bytes_pending += bytes;
        pthread_cond_signal(&u->cv);
    }
    pthread_mutex_unlock(&u->mu);
    if (dropped)
        free(r);
    return dropped ? 1 : 0;
}

void v4_util_get_stats(v4_util *u, v4_util_stats *s)
{
    if (!s)
        return;
    memset(s, 0, sizeof *s);
    if (!u)
        return;
    pthread_mutex_lock(&u->mu);
    *s = u->st;
    s->pending = u->n_pending;
    pthread_mutex_unlock(&u->mu);
}

long v4_util_flush(v4_util *u, long timeout_ms)
{
    if (!u)
        return 0;
    struct timespec dl;
    now_mono(&dl);
    ts_add_ms(&dl, timeout_ms > 0 ? timeout_ms : 0);
    pthread_mutex_lock(&u->mu);
    while (u->n_pending > 0) {
        if (pthread_cond_timedwait(&u->drained, &u->mu, &dl) == ETIMEDOUT)
            break;
    }
    long left = (long)u->n_pending;
    pthread_mutex_unlock(&u->mu);
    return left;
}

/* ---- the thread ---------------------------------------------------------------------- */

static void schedule_retry(v4_util *u)
{
    /* under mu: exponential backoff with "equal jitter": [d/2, d] */
    long d = BACKOFF_MIN_MS;
    for (int i = 0; i < u->fails && d < BACKOFF_MAX_MS; i++)
        d *= 2;
    if (d > BACKOFF_MAX_MS)
        d = BACKOFF_MAX_MS;
    long j = d / 2 + (long)(rng_next(&u->rng) % (uint64_t)(d / 2 + 1));
    u->fails++;
    now_mono(&u->next_attempt);
    ts_add_ms(&u->next_attempt, j);
}

static void *util_thread(void *arg)
{
    v4_util *u = arg;
    sigset_t ss;
    sigemptyset(&ss);
    sigaddset(&ss, SIGPIPE);   /* a write to a closed socket must fail with EPIPE, not kill us */
    pthread_sigmask(SIG_BLOCK, &ss, NULL);

    rec *batch[BATCH_MAX_RECS];
    int res[BATCH_MAX_RECS];
    for (;;) {
        action act;
        int nb = 0;
        long conn_timeout = u->timeout_ms;
        size_t note_pending = 0;
        uint64_t note_dropped = 0;
        int note_kind = 0;   /* 1 full, 2 recovered */
        pthread_mutex_lock(&u->mu);
        for (;;) {
            struct timespec now;
            now_mono(&now);
            if (u->stop && (!u->head || !ts_before(&now, &u->stop_deadline))) {
                act = ACT_EXIT;
                break;
            }
            if (u->full && !u->full_logged) {
                u->full_logged = 1;
                note_kind = 1;
                note_pending = u->n_pending;
                act = ACT_NOTE;
                break;
            }
            if (u->full && u->full_logged && u->n_pending <= u->max_backlog / 2 &&
                u->bytes_pending <= u->max_backlog_bytes / 2) {
                u->full = u->full_logged = 0;
                note_kind = 2;
                note_dropped = u->st.dropped - u->dropped_at_note;
                note_pending = u->n_pending;
                act = ACT_NOTE;
                break;
            }
            if (!u->head && (u->c || u->attempted)) {   /* connect eagerly once, then on demand */
                if (u->stop)
                    pthread_cond_timedwait(&u->cv, &u->mu, &u->stop_deadline);
                else
                    pthread_cond_wait(&u->cv, &u->mu);
                continue;
            }
            if (!u->c && ts_before(&now, &u->next_attempt)) {
                const struct timespec *until = &u->next_attempt;
                if (u->stop && ts_before(&u->stop_deadline, until))
                    until = &u->stop_deadline;
                pthread_cond_timedwait(&u->cv, &u->mu, until);
                continue;
            }
            if (!u->c) {
                act = ACT_CONNECT;
                u->attempted = 1;
                if (u->stop) {
                    long left = ts_ms_until(&u->stop_deadline);
                    if (left < conn_timeout)
                        conn_timeout = left < 1 ? 1 : left;
                }
                note_pending = u->n_pending;
                break;
            }
            /* a prefix of the backlog, all in the bucket of the first record, within the caps */
            size_t bytes = 0, cells = 0;
            long long bkt = v4u_bucket_of(u, u->head->unix_s);
            for (rec *r = u->head; r && nb < u->max_batch; r = r->next) {
                size_t rb = v4u_rec_arg_bytes(u, r);
                if (nb > 0 && (v4u_bucket_of(u, r->unix_s) != bkt || bytes + rb > BATCH_MAX_BYTES ||
                               cells + r->n > BATCH_MAX_CELLS))
                    break;
                batch[nb++] = r;
                bytes += rb;
                cells += r->n;
            }
            if (u->stop) {
                long left = ts_ms_until(&u->stop_deadline);
                if (left < conn_timeout)
                    conn_timeout = left < 1 ? 1 : left;
            }
            act = ACT_SEND;
            break;
        }
        pthread_mutex_unlock(&u->mu);

        if (act == ACT_EXIT)
            break;
        if (act == ACT_NOTE) {
            if (note_kind == 1)
                ulog(u, 0, LOGP "backlog full (%zu records, limit %zu records / %zu bytes): dropping new records",
                     note_pending, u->max_backlog, u->max_backlog_bytes);
            else
                ulog(u, 1, LOGP "backlog below half again (%zu records pending); %llu records were dropped",
                     note_pending, (unsigned long long)note_dropped);
            continue;
        }
        if (act == ACT_CONNECT) {
            v4_error e;
            v4_err_clear(&e);
            redisContext *c = v4_redis_connect(u->url, conn_timeout, &e);
            pthread_mutex_lock(&u->mu);
            if (!c) {
                u->st.errors++;
                schedule_retry(u);
                long delay = ts_ms_until(&u->next_attempt);
                int attempt = u->fails;
                pthread_mutex_unlock(&u->mu);
                if (!u->down_logged) {
                    u->down_logged = 1;
                    ulog(u, 0, LOGP "%s unreachable: %s; %zu records pending, retrying with backoff "
                                    "(%d..%d ms)", u->url_masked, e.msg, note_pending, BACKOFF_MIN_MS,
                         BACKOFF_MAX_MS);
                } else {
                    ulog(u, 2, LOGP "connect attempt %d to %s failed: %s; next in %ld ms", attempt,
                         u->url_masked, e.msg, delay);
                }
                continue;
            }
            u->c = c;
            /* The backoff is reset by a good batch, not by a connect: a server that accepts
             * connections but fails every EVAL (READONLY after a failover, OOM) must not
             * be hammered.  An idle connect (nothing pending) has nothing to prove. */
            if (!u->head)
                u->fails = 0;
            if (u->st.connects++ > 0)
                u->st.reconnects++;
            uint64_t nconn = u->st.connects;
            size_t pend = u->n_pending;
            pthread_mutex_unlock(&u->mu);
            if (!u->down_logged && !u->lost_logged)
                ulog(u, 1, LOGP "connected to %s (%s, %zu records pending)", u->url_masked,
                     nconn > 1 ? "reconnected" : "first connection", pend);
            else   /* during an outage: "reconnected" is logged after the first good batch */
                ulog(u, 2, LOGP "connected to %s (connection %llu), sending %zu pending records", u->url_masked,
                     (unsigned long long)nconn, pend);
            continue;
        }

        /* ACT_SEND */
        if (conn_timeout != u->timeout_ms) {
            struct timeval tv = { .tv_sec = conn_timeout / 1000, .tv_usec = (conn_timeout % 1000) * 1000 };
            redisSetTimeout(u->c, tv);
        }
        char reason[256] = "", rej[320] = "";
        int rc = v4u_send_batch(u, batch, nb, res, reason, sizeof reason, rej, sizeof rej);
        rec *to_free = NULL;
        uint64_t nrej;
        pthread_mutex_lock(&u->mu);
        /* unlink the answered records (the batch is a prefix of the list, in order) */
        rec *prev = NULL, *r = u->head;
        for (int i = 0; i < nb; i++) {
            rec *next = r->next;
            if (res[i] == RES_KEEP) {
                prev = r;
            } else {
                if (res[i] == RES_SENT)
                    u->st.sent++;
                else if (res[i] == RES_DUP)
                    u->st.duplicates++;
                else
                    u->st.rejected++;
                rec_unlink(u, prev, r);
                r->next = to_free;
                to_free = r;
            }
            r = next;
        }
        u->st.batches++;
        if (rc != 0) {
            u->st.errors++;
            schedule_retry(u);
        } else {
            u->fails = 0;
        }
        nrej = u->st.rejected;
        size_t pend = u->n_pending;
        pthread_cond_broadcast(&u->drained);
        pthread_mutex_unlock(&u->mu);
        while (to_free) {
            rec *n = to_free->next;
            free(to_free);
            to_free = n;
        }
        if (rej[0]) {
            if (u->rejected_logged == 0)
                ulog(u, 0, LOGP "Redis rejected an EVAL (its records discarded, counted in stats.rejected): %s", rej);
            else
                ulog(u, 2, LOGP "Redis rejected an EVAL: %s (%llu records so far)", rej, (unsigned long long)nrej);
            u->rejected_logged = nrej;
        }
        if (rc != 0) {
            redisFree(u->c);
            u->c = NULL;
            if (!u->lost_logged) {
                u->lost_logged = 1;
                ulog(u, 0, LOGP "lost %s: %s; %zu records kept, reconnecting with backoff", u->url_masked,
                     reason, pend);
            } else {
                ulog(u, 2, LOGP "lost %s again: %s; %zu records kept", u->url_masked, reason, pend);
            }
        } else if (u->down_logged || u->lost_logged) {
            u->down_logged = u->lost_logged = 0;
            ulog(u, 1, LOGP "connected to %s (reconnected after an outage, %zu records pending)", u->url_masked,
                 pend);
        }
    }
    if (u->c) {
        redisFree(u->c);
        u->c = NULL;
    }
    return NULL;
}

/* ---- start / free -------------------------------------------------------------------- */

static void util_destroy(v4_util *u)
{
    rec *r = u->head;
    while (r) {
        rec *n = r->next;
        free(r);
        r = n;
    }
    free(u->argv);
    free(u->argl);
    free(u->num);
    free(u->agg);
    free(u->agg_pos);
    free(u->agg_cells);
    free(u->url);
    free(u->url_masked);
    free(u->prefix);
    free(u->model);
    pthread_cond_destroy(&u->cv);
    pthread_cond_destroy(&u->drained);
    pthread_mutex_destroy(&u->mu);
    free(u);
}

v4_util *v4_util_start(const v4_util_opts *o, v4_util_log_fn log, void *ud, v4_error *err)
{
    if (!o) {
        v4_err_set(err, V4_ERR_INVALID, "v4_util_start", "no options");
        return NULL;
    }
    if (!o->redis_url || !*o->redis_url) {
        v4_err_set(err, V4_OK, "redis url", "expert-utilization counters disabled (no Redis URL)");
        return NULL;
    }
    v4_redis_url pu;
    if (v4_redis_url_parse_full(o->redis_url, &pu, err) != 0)
        return NULL;
    memset(&pu, 0, sizeof pu);
    char masked[512];
    v4_redis_url_mask(o->redis_url, masked, sizeof masked);
    if (!o->model || !*o->model) {
        v4_err_set(err, V4_ERR_CONFIG, "model", "a model name is required for the utilization keys");
        return NULL;
    }
    if (o->n_layers <= 0 || o->n_experts <= 0 || o->top_k <= 0 || o->top_k > o->n_experts) {
        v4_err_set(err, V4_ERR_CONFIG, "shape",
                   "invalid counts shape: n_layers %d, n_experts %d, top_k %d (need > 0 and top_k <= n_experts)",
                   o->n_layers, o->n_experts, o->top_k);
        return NULL;
    }
    if ((uint64_t)o->n_layers * (uint64_t)o->n_experts > MAX_CELLS) {
        v4_err_set(err, V4_ERR_CONFIG, "shape", "n_layers x n_experts = %llu is above the limit %u",
                   (unsigned long long)o->n_layers * (unsigned long long)o->n_experts, MAX_CELLS);
        return NULL;
    }
    v4_util *u = calloc(1, sizeof *u);
    if (!u) {
        v4_err_set(err, V4_ERR_NOMEM, "v4_util_start", "out of memory");
        return NULL;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&u->mu, NULL);
    pthread_cond_init(&u->cv, &ca);
    pthread_cond_init(&u->drained, &ca);
    pthread_condattr_destroy(&ca);
    u->url = dupstr(o->redis_url);
    u->url_masked = dupstr(masked);
    u->prefix = dupstr(v4_util_key_prefix(o->prefix));
    u->model = dupstr(o->model);
    if (!u->url || !u->url_masked || !u->prefix || !u->model) {
        util_destroy(u);
        v4_err_set(err, V4_ERR_NOMEM, "v4_util_start", "out of memory");
        return NULL;
    }
    snprintf(u->shape, sizeof u->shape, "%d,%d,%d", o->n_layers, o->n_experts, o->top_k);
    u->n_experts = o->n_experts;
    u->n_cells = (size_t)o->n_layers * (size_t)o->n_experts + V4_UTIL_NFIGS;
    u->bucket_s = o->bucket_s > 0 ? o->bucket_s : 3600;
    u->bucket_ttl_s = o->bucket_ttl_s > 0 ? o->bucket_ttl_s : 172800;
    u->done_ttl_s = o->done_ttl_s > 0 ? o->done_ttl_s : 604800;
    u->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 1000;
    u->max_backlog = o->max_backlog > 0 ? o->max_backlog : 10000;
    u->max_backlog_bytes = o->max_backlog_bytes > 0 ? o->max_backlog_bytes : ((size_t)64 << 20);
    u->max_batch = o->max_batch > 0 && o->max_batch < BATCH_MAX_RECS ? (int)o->max_batch : BATCH_MAX_RECS;
    u->log = log;
    u->ud = ud;
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    u->rng = ((uint64_t)t.tv_nsec << 20) ^ (uint64_t)t.tv_sec ^ ((uint64_t)getpid() << 40) ^ (uint64_t)(uintptr_t)u;
    if (!u->rng)
        u->rng = 0x9e3779b97f4a7c15ull;
    now_mono(&u->next_attempt);
    int rc = pthread_create(&u->th, NULL, util_thread, u);
    if (rc != 0) {
        util_destroy(u);
        v4_err_set(err, V4_ERR_INTERNAL, "v4_util_start", "cannot start the utilization thread: %s", strerror(rc));
        return NULL;
    }
    v4_err_clear(err);
    return u;
}

void v4_util_free(v4_util *u)
{
    if (!u)
        return;
    pthread_mutex_lock(&u->mu);
    u->stop = 1;
    now_mono(&u->stop_deadline);
    ts_add_ms(&u->stop_deadline, u->timeout_ms);
    now_mono(&u->next_attempt);   /* one immediate connect attempt if disconnected */
    pthread_cond_signal(&u->cv);
    pthread_mutex_unlock(&u->mu);
    pthread_join(u->th, NULL);
    size_t left = u->n_pending;
    if (left) {
        u->st.dropped += left;
        ulog(u, 0, LOGP "shutting down with %zu records not sent to %s (dropped)", left, u->url_masked);
    }
    util_destroy(u);
}
