/* test_expert_cache.c - the host expert cache (cache/expert_cache.h) over an in-memory
 * test source (a v4_xsource whose blocks are a pattern of (layer, expert, offset),
 * with a per-read delay, per-key read counters, an in-flight gauge and corrupt keys).
 * Checks: returned bytes; the budget high-water mark <= budget with 4 threads
 * hammering random acquires (and held blocks never change: pinned = never evicted);
 * several loads in flight; one load for concurrent misses of one expert; a corrupt
 * block -> V4_ERR_CORRUPT with the source's message, quarantine (no second read),
 * slot freed, other experts fine; prefetch then acquire = hit; a prefetched block is
 * not evicted before its first acquire, whether its read finished or not, so the
 * outcomes (v4_xcache_acquire_ex) are the same with a fast and a slow source, and an
 * unused prefetch expires at the next prefetch of its layer; budget too small ->
 * errors (create, n > slots, all slots pinned) instead of a deadlock; every policy.
 * Thread: main + the hammer/miss threads it starts.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "../cache/expert_block.h"
#include "../cache/expert_cache.h"
#include "testutil.h"

enum { NL = 4, NE = 16, BLOCK = 3 * 4096 - 512 };   /* block not a multiple of the alignment */

typedef struct tsrc {
    v4_xsource base;
    int delay_us;
    atomic_int reads[NL * NE];
    atomic_int inflight, max_inflight;
    unsigned char corrupt[NL * NE];
} tsrc;

static uint32_t word(int layer, int expert, size_t i)
{
    uint32_t x = (uint32_t)(layer * 1000003 + expert * 7919) ^ (uint32_t)(i * 2654435761u);
    x ^= x >> 15;
    x *= 2246822519u;
    return x ^ (x >> 13);
}

static int block_ok(const void *b, int layer, int expert)
{
    const uint32_t *w = b;
    for (size_t i = 0; i < BLOCK / 4; i++)
        if (w[i] != word(layer, expert, i))
            return 0;
    return 1;
}

static void sleep_us(int us)
{
    struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static int tsrc_read(v4_xsource *s, int layer, int expert, void *dst, v4_error *err)
{
    tsrc *t = (tsrc *)s;
    int key = layer * NE + expert;
    atomic_fetch_add(&t->reads[key], 1);
    if ((uintptr_t)dst % V4_XBLOCK_ALIGN)
        return v4_err_set(err, V4_ERR_INVALID, "test source", "unaligned destination");
    int now = atomic_fetch_add(&t->inflight, 1) + 1, m = atomic_load(&t->max_inflight);
    while (now > m && !atomic_compare_exchange_weak(&t->max_inflight, &m, now))
        ;
    if (t->delay_us)
        sleep_us(t->delay_us);
    uint32_t *w = dst;
    for (size_t i = 0; i < BLOCK / 4; i++)
        w[i] = word(layer, expert, i);
    atomic_fetch_sub(&t->inflight, 1);
    if (t->corrupt[key])
        return v4_err_set(err, V4_ERR_CORRUPT, "test.pack",
                          "layer %d expert %d: checksum mismatch (file test.pack, offset %d)",
                          layer, expert, key * BLOCK);
    return 0;
}

static void tsrc_close(v4_xsource *s) { (void)s; }

static const v4_xsource_ops tsrc_ops = {tsrc_read, tsrc_close};

static void tsrc_init(tsrc *t, int delay_us)
{
    memset(t, 0, sizeof *t);
    t->base = (v4_xsource){&tsrc_ops, BLOCK, NL, NE, "test"};
    t->delay_us = delay_us;
}

#define SLOT ((size_t)3 * 4096)

static v4_xcache *mkcache(tsrc *t, size_t budget, v4_xpolicy_kind pol)
{
    v4_xcache_opts o = {budget, 4, pol, {0, 0, 0}};
    v4_error err = {0};
    v4_xcache *c = v4_xcache_create(&t->base, &o, &err);
    CHECK(c, "create: %s", err.msg);
    if (!c)
        exit(1);
    return c;
}

static void test_basic(v4_xpolicy_kind pol)
{
    tsrc t;
    tsrc_init(&t, 0);
    v4_xcache *c = mkcache(&t, 8 * SLOT + 100, pol);
    v4_xcache_stats st;
    v4_xcache_stats_get(c, &st);
    CHECK(st.slots == 8 && st.slot_bytes == SLOT && st.in_use_bytes == 0, "8 slots of %zu", st.slot_bytes);
    int ids[4] = {0, 5, 9, 15};
    const void *b[4];
    v4_error err = {0};
    CHECK(v4_xcache_acquire(c, 1, ids, 4, b, &err) == 0, "acquire: %s", err.msg);
    for (int i = 0; i < 4; i++)
        CHECK(b[i] && (uintptr_t)b[i] % V4_XBLOCK_ALIGN == 0 && block_ok(b[i], 1, ids[i]),
              "%s: block of expert %d", v4_xpolicy_name(pol), ids[i]);
    v4_xcache_release(c, 1, ids, 4);
    const void *b2[4];
    CHECK(v4_xcache_acquire(c, 1, ids, 4, b2, &err) == 0, "re-acquire");
    CHECK(!memcmp(b, b2, sizeof b), "same slots on a hit");
    v4_xcache_release(c, 1, ids, 4);
    v4_xcache_stats_get(c, &st);
    CHECK(st.misses == 4 && st.hits == 4 && st.loads == 4 && st.bytes_read == 4u * BLOCK,
          "stats: misses %llu hits %llu loads %llu bytes %llu", (unsigned long long)st.misses,
          (unsigned long long)st.hits, (unsigned long long)st.loads, (unsigned long long)st.bytes_read);
    CHECK(st.slots_pinned == 0 && st.slots_in_use == 4, "nothing pinned after release");
    CHECK(atomic_load(&t.reads[1 * NE + 9]) == 1, "one read per expert");
    /* cycle through more experts than slots: evictions, correct bytes throughout */
    int bad = 0;
    for (int r = 0; r < 3; r++)
        for (int e = 0; e < NE; e++) {
            const void *p;
            if (v4_xcache_acquire(c, 2, &e, 1, &p, &err) || !block_ok(p, 2, e))
                bad++;
            v4_xcache_release(c, 2, &e, 1);
        }
    v4_xcache_stats_get(c, &st);
    CHECK(!bad && st.evictions > 0 && st.high_water_bytes == 8 * SLOT,
          "%s: cycling: bad %d evictions %llu hwm %zu", v4_xpolicy_name(pol), bad,
          (unsigned long long)st.evictions, st.high_water_bytes);
    CHECK(st.lat_p50_us <= st.lat_p90_us && st.lat_p90_us <= st.lat_p99_us, "percentiles ordered");
    v4_xcache_stats_reset(c);
    v4_xcache_stats_get(c, &st);
    CHECK(st.hits == 0 && st.misses == 0 && st.high_water_bytes == st.in_use_bytes, "reset");
    v4_xcache_destroy(c);
}

/* ---- 4 threads hammering ---- */

typedef struct hammer {
    v4_xcache *c;
    unsigned seed;
    int iters, bad, fails;
    v4_error err;
} hammer;

static void *hammer_main(void *arg)
{
    hammer *h = arg;
    unsigned x = h->seed;
    for (int it = 0; it < h->iters; it++) {
        x = x * 1103515245u + 12345u;
        int layer = (int)((x >> 8) % NL), ids[3];
        ids[0] = (int)((x >> 12) % NE);
        ids[1] = (ids[0] + 1 + (int)((x >> 18) % (NE - 1))) % NE;
        do {
            x = x * 1103515245u + 12345u;
            ids[2] = (int)((x >> 10) % NE);
        } while (ids[2] == ids[0] || ids[2] == ids[1]);
        const void *b[3];
        if (v4_xcache_acquire(h->c, layer, ids, 3, b, &h->err)) {
            h->fails++;
            continue;
        }
        for (int i = 0; i < 3; i++)
            h->bad += !block_ok(b[i], layer, ids[i]);
        if (it % 16 == 0)
            sleep_us(100);          /* hold the pins while others churn */
        for (int i = 0; i < 3; i++)    /* pinned: still the same bytes */
            h->bad += !block_ok(b[i], layer, ids[i]);
        v4_xcache_release(h->c, layer, ids, 3);
    }
    return NULL;
}

static void test_hammer(v4_xpolicy_kind pol)
{
    tsrc t;
    tsrc_init(&t, 30);
    size_t budget = 12 * SLOT + 4095;     /* 4 threads x 3 pinned = 12 slots */
    v4_xcache *c = mkcache(&t, budget, pol);
    hammer h[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        h[i] = (hammer){c, 1234u + 77u * (unsigned)i, 1500, 0, 0, {0}};
        pthread_create(&th[i], NULL, hammer_main, &h[i]);
    }
    int bad = 0, fails = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        bad += h[i].bad;
        fails += h[i].fails;
        if (h[i].fails)
            fprintf(stderr, "hammer error: %s\n", h[i].err.msg);
    }
    v4_xcache_stats st;
    v4_xcache_stats_get(c, &st);
    CHECK(bad == 0 && fails == 0, "%s: hammer: %d wrong blocks, %d failed acquires", v4_xpolicy_name(pol), bad, fails);
    CHECK(st.high_water_bytes <= budget && st.high_water_bytes == 12 * SLOT,
          "%s: high-water %zu <= budget %zu", v4_xpolicy_name(pol), st.high_water_bytes, budget);
    CHECK(st.evictions > 0 && st.misses > 0 && st.hits > 0 && st.slots_pinned == 0,
          "%s: hammer stats: hits %llu misses %llu evictions %llu", v4_xpolicy_name(pol),
          (unsigned long long)st.hits, (unsigned long long)st.misses, (unsigned long long)st.evictions);
    int reads = 0;
    for (int k = 0; k < NL * NE; k++)
        reads += atomic_load(&t.reads[k]);
    CHECK((uint64_t)reads == st.loads && st.loads == st.misses, "reads %d = loads %llu = misses %llu", reads,
          (unsigned long long)st.loads, (unsigned long long)st.misses);
    printf("%s hammer: hits %llu misses %llu evictions %llu max in flight %d, load p50 %llu us p99 %llu us\n",
           v4_xpolicy_name(pol), (unsigned long long)st.hits, (unsigned long long)st.misses,
           (unsigned long long)st.evictions, atomic_load(&t.max_inflight),
           (unsigned long long)st.lat_p50_us, (unsigned long long)st.lat_p99_us);
    v4_xcache_destroy(c);
}

static void test_parallel_loads(void)
{
    tsrc t;
    tsrc_init(&t, 20000);
    v4_xcache *c = mkcache(&t, 16 * SLOT, V4_XPOL_LRU);
    int ids[4] = {1, 2, 3, 4};
    const void *b[4];
    v4_error err = {0};
    CHECK(v4_xcache_acquire(c, 0, ids, 4, b, &err) == 0, "acquire");
    CHECK(atomic_load(&t.max_inflight) >= 2, "several misses in flight at once (max %d)",
          atomic_load(&t.max_inflight));
    v4_xcache_release(c, 0, ids, 4);
    v4_xcache_destroy(c);
}

/* ---- concurrent misses of one expert ---- */

typedef struct same {
    v4_xcache *c;
    pthread_barrier_t *bar;
    int ok;
} same;

static void *same_main(void *arg)
{
    same *s = arg;
    int id = 5;
    const void *b;
    v4_error err = {0};
    pthread_barrier_wait(s->bar);
    s->ok = !v4_xcache_acquire(s->c, 3, &id, 1, &b, &err) && block_ok(b, 3, 5);
    if (s->ok)
        v4_xcache_release(s->c, 3, &id, 1);
    return NULL;
}

static void test_single_load(void)
{
    tsrc t;
    tsrc_init(&t, 50000);
    v4_xcache *c = mkcache(&t, 4 * SLOT, V4_XPOL_SLRU);
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 4);
    same s[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        s[i] = (same){c, &bar, 0};
        pthread_create(&th[i], NULL, same_main, &s[i]);
    }
    int ok = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        ok += s[i].ok;
    }
    pthread_barrier_destroy(&bar);
    v4_xcache_stats st;
    v4_xcache_stats_get(c, &st);
    CHECK(ok == 4, "4 concurrent acquires ok (%d)", ok);
    CHECK(atomic_load(&t.reads[3 * NE + 5]) == 1, "one read for 4 concurrent misses (%d)",
          atomic_load(&t.reads[3 * NE + 5]));
    CHECK(st.misses == 1 && st.hits == 3 && st.inflight_waits >= 1, "misses %llu hits %llu waits %llu",
          (unsigned long long)st.misses, (unsigned long long)st.hits, (unsigned long long)st.inflight_waits);
    v4_xcache_destroy(c);
}

static void test_corrupt(void)
{
    tsrc t;
    tsrc_init(&t, 1000);
    t.corrupt[1 * NE + 7] = 1;
    v4_xcache *c = mkcache(&t, 6 * SLOT, V4_XPOL_LFRU);
    int ids[3] = {3, 7, 9};
    const void *b[3] = {0};
    v4_error err = {0};
    CHECK(v4_xcache_acquire(c, 1, ids, 3, b, &err) == -1, "acquire with a corrupt block fails");
    CHECK(err.code == V4_ERR_CORRUPT && strstr(err.msg, "layer 1 expert 7") && strstr(err.msg, "offset"),
          "corrupt error passes through: %s (%s)", v4_errcode_name(err.code), err.msg);
    CHECK(!b[0] && !b[1] && !b[2], "no blocks handed out on failure");
    v4_xcache_stats st;
    v4_xcache_stats_get(c, &st);
    CHECK(st.slots_pinned == 0 && st.slots_in_use == 2 && st.quarantined == 1 && st.load_errors == 1,
          "after failure: pinned %d in use %d quarantined %d", st.slots_pinned, st.slots_in_use, st.quarantined);
    v4_error err2 = {0};
    int seven = 7;
    CHECK(v4_xcache_acquire(c, 1, &seven, 1, b, &err2) == -1 && err2.code == V4_ERR_CORRUPT &&
          !strcmp(err2.msg, err.msg), "quarantined: same error again (%s)", err2.msg);
    CHECK(atomic_load(&t.reads[1 * NE + 7]) == 1, "quarantined block is not read again");
    v4_xcache_prefetch(c, 1, &seven, 1);
    CHECK(atomic_load(&t.reads[1 * NE + 7]) == 1, "nor prefetched");
    int good[2] = {3, 9};
    CHECK(v4_xcache_acquire(c, 1, good, 2, b, &err) == 0 && block_ok(b[0], 1, 3) && block_ok(b[1], 1, 9),
          "other experts fine");
    v4_xcache_release(c, 1, good, 2);
    /* the freed slot is usable: fill all 6 slots */
    int six[6] = {0, 1, 2, 4, 5, 6};
    const void *b6[6];
    CHECK(v4_xcache_acquire(c, 2, six, 6, b6, &err) == 0, "all 6 slots usable after a failure: %s", err.msg);
    v4_xcache_release(c, 2, six, 6);
    v4_xcache_destroy(c);
}

static void test_prefetch(void)
{
    tsrc t;
    tsrc_init(&t, 5000);
    v4_xcache *c = mkcache(&t, 8 * SLOT, V4_XPOL_LRU);
    int ids[2] = {1, 2};
    v4_xcache_prefetch(c, 2, ids, 2);
    v4_xcache_stats st;
    v4_xcache_stats_get(c, &st);
    CHECK(st.prefetch_issued == 2 && st.slots_in_use == 2, "prefetch issued 2");
    const void *b[2];
    v4_error err = {0};
    CHECK(v4_xcache_acquire(c, 2, ids, 2, b, &err) == 0 && block_ok(b[0], 2, 1) && block_ok(b[1], 2, 2),
          "acquire after prefetch");
    v4_xcache_release(c, 2, ids, 2);
    v4_xcache_stats_get(c, &st);
    CHECK(st.hits == 2 && st.misses == 0 && st.prefetch_hits == 2, "prefetch then acquire = hit (hits %llu misses %llu)",
          (unsigned long long)st.hits, (unsigned long long)st.misses);
    CHECK(atomic_load(&t.reads[2 * NE + 1]) == 1 && atomic_load(&t.reads[2 * NE + 2]) == 1, "one read each");
    /* unused prefetched blocks are normal entries: evictable */
    int more[8] = {3, 4, 5, 6, 7, 8, 9, 10};
    v4_xcache_prefetch(c, 0, more, 8);
    const void *bb[8];
    CHECK(v4_xcache_acquire(c, 0, more, 8, bb, &err) == 0, "8 slots: prefetched entries evicted: %s", err.msg);
    v4_xcache_release(c, 0, more, 8);
    v4_xcache_stats_get(c, &st);
    CHECK(st.prefetch_hits == 10 && st.evictions == 2, "prefetch hits %llu evictions %llu",
          (unsigned long long)st.prefetch_hits, (unsigned long long)st.evictions);
    v4_xcache_destroy(c);
}

/* a block being loaded holds a pin: a prefetch cannot evict another prefetch mid-read */
static void test_loading_not_evicted(void)
{
    tsrc t;
    tsrc_init(&t, 20000);
    v4_xcache *c = mkcache(&t, 2 * SLOT, V4_XPOL_LRU);
    int ids[3] = {0, 1, 2};
    v4_xcache_prefetch(c, 0, ids, 3);
    v4_xcache_stats st;
    v4_xcache_stats_get(c, &st);
    CHECK(st.prefetch_issued == 2 && st.prefetch_dropped == 1 && st.evictions == 0,
          "2 loads in 2 slots, the third prefetch dropped (issued %llu dropped %llu evictions %llu)",
          (unsigned long long)st.prefetch_issued, (unsigned long long)st.prefetch_dropped,
          (unsigned long long)st.evictions);
    const void *b[2];
    v4_error err = {0};
    CHECK(v4_xcache_acquire(c, 0, ids, 2, b, &err) == 0 && block_ok(b[0], 0, 0) && block_ok(b[1], 0, 1),
          "prefetched blocks intact");
    v4_xcache_release(c, 0, ids, 2);
    CHECK(atomic_load(&t.reads[2]) == 0 && atomic_load(&t.reads[0]) == 1, "expert 2 never read, 0 once");
    v4_xcache_destroy(c);
}

/* every slot held by in-flight prefetch loads: an acquire of other experts waits for
 * them to land (they become evictable) instead of failing */
static void test_wait_for_prefetch(void)
{
    tsrc t;
    tsrc_init(&t, 30000);
    v4_xcache *c = mkcache(&t, 2 * SLOT, V4_XPOL_LRU);
    int pre[2] = {5, 6}, want[2] = {7, 8};
    v4_xcache_prefetch(c, 1, pre, 2);
    v4_xcache_stats st;
    v4_xcache_stats_get(c, &st);
    CHECK(st.prefetch_issued == 2 && st.slots_pinned == 2, "both slots loading (pinned %d)", st.slots_pinned);
    const void *b[2];
    v4_error err = {0};
    CHECK(v4_xcache_acquire(c, 1, want, 2, b, &err) == 0 && block_ok(b[0], 1, 7) && block_ok(b[1], 1, 8),
          "acquire waits for the prefetch loads, then evicts them: %s", err.msg);
    v4_xcache_release(c, 1, want, 2);
    v4_xcache_stats_get(c, &st);
    CHECK(st.evictions == 2 && st.high_water_bytes <= 2 * SLOT, "evicted the prefetched blocks (%llu)",
          (unsigned long long)st.evictions);
    v4_xcache_destroy(c);
}

/* The same calls with a source that answers at once and one that takes 30 ms per read:
 * the same outcomes, evictions and figures. */
static void prefetch_run(int delay_us, unsigned char out[6], v4_xcache_stats *st)
{
    tsrc t;
    tsrc_init(&t, delay_us);
    v4_xcache *c = mkcache(&t, 4 * SLOT, V4_XPOL_LRU);
    int pre[2] = {0, 1}, a[2] = {2, 3}, b[2] = {4, 5}, p8 = 8, p9 = 9;
    const void *bl[2];
    v4_error err = {0};
    v4_xcache_prefetch(c, 1, pre, 2);
    if (!delay_us)
        sleep_us(20000);   /* the reads are done: the blocks must still not be evictable */
    CHECK(v4_xcache_acquire_ex(c, 0, a, 2, bl, out, &err) == 0, "acquire 2, 3: %s", err.msg);
    v4_xcache_release(c, 0, a, 2);
    CHECK(v4_xcache_acquire_ex(c, 0, b, 2, bl, out + 2, &err) == 0, "acquire 4, 5 (evicts 2, 3): %s", err.msg);
    v4_xcache_release(c, 0, b, 2);
    CHECK(v4_xcache_acquire_ex(c, 1, pre, 2, bl, out + 4, &err) == 0 && block_ok(bl[0], 1, 0) &&
              block_ok(bl[1], 1, 1), "the prefetched blocks: %s", err.msg);
    v4_xcache_release(c, 1, pre, 2);
    v4_xcache_prefetch(c, 2, &p8, 1);   /* never acquired: expires at the next prefetch of layer 2 */
    v4_xcache_prefetch(c, 2, &p9, 1);
    v4_xcache_stats_get(c, st);
    CHECK(atomic_load(&t.reads[1 * NE + 0]) == 1 && atomic_load(&t.reads[1 * NE + 1]) == 1,
          "delay %d us: the prefetched experts were read once each", delay_us);
    v4_xcache_destroy(c);
}

static void test_prefetch_deterministic(void)
{
    unsigned char fast[6], slow[6];
    const unsigned char want[6] = {V4_XOUT_MISS, V4_XOUT_MISS, V4_XOUT_MISS, V4_XOUT_MISS, V4_XOUT_PREFETCHED,
                                   V4_XOUT_PREFETCHED};
    v4_xcache_stats a, b;
    prefetch_run(0, fast, &a);
    prefetch_run(30000, slow, &b);
    CHECK(!memcmp(fast, want, 6) && !memcmp(slow, want, 6), "outcomes: fast %d%d%d%d%d%d slow %d%d%d%d%d%d", fast[0],
          fast[1], fast[2], fast[3], fast[4], fast[5], slow[0], slow[1], slow[2], slow[3], slow[4], slow[5]);
    CHECK(a.misses == 4 && b.misses == 4 && a.prefetch_hits == 2 && b.prefetch_hits == 2 && a.hits == 2 &&
              b.hits == 2, "misses %llu/%llu prefetch hits %llu/%llu", (unsigned long long)a.misses,
          (unsigned long long)b.misses, (unsigned long long)a.prefetch_hits, (unsigned long long)b.prefetch_hits);
    CHECK(a.evictions == b.evictions && a.evictions == 4 && a.prefetch_expired == 1 && b.prefetch_expired == 1,
          "evictions %llu/%llu (want 4: 2 and 3, then 4 and 5 for the layer-2 prefetches), expired %llu/%llu",
          (unsigned long long)a.evictions, (unsigned long long)b.evictions, (unsigned long long)a.prefetch_expired,
          (unsigned long long)b.prefetch_expired);
}

static void test_budget_too_small(void)
{
    tsrc t;
    tsrc_init(&t, 0);
    v4_xcache_opts o = {SLOT - 1, 2, V4_XPOL_LRU, {0, 0, 0}};
    v4_error err = {0};
    CHECK(!v4_xcache_create(&t.base, &o, &err) && err.code == V4_ERR_RANGE && strstr(err.msg, "smaller than one"),
          "budget below one block: %s", err.msg);
    v4_xcache *c = mkcache(&t, 2 * SLOT + 5, V4_XPOL_SLRU);
    int ids[3] = {0, 1, 2};
    const void *b[3];
    memset(&err, 0, sizeof err);
    CHECK(v4_xcache_acquire(c, 0, ids, 3, b, &err) == -1 && err.code == V4_ERR_RANGE && strstr(err.msg, "too small"),
          "3 experts in 2 slots: %s", err.msg);
    CHECK(v4_xcache_acquire(c, 0, ids, 2, b, &err) == 0, "2 fit");
    const void *held0 = b[0];
    memset(&err, 0, sizeof err);
    CHECK(v4_xcache_acquire(c, 0, &ids[2], 1, &b[2], &err) == -1 && err.code == V4_ERR_RANGE &&
          strstr(err.msg, "budget"), "all slots pinned -> error, not a deadlock: %s", err.msg);
    v4_xcache_stats st;
    v4_xcache_stats_get(c, &st);
    CHECK(st.slots_pinned == 2, "the held pins are untouched");
    v4_xcache_release(c, 0, ids, 1);          /* expert 0 free; 1 stays pinned */
    /* pinned never evicted: churn through the other slot */
    int bad = 0;
    for (int e = 2; e < NE; e++) {
        const void *p;
        if (v4_xcache_acquire(c, 1, &e, 1, &p, &err) || !block_ok(p, 1, e))
            bad++;
        v4_xcache_release(c, 1, &e, 1);
    }
    CHECK(!bad && block_ok(b[1], 0, 1) && atomic_load(&t.reads[1]) == 1, "pinned expert 1 survives the churn");
    (void)held0;
    v4_xcache_release(c, 0, &ids[1], 1);
    v4_xcache_destroy(c);
}

int main(void)
{
    for (int p = 0; p < V4_XPOL_COUNT; p++)
        test_basic((v4_xpolicy_kind)p);
    for (int p = 0; p < V4_XPOL_COUNT; p++)
        test_hammer((v4_xpolicy_kind)p);
    test_parallel_loads();
    test_single_load();
    test_corrupt();
    test_prefetch();
    test_loading_not_evicted();
    test_wait_for_prefetch();
    test_prefetch_deterministic();
    test_budget_too_small();
    TEST_DONE();
}
