/* cmd_numcheck.c - `v4fleet numerics-check`: the fast numerics mode against the exact
 * one on a model, as the table of its validation contract (docs/numerics.md):
 *   1. kernels: every matrix product on identical activations (numcheck_kernels.c),
 *      calc_diff <= 1e-6 and identical NaN/Inf patterns;
 *   2. teacher-forced sub-layers: the exact path runs the token ids (chunks of rows of
 *      one sequence, a prefill); a second sequence runs them in fast mode with its
 *      residual streams reset to the exact path's after every sub-layer
 *      (v4_trace.force), so each sub-layer's output comes from the exact inputs:
 *      attention and MoE outputs and the mHC streams, calc_diff <= 1e-5 (per layer,
 *      over all positions; the worst layer is shown); routing (top-k sets identical
 *      on >= 99.9% of the score-routed (position, layer) pairs, every difference a
 *      near-tie: exact gap < 1e-4 relative); indexer selections (mean Jaccard >=
 *      0.995); the logits from the forced streams;
 *   3. logits with the exact path's tokens as input (a third sequence, fast mode, no
 *      forcing): argmax identical wherever the exact top-1/top-2 margin is > 0.1 and on
 *      >= 99.5% of positions, mean KL <= 1e-4, p99.9 KL <= 1e-2;
 *   4. the model's chaos baseline: the same four logits measures for the exact path
 *      against itself with every residual-stream element moved by one bf16 ulp (up or
 *      down, pseudo-random) after the first sub-layer of the first position (a fourth
 *      sequence, exact mode, that one sub-layer forced).  Reported, never counted.
 * Exit status: 0 when every counted row holds, 1 when one fails (or on an error), 2
 * usage.  Part 3 is counted with --free-logits check, reported with report, and with
 * auto (the default) counted only when the chaos baseline itself meets its bounds:
 * on a model where one ulp at one place moves the logits past them, a free-running
 * difference says nothing about the arithmetic (docs/numerics.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/model_files.h"
#include "cli_util.h"
#include "commands.h"
#include "kernels/v4/model.h"
#include "numcheck.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: v4fleet numerics-check --model DIR [--tokens FILE.json | --positions N] [--chunk N]\n"
               "                              [--free-logits auto|check|report] [--threads N]\n"
               "                              [--isa auto|scalar|avx2|avx512|avx512vnni]\n"
               "  Runs the fast numerics mode against the exact one and prints the contract table;\n"
               "  exit 1 when a row fails.  Default: 64 pseudo-random token ids, chunks of 16.\n");
}

typedef struct tbufs {
    int32_t *rid, *iid, *icnt;
    float *rw, *gap, *sub, *str;
} tbufs;

typedef struct run {
    v4_seq *s;
    v4_trace *tr;     /* [chunk] */
    v4_trace **trp;   /* [chunk] */
    tbufs b;
    float *logits;    /* [chunk][vocab] */
    uint8_t *sel;     /* [layers][2] force_sel of the chaos baseline (layer 0, sub-layer 0) */
} run;

typedef struct lstats {       /* logits of one comparison */
    long n, same, clear, clear_same;
    double kl_sum, worst_margin_flip;
    double *kl;               /* [positions] */
} lstats;

typedef struct stats {
    v4_diff *sub, *str;     /* [layers][2] */
    long route_pairs, route_same, route_tie, route_far, hash_pairs, hash_same;
    double route_far_gap;     /* the largest gap among differences that are not near-ties */
    long idx_pairs;
    double idx_sum, idx_min;
    lstats forced, free_, chaos;
} stats;

static int alloc_run(run *r, const v4_weights *w, int chunk, int traced, int positions, v4_error *err)
{
    const v4_config *c = &w->cfg;
    const size_t L = (size_t)c->n_layers, K = (size_t)c->n_act_experts, T = (size_t)c->index_topk;
    const size_t hd = (size_t)c->hc_mult * c->dim, n = (size_t)chunk;
    int ok = (r->s = v4_seq_create(w, positions, err)) != NULL;
    if (!ok)
        return -1;
    ok &= (r->tr = calloc(n, sizeof *r->tr)) != NULL;
    ok &= (r->trp = calloc(n, sizeof *r->trp)) != NULL;
    ok &= (r->logits = malloc(sizeof(float) * n * c->vocab_size)) != NULL;
    if (ok && traced) {
        ok &= (r->b.rid = calloc(n * L * K, 4)) != NULL && (r->b.rw = calloc(n * L * K, 4)) != NULL;
        ok &= (r->b.gap = calloc(n * L, 4)) != NULL && (r->b.iid = calloc(n * L * T, 4)) != NULL;
        ok &= (r->b.icnt = calloc(n * L, 4)) != NULL;
        ok &= (r->b.sub = calloc(n * L * 2 * c->dim, 4)) != NULL && (r->b.str = calloc(n * L * 2 * hd, 4)) != NULL;
    }
    if (!ok)
        return v4_err_set(err, V4_ERR_NOMEM, "numerics-check", "out of memory for the traces of %d rows", chunk);
    for (size_t b = 0; b < n; b++) {
        if (traced)
            r->tr[b] = (v4_trace){.route_ids = r->b.rid + b * L * K, .route_w = r->b.rw + b * L * K,
                                  .index_ids = r->b.iid + b * L * T, .index_count = r->b.icnt + b * L,
                                  .sub_out = r->b.sub + b * L * 2 * c->dim, .streams = r->b.str + b * L * 2 * hd,
                                  .route_gap = r->b.gap + b * L};
        r->trp[b] = traced ? &r->tr[b] : NULL;
    }
    return 0;
}

static void free_run(run *r)
{
    v4_seq_free(r->s);
    free(r->tr); free(r->trp); free(r->logits); free(r->sel);
    free(r->b.rid); free(r->b.rw); free(r->b.gap); free(r->b.iid); free(r->b.icnt); free(r->b.sub); free(r->b.str);
}

static void logit_stats(lstats *s, const float *pe, const float *pf, int V)
{
    double me, mf;
    const int ae = v4nc_top2(pe, V, &me), af = v4nc_top2(pf, V, &mf);
    const double kl = v4nc_kl(pe, pf, V);
    s->kl[s->n++] = kl;
    s->kl_sum += kl;
    s->same += ae == af;
    if (me > 0.1) {
        s->clear++;
        s->clear_same += ae == af;
        if (ae != af && me > s->worst_margin_flip)
            s->worst_margin_flip = me;
    }
}

static int same_set(const int32_t *a, const int32_t *b, int k)
{
    return v4nc_jaccard(a, k, b, k) == 1.0;
}

static void row_stats(stats *st, const v4_config *c, const v4_trace *te, const v4_trace *tf)
{
    const int L = c->n_layers, K = c->n_act_experts, T = c->index_topk;
    for (int l = 0; l < L; l++) {
        for (int s = 0; s < 2; s++) {
            v4_diff_add(&st->sub[l * 2 + s], te->sub_out + ((size_t)l * 2 + s) * c->dim,
                          tf->sub_out + ((size_t)l * 2 + s) * c->dim, (size_t)c->dim);
            const size_t hd = (size_t)c->hc_mult * c->dim;
            v4_diff_add(&st->str[l * 2 + s], te->streams + ((size_t)l * 2 + s) * hd,
                          tf->streams + ((size_t)l * 2 + s) * hd, hd);
        }
        const int same = same_set(te->route_ids + l * K, tf->route_ids + l * K, K);
        if (te->route_gap[l] < 0) {
            st->hash_pairs++;
            st->hash_same += same;
        } else {
            st->route_pairs++;
            st->route_same += same;
            if (!same && te->route_gap[l] < 1e-4f)
                st->route_tie++;
            else if (!same) {
                st->route_far++;
                st->route_far_gap = fmax(st->route_far_gap, te->route_gap[l]);
            }
        }
        if (c->compress_ratios[l] == 4) {
            const double j = v4nc_jaccard(te->index_ids + l * T, te->index_count[l], tf->index_ids + l * T,
                                          tf->index_count[l]);
            st->idx_pairs++;
            st->idx_sum += j;
            st->idx_min = fmin(st->idx_min, j);
        }
    }
}

/* The table: one line per row, "ok" or "FAIL" last (counted unless report-only). */
typedef struct table {
    int rows, failed;
} table;

static void row(table *t, const char *check, const char *measure, const char *value, const char *bound, int holds,
                int counted)
{
    printf("%-30s %-38s %-24s %-12s %s\n", check, measure, value, bound,
           !counted ? (holds ? "ok (report)" : "differs (report)") : holds ? "ok" : "FAIL");
    if (counted) {
        t->rows++;
        t->failed += !holds;
    }
}

/* Whether the four logits measures meet their bounds (sorts s->kl). */
static int logits_hold(lstats *s)
{
    const double mean = s->n ? s->kl_sum / s->n : 0;
    return s->clear_same == s->clear && s->same >= 0.995 * s->n && mean <= 1e-4 &&
           v4nc_quantile(s->kl, (int)s->n, 0.999) <= 1e-2;
}

static void logit_rows(table *t, const char *name, lstats *s, int counted)
{
    char v[64];
    snprintf(v, sizeof v, "%ld/%ld", s->clear_same, s->clear);
    row(t, name, "argmax same where exact margin > 0.1", v, "all", s->clear_same == s->clear, counted);
    snprintf(v, sizeof v, "%.2f%% (%ld/%ld)", 100.0 * s->same / (s->n ? s->n : 1), s->same, s->n);
    row(t, name, "argmax same, all positions", v, ">= 99.5%", s->same >= 0.995 * s->n, counted);
    const double mean = s->n ? s->kl_sum / s->n : 0;
    snprintf(v, sizeof v, "%.3g", mean);
    row(t, name, "mean KL(exact || this run)", v, "<= 1e-4", mean <= 1e-4, counted);
    const double p = v4nc_quantile(s->kl, (int)s->n, 0.999);
    snprintf(v, sizeof v, "%.3g", p);
    row(t, name, "p99.9 KL", v, "<= 1e-2", p <= 1e-2, counted);
}

static void diff_rows(table *t, const char *name, const v4_diff *d, int L, int sub, double bound)
{
    double worst = 0;
    int at = 0;
    long bad = 0;
    for (int l = 0; l < L; l++) {
        const double v = v4_diff_value(&d[l * 2 + sub]);
        bad += d[l * 2 + sub].pattern_bad;
        if (v > worst || l == 0) {
            worst = v;
            at = l;
        }
    }
    char m[64], v[64], b[32];
    snprintf(m, sizeof m, "calc_diff, worst layer (%d)", at);
    snprintf(v, sizeof v, "%.3g", worst);
    snprintf(b, sizeof b, "<= %.0e", bound);
    row(t, name, m, v, b, worst <= bound, 1);
    snprintf(v, sizeof v, "%ld", bad);
    row(t, name, "NaN/Inf pattern mismatches", v, "0", bad == 0, 1);
}

static void print_table(table *t, const v4nc_kernel_row *kr, int nk, stats *st, const v4_config *c,
                        const char *free_mode)
{
    const int chaotic = !logits_hold(&st->chaos);
    const int free_counted = !strcmp(free_mode, "check") || (!strcmp(free_mode, "auto") && !chaotic);
    char name[64], v[64];
    printf("%-30s %-38s %-24s %-12s %s\n", "check", "measure", "value", "bound", "result");
    for (int i = 0; i < nk; i++) {
        snprintf(name, sizeof name, "kernel %s %s (%d)", kr[i].type, kr[i].mode, kr[i].matrices);
        char m[96];
        snprintf(m, sizeof m, "calc_diff, worst: %s", kr[i].worst_at);
        snprintf(v, sizeof v, "%.3g", kr[i].worst);
        row(t, name, m, v, "<= 1e-6", kr[i].worst <= 1e-6, 1);
        snprintf(v, sizeof v, "%ld", kr[i].pattern_bad);
        row(t, name, "NaN/Inf pattern mismatches", v, "0", kr[i].pattern_bad == 0, 1);
    }
    diff_rows(t, "sub-layer attention output", st->sub, c->n_layers, 0, 1e-5);
    diff_rows(t, "sub-layer MoE output", st->sub, c->n_layers, 1, 1e-5);
    diff_rows(t, "mHC streams after attention", st->str, c->n_layers, 0, 1e-5);
    diff_rows(t, "mHC streams after MoE", st->str, c->n_layers, 1, 1e-5);
    snprintf(v, sizeof v, "%.3f%% (%ld/%ld)", 100.0 * st->route_same / (st->route_pairs ? st->route_pairs : 1),
             st->route_same, st->route_pairs);
    row(t, "routing (score layers)", "top-k sets identical", v, ">= 99.9%", st->route_same >= 0.999 * st->route_pairs,
        1);
    snprintf(v, sizeof v, "%ld (ties %ld)", st->route_far, st->route_tie);
    row(t, "routing (score layers)", "differences that are no near-tie", v, "0", st->route_far == 0, 1);
    snprintf(v, sizeof v, "%ld/%ld", st->hash_same, st->hash_pairs);
    row(t, "routing (hash layers)", "expert sets identical", v, "all", st->hash_same == st->hash_pairs, 1);
    const double jm = st->idx_pairs ? st->idx_sum / st->idx_pairs : 1.0;
    snprintf(v, sizeof v, "%.5f (min %.3f, %ld)", jm, st->idx_pairs ? st->idx_min : 1.0, st->idx_pairs);
    row(t, "indexer selections", "mean Jaccard", v, ">= 0.995", jm >= 0.995, 1);
    logit_rows(t, "logits (teacher-forced)", &st->forced, 1);
    logit_rows(t, "logits (exact tokens in)", &st->free_, free_counted);
    logit_rows(t, "chaos: exact +-1 ulp at pos 0", &st->chaos, 0);
    if (!strcmp(free_mode, "auto"))
        printf("numerics-check: %s\n", chaotic ? "the model is chaotic (+-1 ulp once, at position 0, moves the exact logits "
                                                 "past the bounds): the free-running rows are reported, not counted"
                                               : "the chaos baseline holds: the free-running rows are counted");
}

static void pseudo_ids(int32_t *ids, int n, int vocab)
{
    uint64_t s = 0x5EEDull;
    for (int i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((s >> 33) % (uint64_t)vocab);
    }
}

typedef struct args {
    v4_engine_opts eo;
    const char *tokens, *free_mode;
    int positions, chunk;
} args;

static int parse(args *a, int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        int r = v4_opts_take(&a->eo, argc, argv, &i, "numerics-check");
        if (r < 0)
            return 2;
        if (r)
            continue;
        if (!strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "v4fleet numerics-check: '%s' wants a value\n", argv[i]);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(argv[i - 1], "--tokens"))
            a->tokens = v;
        else if (!strcmp(argv[i - 1], "--free-logits") && (!strcmp(v, "check") || !strcmp(v, "report") ||
                                                            !strcmp(v, "auto")))
            a->free_mode = v;
        else if (!strcmp(argv[i - 1], "--positions") || !strcmp(argv[i - 1], "--chunk")) {
            char *end;
            long n = strtol(v, &end, 10);
            if (*end || n < 1 || n > 1000000) {
                fprintf(stderr, "v4fleet numerics-check: %s wants a count >= 1, got '%s'\n", argv[i - 1], v);
                return 2;
            }
            *(!strcmp(argv[i - 1], "--chunk") ? &a->chunk : &a->positions) = (int)n;
        } else {
            fprintf(stderr, "v4fleet numerics-check: unexpected argument '%s %s'\n", argv[i - 1], v);
            usage(stderr);
            return 2;
        }
    }
    if (!a->eo.model) {
        usage(stderr);
        return 2;
    }
    if (a->eo.host_cache_bytes > 0 || a->eo.pack) {
        fprintf(stderr, "v4fleet numerics-check: paged experts are not supported here (the check reads the "
                        "checkpoint's experts directly)\n");
        return 2;
    }
    if (a->eo.no_lookahead) {
        fprintf(stderr, "v4fleet numerics-check: --no-lookahead does not apply (no paged experts here)\n");
        return 2;
    }
    if (a->eo.numerics) {
        fprintf(stderr, "v4fleet numerics-check: --numerics does not apply (the check runs both modes)\n");
        return 2;
    }
    return -1;
}

static int open_pair(const v4_engine_opts *eo, v4_backend **be, v4_error *err)
{
    /* the reference is always the CPU's exact mode; the fast side runs on --device
     * (cuda: the hybrid backend, every product on the GPU's tensor cores, the rest of
     * the step on the CPU, so the teacher-forced traces work as on the CPU) */
    v4_engine_opts o = *eo;
    o.numerics = "exact";
    o.device = "cpu";
    if (!(be[0] = v4_open_backend(&o, err)))
        return -1;
    o = *eo;
    o.numerics = "fast";
    if (!(be[1] = v4_open_backend(&o, err)))
        return -1;
    if (strcmp(v4_backend_numerics(be[1]), "fast")) {
        v4_fast_selftest ft;
        v4_backend_fast_selftest(be[1], &ft);
        return v4_err_set(err, V4_ERR_INVALID, "--device",
                          "%s: the fast mode is not available there (its tensor-core path did not start: self-test %s, "
                          "product %s, status %s (%d); see the line above)", be[1]->ops->name,
                          v4_fast_state_name(ft.state), ft.product[0] ? ft.product : "-", ft.status[0] ? ft.status : "-",
                          ft.code);
    }
    return 0;
}

/* One chunk through the four sequences: exact (traced), fast forced to it, fast free,
 * and the chaos baseline (exact; at position 0 its streams after the first sub-layer
 * are the exact ones with every element one bf16 ulp up or down: pert). */
static int step4(v4_ctx *ce, v4_ctx *cf, run *r, const int32_t *ids, int m, int p0, float *pert, size_t hd,
                 v4_error *err)
{
    v4_seq *se[4096], *sf[4096], *sg[4096], *sc[4096];
    for (int b = 0; b < m; b++) {
        se[b] = r[0].s;
        sf[b] = r[1].s;
        sg[b] = r[2].s;
        sc[b] = r[3].s;
        r[1].tr[b].force = r[0].tr[b].streams;
    }
    if (v4_step_rows(ce, se, ids, m, r[0].logits, NULL, r[0].trp, err) ||
        v4_step_rows(cf, sf, ids, m, r[1].logits, NULL, r[1].trp, err) ||
        v4_step_rows(cf, sg, ids, m, r[2].logits, NULL, NULL, err))
        return -1;
    if (p0 == 0) {
        memcpy(pert, r[0].tr[0].streams, sizeof(float) * hd);
        uint64_t z = 0x243F6A8885A308D3ull;
        for (size_t i = 0; i < hd; i++) {   /* every element one bf16 ulp up or down (sign bits of z) */
            uint32_t u;
            memcpy(&u, &pert[i], 4);
            z ^= z << 13, z ^= z >> 7, z ^= z << 17;
            if ((u & 0x7f800000u) != 0x7f800000u && (u & 0x7fff0000u) != 0)   /* finite, nonzero */
                u = z & 1 ? u + 0x10000u : u - 0x10000u;
            memcpy(&pert[i], &u, 4);
        }
    }
    for (int b = 0; b < m; b++)
        r[3].trp[b] = p0 == 0 && b == 0 ? &r[3].tr[0] : NULL;
    if (p0 == 0)
        r[3].tr[0] = (v4_trace){.force = pert, .force_sel = r[3].sel};
    return v4_step_rows(ce, sc, ids, m, r[3].logits, NULL, r[3].trp, err);
}

int v4_cmd_numerics_check(int argc, char **argv)
{
    args a = {.positions = 64, .chunk = 16, .free_mode = "auto"};
    int pr = parse(&a, argc, argv);
    if (pr >= 0)
        return pr;
    if (a.chunk > 4096)
        a.chunk = 4096;
    v4_error err = {0};
    v4_model_files m;
    if (v4_model_open(a.eo.model, &m, &err)) {
        v4_print_error("numerics-check", &err);
        return 1;
    }
    const v4_config *cfg = &m.cfg;
    const int V = cfg->vocab_size, L = cfg->n_layers;
    v4_backend *be[2] = {NULL, NULL};
    v4_ctx *ce = NULL, *cf = NULL;
    run r[4] = {{0}};
    float *pert = NULL;
    int32_t *ids = NULL;
    int n = 0, rc = 1, nk = 0;
    v4nc_kernel_row kr[16];
    stats st = {.idx_min = 1.0};
    st.sub = calloc((size_t)L * 2, sizeof *st.sub);
    st.str = calloc((size_t)L * 2, sizeof *st.str);
    if (a.tokens) {
        if (v4_read_ids_json(a.tokens, &ids, &n, V, &err))
            goto out;
        if (n == 0) {
            v4_err_set(&err, V4_ERR_INVALID, a.tokens, "no token ids");
            goto out;
        }
    } else if ((ids = malloc(sizeof *ids * (size_t)a.positions))) {
        n = a.positions;
        pseudo_ids(ids, n, V);
    }
    st.forced.kl = calloc((size_t)n + 1, sizeof(double));
    st.free_.kl = calloc((size_t)n + 1, sizeof(double));
    st.chaos.kl = calloc((size_t)n + 1, sizeof(double));
    pert = malloc(sizeof(float) * (size_t)cfg->hc_mult * cfg->dim);
    r[3].sel = calloc((size_t)L * 2, 1);
    if (!ids || !st.sub || !st.str || !st.forced.kl || !st.free_.kl || !st.chaos.kl || !pert || !r[3].sel) {
        v4_err_set(&err, V4_ERR_NOMEM, "numerics-check", "out of memory");
        goto out;
    }
    if (a.chunk > n)
        a.chunk = n;
    if (open_pair(&a.eo, be, &err) || !(ce = v4_ctx_create(&m.w, be[0], a.chunk, &err)) ||
        !(cf = v4_ctx_create(&m.w, be[1], a.chunk, &err)))
        goto out;
    for (int i = 0; i < 4; i++)
        if (alloc_run(&r[i], &m.w, a.chunk, i < 2, n, &err))
            goto out;
    r[3].sel[0] = 1;
    fprintf(stderr, "numerics-check: %s: %d layers, dim %d, vocab %d; %d positions in chunks of %d; fast vs exact "
                    "on the CPU (%s)\n", a.eo.model, L, cfg->dim, V, n, a.chunk, v4_ctx_attn_path(cf));
    if (v4nc_kernels(&m.w, be[0], be[1], 8, kr, 16, &nk, &err))
        goto out;
    for (int p0 = 0; p0 < n; p0 += a.chunk) {
        const int mrows = n - p0 < a.chunk ? n - p0 : a.chunk;
        if (step4(ce, cf, r, ids + p0, mrows, p0, pert, (size_t)cfg->hc_mult * cfg->dim, &err))
            goto out;
        for (int b = 0; b < mrows; b++) {
            row_stats(&st, cfg, &r[0].tr[b], &r[1].tr[b]);
            const float *le = r[0].logits + (size_t)b * V;
            logit_stats(&st.forced, le, r[1].logits + (size_t)b * V, V);
            logit_stats(&st.free_, le, r[2].logits + (size_t)b * V, V);
            logit_stats(&st.chaos, le, r[3].logits + (size_t)b * V, V);
        }
        fprintf(stderr, "numerics-check: %d/%d positions\n", p0 + mrows, n);
    }
    table t = {0};
    print_table(&t, kr, nk, &st, cfg, a.free_mode);
    if (t.failed)
        printf("numerics-check: the contract FAILS: %d of %d rows\n", t.failed, t.rows);
    else
        printf("numerics-check: the contract holds (%d rows)\n", t.rows);
    rc = t.failed ? 1 : 0;
out:
    if (rc && err.code)
        v4_print_error("numerics-check", &err);
    for (int i = 0; i < 4; i++)
        free_run(&r[i]);
    free(ids); free(st.sub); free(st.str); free(st.forced.kl); free(st.free_.kl); free(st.chaos.kl); free(pert);
    v4_ctx_free(ce);
    v4_ctx_free(cf);
    for (int i = 0; i < 2; i++)
        if (be[i])
            be[i]->ops->destroy(be[i]);
    v4_model_close(&m);
    return rc;
}
