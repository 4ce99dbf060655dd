/* cmd_grammar_bench.c - `v4fleet grammar-bench`: the constraint engine on MaskBench, the
 * public benchmark of structured-output engines (JSONSchemaBench's maskbench data), with
 * its protocol, on one thread, with a real tokenizer.
 *
 *   v4fleet grammar-bench --tokenizer DIR [--limit N] [--stride K] [--offset O]
 *                         [--masks all|N] [--spaced] [--timeout-ms T] [--fail-log FILE]
 *                         [--dump-texts FILE] [--cpu-time] FILE
 *
 * FILE: JSON lines {"id", "schema", "tests": [{"valid", "data"}]} (".gz": read through
 * gzip -dc).  For each schema: compile it (TTFM = compile + the first mask); for each test
 * serialize its data (compact JSON, or --spaced as Python's json.dumps writes it; reals
 * in their shortest form), tokenize it, and feed it token by token: the mask computed
 * before a token must allow it (valid instances; a refusal is a "validation error"), and
 * an invalid instance must be refused somewhere, the end included (accepting it is an
 * "invalidation error").  A schema passes when it compiles and all its tests behave.
 * --masks N computes the mask (and times it, TBM) at every N-th token only and checks the
 * other tokens by commit, which the test suite shows gives the same answer; "all" is the
 * protocol itself.  --stride K takes every K-th schema (from --offset): a stratified
 * subset.  A schema whose work passes --timeout-ms (default 30000) counts as a timeout.
 * Prints a progress line every 10 s on stderr and the table on stdout, beside the figures
 * MaskBench's README gives for LLGuidance and XGrammar.  --fail-log writes one line per
 * schema that did not pass (id, category, first reason); --dump-texts every test's text as fed.
 * --cpu-time times masks and TTFM with the thread's CPU clock (CLOCK_THREAD_CPUTIME_ID)
 * instead of the wall clock: on a shared machine the tail then shows the engine's own
 * work, not time spent waiting for a core (timeouts stay wall-clock).
 * Thread: main thread (a command).
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli_util.h"
#include "commands.h"
#include "grammar_cli.h"

enum { PASS, COMPILE, VALIDATION, INVALIDATION, TIMEOUT, N_CAT };
static const char *const CAT[] = {"passing", "compile error", "validation error", "invalidation error", "timeout"};

typedef struct dvec {
    float *v;
    size_t n, cap;
} dvec;

static void dpush(dvec *d, double x)
{
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 4096;
        float *q = realloc(d->v, nc * sizeof *q);
        if (!q)
            return;
        d->v = q;
        d->cap = nc;
    }
    d->v[d->n++] = (float)x;
}

static int cmpf(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static double pct(dvec *d, double p)
{
    if (!d->n)
        return 0;
    size_t i = (size_t)(p / 100.0 * (double)(d->n - 1) + 0.5);
    return d->v[i < d->n ? i : d->n - 1];
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* the clock of TBM and TTFM: the wall clock, or with --cpu-time this thread's CPU time */
static double timer_us(int cpu)
{
    struct timespec ts;
    clock_gettime(cpu ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

typedef struct bench {
    v4_tokenizer *tok;
    v4_tok_encoder *enc;
    v4g_vocab *vocab;
    uint32_t *bits;
    int mask_every, spaced, cpu_time;
    FILE *dump;   /* --dump-texts: every serialized test, one per line */
    double timeout_us;
    dvec tbm, ttfm;
    long masks, tokens, tests;
} bench;

/* one test: 0 behaved, 1 misbehaved (why), 2 timed out, -1 error */
static int run_test(bench *b, v4g_constraint *c, json_t *schema, json_t *data, int valid, double deadline, char *why, size_t nwhy)
{
    char *text = v4_json_text(data, schema, b->spaced);
    if (b->dump && text)
        fprintf(b->dump, "%s\t%s\n", valid ? "valid" : "invalid", text);
    v4_error err = {0};
    v4_ids ids = {0};
    if (!text || v4_tok_encoder_run(b->enc, text, strlen(text), &ids, &err)) {
        snprintf(why, nwhy, "tokenize: %.300s", text ? err.msg : "out of memory");
        free(text);
        return -1;
    }
    v4g_matcher *m = v4g_matcher_new(c, b->vocab, &err);
    if (!m) {
        snprintf(why, nwhy, "matcher: %.300s", err.msg);
        free(text);
        v4_ids_free(&ids);
        return -1;
    }
    const int32_t eos = v4_tok_eos(b->tok);
    int refused = 0, rc = 0;
    size_t off = 0;
    for (size_t i = 0; i <= ids.n && !refused; i++) {
        int32_t id = i < ids.n ? ids.v[i] : eos;
        int ok;
        if (b->mask_every <= 1 || i % (size_t)b->mask_every == 0 || i == ids.n) {
            double t0 = timer_us(b->cpu_time);
            if (v4g_matcher_mask(m, b->bits, &err)) {
                snprintf(why, nwhy, "mask: %.300s", err.msg);
                rc = -1;
                break;
            }
            dpush(&b->tbm, timer_us(b->cpu_time) - t0);
            b->masks++;
            ok = id >= 0 && (b->bits[id >> 5] >> (id & 31)) & 1;
            if (ok && i < ids.n && v4g_matcher_commit(m, id, &err) != 0) {
                snprintf(why, nwhy, "token %zu allowed by the mask but refused by commit", i);
                rc = -1;
                break;
            }
        } else {
            ok = v4g_matcher_commit(m, id, &err) == 0;
        }
        if (!ok) {
            refused = 1;
            if (valid) {
                size_t from = off > 80 ? off - 80 : 0;
                snprintf(why, nwhy, "valid instance refused at token %zu (byte %zu%s): ...%.*s[HERE]%.24s", i, off,
                         i == ids.n ? ", the end" : "", (int)(off - from), text + from, text + off);
            }
        }
        size_t bl = 0;
        if (i < ids.n)
            v4_tok_bytes(b->tok, id, &bl);
        off += bl;
        b->tokens++;
        if (now_us() > deadline) {
            rc = 2;
            break;
        }
    }
    if (rc == 0) {
        if (valid && refused)
            rc = 1;
        if (!valid && !refused) {
            rc = 1;
            snprintf(why, nwhy, "invalid instance accepted: %.160s", text);
        }
    }
    b->tests++;
    v4g_matcher_free(m);
    v4_ids_free(&ids);
    free(text);
    return rc;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: v4fleet grammar-bench --tokenizer DIR [--limit N] [--stride K] [--offset O]\n"
               "                             [--masks all|N] [--spaced] [--timeout-ms T] [--fail-log FILE]\n"
               "                             [--dump-texts FILE] [--cpu-time] FILE\n\n"
               "Run MaskBench (JSON lines of schemas with valid and invalid instances; .gz is read through gzip)\n"
               "through the constraint engine on one thread; print passing / compile / validation /\n"
               "invalidation errors and mask times (TBM, TTFM) beside LLGuidance's and XGrammar's figures.\n");
}

static void machine(char *out, size_t n)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[256];
    snprintf(out, n, "unknown CPU");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            char *p = strchr(line, ':');
            if (p) {
                p += 2;
                p[strcspn(p, "\n")] = 0;
                snprintf(out, n, "%s", p);
            }
            break;
        }
    if (f)
        fclose(f);
}

int v4_cmd_grammar_bench(int argc, char **argv)
{
    const char *tokdir = NULL, *file = NULL, *faillog = NULL;
    long limit = -1, stride = 1, offset = 0, timeout_ms = 30000;
    bench b = {.mask_every = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *nx = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--tokenizer") && nx) {
            tokdir = argv[++i];
        } else if (!strcmp(a, "--limit") && nx) {
            limit = atol(argv[++i]);
        } else if (!strcmp(a, "--stride") && nx) {
            stride = atol(argv[++i]);
        } else if (!strcmp(a, "--offset") && nx) {
            offset = atol(argv[++i]);
        } else if (!strcmp(a, "--timeout-ms") && nx) {
            timeout_ms = atol(argv[++i]);
        } else if (!strcmp(a, "--fail-log") && nx) {
            faillog = argv[++i];
        } else if (!strcmp(a, "--masks") && nx) {
            b.mask_every = strcmp(nx, "all") ? atoi(nx) : 1;
            i++;
        } else if (!strcmp(a, "--dump-texts") && nx) {
            b.dump = fopen(argv[++i], "w");
            if (!b.dump) {
                fprintf(stderr, "v4fleet grammar-bench: cannot write %s\n", argv[i]);
                return 1;
            }
        } else if (!strcmp(a, "--cpu-time")) {
            b.cpu_time = 1;
        } else if (!strcmp(a, "--spaced")) {
            b.spaced = 1;
        } else if (a[0] != '-') {
            file = a;
        } else {
            fprintf(stderr, "v4fleet grammar-bench: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!tokdir || !file || stride < 1 || b.mask_every < 1 || timeout_ms < 1) {
        fprintf(stderr, "v4fleet grammar-bench: need --tokenizer DIR and FILE (stride, masks, timeout >= 1)\n");
        usage(stderr);
        return 2;
    }
    b.timeout_us = (double)timeout_ms * 1e3;
    v4_error err = {0};
    if (v4_tok_load(tokdir, &b.tok, &err) || !(b.enc = v4_tok_encoder_new(b.tok, &err)) ||
        !(b.vocab = v4_grammar_vocab(b.tok, v4_tok_eos(b.tok), &err))) {
        v4_print_error("grammar-bench", &err);
        return 1;
    }
    b.bits = calloc(((size_t)v4g_vocab_size(b.vocab) + 31) / 32, sizeof *b.bits);
    size_t fl = strlen(file);
    FILE *in;
    int piped = fl > 3 && !strcmp(file + fl - 3, ".gz");
    if (piped) {
        if (access(file, R_OK)) {
            fprintf(stderr, "v4fleet grammar-bench: %s: %s\n", file, strerror(errno));
            return 1;
        }
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "gzip -dc -- '%s'", file);
        in = strchr(file, '\'') ? NULL : popen(cmd, "r");
    } else {
        in = fopen(file, "r");
    }
    FILE *fail = faillog ? fopen(faillog, "w") : NULL;
    if (!in || (faillog && !fail)) {
        fprintf(stderr, "v4fleet grammar-bench: cannot open %s\n", !in ? file : faillog);
        return 1;
    }
    long count[N_CAT] = {0}, seen = 0, taken = 0;
    double t_start = now_us(), t_prog = t_start;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, in)) > 0) {
        if (seen++ < offset || (seen - 1 - offset) % stride)
            continue;
        if (limit >= 0 && taken >= limit)
            break;
        json_error_t je;
        json_t *row = json_loadb(line, (size_t)len, JSON_ALLOW_NUL, &je);
        json_t *real_row = NULL;
        if (!row) {   /* integers past 64 bits: the tests keep their text (v4_json_text writes it
                       * back), the schema goes as a request would send it, to the engine's reader */
            char *prot = v4_json_protect_bigints(line, (size_t)len);
            row = prot ? json_loadb(prot, strlen(prot), JSON_ALLOW_NUL, &je) : NULL;
            free(prot);
            real_row = row ? json_loadb(line, (size_t)len, JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &je) : NULL;
        }
        json_t *schema = json_object_get(real_row ? real_row : row, "schema"), *tests = json_object_get(row, "tests");
        const char *id = json_string_value(json_object_get(row, "id"));
        if (!row || !schema) {   /* unreadable (e.g. U+0000 in a key, which jansson cannot hold): a compile error */
            const char *p = strstr(line, "\"id\":");
            char rid[200] = "?";
            if (p && (p = strchr(p + 5, '"')))
                snprintf(rid, sizeof rid, "%.*s", (int)strcspn(p + 1, "\""), p + 1);
            fprintf(stderr, "v4fleet grammar-bench: %s: line %ld (%s): %s: counted as a compile error\n", file, seen,
                    rid, row ? "no schema" : je.text);
            if (fail)
                fprintf(fail, "%s\t%s\tthe row cannot be read: %s\n", rid, CAT[COMPILE], row ? "no schema" : je.text);
            count[COMPILE]++;
            taken++;
            json_decref(row);
            json_decref(real_row);
            continue;
        }
        taken++;
        char *stext = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
        double t0 = now_us(), deadline = t0 + b.timeout_us, c0 = timer_us(b.cpu_time);
        v4g_constraint *c = stext ? v4g_compile(V4G_JSON_SCHEMA, stext, strlen(stext), NULL, &err) : NULL;
        free(stext);
        int cat = PASS;
        char why[400] = "";
        if (!c) {
            cat = COMPILE;
            snprintf(why, sizeof why, "%.390s", err.msg);
        } else {
            v4g_matcher *m = v4g_matcher_new(c, b.vocab, &err);
            if (m && v4g_matcher_mask(m, b.bits, &err) == 0)
                dpush(&b.ttfm, timer_us(b.cpu_time) - c0);
            v4g_matcher_free(m);
            size_t i;
            json_t *t;
            json_array_foreach(tests, i, t) {
                int valid = json_is_true(json_object_get(t, "valid"));
                char w[400] = "";
                int r = run_test(&b, c, schema, json_object_get(t, "data"), valid, deadline, w, sizeof w);
                if (r == 2) {
                    cat = TIMEOUT;
                    snprintf(why, sizeof why, "over %ld ms", timeout_ms);
                    break;
                }
                if (r < 0 && cat == PASS) {
                    cat = VALIDATION;
                    snprintf(why, sizeof why, "%s", w);
                }
                if (r == 1) {
                    int k = valid ? VALIDATION : INVALIDATION;
                    if (cat == PASS || (cat == INVALIDATION && k == VALIDATION)) {
                        cat = k;
                        snprintf(why, sizeof why, "%s", w);
                    }
                }
            }
            v4g_constraint_unref(c);
        }
        count[cat]++;
        if (fail && cat != PASS)
            fprintf(fail, "%s\t%s\t%s\n", id ? id : "?", CAT[cat], why);
        json_decref(row);
        json_decref(real_row);
        if (now_us() - t_prog > 10e6) {
            t_prog = now_us();
            fprintf(stderr, "grammar-bench: %ld schemas in %.0f s: %ld passing, %ld compile, %ld validation, %ld "
                            "invalidation, %ld timeout; %ld masks\n",
                    taken, (t_prog - t_start) / 1e6, count[PASS], count[COMPILE], count[VALIDATION],
                    count[INVALIDATION], count[TIMEOUT], b.masks);
        }
    }
    free(line);
    if (piped)
        pclose(in);
    else
        fclose(in);
    if (fail)
        fclose(fail);
    if (b.dump)
        fclose(b.dump);
    qsort(b.tbm.v, b.tbm.n, sizeof *b.tbm.v, cmpf);
    qsort(b.ttfm.v, b.ttfm.n, sizeof *b.ttfm.v, cmpf);
    char cpu[160];
    machine(cpu, sizeof cpu);
    printf("grammar-bench: %s: %ld schemas (stride %ld from %ld%s), %ld tests, %ld tokens, %ld masks (%s), %s JSON, "
           "%.0f s\n",
           file, taken, stride, offset, limit >= 0 ? ", limited" : "", b.tests, b.tokens, b.masks,
           b.mask_every <= 1 ? "before every token" : "sampled", b.spaced ? "spaced" : "compact",
           (now_us() - t_start) / 1e6);
    printf("machine: %s, one thread; vocabulary %d tokens (%s); TBM/TTFM in %s time\n\n", cpu, v4g_vocab_size(b.vocab),
           tokdir, b.cpu_time ? "thread CPU" : "wall-clock");
    printf("| metric | v4fleet | LLGuidance 0.7.10 | XGrammar 0.1.17 |\n|---|---:|---:|---:|\n");
    const char *const peer_l[] = {"8,909", "2,377", "20", "0", "0"}, *const peer_x[] = {"8,122", "90", "1,408", "1,368", "241"};
    for (int k = 0; k < N_CAT; k++)
        printf("| %s | %ld (%.1f%%) | %s | %s |\n", CAT[k], count[k], taken ? 100.0 * (double)count[k] / (double)taken : 0,
               peer_l[k], peer_x[k]);
    printf("| crash | 0 | 0 | 37 |\n");
    printf("| TBM p25 / p50 / p75 / p90 (us) | %.0f / %.0f / %.0f / %.0f | - / 46 / - / - | - / 9 / - / - |\n",
           pct(&b.tbm, 25), pct(&b.tbm, 50), pct(&b.tbm, 75), pct(&b.tbm, 90));
    printf("| TBM p99 / p99.9 (us) | %.0f / %.0f | 533 / 1,695 | 5,687 / 100,267 |\n", pct(&b.tbm, 99),
           pct(&b.tbm, 99.9));
    printf("| TTFM p50 / p99 (us) | %.0f / %.0f | 1,037 / 17,988 | 919,459 / 900,000,000 |\n", pct(&b.ttfm, 50),
           pct(&b.ttfm, 99));
    printf("(peers: MaskBench's README, all 11,306 schemas, Llama-3 tokenizer; passing = compiled and every test "
           "behaved)\n");
    free(b.tbm.v);
    free(b.ttfm.v);
    free(b.bits);
    v4g_vocab_free(b.vocab);
    v4_tok_encoder_free(b.enc);
    v4_tok_free(b.tok);
    return 0;
}
