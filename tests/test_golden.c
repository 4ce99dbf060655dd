/* test_golden.c - the CPU decode path against the reference outputs in
 * tests/data/golden/tiny (copied from ../shared/golden/tiny; see its README).
 *
 * For every CPU kernel path this machine supports (scalar, avx2, avx512) it feeds
 * the 320-token sequence one position at a time from a fresh state and requires:
 * identical sub-layer fingerprints (trace_checksum), logits within the README's
 * tolerance (expected bit-exact), identical argmax, routed expert ids (in selection
 * order) and routing weights, identical indexer selections and counts, the debug
 * dumps at the boundary positions, and identical caches after the sequence; then
 * greedy generation from the prompt must reproduce the generated ids and logits.
 * The first failing check names the position, layer and sub-layer.  The model is
 * opened with v4_model_open, so the EXACT-mode matrices run in the prepared R8 layout;
 * ctest also runs it as test_golden_rowmajor with V4_NO_PREPARE=1 (mapped weights).
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/model_files.h"
#include "kernels/codec.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/v4/model.h"
#include "testutil.h"
#include "worker/serve/sampling.h"

static char g_dir[4096];

static void *load_bin(const char *name, size_t expect_bytes)
{
    char path[4600];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(1);
    }
    void *buf = malloc(expect_bytes);
    size_t got = fread(buf, 1, expect_bytes, f);
    fclose(f);
    if (got != expect_bytes) {
        fprintf(stderr, "%s: %zu bytes, expected %zu\n", path, got, expect_bytes);
        exit(1);
    }
    return buf;
}

static int *json_ids(json_t *root, const char *key, int *n)
{
    json_t *a = json_object_get(root, key);
    *n = (int)json_array_size(a);
    int *ids = malloc(sizeof(int) * (size_t)(*n + 1));
    for (int i = 0; i < *n; i++)
        ids[i] = (int)json_integer_value(json_array_get(a, (size_t)i));
    return ids;
}

typedef struct golden {
    int P, L, K, C, T, V, D, H, HD, HC, ID, W, Pd;
    int csa[8], csa_layer_of[64];
    float *logits, *hidden, *route_w, *greedy_logits;
    int32_t *argmax, *route_ids, *index_sel, *index_count, *checksum, *dbg_pos;
    float *dbg_streams, *dbg_sub, *dbg_q, *dbg_kv;
} golden;

static float stdev(const float *x, int n)
{
    double s = 0, ss = 0;
    for (int i = 0; i < n; i++) {
        s += x[i];
        ss += (double)x[i] * x[i];
    }
    double m = s / n;
    return (float)sqrt(ss / n - m * m);
}

static int cmp_f(const float *a, const float *b, size_t n, const char *what, int pos)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], 4) && !(a[i] == b[i])) {
            fprintf(stderr, "  %s differs at pos %d index %zu: got %.9g want %.9g\n", what, pos, i, a[i], b[i]);
            return 1;
        }
    return 0;
}

/* A bf16 cache (v4_seq_* views) against the reference's dump (f32 files): the same
 * values, and the reference's values are bf16 themselves (its caches are BF16). */
static int cmp_bf(const uint16_t *a, const float *b, size_t n, const char *what, int pos)
{
    for (size_t i = 0; i < n; i++) {
        if (v4_f32_bits(b[i]) != v4_f32_bits(v4_bf16(b[i]))) {
            fprintf(stderr, "  %s: reference value %.9g at pos %d index %zu is not bf16\n", what, b[i], pos, i);
            return 1;
        }
    }
    float *f = malloc(sizeof(float) * (n ? n : 1));
    if (!f)
        return 1;
    for (size_t i = 0; i < n; i++)
        f[i] = v4_bf16_from_bits(a[i]);
    int rc = cmp_f(f, b, n, what, pos);
    free(f);
    return rc;
}

static void run_sequence(const v4_model_files *m, v4_backend *be, const golden *g, const int *seq)
{
    const v4_config *cfg = &m->cfg;
    v4_error err = {0};
    v4_seq *s = v4_seq_create(&m->w, g->P, &err);
    v4_ctx *c = v4_ctx_create(&m->w, be, 1, &err);
    CHECK(s && c, "create: %s", err.msg);
    if (!s || !c)
        return;
    float *logits = malloc(sizeof(float) * g->V);
    int32_t *rid = calloc((size_t)g->L * g->K, 4), *isel = calloc((size_t)g->L * cfg->index_topk, 4);
    int32_t *icnt = calloc((size_t)g->L, 4);
    uint32_t *cks = calloc((size_t)g->L * 2, 4);
    float *rw = calloc((size_t)g->L * g->K, 4), *hid = calloc((size_t)g->D, 4);
    float *q = calloc((size_t)g->L * g->H * g->HD, 4), *kv = calloc((size_t)g->L * g->HD, 4);
    float *sub = calloc((size_t)g->L * 2 * g->D, 4), *str = calloc((size_t)g->L * 2 * g->HC * g->D, 4);
    v4_trace tr = {rid, rw, isel, icnt, cks, q, kv, sub, str, hid, NULL, NULL, NULL};
    v4_trace *trp = &tr;
    int first_div = -1, dbg = 0, bad_int = 0;
    double worst_rel = 0;
    for (int p = 0; p < g->P; p++) {
        int rc = v4_step(c, &s, &seq[p], 1, logits, &trp, &err);
        CHECK(rc == 0, "step %d: %s", p, err.msg);
        if (rc)
            break;
        for (int l = 0; l < g->L && first_div < 0; l++)
            for (int k = 0; k < 2; k++)
                if ((int32_t)cks[l * 2 + k] != g->checksum[(p * g->L + l) * 2 + k]) {
                    first_div = p;
                    fprintf(stderr, "  first divergence: position %d, layer %d, %s sub-layer\n", p, l,
                            k ? "MoE" : "attention");
                    break;
                }
        const float *ref = g->logits + (size_t)p * g->V;
        float sd = stdev(ref, g->V), md = 0;
        for (int i = 0; i < g->V; i++)
            if (fabsf(logits[i] - ref[i]) > md)
                md = fabsf(logits[i] - ref[i]);
        if (md / sd > worst_rel)
            worst_rel = md / sd;
        if (v4_argmax(logits, g->V) != g->argmax[p])
            bad_int++;
        for (int l = 0; l < g->L; l++)
            for (int k = 0; k < g->K; k++) {
                size_t gi = ((size_t)p * g->L + l) * g->K + k;
                if (rid[l * g->K + k] != g->route_ids[gi] || rw[l * g->K + k] != g->route_w[gi]) {
                    if (!bad_int)
                        fprintf(stderr, "  route mismatch pos %d layer %d slot %d: got %d (%.9g) want %d (%.9g)\n",
                                p, l, k, rid[l * g->K + k], rw[l * g->K + k], g->route_ids[gi], g->route_w[gi]);
                    bad_int++;
                }
            }
        for (int ci = 0; ci < g->C; ci++) {
            int l = g->csa[ci];
            if (icnt[l] != g->index_count[p * g->C + ci])
                bad_int++;
            for (int k = 0; k < g->T; k++)
                if (isel[l * cfg->index_topk + k] != g->index_sel[((size_t)p * g->C + ci) * g->T + k]) {
                    if (!bad_int)
                        fprintf(stderr, "  indexer mismatch pos %d layer %d slot %d\n", p, l, k);
                    bad_int++;
                    break;
                }
        }
        if (cmp_f(hid, g->hidden + (size_t)p * g->D, g->D, "hidden", p))
            bad_int++;
        if (dbg < g->Pd && g->dbg_pos[dbg] == p) {
            int bad = 0;
            bad |= cmp_f(q, g->dbg_q + (size_t)dbg * g->L * g->H * g->HD, (size_t)g->L * g->H * g->HD, "debug_q", p);
            bad |= cmp_f(kv, g->dbg_kv + (size_t)dbg * g->L * g->HD, (size_t)g->L * g->HD, "debug_kv", p);
            bad |= cmp_f(sub, g->dbg_sub + (size_t)dbg * g->L * 2 * g->D, (size_t)g->L * 2 * g->D, "debug_sublayer_out", p);
            bad |= cmp_f(str, g->dbg_streams + (size_t)dbg * g->L * 2 * g->HC * g->D,
                         (size_t)g->L * 2 * g->HC * g->D, "debug_streams", p);
            CHECK(!bad, "debug dumps at position %d", p);
            dbg++;
        }
    }
    CHECK(first_div < 0, "sub-layer fingerprints diverge at position %d", first_div);
    CHECK(worst_rel <= 1e-5, "logits: worst max|d|/std = %g", worst_rel);
    CHECK(bad_int == 0, "%d integer/route/indexer/hidden mismatches", bad_int);
    CHECK(dbg == g->Pd, "visited %d of %d debug positions", dbg, g->Pd);
    printf("  sequence: %d positions, worst logit rel diff %g, first divergence %d\n", g->P, worst_rel, first_div);

    /* caches after the sequence */
    char name[128];
    for (int l = 0; l < g->L; l++) {
        snprintf(name, sizeof name, "cache_window_L%d.bin", l);
        float *ref = load_bin(name, sizeof(float) * g->W * g->HD);
        CHECK(!cmp_bf(v4_seq_window(s, l), ref, (size_t)g->W * g->HD, name, g->P), "%s", name);
        free(ref);
        if (cfg->compress_ratios[l]) {
            int n;
            const uint16_t *cc = v4_seq_compressed(s, l, &n);
            CHECK(n == g->P / cfg->compress_ratios[l], "layer %d: %d compressed entries", l, n);
            snprintf(name, sizeof name, "cache_compressed_L%d.bin", l);
            ref = load_bin(name, sizeof(float) * n * g->HD);
            CHECK(!cmp_bf(cc, ref, (size_t)n * g->HD, name, g->P), "%s", name);
            free(ref);
        }
        if (cfg->compress_ratios[l] == 4) {
            int n;
            const uint16_t *kk = v4_seq_index_keys(s, l, &n);
            snprintf(name, sizeof name, "cache_index_keys_L%d.bin", l);
            ref = load_bin(name, sizeof(float) * n * g->ID);
            CHECK(!cmp_bf(kk, ref, (size_t)n * g->ID, name, g->P), "%s", name);
            free(ref);
        }
    }
    CHECK(v4_seq_inexact(s) == 0, "%ld cache values stored were not bf16", v4_seq_inexact(s));
    free(logits); free(rid); free(isel); free(icnt); free(cks); free(rw); free(hid);
    free(q); free(kv); free(sub); free(str);
    v4_seq_free(s);
    v4_ctx_free(c);
}

static void run_greedy(const v4_model_files *m, v4_backend *be, const golden *g,
                       const int *prompt, int np, const int *gen, int ng)
{
    v4_error err = {0};
    v4_seq *s = v4_seq_create(&m->w, np + ng, &err);
    v4_ctx *c = v4_ctx_create(&m->w, be, 1, &err);
    float *logits = malloc(sizeof(float) * g->V);
    int tok = prompt[0], ok = 1;
    for (int p = 0; p < np + ng - 1 && ok; p++) {
        if (v4_step(c, &s, &tok, 1, logits, NULL, &err)) {
            CHECK(0, "greedy step %d: %s", p, err.msg);
            break;
        }
        if (p + 1 < np) {
            tok = prompt[p + 1];
            continue;
        }
        int i = p + 1 - np;
        tok = v4_argmax(logits, g->V);
        if (tok != gen[i] || cmp_f(logits, g->greedy_logits + (size_t)i * g->V, g->V, "greedy_logits", i)) {
            CHECK(0, "greedy token %d: got %d want %d", i, tok, gen[i]);
            ok = 0;
        }
    }
    CHECK(ok, "greedy generation reproduces %d tokens", ng);
    free(logits);
    v4_seq_free(s);
    v4_ctx_free(c);
}

int main(void)
{
    snprintf(g_dir, sizeof g_dir, "%s/golden/tiny", t_env("V4_TEST_DATA", "tests/data"));
    char path[4200];
    snprintf(path, sizeof path, "%s/model", g_dir);
    v4_model_files m;
    v4_error err = {0};
    if (v4_model_open(path, &m, &err)) {
        fprintf(stderr, "open %s: %s: %s\n", path, err.where, err.msg);
        return 1;
    }
    const v4_config *cfg = &m.cfg;
    /* v4_model_open prepares the R8 layout unless V4_NO_PREPARE is set (ctest runs
     * this test both ways: test_golden and test_golden_rowmajor) */
    const char *noprep = getenv("V4_NO_PREPARE");
    const int prepared = !(noprep && *noprep && strcmp(noprep, "0") != 0);
    const v4_layout want = prepared ? V4_LAYOUT_R8 : V4_LAYOUT_ROWMAJOR;
    CHECK(m.w.head.layout == want && m.w.hc_head_fn.layout == want && m.w.layers[0].wo_a.layout == want &&
          m.w.layers[0].gate.layout == want && m.w.layers[0].hc_attn_fn.layout == want,
          "EXACT-mode weights in the %s layout", prepared ? "R8" : "row-major");
    CHECK(m.w.layers[0].wq_a.layout == V4_LAYOUT_ROWMAJOR && m.w.embed.layout == V4_LAYOUT_ROWMAJOR,
          "QUANT weights and the embedding stay row-major");
    printf("EXACT-mode weights: %s\n", prepared ? "R8 (prepared at load)" : "row-major (V4_NO_PREPARE)");
    snprintf(path, sizeof path, "%s/tokens.json", g_dir);
    json_error_t jerr;
    json_t *tok = json_load_file(path, 0, &jerr);
    CHECK(tok != NULL, "tokens.json: %s", jerr.text);
    if (!tok)
        TEST_DONE();
    int P, np, ng;
    int *seq = json_ids(tok, "sequence", &P), *prompt = json_ids(tok, "prompt", &np);
    int *gen = json_ids(tok, "generated", &ng);

    golden g = {0};
    g.P = P; g.L = cfg->n_layers; g.K = cfg->n_act_experts; g.T = cfg->index_topk;
    g.V = cfg->vocab_size; g.D = cfg->dim; g.H = cfg->n_heads; g.HD = cfg->head_dim;
    g.HC = cfg->hc_mult; g.ID = cfg->index_head_dim; g.W = cfg->window;
    for (int l = 0; l < g.L; l++)
        if (cfg->compress_ratios[l] == 4)
            g.csa[g.C++] = l;
    size_t PV = (size_t)P * g.V;
    g.logits = load_bin("logits.bin", 4 * PV);
    g.argmax = load_bin("argmax.bin", 4 * (size_t)P);
    g.hidden = load_bin("hidden.bin", 4 * (size_t)P * g.D);
    g.route_ids = load_bin("route_ids.bin", 4 * (size_t)P * g.L * g.K);
    g.route_w = load_bin("route_weights.bin", 4 * (size_t)P * g.L * g.K);
    g.index_sel = load_bin("index_sel.bin", 4 * (size_t)P * g.C * g.T);
    g.index_count = load_bin("index_count.bin", 4 * (size_t)P * g.C);
    g.checksum = load_bin("trace_checksum.bin", 4 * (size_t)P * g.L * 2);
    g.greedy_logits = load_bin("greedy_logits.bin", 4 * (size_t)ng * g.V);
    snprintf(path, sizeof path, "%s/debug_positions.bin", g_dir);
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    g.Pd = (int)(ftell(f) / 4);
    fclose(f);
    g.dbg_pos = load_bin("debug_positions.bin", 4 * (size_t)g.Pd);
    g.dbg_streams = load_bin("debug_streams.bin", 4 * (size_t)g.Pd * g.L * 2 * g.HC * g.D);
    g.dbg_sub = load_bin("debug_sublayer_out.bin", 4 * (size_t)g.Pd * g.L * 2 * g.D);
    g.dbg_q = load_bin("debug_q.bin", 4 * (size_t)g.Pd * g.L * g.H * g.HD);
    g.dbg_kv = load_bin("debug_kv.bin", 4 * (size_t)g.Pd * g.L * g.HD);

    const char *isas[] = {"scalar", "avx2", "avx512", "avx512vnni"};
    for (int i = 0; i < 4; i++) {
        if (!v4_cpu_isa_supported(isas[i])) {
            printf("kernel path %s: SKIPPED (not supported by this CPU)\n", isas[i]);
            continue;
        }
        for (int threads = 1; threads <= 2; threads++) {
            v4_backend *be = v4_cpu_backend_create(threads, isas[i], &err);
            CHECK(be != NULL, "backend %s: %s", isas[i], err.msg);
            if (!be)
                continue;
            printf("kernel path %s, %d thread(s):\n", isas[i], threads);
            int before = t_failures;
            run_sequence(&m, be, &g, seq);
            run_greedy(&m, be, &g, prompt, np, gen, ng);
            printf("  %s\n", t_failures == before ? "bit-exact" : "FAILED");
            be->ops->destroy(be);
        }
    }
    json_decref(tok);
    free(seq); free(prompt); free(gen);
    free(g.logits); free(g.argmax); free(g.hidden); free(g.route_ids); free(g.route_w);
    free(g.index_sel); free(g.index_count); free(g.checksum); free(g.greedy_logits);
    free(g.dbg_pos); free(g.dbg_streams); free(g.dbg_sub); free(g.dbg_q); free(g.dbg_kv);
    v4_model_close(&m);
    TEST_DONE();
}
