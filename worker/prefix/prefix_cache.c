/* prefix_cache.c - the tree of cached prompt blocks, its budget and eviction (see
 * prefix_cache.h; docs/prefix-cache.md).
 * Thread: every entry point holds pc->mu. */
#include "prefix_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

#include "kernels/v4/snapshot.h"

#define CHAIN_SEED 0x7634666c65657450ull   /* the hash "before block 0" */

typedef struct pc_node {
    uint64_t key;               /* chain hash of blocks 0..depth */
    struct pc_node *parent;     /* NULL for block 0 */
    struct pc_node *hnext;      /* hash bucket chain */
    int depth, n_children;
    uint64_t used, born;        /* ticks of the last use and of the insert */
    uint64_t reused;            /* lookups that restored it (slru: 0 = probationary) */
    int32_t *tokens;            /* [block] */
    unsigned char *rec;         /* [rec_bytes] */
    size_t size;                /* the node's mapping: node, tokens and record in one */
} pc_node;

struct v4pc {
    pthread_mutex_t mu;
    const v4_config *cfg;       /* NULL: the raw index */
    int block;
    size_t rec_bytes, cost, budget;
    v4pc_policy policy;
    pc_node **buckets;
    size_t nbuckets, n_nodes;
    uint64_t tick;
    v4pc_figs f;
    pc_node **path;             /* [path_cap] a lookup's chain */
    const void **recs;          /* [path_cap] its records */
    int path_cap;
};

int v4pc_policy_parse(const char *s, v4pc_policy *p)
{
    if (!strcmp(s, "lru"))
        *p = V4PC_LRU;
    else if (!strcmp(s, "slru"))
        *p = V4PC_SLRU;
    else if (!strcmp(s, "fifo"))
        *p = V4PC_FIFO;
    else
        return -1;
    return 0;
}

/* Bytes of a node with its tokens and record (16-byte aligned parts); their offsets. */
static size_t node_layout(int block, size_t rec_bytes, size_t *tok_at, size_t *rec_at)
{
    const size_t a = (sizeof(pc_node) + 15) / 16 * 16, b = (a + (size_t)block * sizeof(int32_t) + 15) / 16 * 16;
    if (tok_at)
        *tok_at = a;
    if (rec_at)
        *rec_at = b;
    return b + rec_bytes;
}

static v4pc *make(const v4_config *cfg, int block, size_t rec_bytes, const v4pc_opts *o, v4_error *err)
{
    v4pc *pc = calloc(1, sizeof *pc);
    if (!pc || !(pc->buckets = calloc(64, sizeof *pc->buckets))) {
        free(pc);
        v4_err_set(err, V4_ERR_NOMEM, "prefix_cache", "out of memory");
        return NULL;
    }
    pthread_mutex_init(&pc->mu, NULL);
    pc->nbuckets = 64;
    pc->cfg = cfg;
    pc->block = block;
    pc->rec_bytes = rec_bytes;
    /* one anonymous mapping per node (node, tokens, record), so what is freed goes back
     * to the system at once and the process's memory follows the budget (no heap
     * fragmentation between records of a few hundred KiB to MiB) */
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), raw = node_layout(block, rec_bytes, NULL, NULL);
    pc->cost = (raw + page - 1) / page * page;
    pc->budget = o && o->budget_bytes ? o->budget_bytes : (size_t)V4PC_BUDGET_DEFAULT;
    pc->policy = o ? o->policy : V4PC_SLRU;
    pc->f.block = block;
    pc->f.budget = pc->budget;
    if (pc->cost > pc->budget) {
        v4_err_set(err, V4_ERR_INVALID, "prefix_cache",
                   "the budget of %zu bytes holds no block (one block of %d positions costs %zu bytes)", pc->budget,
                   block, pc->cost);
        v4pc_free(pc);
        return NULL;
    }
    return pc;
}

v4pc *v4pc_new(const v4_config *cfg, const v4pc_opts *o, v4_error *err)
{
    const int block = v4_snap_block_len(cfg, o && o->block > 0 ? o->block : V4PC_BLOCK_DEFAULT);
    return make(cfg, block, v4_snap_block_bytes(cfg, block), o, err);
}

v4pc *v4pc_new_raw(int block, size_t rec_bytes, const v4pc_opts *o, v4_error *err)
{
    if (block < 1) {
        v4_err_set(err, V4_ERR_INVALID, "prefix_cache", "the block must be >= 1 position (got %d)", block);
        return NULL;
    }
    return make(NULL, block, rec_bytes, o, err);
}

static pc_node *node_new(const v4pc *pc)
{
    void *m = mmap(NULL, pc->cost, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    size_t tok_at, rec_at;
    node_layout(pc->block, pc->rec_bytes, &tok_at, &rec_at);
    pc_node *n = m;   /* zero-filled */
    n->tokens = (int32_t *)((unsigned char *)m + tok_at);
    n->rec = (unsigned char *)m + rec_at;
    n->size = pc->cost;
    return n;
}

static void node_free(pc_node *n)
{
    munmap(n, n->size);
}

void v4pc_free(v4pc *pc)
{
    if (!pc)
        return;
    for (size_t b = 0; b < pc->nbuckets; b++)
        for (pc_node *n = pc->buckets[b], *next; n; n = next) {
            next = n->hnext;
            node_free(n);
        }
    free(pc->buckets);
    free(pc->path);
    free(pc->recs);
    pthread_mutex_destroy(&pc->mu);
    free(pc);
}

int v4pc_block(const v4pc *pc)
{
    return pc->block;
}

size_t v4pc_block_cost(const v4pc *pc)
{
    return pc->cost;
}

static uint64_t chain(uint64_t parent_key, const int32_t *tokens, int block)
{
    return XXH3_64bits_withSeed(tokens, (size_t)block * sizeof *tokens, parent_key);
}

static pc_node *find(const v4pc *pc, const pc_node *parent, uint64_t key, const int32_t *tokens)
{
    for (pc_node *n = pc->buckets[key & (pc->nbuckets - 1)]; n; n = n->hnext)
        if (n->key == key && n->parent == parent && !memcmp(n->tokens, tokens, sizeof *tokens * (size_t)pc->block))
            return n;
    return NULL;
}

/* The cached chain of ids' first nb blocks into pc->path; returns its length. */
static int walk(v4pc *pc, const int32_t *ids, int nb)
{
    if (nb > pc->path_cap) {
        const int cap = nb + 64;
        pc_node **p = realloc(pc->path, sizeof *p * (size_t)cap);
        if (p)
            pc->path = p;
        const void **r = p ? realloc(pc->recs, sizeof *r * (size_t)cap) : NULL;
        if (!r)
            return 0;   /* out of memory: treated as a miss */
        pc->recs = r;
        pc->path_cap = cap;
    }
    const pc_node *parent = NULL;
    uint64_t key = CHAIN_SEED;
    int k = 0;
    for (; k < nb; k++) {
        const int32_t *t = ids + (size_t)k * (size_t)pc->block;
        key = chain(key, t, pc->block);
        pc_node *n = find(pc, parent, key, t);
        if (!n)
            break;
        pc->path[k] = n;
        parent = n;
    }
    return k;
}

static void unlink_node(v4pc *pc, pc_node *n)
{
    pc_node **at = &pc->buckets[n->key & (pc->nbuckets - 1)];
    while (*at != n)
        at = &(*at)->hnext;
    *at = n->hnext;
    if (n->parent)
        n->parent->n_children--;
    pc->n_nodes--;
    pc->f.blocks--;
    pc->f.bytes -= pc->cost;
    pc->f.evictions++;
    node_free(n);
}

/* A leaf's eviction rank (lowest goes first): lru its last use, fifo its insert, slru
 * its last use with every never-reused leaf (probationary) before every reused one. */
static uint64_t rank(const v4pc *pc, const pc_node *n)
{
    if (pc->policy == V4PC_FIFO)
        return n->born;
    if (pc->policy == V4PC_SLRU)
        return n->used >> 1 | (n->reused ? 1ull << 63 : 0);
    return n->used;
}

/* Evict one leaf (not keep) by the policy; 0, or -1 when none can go. */
static int evict_one(v4pc *pc, const pc_node *keep)
{
    pc_node *victim = NULL;
    uint64_t best = UINT64_MAX;
    for (size_t b = 0; b < pc->nbuckets; b++)
        for (pc_node *n = pc->buckets[b]; n; n = n->hnext) {
            if (n->n_children || n == keep)
                continue;
            const uint64_t r = rank(pc, n);
            if (r < best) {
                best = r;
                victim = n;
            }
        }
    if (!victim)
        return -1;
    unlink_node(pc, victim);
    return 0;
}

static void grow(v4pc *pc)
{
    const size_t nb = pc->nbuckets * 2;
    pc_node **b = calloc(nb, sizeof *b);
    if (!b)
        return;   /* longer chains, still correct */
    for (size_t i = 0; i < pc->nbuckets; i++)
        for (pc_node *n = pc->buckets[i], *next; n; n = next) {
            next = n->hnext;
            n->hnext = b[n->key & (nb - 1)];
            b[n->key & (nb - 1)] = n;
        }
    free(pc->buckets);
    pc->buckets = b;
    pc->nbuckets = nb;
}

/* Look up ids (at most limit positions): the chain length in blocks, touched. */
static int lookup_locked(v4pc *pc, const int32_t *ids, int n, int limit)
{
    const int m = limit < n ? limit : n;
    const int nb = m > 0 ? m / pc->block : 0;
    const int k = walk(pc, ids, nb);
    const uint64_t t = ++pc->tick;
    for (int i = 0; i < k; i++) {
        pc->path[i]->used = t;
        pc->path[i]->reused++;
    }
    pc->f.lookups++;
    if (k) {
        pc->f.hits++;
        pc->f.tokens_saved += (unsigned long long)k * (unsigned long long)pc->block;
    } else {
        pc->f.misses++;
    }
    return k;
}

int v4pc_lookup_raw(v4pc *pc, const int32_t *ids, int n, int limit)
{
    pthread_mutex_lock(&pc->mu);
    const int k = lookup_locked(pc, ids, n, limit);
    pthread_mutex_unlock(&pc->mu);
    return k * pc->block;
}

int v4pc_restore(v4pc *pc, v4_seq *s, const int32_t *ids, int n, int limit, v4_error *err)
{
    pthread_mutex_lock(&pc->mu);
    int rc = 0;
    const int k = pc->cfg ? lookup_locked(pc, ids, n, limit) : 0;
    if (k) {
        for (int i = 0; i < k; i++)
            pc->recs[i] = pc->path[i]->rec;
        rc = v4_snap_restore(s, pc->block, pc->recs, k, err) ? -1 : k * pc->block;
        if (rc < 0) {   /* counted as a miss after all */
            pc->f.hits--;
            pc->f.misses++;
            pc->f.tokens_saved -= (unsigned long long)k * (unsigned long long)pc->block;
        }
    } else if (v4_seq_pos(s)) {
        v4_seq_reset(s);
    }
    pthread_mutex_unlock(&pc->mu);
    return rc;
}

/* Insert the block ending at p: rec (raw) or s's record. */
static int insert_locked(v4pc *pc, const v4_seq *s, const int32_t *ids, int p, const void *rec, v4_error *err)
{
    if (p < pc->block || p % pc->block)
        return v4_err_set(err, V4_ERR_INVALID, "prefix_cache", "position %d is not a block end (block %d)", p,
                          pc->block);
    const int k = p / pc->block - 1;
    const int have = walk(pc, ids, k + 1);
    const uint64_t t = ++pc->tick;
    for (int i = 0; i < have; i++)
        pc->path[i]->used = t;
    if (have == k + 1)
        return 0;   /* cached already */
    if (have < k) {
        pc->f.insert_skips++;   /* its parent chain is gone (evicted meanwhile) */
        return 0;
    }
    pc_node *parent = k ? pc->path[k - 1] : NULL;
    while (pc->f.bytes + pc->cost > pc->budget)
        if (evict_one(pc, parent)) {
            pc->f.insert_skips++;
            return 0;
        }
    pc_node *nd = node_new(pc);
    if (!nd)
        return v4_err_set(err, V4_ERR_NOMEM, "prefix_cache", "out of memory for a block of %zu bytes", pc->cost);
    const int32_t *tk = ids + (size_t)k * (size_t)pc->block;
    memcpy(nd->tokens, tk, sizeof *tk * (size_t)pc->block);
    if (rec)
        memcpy(nd->rec, rec, pc->rec_bytes);
    else if (v4_snap_block_save(s, pc->block, nd->rec, err)) {
        node_free(nd);
        return -1;
    }
    /* the key of block k: the parent's chain continued (walk stopped at k) */
    nd->key = chain(parent ? parent->key : CHAIN_SEED, tk, pc->block);
    nd->parent = parent;
    nd->depth = k;
    nd->used = nd->born = t;
    if (parent)
        parent->n_children++;
    if (pc->n_nodes >= pc->nbuckets)
        grow(pc);
    nd->hnext = pc->buckets[nd->key & (pc->nbuckets - 1)];
    pc->buckets[nd->key & (pc->nbuckets - 1)] = nd;
    pc->n_nodes++;
    pc->f.blocks++;
    pc->f.bytes += pc->cost;
    pc->f.inserts++;
    return 1;
}

int v4pc_insert(v4pc *pc, const v4_seq *s, const int32_t *ids, int p, v4_error *err)
{
    if (!pc->cfg)
        return v4_err_set(err, V4_ERR_INVALID, "prefix_cache", "a raw index takes v4pc_insert_raw");
    if (v4_seq_pos(s) != p)
        return v4_err_set(err, V4_ERR_INVALID, "prefix_cache", "the sequence is at position %d, not %d",
                          v4_seq_pos(s), p);
    pthread_mutex_lock(&pc->mu);
    const int rc = insert_locked(pc, s, ids, p, NULL, err);
    pthread_mutex_unlock(&pc->mu);
    return rc;
}

int v4pc_insert_raw(v4pc *pc, const int32_t *ids, int p, const void *rec, v4_error *err)
{
    pthread_mutex_lock(&pc->mu);
    const int rc = insert_locked(pc, NULL, ids, p, rec, err);
    pthread_mutex_unlock(&pc->mu);
    return rc;
}

void v4pc_figs_get(v4pc *pc, v4pc_figs *f)
{
    pthread_mutex_lock(&pc->mu);
    *f = pc->f;
    pthread_mutex_unlock(&pc->mu);
}
