/* slot_pool.c - the GPU expert cache's bookkeeping (see slot_pool.h).
 *
 * Design: key = layer * n_experts + expert; map[key] = slot or -1.  Each slot keeps
 * its key (-1 when empty), pin count and a valid flag.  Unpinned resident slots form
 * a doubly-linked LRU list (head = least recently used); empty unpinned slots a free
 * stack.  A pinned slot is in neither, which is what makes it unevictable.  acquire
 * runs in two passes (pin the hits, then give the misses free or LRU slots) after a
 * capacity check that changes nothing, so a refused acquire leaves the pool as it was.
 *
 * Built into its own static library (v4slotpool), linked by v4core and by the CUDA
 * library: it does not use v4core (it fills v4_error itself).
 * Ownership: the pool owns its arrays.  Thread: one at a time (slot_pool.h).
 */
#include "slot_pool.h"

#include "../../config/byte_suffix.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct slot {
    int key;            /* layer * n_experts + expert, -1 = empty */
    int pins;
    int prev, next;     /* LRU links (or next = free stack link) */
    int valid;          /* the bytes of key are (being) uploaded into the slot */
    int in_lru;
} slot;

struct v4_slot_pool {
    int n_layers, n_experts, n_slots;
    size_t slot_bytes, budget;
    int *map;           /* [n_layers * n_experts] */
    slot *s;            /* [n_slots] */
    int lru_head, lru_tail, n_lru;
    int free_top, n_free;   /* stack through slot.next */
    int n_pinned, n_resident, hw_pinned;
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

v4_slot_pool *v4_slot_pool_create(int n_layers, int n_experts, size_t slot_bytes, size_t budget_bytes, v4_error *err)
{
    if (n_layers <= 0 || n_experts <= 0 || slot_bytes == 0) {
        fail(err, V4_ERR_INVALID, "bad shape: %d layers x %d experts, %zu-byte slots", n_layers, n_experts,
             slot_bytes);
        return NULL;
    }
    if (budget_bytes < slot_bytes) {
        fail(err, V4_ERR_INVALID, "a budget of %zu bytes holds no expert slot of %zu bytes", budget_bytes,
             slot_bytes);
        return NULL;
    }
    const size_t keys = (size_t)n_layers * (size_t)n_experts;
    size_t n = budget_bytes / slot_bytes;
    if (n > keys)
        n = keys;
    v4_slot_pool *p = calloc(1, sizeof *p);
    if (p) {
        p->map = malloc(sizeof(int) * keys);
        p->s = calloc(n, sizeof(slot));
    }
    if (!p || !p->map || !p->s) {
        v4_slot_pool_free(p);
        fail(err, V4_ERR_NOMEM, "out of memory for %zu slots", n);
        return NULL;
    }
    p->n_layers = n_layers;
    p->n_experts = n_experts;
    p->n_slots = (int)n;
    p->slot_bytes = slot_bytes;
    p->budget = budget_bytes;
    for (size_t k = 0; k < keys; k++)
        p->map[k] = -1;
    p->lru_head = p->lru_tail = -1;
    p->free_top = -1;
    for (int i = p->n_slots - 1; i >= 0; i--) {     /* slot 0 on top: slots fill in order */
        p->s[i] = (slot){.key = -1, .prev = -1, .next = p->free_top};
        p->free_top = i;
    }
    p->n_free = p->n_slots;
    return p;
}

void v4_slot_pool_free(v4_slot_pool *p)
{
    if (!p)
        return;
    free(p->map);
    free(p->s);
    free(p);
}

int v4_slot_pool_slots(const v4_slot_pool *p)
{
    return p->n_slots;
}

static void lru_unlink(v4_slot_pool *p, int i)
{
    slot *s = &p->s[i];
    if (s->prev >= 0)
        p->s[s->prev].next = s->next;
    else
        p->lru_head = s->next;
    if (s->next >= 0)
        p->s[s->next].prev = s->prev;
    else
        p->lru_tail = s->prev;
    s->prev = s->next = -1;
    s->in_lru = 0;
    p->n_lru--;
}

static void lru_push_mru(v4_slot_pool *p, int i)
{
    slot *s = &p->s[i];
    s->prev = p->lru_tail;
    s->next = -1;
    if (p->lru_tail >= 0)
        p->s[p->lru_tail].next = i;
    else
        p->lru_head = i;
    p->lru_tail = i;
    s->in_lru = 1;
    p->n_lru++;
}

static void free_push(v4_slot_pool *p, int i)
{
    p->s[i].next = p->free_top;
    p->s[i].prev = -1;
    p->free_top = i;
    p->n_free++;
}

static void pin(v4_slot_pool *p, int i)
{
    if (p->s[i].pins++ == 0) {
        if (p->s[i].in_lru)
            lru_unlink(p, i);
        if (++p->n_pinned > p->hw_pinned)
            p->hw_pinned = p->n_pinned;
    }
}

int v4_slot_pool_acquire(v4_slot_pool *p, int layer, const int *ids, int n, int *slot_out, unsigned char *load,
                         v4_error *err)
{
    if (layer < 0 || layer >= p->n_layers)
        return fail(err, V4_ERR_RANGE, "layer %d out of range (%d layers)", layer, p->n_layers);
    int miss = 0, resident = 0;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= p->n_experts)
            return fail(err, V4_ERR_RANGE, "layer %d: expert %d out of range (%d experts)", layer, ids[i],
                        p->n_experts);
        if (p->map[layer * p->n_experts + ids[i]] < 0)
            miss++;
        else
            resident++;
    }
    /* the resident ones that are unpinned are in the LRU list but get pinned now */
    int resident_unpinned = 0;
    for (int i = 0; i < n; i++) {
        const int k = p->map[layer * p->n_experts + ids[i]];
        resident_unpinned += k >= 0 && p->s[k].pins == 0;
    }
    const int avail = p->n_free + p->n_lru - resident_unpinned;
    if (miss > avail) {
        p->failed++;
        return fail(err, V4_ERR_NOMEM,
                    "layer %d needs %d experts on the GPU (%d resident, %d to load) but only %d of its %d slots "
                    "are free or evictable (%d pinned); the budget of %zu bytes (%zu-byte slots) is too small "
                    "for one step: raise V4_GPU_EXPERT_MEM to at least %zu bytes",
                    layer, n, resident, miss, avail < 0 ? 0 : avail, p->n_slots, p->n_pinned, p->budget,
                    p->slot_bytes, (size_t)(p->n_pinned + n) * p->slot_bytes);
    }
    /* pass 1: hits */
    for (int i = 0; i < n; i++) {
        const int k = p->map[layer * p->n_experts + ids[i]];
        slot_out[i] = k;
        load[i] = 0;
        if (k >= 0) {
            pin(p, k);
            load[i] = !p->s[k].valid;
            if (!p->s[k].valid)
                p->s[k].valid = 1;      /* the caller uploads it now */
        }
    }
    /* pass 2: misses (a repeated id finds the slot its first occurrence took) */
    for (int i = 0; i < n; i++) {
        if (slot_out[i] >= 0)
            continue;
        const int key = layer * p->n_experts + ids[i];
        int k = p->map[key];
        if (k >= 0) {
            pin(p, k);
            slot_out[i] = k;
            continue;
        }
        if (p->n_free > 0) {
            k = p->free_top;
            p->free_top = p->s[k].next;
            p->n_free--;
            p->n_resident++;
        } else {
            k = p->lru_head;        /* avail >= miss guarantees one */
            lru_unlink(p, k);
            p->map[p->s[k].key] = -1;
            p->evictions++;
        }
        p->s[k].key = key;
        p->s[k].valid = 1;
        p->s[k].next = p->s[k].prev = -1;
        p->map[key] = k;
        pin(p, k);
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
        const int k = p->map[key];
        if (k < 0 || p->s[k].pins == 0)
            continue;
        if (--p->s[k].pins > 0)
            continue;
        p->n_pinned--;
        if (p->s[k].valid) {
            lru_push_mru(p, k);
        } else {            /* forgotten: back to the free slots */
            p->map[key] = -1;
            p->s[k].key = -1;
            p->n_resident--;
            free_push(p, k);
        }
    }
}

void v4_slot_pool_forget(v4_slot_pool *p, int k)
{
    if (k >= 0 && k < p->n_slots && p->s[k].key >= 0)
        p->s[k].valid = 0;
}

int v4_slot_pool_lookup(const v4_slot_pool *p, int layer, int id)
{
    if (layer < 0 || layer >= p->n_layers || id < 0 || id >= p->n_experts)
        return -1;
    return p->map[layer * p->n_experts + id];
}

int v4_slot_pool_pins(const v4_slot_pool *p, int k)
{
    return k >= 0 && k < p->n_slots ? p->s[k].pins : 0;
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
        .resident = p->n_resident,
        .pinned = p->n_pinned,
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
