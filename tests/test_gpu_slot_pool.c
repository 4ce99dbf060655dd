/* test_gpu_slot_pool.c - the GPU expert cache's bookkeeping (kernels/cuda/slot_pool.h),
 * on the CPU (no CUDA needed): slot count from the budget (never above it), hits and
 * misses, LRU eviction order, pinned slots never evicted, the all-or-nothing failure
 * when everything is pinned (pool unchanged, precise message), forgotten slots, the
 * counters, a randomized run against a reference model of an LRU cache, and the
 * V4_GPU_EXPERT_MEM syntax.  Also the CPU side of device matrices (backend.h
 * V4_MAT_CUDA): the CPU backend answers one with NaN outputs without reading it, and
 * the routed-expert byte count behind a percentage budget (gpu_experts.h) matches the
 * weights' on the golden tiny model. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "golden_data.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/gpu_experts.h"
#include "kernels/cuda/slot_pool.h"
#include "testutil.h"

static int acq(v4_slot_pool *p, int layer, const int *ids, int n, int *slot, unsigned char *load)
{
    v4_error err = {0};
    int rc = v4_slot_pool_acquire(p, layer, ids, n, slot, load, &err);
    CHECK(rc == 0, "acquire layer %d (%d ids): %s", layer, n, err.msg);
    return rc;
}

static void test_basic(void)
{
    v4_error err = {0};
    /* 4 layers x 8 experts, 1000-byte slots, a 3500-byte budget: 3 slots */
    v4_slot_pool *p = v4_slot_pool_create(4, 8, 1000, 3500, &err);
    CHECK(p != NULL, "create: %s", err.msg);
    if (!p)
        return;
    v4_slot_pool_stats st;
    v4_slot_pool_stats_get(p, &st);
    CHECK(st.slots == 3 && st.pool_bytes == 3000 && st.pool_bytes <= st.budget_bytes, "3 slots, %zu bytes",
          st.pool_bytes);
    int slot[8];
    unsigned char load[8];
    const int a[2] = {1, 5};
    acq(p, 0, a, 2, slot, load);
    CHECK(load[0] == 1 && load[1] == 1 && slot[0] != slot[1], "two misses in distinct slots");
    CHECK(v4_slot_pool_pins(p, slot[0]) == 1 && v4_slot_pool_pins(p, slot[1]) == 1, "pinned");
    v4_slot_pool_release(p, 0, a, 2);
    CHECK(v4_slot_pool_pins(p, slot[0]) == 0, "unpinned after release");
    acq(p, 0, a, 2, slot, load);
    CHECK(load[0] == 0 && load[1] == 0, "hits the second time");
    v4_slot_pool_release(p, 0, a, 2);
    /* the same expert id in another layer is another expert */
    const int b[1] = {1};
    acq(p, 1, b, 1, slot, load);
    CHECK(load[0] == 1, "layer 1 expert 1 is a miss");
    v4_slot_pool_release(p, 1, b, 1);
    v4_slot_pool_stats_get(p, &st);
    CHECK(st.hits == 2 && st.misses == 3 && st.evictions == 0 && st.resident == 3 && st.pinned == 0,
          "hits %llu misses %llu evictions %llu resident %d pinned %d", (unsigned long long)st.hits,
          (unsigned long long)st.misses, (unsigned long long)st.evictions, st.resident, st.pinned);

    /* LRU order now (least recent first): (0,1), (0,5), (1,1).  Touch (0,1): order
     * (0,5), (1,1), (0,1).  A new expert evicts (0,5), the next (1,1). */
    const int one[1] = {1};
    acq(p, 0, one, 1, slot, load);
    v4_slot_pool_release(p, 0, one, 1);
    const int s05 = v4_slot_pool_lookup(p, 0, 5), s11 = v4_slot_pool_lookup(p, 1, 1);
    const int c[1] = {7};
    acq(p, 2, c, 1, slot, load);
    CHECK(load[0] == 1 && slot[0] == s05, "LRU victim is (0,5): got slot %d, (0,5) was %d", slot[0], s05);
    CHECK(v4_slot_pool_lookup(p, 0, 5) == -1 && v4_slot_pool_lookup(p, 0, 1) >= 0, "(0,5) evicted, (0,1) kept");
    /* (2,7) stays pinned: the next miss must take (1,1), never (2,7) */
    const int d[1] = {3};
    acq(p, 3, d, 1, slot, load);
    CHECK(slot[0] == s11 && v4_slot_pool_lookup(p, 1, 1) == -1, "second victim is (1,1)");
    const int e[1] = {4};
    acq(p, 3, e, 1, slot, load);   /* takes (0,1), the last unpinned */
    CHECK(v4_slot_pool_lookup(p, 0, 1) == -1 && v4_slot_pool_lookup(p, 2, 7) >= 0, "pinned (2,7) not evicted");

    /* everything pinned: the next miss fails, precisely, and changes nothing */
    v4_slot_pool_stats before, after;
    v4_slot_pool_stats_get(p, &before);
    CHECK(before.pinned == 3, "3 pinned (%d)", before.pinned);
    const int f[2] = {0, 7};        /* (2,7) is a hit, (2,0) a miss with no slot left */
    err = (v4_error){0};
    CHECK(v4_slot_pool_acquire(p, 2, f, 2, slot, load, &err) == -1, "acquire with all slots pinned fails");
    CHECK(err.code == V4_ERR_NOMEM && strstr(err.msg, "layer 2") && strstr(err.msg, "V4_GPU_EXPERT_MEM") &&
              strstr(err.msg, "3500"), "message: %s", err.msg);
    v4_slot_pool_stats_get(p, &after);
    CHECK(after.pinned == 3 && after.hits == before.hits && after.misses == before.misses &&
              after.failed_acquires == before.failed_acquires + 1 &&
              v4_slot_pool_pins(p, v4_slot_pool_lookup(p, 2, 7)) == 1,
          "a refused acquire changes nothing (pinned %d, (2,7) pins %d)", after.pinned,
          v4_slot_pool_pins(p, v4_slot_pool_lookup(p, 2, 7)));
    /* out-of-range ids */
    const int bad[1] = {8};
    CHECK(v4_slot_pool_acquire(p, 0, bad, 1, slot, load, &err) == -1 && err.code == V4_ERR_RANGE, "expert 8: %s",
          err.msg);
    CHECK(v4_slot_pool_acquire(p, 4, one, 1, slot, load, &err) == -1 && err.code == V4_ERR_RANGE, "layer 4: %s",
          err.msg);

    /* forget: a failed upload frees the slot at release; a re-acquire is a miss */
    const int g[1] = {4};
    const int s34 = v4_slot_pool_lookup(p, 3, 4);
    v4_slot_pool_forget(p, s34);
    v4_slot_pool_release(p, 3, g, 1);
    CHECK(v4_slot_pool_lookup(p, 3, 4) == -1, "forgotten slot unmapped at release");
    acq(p, 3, g, 1, slot, load);
    CHECK(load[0] == 1, "forgotten expert is a miss");
    /* forgotten while another user still holds it pinned: the other acquire reloads */
    const int s = slot[0];
    v4_slot_pool_forget(p, s);
    acq(p, 3, g, 1, slot, load);
    CHECK(slot[0] == s && load[0] == 1 && v4_slot_pool_pins(p, s) == 2, "pinned twice, must reload");
    v4_slot_pool_release(p, 3, g, 1);
    v4_slot_pool_release(p, 3, g, 1);
    CHECK(v4_slot_pool_lookup(p, 3, 4) == s && v4_slot_pool_pins(p, s) == 0, "reloaded slot stays resident");

    v4_slot_pool_add_uploaded(p, 123);
    v4_slot_pool_add_uploaded(p, 1000);
    v4_slot_pool_stats_get(p, &st);
    CHECK(st.bytes_uploaded == 1123, "bytes uploaded %llu", (unsigned long long)st.bytes_uploaded);
    CHECK(st.high_water_pinned == 3, "high water %d", st.high_water_pinned);
    v4_slot_pool_free(p);

    /* budgets: below one slot fails; more than all experts is capped at one slot each */
    CHECK(v4_slot_pool_create(4, 8, 1000, 999, &err) == NULL && err.code == V4_ERR_INVALID &&
              strstr(err.msg, "999"), "budget below one slot: %s", err.msg);
    p = v4_slot_pool_create(2, 2, 1000, 1 << 20, &err);
    CHECK(p && v4_slot_pool_slots(p) == 4, "capped at 4 slots");
    v4_slot_pool_free(p);
}

/* Random steps (layer by layer, n distinct experts each) against a reference LRU
 * model: same hit/miss decisions, same victims, pool never over budget, pinned never
 * evicted, counters consistent. */
static void test_random(void)
{
    enum { L = 5, E = 12, SLOTS = 9, STEPS = 3000 };
    v4_error err = {0};
    v4_slot_pool *p = v4_slot_pool_create(L, E, 4096, SLOTS * 4096 + 4095, &err);
    CHECK(p && v4_slot_pool_slots(p) == SLOTS, "create: %s", err.msg);
    if (!p)
        return;
    int ref_key[SLOTS], ref_age[SLOTS];     /* reference: key per slot (-1), last-use time */
    for (int i = 0; i < SLOTS; i++)
        ref_key[i] = -1, ref_age[i] = 0;
    uint64_t rnd = 12345, hits = 0, misses = 0;
    int now = 1, mismatches = 0;
    for (int step = 0; step < STEPS; step++) {
        const int layer = (int)(rnd % L);
        rnd = rnd * 6364136223846793005ull + 1442695040888963407ull;
        int n = 1 + (int)((rnd >> 33) % 6), ids[6], slot[6];
        unsigned char load[6], used[E] = {0};
        for (int i = 0; i < n;) {
            rnd = rnd * 6364136223846793005ull + 1442695040888963407ull;
            int id = (int)((rnd >> 35) % E);
            if (!used[id]) {
                used[id] = 1;
                ids[i++] = id;
            }
        }
        /* pin an extra expert of another layer for this step sometimes (a concurrent user) */
        int extra = -1, eslot = -1;
        unsigned char eload = 0;
        if (step % 7 == 0) {
            extra = (layer + 1) % L;
            int eid = 0;
            if (acq(p, extra, &eid, 1, &eslot, &eload))
                break;
            /* mirror it in the reference */
            int k = -1;
            for (int i = 0; i < SLOTS; i++)
                if (ref_key[i] == extra * E)
                    k = i;
            if (k < 0) {
                CHECK(eload == 1, "extra is a miss");
                misses++;
                ref_key[eslot] = extra * E;
            } else {
                CHECK(eload == 0 && k == eslot, "extra is a hit in slot %d (got %d)", k, eslot);
                hits++;
            }
            ref_age[eslot] = 1 << 30;       /* pinned: never a victim */
        }
        if (acq(p, layer, ids, n, slot, load))
            break;
        /* reference: hits first, then misses take empty slots (lowest free index is not
         * guaranteed, so follow the pool's choice for empties) or the oldest unpinned */
        int pinned_now[SLOTS] = {0};
        if (eslot >= 0)
            pinned_now[eslot] = 1;
        for (int i = 0; i < n; i++)
            for (int k = 0; k < SLOTS; k++)
                if (ref_key[k] == layer * E + ids[i]) {
                    pinned_now[k] = 1;
                    if (load[i] || slot[i] != k)
                        mismatches++;
                    hits++;
                }
        for (int i = 0; i < n; i++) {
            if (!load[i])
                continue;
            misses++;
            int found = 0;
            for (int k = 0; k < SLOTS; k++)
                found |= ref_key[k] == layer * E + ids[i];
            if (found) {
                mismatches++;
                continue;
            }
            int empty = -1, oldest = -1;
            for (int k = 0; k < SLOTS; k++) {
                if (ref_key[k] < 0 && empty < 0)
                    empty = k;
                if (ref_key[k] >= 0 && !pinned_now[k] && (oldest < 0 || ref_age[k] < ref_age[oldest]))
                    oldest = k;
            }
            if (empty >= 0) {
                if (ref_key[slot[i]] >= 0)
                    mismatches++;           /* evicted while an empty slot existed */
            } else if (slot[i] != oldest) {
                mismatches++;
            }
            ref_key[slot[i]] = layer * E + ids[i];
            pinned_now[slot[i]] = 1;
        }
        for (int i = 0; i < n; i++)
            CHECK(v4_slot_pool_pins(p, slot[i]) >= 1, "acquired slot %d pinned", slot[i]);
        v4_slot_pool_release(p, layer, ids, n);
        for (int i = 0; i < n; i++)
            ref_age[slot[i]] = now++;
        if (eslot >= 0) {
            int eid = 0;
            v4_slot_pool_release(p, extra, &eid, 1);
            ref_age[eslot] = now++;
        }
        v4_slot_pool_stats st;
        v4_slot_pool_stats_get(p, &st);
        if (st.pool_bytes > st.budget_bytes || st.pinned != 0)
            mismatches++;
    }
    CHECK(mismatches == 0, "%d decisions differ from the reference LRU", mismatches);
    v4_slot_pool_stats st;
    v4_slot_pool_stats_get(p, &st);
    CHECK(st.hits == hits && st.misses == misses, "counters: hits %llu/%llu misses %llu/%llu",
          (unsigned long long)st.hits, (unsigned long long)hits, (unsigned long long)st.misses,
          (unsigned long long)misses);
    CHECK(st.misses == st.evictions + (uint64_t)st.resident, "misses = evictions + resident (%llu, %llu, %d)",
          (unsigned long long)st.misses, (unsigned long long)st.evictions, st.resident);
    CHECK(st.high_water_pinned <= SLOTS && st.high_water_pinned >= 6, "high water pinned %d",
          st.high_water_pinned);
    printf("random: %llu hits, %llu misses, %llu evictions over %d steps\n", (unsigned long long)st.hits,
           (unsigned long long)st.misses, (unsigned long long)st.evictions, STEPS);
    v4_slot_pool_free(p);
}

static void test_parse(void)
{
    v4_error err = {0};
    size_t b = 0;
    const uint64_t total = 1000000;
    CHECK(v4_slot_pool_budget_parse("12G", total, NULL, &b, &err) == 0 && b == 12ull << 30, "12G -> %zu", b);
    CHECK(v4_slot_pool_budget_parse("512M", total, NULL, &b, &err) == 0 && b == 512ull << 20, "512M -> %zu", b);
    CHECK(v4_slot_pool_budget_parse("1.5g", total, NULL, &b, &err) == 0 && b == 3ull << 29, "1.5g -> %zu", b);
    CHECK(v4_slot_pool_budget_parse("64KB", total, NULL, &b, &err) == 0 && b == 65536, "64KB -> %zu", b);
    CHECK(v4_slot_pool_budget_parse("4096", total, NULL, &b, &err) == 0 && b == 4096, "4096 -> %zu", b);
    CHECK(v4_slot_pool_budget_parse("85%", total, NULL, &b, &err) == 0 && b == 850000, "85%% -> %zu", b);
    CHECK(v4_slot_pool_budget_parse("100%", total, NULL, &b, &err) == 0 && b == total, "100%% -> %zu", b);
    CHECK(v4_slot_pool_budget_parse("12.5%", 1000, NULL, &b, &err) == 0 && b == 125, "12.5%% -> %zu", b);
    const char *bad[] = {"", "abc", "12X", "-1G", "0", "0%", "101%", "85%%", "%", "5 G", "nan", "1e30"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err = (v4_error){0};
        CHECK(v4_slot_pool_budget_parse(bad[i], total, "V4_GPU_EXPERT_MEM", &b, &err) == -1 &&
                  err.code == V4_ERR_CONFIG && !strcmp(err.where, "V4_GPU_EXPERT_MEM") && strchr(err.msg, '\''),
              "'%s' refused with a message naming it: %s", bad[i], err.msg);
    }
}

static void test_device_matrix_on_cpu(void)
{
    v4_model_files m;
    int32_t *ids;
    float *logits;
    if (t_golden_load(&m, 1, &ids, &logits, NULL, 0)) {
        CHECK(0, "golden model");
        return;
    }
    const v4_expert_w *ex = &m.w.layers[0].experts[0];
    CHECK(v4_gpu_expert_bytes(&m.cfg) == v4_expert_bytes(ex), "expert bytes %llu vs %llu",
          (unsigned long long)v4_gpu_expert_bytes(&m.cfg), (unsigned long long)v4_expert_bytes(ex));
    v4_error err = {0};
    const char *isas[] = {"scalar", "auto"};
    for (int k = 0; k < 2; k++) {
        v4_backend *be = v4_cpu_backend_create(2, isas[k], &err);
        CHECK(be != NULL, "cpu backend: %s", err.msg);
        if (!be)
            continue;
        const int rows = ex->w1.rows, cols = ex->w1.cols;
        float *x = calloc((size_t)2 * cols, sizeof(float)), *y = malloc(sizeof(float) * 2 * (size_t)rows);
        for (int i = 0; i < 2 * cols; i++)
            x[i] = (float)(i % 7) - 3.0f;
        v4_mat W = ex->w1;
        v4_linear(be, &W, V4_LIN_QUANT, 2, x, cols, y, rows);
        int finite = 0;
        for (int i = 0; i < 2 * rows; i++)
            finite += !isnan(y[i]);
        CHECK(finite == 2 * rows, "host matrix: finite outputs (%d of %d)", finite, 2 * rows);
        /* the same matrix flagged as device memory: never read, all NaN */
        W.layout = (v4_layout)(V4_LAYOUT_ROWMAJOR | V4_MAT_CUDA);
        W.w = (const void *)(uintptr_t)0x10;      /* would fault if dereferenced */
        W.scale = (const uint8_t *)(uintptr_t)0x20;
        CHECK(v4_mat_is_device(&W) && v4_mat_layout(&W) == V4_LAYOUT_ROWMAJOR, "flag helpers");
        v4_linear(be, &W, V4_LIN_QUANT, 2, x, cols, y, rows);
        int nans = 0;
        for (int i = 0; i < 2 * rows; i++)
            nans += isnan(y[i]);
        CHECK(nans == 2 * rows, "%s: device matrix -> NaN (%d of %d)", isas[k], nans, 2 * rows);
        W.layout = (v4_layout)(V4_LAYOUT_R8 | V4_MAT_CUDA);
        v4_linear(be, &W, V4_LIN_EXACT, 1, x, cols, y, rows);
        CHECK(isnan(y[0]) && isnan(y[rows - 1]), "%s: device R8 matrix -> NaN", isas[k]);
        free(x);
        free(y);
        be->ops->destroy(be);
    }
    free(ids);
    free(logits);
    v4_model_close(&m);
}

int main(void)
{
    test_device_matrix_on_cpu();
    test_basic();
    test_random();
    test_parse();
    TEST_DONE();
}
