/* slot_pool.c - the GPU expert cache's bookkeeping (see slot_pool.h).
 *
 * Design: the eviction policy is the shared one (kernels/xpolicy.h, the host expert
 * cache's): key = layer * n_experts + expert, the policy's slot index is the pool's
 * slot, its pin counts are the pool's, and its victim choice is the pool's eviction.
 * Kept here: a valid flag per slot (a forgotten upload), the counters, and the
 * two-pass acquire: a capacity check that changes nothing (the misses must fit in the
 * free slots plus the unpinned resident ones not asked for), then pass 1 pins the hits
 * and pass 2 inserts and pins the misses, so a refused acquire leaves the pool (and the
 * policy) as it was.
 *
 * Built into v4engine (the engine library, linked by the CUDA library): plain C, no
 * CUDA.  Ownership: the pool owns its arrays and its policy.  Thread: one at a time
 * (slot_pool.h).
 */
#include "slot_pool.h"

#include "../../config/byte_suffix.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct v4_slot_pool {
    int n_layers, n_experts, n_slots;
    v4_xpolicy_kind kind;
    size_t slot_bytes, budget;
    v4_xpolicy *pol;            /* key -> slot, pins, eviction order */
    unsigned char *valid;       /* [n_slots] the bytes of its key are (being) uploaded */
    int hw_pinned;
    uint64_t hits, misses, evictions, uploaded, failed;
};

__attribute__((format(printf, 3, 4))) static int fail(v4_error *err, v4_errcode code, const char *fmt, ...)
{
    if (err) {
        err->code = code;
        snprintf(err->where, sizeof err->where, "GPU expert cache");
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

v4_slot_pool *v4_slot_pool_create(int n_layers, int n_experts, size_t slot_bytes, size_t budget_bytes,
                                  v4_xpolicy_kind policy, v4_error *err)
{
    if (n_layers <= 0 || n_experts <= 0 || slot_bytes == 0) {
        fail(err, V4_ERR_INVALID, "bad shape: %d layers x %d experts, %zu-byte slots", n_layers, n_experts,
             slot_bytes);
        return NULL;
    }
    if (policy < 0 || policy >= V4_XPOL_COUNT) {
        fail(err, V4_ERR_INVALID, "unknown eviction policy %d", (int)policy);
        return NULL;
    }
    if (budget_bytes < slot_bytes) {
        fail(err, V4_ERR_INVALID, "a budget of %zu bytes holds no expert slot of %zu bytes", budget_bytes,
             slot_bytes);
        return NULL;
    }
    const size_t keys = (size_t)n_layers * (size_t)n_experts;
    if (keys > (size_t)1 << 30) {
        fail(err, V4_ERR_INVALID, "bad shape: %d layers x %d experts is too many keys", n_layers, n_experts);
        return NULL;
    }
    size_t n = budget_bytes / slot_bytes;
    if (n > keys)
        n = keys;
    v4_slot_pool *p = calloc(1, sizeof *p);
    if (p)
        p->valid = calloc(n, 1);
    if (!p || !p->valid) {
        v4_slot_pool_free(p);
        fail(err, V4_ERR_NOMEM, "out of memory for %zu slots", n);
        return NULL;
    }
    const v4_xpolicy_params pp = {.slru_protected = -1, .lfru_age_period = 0, .n_layers = n_layers};
    v4_error e = {0};
    if (!(p->pol = v4_xpolicy_create(policy, (int)n, (int)keys, &pp, &e))) {
        v4_slot_pool_free(p);
        fail(err, e.code, "%s policy: %s", v4_xpolicy_name(policy), e.msg);
        return NULL;
    }
    p->n_layers = n_layers;
    p->n_experts = n_experts;
    p->n_slots = (int)n;
    p->kind = policy;
    p->slot_bytes = slot_bytes;
    p->budget = budget_bytes;
    return p;
}

void v4_slot_pool_free(v4_slot_pool *p)
{
    if (!p)
        return;
    v4_xpolicy_free(p->pol);
    free(p->valid);
    free(p);
}

int v4_slot_pool_slots(const v4_slot_pool *p)
{
    return p->n_slots;
}

v4_xpolicy_kind v4_slot_pool_policy(const v4_slot_pool *p)
{
    return p->kind;
}

static void pin(v4_slot_pool *p, int key)
{
    v4_xpolicy_pin(p->pol, key);
    const int pinned = v4_xpolicy_pinned(p->pol);
    if (pinned > p->hw_pinned)
        p->hw_pinned = pinned;
}

int v4_slot_pool_acquire(v4_slot_pool *p, int layer, const int *ids, int n, int *slot_out, unsigned char *load,
                         v4_error *err)
{
    if (layer < 0 || layer >= p->n_layers)
        return fail(err, V4_ERR_RANGE, "layer %d out of range (%d layers)", layer, p->n_layers);
    const int base = layer * p->n_experts;
    int miss = 0, resident = 0, resident_unpinned = 0;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= p->n_experts)
            return fail(err, V4_ERR_RANGE, "layer %d: expert %d out of range (%d experts)", layer, ids[i],
                        p->n_experts);
        const int pins = v4_xpolicy_pins(p->pol, base + ids[i]);
        if (pins < 0) {
            miss++;
        } else {
            resident++;
            resident_unpinned += pins == 0;     /* evictable now, but pinned by this acquire */
        }
    }
    const int n_pinned = v4_xpolicy_pinned(p->pol);
    const int avail = p->n_slots - n_pinned - resident_unpinned;
    if (miss > avail) {
        p->failed++;
        return fail(err, V4_ERR_NOMEM,
                    "layer %d needs %d experts on the GPU (%d resident, %d to load) but only %d of its %d slots "
                    "are free or evictable (%d pinned); the budget of %zu bytes (%zu-byte slots) is too small "
                    "for one step: raise V4_GPU_EXPERT_MEM to at least %zu bytes",
                    layer, n, resident, miss, avail < 0 ? 0 : avail, p->n_slots, n_pinned, p->budget,
                    p->slot_bytes, (size_t)(n_pinned + n) * p->slot_bytes);
    }
    /* pass 1: hits (touched, so the policy sees the use, then pinned) */
    for (int i = 0; i < n; i++) {
        const int key = base + ids[i];
        const int k = v4_xpolicy_touch(p->pol, key);
        slot_out[i] = k;
        load[i] = 0;
        if (k >= 0) {
            pin(p, key);
            load[i] = !p->valid[k];
            p->valid[k] = 1;            /* a forgotten slot: the caller uploads it now */
        }
    }
    /* pass 2: misses (a repeated id finds the slot its first occurrence took) */
    for (int i = 0; i < n; i++) {
        if (slot_out[i] >= 0)
            continue;
        const int key = base + ids[i];
        int k = v4_xpolicy_lookup(p->pol, key);
        if (k >= 0) {
            v4_xpolicy_touch(p->pol, key);
            pin(p, key);
            slot_out[i] = k;
            continue;
        }
        int victim = -1;
        v4_error e = {0};
        k = v4_xpolicy_insert(p->pol, key, &victim, &e);
        if (k < 0)      /* the capacity check above rules this out */
            return fail(err, V4_ERR_INTERNAL, "layer %d expert %d: %s (the pool is inconsistent)", layer, ids[i],
                        e.msg);
        if (victim >= 0)
            p->evictions++;
        p->valid[k] = 1;
        pin(p, key);
        slot_out[i] = k;
        load[i] = 1;
    }
    for (int i = 0; i < n; i++) {
        if (load[i])
            p->misses++;
        else
            p->hits++;
    }
    return 0;
}

void v4_slot_pool_release(v4_slot_pool *p, int layer, const int *ids, int n)
{
    if (layer < 0 || layer >= p->n_layers)
        return;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= p->n_experts)
            continue;
        const int key = layer * p->n_experts + ids[i];
        const int k = v4_xpolicy_lookup(p->pol, key);
        if (k < 0 || v4_xpolicy_pins(p->pol, key) <= 0)
            continue;
        if (v4_xpolicy_unpin(p->pol, key) > 0)
            continue;
        if (!p->valid[k])           /* forgotten: back to the free slots */
            v4_xpolicy_remove(p->pol, key);
    }
}

void v4_slot_pool_forget(v4_slot_pool *p, int k)
{
    if (k >= 0 && k < p->n_slots && v4_xpolicy_key_of(p->pol, k) >= 0)
        p->valid[k] = 0;
}

int v4_slot_pool_lookup(const v4_slot_pool *p, int layer, int id)
{
    if (layer < 0 || layer >= p->n_layers || id < 0 || id >= p->n_experts)
        return -1;
    return v4_xpolicy_lookup(p->pol, layer * p->n_experts + id);
}

int v4_slot_pool_pins(const v4_slot_pool *p, int k)
{
    const int key = v4_xpolicy_key_of(p->pol, k);
    return key >= 0 ? v4_xpolicy_pins(p->pol, key) : 0;
}

void v4_slot_pool_add_uploaded(v4_slot_pool *p, uint64_t bytes)
{
    p->uploaded += bytes;
}

void v4_slot_pool_stats_get(const v4_slot_pool *p, v4_slot_pool_stats *st)
{
    *st = (v4_slot_pool_stats){
        .hits = p->hits,
        .misses = p->misses,
        .evictions = p->evictions,
        .bytes_uploaded = p->uploaded,
        .failed_acquires = p->failed,
        .budget_bytes = p->budget,
        .slot_bytes = p->slot_bytes,
        .pool_bytes = (size_t)p->n_slots * p->slot_bytes,
        .slots = p->n_slots,
        .resident = v4_xpolicy_size(p->pol),
        .pinned = v4_xpolicy_pinned(p->pol),
        .high_water_pinned = p->hw_pinned,
    };
}

int v4_slot_pool_budget_parse(const char *s, uint64_t total_bytes, const char *what, size_t *out, v4_error *err)
{
    if (!what)
        what = "V4_GPU_EXPERT_MEM";
    double bytes;
    if (v4_parse_budget(s, total_bytes, &bytes))
        goto bad;
    *out = (size_t)bytes;
    if (*out == 0) {
        if (err) {
            fail(err, V4_ERR_CONFIG, "'%s' is a budget of 0 bytes", s);
            snprintf(err->where, sizeof err->where, "%s", what);
        }
        return -1;
    }
    return 0;
bad:
    if (err) {
        fail(err, V4_ERR_CONFIG, "'%s' is not a byte count (e.g. 12G, 512M) or a percentage of the routed "
             "experts' bytes (e.g. 85%%)", s ? s : "");
        snprintf(err->where, sizeof err->where, "%s", what);
    }
    return -1;
}
