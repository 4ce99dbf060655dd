/* test_cuda_tier.c - the GPU expert cache (kernels/cuda/gpu_experts.h) on the golden
 * tiny model with the CUDA backend: decoding with the routed experts served from
 * device slots gives the golden (CPU reference) logits bit for bit.
 *
 * Exits 77 (SKIPPED, saying why) when the build has no CUDA backend or the machine no
 * usable GPU; it never passes without running on a GPU.  Checks, each on a fresh CUDA
 * backend, 48 positions single and 3 sequences batched:
 *   - baseline (no cache): golden logits; the host-keyed weight bytes it uploads;
 *   - inner = the weights' own experts and inner = the host expert cache (safetensors
 *     source), each with the smallest budget (one batched step: 3*K slots, evictions
 *     every layer), a quarter of the experts, and all of them: golden logits, misses > 0
 *     (and hits when all fit), the pool within the budget, nothing pinned between
 *     steps, evictions > 0 / == 0 at the extremes, bytes uploaded consistent with the
 *     misses, and with all experts resident: the host-keyed copies are the baseline's
 *     minus exactly the routed experts (none went through them);
 *   - a budget below one step's experts: the step fails with V4_ERR_NOMEM naming
 *     V4_GPU_EXPERT_MEM, nothing stays pinned, and after raising the budget (detach +
 *     attach) decoding works;
 *   - the worker's wiring (v4_attach_gpu_experts) with V4_GPU_EXPERT_MEM=85%: budget =
 *     85% of the routed-expert bytes, golden logits;
 *   - misuse: attaching twice fails; a device matrix not from the cache gives NaN.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/expert_block.h"
#include "cache/expert_provider.h"
#include "cache/model_files.h"
#include "kernels/v4/model.h"
#include "testutil.h"
#include "worker/serve/task_run.h"
#include "worker/tools/cli_util.h"
#ifdef V4_HAVE_CUDA
#include "golden_data.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/gpu_experts.h"
#endif

#ifdef V4_HAVE_CUDA
#define P 48

static int32_t ids[P];
static float *ref;

static int run(const v4_model_files *m, v4_ctx *c, int batch, v4_error *err)
{
    return t_golden_run(m, c, batch, ids, ref, P, err);
}

static void run_both(const v4_model_files *m, v4_ctx *c, const char *what)
{
    v4_error err = {0};
    for (int batch = 0; batch < 2; batch++) {
        int bad = run(m, c, batch, &err);
        CHECK(bad == 0, "%s (%s): %d positions differ from the golden logits%s%s", what,
              batch ? "batched" : "single", bad, bad < 0 ? ": " : "", bad < 0 ? err.msg : "");
    }
}

static v4_backend *cuda(void)
{
    v4_error err = {0};
    v4_backend *be = v4_cuda_backend_create(0, &err);
    CHECK(be != NULL, "cuda backend: %s", err.msg);
    if (!be)
        exit(1);
    return be;
}

int main(void)
{
    char why[256] = "";
    if (v4_cuda_device_count(why, sizeof why) <= 0) {
        printf("SKIPPED: %s\n", why);
        return 77;
    }
    char model[4300];
    v4_model_files m;
    v4_error err = {0};
    int32_t *gids;
    if (t_golden_load(&m, P, &gids, &ref, model, sizeof model))
        return 1;
    memcpy(ids, gids, sizeof ids);
    free(gids);
    const v4_config *cfg = &m.cfg;
    const int L = cfg->n_layers, E = cfg->n_routed_experts, K = cfg->n_act_experts;
    const uint64_t xbytes = v4_gpu_expert_bytes(cfg), total = (uint64_t)L * E * xbytes;
    CHECK(xbytes == v4_expert_bytes(&m.w.layers[0].experts[0]), "expert bytes %llu vs the weights' %llu",
          (unsigned long long)xbytes, (unsigned long long)v4_expert_bytes(&m.w.layers[0].experts[0]));

    /* baseline: the hybrid backend alone */
    v4_backend *be = cuda();
    v4_ctx *c = v4_ctx_create(&m.w, be, 3, &err);
    run_both(&m, c, "no GPU expert cache");
    const size_t wb_base = v4_cuda_backend_weight_bytes(be);
    v4_ctx_free(c);
    be->ops->destroy(be);

    /* the slot size, from an attach with room for every expert */
    be = cuda();
    const v4_expert_provider *xp_gpu = NULL;
    CHECK(v4_gpu_experts_attach(be, &m.w, NULL, (size_t)1 << 40, V4_XPOL_NEXT, &xp_gpu, &err) == 0, "attach: %s", err.msg);
    v4_gpu_experts_stats st;
    CHECK(v4_gpu_experts_stats_get(be, &st) == 0 && st.slots == L * E && st.slot_bytes >= xbytes &&
              st.slot_bytes % 256 == 0, "one slot per expert (%d), slot %zu bytes", st.slots, st.slot_bytes);
    const size_t slot = st.slot_bytes;
    /* misuse: a second cache on the same backend */
    CHECK(v4_gpu_experts_attach(be, &m.w, NULL, (size_t)1 << 30, V4_XPOL_NEXT, &xp_gpu, &err) == -1 &&
              strstr(err.msg, "already"), "second attach refused: %s", err.msg);
    /* a device matrix that is not in the cache: NaN, not a crash */
    {
        v4_mat W = m.w.layers[0].experts[0].w1;
        W.layout = (v4_layout)(V4_LAYOUT_ROWMAJOR | V4_MAT_CUDA);
        float x[256] = {0}, y[128];
        for (int i = 0; i < 256 && i < cfg->dim; i++)
            x[i] = 0.5f;
        if (W.cols <= 256 && W.rows <= 128) {
            v4_linear(be, &W, V4_LIN_QUANT, 1, x, W.cols, y, W.rows);
            CHECK(isnan(y[0]) && isnan(y[W.rows - 1]), "foreign device matrix -> NaN (%g)", y[0]);
        }
    }
    v4_gpu_experts_detach(be);
    CHECK(v4_gpu_experts_stats_get(be, &st) == -1, "no cache after detach");
    {
        v4_runner_cache_figs f;
        CHECK(v4_gpu_cache_figs_get(be, &f) == -1 && f.hits == 0, "no GPU metrics figures without a cache");
    }
    be->ops->destroy(be);

    v4_xblock_layout lo;
    v4_xblock_layout_of(cfg, &lo);
    const size_t budgets[3] = {(size_t)3 * K * slot, (size_t)L * E * slot / 4 + slot / 2, (size_t)L * E * slot};
    for (int inner = 0; inner < 2; inner++)
        for (int bi = 0; bi < 3; bi++) {
            char what[160];
            snprintf(what, sizeof what, "experts from %s, GPU budget %zu bytes (%zu slots)",
                     inner ? "the host cache" : "the weights", budgets[bi], budgets[bi] / slot);
            v4_xprov *hx = NULL;
            if (inner) {
                v4_xprov_opts o = {model, NULL, (size_t)L * E * lo.bytes / 2, "lru", 2, 0};
                hx = v4_xprov_open(cfg, m.ck, &o, &err);
                CHECK(hx != NULL, "host cache: %s", err.msg);
                if (!hx)
                    continue;
            }
            be = cuda();
            c = v4_ctx_create(&m.w, be, 3, &err);
            const v4_expert_provider *p = NULL;
            if (v4_gpu_experts_attach(be, &m.w, hx ? v4_xprov_provider(hx) : NULL, budgets[bi], V4_XPOL_NEXT, &p, &err)) {
                CHECK(0, "%s: attach: %s", what, err.msg);
            } else {
                v4_ctx_set_expert_provider(c, p);
                run_both(&m, c, what);
                v4_gpu_experts_stats_get(be, &st);
                CHECK(st.misses > 0 && (bi < 2 || st.hits > 0), "%s: hits %llu misses %llu", what,
                      (unsigned long long)st.hits, (unsigned long long)st.misses);
                CHECK(st.pool_bytes <= budgets[bi] && st.pool_bytes == (size_t)st.slots * slot &&
                          st.budget_bytes == budgets[bi],
                      "%s: pool %zu bytes within the budget", what, st.pool_bytes);
                CHECK(st.bytes_uploaded >= st.misses * xbytes && st.bytes_uploaded <= st.misses * slot,
                      "%s: %llu bytes uploaded for %llu misses", what, (unsigned long long)st.bytes_uploaded,
                      (unsigned long long)st.misses);
                CHECK(st.high_water_pinned <= st.slots && st.pinned == 0 && st.failed_acquires == 0,
                      "%s: at most %d of %d slots pinned, %d after the runs", what, st.high_water_pinned, st.slots,
                      st.pinned);
                {   /* what /metrics shows as tier="gpu" (worker/serve/engine.c) */
                    v4_runner_cache_figs f;
                    CHECK(v4_gpu_cache_figs_get(be, &f) == 0 && f.hits == st.hits && f.misses == st.misses &&
                              f.bytes_read == st.bytes_uploaded && f.budget_bytes == st.pool_bytes,
                          "%s: metrics figures = the cache's counters", what);
                }
                if (bi == 0)
                    CHECK(st.evictions > 0, "%s: the smallest budget evicts", what);
                if (bi == 2) {
                    CHECK(st.evictions == 0 && st.misses == (uint64_t)st.resident, "%s: no eviction (%llu)", what,
                          (unsigned long long)st.evictions);
                    const size_t wb = v4_cuda_backend_weight_bytes(be);
                    CHECK(wb_base - wb == st.misses * xbytes,
                          "%s: host-keyed copies %zu = baseline %zu - %llu routed experts x %llu bytes", what, wb,
                          wb_base, (unsigned long long)st.misses, (unsigned long long)xbytes);
                }
                CHECK(v4_cuda_backend_status(be, &err) == 0, "%s: CUDA failure: %s", what, err.msg);
                printf("%s: %llu hits, %llu misses, %llu evictions, %.1f MiB uploaded\n", what,
                       (unsigned long long)st.hits, (unsigned long long)st.misses,
                       (unsigned long long)st.evictions, st.bytes_uploaded / 1048576.0);
            }
            v4_ctx_free(c);
            be->ops->destroy(be);
            v4_xprov_close(hx);
        }

    /* a budget below one step's experts: a clear failure, nothing left pinned */
    be = cuda();
    c = v4_ctx_create(&m.w, be, 3, &err);
    const v4_expert_provider *p = NULL;
    CHECK(v4_gpu_experts_attach(be, &m.w, NULL, (size_t)(K - 1) * slot, V4_XPOL_LRU, &p, &err) == 0, "attach small: %s", err.msg);
    if (p) {
        v4_ctx_set_expert_provider(c, p);
        v4_seq *s = v4_seq_create(&m.w, P, &err);
        float *lg = malloc(sizeof(float) * (size_t)cfg->vocab_size);
        err = (v4_error){0};
        CHECK(v4_step(c, &s, &ids[0], 1, lg, NULL, &err) == -1, "a step with %d slots for %d experts fails", K - 1,
              K);
        CHECK(err.code == V4_ERR_NOMEM && strstr(err.msg, "V4_GPU_EXPERT_MEM"), "error: %s", err.msg);
        v4_gpu_experts_stats_get(be, &st);
        CHECK(st.failed_acquires == 1 && st.pinned == 0 && st.pool_bytes <= (size_t)(K - 1) * slot,
              "failed %llu, pinned %d, pool %zu", (unsigned long long)st.failed_acquires, st.pinned, st.pool_bytes);
        v4_ctx_set_expert_provider(c, NULL);
        v4_gpu_experts_detach(be);
        p = NULL;
        CHECK(v4_gpu_experts_attach(be, &m.w, NULL, (size_t)3 * K * slot, V4_XPOL_SLRU, &p, &err) == 0, "re-attach: %s", err.msg);
        v4_ctx_set_expert_provider(c, p);
        run_both(&m, c, "after raising the budget");
        v4_seq_free(s);
        free(lg);
    }
    v4_ctx_free(c);
    be->ops->destroy(be);

    /* the worker's wiring: V4_GPU_EXPERT_MEM=85% over the mapped checkpoint */
    setenv("V4_GPU_EXPERT_MEM", "85%", 1);
    be = cuda();
    c = v4_ctx_create(&m.w, be, 3, &err);
    CHECK(v4_attach_gpu_experts(be, &m, c, NULL, NULL, &err) == 0, "v4_attach_gpu_experts: %s", err.msg);
    CHECK(v4_gpu_experts_stats_get(be, &st) == 0 && st.budget_bytes == (size_t)((double)total * 85 / 100.0) &&
              st.slots == (int)(st.budget_bytes / slot),
          "85%%: budget %zu of %llu, %d slots", st.budget_bytes, (unsigned long long)total, st.slots);
    run_both(&m, c, "V4_GPU_EXPERT_MEM=85%");
    v4_ctx_free(c);
    be->ops->destroy(be);
    setenv("V4_GPU_EXPERT_MEM", "12Q", 1);
    be = cuda();
    c = v4_ctx_create(&m.w, be, 1, &err);
    CHECK(v4_attach_gpu_experts(be, &m, c, NULL, NULL, &err) == -1 && err.code == V4_ERR_CONFIG &&
              strstr(err.msg, "12Q"), "bad V4_GPU_EXPERT_MEM refused: %s", err.msg);
    v4_ctx_free(c);
    be->ops->destroy(be);
    unsetenv("V4_GPU_EXPERT_MEM");

    free(ref);
    v4_model_close(&m);
    TEST_DONE();
}
#else
int main(void)
{
    (void)t_failures;
    (void)t_checks;
    printf("SKIPPED: built without the CUDA backend (V4_CUDA=OFF or no nvcc)\n");
    return 77;
}
#endif
