/* bench_util_redis.c - Redis cost of the expert-utilization counters (telemetry/util_redis.c)
 * for a model shape, per task, before and after the records were aggregated into one EVAL.
 *
 * Configs (each on its own key prefix, keys deleted afterwards):
 *   before      the wire of commit 3c7aeab, replayed here with plain hiredis: one EVAL per
 *               task (SET NX + one HINCRBY per cell on both hashes), pipelined by 64 like
 *               the old thread did.  The script below is that commit's script, verbatim.
 *   after k=N   the module itself (v4_util_start with max_batch = N): a backlog of tasks
 *               is built while the server pauses writes (CLIENT PAUSE WRITE, so the thread
 *               cannot drain it early), then the pause is lifted and the drain is timed
 *               (v4_util_flush).  Batches hold up to N records of one time bucket.
 * Every task is a "long" one: `tokens` tokens x top_k routed slots per layer, spread over
 * the experts at random, so nearly every (layer, expert) cell is non-zero.
 * Redis time = the delta of INFO commandstats cmdstat_eval usec (the whole script, nested
 * commands included) / tasks; tasks/s = tasks / wall time of the drain (client, network
 * and server together).  The results are checked: _tasks of the total hash must equal the
 * tasks sent and the sum of one cell must match.
 *
 * Usage: bench_util_redis [URL] [-L layers] [-E experts] [-K top_k] [-T tokens]
 *                         [-n tasks] [-k list, e.g. 1,16,64] [-r repetitions (1..16)]
 *   URL default $V4_BENCH_REDIS_URL, else redis://127.0.0.1:6379/0.  Use a server of your
 *   own: the bench pauses its writes for a moment (CLIENT PAUSE) and adds load.
 * Defaults: the V4-Flash shape (43 layers, 256 routed experts, top-6), 2000 tokens a task,
 * 128 tasks per config (64 for before and k=1), k = 1,16,64, 3 repetitions of each.
 * Prints one table: machine, config, tasks, EVALs, tasks/s, Redis usec per task; each
 * row is the repetition with the least Redis time (a shared machine adds noise).
 * Ownership: everything is local to main.  Thread: main (plus the module's thread).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "telemetry/redis_conn.h"
#include "telemetry/util_redis.h"

/* The per-task script of commit 3c7aeab (the "before" config). */
static const char OLD_SCRIPT[] =
    "if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then return 0 end\n"
    "local t, b = KEYS[2], KEYS[3]\n"
    "for _, k in ipairs({t, b}) do\n"
    "  redis.call('HINCRBY', k, '_tasks', 1)\n"
    "  redis.call('HINCRBY', k, '_tokens', ARGV[3])\n"
    "  redis.call('HSET', k, '_shape', ARGV[4])\n"
    "end\n"
    "for i = 5, #ARGV, 2 do\n"
    "  redis.call('HINCRBY', t, ARGV[i], ARGV[i + 1])\n"
    "  redis.call('HINCRBY', b, ARGV[i], ARGV[i + 1])\n"
    "end\n"
    "redis.call('EXPIRE', b, ARGV[2])\n"
    "return 1\n";

typedef struct bench {
    const char *url;
    int L, E, K;
    long tokens;
    redisContext *q;   /* control connection */
    uint32_t **counts; /* [tasks][L * E] */
    int n_tasks;
    char machine[256];
} bench;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* calls and usec of cmdstat_eval; -1 on error. */
static int eval_stats(redisContext *q, long long *calls, long long *usec)
{
    redisReply *r = redisCommand(q, "INFO commandstats");
    int rc = -1;
    if (r && r->type == REDIS_REPLY_STRING) {
        const char *p = strstr(r->str, "cmdstat_eval:");
        *calls = *usec = 0;
        if (!p || sscanf(p, "cmdstat_eval:calls=%lld,usec=%lld", calls, usec) == 2)
            rc = 0;
    }
    freeReplyObject(r);
    return rc;
}

static long long hget_ll(redisContext *q, const char *key, const char *field)
{
    redisReply *r = redisCommand(q, "HGET %s %s", key, field);
    long long v = r && r->type == REDIS_REPLY_STRING ? atoll(r->str) : -1;
    freeReplyObject(r);
    return v;
}

static void del_keys(redisContext *q, const char *prefix, const char *model, int n_tasks)
{
    char k[256];
    v4_util_key_total(prefix, model, k, sizeof k);
    freeReplyObject(redisCommand(q, "DEL %s", k));
    v4_util_key_bucket(prefix, model, time(NULL), 3600, k, sizeof k);
    freeReplyObject(redisCommand(q, "DEL %s", k));
    v4_util_key_bucket(prefix, model, time(NULL) - 3600, 3600, k, sizeof k);
    freeReplyObject(redisCommand(q, "DEL %s", k));
    for (int i = 0; i < n_tasks; i++) {
        char id[32];
        snprintf(id, sizeof id, "task-%d", i);
        v4_util_key_done(prefix, id, k, sizeof k);
        freeReplyObject(redisCommand(q, "DEL %s", k));
    }
}

/* _tasks and cell 0:0 of the total hash against what was sent. */
static int verify(bench *b, const char *prefix, int n)
{
    char k[256];
    v4_util_key_total(prefix, "bench", k, sizeof k);
    long long want = 0;
    for (int i = 0; i < n; i++)
        want += b->counts[i][0];
    long long tasks = hget_ll(b->q, k, "_tasks"), c00 = hget_ll(b->q, k, "0:0");
    if (tasks != n || c00 != want) {
        fprintf(stderr, "bench: %s: _tasks %lld (want %d), 0:0 %lld (want %lld)\n", k, tasks, n, c00, want);
        return -1;
    }
    return 0;
}

/* One measurement of a config: EVALs, drain wall time, Redis usec. */
typedef struct result {
    long long evals, usec;
    double wall;
} result;

/* Best of the repetitions (least Redis time; the machine may be shared and noisy). */
static void row(const bench *b, const char *config, int n, const result *r, int reps)
{
    const result *best = &r[0];
    for (int i = 1; i < reps; i++)
        if (r[i].usec < best->usec)
            best = &r[i];
    printf("| %s | %s | %d | %lld | %.0f | %.0f |\n", b->machine, config, n, best->evals, n / best->wall,
           (double)best->usec / n);
    fflush(stdout);
}

/* "before": one EVAL of OLD_SCRIPT per task, pipelined by 64. */
static int run_before(bench *b, int n, result *res)
{
    const char *prefix = "v4bench_before";
    del_keys(b->q, prefix, "bench", n);
    v4_error e;
    redisContext *c = v4_redis_connect(b->url, 60000, &e);
    if (!c) {
        fprintf(stderr, "bench: %s\n", e.msg);
        return -1;
    }
    size_t cells = (size_t)b->L * (size_t)b->E;
    const char **argv = malloc((10 + 2 * cells) * sizeof *argv);
    size_t *argl = malloc((10 + 2 * cells) * sizeof *argl);
    char *num = malloc(cells * 32 + 4096);
    if (!argv || !argl || !num)
        return -1;
    char shape[64], kd[256], kt[256], kb[256], tok[32];
    snprintf(shape, sizeof shape, "%d,%d,%d", b->L, b->E, b->K);
    v4_util_key_total(prefix, "bench", kt, sizeof kt);
    v4_util_key_bucket(prefix, "bench", time(NULL), 3600, kb, sizeof kb);
    snprintf(tok, sizeof tok, "%ld", b->tokens);
    long long c0, u0, c1, u1;
    if (eval_stats(b->q, &c0, &u0))
        return -1;
    double t0 = now_s();
    for (int i0 = 0; i0 < n; i0 += 64) {
        int m = n - i0 < 64 ? n - i0 : 64;
        for (int i = i0; i < i0 + m; i++) {
            char id[32];
            snprintf(id, sizeof id, "task-%d", i);
            v4_util_key_done(prefix, id, kd, sizeof kd);
            size_t a = 0;
            char *p = num;
            const char *fixed[] = { "EVAL", OLD_SCRIPT, "3", kd, kt, kb, "604800", "172800", tok, shape };
            for (size_t j = 0; j < 10; j++) {
                argv[a] = fixed[j];
                argl[a++] = strlen(fixed[j]);
            }
            for (size_t x = 0; x < cells; x++) {
                if (!b->counts[i][x])
                    continue;
                int w = sprintf(p, "%zu:%zu", x / (size_t)b->E, x % (size_t)b->E);
                argv[a] = p;
                argl[a++] = (size_t)w;
                p += w + 1;
                w = sprintf(p, "%u", b->counts[i][x]);
                argv[a] = p;
                argl[a++] = (size_t)w;
                p += w + 1;
            }
            redisAppendCommandArgv(c, (int)a, argv, argl);
        }
        for (int i = 0; i < m; i++) {
            void *r = NULL;
            if (redisGetReply(c, &r) != REDIS_OK || !r || ((redisReply *)r)->type != REDIS_REPLY_INTEGER) {
                fprintf(stderr, "bench: before: bad reply (%s)\n", c->errstr);
                return -1;
            }
            freeReplyObject(r);
        }
    }
    double wall = now_s() - t0;
    if (eval_stats(b->q, &c1, &u1))
        return -1;
    int rc = verify(b, prefix, n);
    *res = (result){ c1 - c0, u1 - u0, wall };
    del_keys(b->q, prefix, "bench", n);
    redisFree(c);
    free(argv);
    free(argl);
    free(num);
    return rc;
}

/* "after": the module with max_batch = k, draining a backlog of n records. */
static int run_after(bench *b, int n, int k, result *res)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "v4bench_k%d", k);
    del_keys(b->q, prefix, "bench", n);
    v4_util_opts o = {
        .redis_url = b->url, .prefix = prefix, .model = "bench", .n_layers = b->L, .n_experts = b->E,
        .top_k = b->K, .timeout_ms = 60000, .max_batch = (size_t)k, .max_backlog = (size_t)n + 1,
        .max_backlog_bytes = (size_t)1 << 32,
    };
    v4_error e;
    v4_util *u = v4_util_start(&o, NULL, NULL, &e);
    if (!u) {
        fprintf(stderr, "bench: v4_util_start: %s\n", e.msg);
        return -1;
    }
    v4_util_stats s;
    for (int i = 0; i < 500; i++) {   /* wait for the eager first connect */
        v4_util_get_stats(u, &s);
        if (s.connects)
            break;
        usleep(10000);
    }
    redisReply *r = redisCommand(b->q, "CLIENT PAUSE 60000 WRITE");
    int paused = r && r->type == REDIS_REPLY_STATUS;
    freeReplyObject(r);
    if (!paused)
        fprintf(stderr, "bench: CLIENT PAUSE WRITE refused: the first batches may be smaller\n");
    for (int i = 0; i < n; i++) {
        char id[32];
        snprintf(id, sizeof id, "task-%d", i);
        if (v4_util_record(u, id, b->counts[i], b->tokens) != 0) {
            fprintf(stderr, "bench: record %d refused\n", i);
            return -1;
        }
    }
    usleep(100000);
    long long c0, u0, c1, u1;
    if (eval_stats(b->q, &c0, &u0))
        return -1;
    double t0 = now_s();
    freeReplyObject(redisCommand(b->q, "CLIENT UNPAUSE"));
    long left = v4_util_flush(u, 600000);
    double wall = now_s() - t0;
    if (eval_stats(b->q, &c1, &u1))
        return -1;
    v4_util_get_stats(u, &s);
    v4_util_free(u);
    if (left || s.sent != (uint64_t)n) {
        fprintf(stderr, "bench: k=%d: %ld pending, %llu sent\n", k, left, (unsigned long long)s.sent);
        return -1;
    }
    int rc = verify(b, prefix, n);
    *res = (result){ c1 - c0, u1 - u0, wall };
    del_keys(b->q, prefix, "bench", n);
    return rc;
}

int main(int argc, char **argv)
{
    bench b = { .L = 43, .E = 256, .K = 6, .tokens = 2000 };
    const char *env = getenv("V4_BENCH_REDIS_URL");
    b.url = env && *env ? env : "redis://127.0.0.1:6379/0";
    int n = 128, reps = 3;
    char klist[128] = "1,16,64";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-') {
            b.url = a;
            continue;
        }
        if (i + 1 >= argc || strlen(a) != 2 || !strchr("LEKTnkr", a[1])) {
            fprintf(stderr, "usage: bench_util_redis [URL] [-L layers] [-E experts] [-K top_k] [-T tokens] "
                            "[-n tasks] [-k 1,16,64] [-r reps]\n");
            return 2;
        }
        const char *v = argv[++i];
        switch (a[1]) {
        case 'L': b.L = atoi(v); break;
        case 'E': b.E = atoi(v); break;
        case 'K': b.K = atoi(v); break;
        case 'T': b.tokens = atol(v); break;
        case 'n': n = atoi(v); break;
        case 'r': reps = atoi(v); break;
        default: snprintf(klist, sizeof klist, "%s", v); break;
        }
    }
    if (b.L <= 0 || b.E <= 0 || b.K <= 0 || b.K > b.E || b.tokens <= 0 || n <= 0 || reps < 1 || reps > 16) {
        fprintf(stderr, "bench_util_redis: bad shape or counts\n");
        return 2;
    }
    v4_error e;
    if (!(b.q = v4_redis_connect(b.url, 60000, &e))) {
        fprintf(stderr, "bench_util_redis: %s (%s)\n", e.msg, e.where);
        return 1;
    }
    /* machine: CPU model, cores, Redis version */
    char cpu[128] = "?", ver[32] = "?";
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0) {
            char *c = strchr(line, ':');
            snprintf(cpu, sizeof cpu, "%.100s", c ? c + 2 : line);
            cpu[strcspn(cpu, "\n")] = 0;
            break;
        }
    if (f)
        fclose(f);
    redisReply *r = redisCommand(b.q, "INFO server");
    const char *p = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "redis_version:") : NULL;
    if (p)
        sscanf(p, "redis_version:%31[^\r\n]", ver);
    freeReplyObject(r);
    snprintf(b.machine, sizeof b.machine, "%s, %ld CPUs, Redis %s", cpu, sysconf(_SC_NPROCESSORS_ONLN), ver);

    size_t cells = (size_t)b.L * (size_t)b.E;
    b.n_tasks = n;
    b.counts = calloc((size_t)n, sizeof *b.counts);
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    size_t nz = 0;
    for (int i = 0; i < n; i++) {
        if (!b.counts || !(b.counts[i] = calloc(cells, sizeof **b.counts))) {
            fprintf(stderr, "bench_util_redis: out of memory\n");
            return 1;
        }
        for (int l = 0; l < b.L; l++)
            for (long t = 0; t < b.tokens * b.K; t++)
                b.counts[i][(size_t)l * (size_t)b.E + rnd(&seed) % (uint64_t)b.E]++;
        for (size_t x = 0; x < cells; x++)
            nz += b.counts[i][x] != 0;
    }
    printf("shape %d layers x %d experts, top-%d, %ld tokens a task: %.0f of %zu cells non-zero per task\n\n",
           b.L, b.E, b.K, b.tokens, (double)nz / n, cells);
    printf("| machine | config | tasks | EVALs | tasks/s | Redis usec per task |\n|---|---|---|---|---|---|\n");
    int rc = 0;
    int n_small = n < 64 ? n : 64;
    result res[16];
    for (int i = 0; i < reps && rc == 0; i++)
        rc |= run_before(&b, n_small, &res[i]);
    if (rc == 0)
        row(&b, "before: 1 EVAL per task (HINCRBY per cell)", n_small, res, reps);
    for (char *save = NULL, *tok = strtok_r(klist, ",", &save); tok && rc == 0; tok = strtok_r(NULL, ",", &save)) {
        int k = atoi(tok), nk = k == 1 ? n_small : n;
        if (k <= 0)
            continue;
        for (int i = 0; i < reps && rc == 0; i++)
            rc |= run_after(&b, nk, k, &res[i]);
        char config[96];
        snprintf(config, sizeof config, "after: k = %d records per EVAL (one HINCRBY per field)", k);
        if (rc == 0)
            row(&b, config, nk, res, reps);
    }
    for (int i = 0; i < n; i++)
        free(b.counts[i]);
    free(b.counts);
    redisFree(b.q);
    return rc ? 1 : 0;
}
