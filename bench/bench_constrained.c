/* bench_constrained.c - what an output constraint costs the continuous executor: aggregate
 * generated tokens/s of N concurrent greedy tasks with a JSON Schema on every task against
 * the same tasks without one (issue 35's target: within 3% at N = 1 and N = 8).
 *
 *   bench_constrained [--model DIR] [--ns 1,8] [--tasks-per-slot K] [--tokens T]
 *                     [--prompt P] [--runs R] [--threads T] [--numerics exact|fast]
 *                     [--schema FILE]
 *
 * Each run puts N*K tasks (P random prompt ids, T generated tokens) through a fresh
 * continuous executor of capacity N (worker/serve/exec_cont.c), driven as `v4fleet batch`
 * drives it.  Free tasks run with ignore_eos; constrained ones carry response_format
 * json_schema with the built-in schema (an array of at least 60 records of a name, an
 * integer, an enum and a boolean: the answer cannot end before T tokens, so both runs
 * generate the same count; every task must end "length" with T tokens or the row says
 * so) or --schema FILE.  Free and constrained runs alternate (free, constrained, free,
 * ...) so that a shared machine's drift hits both alike; the table gives the medians of
 * R runs each of tokens/s and of tokens per CPU-second of this process (what other
 * processes on a shared host take does not count), their ratios, and the target judged
 * on the CPU-second ratio.  The model: models/bench/small as
 * bench_batching makes it (`v4fleet mkmodel --preset small --seed 1`).  Not a test: it
 * prints, never fails on speed.  Thread: main (the runner's pool does the work).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "bench/membw.h"
#include "config/model_config.h"
#include "worker/serve/executor.h"

#ifndef V4_BIN_PATH
#define V4_BIN_PATH "build/v4fleet"
#endif

static const char BUILTIN_SCHEMA[] =
    "{\"type\":\"array\",\"minItems\":60,\"items\":{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"maxLength\":24},\"count\":{\"type\":\"integer\",\"minimum\":0},"
    "\"kind\":{\"enum\":[\"alpha\",\"beta\",\"gamma\"]},\"ok\":{\"type\":\"boolean\"}},"
    "\"required\":[\"name\",\"count\",\"kind\",\"ok\"],\"additionalProperties\":false}}";

typedef struct opts {
    const char *model, *ns, *numerics, *schema_file;
    int k, tokens, prompt, runs, threads;
} opts;

typedef struct run_res {
    double tps;
    double cpu_tps;    /* tokens per CPU-second of this process (other processes' load does not count) */
    long long tokens;
    int short_tasks;   /* tasks that ended before T tokens (or failed) */
} run_res;

/* CPU seconds used by this process so far (user + system, every thread). */
static double cpu_now(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)u.ru_utime.tv_sec + (double)u.ru_stime.tv_sec + 1e-6 * (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof v[0], cmp_d);
    return v[n / 2];
}

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s)
        s[n] = 0;
    fclose(f);
    return s;
}

/* One run: n slots, k tasks per slot; fields: the packet's tail after the prompt. */
static int run_once(v4_runner *r, int n, const opts *o, const char *fields, unsigned *rng, run_res *rr)
{
    char err[256];
    v4_exec *x = v4_exec_continuous(r, n, NULL, NULL, err, sizeof err);
    if (!x) {
        fprintf(stderr, "bench_constrained: %s\n", err);
        return -1;
    }
    const int V = v4_runner_config(r)->vocab_size, jobs = n * o->k;
    int submitted = 0, rc = 0;
    v4_job *fin[64];
    rr->tokens = 0;
    rr->short_tasks = 0;
    double t0 = v4_bench_now(), c0 = cpu_now();
    while (submitted < jobs || x->ops->in_flight(x) > 0) {
        if (submitted < jobs && x->ops->in_flight(x) < x->ops->capacity(x)) {
            const size_t cap = (size_t)o->prompt * 12 + strlen(fields) + 256;
            char *line = malloc(cap);
            v4_job *j = calloc(1, sizeof *j);
            if (!line || !j) {
                free(line);
                free(j);
                rc = -1;
                break;
            }
            size_t at = (size_t)snprintf(line, cap, "{\"id\":\"c%d\",\"input_ids\":[", submitted);
            for (int p = 0; p < o->prompt; p++) {
                *rng = *rng * 1103515245u + 12345u;
                at += (size_t)snprintf(line + at, cap - at, "%s%u", p ? "," : "", 2 + (*rng >> 8) % (unsigned)(V - 2));
            }
            snprintf(line + at, cap - at, "],\"max_tokens\":%d,\"temperature\":0,%s}", o->tokens, fields);
            v4_task_error te = {0};
            int bad = v4_task_parse(line, strlen(line), 1 << 22, &j->task, &te);
            free(line);
            if (bad || x->ops->submit(x, j)) {
                fprintf(stderr, "bench_constrained: task %d refused: %s\n", submitted, bad ? te.message : "no free slot");
                v4_job_free(j);
                free(j);
                rc = -1;
                break;
            }
            submitted++;
            continue;
        }
        int k = x->ops->step(x, fin, 64);
        for (int i = 0; i < k; i++) {
            if (fin[i]->rc)
                fprintf(stderr, "bench_constrained: task failed: %s: %s\n", fin[i]->err.where, fin[i]->err.message);
            rr->short_tasks += fin[i]->rc || fin[i]->out.n_tokens != o->tokens;
            rr->tokens += fin[i]->out.n_tokens;
            v4_job_free(fin[i]);
            free(fin[i]);
        }
    }
    rr->tps = (double)rr->tokens / (v4_bench_now() - t0);
    const double cs = cpu_now() - c0;
    rr->cpu_tps = cs > 0 ? (double)rr->tokens / cs : 0;
    x->ops->destroy(x);
    return rc;
}

static int ensure_model(const char *dir)
{
    char p[4200], cmd[9000];
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    struct stat st;
    if (stat(p, &st) == 0)
        return 0;
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && '%s' mkmodel --out '%s' --preset small --seed 1 --force", dir,
             V4_BIN_PATH, dir);
    fprintf(stderr, "bench_constrained: generating the small model: %s\n", cmd);
    return system(cmd) == 0 ? 0 : -1;
}

static int parse(int argc, char **argv, opts *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help")) {
            printf("usage: bench_constrained [--model DIR] [--ns 1,8] [--tasks-per-slot K] [--tokens T] [--prompt P]\n"
                   "                         [--runs R] [--threads T] [--numerics exact|fast] [--schema FILE]\n");
            exit(0);
        }
        if (!v) {
            fprintf(stderr, "bench_constrained: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (!strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "--ns")) o->ns = v;
        else if (!strcmp(a, "--numerics")) o->numerics = v;
        else if (!strcmp(a, "--schema")) o->schema_file = v;
        else if (!strcmp(a, "--tasks-per-slot")) o->k = atoi(v);
        else if (!strcmp(a, "--tokens")) o->tokens = atoi(v);
        else if (!strcmp(a, "--prompt")) o->prompt = atoi(v);
        else if (!strcmp(a, "--runs")) o->runs = atoi(v);
        else if (!strcmp(a, "--threads")) o->threads = atoi(v);
        else {
            fprintf(stderr, "bench_constrained: unknown option %s\n", a);
            return 2;
        }
    }
    if (o->k < 1 || o->tokens < 1 || o->prompt < 1 || o->runs < 1 || o->runs > 32 || o->threads < 0) {
        fprintf(stderr, "bench_constrained: bad --tasks-per-slot / --tokens / --prompt / --runs / --threads\n");
        return 2;
    }
    return 0;
}

int main(int argc, char **argv)
{
    opts o = {"models/bench/small", "1,8", "exact", NULL, 2, 48, 16, 5, 0};
    int st = parse(argc, argv, &o);
    if (st)
        return st;
    char *schema = o.schema_file ? read_all(o.schema_file) : NULL;
    if (o.schema_file && !schema) {
        fprintf(stderr, "bench_constrained: cannot read %s\n", o.schema_file);
        return 2;
    }
    const char *stext = schema ? schema : BUILTIN_SCHEMA;
    size_t fcap = strlen(stext) + 256;
    char *cfields = malloc(fcap);
    if (!cfields || ensure_model(o.model)) {
        free(schema);
        free(cfields);
        return 1;
    }
    snprintf(cfields, fcap, "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"b\",\"schema\":%s}}",
             stext);
    int ns[16], nn = 0, maxn = 1;
    for (const char *p = o.ns; *p && nn < 16;) {
        ns[nn] = atoi(p);
        if (ns[nn] < 1 || ns[nn] > 64) {
            fprintf(stderr, "bench_constrained: bad --ns %s\n", o.ns);
            return 2;
        }
        maxn = ns[nn] > maxn ? ns[nn] : maxn;
        nn++;
        p += strcspn(p, ",");
        p += *p == ',';
    }
    v4_task_error e = {0};
    const v4_runner_opts ro = {.threads = o.threads, .max_batch = maxn, .numerics = o.numerics};
    v4_runner *r = v4_runner_open(o.model, "bench", &ro, &e);
    if (!r) {
        fprintf(stderr, "bench_constrained: %s: %s: %s\n", o.model, e.where, e.message);
        return 1;
    }
    char cpu[256];
    v4_bench_cpu_name(cpu, sizeof cpu);
    const v4_config *cfg = v4_runner_config(r);
    printf("tasks: %d per slot, %d prompt ids, %d generated tokens each (greedy); constraint: %s (%zu bytes); "
           "free and constrained runs alternate; median of %d runs each\n\n",
           o.k, o.prompt, o.tokens, schema ? o.schema_file : "built-in json_schema", strlen(stext), o.runs);
    printf("| machine | config | mode | N | free tokens/s | constrained tokens/s | constrained / free | free tokens/CPU-s | "
           "constrained tokens/CPU-s | per CPU-s | target | short tasks |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    int rc = 0;
    unsigned rng = 4242;
    for (int t = 0; t < nn; t++) {
        double fv[32], cv[32], fc[32], cc[32];
        int shorts = 0;
        run_res rr;
        for (int k = 0; k < o.runs && !rc; k++) {
            unsigned r1 = rng, r2 = rng;   /* the same prompts both ways */
            rc |= run_once(r, ns[t], &o, "\"ignore_eos\":true", &r1, &rr);
            fv[k] = rr.tps;
            fc[k] = rr.cpu_tps;
            rc |= run_once(r, ns[t], &o, cfields, &r2, &rr);
            cv[k] = rr.tps;
            cc[k] = rr.cpu_tps;
            shorts += rr.short_tasks;
            rng = r1;
        }
        if (rc)
            break;
        const double f = median(fv, o.runs), c = median(cv, o.runs), f1 = median(fc, o.runs), c1 = median(cc, o.runs);
        const double key = f1 > 0 ? c1 / f1 : c / f;   /* judged per CPU-second: robust to a shared host */
        printf("| %s | small (%d layers, dim %d, vocab %d), %d thr | %s | %d | %.2f | %.2f | %.3f | %.2f | %.2f | %.3f | "
               ">= 0.970 per CPU-s %s | %d |\n",
               cpu, cfg->n_layers, cfg->dim, cfg->vocab_size, o.threads, o.numerics, ns[t], f, c, c / f, f1, c1,
               f1 > 0 ? c1 / f1 : 0, key >= 0.97 ? "(met)" : "(NOT met)", shorts);
        fflush(stdout);
    }
    v4_runner_free(r);
    free(schema);
    free(cfields);
    return rc ? 1 : 0;
}
