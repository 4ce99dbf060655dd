/* expert_cache.c - the host tier of the expert cache (see expert_cache.h).
 *
 * Design: one mutex guards the policy (xpolicy: key -> slot, pins, eviction order),
 * the slot states, the job ring, the quarantine and the counters.  A slot is FREE,
 * LOADING (a job in the ring or being read by an I/O thread; the job holds one pin,
 * `jpin`, dropped when the read ends - for a prefetch only at its first acquire or its
 * expiry, see expert_cache.h), READY, or FAILED (the read failed; the key is
 * quarantined and the slot is removed from the policy - back to the free list - when
 * its last pin is dropped).  The I/O
 * threads pop slot indices from the ring, read the block into the slot without the
 * lock, then publish READY/FAILED and broadcast `done`.  Acquirers wait on `done`
 * until none of their keys is LOADING; they find their slots again through the
 * policy (a pinned key never moves), so acquire needs no per-call memory.
 *
 * Ownership: the cache owns the arena, the policy, the threads and the quarantine
 * records; the source belongs to the caller.
 * Thread: see expert_cache.h.
 */
#include "expert_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "expert_block.h"

enum { S_FREE = 0, S_LOADING, S_READY, S_FAILED };
#define NBUCKET 256

typedef struct xslot {
    int key;
    unsigned char state;
    unsigned char prefetched;       /* loaded by prefetch, not yet acquired */
    unsigned char jpin;             /* the load's pin (a prefetch's: until acquired or expired) */
} xslot;

struct v4_xcache {
    v4_xsource *src;
    size_t block_bytes, slot_bytes, budget;
    int n_slots, n_layers, n_experts, n_keys;
    unsigned char *arena;
    v4_xpolicy *pol;
    xslot *slots;

    pthread_mutex_t mu;
    pthread_cond_t job_cv, done_cv;
    int *ring, ring_head, ring_n;   /* pending loads (slot indices), capacity n_slots */
    pthread_t *threads;
    int n_threads, stop;

    int *qidx;                      /* [n_keys] index into qerr, -1 = healthy */
    v4_error *qerr;
    int n_q, cap_q;

    v4_xcache_stats st;             /* counters (percentiles/slots filled on read) */
    uint64_t hist[NBUCKET];
};

/* ---- latency histogram: exact below 8 us, then 4 buckets per power of two ---- */

static int lat_bucket(uint64_t us)
{
    if (us < 8)
        return (int)us;
    int msb = 63 - __builtin_clzll(us);
    return 8 + (msb - 3) * 4 + (int)((us >> (msb - 2)) & 3);
}

static uint64_t bucket_hi(int b)
{
    if (b < 8)
        return (uint64_t)b;
    int msb = (b - 8) / 4 + 3, frac = (b - 8) % 4;
    return ((uint64_t)(5 + frac) << (msb - 2)) - 1;
}

static uint64_t hist_pct(const uint64_t *h, uint64_t total, double p)
{
    if (!total)
        return 0;
    uint64_t want = (uint64_t)(p * (double)total + 0.999999), acc = 0;
    if (want < 1)
        want = 1;
    for (int b = 0; b < NBUCKET; b++) {
        acc += h[b];
        if (acc >= want)
            return bucket_hi(b);
    }
    return bucket_hi(NBUCKET - 1);
}

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* ---- helpers (lock held) ---- */

static void note_in_use(v4_xcache *c)
{
    size_t b = (size_t)v4_xpolicy_size(c->pol) * c->slot_bytes;
    if (b > c->st.high_water_bytes)
        c->st.high_water_bytes = b;
}

static void quarantine(v4_xcache *c, int key, const v4_error *e)
{
    if (c->qidx[key] >= 0)
        return;
    if (c->n_q == c->cap_q) {
        int nc = c->cap_q ? 2 * c->cap_q : 8;
        v4_error *q = realloc(c->qerr, sizeof *q * (size_t)nc);
        if (!q)
            return;     /* not recorded: the next acquire simply retries the read */
        c->qerr = q;
        c->cap_q = nc;
    }
    c->qerr[c->n_q] = *e;
    c->qidx[key] = c->n_q++;
}

/* Drop one pin of key; a FAILED slot whose last pin goes is freed. */
static void drop_pin(v4_xcache *c, int key)
{
    int s = v4_xpolicy_lookup(c->pol, key);
    if (s < 0 || v4_xpolicy_unpin(c->pol, key) != 0)
        return;
    if (c->slots[s].state == S_FAILED) {
        v4_xpolicy_remove(c->pol, key);
        c->slots[s].state = S_FREE;
        c->slots[s].key = -1;
    }
}

/* Make key resident in a LOADING slot with the job's pin and queue it; returns 0,
 * or -1 with err when every slot is pinned. */
static int start_load(v4_xcache *c, int key, int prefetched, v4_error *err)
{
    int victim;
    v4_error e = {0};
    int s = v4_xpolicy_insert(c->pol, key, &victim, &e);
    if (s < 0) {
        if (err)
            v4_err_set(err, V4_ERR_RANGE, "expert cache",
                       "host expert cache budget too small: all %d slots (%zu bytes each, budget %zu "
                       "bytes) hold experts in use, none can be evicted for layer %d expert %d",
                       c->n_slots, c->slot_bytes, c->budget, key / c->n_experts, key % c->n_experts);
        return -1;
    }
    if (victim >= 0)
        c->st.evictions++;
    c->slots[s] = (xslot){key, S_LOADING, (unsigned char)prefetched, 1};
    v4_xpolicy_pin(c->pol, key);                       /* the job's pin */
    c->ring[(c->ring_head + c->ring_n++) % c->n_slots] = s;
    pthread_cond_signal(&c->job_cv);
    note_in_use(c);
    return 0;
}

/* ---- I/O threads ---- */

static void *io_main(void *arg)
{
    v4_xcache *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->stop && c->ring_n == 0)
            pthread_cond_wait(&c->job_cv, &c->mu);
        if (c->stop)
            break;
        int s = c->ring[c->ring_head];
        c->ring_head = (c->ring_head + 1) % c->n_slots;
        c->ring_n--;
        int key = c->slots[s].key;
        pthread_mutex_unlock(&c->mu);

        v4_error e = {0};
        uint64_t t0 = now_us();
        int rc = v4_xsource_read(c->src, key / c->n_experts, key % c->n_experts,
                                 c->arena + (size_t)s * c->slot_bytes, &e);
        uint64_t dt = now_us() - t0;

        pthread_mutex_lock(&c->mu);
        if (rc == 0) {
            c->slots[s].state = S_READY;
            c->st.loads++;
            c->st.bytes_read += c->block_bytes;
            c->hist[lat_bucket(dt)]++;
            if (dt > c->st.lat_max_us)
                c->st.lat_max_us = dt;
        } else {
            if (e.code == V4_OK)
                v4_err_set(&e, V4_ERR_IO, c->src->kind, "read of layer %d expert %d failed",
                           key / c->n_experts, key % c->n_experts);
            c->slots[s].state = S_FAILED;
            c->slots[s].prefetched = 0;
            c->st.load_errors++;
            quarantine(c, key, &e);
        }
        if (!c->slots[s].prefetched) {   /* a prefetch keeps its pin until acquired or expired */
            c->slots[s].jpin = 0;
            drop_pin(c, key);
        }
        pthread_cond_broadcast(&c->done_cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* ---- create / destroy ---- */

v4_xcache *v4_xcache_create(v4_xsource *src, const v4_xcache_opts *o, v4_error *err)
{
    if (!src || !o || src->block_bytes == 0 || src->n_layers < 1 || src->n_experts < 1) {
        v4_err_set(err, V4_ERR_INVALID, "expert cache", "no source, or a source without blocks");
        return NULL;
    }
    size_t slot_bytes = (src->block_bytes + V4_XBLOCK_ALIGN - 1) / V4_XBLOCK_ALIGN * V4_XBLOCK_ALIGN;
    size_t n_keys = (size_t)src->n_layers * (size_t)src->n_experts;
    size_t n_slots = o->budget_bytes / slot_bytes;
    if (n_slots == 0) {
        v4_err_set(err, V4_ERR_RANGE, "expert cache",
                   "host cache budget %zu bytes is smaller than one expert block (%zu bytes)",
                   o->budget_bytes, slot_bytes);
        return NULL;
    }
    if (n_slots > n_keys)
        n_slots = n_keys;       /* one slot per expert is all there is to hold */
    if (n_keys > (size_t)1 << 30) {
        v4_err_set(err, V4_ERR_RANGE, "expert cache", "too many experts (%zu)", n_keys);
        return NULL;
    }
    int nt = o->io_threads > 0 ? o->io_threads : V4_XCACHE_DEFAULT_IO_THREADS;
    v4_xcache *c = calloc(1, sizeof *c);
    if (!c) {
        v4_err_set(err, V4_ERR_NOMEM, "expert cache", "out of memory");
        return NULL;
    }
    c->src = src;
    c->block_bytes = src->block_bytes;
    c->slot_bytes = slot_bytes;
    c->budget = o->budget_bytes;
    c->n_slots = (int)n_slots;
    c->n_layers = src->n_layers;
    c->n_experts = src->n_experts;
    c->n_keys = (int)n_keys;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->job_cv, NULL);
    pthread_cond_init(&c->done_cv, NULL);
    v4_xpolicy_params pp = o->policy_params;
    if (pp.slru_protected <= 0)
        pp.slru_protected = -1;
    pp.n_layers = c->n_layers;     /* keys are layer * n_experts + expert (NEXT reads the layer) */
    c->arena = aligned_alloc(V4_XBLOCK_ALIGN, n_slots * slot_bytes);
    c->slots = calloc(n_slots, sizeof *c->slots);
    c->ring = malloc(sizeof(int) * n_slots);
    c->qidx = malloc(sizeof(int) * n_keys);
    c->threads = calloc((size_t)nt, sizeof(pthread_t));
    if (!c->arena || !c->slots || !c->ring || !c->qidx || !c->threads) {
        v4_err_set(err, V4_ERR_NOMEM, "expert cache", "cannot allocate %zu slots of %zu bytes",
                   n_slots, slot_bytes);
        v4_xcache_destroy(c);
        return NULL;
    }
    if (!(c->pol = v4_xpolicy_create(o->policy, c->n_slots, c->n_keys, &pp, err))) {
        v4_xcache_destroy(c);
        return NULL;
    }
    for (size_t k = 0; k < n_keys; k++)
        c->qidx[k] = -1;
    for (size_t s = 0; s < n_slots; s++)
        c->slots[s].key = -1;
    for (int i = 0; i < nt; i++) {
        if (pthread_create(&c->threads[i], NULL, io_main, c)) {
            v4_err_set(err, V4_ERR_INTERNAL, "expert cache", "cannot start I/O thread %d", i);
            v4_xcache_destroy(c);
            return NULL;
        }
        c->n_threads++;
    }
    return c;
}

void v4_xcache_destroy(v4_xcache *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_broadcast(&c->job_cv);
    pthread_mutex_unlock(&c->mu);
    for (int i = 0; i < c->n_threads; i++)
        pthread_join(c->threads[i], NULL);
    pthread_cond_destroy(&c->job_cv);
    pthread_cond_destroy(&c->done_cv);
    pthread_mutex_destroy(&c->mu);
    v4_xpolicy_free(c->pol);
    free(c->arena);
    free(c->slots);
    free(c->ring);
    free(c->qidx);
    free(c->qerr);
    free(c->threads);
    free(c);
}

/* ---- acquire / release / prefetch ---- */

/* Slots whose block is being read (each holds its load job's pin). */
static int loads_in_flight(const v4_xcache *c)
{
    for (int s = 0; s < c->n_slots; s++)
        if (c->slots[s].state == S_LOADING)
            return 1;
    return 0;
}

/* 1 if a miss could get a slot now (a free slot or an unpinned victim). */
static int slot_available(const v4_xcache *c)
{
    int size = v4_xpolicy_size(c->pol);
    return size < v4_xpolicy_capacity(c->pol) || v4_xpolicy_pinned(c->pol) < size;
}

/* Expire the prefetched blocks not acquired yet (layer < 0: of every layer): wait for
 * their reads, then drop their prefetch pins (they become ordinary entries). */
static void expire_prefetched(v4_xcache *c, int layer)
{
    for (int s = 0; s < c->n_slots; s++) {
        while (c->slots[s].prefetched && c->slots[s].state == S_LOADING &&
               (layer < 0 || c->slots[s].key / c->n_experts == layer))
            pthread_cond_wait(&c->done_cv, &c->mu);
        xslot *x = &c->slots[s];
        if (!x->prefetched || (layer >= 0 && x->key / c->n_experts != layer))
            continue;
        x->prefetched = 0;
        c->st.prefetch_expired++;
        if (x->jpin) {
            x->jpin = 0;
            drop_pin(c, x->key);
        }
    }
}

/* A first acquire of a prefetched block in slot s (its pin taken already): the prefetch
 * pin goes now, or when the read ends if it is still loading. */
static void claim_prefetched(v4_xcache *c, int s)
{
    c->slots[s].prefetched = 0;
    c->st.prefetch_hits++;
    if (c->slots[s].state != S_LOADING && c->slots[s].jpin) {
        c->slots[s].jpin = 0;
        drop_pin(c, c->slots[s].key);
    }
}

static int check_ids(const v4_xcache *c, int layer, const int *ids, int n, v4_error *err)
{
    if (layer < 0 || layer >= c->n_layers || n < 0 || (n > 0 && !ids))
        return v4_err_set(err, V4_ERR_INVALID, "expert cache", "bad layer %d or expert list (n = %d)",
                          layer, n);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= c->n_experts)
            return v4_err_set(err, V4_ERR_RANGE, "expert cache", "layer %d: expert id %d out of range [0, %d)",
                              layer, ids[i], c->n_experts);
    return 0;
}

int v4_xcache_acquire(v4_xcache *c, int layer, const int *ids, int n, const void **blocks_out,
                      v4_error *err)
{
    return v4_xcache_acquire_ex(c, layer, ids, n, blocks_out, NULL, err);
}

int v4_xcache_acquire_ex(v4_xcache *c, int layer, const int *ids, int n, const void **blocks_out,
                         unsigned char *outcome, v4_error *err)
{
    if (check_ids(c, layer, ids, n, err))
        return -1;
    if (n > c->n_slots)
        return v4_err_set(err, V4_ERR_RANGE, "expert cache",
                          "host expert cache budget too small: layer %d needs %d experts at once, the "
                          "budget of %zu bytes holds %d slots of %zu bytes",
                          layer, n, c->budget, c->n_slots, c->slot_bytes);
    int base = layer * c->n_experts, rc = 0;
    pthread_mutex_lock(&c->mu);
    int i;
    for (i = 0; i < n; i++) {
        int key = base + ids[i];
        if (c->qidx[key] >= 0) {
            if (err)
                *err = c->qerr[c->qidx[key]];
            break;
        }
        int s = v4_xpolicy_touch(c->pol, key);
        /* Every slot pinned: first the prefetches not acquired yet expire (they become
         * evictable once read); then, if loads of other callers are in flight, they will
         * finish without any acquirer's help and become evictable, so wait for them and
         * retry; fail only when no load is left. */
        if (s < 0 && !slot_available(c)) {
            expire_prefetched(c, -1);
            s = v4_xpolicy_touch(c->pol, key);
        }
        while (s < 0 && !slot_available(c) && loads_in_flight(c)) {
            pthread_cond_wait(&c->done_cv, &c->mu);
            s = v4_xpolicy_touch(c->pol, key);
        }
        unsigned char out = V4_XOUT_HIT;
        if (s >= 0) {
            c->st.hits++;
            if (c->slots[s].state == S_LOADING)
                c->st.inflight_waits++;
            v4_xpolicy_pin(c->pol, key);
            if (c->slots[s].prefetched) {
                claim_prefetched(c, s);
                out = V4_XOUT_PREFETCHED;
            }
        } else {
            if (start_load(c, key, 0, err))
                break;
            c->st.misses++;
            v4_xpolicy_pin(c->pol, key);
            out = V4_XOUT_MISS;
        }
        if (outcome)
            outcome[i] = out;
    }
    if (i < n) {                    /* undo the pins taken so far */
        for (int j = 0; j < i; j++)
            drop_pin(c, base + ids[j]);
        pthread_mutex_unlock(&c->mu);
        return -1;
    }
    for (;;) {
        int loading = 0;
        for (i = 0; i < n && !loading; i++)
            loading = c->slots[v4_xpolicy_lookup(c->pol, base + ids[i])].state == S_LOADING;
        if (!loading)
            break;
        pthread_cond_wait(&c->done_cv, &c->mu);
    }
    for (i = 0; i < n; i++) {
        int s = v4_xpolicy_lookup(c->pol, base + ids[i]);
        if (c->slots[s].state == S_FAILED && rc == 0) {
            rc = -1;
            int q = c->qidx[base + ids[i]];
            if (err && q >= 0)
                *err = c->qerr[q];
            else
                v4_err_set(err, V4_ERR_IO, "expert cache", "load of layer %d expert %d failed", layer, ids[i]);
        }
        blocks_out[i] = c->arena + (size_t)s * c->slot_bytes;
    }
    if (rc) {
        for (i = 0; i < n; i++) {
            drop_pin(c, base + ids[i]);
            blocks_out[i] = NULL;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

void v4_xcache_release(v4_xcache *c, int layer, const int *ids, int n)
{
    if (check_ids(c, layer, ids, n, NULL))
        return;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < n; i++)
        drop_pin(c, layer * c->n_experts + ids[i]);
    pthread_mutex_unlock(&c->mu);
}

void v4_xcache_prefetch(v4_xcache *c, int layer, const int *ids, int n)
{
    if (check_ids(c, layer, ids, n, NULL))
        return;
    pthread_mutex_lock(&c->mu);
    expire_prefetched(c, layer);   /* the last step's prefetches of this layer that were not used */
    for (int i = 0; i < n; i++) {
        int key = layer * c->n_experts + ids[i];
        if (c->qidx[key] >= 0 || v4_xpolicy_lookup(c->pol, key) >= 0)
            continue;
        if (start_load(c, key, 1, NULL))
            c->st.prefetch_dropped++;
        else
            c->st.prefetch_issued++;
    }
    pthread_mutex_unlock(&c->mu);
}

/* ---- stats ---- */

void v4_xcache_stats_get(v4_xcache *c, v4_xcache_stats *st)
{
    pthread_mutex_lock(&c->mu);
    *st = c->st;
    st->lat_p50_us = hist_pct(c->hist, c->st.loads, 0.50);
    st->lat_p90_us = hist_pct(c->hist, c->st.loads, 0.90);
    st->lat_p99_us = hist_pct(c->hist, c->st.loads, 0.99);
    st->slots = c->n_slots;
    st->slots_in_use = v4_xpolicy_size(c->pol);
    st->slots_pinned = v4_xpolicy_pinned(c->pol);
    st->quarantined = c->n_q;
    st->slot_bytes = c->slot_bytes;
    st->budget_bytes = c->budget;
    st->in_use_bytes = (size_t)st->slots_in_use * c->slot_bytes;
    pthread_mutex_unlock(&c->mu);
}

void v4_xcache_stats_reset(v4_xcache *c)
{
    pthread_mutex_lock(&c->mu);
    memset(&c->st, 0, sizeof c->st);
    memset(c->hist, 0, sizeof c->hist);
    c->st.high_water_bytes = (size_t)v4_xpolicy_size(c->pol) * c->slot_bytes;
    pthread_mutex_unlock(&c->mu);
}
