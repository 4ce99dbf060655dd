/* xpolicy.c - LRU, SLRU and LFRU eviction over dense integer keys (see xpolicy.h
 * for the exact rules).
 *
 * Design: entries are indexed by slot.  key2slot[] maps a key to its slot (-1 absent);
 * free slots form a stack.  LRU and SLRU keep intrusive doubly linked lists over slot
 * indices (head = most recent); LFRU keeps a binary min-heap of slots ordered by
 * (count[key], time[slot]); NEXT one such heap per layer (in lheap, layer l's at
 * l * keys-per-layer: a layer never holds more keys than that) and a victim is the best
 * of the layers' roots.  Pinned entries are taken out of the list/heap, so the
 * victim is always the list tail / heap root: O(1) / O(log n) / O(L + log n).
 *
 * Ownership: everything is owned by the v4_xpolicy and allocated in create.
 * Thread: single-threaded (the caller locks).
 */
#include "xpolicy.h"

#include <stdlib.h>
#include <string.h>

enum { L_MAIN = 0, L_PROB = 0, L_PROT = 1, L_NONE = -1 };

struct v4_xpolicy {
    v4_xpolicy_kind kind;
    int cap, n_keys;
    int *key2slot;          /* [n_keys] */
    int *slot_key;          /* [cap] -1 = free */
    int *pins;              /* [cap] */
    int *free_stack, n_free;
    int n_pinned;
    /* lists (LRU: list 0; SLRU: 0 probation, 1 protected) */
    int *prev, *next;       /* [cap] */
    signed char *in_list;   /* [cap] list id or L_NONE */
    signed char *seg;       /* [cap] SLRU segment of the entry (also while pinned) */
    int head[2], tail[2];
    int n_prot, prot_cap;
    /* LFRU */
    uint32_t *count;        /* [n_keys] */
    uint64_t *time;         /* [cap] */
    int *heap, *heap_pos;   /* heap of slots; heap_pos[slot] = index or -1 */
    int heap_n;
    uint64_t clock;
    int64_t age_period, since_age;
    /* NEXT */
    int n_layers, per_layer;
    int *lheap, *lheap_n;   /* [n_keys], [n_layers] */
    uint32_t *visits;       /* [n_layers] */
    int cur_layer;          /* layer of the latest access, -1 before the first */
};

const char *v4_xpolicy_name(v4_xpolicy_kind kind)
{
    switch (kind) {
    case V4_XPOL_LRU: return "lru";
    case V4_XPOL_SLRU: return "slru";
    case V4_XPOL_LFRU: return "lfru";
    case V4_XPOL_NEXT: return "next";
    default: return "?";
    }
}

int v4_xpolicy_parse(const char *name, v4_xpolicy_kind *kind)
{
    for (int k = 0; k < V4_XPOL_COUNT; k++)
        if (!strcmp(name, v4_xpolicy_name((v4_xpolicy_kind)k))) {
            *kind = (v4_xpolicy_kind)k;
            return 0;
        }
    return -1;
}

/* ---- lists ---- */

static void list_unlink(v4_xpolicy *p, int s)
{
    int l = p->in_list[s];
    if (l == L_NONE)
        return;
    if (p->prev[s] >= 0) p->next[p->prev[s]] = p->next[s]; else p->head[l] = p->next[s];
    if (p->next[s] >= 0) p->prev[p->next[s]] = p->prev[s]; else p->tail[l] = p->prev[s];
    p->prev[s] = p->next[s] = -1;
    p->in_list[s] = L_NONE;
}

static void list_push_head(v4_xpolicy *p, int l, int s)
{
    p->prev[s] = -1;
    p->next[s] = p->head[l];
    if (p->head[l] >= 0) p->prev[p->head[l]] = s; else p->tail[l] = s;
    p->head[l] = s;
    p->in_list[s] = (signed char)l;
}

/* ---- LFRU heap ---- */

static int heap_less(const v4_xpolicy *p, int a, int b)
{
    uint32_t ca = p->count[p->slot_key[a]], cb = p->count[p->slot_key[b]];
    if (ca != cb)
        return ca < cb;
    return p->time[a] < p->time[b];
}

/* A heap of slots: LFRU's one (p->heap) or a NEXT layer's. */
typedef struct heap_ref {
    int *h, *n;
} heap_ref;

/* NEXT: layer l's heap. */
static heap_ref layer_heap(const v4_xpolicy *p, int l)
{
    return (heap_ref){p->lheap + (size_t)l * (size_t)p->per_layer, &p->lheap_n[l]};
}

/* The heap slot s is (or goes) in. */
static heap_ref heap_of(v4_xpolicy *p, int s)
{
    if (p->kind != V4_XPOL_NEXT)
        return (heap_ref){p->heap, &p->heap_n};
    return layer_heap(p, p->slot_key[s] / p->per_layer);
}

static void heap_set(v4_xpolicy *p, heap_ref H, int i, int s)
{
    H.h[i] = s;
    p->heap_pos[s] = i;
}

static void heap_up(v4_xpolicy *p, heap_ref H, int i)
{
    int s = H.h[i];
    while (i > 0) {
        int par = (i - 1) / 2;
        if (!heap_less(p, s, H.h[par]))
            break;
        heap_set(p, H, i, H.h[par]);
        i = par;
    }
    heap_set(p, H, i, s);
}

static void heap_down(v4_xpolicy *p, heap_ref H, int i)
{
    int s = H.h[i];
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *H.n)
            break;
        if (c + 1 < *H.n && heap_less(p, H.h[c + 1], H.h[c]))
            c++;
        if (!heap_less(p, H.h[c], s))
            break;
        heap_set(p, H, i, H.h[c]);
        i = c;
    }
    heap_set(p, H, i, s);
}

static void heap_push(v4_xpolicy *p, int s)
{
    heap_ref H = heap_of(p, s);
    heap_set(p, H, (*H.n)++, s);
    heap_up(p, H, *H.n - 1);
}

static void heap_del(v4_xpolicy *p, int s)
{
    int i = p->heap_pos[s];
    if (i < 0)
        return;
    heap_ref H = heap_of(p, s);
    p->heap_pos[s] = -1;
    int last = H.h[--(*H.n)];
    if (i == *H.n)
        return;
    heap_set(p, H, i, last);
    heap_up(p, H, i);
    heap_down(p, H, p->heap_pos[last]);
}

static void heap_rebuild(v4_xpolicy *p, heap_ref H)
{
    for (int i = *H.n / 2 - 1; i >= 0; i--)
        heap_down(p, H, i);
}

static void lfru_count(v4_xpolicy *p, int key)
{
    if (p->count[key] < UINT32_MAX)
        p->count[key]++;
    if (++p->since_age >= p->age_period) {
        p->since_age = 0;
        for (int k = 0; k < p->n_keys; k++)
            p->count[k] /= 2;
        /* Halving keeps count order but can create ties that the time now breaks
         * differently: rebuild the heaps (O(cap), amortized O(1) as age_period >= cap). */
        if (p->kind == V4_XPOL_NEXT) {
            for (int l = 0; l < p->n_layers; l++) {
                p->visits[l] /= 2;
                heap_rebuild(p, layer_heap(p, l));
            }
        } else {
            heap_rebuild(p, (heap_ref){p->heap, &p->heap_n});
        }
    }
}

/* NEXT: an access to key; a new visit of its layer when the previous access was to
 * another layer. */
static void next_note(v4_xpolicy *p, int key)
{
    int l = key / p->per_layer;
    if (l != p->cur_layer && p->visits[l] < UINT32_MAX)
        p->visits[l]++;
    p->cur_layer = l;
}

/* NEXT's victim: the layers' heap roots compared by expected next use (xpolicy.h). */
static int next_victim(const v4_xpolicy *p)
{
    const int L = p->n_layers;
    int best = -1, best_d = 0;
    double best_e = -1.0;
    for (int l = 0; l < L; l++) {
        const heap_ref H = layer_heap(p, l);
        if (!*H.n)
            continue;
        int s = H.h[0];
        uint32_t c = p->count[p->slot_key[s]];
        int d = p->cur_layer < 0 ? L : (l - p->cur_layer + L) % L;
        if (d == 0)
            d = L;
        double e = c == 0 ? 1e300 : (double)d + (double)L * ((double)p->visits[l] / (double)c - 1.0);
        if (e < d)
            e = d;
        int better = best < 0 || e > best_e;
        if (!better && e == best_e) {
            uint32_t cb = p->count[p->slot_key[best]];
            better = d > best_d || (d == best_d && (c < cb || (c == cb && p->time[s] < p->time[best])));
        }
        if (better) {
            best = s;
            best_e = e;
            best_d = d;
        }
    }
    return best;
}

/* ---- create / free ---- */

v4_xpolicy *v4_xpolicy_create(v4_xpolicy_kind kind, int capacity, int n_keys,
                              const v4_xpolicy_params *params, v4_error *err)
{
    if (kind < 0 || kind >= V4_XPOL_COUNT || capacity < 1 || n_keys < 1) {
        v4_err_set(err, V4_ERR_INVALID, "xpolicy", "bad policy %d / capacity %d / key count %d",
                   (int)kind, capacity, n_keys);
        return NULL;
    }
    const int n_layers = params && params->n_layers > 0 ? params->n_layers : 1;
    if (kind == V4_XPOL_NEXT && n_keys % n_layers != 0) {
        v4_err_set(err, V4_ERR_INVALID, "xpolicy", "next: %d keys are not a multiple of %d layers", n_keys,
                   n_layers);
        return NULL;
    }
    v4_xpolicy *p = calloc(1, sizeof *p);
    size_t c = (size_t)capacity;
    if (p) {
        p->kind = kind;
        p->cap = capacity;
        p->n_keys = n_keys;
        p->key2slot = malloc(sizeof(int) * (size_t)n_keys);
        p->slot_key = malloc(sizeof(int) * c);
        p->pins = calloc(c, sizeof(int));
        p->free_stack = malloc(sizeof(int) * c);
        p->prev = malloc(sizeof(int) * c);
        p->next = malloc(sizeof(int) * c);
        p->in_list = malloc(c);
        p->seg = calloc(c, 1);
        p->count = calloc((size_t)n_keys, sizeof(uint32_t));
        p->time = calloc(c, sizeof(uint64_t));
        p->heap = malloc(sizeof(int) * c);
        p->heap_pos = malloc(sizeof(int) * c);
        p->n_layers = n_layers;
        p->per_layer = n_keys / n_layers;
        if (kind == V4_XPOL_NEXT) {
            p->lheap = malloc(sizeof(int) * (size_t)n_keys);
            p->lheap_n = calloc((size_t)n_layers, sizeof(int));
            p->visits = calloc((size_t)n_layers, sizeof(uint32_t));
        }
    }
    if (!p || !p->key2slot || !p->slot_key || !p->pins || !p->free_stack || !p->prev || !p->next ||
        !p->in_list || !p->seg || !p->count || !p->time || !p->heap || !p->heap_pos ||
        (kind == V4_XPOL_NEXT && (!p->lheap || !p->lheap_n || !p->visits))) {
        v4_xpolicy_free(p);
        v4_err_set(err, V4_ERR_NOMEM, "xpolicy", "out of memory for %d slots / %d keys", capacity, n_keys);
        return NULL;
    }
    for (int k = 0; k < n_keys; k++)
        p->key2slot[k] = -1;
    for (int s = 0; s < capacity; s++) {
        p->slot_key[s] = -1;
        p->free_stack[s] = capacity - 1 - s;   /* slot 0 is handed out first */
        p->prev[s] = p->next[s] = -1;
        p->in_list[s] = L_NONE;
        p->heap_pos[s] = -1;
    }
    p->n_free = capacity;
    p->cur_layer = -1;
    p->head[0] = p->head[1] = p->tail[0] = p->tail[1] = -1;
    int dflt_prot = capacity - (capacity / 5 > 1 ? capacity / 5 : 1);
    p->prot_cap = params && params->slru_protected >= 0 ? params->slru_protected : dflt_prot;
    if (p->prot_cap > capacity)
        p->prot_cap = capacity;
    p->age_period = params && params->lfru_age_period > 0 ? params->lfru_age_period : 16 * (int64_t)n_keys;
    return p;
}

void v4_xpolicy_free(v4_xpolicy *p)
{
    if (!p)
        return;
    free(p->key2slot); free(p->slot_key); free(p->pins); free(p->free_stack);
    free(p->prev); free(p->next); free(p->in_list); free(p->seg);
    free(p->count); free(p->time); free(p->heap); free(p->heap_pos);
    free(p->lheap); free(p->lheap_n); free(p->visits);
    free(p);
}

/* ---- queries ---- */

int v4_xpolicy_lookup(const v4_xpolicy *p, int key)
{
    return key >= 0 && key < p->n_keys ? p->key2slot[key] : -1;
}

int v4_xpolicy_pins(const v4_xpolicy *p, int key)
{
    int s = v4_xpolicy_lookup(p, key);
    return s < 0 ? -1 : p->pins[s];
}

int v4_xpolicy_size(const v4_xpolicy *p) { return p->cap - p->n_free; }
int v4_xpolicy_pinned(const v4_xpolicy *p) { return p->n_pinned; }
int v4_xpolicy_capacity(const v4_xpolicy *p) { return p->cap; }

int v4_xpolicy_key_of(const v4_xpolicy *p, int slot)
{
    return slot >= 0 && slot < p->cap ? p->slot_key[slot] : -1;
}

static int victim_slot(const v4_xpolicy *p)
{
    switch (p->kind) {
    case V4_XPOL_LRU: return p->tail[L_MAIN];
    case V4_XPOL_SLRU: return p->tail[L_PROB] >= 0 ? p->tail[L_PROB] : p->tail[L_PROT];
    case V4_XPOL_NEXT: return next_victim(p);
    default: return p->heap_n ? p->heap[0] : -1;
    }
}

int v4_xpolicy_peek_victim(const v4_xpolicy *p)
{
    if (p->n_free)
        return -1;
    int s = victim_slot(p);
    return s < 0 ? -1 : p->slot_key[s];
}

/* ---- (re)entering the eviction order: the entry is unpinned and resident ---- */

static void slru_enforce_prot(v4_xpolicy *p)
{
    while (p->n_prot > p->prot_cap && p->tail[L_PROT] >= 0) {
        int d = p->tail[L_PROT];
        list_unlink(p, d);
        p->seg[d] = L_PROB;
        p->n_prot--;
        list_push_head(p, L_PROB, d);
    }
}

static void order_enter(v4_xpolicy *p, int s)
{
    switch (p->kind) {
    case V4_XPOL_LRU: list_push_head(p, L_MAIN, s); break;
    case V4_XPOL_SLRU: list_push_head(p, p->seg[s], s); break;
    default: p->time[s] = ++p->clock; heap_push(p, s); break;
    }
}

static void order_leave(v4_xpolicy *p, int s)
{
    if (p->kind == V4_XPOL_LFRU || p->kind == V4_XPOL_NEXT)
        heap_del(p, s);
    else
        list_unlink(p, s);
}

/* ---- operations ---- */

int v4_xpolicy_touch(v4_xpolicy *p, int key)
{
    int s = v4_xpolicy_lookup(p, key);
    if (s < 0)
        return -1;
    int pinned = p->pins[s] > 0;
    switch (p->kind) {
    case V4_XPOL_LRU:
        if (!pinned) {
            list_unlink(p, s);
            list_push_head(p, L_MAIN, s);
        }
        break;
    case V4_XPOL_SLRU:
        if (!pinned)
            list_unlink(p, s);
        if (p->seg[s] == L_PROB && p->prot_cap > 0) {
            p->seg[s] = L_PROT;
            p->n_prot++;
        }
        if (!pinned)
            list_push_head(p, p->seg[s], s);
        slru_enforce_prot(p);
        break;
    default:
        if (!pinned)
            heap_del(p, s);
        if (p->kind == V4_XPOL_NEXT)
            next_note(p, key);
        lfru_count(p, key);
        if (!pinned) {
            p->time[s] = ++p->clock;
            heap_push(p, s);
        }
        break;
    }
    return s;
}

int v4_xpolicy_insert(v4_xpolicy *p, int key, int *victim, v4_error *err)
{
    *victim = -1;
    if (key < 0 || key >= p->n_keys || p->key2slot[key] >= 0)
        return v4_err_set(err, V4_ERR_INVALID, "xpolicy", "insert of key %d: %s", key,
                          key < 0 || key >= p->n_keys ? "out of range" : "already resident");
    if (p->kind == V4_XPOL_NEXT)
        next_note(p, key);      /* the victim is chosen from the new key's position */
    int s;
    if (p->n_free) {
        s = p->free_stack[--p->n_free];
    } else {
        s = victim_slot(p);
        if (s < 0)
            return v4_err_set(err, V4_ERR_RANGE, "xpolicy",
                              "all %d slots hold pinned keys: nothing can be evicted for key %d",
                              p->cap, key);
        order_leave(p, s);
        if (p->seg[s] == L_PROT)
            p->n_prot--;
        *victim = p->slot_key[s];
        p->key2slot[*victim] = -1;
    }
    p->slot_key[s] = key;
    p->key2slot[key] = s;
    p->pins[s] = 0;
    p->seg[s] = L_PROB;
    if (p->kind == V4_XPOL_LFRU || p->kind == V4_XPOL_NEXT)
        lfru_count(p, key);
    order_enter(p, s);
    return s;
}

int v4_xpolicy_pin(v4_xpolicy *p, int key)
{
    int s = v4_xpolicy_lookup(p, key);
    if (s < 0)
        return -1;
    if (p->pins[s]++ == 0) {
        order_leave(p, s);
        p->n_pinned++;
    }
    return p->pins[s];
}

int v4_xpolicy_unpin(v4_xpolicy *p, int key)
{
    int s = v4_xpolicy_lookup(p, key);
    if (s < 0 || p->pins[s] == 0)
        return -1;
    if (--p->pins[s] == 0) {
        p->n_pinned--;
        order_enter(p, s);
        if (p->kind == V4_XPOL_SLRU)
            slru_enforce_prot(p);
    }
    return p->pins[s];
}

int v4_xpolicy_remove(v4_xpolicy *p, int key)
{
    int s = v4_xpolicy_lookup(p, key);
    if (s < 0 || p->pins[s] > 0)
        return -1;
    order_leave(p, s);
    if (p->seg[s] == L_PROT)
        p->n_prot--;
    p->seg[s] = L_PROB;
    p->slot_key[s] = -1;
    p->key2slot[key] = -1;
    p->free_stack[p->n_free++] = s;
    return s;
}
