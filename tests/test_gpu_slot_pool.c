/* test_gpu_slot_pool.c - the GPU expert cache's bookkeeping (kernels/cuda/slot_pool.h),
 * on the CPU (no CUDA needed): slot count from the budget (never above it), hits and
 * misses, LRU eviction order (policy lru), pinned slots never evicted, the
 * all-or-nothing failure when everything is pinned (pool unchanged, precise message),
 * forgotten slots, the counters, a randomized run against a reference model of an LRU
 * cache; under every policy (lru, slru, lfru, next) the pin / refusal / forget
 * semantics and a randomized run checked against the pool's invariants; the cyclic
 * layer scan (every expert of each layer, layers 0..L-1 repeatedly, capacity below the
 * total) where next misses what Belady's MIN misses (an independent model here) and
 * lru misses everything; and the V4_GPU_EXPERT_MEM syntax.  Also the CPU side of device matrices (backend.h
 * V4_MAT_CUDA): the CPU backend answers one with NaN outputs without reading it, and
 * the routed-expert byte count behind a percentage budget (gpu_experts.h) matches the
 * weights' on the golden tiny model. */
#include <limits.h>
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
    v4_slot_pool *p = v4_slot_pool_create(4, 8, 1000, 3500, V4_XPOL_LRU, &err);
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
    CHECK(v4_slot_pool_create(4, 8, 1000, 999, V4_XPOL_NEXT, &err) == NULL && err.code == V4_ERR_INVALID &&
              strstr(err.msg, "999"), "budget below one slot: %s", err.msg);
    p = v4_slot_pool_create(2, 2, 1000, 1 << 20, V4_XPOL_NEXT, &err);
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
    v4_slot_pool *p = v4_slot_pool_create(L, E, 4096, SLOTS * 4096 + 4095, V4_XPOL_LRU, &err);
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

/* Pins, the refusal that changes nothing, forget and release under a policy. */
static void test_semantics(v4_xpolicy_kind kind)
{
    const char *name = v4_xpolicy_name(kind);
    v4_error err = {0};
    v4_slot_pool *p = v4_slot_pool_create(3, 4, 100, 450, kind, &err);     /* 4 slots */
    CHECK(p && v4_slot_pool_slots(p) == 4 && v4_slot_pool_policy(p) == kind, "%s: create: %s", name, err.msg);
    if (!p)
        return;
    int slot[4];
    unsigned char load[4];
    const int a[3] = {0, 1, 2}, b[1] = {3}, c[2] = {1, 2};
    acq(p, 0, a, 3, slot, load);            /* layer 0: 0 1 2 pinned */
    CHECK(load[0] && load[1] && load[2], "%s: three misses", name);
    acq(p, 1, b, 1, slot, load);            /* layer 1: 3, into the last free slot */
    /* 4 slots, all pinned: layer 2 needs 2 more: refused, nothing changes */
    v4_slot_pool_stats before, after;
    v4_slot_pool_stats_get(p, &before);
    CHECK(before.pinned == 4 && before.resident == 4, "%s: all 4 pinned (%d)", name, before.pinned);
    err = (v4_error){0};
    CHECK(v4_slot_pool_acquire(p, 2, c, 2, slot, load, &err) == -1 && err.code == V4_ERR_NOMEM &&
              strstr(err.msg, "layer 2") && strstr(err.msg, "V4_GPU_EXPERT_MEM"),
          "%s: refused with every slot pinned: %s", name, err.msg);
    v4_slot_pool_stats_get(p, &after);
    CHECK(after.pinned == 4 && after.resident == 4 && after.hits == before.hits && after.misses == before.misses &&
              after.evictions == before.evictions && after.failed_acquires == before.failed_acquires + 1,
          "%s: a refused acquire changes nothing", name);
    for (int i = 0; i < 3; i++)
        CHECK(v4_slot_pool_pins(p, v4_slot_pool_lookup(p, 0, a[i])) == 1, "%s: (0,%d) still pinned once", name, a[i]);
    /* release layer 0: its slots are evictable, the pinned layer-1 ones are not */
    v4_slot_pool_release(p, 0, a, 3);
    const int s13 = v4_slot_pool_lookup(p, 1, 3);
    const int d[3] = {0, 1, 2};
    acq(p, 2, d, 3, slot, load);            /* 3 misses: must evict exactly layer 0's 3 */
    CHECK(load[0] && load[1] && load[2] && v4_slot_pool_lookup(p, 0, 0) < 0 && v4_slot_pool_lookup(p, 0, 1) < 0 &&
              v4_slot_pool_lookup(p, 0, 2) < 0,
          "%s: layer 0 evicted", name);
    CHECK(v4_slot_pool_lookup(p, 1, 3) == s13 && v4_slot_pool_pins(p, s13) == 1,
          "%s: the pinned layer-1 expert is never evicted", name);
    /* every slot pinned again (layer 2's 3, layer 1's 1): two new experts are refused */
    err = (v4_error){0};
    CHECK(v4_slot_pool_acquire(p, 0, c, 2, slot, load, &err) == -1 && err.code == V4_ERR_NOMEM,
          "%s: refused again: %s", name, err.msg);
    /* forget a pinned slot: it is freed at release, and is a miss again */
    const int s22 = v4_slot_pool_lookup(p, 2, 2);
    v4_slot_pool_forget(p, s22);
    v4_slot_pool_release(p, 2, d, 3);
    CHECK(v4_slot_pool_lookup(p, 2, 2) == -1 && v4_slot_pool_lookup(p, 2, 1) >= 0, "%s: forgotten slot freed", name);
    v4_slot_pool_stats_get(p, &after);
    CHECK(after.resident == 3 && after.pinned == 1, "%s: resident %d pinned %d", name, after.resident, after.pinned);
    const int e2[1] = {2};
    acq(p, 2, e2, 1, slot, load);
    CHECK(load[0] == 1 && slot[0] == s22, "%s: re-acquired into the freed slot %d (got %d)", name, s22, slot[0]);
    CHECK(v4_slot_pool_acquire(p, 3, e2, 1, slot, load, &err) == -1 && err.code == V4_ERR_RANGE, "%s: layer 3 refused",
          name);
    v4_slot_pool_release(p, 2, e2, 1);
    v4_slot_pool_release(p, 1, b, 1);
    v4_slot_pool_release(p, 1, b, 1);       /* not pinned any more: ignored */
    v4_slot_pool_stats_get(p, &after);
    CHECK(after.pinned == 0 && after.resident == 4 && after.misses == after.evictions + (uint64_t)after.resident + 1,
          "%s: pinned %d resident %d misses %llu evictions %llu (one forgotten)", name, after.pinned, after.resident,
          (unsigned long long)after.misses, (unsigned long long)after.evictions);
    v4_slot_pool_free(p);
}

/* Random steps under a policy: every acquire succeeds while it fits, slots never shared,
 * pins dropped at release, counters consistent (misses = evictions + resident). */
static void test_random_policy(v4_xpolicy_kind kind)
{
    enum { L = 6, E = 10, SLOTS = 17, STEPS = 4000 };
    v4_error err = {0};
    v4_slot_pool *p = v4_slot_pool_create(L, E, 64, SLOTS * 64, kind, &err);
    CHECK(p != NULL, "create: %s", err.msg);
    if (!p)
        return;
    uint64_t rnd = 777 + (uint64_t)kind;
    int bad = 0;
    for (int step = 0; step < STEPS; step++) {
        const int layer = step % L;
        rnd = rnd * 6364136223846793005ull + 1442695040888963407ull;
        int n = 1 + (int)((rnd >> 33) % 8), ids[8], slot[8];
        unsigned char load[8], used[E] = {0};
        for (int i = 0; i < n;) {
            rnd = rnd * 6364136223846793005ull + 1442695040888963407ull;
            const int id = (int)((rnd >> 35) % E);
            if (!used[id]) {
                used[id] = 1;
                ids[i++] = id;
            }
        }
        if (acq(p, layer, ids, n, slot, load)) {
            bad++;
            break;
        }
        for (int i = 0; i < n; i++) {
            bad += v4_slot_pool_lookup(p, layer, ids[i]) != slot[i] || v4_slot_pool_pins(p, slot[i]) != 1;
            for (int j = 0; j < i; j++)
                bad += slot[j] == slot[i];
        }
        v4_slot_pool_release(p, layer, ids, n);
    }
    v4_slot_pool_stats st;
    v4_slot_pool_stats_get(p, &st);
    CHECK(bad == 0 && st.pinned == 0 && st.failed_acquires == 0 &&
              st.misses == st.evictions + (uint64_t)st.resident && st.resident == SLOTS,
          "%s: random: %d bad, pinned %d, misses %llu = evictions %llu + resident %d", v4_xpolicy_name(kind), bad,
          st.pinned, (unsigned long long)st.misses, (unsigned long long)st.evictions, st.resident);
    v4_slot_pool_free(p);
}

/* Belady's MIN for whole-layer steps (independent of the pool): cycles x (layers
 * 0..L-1, each acquiring all E experts).  A miss takes a free slot, else evicts the
 * resident key (not of the current step) whose next use is farthest. */
static long belady_cyclic(int L, int E, int cap, int cycles)
{
    const int n_keys = L * E, steps = L * cycles;
    unsigned char *res = calloc((size_t)n_keys, 1);
    long misses = 0;
    int size = 0;
    for (int t = 0; t < steps; t++) {
        const int l = t % L;
        for (int e = 0; e < E; e++) {
            const int key = l * E + e;
            if (res[key])
                continue;
            misses++;
            if (size < cap) {
                res[key] = 1;
                size++;
                continue;
            }
            int victim = -1;
            long far = -1;
            for (int k = 0; k < n_keys; k++) {
                if (!res[k] || k / E == l)
                    continue;
                long next = LONG_MAX;       /* the next step using k's layer */
                for (int u = t + 1; u < steps; u++)
                    if (u % L == k / E) {
                        next = u;
                        break;
                    }
                if (next > far) {
                    far = next;
                    victim = k;
                }
            }
            res[victim] = 0;
            res[key] = 1;
        }
    }
    free(res);
    return misses;
}

/* The engine's access order at a large batch: every expert of every layer, layers in a
 * cycle, capacity below the total.  lru evicts exactly the experts needed next (every
 * access misses: cycles x L x E); next evicts the layer needed last (as MIN). */
static long cyclic_misses(v4_xpolicy_kind kind, int L, int E, int cap, int cycles)
{
    v4_error err = {0};
    v4_slot_pool *p = v4_slot_pool_create(L, E, 1000, (size_t)cap * 1000, kind, &err);
    CHECK(p != NULL, "create: %s", err.msg);
    if (!p)
        return -1;
    int ids[64], slot[64];
    unsigned char load[64];
    for (int e = 0; e < E; e++)
        ids[e] = e;
    for (int c = 0; c < cycles; c++)
        for (int l = 0; l < L; l++) {
            if (acq(p, l, ids, E, slot, load))
                break;
            v4_slot_pool_release(p, l, ids, E);
        }
    v4_slot_pool_stats st;
    v4_slot_pool_stats_get(p, &st);
    v4_slot_pool_free(p);
    return (long)st.misses;
}

static void test_cyclic_scan(void)
{
    /* 4 layers x 4 experts, 12 slots (3 layers), 10 cycles = 40 layer visits.  By hand
     * (MIN): visits 1-4 miss (3 cold, then layer 3 evicts layer 2, the one needed last);
     * from then on the evicted layer is needed after the two others, so every third
     * visit misses one whole layer: visits 7, 10, ..., 40 = 12 layers; 16 + 4 x 12 = 64.
     * lru evicts the layer needed next every time: all 160 miss. */
    enum { L = 4, E = 4, CAP = 12, CYC = 10 };
    const long lru = cyclic_misses(V4_XPOL_LRU, L, E, CAP, CYC), next = cyclic_misses(V4_XPOL_NEXT, L, E, CAP, CYC);
    const long min = belady_cyclic(L, E, CAP, CYC);
    CHECK(lru == (long)L * E * CYC, "cyclic lru: %ld misses, expected all %d", lru, L * E * CYC);
    CHECK(min == 16 + 4 * 12, "Belady's MIN: %ld misses, by hand %d", min, 16 + 4 * 12);
    CHECK(next == min, "cyclic next: %ld misses = MIN's %ld (lru %ld)", next, min, lru);
    /* a shape nearer the model: 8 layers x 16 experts, 100 slots (6.25 layers), 30
     * cycles (several halvings of next's counts); next within 10% of MIN, lru all */
    const long lru2 = cyclic_misses(V4_XPOL_LRU, 8, 16, 100, 30), next2 = cyclic_misses(V4_XPOL_NEXT, 8, 16, 100, 30);
    const long min2 = belady_cyclic(8, 16, 100, 30);
    CHECK(lru2 == 8L * 16 * 30, "cyclic lru (8x16, 100 slots): %ld misses", lru2);
    CHECK(next2 * 10 <= min2 * 11 && next2 * 2 < lru2, "cyclic next (8x16, 100 slots): %ld misses, MIN %ld, lru %ld",
          next2, min2, lru2);
    printf("cyclic scan: 4x4/12 slots: lru %ld, next %ld, MIN %ld; 8x16/100 slots: lru %ld, next %ld, MIN %ld\n", lru,
           next, min, lru2, next2, min2);
    for (int k = 0; k < V4_XPOL_COUNT; k++)
        printf("  %s: %ld misses (4x4/12 slots, 10 cycles)\n", v4_xpolicy_name((v4_xpolicy_kind)k),
               cyclic_misses((v4_xpolicy_kind)k, L, E, CAP, CYC));
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
    for (int k = 0; k < V4_XPOL_COUNT; k++) {
        test_semantics((v4_xpolicy_kind)k);
        test_random_policy((v4_xpolicy_kind)k);
    }
    test_cyclic_scan();
    v4_error err = {0};
    CHECK(!v4_slot_pool_create(2, 2, 10, 100, V4_XPOL_COUNT, &err) && err.code == V4_ERR_INVALID,
          "unknown policy refused: %s", err.msg);
    test_parse();
    TEST_DONE();
}
