/* test_step_rows.c - the rows-per-step policy (worker/serve/step_rows.h) on a synthetic tiny
 * model (made by `v4fleet mkmodel`) with real host expert caches: the CPU backend with
 * resident experts gets want_rows; with a cache of S slots (fewer than a layer's E
 * experts) and n_act experts per token it gets min(want, max(floor, S / n_act)), with
 * S >= E want; any other backend gets floor_rows, unless the context's step
 * implementation takes several rows per sequence (then the same cache limit). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/expert_provider.h"
#include "cache/model_files.h"
#include "kernels/cpu/cpu_backend.h"
#include "testutil.h"
#include "worker/serve/generate.h"
#include "worker/serve/step_rows.h"

static int no_step(void *ud, const v4_seq_view *seqs, const int32_t *tokens, int n, float *logits, const int *want,
                   v4_trace *const *traces, v4_step_fault *fault, v4_error *err)
{
    (void)ud; (void)seqs; (void)tokens; (void)n; (void)logits; (void)want; (void)traces; (void)fault;
    return v4_err_set(err, V4_ERR_INVALID, "no_step", "not stepped here");
}

int main(void)
{
    char dir[4200];
    if (t_mkmodel_tiny("step_rows_model", 5, dir, sizeof dir))
        return 1;
    v4_model_files m;
    v4_error err = {0};
    if (v4_model_open(dir, &m, &err)) {
        fprintf(stderr, "%s: %s\n", err.where, err.msg);
        return 1;
    }
    const v4_config *cfg = &m.cfg;
    const int K = cfg->n_act_experts;
    CHECK(K == 4, "the tiny preset routes each token to 4 experts (got %d)", K);
    CHECK(cfg->n_routed_experts == 16, "the tiny preset has 16 routed experts per layer (got %d)",
          cfg->n_routed_experts);
    v4_backend *cpu = v4_cpu_backend_create(1, "auto", &err);
    CHECK(cpu != NULL, "cpu backend: %s", err.msg);
    if (!cpu)
        TEST_DONE();

    /* resident experts on the CPU: what the caller wants, never below the floor */
    CHECK(v4_fit_step_rows(NULL, cpu, NULL, cfg, V4_GEN_CHUNK, 1) == V4_GEN_CHUNK, "cpu, resident: want");
    CHECK(v4_fit_step_rows(NULL, cpu, NULL, cfg, 8 + V4_GEN_CHUNK - 1, 8) == 8 + V4_GEN_CHUNK - 1, "cpu, batch 8: want");
    CHECK(v4_fit_step_rows(NULL, cpu, NULL, cfg, 1, 1) == 1, "want 1: 1");
    CHECK(v4_fit_step_rows(NULL, cpu, NULL, cfg, 2, 5) == 5, "floor above want: floor");
    CHECK(v4_fit_step_rows(NULL, cpu, NULL, cfg, 16, 0) == 16, "floor 0 taken as 1");

    /* any other backend: the floor (one row per sequence) */
    const v4_backend_ops other_ops = {.name = "cuda"};
    const v4_backend other = {&other_ops, NULL};
    CHECK(v4_fit_step_rows(NULL, &other, NULL, cfg, V4_GEN_CHUNK, 1) == 1, "cuda: 1 row");
    CHECK(v4_fit_step_rows(NULL, &other, NULL, cfg, 4 + V4_GEN_CHUNK - 1, 4) == 4, "cuda, batch 4: 4 rows");
    /* the prefill chunk: asked for within 1..V4_GEN_CHUNK_MAX; by default 64 on the CPU,
     * V4_DEVICE_CHUNK on a device, whose step takes at most V4_DEVICE_STEP_ROWS rows in all */
    CHECK(v4_prefill_chunk(cpu, 0, 1) == V4_CPU_CHUNK && v4_prefill_chunk(cpu, 0, 8) == V4_CPU_CHUNK &&
              V4_CPU_CHUNK == 64,
          "cpu default chunk %d", v4_prefill_chunk(cpu, 0, 1));
    CHECK(v4_prefill_chunk(cpu, 40, 8) == 40 && v4_prefill_chunk(cpu, 1, 1) == 1 &&
              v4_prefill_chunk(cpu, 100000, 1) == V4_GEN_CHUNK_MAX, "cpu asked: 40, 1, capped");
    CHECK(v4_prefill_chunk(&other, 0, 1) == V4_DEVICE_CHUNK && V4_DEVICE_CHUNK == 256, "device default chunk %d",
          v4_prefill_chunk(&other, 0, 1));
    CHECK(v4_prefill_chunk(&other, 0, 8) == V4_DEVICE_STEP_ROWS - 7 && v4_prefill_chunk(&other, 1000, 4) == 253 &&
              v4_prefill_chunk(&other, 32, 4) == 32 && v4_prefill_chunk(&other, 0, 300) == 1,
          "device: the chunk leaves the other sequences' rows (%d, %d)", v4_prefill_chunk(&other, 0, 8),
          v4_prefill_chunk(&other, 1000, 4));

    /* ... unless the context's step implementation takes prefill chunks (the resident
     * CUDA step with every expert resident): then want, within the context's rows */
    const int R = 4 + V4_GEN_CHUNK - 1;
    v4_ctx *ctx = v4_ctx_create(&m.w, cpu, R, &err);
    CHECK(ctx != NULL, "context of %d rows: %s", R, err.msg);
    if (ctx) {
        v4_step_impl one = {.step = no_step, .rows_per_seq = 1}, chunks = {.step = no_step, .rows_per_seq = R};
        v4_ctx_set_step_impl(ctx, &one);
        CHECK(v4_fit_step_rows(ctx, &other, NULL, cfg, R, 4) == 4, "cuda, one row per sequence: the floor");
        v4_ctx_set_step_impl(ctx, &chunks);
        CHECK(v4_fit_step_rows(ctx, &other, NULL, cfg, R, 4) == R, "cuda, chunks: want (%d rows)", R);
        CHECK(v4_fit_step_rows(ctx, &other, NULL, cfg, 2 * R, 4) == R, "cuda, chunks: at most the context's rows");
        CHECK(v4_fit_step_rows(ctx, &other, NULL, cfg, 3, 4) == 4, "cuda, chunks: never below the floor");
        v4_ctx_free(ctx);
    }

    /* paged experts: slots / n_act, between floor and want, when the slots hold fewer
     * than one layer's experts (E = 16 here), else want.  The slot size comes from a
     * first cache; the others get budgets of exactly S slots. */
    v4_xprov_opts xo = {dir, NULL, 64u << 20, "lru", 1, 0};
    v4_xprov *xp = v4_xprov_open(cfg, m.ck, &xo, &err);
    CHECK(xp != NULL, "open a 64 MiB cache: %s", err.msg);
    size_t slot_bytes = 0;
    if (xp) {
        v4_xcache_stats st;
        v4_xprov_stats(xp, &st);
        slot_bytes = st.slot_bytes;
        CHECK(st.slots == cfg->n_layers * cfg->n_routed_experts, "64 MiB: one slot per expert (%d slots)",
              st.slots);
        CHECK(v4_fit_step_rows(NULL, cpu, xp, cfg, V4_GEN_CHUNK, 1) == V4_GEN_CHUNK, "a large cache: want");
        CHECK(v4_fit_step_rows(NULL, cpu, xp, cfg, 8 + V4_GEN_CHUNK - 1, 8) == 8 + V4_GEN_CHUNK - 1,
              "a large cache, batch 8: a layer's experts fit, so want (%d rows)", 8 + V4_GEN_CHUNK - 1);
        CHECK(v4_fit_step_rows(NULL, &other, xp, cfg, V4_GEN_CHUNK, 1) == 1, "a large cache on cuda: floor");
        v4_xprov_close(xp);
    }
    static const struct { int slots, want, floor, expect; } cases[] = {
        {8, V4_GEN_CHUNK, 1, 2},        /* 8 / 4 */
        {11, V4_GEN_CHUNK, 1, 2},       /* rounds down */
        {15, V4_GEN_CHUNK, 1, 3},
        {16, V4_GEN_CHUNK, 1, V4_GEN_CHUNK},   /* a whole layer's experts: any rows fit */
        {63, V4_GEN_CHUNK, 1, V4_GEN_CHUNK},
        {64, 12, 1, 12},                /* never above want */
        {8, 8 + V4_GEN_CHUNK - 1, 8, 8},    /* never below the floor (a batch of 8) */
        {15, 8 + V4_GEN_CHUNK - 1, 2, 3},
        {8, 1, 1, 1},
    };
    for (size_t i = 0; slot_bytes && i < sizeof cases / sizeof cases[0]; i++) {
        xo.budget_bytes = slot_bytes * (size_t)cases[i].slots;
        if (!(xp = v4_xprov_open(cfg, m.ck, &xo, &err))) {
            CHECK(0, "open a cache of %d slots: %s", cases[i].slots, err.msg);
            continue;
        }
        v4_xcache_stats st;
        v4_xprov_stats(xp, &st);
        CHECK(st.slots == cases[i].slots, "budget of %d slots: %d", cases[i].slots, st.slots);
        const int got = v4_fit_step_rows(NULL, cpu, xp, cfg, cases[i].want, cases[i].floor);
        CHECK(got == cases[i].expect, "%d slots, want %d, floor %d: %d rows (expected %d)", cases[i].slots,
              cases[i].want, cases[i].floor, got, cases[i].expect);
        CHECK(v4_fit_step_rows(NULL, &other, xp, cfg, cases[i].want, cases[i].floor) == cases[i].floor,
              "%d slots on cuda: the floor", cases[i].slots);
        /* a device step that takes chunks, its misses fetched through this cache: the
         * same limit (within the context's rows) */
        v4_ctx *cx = v4_ctx_create(&m.w, cpu, 64, &err);
        if (cx) {
            v4_step_impl chunks = {.step = no_step, .rows_per_seq = 64};
            v4_ctx_set_step_impl(cx, &chunks);
            const int dev = v4_fit_step_rows(cx, &other, xp, cfg, cases[i].want, cases[i].floor);
            CHECK(dev == cases[i].expect, "%d slots on a chunk-taking device step: %d rows (expected %d)",
                  cases[i].slots, dev, cases[i].expect);
            v4_ctx_free(cx);
        } else {
            CHECK(0, "context of 64 rows: %s", err.msg);
        }
        v4_xprov_close(xp);
    }
    cpu->ops->destroy(cpu);
    v4_model_close(&m);
    TEST_DONE();
}
