/* util_redis_check.c - Redis-backed checks of telemetry/util_redis.c, driven by
 * tests/test_util_redis.sh (which provides the servers).  One scenario per run:
 *
 *   util_redis_check basic   counts land in the total and bucket hashes with exact values,
 *                            _tasks/_tokens/_shape, bucket TTL, done guard; the same task
 *                            recorded twice (same or another instance) is counted once (R13);
 *                            a total key that is not a hash: records rejected, nothing written
 *                            Redis: V4_TEST_REDIS_URL (may be shared: unique key prefix)
 *   util_redis_check r19     at most one EVAL per task: 100 records with max_batch 1 -> INFO
 *                            commandstats: exactly +100 EVAL from the client, the only other
 *                            changes are the script's own commands; then a backlog of 100
 *                            (writes paused) with duplicates inside and across batches ->
 *                            a few EVALs, one HINCRBY per field and hash per EVAL, per-record
 *                            sent/duplicates, exact sums
 *   util_redis_check r17     Redis SIGSTOPped while 200 records are made: every record call
 *                            returns within 1 ms (calls during which the scheduler preempted
 *                            the thread - ru_nivcsw - excepted, but all within 100 ms, far
 *                            below the 500 ms command timeout), pending <= max_backlog (50),
 *                            dropped 150;
 *                            after SIGCONT everything accepted lands, exact values
 *   util_redis_check r18     Redis killed and restarted on the same port: backoff while down
 *                            (few attempts, low CPU), reconnect, new records land
 *   util_redis_check auth    requirepass + an ACL user: password-only and user:password URLs
 *                            with /db land in that db; wrong password, NOAUTH and a bad db
 *                            give precise errors; no password in any error or log line
 *   util_redis_check busy    maxmemory 1: every EVAL fails with OOM (transient) while PING
 *                            works: records kept, backoff not reset by the reconnects, one
 *                            error line; maxmemory 0 -> the records land
 *   r17/r18/r19/auth/busy need a private server: V4_PRIV_REDIS_URL, V4_PRIV_REDIS_PIDFILE and
 *   V4_PRIV_REDIS_START (shell command that (re)starts it on the same port).
 *
 * Exit 0 pass, 1 fail (never skips: the wrapper guarantees a server).
 * Log lines of the module go to stderr with a timestamp and are kept for assertions.
 */
#define _GNU_SOURCE   /* RUSAGE_THREAD */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "telemetry/util_redis.h"
#include "testutil.h"

/* ---- log capture --------------------------------------------------------------------- */

typedef struct {
    pthread_mutex_t mu;
    char *buf;
    size_t len, cap;
} logcap;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void cap_log(void *ud, int level, const char *line)
{
    logcap *lc = ud;
    fprintf(stderr, "[%.3f] L%d %s\n", now_s(), level, line);
    pthread_mutex_lock(&lc->mu);
    size_t n = strlen(line) + 4;
    if (lc->len + n + 1 > lc->cap) {
        size_t cap = (lc->cap + n + 1) * 2;
        char *b = realloc(lc->buf, cap);
        if (b) {
            lc->buf = b;
            lc->cap = cap;
        }
    }
    if (lc->len + n + 1 <= lc->cap)
        lc->len += (size_t)sprintf(lc->buf + lc->len, "%d %s\n", level, line);
    pthread_mutex_unlock(&lc->mu);
}

/* Number of captured lines containing s. */
static int log_count(logcap *lc, const char *s)
{
    int n = 0;
    pthread_mutex_lock(&lc->mu);
    for (const char *p = lc->buf; p && (p = strstr(p, s)) != NULL; p += strlen(s))
        n++;
    pthread_mutex_unlock(&lc->mu);
    return n;
}

/* ---- Redis side (plain hiredis through v4_redis_connect) ----------------------------- */

static redisContext *qconn(const char *url)
{
    v4_error e;
    redisContext *c = v4_redis_connect(url, 3000, &e);
    if (!c)
        fprintf(stderr, "cannot connect to the test Redis: %s (%s)\n", e.msg, e.where);
    return c;
}

static redisReply *cmd(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (!r)
        fprintf(stderr, "redis command failed: %s\n", c->errstr);
    return r;
}

static long long int_cmd(redisContext *c, const char *fmt, const char *arg)
{
    redisReply *r = cmd(c, fmt, arg);
    long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -999;
    freeReplyObject(r);
    return v;
}

/* Compare the hash with the expected cell sums; also _tasks, _tokens, _shape and the
 * absence of any other field. */
static void check_hash(redisContext *c, const char *key, const long long *want, int L, int E, long long tasks,
                       long long tokens, const char *shape)
{
    redisReply *r = cmd(c, "HGETALL %s", key);
    CHECK(r && r->type == REDIS_REPLY_ARRAY, "HGETALL %s", key);
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        freeReplyObject(r);
        return;
    }
    long long *got = calloc((size_t)L * (size_t)E, sizeof *got);
    int seen_tasks = 0, seen_tokens = 0, seen_shape = 0, bad = 0, nz = 0;
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const char *f = r->element[i]->str, *v = r->element[i + 1]->str;
        int l, e, used = 0;
        if (strcmp(f, "_tasks") == 0) {
            seen_tasks = 1;
            CHECK(atoll(v) == tasks, "%s _tasks %s want %lld", key, v, tasks);
        } else if (strcmp(f, "_tokens") == 0) {
            seen_tokens = 1;
            CHECK(atoll(v) == tokens, "%s _tokens %s want %lld", key, v, tokens);
        } else if (strcmp(f, "_shape") == 0) {
            seen_shape = 1;
            CHECK(strcmp(v, shape) == 0, "%s _shape %s want %s", key, v, shape);
        } else if (sscanf(f, "%d:%d%n", &l, &e, &used) == 2 && f[used] == '\0' && l >= 0 && l < L && e >= 0 &&
                   e < E) {
            got[(size_t)l * E + e] = atoll(v);
        } else {
            bad++;
            fprintf(stderr, "%s: unexpected field '%s'\n", key, f);
        }
    }
    CHECK(seen_tasks && seen_tokens && seen_shape, "%s lacks _tasks/_tokens/_shape", key);
    CHECK(bad == 0, "%s has %d unexpected fields", key, bad);
    int mism = 0;
    for (int i = 0; i < L * E; i++) {
        if (want[i])
            nz++;
        if (got[i] != want[i]) {
            if (mism++ < 5)
                fprintf(stderr, "%s field %d:%d = %lld want %lld\n", key, i / E, i % E, got[i], want[i]);
        }
    }
    CHECK(mism == 0, "%s: %d cells differ", key, mism);
    CHECK(r->elements == (size_t)(nz + 3) * 2, "%s has %zu fields, want %d (zero cells must be absent)", key,
          r->elements / 2, nz + 3);
    free(got);
    freeReplyObject(r);
}

static void fill_counts(uint32_t *c, int L, int E, int K, unsigned seed, long tokens)
{
    /* tokens x K routed slots per layer, spread by a small LCG; leaves zeros */
    memset(c, 0, sizeof *c * (size_t)L * (size_t)E);
    unsigned s = seed * 2654435761u + 1;
    for (int l = 0; l < L; l++)
        for (long t = 0; t < tokens * K; t++) {
            s = s * 1103515245u + 12345u;
            c[l * E + (int)((s >> 16) % (unsigned)(E / 2 + 1))]++;
        }
}

static v4_util *start_b(const char *url, const char *prefix, size_t max_backlog, size_t max_batch,
                        long timeout_ms, logcap *lc, int L, int E, int K)
{
    v4_util_opts o = {
        .redis_url = url, .prefix = prefix, .model = "tiny", .n_layers = L, .n_experts = E, .top_k = K,
        .bucket_s = 3600, .bucket_ttl_s = 1234, .done_ttl_s = 777, .timeout_ms = timeout_ms,
        .max_backlog = max_backlog, .max_batch = max_batch,
    };
    v4_error e;
    v4_util *u = v4_util_start(&o, cap_log, lc, &e);
    CHECK(u != NULL, "v4_util_start: %s (%s)", e.msg, e.where);
    return u;
}

static v4_util *start(const char *url, const char *prefix, size_t max_backlog, long timeout_ms, logcap *lc,
                      int L, int E, int K)
{
    return start_b(url, prefix, max_backlog, 0, timeout_ms, lc, L, E, K);
}

static void print_stats(const char *what, v4_util *u)
{
    v4_util_stats s;
    v4_util_get_stats(u, &s);
    fprintf(stderr,
            "%s: recorded %llu sent %llu duplicates %llu dropped %llu pending %llu reconnects %llu errors %llu "
            "rejected %llu batches %llu\n",
            what, (unsigned long long)s.recorded, (unsigned long long)s.sent, (unsigned long long)s.duplicates,
            (unsigned long long)s.dropped, (unsigned long long)s.pending, (unsigned long long)s.reconnects,
            (unsigned long long)s.errors, (unsigned long long)s.rejected, (unsigned long long)s.batches);
}

/* ---- basic + R13 ------------------------------------------------------------------------ */

enum { L = 3, E = 8, K = 2 };

static int run_basic(const char *url)
{
    char prefix[64], kt[256], kb[256], kb2[256], kd[256];
    logcap lc = { .mu = PTHREAD_MUTEX_INITIALIZER };
    redisContext *q = qconn(url);
    if (!q)
        return 1;
    for (int attempt = 0; attempt < 3; attempt++) {
        snprintf(prefix, sizeof prefix, "v4t%d_%ld_%d", (int)getpid(), (long)time(NULL), attempt);
        v4_util_key_total(prefix, "tiny", kt, sizeof kt);
        v4_util_key_bucket(prefix, "tiny", time(NULL), 3600, kb, sizeof kb);
        v4_util *u = start(url, prefix, 0, 1000, &lc, L, E, K);
        if (!u)
            return 1;
        uint32_t a[L * E], b[L * E], c[L * E];
        fill_counts(a, L, E, K, 1, 5);
        fill_counts(b, L, E, K, 2, 7);
        fill_counts(c, L, E, K, 3, 9);
        CHECK(v4_util_record(u, "t1", a, 5) == 0, "record t1");
        CHECK(v4_util_record(u, "t2", b, 7) == 0, "record t2");
        CHECK(v4_util_flush(u, 5000) == 0, "flush");
        v4_util_key_bucket(prefix, "tiny", time(NULL), 3600, kb2, sizeof kb2);
        if (strcmp(kb, kb2) != 0) {   /* crossed an hour boundary while recording: redo */
            v4_util_free(u);
            continue;
        }
        long long want[L * E];
        for (int i = 0; i < L * E; i++)
            want[i] = (long long)a[i] + b[i];
        check_hash(q, kt, want, L, E, 2, 12, "3,8,2");
        check_hash(q, kb, want, L, E, 2, 12, "3,8,2");
        long long ttl = int_cmd(q, "TTL %s", kb);
        CHECK(ttl > 1200 && ttl <= 1234, "bucket TTL %lld, want ~1234", ttl);
        CHECK(int_cmd(q, "TTL %s", kt) == -1, "total hash must not expire");
        v4_util_key_done(prefix, "t1", kd, sizeof kd);
        ttl = int_cmd(q, "TTL %s", kd);
        CHECK(ttl > 700 && ttl <= 777, "done guard TTL %lld, want ~777", ttl);
        redisReply *r = cmd(q, "GET %s", kd);
        CHECK(r && r->type == REDIS_REPLY_STRING && strcmp(r->str, "1") == 0, "done guard value");
        freeReplyObject(r);

        /* R13: the same task again (a redelivery) is counted once */
        CHECK(v4_util_record(u, "t1", c, 9) == 0, "record t1 again");
        CHECK(v4_util_flush(u, 5000) == 0, "flush");
        v4_util_stats s;
        v4_util_get_stats(u, &s);
        CHECK(s.recorded == 3 && s.sent == 2 && s.duplicates == 1 && s.dropped == 0 && s.pending == 0 &&
                  s.errors == 0 && s.reconnects == 0 && s.rejected == 0 && s.connects == 1,
              "stats after the duplicate");
        print_stats("basic", u);
        /* ... also when another worker (another instance) sees the redelivery */
        v4_util *u2 = start(url, prefix, 0, 1000, &lc, L, E, K);
        if (u2) {
            CHECK(v4_util_record(u2, "t2", c, 9) == 0, "record t2 on a second instance");
            CHECK(v4_util_flush(u2, 5000) == 0, "flush");
            v4_util_get_stats(u2, &s);
            CHECK(s.duplicates == 1 && s.sent == 0, "second instance: duplicate");
            v4_util_free(u2);
        }
        check_hash(q, kt, want, L, E, 2, 12, "3,8,2");
        check_hash(q, kb, want, L, E, 2, 12, "3,8,2");
        v4_util_free(u);
        CHECK(log_count(&lc, "connected to") == 2, "one 'connected' line per instance");
        const char *keys[] = { kt, kb, kd };
        for (int i = 0; i < 3; i++)
            freeReplyObject(cmd(q, "DEL %s", keys[i]));
        v4_util_key_done(prefix, "t2", kd, sizeof kd);
        freeReplyObject(cmd(q, "DEL %s", kd));
        break;
    }

    /* A permanent error (the total key is not a hash) rejects the records of the EVAL,
     * each counted, and the script writes nothing: no done guard is left behind. */
    snprintf(prefix, sizeof prefix, "v4tw%d_%ld", (int)getpid(), (long)time(NULL));
    v4_util_key_total(prefix, "tiny", kt, sizeof kt);
    freeReplyObject(cmd(q, "SET %s notahash", kt));
    v4_util *u = start(url, prefix, 0, 1000, &lc, L, E, K);
    if (u) {
        uint32_t a[L * E];
        fill_counts(a, L, E, K, 4, 3);
        CHECK(v4_util_record(u, "w1", a, 3) == 0 && v4_util_record(u, "w2", a, 3) == 0, "record w1 w2");
        CHECK(v4_util_flush(u, 5000) == 0, "rejected records leave the backlog");
        v4_util_stats s;
        v4_util_get_stats(u, &s);
        CHECK(s.rejected == 2 && s.sent == 0 && s.duplicates == 0, "WRONGTYPE: rejected %llu sent %llu",
              (unsigned long long)s.rejected, (unsigned long long)s.sent);
        v4_util_free(u);
        for (int i = 1; i <= 2; i++) {
            char id[8];
            snprintf(id, sizeof id, "w%d", i);
            v4_util_key_done(prefix, id, kd, sizeof kd);
            CHECK(int_cmd(q, "EXISTS %s", kd) == 0, "no done guard for a rejected record (%s)", kd);
        }
        CHECK(log_count(&lc, "WRONGTYPE") >= 1, "the rejection is logged");
    }
    freeReplyObject(cmd(q, "DEL %s", kt));
    redisFree(q);
    free(lc.buf);
    TEST_DONE();
}

/* ---- R19 ---------------------------------------------------------------------------------- */

typedef struct { char name[64]; long long calls; } cstat;

static int commandstats(redisContext *q, cstat *out, int max)
{
    redisReply *r = cmd(q, "INFO commandstats");
    if (!r || r->type != REDIS_REPLY_STRING) {
        freeReplyObject(r);
        return -1;
    }
    int n = 0;
    for (char *line = strtok(r->str, "\r\n"); line && n < max; line = strtok(NULL, "\r\n")) {
        char name[64];
        long long calls;
        if (sscanf(line, "cmdstat_%63[^:]:calls=%lld", name, &calls) == 2) {
            snprintf(out[n].name, sizeof out[n].name, "%s", name);
            out[n++].calls = calls;
        }
    }
    freeReplyObject(r);
    return n;
}

static long long calls_of(const cstat *s, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(s[i].name, name) == 0)
            return s[i].calls;
    return 0;
}

static int run_r19(const char *url)
{
    logcap lc = { .mu = PTHREAD_MUTEX_INITIALIZER };
    redisContext *q = qconn(url);
    if (!q)
        return 1;
    freeReplyObject(cmd(q, "FLUSHALL"));
    cstat before[256], after[256];
    int nb = commandstats(q, before, 256);
    CHECK(nb > 0, "INFO commandstats");
    v4_util *u = start_b(url, "r19", 0, 1, 1000, &lc, L, E, K);   /* max_batch 1: one record per EVAL */
    if (!u)
        return 1;
    long long hincrby = 0;
    long long want[L * E];
    memset(want, 0, sizeof want);
    for (int i = 0; i < 100; i++) {
        uint32_t c[L * E];
        char id[32];
        fill_counts(c, L, E, K, 100u + (unsigned)i, 1 + i % 4);
        int nz = 0;
        for (int j = 0; j < L * E; j++) {
            nz += c[j] != 0;
            want[j] += c[j];
        }
        hincrby += 4 + 2 * nz;   /* _tasks, _tokens on both hashes + each cell on both */
        snprintf(id, sizeof id, "r19-%d", i);
        CHECK(v4_util_record(u, id, c, 1 + i % 4) == 0, "record %d", i);
        if (i % 10 == 9)
            usleep(2000);      /* let several batch sizes happen */
    }
    CHECK(v4_util_flush(u, 10000) == 0, "flush");
    v4_util_stats s;
    v4_util_get_stats(u, &s);
    print_stats("r19", u);
    CHECK(s.sent == 100 && s.batches == 100, "sent %llu in %llu EVALs", (unsigned long long)s.sent,
          (unsigned long long)s.batches);
    int na = commandstats(q, after, 256);
    CHECK(na > 0, "INFO commandstats");
    /* expected increments; everything else must be unchanged */
    struct { const char *name; long long delta; } exp[] = {
        { "eval", 100 },           /* the only command the module sends: here one per task */
        { "set", 100 },            /* inside the script: SET NX EX */
        { "hincrby", hincrby },    /* inside the script */
        { "hset", 200 },           /* inside the script: _shape on both hashes */
        { "expire", 100 },         /* inside the script: the bucket */
        { "type", 200 },           /* inside the script: both keys must be hashes (or absent) */
        { "ping", 1 },             /* the connection handshake (no AUTH/SELECT here) */
        { "info", 1 },             /* our own first INFO */
    };
    int nexp = (int)(sizeof exp / sizeof exp[0]);
    for (int i = 0; i < nexp; i++) {
        long long d = calls_of(after, na, exp[i].name) - calls_of(before, nb, exp[i].name);
        CHECK(d == exp[i].delta, "commandstats %s: +%lld, want +%lld", exp[i].name, d, exp[i].delta);
    }
    for (int i = 0; i < na; i++) {
        int known = 0;
        for (int j = 0; j < nexp; j++)
            known |= strcmp(after[i].name, exp[j].name) == 0;
        long long d = after[i].calls - calls_of(before, nb, after[i].name);
        CHECK(known || d == 0, "unexpected command %s: +%lld", after[i].name, d);
    }
    char kt[128];
    v4_util_key_total("r19", "tiny", kt, sizeof kt);
    check_hash(q, kt, want, L, E, 100, 250, "3,8,2");
    v4_util_free(u);

    /* Batched (the default max_batch, 64): a backlog of 100 records built while the server
     * pauses writes drains in a few EVALs; at most one EVAL per task in any case.  Every
     * record touches all L*E cells, so an EVAL that applies anything does exactly
     * 4 + 2*L*E HINCRBYs.  Ids r19b-(i-1) for i % 10 == 5 repeat the previous record (a
     * duplicate inside a batch, or across two), r19b-99 repeats r19-7 of the first part:
     * each counts as a duplicate, per record, and adds nothing. */
    u = start(url, "r19", 0, 1000, &lc, L, E, K);
    if (!u)
        return 1;
    for (int i = 0; i < 200; i++) {   /* the eager first connect (its PING is in "before") */
        v4_util_get_stats(u, &s);
        if (s.connects)
            break;
        usleep(10000);
    }
    nb = commandstats(q, before, 256);
    redisReply *pr = cmd(q, "CLIENT PAUSE 10000 WRITE");
    CHECK(pr && pr->type == REDIS_REPLY_STATUS, "CLIENT PAUSE WRITE");
    freeReplyObject(pr);
    long long tokens = 250, n_new = 0;
    for (int i = 0; i < 100; i++) {
        uint32_t c[L * E];
        char id[32];
        fill_counts(c, L, E, K, 5000u + (unsigned)i, 2);
        for (int j = 0; j < L * E; j++)
            c[j] += 1;
        if (i == 99)
            snprintf(id, sizeof id, "r19-7");
        else
            snprintf(id, sizeof id, "r19b-%d", i % 10 == 5 ? i - 1 : i);
        int dup = i == 99 || i % 10 == 5;
        if (!dup) {
            n_new++;
            tokens += 2;
            for (int j = 0; j < L * E; j++)
                want[j] += c[j];
        }
        CHECK(v4_util_record(u, id, c, 2) == 0, "record %d", i);
    }
    usleep(100 * 1000);
    pr = cmd(q, "CLIENT UNPAUSE");
    freeReplyObject(pr);
    CHECK(v4_util_flush(u, 10000) == 0, "flush");
    v4_util_stats s2;
    v4_util_get_stats(u, &s2);
    print_stats("r19 batched", u);
    na = commandstats(q, after, 256);
    long long evals = calls_of(after, na, "eval") - calls_of(before, nb, "eval");
    long long hi = calls_of(after, na, "hincrby") - calls_of(before, nb, "hincrby");
    fprintf(stderr, "r19 batched: %lld EVALs for 100 records, %lld HINCRBY\n", evals, hi);
    CHECK(s2.sent == (uint64_t)n_new && s2.duplicates == (uint64_t)(100 - n_new) && s2.rejected == 0,
          "per record: sent %llu duplicates %llu, want %lld / %lld", (unsigned long long)s2.sent,
          (unsigned long long)s2.duplicates, n_new, 100 - n_new);
    CHECK(evals >= 1 && evals <= 100 && evals == (long long)s2.batches, "%lld EVALs, %llu batches: at most one per task",
          evals, (unsigned long long)s2.batches);
    CHECK(evals <= 6, "%lld EVALs for a backlog of 100 records (want batches of up to 64)", evals);
    CHECK(calls_of(after, na, "set") - calls_of(before, nb, "set") == 100, "one SET NX per record");
    CHECK(hi % (4 + 2 * L * E) == 0 && hi >= 4 + 2 * L * E && hi <= evals * (4 + 2 * L * E),
          "HINCRBY +%lld: one per distinct field and hash per EVAL (%d) expected", hi, 4 + 2 * L * E);
    CHECK(calls_of(after, na, "expire") - calls_of(before, nb, "expire") == hi / (4 + 2 * L * E),
          "one EXPIRE per EVAL that applied records");
    check_hash(q, kt, want, L, E, 100 + n_new, tokens, "3,8,2");
    v4_util_free(u);
    redisFree(q);
    free(lc.buf);
    TEST_DONE();
}

/* ---- private server control ------------------------------------------------------------ */

static long server_pid(void)
{
    const char *pf = getenv("V4_PRIV_REDIS_PIDFILE");
    FILE *f = pf ? fopen(pf, "r") : NULL;
    long pid = -1;
    if (f) {
        if (fscanf(f, "%ld", &pid) != 1)
            pid = -1;
        fclose(f);
    }
    return pid;
}

static int wait_refused(const char *url, double max_s)
{
    double t0 = now_s();
    while (now_s() - t0 < max_s) {
        v4_error e;
        redisContext *c = v4_redis_connect(url, 200, &e);
        if (!c)
            return 0;
        redisFree(c);
        usleep(50 * 1000);
    }
    return -1;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
}

/* ---- R17 ---------------------------------------------------------------------------------- */

static int run_r17(const char *url)
{
    logcap lc = { .mu = PTHREAD_MUTEX_INITIALIZER };
    long pid = server_pid();
    CHECK(pid > 1, "private redis pid");
    if (pid <= 1)
        return 1;
    redisContext *q = qconn(url);
    if (!q)
        return 1;
    freeReplyObject(cmd(q, "FLUSHALL"));
    redisFree(q);
    enum { N = 200, MAXB = 50 };
    v4_util *u = start(url, "r17", MAXB, 500, &lc, L, E, K);
    if (!u)
        return 1;
    long long want[L * E];
    uint32_t c[L * E];
    fill_counts(c, L, E, K, 7, 3);
    for (int j = 0; j < L * E; j++)
        want[j] = c[j];
    CHECK(v4_util_record(u, "r17-first", c, 3) == 0 && v4_util_flush(u, 5000) == 0, "first record lands");

    CHECK(kill((pid_t)pid, SIGSTOP) == 0, "SIGSTOP redis: %s", strerror(errno));
    usleep(200 * 1000);
    int accepted = 0, dropped = 0, slow = 0, preempted = 0;
    long long tokens = 3;
    double worst = 0;
    for (int i = 0; i < N; i++) {
        char id[32];
        snprintf(id, sizeof id, "r17-%d", i);
        fill_counts(c, L, E, K, 1000u + (unsigned)i, 2);
        struct rusage ru0, ru1;
        getrusage(RUSAGE_THREAD, &ru0);
        double t0 = now_s();
        int rc = v4_util_record(u, id, c, 2);
        double dt = now_s() - t0;
        getrusage(RUSAGE_THREAD, &ru1);
        if (dt > worst)
            worst = dt;
        if (dt > 1e-3) {
            /* On a loaded machine the scheduler may preempt us mid-call: that is not the
             * module waiting.  A slow call without an involuntary context switch is. */
            if (ru1.ru_nivcsw > ru0.ru_nivcsw)
                preempted++;
            else
                slow++;
        }
        if (rc == 0) {
            accepted++;
            tokens += 2;
            for (int j = 0; j < L * E; j++)
                want[j] += c[j];
        } else {
            dropped += rc == 1;
        }
        usleep(5000);   /* 200 records over ~1 s of the outage: the thread keeps trying meanwhile */
    }
    fprintf(stderr, "r17: worst v4_util_record %.3f ms; over 1 ms: %d, %d more while preempted\n", worst * 1e3,
            slow, preempted);
    CHECK(slow == 0, "%d v4_util_record calls took over 1 ms (worst %.3f ms) while Redis was stopped", slow,
          worst * 1e3);
    CHECK(worst < 0.1, "a v4_util_record call took %.3f ms (the command timeout is 500 ms)", worst * 1e3);
    v4_util_stats s;
    v4_util_get_stats(u, &s);
    print_stats("r17 stopped", u);
    CHECK(accepted == MAXB && dropped == N - MAXB, "accepted %d dropped %d, want %d / %d (drop newest)",
          accepted, dropped, MAXB, N - MAXB);
    CHECK(s.dropped == (uint64_t)(N - MAXB) && s.pending == MAXB, "stats dropped %llu pending %llu",
          (unsigned long long)s.dropped, (unsigned long long)s.pending);
    sleep(2);   /* ~3 s stopped in all */
    v4_util_get_stats(u, &s);
    CHECK(s.pending == MAXB && s.errors >= 1 && s.sent == 1, "still stopped: pending %llu errors %llu",
          (unsigned long long)s.pending, (unsigned long long)s.errors);
    CHECK(log_count(&lc, "no answer within 500 ms") >= 1, "a timeout was logged");
    CHECK(log_count(&lc, "backlog full") == 1, "'backlog full' logged once, not per record");

    CHECK(kill((pid_t)pid, SIGCONT) == 0, "SIGCONT redis");
    double t0 = now_s();
    long left = v4_util_flush(u, 20000);
    fprintf(stderr, "r17: backlog flushed %.2f s after SIGCONT\n", now_s() - t0);
    CHECK(left == 0, "%ld records still pending 20 s after SIGCONT", left);
    v4_util_get_stats(u, &s);
    print_stats("r17 resumed", u);
    CHECK(s.sent + s.duplicates == (uint64_t)(1 + MAXB) && s.reconnects >= 1,
          "sent %llu + duplicates %llu, want %d", (unsigned long long)s.sent, (unsigned long long)s.duplicates,
          1 + MAXB);
    for (int i = 0; i < 100 && log_count(&lc, "backlog below half again") == 0; i++)
        usleep(10 * 1000);   /* the thread logs it right after it signalled the flush */
    CHECK(log_count(&lc, "backlog below half again") == 1, "recovery logged once");
    q = qconn(url);
    if (q) {
        char kt[128];
        v4_util_key_total("r17", "tiny", kt, sizeof kt);
        check_hash(q, kt, want, L, E, 1 + MAXB, tokens, "3,8,2");
        redisFree(q);
    }
    v4_util_free(u);
    free(lc.buf);
    TEST_DONE();
}

/* ---- R18 ---------------------------------------------------------------------------------- */

static int run_r18(const char *url)
{
    logcap lc = { .mu = PTHREAD_MUTEX_INITIALIZER };
    const char *start_cmd = getenv("V4_PRIV_REDIS_START");
    long pid = server_pid();
    CHECK(pid > 1 && start_cmd, "private redis pid and start command");
    if (pid <= 1 || !start_cmd)
        return 1;
    v4_util *u = start(url, "r18", 0, 500, &lc, L, E, K);
    if (!u)
        return 1;
    uint32_t c[L * E];
    fill_counts(c, L, E, K, 11, 4);
    CHECK(v4_util_record(u, "r18-first", c, 4) == 0 && v4_util_flush(u, 5000) == 0, "first record lands");

    CHECK(kill((pid_t)pid, SIGKILL) == 0, "kill -9 redis: %s", strerror(errno));
    CHECK(wait_refused(url, 10) == 0, "redis still answers after kill -9");
    long long want[L * E];
    memset(want, 0, sizeof want);
    for (int i = 0; i < 5; i++) {
        char id[32];
        snprintf(id, sizeof id, "r18-%d", i);
        fill_counts(c, L, E, K, 2000u + (unsigned)i, 3);
        for (int j = 0; j < L * E; j++)
            want[j] += c[j];
        double t0 = now_s();
        CHECK(v4_util_record(u, id, c, 3) == 0, "record while down");
        CHECK(now_s() - t0 < 0.05, "record while down took %.3f s", now_s() - t0);
    }
    usleep(200 * 1000);
    v4_util_stats s0, s1;
    v4_util_get_stats(u, &s0);
    double cpu0 = cpu_s(), w0 = now_s();
    sleep(3);
    v4_util_get_stats(u, &s1);
    double cpu = cpu_s() - cpu0, wall = now_s() - w0;
    unsigned long long attempts = (unsigned long long)(s1.errors - s0.errors);
    fprintf(stderr, "r18: %llu failed attempts and %.3f s CPU in %.2f s while down\n", attempts, cpu, wall);
    CHECK(attempts >= 1 && attempts <= 10, "%llu connection attempts in 3 s (want 1..10: backoff)", attempts);
    CHECK(cpu < 0.05 * wall, "CPU %.3f s in %.2f s while Redis is down (busy loop?)", cpu, wall);
    CHECK(s1.pending == 5, "pending %llu while down", (unsigned long long)s1.pending);
    CHECK(log_count(&lc, "0 util-redis: redis://127.0.0.1:") == 1 && log_count(&lc, "unreachable") == 1,
          "'unreachable' at error level once per outage");
    CHECK(log_count(&lc, "util-redis: lost") == 1, "'lost' logged once");

    int rc = system(start_cmd);
    CHECK(rc == 0, "restart redis: %s -> %d", start_cmd, rc);
    double t0 = now_s();
    long left = v4_util_flush(u, 20000);
    fprintf(stderr, "r18: backlog flushed %.2f s after the restart\n", now_s() - t0);
    CHECK(left == 0, "%ld records still pending after the restart", left);
    v4_util_stats s;
    v4_util_get_stats(u, &s);
    print_stats("r18", u);
    CHECK(s.reconnects >= 1 && s.sent == 6, "reconnects %llu sent %llu", (unsigned long long)s.reconnects,
          (unsigned long long)s.sent);
    redisContext *q = qconn(url);
    if (q) {   /* the restarted server started empty (--save ''): only the 5 new records */
        char kt[128];
        v4_util_key_total("r18", "tiny", kt, sizeof kt);
        check_hash(q, kt, want, L, E, 5, 15, "3,8,2");
        redisFree(q);
    }
    /* and records after the reconnect land too */
    CHECK(v4_util_record(u, "r18-after", c, 3) == 0 && v4_util_flush(u, 5000) == 0, "record after reconnect");
    v4_util_free(u);
    CHECK(strstr(lc.buf ? lc.buf : "", "reconnected") != NULL, "reconnect logged");
    free(lc.buf);
    TEST_DONE();
}

/* ---- AUTH / SELECT (private server, password set here and removed at the end) --------- */

static int run_auth(const char *url)
{
    logcap lc = { .mu = PTHREAD_MUTEX_INITIALIZER };
    v4_redis_url pu;
    v4_error e;
    if (v4_redis_url_parse_full(url, &pu, &e) != 0) {
        fprintf(stderr, "bad V4_PRIV_REDIS_URL: %s\n", e.msg);
        return 1;
    }
    char pw_url[300], user_url[300], bad_url[300], db_url[300], q_url[300];
    snprintf(pw_url, sizeof pw_url, "redis://:s3cret@%s:%d/2", pu.host, pu.port);
    snprintf(user_url, sizeof user_url, "redis://alice:p%%40ss@%s:%d/3", pu.host, pu.port);   /* "p@ss" */
    snprintf(bad_url, sizeof bad_url, "redis://:wr0ng@%s:%d/0", pu.host, pu.port);
    snprintf(db_url, sizeof db_url, "redis://:s3cret@%s:%d/99", pu.host, pu.port);
    redisContext *q = qconn(url);
    if (!q)
        return 1;
    freeReplyObject(cmd(q, "FLUSHALL"));
    freeReplyObject(cmd(q, "ACL SETUSER alice on >p@ss ~* &* +@all"));
    redisReply *r = cmd(q, "CONFIG SET requirepass s3cret");
    CHECK(r && r->type == REDIS_REPLY_STATUS, "CONFIG SET requirepass");
    freeReplyObject(r);
    redisFree(q);

    redisContext *c = v4_redis_connect(url, 1000, &e);
    CHECK(!c && strstr(e.msg, "PING refused: NOAUTH"), "no password: %s", e.msg);
    redisFree(c);
    c = v4_redis_connect(bad_url, 1000, &e);
    CHECK(!c && strstr(e.msg, "AUTH refused: WRONGPASS") && !strstr(e.msg, "wr0ng") && !strstr(e.where, "wr0ng"),
          "wrong password: %s (%s)", e.msg, e.where);
    redisFree(c);
    c = v4_redis_connect(db_url, 1000, &e);
    CHECK(!c && strstr(e.msg, "SELECT refused: ERR DB index is out of range") && !strstr(e.where, "s3cret"),
          "db 99: %s (%s)", e.msg, e.where);
    redisFree(c);

    uint32_t cnt[L * E];
    fill_counts(cnt, L, E, K, 77, 2);
    long long want[L * E];
    for (int j = 0; j < L * E; j++)
        want[j] = cnt[j];
    const char *urls[2] = { pw_url, user_url };
    for (int i = 0; i < 2; i++) {
        v4_util *u = start(urls[i], "auth", 0, 1000, &lc, L, E, K);
        if (!u)
            continue;
        CHECK(v4_util_record(u, "a1", cnt, 2) == 0 && v4_util_flush(u, 5000) == 0, "record via %s", urls[i]);
        v4_util_free(u);
        snprintf(q_url, sizeof q_url, "%s", urls[i]);
        q = qconn(q_url);
        if (q) {
            char kt[128];
            v4_util_key_total("auth", "tiny", kt, sizeof kt);
            check_hash(q, kt, want, L, E, 1, 2, "3,8,2");   /* in db 2 resp. 3, once each */
            redisFree(q);
        }
    }
    /* a wrong password at run time: logged once as "unreachable", masked */
    v4_util *u = start(bad_url, "auth", 0, 300, &lc, L, E, K);
    if (u) {
        v4_util_record(u, "a2", cnt, 2);
        CHECK(v4_util_flush(u, 1500) == 1, "nothing lands with a wrong password");
        v4_util_free(u);
    }
    CHECK(log_count(&lc, "0 util-redis: redis://:***@") == 1 && log_count(&lc, "unreachable") == 1 &&
              log_count(&lc, "WRONGPASS") >= 1, "wrong password logged once at error level");
    CHECK(log_count(&lc, "s3cret") == 0 && log_count(&lc, "p@ss") == 0 && log_count(&lc, "wr0ng") == 0,
          "a password appeared in a log line");

    q = qconn(pw_url);
    if (q) {
        freeReplyObject(cmd(q, "CONFIG SET requirepass %s", ""));
        freeReplyObject(cmd(q, "ACL DELUSER alice"));
        redisFree(q);
    }
    q = qconn(url);
    CHECK(q != NULL, "password removed again");
    redisFree(q);
    free(lc.buf);
    TEST_DONE();
}

/* ---- a server that accepts connections but refuses every EVAL (OOM) ---------------------- */

static int run_busy(const char *url)
{
    logcap lc = { .mu = PTHREAD_MUTEX_INITIALIZER };
    redisContext *q = qconn(url);
    if (!q)
        return 1;
    freeReplyObject(cmd(q, "FLUSHALL"));
    redisReply *r = cmd(q, "CONFIG SET maxmemory 1");
    CHECK(r && r->type == REDIS_REPLY_STATUS, "CONFIG SET maxmemory 1");
    freeReplyObject(r);
    v4_util *u = start(url, "busy", 0, 500, &lc, L, E, K);
    if (!u)
        return 1;
    uint32_t c[L * E];
    fill_counts(c, L, E, K, 99, 2);
    long long want[L * E];
    memset(want, 0, sizeof want);
    for (int i = 0; i < 3; i++) {
        char id[32];
        snprintf(id, sizeof id, "busy-%d", i);
        CHECK(v4_util_record(u, id, c, 2) == 0, "record %d", i);
        for (int j = 0; j < L * E; j++)
            want[j] += c[j];
    }
    double cpu0 = cpu_s(), w0 = now_s();
    sleep(3);
    double cpu = cpu_s() - cpu0, wall = now_s() - w0;
    v4_util_stats s;
    v4_util_get_stats(u, &s);
    print_stats("busy (OOM)", u);
    CHECK(s.pending == 3 && s.sent == 0 && s.rejected == 0, "OOM is transient: records kept");
    CHECK(s.errors >= 1 && s.errors <= 10 && s.connects <= 10,
          "%llu failed batches / %llu connects in 3 s: the backoff must not be reset by a connect",
          (unsigned long long)s.errors, (unsigned long long)s.connects);
    CHECK(cpu < 0.05 * wall, "CPU %.3f s in %.2f s", cpu, wall);
    CHECK(log_count(&lc, "0 util-redis: lost") == 1 && log_count(&lc, "server busy: OOM") >= 1,
          "'lost: server busy: OOM' logged once at error level");
    r = cmd(q, "CONFIG SET maxmemory 0");
    CHECK(r && r->type == REDIS_REPLY_STATUS, "CONFIG SET maxmemory 0");
    freeReplyObject(r);
    CHECK(v4_util_flush(u, 20000) == 0, "records land once the server accepts writes");
    v4_util_free(u);
    CHECK(log_count(&lc, "reconnected after an outage") == 1, "recovery logged once");
    char kt[128];
    v4_util_key_total("busy", "tiny", kt, sizeof kt);
    check_hash(q, kt, want, L, E, 3, 6, "3,8,2");
    redisFree(q);
    free(lc.buf);
    TEST_DONE();
}

int main(int argc, char **argv)
{
    setvbuf(stderr, NULL, _IOLBF, 0);
    const char *what = argc > 1 ? argv[1] : "";
    if (strcmp(what, "basic") == 0) {
        const char *url = getenv("V4_TEST_REDIS_URL");
        if (!url || !*url) {
            fprintf(stderr, "util_redis_check: V4_TEST_REDIS_URL is not set\n");
            return 1;
        }
        return run_basic(url);
    }
    const char *purl = getenv("V4_PRIV_REDIS_URL");
    if (!purl || !*purl) {
        fprintf(stderr, "util_redis_check: V4_PRIV_REDIS_URL is not set\n");
        return 1;
    }
    if (strcmp(what, "r19") == 0)
        return run_r19(purl);
    if (strcmp(what, "r17") == 0)
        return run_r17(purl);
    if (strcmp(what, "r18") == 0)
        return run_r18(purl);
    if (strcmp(what, "auth") == 0)
        return run_auth(purl);
    if (strcmp(what, "busy") == 0)
        return run_busy(purl);
    fprintf(stderr, "usage: util_redis_check basic|r19|r17|r18|auth|busy\n");
    return 2;
}
