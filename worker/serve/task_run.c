/* task_run.c - one task through the engine (see task_run.h).
 * Thread: one thread at a time per runner. */
#include "task_run.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/expert_block.h"
#include "cache/expert_provider.h"
#include "cache/model_files.h"
#include "engine.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_budget.h"
#include "kernels/v4/model.h"
#include "step_rows.h"
#include "task_run_internal.h"
#include "token_logprobs.h"
#include "worker/prefix/prefix_cache.h"


double v4_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}


static int from_v4(v4_task_error *e, const v4_error *err)
{
    /* admission (exec_cont.c): a sequence that cannot fit the device memory even alone */
    if (err->code == V4_ERR_NOMEM && !strcmp(err->where, "device_memory"))
        return v4_task_fail(e, V4_TASK_CONTEXT_LENGTH_EXCEEDED, err->where, "%s", err->msg);
    return v4_task_fail(e, err->code == V4_ERR_CORRUPT ? V4_TASK_EXPERT_CORRUPT : V4_TASK_INTERNAL, err->where, "%s",
                        err->msg);
}

static void describe_names(v4_runner *r)
{
    size_t at = (size_t)snprintf(r->served_list, sizeof r->served_list, "\"%s\"", r->name);
    const char *p = strchr(r->names, ',');
    for (int i = 0; p && at < sizeof r->served_list; i++) {
        p++;
        size_t n = strcspn(p, ",");
        at += (size_t)snprintf(r->served_list + at, sizeof r->served_list - at, "%s\"%.*s\"", i ? ", " : " (also ",
                               (int)n, p);
        p = strchr(p, ',');
        if (!p && at < sizeof r->served_list)
            at += (size_t)snprintf(r->served_list + at, sizeof r->served_list - at, ")");
    }
}

/* The bound of a missing max_tokens (v4_runner_opts.default_max_tokens): 0 = none. */
static int default_max(const v4_runner_opts *ex, long *out, v4_error *err)
{
    const long o = ex ? ex->default_max_tokens : 0;
    const char *v = getenv("V4_DEFAULT_MAX_TOKENS");
    *out = o > 0 ? o : o < 0 ? 0 : V4_DEFAULT_MAX_TOKENS_DEFAULT;
    if (o || !v || !*v)
        return 0;
    char *end;
    const long n = strtol(v, &end, 10);
    if (*end || n < 0 || n > (1L << 20))
        return v4_err_set(err, V4_ERR_INVALID, "V4_DEFAULT_MAX_TOKENS",
                          "must be an integer in 0..%ld (0: the rest of the context; got \"%s\")", 1L << 20, v);
    *out = n;
    return 0;
}

v4_runner *v4_runner_open(const char *model_dir, const char *model_names, const v4_runner_opts *ex,
                          v4_task_error *e)
{
    v4_runner *r = calloc(1, sizeof *r);
    v4_error err = {0};
    if (!r) {
        v4_task_fail(e, V4_TASK_INTERNAL, "runner", "out of memory");
        return NULL;
    }
    snprintf(r->names, sizeof r->names, "%s", model_names);
    snprintf(r->name, sizeof r->name, "%.*s", (int)strcspn(model_names, ","), model_names);
    describe_names(r);
    v4_engine_opts eo = {.model = model_dir,
                         .threads = ex ? ex->threads : 0,
                         .isa = ex ? ex->isa : NULL,
                         .device = ex ? ex->device : NULL,
                         .cuda_mode = ex ? ex->cuda_mode : NULL,
                         .gpu_expert_mem = ex ? ex->gpu_expert_mem : NULL,
                         .gpu_cache_policy = ex ? ex->gpu_cache_policy : NULL,
                         .gpu_weight_mem = ex ? ex->gpu_weight_mem : NULL,
                         .gpu_seq_mem = ex ? ex->gpu_seq_mem : NULL,
                         .numerics = ex ? ex->numerics : NULL,
                         .no_lookahead = ex ? ex->no_lookahead : 0};
    if (v4_model_open_paged(model_dir, &r->m, ex && ex->host_cache_bytes > 0, &err))
        goto fail;
    r->m_open = 1;
    r->context = (long)r->m.cfg.max_position;
    if (ex && ex->max_context > 0 && ex->max_context < r->context)
        r->context = ex->max_context;
    r->max_batch = ex && ex->max_batch > 1 ? ex->max_batch : 1;
    if (v4_tok_load(model_dir, &r->tok, &err) || !(r->be = v4_open_backend(&eo, &err)))
        goto fail;
    r->chunk = v4_prefill_chunk(r->be, ex ? ex->prefill_chunk : 0, r->max_batch);
    if (!(r->ctx = v4_ctx_create(&r->m.w, r->be, r->max_batch + r->chunk - 1, &err)))
        goto fail;
    const int la = v4_lookahead_on(eo.no_lookahead, &err);
    if (la < 0)
        goto fail;
    v4_ctx_set_lookahead(r->ctx, la);
    r->threads = ex ? ex->threads : 0;
    r->eos = v4_tok_eos(r->tok) >= 0 ? v4_tok_eos(r->tok) : r->m.cfg.eos_id;
    v4_chat_markers cm;
    v4_chat_markers_init(&cm, r->tok);
    r->end_think = cm.end_think_id;
    r->grammar_compact = ex ? ex->grammar_compact : 0;
    r->prefill_each = getenv("V4_N_PREFILL_EACH") && !strcmp(getenv("V4_N_PREFILL_EACH"), "1");
    r->max_n = ex && ex->max_n > 0 ? ex->max_n : 0;
    if (!r->max_n && getenv("V4_MAX_N") && *getenv("V4_MAX_N")) {
        char *end;
        const long n = strtol(getenv("V4_MAX_N"), &end, 10);
        if (*end || n < 1 || n > V4_TASK_MAX_N) {
            v4_err_set(&err, V4_ERR_INVALID, "V4_MAX_N", "must be an integer in 1..%d (got \"%s\")", V4_TASK_MAX_N,
                       getenv("V4_MAX_N"));
            goto fail;
        }
        r->max_n = (int)n;
    }
    if (r->max_n < 1 || r->max_n > V4_TASK_MAX_N)
        r->max_n = V4_TASK_MAX_N;
    if (default_max(ex, &r->default_max, &err))
        goto fail;
    if (!(r->gcache = v4g_cache_new(ex && ex->grammar_cache_bytes > 0 ? (size_t)ex->grammar_cache_bytes
                                                                       : (size_t)V4_GRAMMAR_CACHE_DEFAULT))) {
        v4_err_set(&err, V4_ERR_NOMEM, "runner", "out of memory");
        goto fail;
    }
    if (ex && ex->host_cache_bytes > 0) {
        v4_xprov_opts xo = {model_dir, ex->pack_dir, (size_t)ex->host_cache_bytes, ex->policy, ex->io_threads, 0};
        if (!(r->xp = v4_xprov_open(&r->m.cfg, r->m.ck, &xo, &err)))
            goto fail;
        v4_ctx_set_expert_provider(r->ctx, v4_xprov_provider(r->xp));
    }
    const v4_gpu_opts go = {.cuda_mode = eo.cuda_mode,
                            .expert_mem = eo.gpu_expert_mem,
                            .cache_policy = eo.gpu_cache_policy,
                            .weight_mem = eo.gpu_weight_mem,
                            .seq_mem = eo.gpu_seq_mem,
                            .context = r->context,
                            .no_lookahead = !la};
    if (v4_attach_gpu(r->be, &r->m, r->ctx, r->max_batch, r->xp, &go, &err))
        goto fail;
    /* one row per sequence plus a prefill chunk's spare rows, as worker/serve/step_rows.h
     * decides (fewer with paged experts; on CUDA the resident step takes chunks when its
     * experts are resident or its device slots hold a full step's union, the hybrid mode
     * one row per sequence) */
    r->step_rows = v4_ctx_rows_per_seq(r->ctx) > 1
                       ? v4_fit_step_rows(r->ctx, r->be, r->xp, &r->m.cfg, v4_ctx_max_rows(r->ctx), r->max_batch)
                       : r->max_batch;
    if (ex && ex->prefix_cache && v4_runner_open_prefix(r, ex, &err))
        goto fail;
    return r;
fail:
    from_v4(e, &err);
    v4_runner_free(r);
    return NULL;
}

void v4_runner_free(v4_runner *r)
{
    if (!r)
        return;
    v4g_cache_free(r->gcache);
    v4g_vocab_free(r->gvocab);
    v4pc_free(r->pc);
    v4_ctx_free(r->ctx);
    v4_xprov_close(r->xp);
    if (r->be)
        r->be->ops->destroy(r->be);
    v4_tok_free(r->tok);
    if (r->m_open)
        v4_model_close(&r->m);
    free(r);
}

void v4_runner_describe_experts(const v4_runner *r, char *out, size_t n)
{
    if (!r->xp) {
        snprintf(out, n, "experts resident (mapped checkpoint)");
        return;
    }
    v4_xcache_stats st;
    v4_xprov_stats(r->xp, &st);
    snprintf(out, n, "experts paged from the %s through a %.2f GiB host cache (%d slots of %zu bytes), router "
             "look-ahead %s", v4_xprov_source_kind(r->xp), st.budget_bytes / 1073741824.0, st.slots, st.slot_bytes,
             v4_ctx_lookahead(r->ctx) ? "on" : "off");
}

int v4_runner_cache_figs_get(const v4_runner *r, v4_runner_cache_figs *f)
{
    memset(f, 0, sizeof *f);
    if (!r->xp)
        return -1;
    v4_xcache_stats st;
    v4_xprov_stats(r->xp, &st);
    *f = (v4_runner_cache_figs){st.hits, st.misses, st.bytes_read, st.in_use_bytes, st.budget_bytes};
    return 0;
}

int v4_runner_gpu_cache_figs_get(const v4_runner *r, v4_runner_cache_figs *f)
{
    return v4_gpu_cache_figs_get(r->be, f);
}

void v4_runner_memory_get(const v4_runner *r, v4_runner_memory *m)
{
    memset(m, 0, sizeof *m);
    const v4_config *cfg = &r->m.cfg;
    unsigned long long all = 0;
    for (size_t i = 0; i < v4_ckpt_count(r->m.ck); i++)
        all += v4_ckpt_tensor(r->m.ck, i)->nbytes;
    /* routed experts in the checkpoint (none in a model with synthetic experts) */
    const unsigned long long xall = r->m.experts_synthetic ? 0
                                    : (unsigned long long)cfg->n_layers * (unsigned long long)cfg->n_routed_experts *
                                          v4_expert_bytes(&r->m.w.layers[0].experts[0]);
    m->host_trunk = all > xall ? all - xall : 0;
    if (r->xp) {
        v4_xcache_stats st;
        v4_xprov_stats(r->xp, &st);
        m->host_experts = st.budget_bytes;
    } else {
        m->host_experts = xall;
    }
    m->host_sequences = (unsigned long long)r->max_batch * v4_seq_bytes_for(cfg, (int)r->context);
    m->gpu = v4_gpu_memory_get(r->be, &m->g) == 0;
}

void v4_runner_describe_memory(const v4_runner *r, char *out, size_t n)
{
    v4_runner_memory m;
    v4_runner_memory_get(r, &m);
    const double G = 1073741824.0;
    int at = snprintf(out, n, "memory: host trunk %.2f GiB, experts %.2f GiB (%s), sequences <= %.2f GiB (%d x %ld "
                      "positions)", m.host_trunk / G, m.host_experts / G, r->xp ? "cache budget" : "mapped",
                      m.host_sequences / G, r->max_batch, r->context);
    if (m.gpu && !m.g.resident && at > 0 && (size_t)at < n)
        snprintf(out + at, n - (size_t)at, "; GPU %.2f GiB held, of which experts %.2f GiB", m.g.held / G,
                 m.g.experts / G);
    else if (m.gpu && at > 0 && (size_t)at < n)
        snprintf(out + at, n - (size_t)at, "; GPU %.2f GiB held: trunk %.2f GiB, expert slots %.2f GiB, sequences %.2f GiB "
                 "(budget %.2f GiB)", m.g.held / G, m.g.trunk / G, m.g.experts / G, (m.g.held - m.g.trunk - m.g.experts) / G,
                 m.g.seq_budget / G);
}

/* Is model one of the names this worker answers to? */
static int serves(const v4_runner *r, const char *model)
{
    size_t m = strlen(model);
    for (const char *p = r->names;;) {
        size_t n = strcspn(p, ",");
        if (n == m && !strncmp(p, model, n))
            return 1;
        if (!p[n])
            return 0;
        p += n + 1;
    }
}

const char *v4_runner_model_name(const v4_runner *r)
{
    return r->name;
}

long v4_runner_context(const v4_runner *r)
{
    return r->context;
}

long v4_runner_max_tokens(const v4_runner *r, const v4_task *t, long n_prompt)
{
    if (t->has_max_tokens || t->max_tokens > 0)
        return t->max_tokens;
    const long rest = r->context - n_prompt;
    return r->default_max > 0 && r->default_max < rest ? r->default_max : rest;
}

long v4_runner_default_max_tokens(const v4_runner *r)
{
    return r->default_max;
}

long long v4_runner_generated(const v4_runner *r)
{
    return r->generated;
}

const v4_config *v4_runner_config(const v4_runner *r)
{
    return &r->m.cfg;
}

void v4_runner_grammar_figs(const v4_runner *r, v4g_cache_figs *f)
{
    memset(f, 0, sizeof *f);
    if (r->gcache)
        v4g_cache_stats(r->gcache, f);
}

const char *v4_runner_numerics(const v4_runner *r)
{
    return v4_backend_numerics(r->be);
}

void v4_runner_fast_selftest(const v4_runner *r, v4_fast_selftest *out)
{
    v4_backend_fast_selftest(r->be, out);
}

void v4_runner_describe_threads(const v4_runner *r, char *out, size_t n)
{
    out[0] = 0;
    if (strcmp(r->be->ops->name, "cpu"))
        return;
    if (r->threads > 0) {
        snprintf(out, n, "%d CPU thread%s (set)", r->threads, r->threads == 1 ? "" : "s");
        return;
    }
    v4_cpu_budget b;
    char d[600];
    v4_cpu_budget_get(&b);
    snprintf(out, n, "%d CPU thread%s: the default, %s", v4_cpu_backend_threads(r->be),
             v4_cpu_backend_threads(r->be) == 1 ? "" : "s", v4_cpu_budget_describe(&b, d, sizeof d));
}

v4_xprov *v4_runner_experts(v4_runner *r)
{
    return r->xp;
}

static void emit_buf(void *ud, const char *text, size_t len)
{
    v4_run_text *b = ud;
    if (b->oom)
        return;
    if (b->n + len + 1 > b->cap) {
        size_t cap = (b->n + len + 1) * 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, text, len);
    b->n += len;
    b->p[b->n] = 0;
}

static int build_prompt(v4_runner *r, const v4_task *t, v4_ids *ids, v4_task_error *e)
{
    v4_error err = {0};
    if (t->has_input_ids) {
        for (int i = 0; i < t->n_input_ids; i++) {
            if (t->input_ids[i] >= r->m.cfg.vocab_size)
                return v4_task_fail(e, V4_TASK_INVALID_FIELD, "input_ids", "id %d at index %d is outside the vocabulary of %d",
                            t->input_ids[i], i, r->m.cfg.vocab_size);
            if (v4_ids_push(ids, t->input_ids[i], &err))
                return from_v4(e, &err);
        }
        return 0;
    }
    v4_chat_msg msgs[V4_TASK_MAX_MESSAGES];
    size_t n = 0;
    const char *system = NULL;
    if (t->has_prompt) {
        msgs[n++] = (v4_chat_msg){V4_CHAT_USER, t->prompt};
    } else {
        for (int i = 0; i < t->n_messages; i++) {
            const v4_task_msg *m = &t->messages[i];
            if (!strcmp(m->role, "system")) {
                if (i != 0)
                    return v4_task_fail(e, V4_TASK_INVALID_FIELD, "messages", "only the first message may have role \"system\"");
                system = m->content;
                continue;
            }
            msgs[n++] = (v4_chat_msg){strcmp(m->role, "user") ? V4_CHAT_ASSISTANT : V4_CHAT_USER, m->content};
        }
    }
    if (v4_chat_encode(r->tok, system, msgs, n, t->thinking, ids, &err))
        return v4_task_fail(e, V4_TASK_INVALID_FIELD, "messages", "%s", err.msg);
    return 0;
}

static int guard_cancel(void *ud)
{
    v4_run_guard *g = ud;
    if (g->abort_fn && g->abort_fn(g->abort_ud))
        g->why = 2;
    else if (v4_now_ms() > g->deadline_ms)
        g->why = 1;
    return g->why;
}

/* The result's experts figures (task_run.h) from the activations (the routing counts)
 * and the loads charged to the run (misses, prefetched; 0 with every expert resident). */
static void count_experts(v4_run_output *out, long long misses, long long prefetched, size_t block_bytes)
{
    long long act = 0, layer0 = 0;
    for (size_t i = 0, n = (size_t)out->expert_layers * (size_t)out->expert_n; out->expert_counts && i < n; i++) {
        act += out->expert_counts[i];
        if (i < (size_t)out->expert_n)
            layer0 += out->expert_counts[i];
    }
    if (misses > act)   /* cannot happen: a load is charged to an activation that needed it */
        misses = act;
    if (prefetched > act - misses)
        prefetched = act - misses;
    out->expert_misses = misses;
    out->expert_prefetched = prefetched;
    out->expert_hits = act - misses - prefetched;
    out->expert_bytes_loaded = (misses + prefetched) * (long long)block_bytes;
    out->forwarded = out->expert_k ? (long)(layer0 / out->expert_k) : 0;
}

static void job_release(v4_run_job *j)
{
    v4_gen_free(j->gen);
    v4_constrain_free(j->cons);
    free(j->buf.p);
    v4_seq_free(j->seq);
    v4_ids_free(&j->ids);
    memset(j, 0, sizeof *j);
}

/* The experts figures of a job that ran (or failed). */
static void job_count(v4_run_job *j, v4_run_output *out)
{
    v4_runner *r = j->r;
    if (!r->xp) {
        count_experts(out, 0, 0, 0);
        return;
    }
    v4_xblock_layout lo;
    v4_xblock_layout_of(&r->m.cfg, &lo);
    if (j->shared_steps) {   /* batched: the loads charged to its rows */
        count_experts(out, j->charged_misses, j->charged_prefetched, lo.bytes);
    } else {   /* alone on the cache: every load of the run was for it */
        v4_xcache_stats after;
        v4_xprov_stats(r->xp, &after);
        count_experts(out, (long long)(after.misses - j->before.misses),
                      (long long)(after.prefetch_hits - j->before.prefetch_hits), lo.bytes);
    }
}

/* The task's output constraint, compiled through the runner's cache, as the job's
 * matcher state.  A constraint that does not compile fails this task alone: invalid_field,
 * where = the request field, the message with the engine's and the JSON pointer. */
static int attach_constraint(v4_runner *r, const v4_task *t, v4_run_job *j, v4_task_error *e)
{
    const v4_task_constraint *tc = &t->constraint;
    v4_error err = {0};
    if (!r->gvocab && !(r->gvocab = v4_grammar_vocab(r->tok, r->eos, &err)))
        return v4_task_fail(e, V4_TASK_INTERNAL, "constraint", "the tokenizer as the constraint engine's vocabulary: %s",
                            err.msg);
    const v4g_opts o = {.compact = tc->compact || r->grammar_compact};
    int hit = 0;
    v4g_constraint *c = v4g_cache_get(r->gcache, tc->kind, tc->text, tc->len, &o, &hit, &err);
    if (!c) {
        if (err.code == V4_ERR_NOMEM)
            return v4_task_fail(e, V4_TASK_INTERNAL, tc->field, "compiling %s: out of memory",
                                v4_task_constraint_what(tc));
        const int ptr = tc->kind == V4G_JSON_SCHEMA && !strstr(err.msg, err.where);
        return v4_task_fail(e, V4_TASK_INVALID_FIELD, tc->field, "%s does not compile: %s%s%s%s", v4_task_constraint_what(tc),
                            err.msg, ptr ? " (JSON pointer \"" : "", ptr ? err.where : "", ptr ? "\")" : "");
    }
    j->cons = v4_constrain_new(c, r->gvocab, r->m.cfg.vocab_size, r->eos, t->thinking ? r->end_think : -1, &err);
    v4g_constraint_unref(c);
    if (!j->cons)
        return v4_task_fail(e, V4_TASK_INTERNAL, tc->field, "%s", err.msg);
    j->cfield = tc->field;
    return 0;
}

int v4_runner_prepare(v4_runner *r, const v4_task *t, double deadline_ms, int (*abort_fn)(void *), void *abort_ud,
                      v4_run_job *j, v4_run_output *out, v4_task_error *e)
{
    return v4_runner_prepare_choice(r, t, 0, NULL, NULL, deadline_ms, abort_fn, abort_ud, j, out, e);
}

int v4_runner_prepare_choice(v4_runner *r, const v4_task *t, int choice, const v4_seq *from, const float *logits,
                             double deadline_ms, int (*abort_fn)(void *), void *abort_ud, v4_run_job *j,
                             v4_run_output *out, v4_task_error *e)
{
    memset(out, 0, sizeof *out);
    memset(j, 0, sizeof *j);
    j->r = r;
    j->thinking = t->thinking;
    if (t->model && !serves(r, t->model))
        return v4_task_fail(e, V4_TASK_MODEL_NOT_AVAILABLE, "model", "this worker serves %s, not \"%s\"",
                            r->served_list, t->model);
    if (v4_now_ms() >= deadline_ms)
        return v4_task_fail(e, V4_TASK_DEADLINE_EXCEEDED, "deadline_ms", "the deadline passed before the task started");
    v4_error err = {0};
    if (r->xp)
        v4_xprov_stats(r->xp, &j->before);
    if (build_prompt(r, t, &j->ids, e))
        goto fail;
    const long max_tokens = v4_runner_max_tokens(r, t, (long)j->ids.n);
    if (max_tokens <= 0) {   /* max_tokens left out, the prompt fills the context */
        v4_task_fail(e, V4_TASK_CONTEXT_LENGTH_EXCEEDED, "prompt",
                     "prompt (%zu tokens) leaves no room to generate in the context of %ld tokens", j->ids.n,
                     r->context);
        goto fail;
    }
    long long total = (long long)j->ids.n + max_tokens;
    if (total > r->context) {
        v4_task_fail(e, V4_TASK_CONTEXT_LENGTH_EXCEEDED, "max_tokens",
             "prompt (%zu tokens) + max_tokens (%ld) exceed the context of %ld tokens", j->ids.n, max_tokens,
             r->context);
        goto fail;
    }
    v4_sampling_params sp = {.temperature = t->temperature, .top_p = t->top_p, .top_k = (int)t->top_k,
                             .seed = t->seed};
    v4_task_sampling_apply(&t->sampling, &sp);
    sp.seed = v4_choice_seed(t->seed, choice);   /* n > 1: choices.h */
    if (t->n > r->max_n) {
        v4_task_fail(e, V4_TASK_INVALID_FIELD, "n", "this worker serves at most %d answers per task (V4_MAX_N), not %d",
                     r->max_n, t->n);
        goto fail;
    }
    if (v4_sampling_validate(&sp, &err)) {
        v4_task_fail(e, V4_TASK_INVALID_FIELD, err.where, "%s", err.msg);
        goto fail;
    }
    for (int i = 0; i < sp.n_bias; i++)
        if (sp.bias[i].id >= r->m.cfg.vocab_size) {
            v4_task_fail(e, V4_TASK_INVALID_FIELD, "logit_bias", "token id %d is outside the vocabulary of %d",
                         (int)sp.bias[i].id, r->m.cfg.vocab_size);
            goto fail;
        }
    if (t->constraint.on && attach_constraint(r, t, j, e))
        goto fail;
    if (!(j->seq = from ? v4_seq_fork(from, &err) : v4_seq_create(&r->m.w, (int)total, &err))) {
        from_v4(e, &err);
        goto fail;
    }
    const int32_t eos = r->eos;
    const v4_config *mc = &r->m.cfg;
    if (!(out->expert_counts = calloc((size_t)mc->n_layers * (size_t)mc->n_routed_experts, sizeof(uint32_t)))) {
        v4_task_fail(e, V4_TASK_INTERNAL, "runner", "out of memory");
        goto fail;
    }
    out->expert_layers = mc->n_layers;
    out->expert_n = mc->n_routed_experts;
    out->expert_k = mc->n_act_experts;
    j->guard = (v4_run_guard){deadline_ms, abort_fn, abort_ud, 0};
    j->req = (v4_gen_request){j->ids.v, (int)j->ids.n, (int)max_tokens, sp, t->ignore_eos ? -1 : eos, t->stops,
                              t->n_stops, guard_cancel, &j->guard, out->expert_counts, r->chunk, &r->generated,
                              r->pc ? v4pc_block(r->pc) : 0, v4_runner_cache_block, j};
    /* the longest cached block prefix of the prompt, its last position left to forward */
    if (r->pc && !from) {
        const int got = v4pc_restore(r->pc, j->seq, j->ids.v, (int)j->ids.n, (int)j->ids.n - 1, &err);
        j->cached = got > 0 ? got : 0;
        out->cached_tokens = j->cached;
        v4_err_clear(&err);
    }
    if (from ? !(j->gen = v4_gen_begin_forked(mc, j->seq, r->tok, &j->req, j->cons, logits, emit_buf, &j->buf, &err))
             : !(j->gen = v4_gen_begin_at(mc, j->seq, r->tok, &j->req, j->cached, emit_buf, &j->buf, &err))) {
        j->guard.why = 0;
        if (j->cfield && err.code == V4_ERR_INVALID && !strcmp(err.where, "constraint"))
            v4_task_fail(e, V4_TASK_INVALID_FIELD, j->cfield, "%s", err.msg);
        else
            from_v4(e, &err);
        goto fail;
    }
    v4_gen_set_constraint(j->gen, j->cons);
    return 0;
fail:
    job_count(j, out);
    job_release(j);
    return -1;
}

void v4_runner_job_charge(v4_run_job *j, long long misses, long long prefetched)
{
    j->shared_steps = 1;
    j->charged_misses += misses;
    j->charged_prefetched += prefetched;
}

enum { CHARGED = 0xFF };   /* an outcome-map entry already charged to a row */

void v4_runner_charge_row(v4_runner *r, unsigned char *outcomes, const v4_trace *tr, long long *misses,
                          long long *prefetched)
{
    *misses = *prefetched = 0;
    if (!outcomes || !tr || !tr->route_ids)
        return;
    const v4_config *cfg = &r->m.cfg;
    const int K = cfg->n_act_experts, E = cfg->n_routed_experts;
    for (int l = 0; l < cfg->n_layers; l++)
        for (int k = 0; k < K; k++) {
            int32_t id = tr->route_ids[l * K + k];
            if (id < 0 || id >= E)
                continue;
            unsigned char *o = &outcomes[(size_t)l * (size_t)E + (size_t)id];
            if (*o == V4_XOUT_MISS)
                ++*misses;
            else if (*o == V4_XOUT_PREFETCHED)
                ++*prefetched;
            else
                continue;
            *o = CHARGED;
        }
}

/* A thinking task's text -> reasoning (before the first </think>) and answer (after it,
 * in out->text); without </think> (the reasoning used the budget, or ended on EOS) all of
 * it is reasoning and the answer is empty.  0, or -1 on out of memory. */
static int split_reasoning(v4_run_output *out)
{
    static const char END[] = "</think>";
    const size_t el = sizeof END - 1;
    const char *at = NULL;
    for (size_t i = 0; !at && i + el <= out->text_len; i++)
        if (out->text[i] == '<' && !memcmp(out->text + i, END, el))
            at = out->text + i;
    const size_t rl = at ? (size_t)(at - out->text) : out->text_len;
    char *r = malloc(rl + 1);
    if (!r)
        return -1;
    memcpy(r, out->text, rl);
    r[rl] = 0;
    const size_t skip = at ? rl + el : out->text_len;
    memmove(out->text, out->text + skip, out->text_len - skip);
    out->text_len -= skip;
    out->text[out->text_len] = 0;
    out->reasoning = r;
    out->reasoning_len = rl;
    return 0;
}

/* A deadline overrun or an abort keeps the text generated so far (out->text; no token ids). */
static void keep_partial(v4_run_job *j, v4_run_output *out)
{
    if (j->buf.oom || !j->buf.p)
        return;
    out->text = j->buf.p;
    out->text_len = j->buf.n;
    j->buf.p = NULL;
}

int v4_runner_finish(v4_run_job *j, int failed, const v4_error *err, v4_run_output *out, v4_task_error *e)
{
    int rc = -1;
    v4_gen_result res = {0};
    if (failed) {
        if (j->guard.why == 2) {
            v4_task_fail(e, V4_TASK_INTERNAL, "shutdown", "aborted: %s", err->msg);
            keep_partial(j, out);   /* the submitter may answer with it (the queue worker: a cancelled task) */
            rc = -2;
        } else if (j->guard.why == 1) {
            v4_task_fail(e, V4_TASK_DEADLINE_EXCEEDED, "deadline_ms", "the task ran past its deadline (%s)", err->msg);
            keep_partial(j, out);
        } else if (j->cfield && err->code == V4_ERR_INVALID && !strcmp(err->where, "constraint")) {
            /* the constraint reached a point the vocabulary cannot continue */
            v4_task_fail(e, V4_TASK_INVALID_FIELD, j->cfield, "%s", err->msg);
        } else {
            from_v4(e, err);
        }
        goto out;
    }
    v4_gen_end(j->gen, &res);
    if (j->buf.oom) {
        v4_task_fail(e, V4_TASK_INTERNAL, "output", "out of memory");
        goto out;
    }
    if (v4_now_ms() > j->guard.deadline_ms) {
        v4_task_fail(e, V4_TASK_DEADLINE_EXCEEDED, "deadline_ms", "the task ran past its deadline");
        keep_partial(j, out);
        goto out;
    }
    out->text = j->buf.p ? j->buf.p : calloc(1, 1);
    j->buf.p = NULL;
    out->text_len = j->buf.n;
    if (out->text && j->thinking && split_reasoning(out)) {
        rc = v4_task_fail(e, V4_TASK_INTERNAL, "output", "out of memory");
        goto out;
    }
    out->tokens = res.tokens;
    res.tokens = NULL;
    out->n_tokens = res.n_tokens;
    out->prompt_tokens = (int)j->ids.n;
    out->cached_tokens = j->cached;
    out->finish_reason = res.finish_reason;
    out->prefill_ms = res.prefill_s * 1e3;
    out->decode_ms = res.decode_s * 1e3;
    if (j->req.sampling.logprobs) {   /* a final end-of-sequence token is not part of the answer */
        const int n = out->n_tokens - (out->n_tokens > 0 && j->req.eos_id >= 0 &&
                                       out->tokens[out->n_tokens - 1] == j->req.eos_id);
        if (!(out->logprobs = v4_token_logprobs_json(j->r->tok, out->tokens, n, &res.lp))) {
            rc = v4_task_fail(e, V4_TASK_INTERNAL, "output", "out of memory");
            goto out;
        }
    }
    rc = out->text ? 0 : v4_task_fail(e, V4_TASK_INTERNAL, "output", "out of memory");
out:
    job_count(j, out);
    v4_gen_result_free(&res);
    job_release(j);
    return rc;
}

int v4_runner_run_job(v4_runner *r, v4_run_job *j, void (*at_prompt_end)(void *, const v4_run_job *, const float *),
                      void *ud, v4_run_output *out, v4_task_error *e)
{
    const v4_config *cfg = &r->m.cfg;
    float *logits = malloc(sizeof(float) * (size_t)cfg->vocab_size * (size_t)v4_gen_capacity(j->gen));
    v4_error err = {0};
    int failed = 0;
    if (!logits) {
        v4_err_set(&err, V4_ERR_NOMEM, "generate", "out of memory");
        failed = 1;
    }
    while (!failed && !v4_gen_done(j->gen)) {   /* the one-sequence loop (as v4_generate) */
        const int before = v4_gen_forwarded(j->gen), np = j->req.n_prompt;
        failed = v4_gen_poll_cancel(j->gen, &err) || v4_gen_step_alone(j->gen, r->ctx, r->step_rows, logits, &err);
        if (!failed && at_prompt_end && before < np && v4_gen_forwarded(j->gen) >= np)   /* the step held its end */
            at_prompt_end(ud, j, logits + (size_t)(np - 1 - before) * (size_t)cfg->vocab_size);
    }
    free(logits);
    return v4_runner_finish(j, failed, &err, out, e);
}

int v4_runner_run(v4_runner *r, const v4_task *t, double deadline_ms, int (*abort_fn)(void *), void *abort_ud,
                  v4_run_output *out, v4_task_error *e)
{
    v4_run_job j;
    if (v4_runner_prepare(r, t, deadline_ms, abort_fn, abort_ud, &j, out, e))
        return -1;
    return v4_runner_run_job(r, &j, NULL, NULL, out, e);
}

uint64_t v4_choice_seed(uint64_t seed, int i)
{
    if (i == 0)
        return seed;
    uint64_t z = seed + (uint64_t)i * 0x9E3779B97F4A7C15ull;   /* splitmix64 */
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (z ^ (z >> 31)) & 0x7FFFFFFFFFFFFFFFull;   /* a seed a task may carry (0..2^63-1) */
}

int v4_run_output_completion(const v4_run_output *o)
{
    if (!o->choices || o->n_choices < 1)
        return o->n_tokens;
    int n = 0;
    for (int i = 0; i < o->n_choices; i++)
        n += o->choices[i].n_tokens;
    return n;
}

void v4_run_output_free(v4_run_output *o)
{
    free(o->expert_counts);
    free(o->text);
    free(o->tokens);
    json_decref(o->logprobs);
    free(o->reasoning);
    for (int i = 0; o->choices && i < o->n_choices; i++) {
        free(o->choices[i].text);
        free(o->choices[i].tokens);
        json_decref(o->choices[i].logprobs);
        free(o->choices[i].reasoning);
    }
    free(o->choices);
    memset(o, 0, sizeof *o);
}
