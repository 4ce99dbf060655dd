/* cmd_batch.c - `v4fleet batch INPUT.jsonl -o OUTPUT.jsonl`: run a file of tasks without
 * a broker, one output line per input line.  (--concurrency N: N tasks decode together.)
 *
 * Flow: open OUTPUT (batch_output.h: cut a partial last line, collect the answered
 * keys) -> pass 1 over INPUT: validate every non-blank line (batch_input.h) and plan it:
 * run, skip (already answered: resume) or duplicate id (error line) -> open the model
 * (task_run.h) -> pass 2: re-read INPUT, answer each planned line: error lines at once,
 * valid tasks through the executor (executor.h: serial, or continuous batching with
 * --concurrency N > 1: lines are submitted while a slot is free, then the executor
 * steps until one frees), appending + fsyncing each output line as it is produced
 * (completion order; lines carry ids / line numbers).  Progress on stderr (batch_progress.h).
 *
 * Signals: SIGINT/SIGTERM set sig_atomic_t flags (written only by the handler).  They
 * are polled between lines and before every forward step: no new line starts; the
 * running task may finish within --grace-ms (a second signal aborts it at once); an
 * aborted task writes no line and runs again on resume.  Exit 130 / 143 after telling
 * how to resume.  Exit 0: every line answered, none with an error; 3: every line
 * answered, some with an error (failed tasks, invalid lines; counted over OUTPUT, earlier
 * runs included); 1: the run failed (input, output or model unusable); 2: usage.
 * --retry-failed: the error lines of OUTPUT are removed (atomic rewrite) and their inputs
 * run again.  A summary in the shape of OpenAI's batch object (request_counts total /
 * completed / failed, times, status) is written next to OUTPUT (OUTPUT.summary.json, or
 * --summary FILE) at the end of every run, interrupted ones included.  INPUT "-" reads
 * standard input (spooled to a temporary file: two passes), -o - writes standard output
 * (no resume).
 *
 * Ownership: everything lives in one batch_run struct owned by v4_cmd_batch.
 * Thread: main thread (the engine's pool threads belong to the runner).
 */
#include <errno.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "batch_idset.h"
#include "batch_input.h"
#include "batch_output.h"
#include "batch_progress.h"
#include "cli_util.h"
#include "commands.h"
#include "config/worker_config.h"
#include "prefix_opts.h"
#include "worker/prefix/prefix_cache.h"
#include "worker/serve/executor.h"
#include "worker/serve/task_run.h"

#define PROG "batch"

enum { PLAN_RUN = 0, PLAN_SKIP = 1, PLAN_DUP = 2 };

static volatile sig_atomic_t g_sig, g_nsig;

static void on_signal(int sig)
{
    g_sig = sig;
    g_nsig++;
}

typedef struct batch_run {
    v4_engine_opts eo;
    const char *in, *out, *names;
    long deadline_ms, grace_ms;
    long long max_line;
    double progress_ms;
    int progress_tty;               /* -1 auto */
    char names_buf[160];
    char worker[96];
    v4_idset done, seen, warned;
    unsigned char *plan;
    size_t n_plan;
    long n_openai, n_tasks;         /* JSON-object lines of each kind (pass 1) */
    v4_batch_kind file_kind;        /* the file's kind: the shape its unparsable lines' error lines get */
    long n_skip;
    v4_batch_out o;
    v4_runner *runner;
    v4_exec *x;
    v4_batch_progress prog;
    int stopping;
    double stop_at_ms;
    long max_context;               /* --max-context: prompt + max_tokens per task (0 = the model's) */
    long default_max_tokens;        /* --default-max-tokens (runner opts: 0 = V4_DEFAULT_MAX_TOKENS, < 0 no bound) */
    int concurrency;                /* --concurrency: tasks decoded together (1 = serial executor) */
    long long grammar_cache_bytes;  /* --grammar-cache-bytes (else V4_GRAMMAR_CACHE_BYTES; 0 = 64 MiB) */
    int grammar_compact;            /* --grammar-compact (else V4_GRAMMAR_COMPACT=1) */
    int retry_failed;               /* --retry-failed */
    v4_prefix_cli prefix;           /* --no-prefix-cache, --prefix-cache-bytes, ... (prefix_opts.h) */
    const char *summary;            /* --summary FILE (NULL: OUTPUT.summary.json; "-o -": none) */
    char spool[64];                 /* INPUT "-": the temporary copy of standard input */
    double t_start;                 /* wall clock (s) when the run began */
} batch_run;

static void usage(FILE *f)
{
    fprintf(f, "usage: v4fleet batch INPUT.jsonl -o OUTPUT.jsonl [--model DIR] [--model-name NAME[,alias...]]\n"
               "         [--deadline-ms N] [--grace-ms N] [--max-line-bytes N] [--progress-interval-ms N]\n"
               "         [--progress bar|lines] [--max-context N] [--default-max-tokens N] [--concurrency N]\n"
               "         [--threads N]\n"
               "         [--isa auto|scalar|avx2|avx512|avx512vnni] [--grammar-cache-bytes B] [--grammar-compact]\n"
               "         [--retry-failed] [--summary FILE]\n"
               V4_PREFIX_FLAGS_USAGE V4_EXPERT_FLAGS_USAGE V4_DEVICE_FLAG_USAGE V4_CHUNK_FLAG_USAGE
               "Each input line is a task packet (the queue's schema) or an OpenAI batch line (custom_id,\n"
               "method POST, url /v1/chat/completions, body); each output line the queue's result record\n"
               "or the OpenAI batch output record, appended (fsynced) as tasks finish.  Re-running skips\n"
               "inputs whose id / custom_id (or line, for error lines) OUTPUT already has; --retry-failed\n"
               "first removes OUTPUT's error lines so that their inputs run again.  INPUT - reads standard\n"
               "input, -o - writes standard output (no resume).  A summary in the shape of OpenAI's batch\n"
               "object (request_counts total/completed/failed) goes to OUTPUT.summary.json (--summary).\n"
               "--concurrency N: continuous batching: up to N generation tasks decode together, one pass\n"
               "over the weights per step for all of them (new tasks join between steps; prompts go in\n"
               "chunks of up to --prefill-chunk positions per step: 64 on the CPU, 256 on a GPU); outputs\n"
               "are identical to N = 1 and to any chunk, lines come in completion order.\n"
               "Output constraints (response_format, guided_json/regex/choice, structured_outputs; see\n"
               "docs/structured-outputs.md) compile once per schema into a cache of --grammar-cache-bytes\n"
               "(64M; V4_GRAMMAR_CACHE_BYTES); --grammar-compact (V4_GRAMMAR_COMPACT=1): JSON without\n"
               "whitespace between tokens.\n"
               "Prompts that start with blocks (256 tokens) an earlier line prefilled resume from them (the\n"
               "prefix cache, docs/prefix-cache.md; results unchanged; usage.prompt_tokens_details.cached_tokens\n"
               "says how many): 1G of memory (--prefix-cache-bytes, V4_PREFIX_CACHE_BYTES), off with\n"
               "--no-prefix-cache (V4_PREFIX_CACHE=0).\n"
               "A line without max_tokens (max_completion_tokens) generates up to the rest of the context\n"
               "(--max-context), at most --default-max-tokens N (V4_DEFAULT_MAX_TOKENS, else 4096; 0: no bound).\n"
               "defaults: --model models/tiny, --model-name = the model folder's name, no deadline,\n"
               "          --grace-ms 3000 (after SIGINT/SIGTERM), --max-line-bytes 64M, --concurrency 1\n"
               "          (one task at a time; on CPU 8 gives several times the throughput; with\n"
               "          --host-cache-bytes a step holds the union of N tasks' experts per layer)\n"
               "exit: 0 every line answered without an error, 3 every line answered but some with an\n"
               "      error (failed tasks, invalid lines: see the summary), 1 the run failed, 2 usage,\n"
               "      130/143 interrupted (re-run the same command to resume)\n");
}

static int num_arg(const char *a, const char *v, long long lo, long long hi, long long *out)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || *end || end == v || x < lo || x > hi) {
        fprintf(stderr, "v4fleet %s: %s wants an integer in [%lld, %lld], got '%s'\n", PROG, a, lo, hi, v);
        return -1;
    }
    *out = x;
    return 0;
}

/* 0 to run, else the exit status (*done for --help). */
static int parse_args(batch_run *b, int argc, char **argv, int *done)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = v4_opts_take(&b->eo, argc, argv, &i, PROG);
        if (!r)
            r = v4_prefix_take(&b->prefix, argc, argv, &i, PROG);
        if (r < 0)
            return 2;
        if (r)
            continue;
        if (!strcmp(a, "--grammar-compact")) {
            b->grammar_compact = 1;
            continue;
        }
        if (!strcmp(a, "--retry-failed")) {
            b->retry_failed = 1;
            continue;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            printf(V4_LOOKAHEAD_HELP);
            *done = 1;
            return 0;
        }
        if (a[0] != '-' || !a[1]) {
            if (b->in) {
                fprintf(stderr, "v4fleet %s: one INPUT file only (got '%s' and '%s')\n", PROG, b->in, a);
                return 2;
            }
            b->in = a;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "v4fleet %s: %s needs a value\n", PROG, a);
            usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        long long x;
        if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            b->out = v;
        } else if (!strcmp(a, "--model-name")) {
            b->names = v;
        } else if (!strcmp(a, "--summary")) {
            b->summary = v;
        } else if (!strcmp(a, "--deadline-ms")) {
            if (num_arg(a, v, 0, 86400000, &x))
                return 2;
            b->deadline_ms = (long)x;
        } else if (!strcmp(a, "--concurrency")) {
            if (num_arg(a, v, 1, 256, &x))
                return 2;
            b->concurrency = (int)x;
        } else if (!strcmp(a, "--prefill-chunk")) {
            if (v4_opt_prefill_chunk(&b->eo, v, PROG))
                return 2;
        } else if (!strcmp(a, "--default-max-tokens")) {
            if (num_arg(a, v, 0, 1 << 20, &x))
                return 2;
            b->default_max_tokens = x ? (long)x : -1;
        } else if (!strcmp(a, "--max-context")) {
            if (num_arg(a, v, 0, 1ll << 30, &x))
                return 2;
            b->max_context = (long)x;
        } else if (!strcmp(a, "--grammar-cache-bytes")) {
            if (v4_parse_bytes(v, &b->grammar_cache_bytes)) {
                fprintf(stderr, "v4fleet %s: --grammar-cache-bytes wants a byte count (64M, 1G), got '%s'\n", PROG, v);
                return 2;
            }
        } else if (!strcmp(a, "--grace-ms")) {
            if (num_arg(a, v, 0, 3600000, &x))
                return 2;
            b->grace_ms = (long)x;
        } else if (!strcmp(a, "--max-line-bytes")) {
            if (num_arg(a, v, 64, 1ll << 30, &x))
                return 2;
            b->max_line = x;
        } else if (!strcmp(a, "--progress-interval-ms")) {
            if (num_arg(a, v, 1, 3600000, &x))
                return 2;
            b->progress_ms = (double)x;
        } else if (!strcmp(a, "--progress")) {
            if (strcmp(v, "bar") && strcmp(v, "lines")) {
                fprintf(stderr, "v4fleet %s: --progress wants bar or lines, got '%s'\n", PROG, v);
                return 2;
            }
            b->progress_tty = !strcmp(v, "bar");
        } else {
            fprintf(stderr, "v4fleet %s: unknown option '%s'\n", PROG, a);
            usage(stderr);
            return 2;
        }
    }
    const char *gv = getenv("V4_GRAMMAR_CACHE_BYTES"), *gc = getenv("V4_GRAMMAR_COMPACT");
    if (!b->grammar_cache_bytes && gv && *gv && v4_parse_bytes(gv, &b->grammar_cache_bytes)) {
        fprintf(stderr, "v4fleet %s: V4_GRAMMAR_CACHE_BYTES wants a byte count (64M, 1G), got '%s'\n", PROG, gv);
        return 2;
    }
    if (gc && *gc && strcmp(gc, "0") && strcmp(gc, "1")) {
        fprintf(stderr, "v4fleet %s: V4_GRAMMAR_COMPACT wants 0 or 1, got '%s'\n", PROG, gc);
        return 2;
    }
    b->grammar_compact |= gc && !strcmp(gc, "1");
    if (v4_prefix_env(&b->prefix, PROG))
        return 2;
    if (!b->in || !b->out) {
        fprintf(stderr, "v4fleet %s: give INPUT.jsonl and -o OUTPUT.jsonl\n", PROG);
        usage(stderr);
        return 2;
    }
    if (b->eo.host_cache_bytes <= 0 && (b->eo.pack || b->eo.cache_policy || b->eo.io_threads)) {
        fprintf(stderr, "v4fleet %s: --pack, --cache-policy and --io-threads need --host-cache-bytes\n", PROG);
        return 2;
    }
    if (!strcmp(b->out, "-") && b->retry_failed) {
        fprintf(stderr, "v4fleet %s: --retry-failed needs an OUTPUT file to resume (not -o -)\n", PROG);
        return 2;
    }
    struct stat si, so;
    if (!stat(b->in, &si) && !stat(b->out, &so) && si.st_dev == so.st_dev && si.st_ino == so.st_ino) {
        fprintf(stderr, "v4fleet %s: OUTPUT is the INPUT file\n", PROG);
        return 2;
    }
    if (!b->names) {   /* the model folder's name */
        char tmp[sizeof b->names_buf];
        snprintf(tmp, sizeof tmp, "%s", b->eo.model);
        snprintf(b->names_buf, sizeof b->names_buf, "%s", basename(tmp));
        b->names = b->names_buf;
    }
    return 0;
}

/* First sight of a signal: stop starting lines; the running task gets grace_ms. */
static void notice_signal(batch_run *b)
{
    if (!g_sig || b->stopping)
        return;
    b->stopping = 1;
    b->stop_at_ms = v4_now_ms();
    v4_bp_clear(&b->prog);
    if (b->prog.running > 0)
        fprintf(stderr,
                "v4fleet %s: %s: no new tasks; the running ones (%d) may finish within %ld ms (signal again to "
                "abort them)\n",
                PROG, g_sig == SIGINT ? "SIGINT" : "SIGTERM", b->prog.running, b->grace_ms);
    else
        fprintf(stderr, "v4fleet %s: %s: no new tasks (none running)\n", PROG, g_sig == SIGINT ? "SIGINT" : "SIGTERM");
}

/* The executor's abort check (before every forward step). */
static int abort_check(void *ud)
{
    batch_run *b = ud;
    notice_signal(b);
    if (b->runner)   /* tokens as they are generated: the progress moves within long tasks */
        v4_bp_generated(&b->prog, v4_runner_generated(b->runner));
    v4_bp_tick(&b->prog);
    return b->stopping && (g_nsig > 1 || v4_now_ms() - b->stop_at_ms > (double)b->grace_ms);
}

static void warn_unknown(batch_run *b, const v4_batch_item *it)
{
    for (int i = 0; i < it->n_unknown; i++) {
        char key[300];
        snprintf(key, sizeof key, "%c%s", it->kind == V4_BATCH_OPENAI ? 'o' : 't', it->unknown[i]);
        if (v4_idset_add(&b->warned, key, it->line) == 1)
            fprintf(stderr, "v4fleet %s: line %ld: %s '%s' ignored (reported once)\n", PROG, it->line,
                    it->kind == V4_BATCH_OPENAI ? "unsupported body field" : "unknown field", it->unknown[i]);
    }
}

/* Pass 1: plan every non-blank line.  0 or -1 (message printed). */
static int plan_lines(batch_run *b)
{
    v4_batch_reader rd;
    if (v4_batch_reader_open(&rd, b->in)) {
        fprintf(stderr, "v4fleet %s: %s: %s\n", PROG, b->in, strerror(errno));
        return -1;
    }
    const char *line;
    size_t len, cap = 0;
    int r;
    while ((r = v4_batch_reader_next(&rd, &line, &len)) == 1) {
        if (b->n_plan == cap) {
            cap = cap ? cap * 2 : 1024;
            unsigned char *p = realloc(b->plan, cap);
            if (!p) {
                r = -1;
                break;
            }
            b->plan = p;
        }
        v4_batch_item it;
        v4_batch_item_parse(line, len, rd.line, (size_t)b->max_line, &it);
        warn_unknown(b, &it);
        b->n_openai += it.shaped && it.kind == V4_BATCH_OPENAI;
        b->n_tasks += it.shaped && it.kind == V4_BATCH_TASK;
        char key[V4_TASK_MAX_ID + 8];
        unsigned char a = PLAN_RUN;
        snprintf(key, sizeof key, "L%ld", rd.line);
        if (v4_idset_get(&b->done, key, NULL)) {
            a = PLAN_SKIP;
        } else if (it.id) {
            snprintf(key, sizeof key, "I%s", it.id);
            int added = v4_idset_add(&b->seen, key, rd.line);
            if (added < 0)
                r = -1;
            a = added == 0 ? PLAN_DUP : v4_idset_get(&b->done, key, NULL) ? PLAN_SKIP : PLAN_RUN;
        }
        v4_batch_item_free(&it);
        b->plan[b->n_plan++] = a;
        b->n_skip += a == PLAN_SKIP;
        if (r < 0)
            break;
    }
    if (r < 0)
        fprintf(stderr, "v4fleet %s: %s: %s\n", PROG, b->in, errno ? strerror(errno) : "out of memory");
    /* a file of OpenAI batch lines answers its unreadable lines in OpenAI's shape too */
    b->file_kind = b->n_openai > b->n_tasks ? V4_BATCH_OPENAI : V4_BATCH_TASK;
    v4_batch_reader_close(&rd);
    return r < 0 ? -1 : 0;
}

/* Append one line; 0 or -1 (message printed: the run fails). */
static int emit(batch_run *b, char *json, int failed, long long tokens)
{
    if (!json) {
        fprintf(stderr, "v4fleet %s: out of memory building an output line\n", PROG);
        return -1;
    }
    int rc = v4_batch_out_write(&b->o, json);
    free(json);
    if (rc) {
        v4_bp_clear(&b->prog);
        fprintf(stderr, "v4fleet %s: %s: write failed: %s\n", PROG, b->out, strerror(errno));
        return -1;
    }
    if (b->runner)
        v4_bp_generated(&b->prog, v4_runner_generated(b->runner));
    v4_bp_line(&b->prog, failed, tokens);
    return 0;
}

/* One input line in flight: the executor's job (first member, so the job the
 * executor hands back is the record) and the line it came from (the task moved from
 * the item into the job). */
typedef struct batch_job {
    v4_job job;
    v4_batch_item item;
} batch_job;

static void batch_job_release(v4_job *job)
{
    batch_job *bj = (batch_job *)job;
    v4_job_free(&bj->job);
    v4_batch_item_free(&bj->item);
    free(bj);
}

/* A finished job -> its output line.  1 = aborted (no line), 0 written, -1 fatal. */
static int finish_job(batch_run *b, v4_job *j)
{
    const v4_batch_item *it = &((batch_job *)j)->item;
    if (j->rc == -2) {
        v4_bp_clear(&b->prog);
        fprintf(stderr, "v4fleet %s: line %ld (id \"%s\"): aborted %s, no output line; it runs again on resume\n", PROG,
                it->line, it->id, g_nsig > 1 ? "by a second signal" : "after the grace period");
        return 1;
    }
    const v4_task *t = &j->task;
    const v4_run_output *o = &j->out;
    v4_result_info ri = {
        .id = t->id, .model = v4_runner_model_name(b->runner), .worker = b->worker, .metadata = t->metadata,
        .text = o->text, .text_len = o->text_len, .token_ids = o->tokens, .n_tokens = o->n_tokens,
        .finish_reason = o->finish_reason, .prompt_tokens = o->prompt_tokens, .cached_tokens = o->cached_tokens,
        .choices = o->choices,
        .n_choices = o->n_choices, .queue_ms = 0,
        .prefill_ms = o->prefill_ms, .decode_ms = o->decode_ms, .total_ms = j->end_ms - j->start_ms,
        .expert_hits = o->expert_hits, .expert_misses = o->expert_misses,
        .expert_prefetched = o->expert_prefetched,
        .expert_bytes_loaded = o->expert_bytes_loaded, .chunks = o->chunks, .levels = o->levels,
        .error = j->rc ? &j->err : NULL, .numerics = v4_runner_numerics(b->runner), .logprobs = o->logprobs,
        .reasoning = o->reasoning, .reasoning_len = o->reasoning_len};
    char *line = v4_batch_result_line(it, &ri, (long long)time(NULL));
    int failed = j->rc != 0;
    if (!line && !j->rc) {   /* e.g. output text jansson refuses */
        v4_task_fail(&j->err, V4_TASK_INTERNAL, "output", "the result could not be encoded as JSON");
        ri.error = &j->err;
        failed = 1;
        line = v4_batch_result_line(it, &ri, (long long)time(NULL));
    }
    return emit(b, line, failed, failed ? 0 : v4_run_output_completion(o));
}

/* One executor step; writes the lines of the jobs it finished.  Returns rc updated
 * (1 after an aborted job, -1 on a fatal output error). */
static int step_once(batch_run *b, int rc)
{
    v4_job *fin[64];
    int n = b->x->ops->step(b->x, fin, 64);
    b->prog.running -= n;
    for (int i = 0; i < n; i++) {
        int fr = rc < 0 ? rc : finish_job(b, fin[i]);
        if (fr && rc >= 0)
            rc = fr;
        v4_job_release(fin[i]);
    }
    return rc;
}

/* Pass 2.  0 all planned lines answered, 1 stopped by a signal, -1 fatal. */
static int run_lines(batch_run *b)
{
    v4_batch_reader rd;
    if (v4_batch_reader_open(&rd, b->in)) {
        fprintf(stderr, "v4fleet %s: %s: %s\n", PROG, b->in, strerror(errno));
        return -1;
    }
    const char *line;
    size_t len, k = 0;
    int r, rc = 0;
    while (rc == 0 && k < b->n_plan && (r = v4_batch_reader_next(&rd, &line, &len)) == 1) {
        unsigned char a = b->plan[k++];
        if (a == PLAN_SKIP)
            continue;
        notice_signal(b);
        if (b->stopping) {
            rc = 1;
            break;
        }
        batch_job *bj = calloc(1, sizeof *bj);
        if (!bj) {
            rc = -1;
            break;
        }
        bj->job.release = batch_job_release;
        v4_batch_item_parse(line, len, rd.line, (size_t)b->max_line, &bj->item);
        v4_batch_item *it = &bj->item;
        if (!it->shaped)
            it->kind = b->file_kind;
        v4_job *j = &bj->job;
        if (a == PLAN_DUP || !it->ok) {
            v4_task_error dup = {0};
            if (a == PLAN_DUP) {
                char key[V4_TASK_MAX_ID + 8];
                long first = 0;
                snprintf(key, sizeof key, "I%s", it->id);
                v4_idset_get(&b->seen, key, &first);
                v4_task_fail(&dup, V4_TASK_INVALID_FIELD, it->kind == V4_BATCH_OPENAI ? "custom_id" : "id",
                             "duplicate id \"%s\": line %ld has the same id", it->id, first);
            }
            rc = emit(b, v4_batch_error_line(it, a == PLAN_DUP ? &dup : NULL, line, len, b->worker), 1, 0);
        } else {
            j->task = it->task;   /* the job owns the task from here on */
            memset(&it->task, 0, sizeof it->task);
            j->deadline_default_ms = b->deadline_ms;
            if (b->x->ops->submit(b->x, j)) {
                rc = -1;
            } else {
                j = NULL;   /* lent to the executor until step() returns it */
                b->prog.running++;
                /* full: step until a slot frees (the next line is then admitted before
                 * the next forward step) */
                while (rc == 0 && b->x->ops->in_flight(b->x) >= b->x->ops->capacity(b->x))
                    rc = step_once(b, rc);
            }
        }
        if (j)
            v4_job_release(j);
    }
    while (rc >= 0 && b->x->ops->in_flight(b->x) > 0)   /* drain (after a signal: within the grace) */
        rc = step_once(b, rc);
    if (rc == 0 && k < b->n_plan) {   /* the input shrank or failed between the passes */
        fprintf(stderr, "v4fleet %s: %s: changed while running (read %zu of %zu lines)\n", PROG, b->in, k, b->n_plan);
        rc = -1;
    }
    v4_batch_reader_close(&rd);
    return rc;
}

/* INPUT "-": standard input copied to a temporary file (batch reads its input twice).
 * 0, or -1 (message printed). */
static int spool_stdin(batch_run *b)
{
    const char *td = getenv("TMPDIR");
    snprintf(b->spool, sizeof b->spool, "%s/v4batch-stdin.XXXXXX", td && *td && strlen(td) < 32 ? td : "/tmp");
    int fd = mkstemp(b->spool);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        fprintf(stderr, "v4fleet %s: cannot spool standard input to %s: %s\n", PROG, b->spool, strerror(errno));
        if (fd >= 0)
            close(fd), unlink(b->spool);
        b->spool[0] = 0;
        return -1;
    }
    char buf[65536];
    size_t n;
    int bad = 0;
    while (!bad && (n = fread(buf, 1, sizeof buf, stdin)) > 0)
        bad = fwrite(buf, 1, n, f) != n;
    bad |= ferror(stdin) != 0;
    bad |= fclose(f) != 0;
    if (bad) {
        fprintf(stderr, "v4fleet %s: cannot spool standard input to %s: %s\n", PROG, b->spool, strerror(errno));
        unlink(b->spool);
        b->spool[0] = 0;
        return -1;
    }
    b->in = b->spool;
    return 0;
}

/* The run's summary in the shape of OpenAI's batch object, written atomically next to
 * OUTPUT (or to --summary).  status: "completed" | "cancelled" | "failed". */
static void write_summary(batch_run *b, const char *status, long failed, long completed)
{
    char path[4200], tmp[4300];
    if (b->summary)
        snprintf(path, sizeof path, "%s", b->summary);
    else if (strcmp(b->out, "-"))
        snprintf(path, sizeof path, "%s.summary.json", b->out);
    else
        return;   /* -o - and no --summary: nowhere to put it */
    const long long now = (long long)time(NULL);
    json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:{s:I, s:I, s:I}, s:o}", "object", "batch",
                          "endpoint", b->n_openai >= b->n_tasks ? "/v1/chat/completions" : "v4fleet/task",
                          "input_file", b->spool[0] ? "-" : b->in, "output_file", b->out, "model",
                          b->runner ? v4_runner_model_name(b->runner) : b->names, "status", status, "created_at",
                          (json_int_t)b->t_start, "in_progress_at", (json_int_t)b->t_start,
                          !strcmp(status, "completed") ? "completed_at" : !strcmp(status, "cancelled") ? "cancelled_at"
                                                                                                       : "failed_at",
                          (json_int_t)now, "request_counts", "total", (json_int_t)b->n_plan, "completed",
                          (json_int_t)completed, "failed", (json_int_t)failed, "errors", json_null());
    char *text = o ? json_dumps(o, JSON_INDENT(2)) : NULL;
    json_decref(o);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = text ? fopen(tmp, "wb") : NULL;
    int bad = !f || fputs(text, f) < 0 || fputc('\n', f) < 0;
    if (f)
        bad |= fflush(f) || fsync(fileno(f)) || fclose(f);
    if (bad || rename(tmp, path)) {
        fprintf(stderr, "v4fleet %s: cannot write the summary %s: %s\n", PROG, path, text ? strerror(errno) : "out of memory");
        unlink(tmp);
    }
    free(text);
}

int v4_cmd_batch(int argc, char **argv)
{
    batch_run b = {0};
    b.eo.model = "models/tiny";
    b.grace_ms = 3000;
    b.max_line = 64ll << 20;
    b.progress_tty = -1;
    b.concurrency = 1;
    int done = 0, st = parse_args(&b, argc, argv, &done);
    if (st || done)
        return st;
    char host[64] = "";
    gethostname(host, sizeof host - 1);
    snprintf(b.worker, sizeof b.worker, "batch@%s", host[0] ? host : "localhost");

    json_object_seed(0);   /* before any thread starts (jansson thread-safety note) */
    int rc = 1;
    char msg[512];
    b.t_start = (double)time(NULL);
    if (!strcmp(b.in, "-") && spool_stdin(&b))
        goto out;
    if (v4_batch_out_open(&b.o, b.out, &b.done, b.retry_failed, msg, sizeof msg)) {
        fprintf(stderr, "v4fleet %s: cannot open the output: %s\n", PROG, msg);
        goto out;
    }
    if (b.retry_failed)
        fprintf(stderr, "v4fleet %s: --retry-failed: %ld error lines removed from %s; their inputs run again\n", PROG,
                b.o.retried, b.out);
    if (plan_lines(&b))
        goto out;
    if (b.o.lines_before || b.o.truncated_bytes) {
        fprintf(stderr, "v4fleet %s: resuming %s: %ld complete lines there%s; %ld of %zu input lines skipped (already answered)",
                PROG, b.out, b.o.lines_before, b.o.unreadable ? " (some not JSON, kept)" : "", b.n_skip, b.n_plan);
        if (b.o.truncated_bytes)
            fprintf(stderr, "; cut a partial last line (%lld bytes)", b.o.truncated_bytes);
        fprintf(stderr, "\n");
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    long to_run = (long)b.n_plan - b.n_skip;
    if (to_run > 0) {
        v4_task_error te = {0};
        v4_runner_opts rx = {.pack_dir = b.eo.pack,
                                   .host_cache_bytes = b.eo.host_cache_bytes,
                                   .policy = b.eo.cache_policy,
                                   .io_threads = b.eo.io_threads,
                                   .threads = b.eo.threads,
                                   .isa = b.eo.isa,
                                   .max_batch = b.concurrency,
                                   .max_context = b.max_context,
                                   .default_max_tokens = b.default_max_tokens,
                                   .device = b.eo.device,
                                   .cuda_mode = b.eo.cuda_mode,
                                   .gpu_expert_mem = b.eo.gpu_expert_mem,
                                   .numerics = b.eo.numerics,
                                   .prefill_chunk = b.eo.prefill_chunk,
                                   .gpu_cache_policy = b.eo.gpu_cache_policy,
                                   .gpu_weight_mem = b.eo.gpu_weight_mem,
                                   .gpu_seq_mem = b.eo.gpu_seq_mem,
                                   .no_lookahead = b.eo.no_lookahead,
                                   .grammar_cache_bytes = b.grammar_cache_bytes,
                                   .grammar_compact = b.grammar_compact};
        v4_prefix_apply(&b.prefix, &rx);
        if (!(b.runner = v4_runner_open(b.eo.model, b.names, &rx, &te))) {
            fprintf(stderr, "v4fleet %s: cannot open the model %s: %s: %s\n", PROG, b.eo.model, te.where, te.message);
            goto out;
        }
        char xerr[256] = "out of memory";
        b.x = b.concurrency > 1 ? v4_exec_continuous(b.runner, b.concurrency, abort_check, &b, xerr, sizeof xerr)
                                : v4_exec_serial(b.runner, abort_check, &b);
        if (!b.x) {
            fprintf(stderr, "v4fleet %s: %s\n", PROG, xerr);
            goto out;
        }
        char ex[256], pd[200];
        v4_runner_describe_experts(b.runner, ex, sizeof ex);
        v4_runner_describe_prefix(b.runner, pd, sizeof pd);
        fprintf(stderr, "v4fleet %s: %s -> %s: %ld lines to run on model \"%s\" from %s (names %s); %s; %s\n", PROG, b.in,
                b.out, to_run, v4_runner_model_name(b.runner), b.eo.model, b.names, ex, pd);
    }
    v4_bp_start(&b.prog, stderr, b.progress_tty, b.progress_ms, to_run, b.n_skip);
    int r = to_run > 0 ? run_lines(&b) : 0;
    v4_bp_finish(&b.prog, r == 0 ? "done" : r > 0 ? "interrupted" : "failed");
    v4pc_figs pf;
    if (b.runner && !v4_runner_prefix_figs(b.runner, &pf) && pf.lookups)
        fprintf(stderr, "v4fleet %s: prefix cache: %llu of %llu prompts resumed from a cached prefix, %llu prompt tokens "
                "not prefilled; %llu blocks held (%.1f MiB), %llu evicted\n", PROG, pf.hits, pf.lookups, pf.tokens_saved,
                pf.blocks, (double)pf.bytes / 1048576.0, pf.evictions);
    const long failed = b.o.failed_before + b.prog.failed;
    long completed = b.n_skip - b.o.failed_before + b.prog.done - b.prog.failed;
    completed = completed < 0 ? 0 : completed;
    const int interrupted = r > 0 || (r == 0 && g_sig && b.prog.done < b.prog.total);
    write_summary(&b, interrupted ? "cancelled" : r < 0 ? "failed" : "completed", failed, completed);
    if (r == 0 && !interrupted && failed > 0) {
        v4_bp_clear(&b.prog);
        fprintf(stderr, "v4fleet %s: %ld of %zu lines answered with an error (exit 3); run again with --retry-failed to "
                        "retry them\n", PROG, failed, b.n_plan);
    }
    if (interrupted) {
        fprintf(stderr, "v4fleet %s: %ld of %ld lines answered in this run; resume with the same command:\n  v4fleet",
                PROG, b.prog.done, b.prog.total);
        for (int i = 0; i < argc; i++)
            fprintf(stderr, " %s", argv[i]);
        fprintf(stderr, "\n");
        rc = 128 + (int)g_sig;
    } else {
        rc = r == 0 ? (failed > 0 ? 3 : 0) : 1;
    }
out:
    if (b.x)
        b.x->ops->destroy(b.x);
    v4_runner_free(b.runner);
    v4_batch_out_close(&b.o);
    v4_idset_free(&b.done);
    v4_idset_free(&b.seen);
    v4_idset_free(&b.warned);
    free(b.plan);
    if (b.spool[0])
        unlink(b.spool);
    return rc;
}
