/* cmd_generate.c - `v4fleet generate`: one request from the command line.
 *
 * Two input forms:
 *   --prompt-ids FILE.json   token ids in, generated ids out as one JSON array on stdout
 *                            (the contract the engine checks use; with --greedy);
 *   --prompt TEXT            text in: the DeepSeek-V4 chat prompt is built from
 *                            [--system TEXT] + the user text (+ <think> with --thinking),
 *                            the answer is streamed to stdout as it is generated, and a
 *                            one-line summary (tokens, tokens/s, finish reason) goes to
 *                            stderr.
 * Sampling: --greedy (= --temperature 0), --temperature, --top-p, --top-k, --min-p, --seed,
 * --presence-penalty, --frequency-penalty, --repetition-penalty, --logit-bias ID=BIAS
 * (repeatable), with the ranges and order of operations of worker/serve/sampling.h;
 * --logprobs K (0..20): after the answer, one JSON line {"logprobs": [...]} on stderr,
 * OpenAI's content array with K alternatives per token (worker/serve/token_logprobs.h);
 * stopping: EOS (unless --ignore-eos), --stop STR (repeatable), --max-tokens.
 * Output constraint (constraint_opts.h): --json-schema FILE | --json-object | --regex R |
 * --choice FILE | --grammar FILE [--compact]; the answer (after </think> with --thinking) is decoded under
 * it, as a task's response_format is (docs/structured-outputs.md).
 * --model defaults to the demo model (models/tiny) so the README's command works.
 * The prompt goes through in prefill chunks (several positions per forward step, the
 * same results as one at a time), sized by worker/serve/step_rows.h: with paged experts
 * (--host-cache-bytes) the chunk shrinks so a layer's experts fit the cache, and a
 * line on stderr says the cache's slots and the chunk; at the end another gives the
 * cache's figures and how many experts the router look-ahead prefetched
 * (--no-lookahead / V4_LOOKAHEAD=0: none).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/expert_provider.h"
#include "cache/model_files.h"
#include "cli_util.h"
#include "commands.h"
#include "constraint_opts.h"
#include "kernels/v4/model.h"
#include "worker/serve/chat.h"
#include "worker/serve/constrain.h"
#include "worker/serve/generate.h"
#include "worker/serve/step_rows.h"
#include "worker/serve/token_logprobs.h"

#define PROG "generate"
#define MAX_STOPS 16
#define MAX_BIAS 300   /* OpenAI's limit on logit_bias entries */

static void usage(FILE *f)
{
    fprintf(f, "usage: v4fleet generate [--model DIR] (--prompt TEXT | --prompt-ids FILE.json)\n"
               "         [--system TEXT] [--thinking] [--max-tokens N] [--greedy] [--temperature T]\n"
               "         [--top-p P] [--top-k K] [--min-p P] [--seed S] [--stop STR]... [--ignore-eos]\n"
               "         [--presence-penalty X] [--frequency-penalty X] [--repetition-penalty X]\n"
               "         [--logit-bias ID=BIAS]... [--logprobs K]\n"
               "%s"
               "         [--context N] [--threads N] [--isa auto|scalar|avx2|avx512|avx512vnni]\n"
               V4_EXPERT_FLAGS_USAGE V4_DEVICE_FLAG_USAGE V4_CHUNK_FLAG_USAGE
               "defaults: --model models/tiny, --max-tokens 64, --temperature 1, --top-p 1, --top-k 0,\n"
               "          --seed 0, --context = prompt + max-tokens (at most max_position_embeddings);\n"
               "          experts resident unless --host-cache-bytes > 0 (paged through a host cache\n"
               "          from --pack DIR, else from the safetensors; --cache-policy next, --io-threads 4)\n",
            v4_constraint_opts_usage());
}

/* --help: the usage and what the paged-expert lines on stderr say. */
static void help(void)
{
    usage(stdout);
    printf(V4_LOOKAHEAD_HELP
           "with --host-cache-bytes two lines on stderr give the cache's slots and the prefill chunk\n"
           "(before) and the cache's hits, misses and prefetch reads and the experts the look-ahead\n"
           "prefetched (after).\n");
}

typedef struct gen_opts {
    v4_engine_opts eo;
    const char *prompt, *prompt_ids, *system;
    const char *stops[MAX_STOPS];
    int n_stops, thinking, ignore_eos;
    long max_tokens, context;
    v4_sampling_params sp;
    v4_constraint_opts co;
    v4_logit_bias bias[MAX_BIAS];
    int n_bias;
} gen_opts;

static int num(const char *s, double lo, double hi, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (*end || end == s || !(v >= lo && v <= hi))
        return -1;
    *out = v;
    return 0;
}

/* Returns 0 to run, otherwise the exit status (help = 0 through *done). */
static int parse(int argc, char **argv, gen_opts *o, int *done)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = v4_opts_take(&o->eo, argc, argv, &i, PROG);
        if (r < 0)
            return 2;
        if (r)
            continue;
        if ((r = v4_constraint_opts_take(&o->co, argc, argv, &i, PROG)) < 0)
            return 2;
        if (r)
            continue;
        if (!strcmp(a, "--help")) {
            help();
            *done = 1;
            return 0;
        }
        if (!strcmp(a, "--greedy")) { o->sp.temperature = 0; continue; }
        if (!strcmp(a, "--thinking")) { o->thinking = 1; continue; }
        if (!strcmp(a, "--ignore-eos")) { o->ignore_eos = 1; continue; }
        if (i + 1 >= argc) {
            fprintf(stderr, "v4fleet %s: unexpected argument '%s'\n", PROG, a);
            usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        double d;
        if (!strcmp(a, "--prompt")) o->prompt = v;
        else if (!strcmp(a, "--prompt-ids")) o->prompt_ids = v;
        else if (!strcmp(a, "--system")) o->system = v;
        else if (!strcmp(a, "--stop")) {
            if (o->n_stops == MAX_STOPS) {
                fprintf(stderr, "v4fleet %s: at most %d --stop strings\n", PROG, MAX_STOPS);
                return 2;
            }
            o->stops[o->n_stops++] = v;
        } else if (!strcmp(a, "--max-tokens") && !num(v, 0, 1 << 20, &d)) o->max_tokens = (long)d;
        else if (!strcmp(a, "--context") && !num(v, 1, 1 << 30, &d)) o->context = (long)d;
        else if (!strcmp(a, "--prefill-chunk")) {
            if (v4_opt_prefill_chunk(&o->eo, v, PROG))
                return 2;
        }
        else if (!strcmp(a, "--temperature") && !num(v, -1e9, 1e9, &d)) o->sp.temperature = d;
        else if (!strcmp(a, "--top-p") && !num(v, -1e9, 1e9, &d)) o->sp.top_p = d;
        else if (!strcmp(a, "--top-k") && !num(v, -1e9, 1e9, &d)) o->sp.top_k = (int)d;
        else if (!strcmp(a, "--seed") && !num(v, 0, 1.8e19, &d)) o->sp.seed = (uint64_t)d;
        else if (!strcmp(a, "--min-p") && !num(v, -1e9, 1e9, &d)) o->sp.min_p = d;
        else if (!strcmp(a, "--logprobs") && !num(v, 0, V4_TOP_LOGPROBS_MAX, &d)) {
            o->sp.logprobs = 1;
            o->sp.top_logprobs = (int)d;
        }
        else if (!strcmp(a, "--presence-penalty") && !num(v, -1e9, 1e9, &d)) o->sp.presence_penalty = d;
        else if (!strcmp(a, "--frequency-penalty") && !num(v, -1e9, 1e9, &d)) o->sp.frequency_penalty = d;
        else if (!strcmp(a, "--repetition-penalty") && !num(v, -1e9, 1e9, &d)) o->sp.repetition_penalty = d;
        else if (!strcmp(a, "--logit-bias")) {   /* ID=BIAS, repeatable */
            char *eq;
            long id = strtol(v, &eq, 10);
            double b;
            if (o->n_bias == MAX_BIAS || eq == v || *eq != '=' || id < 0 || id > 0x7fffffff || num(eq + 1, -100, 100, &b)) {
                fprintf(stderr, "v4fleet %s: --logit-bias wants ID=BIAS with BIAS in [-100, 100] (at most %d), got "
                                "'%s'\n", PROG, MAX_BIAS, v);
                return 2;
            }
            for (int k = 0; k < o->n_bias; k++)
                if (o->bias[k].id == (int32_t)id) {
                    fprintf(stderr, "v4fleet %s: --logit-bias: token %ld given twice\n", PROG, id);
                    return 2;
                }
            o->bias[o->n_bias++] = (v4_logit_bias){(int32_t)id, (float)b};
            o->sp.bias = o->bias;
            o->sp.n_bias = o->n_bias;
        } else {
            fprintf(stderr, "v4fleet %s: bad argument '%s %s'\n", PROG, a, v);
            usage(stderr);
            return 2;
        }
    }
    if (!o->prompt == !o->prompt_ids) {
        fprintf(stderr, "v4fleet %s: give exactly one of --prompt and --prompt-ids\n", PROG);
        usage(stderr);
        return 2;
    }
    if (o->co.on && o->ignore_eos) {
        fprintf(stderr, "v4fleet %s: %s with --ignore-eos: a constrained answer ends where the constraint "
                        "accepts\n", PROG, o->co.flag);
        return 2;
    }
    return 0;
}

/* --prompt-ids: the tokenizer may be loaded (a constraint, logprobs) but the answer is
 * the ids array, not streamed text. */
static void emit_none(void *ud, const char *text, size_t len)
{
    (void)ud;
    (void)text;
    (void)len;
}

static void emit_stdout(void *ud, const char *text, size_t len)
{
    (void)ud;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
}

/* The constraint of the flags, compiled, as the run's matcher state over tok's vocabulary
 * (*vocab is the caller's to free after the state). */
static v4_constrain *make_constraint(const gen_opts *o, const v4_tokenizer *tok, int32_t eos, int n_logits,
                                     v4g_vocab **vocab, v4_error *err)
{
    const v4g_opts go = {.compact = o->co.compact};
    v4g_constraint *c = v4g_compile(o->co.kind, o->co.text, o->co.len, &go, err);
    if (!c) {
        v4_error e = *err;
        v4_err_set(err, e.code, o->co.flag, "does not compile: %s%s%s", e.msg, e.where[0] ? " at " : "", e.where);
        return NULL;
    }
    v4_chat_markers cm;
    v4_chat_markers_init(&cm, tok);
    v4_constrain *s = NULL;
    if ((*vocab = v4_grammar_vocab(tok, eos, err)))
        s = v4_constrain_new(c, *vocab, n_logits, eos, o->thinking ? cm.end_think_id : -1, err);
    v4g_constraint_unref(c);
    return s;
}

int v4_cmd_generate(int argc, char **argv)
{
    gen_opts o = {0};
    o.eo.model = "models/tiny";
    o.max_tokens = 64;
    o.sp = (v4_sampling_params){.temperature = 1.0, .top_p = 1.0, .top_k = 0, .seed = 0};
    int done = 0, st = parse(argc, argv, &o, &done);
    if (st || done) {
        v4_constraint_opts_free(&o.co);
        return st;
    }

    v4_error err = {0};
    v4_model_files m;
    v4_tokenizer *tok = NULL;
    v4_ids ids = {0};
    int32_t *file_ids = NULL;
    int n_prompt = 0, rc = 1;
    v4_backend *be = NULL;
    v4_seq *seq = NULL;
    v4_ctx *ctx = NULL;
    v4_xprov *xp = NULL;
    v4_gen_result res = {0};
    v4g_vocab *gvocab = NULL;
    v4_constrain *cons = NULL;
    if (v4_model_open_paged(o.eo.model, &m, o.eo.host_cache_bytes > 0, &err)) {
        v4_print_error(PROG, &err);
        v4_constraint_opts_free(&o.co);
        return 1;
    }
    const v4_config *cfg = &m.cfg;
    if (v4_sampling_validate(&o.sp, &err))
        goto out;
    if ((o.prompt || o.co.on || o.sp.logprobs) && v4_tok_load(o.eo.model, &tok, &err))
        goto out;
    if (o.prompt) {
        v4_chat_msg msg = {V4_CHAT_USER, o.prompt};
        if (v4_chat_encode(tok, o.system, &msg, 1, o.thinking, &ids, &err))
            goto out;
        n_prompt = (int)ids.n;
    } else {
        if (v4_read_ids_json(o.prompt_ids, &file_ids, &n_prompt, cfg->vocab_size, &err))
            goto out;
    }
    const int32_t *prompt = o.prompt ? ids.v : file_ids;
    long ctx_len = o.context ? o.context : n_prompt + o.max_tokens;
    if (ctx_len > cfg->max_position || n_prompt + o.max_tokens > ctx_len) {
        v4_err_set(&err, V4_ERR_RANGE, "context", "prompt (%d tokens) + max_tokens (%ld) exceed the context of %lld tokens",
                   n_prompt, o.max_tokens, ctx_len > cfg->max_position ? cfg->max_position : (long long)ctx_len);
        goto out;
    }
    /* prefill chunks: the context takes the backend's chunk (step_rows.h); each step then
     * carries the rows worker/serve/step_rows.h allows once the experts and the device
     * are attached (fewer with paged experts: those whose experts fit the cache; on CUDA
     * chunks only in the resident step with every expert resident) */
    if (!(be = v4_open_backend(&o.eo, &err)) || !(seq = v4_seq_create(&m.w, (int)ctx_len, &err)))
        goto out;
    const int chunk = v4_prefill_chunk(be, o.eo.prefill_chunk, 1);
    if (!(ctx = v4_ctx_create(&m.w, be, chunk, &err)) || v4_attach_experts(&o.eo, be, &m, ctx, &xp, &err))
        goto out;
    const int rows = v4_fit_step_rows(ctx, be, xp, cfg, chunk, 1);
    if (xp) {
        v4_xcache_stats st;
        v4_xprov_stats(xp, &st);
        fprintf(stderr, "v4fleet %s: experts paged through a host cache of %d slots: prefill chunks of up to %d "
                        "prompt positions per step\n", PROG, st.slots, rows);
    }
    int32_t eos = tok && v4_tok_eos(tok) >= 0 ? v4_tok_eos(tok) : cfg->eos_id;
    if (o.co.on && !(cons = make_constraint(&o, tok, eos, cfg->vocab_size, &gvocab, &err)))
        goto out;
    v4_gen_request req = {prompt, n_prompt, (int)o.max_tokens, o.sp, o.ignore_eos ? -1 : eos,
                          o.stops, o.n_stops, NULL, NULL, NULL, rows, NULL, 0, NULL, NULL};
    if (v4_generate_under(ctx, seq, tok, &req, cons, o.prompt ? emit_stdout : emit_none, NULL, &res, &err))
        goto out;
    if (o.prompt) {
        printf("\n");
        fprintf(stderr, "v4fleet %s: prompt %d tokens, generated %d tokens in %.2f s (%.1f tokens/s), "
                        "prefill %.2f s, finish_reason %s\n", PROG, n_prompt, res.n_tokens, res.decode_s,
                res.decode_s > 0 ? res.n_tokens / res.decode_s : 0.0, res.prefill_s, res.finish_reason);
        if (res.unknown_ids)
            fprintf(stderr, "v4fleet %s: %d generated ids have no token in the vocabulary (no text)\n", PROG,
                    res.unknown_ids);
    } else {
        printf("[");
        for (int i = 0; i < res.n_tokens; i++)
            printf(i ? ", %d" : "%d", res.tokens[i]);
        printf("]\n");
    }
    if (o.sp.logprobs) {   /* a final end-of-sequence token is not part of the answer */
        const int n = res.n_tokens - (res.n_tokens > 0 && res.tokens[res.n_tokens - 1] == req.eos_id);
        json_t *lp = v4_token_logprobs_json(tok, res.tokens, n, &res.lp);
        char *text = lp ? json_dumps(lp, JSON_COMPACT) : NULL;
        json_decref(lp);
        if (!text) {
            v4_err_set(&err, V4_ERR_NOMEM, "logprobs", "out of memory");
            goto out;
        }
        fprintf(stderr, "{\"logprobs\": %s}\n", text);
        free(text);
    }
    if (xp) {   /* after the answer's line break: the paged run's figures */
        v4_xcache_stats st;
        v4_xprov_stats(xp, &st);
        fprintf(stderr, "v4fleet %s: host expert cache: %llu hits, %llu misses, %llu prefetch reads (%llu used); "
                        "router look-ahead %s: %llu experts prefetched\n", PROG, (unsigned long long)st.hits,
                (unsigned long long)st.misses, (unsigned long long)st.prefetch_issued,
                (unsigned long long)st.prefetch_hits, v4_ctx_lookahead(ctx) ? "on" : "off",
                (unsigned long long)v4_ctx_lookahead_prefetched(ctx));
    }
    rc = 0;
out:
    if (rc)
        v4_print_error(PROG, &err);
    v4_gen_result_free(&res);
    v4_constrain_free(cons);
    v4g_vocab_free(gvocab);
    v4_constraint_opts_free(&o.co);
    v4_ids_free(&ids);
    free(file_ids);
    v4_tok_free(tok);
    v4_ctx_free(ctx);
    v4_xprov_close(xp);
    v4_seq_free(seq);
    if (be)
        be->ops->destroy(be);
    v4_model_close(&m);
    return rc;
}
