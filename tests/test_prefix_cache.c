/* test_prefix_cache.c - the prefix cache's index (worker/prefix/prefix_cache.h) without a
 * model (v4pc_new_raw), and once with the golden tiny model (records of real sequences):
 *
 *   - lookup returns the longest cached chain of whole blocks, bounded by the limit;
 *     prompts sharing k blocks share k nodes; a prompt differing in block 0 misses;
 *   - a block whose parent chain is not cached is not inserted (insert_skips);
 *   - inserting what is cached touches it (no new node);
 *   - the budget: bytes never pass it; lru evicts the least recently used leaf (a lookup
 *     touches a chain), fifo the oldest insert, slru never-reused leaves before reused
 *     ones (a reused block outlives newer unused ones, unlike lru); interior nodes go
 *     only after their children; an insert that could only evict its own parent is
 *     skipped;
 *   - figures: lookups = hits + misses, tokens_saved, blocks, bytes, evictions;
 *   - a budget below one block is refused (V4_ERR_INVALID); bad positions are refused;
 *   - with the tiny model: a sequence restored from the cache equals (caches, then logits of
 *     the rest of the prompt) one that prefilled the prompt itself.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/model_files.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/v4/model.h"
#include "tests/testutil.h"
#include "worker/prefix/prefix_cache.h"

enum { B = 4, REC = 32 };

/* Insert every block of ids[0..n) in order (as a prefill does). */
static void insert_all(v4pc *pc, const int32_t *ids, int n)
{
    unsigned char rec[REC];
    v4_error err = {0};
    for (int p = B; p <= n; p += B) {
        memset(rec, p, sizeof rec);
        CHECK(v4pc_insert_raw(pc, ids, p, rec, &err) >= 0, "insert at %d: %s", p, err.msg);
    }
}

static void raw_index(void)
{
    v4_error err = {0};
    v4pc *pc = v4pc_new_raw(B, REC, NULL, &err);
    CHECK(pc != NULL, "new: %s", err.msg);
    if (!pc)
        return;
    int32_t a[16], b[16], c[16];
    for (int i = 0; i < 16; i++) {
        a[i] = i + 1;
        b[i] = i < 8 ? i + 1 : 100 + i;   /* shares 2 blocks with a */
        c[i] = i == 0 ? 999 : i + 1;      /* differs in block 0 */
    }
    CHECK(v4pc_lookup_raw(pc, a, 16, 15) == 0, "empty cache: miss");
    insert_all(pc, a, 16);
    v4pc_figs f;
    v4pc_figs_get(pc, &f);
    CHECK(f.blocks == 4 && f.inserts == 4 && f.bytes == 4 * v4pc_block_cost(pc), "4 blocks held: %llu, %llu bytes",
          f.blocks, f.bytes);
    CHECK(v4pc_lookup_raw(pc, a, 16, 16) == 16, "whole prompt");
    CHECK(v4pc_lookup_raw(pc, a, 16, 15) == 12, "limit 15: 3 blocks");
    CHECK(v4pc_lookup_raw(pc, a, 10, 10) == 8, "a prompt of 10: 2 blocks");
    CHECK(v4pc_lookup_raw(pc, b, 16, 15) == 8, "b shares 2 blocks");
    CHECK(v4pc_lookup_raw(pc, c, 16, 15) == 0, "c differs in block 0");
    insert_all(pc, b, 16);
    v4pc_figs_get(pc, &f);
    CHECK(f.blocks == 6, "b adds 2 blocks (shares 2): %llu", f.blocks);
    /* an insert whose parent chain is missing */
    unsigned char rec[REC] = {0};
    CHECK(v4pc_insert_raw(pc, c, 8, rec, &err) == 0, "c's block 1 without block 0");
    v4pc_figs_get(pc, &f);
    CHECK(f.insert_skips == 1 && f.blocks == 6, "skipped: %llu", f.insert_skips);
    CHECK(v4pc_insert_raw(pc, a, 8, rec, &err) == 0 && (v4pc_figs_get(pc, &f), f.inserts == 6), "cached: touched");
    v4_err_clear(&err);
    CHECK(v4pc_insert_raw(pc, a, 6, rec, &err) == -1 && err.code == V4_ERR_INVALID, "position 6 is no block end");
    v4pc_figs_get(pc, &f);
    CHECK(f.lookups == f.hits + f.misses && f.lookups == 6 && f.hits == 4 && f.tokens_saved == 16 + 12 + 8 + 8,
          "figures: %llu lookups, %llu hits, %llu saved", f.lookups, f.hits, f.tokens_saved);
    v4pc_free(pc);
}

static void budget(v4pc_policy pol)
{
    v4_error err = {0};
    v4pc *probe = v4pc_new_raw(B, REC, NULL, &err);
    const size_t cost = v4pc_block_cost(probe);
    v4pc_free(probe);
    v4pc_opts o = {.budget_bytes = 5 * cost, .policy = pol};
    v4pc *pc = v4pc_new_raw(B, REC, &o, &err);
    CHECK(pc != NULL, "new: %s", err.msg);
    if (!pc)
        return;
    int32_t p[4][12];
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 12; i++)
            p[k][i] = 1000 * (k + 1) + i;
    insert_all(pc, p[0], 8);     /* 2 blocks: p0 */
    insert_all(pc, p[1], 8);     /* 2 blocks: p1 (4 held) */
    CHECK(v4pc_lookup_raw(pc, p[0], 8, 8) == 8, "p0 cached");   /* lru: p0 is now the fresher */
    insert_all(pc, p[2], 8);     /* 2 more: 6 > 5, one leaf goes */
    v4pc_figs f;
    v4pc_figs_get(pc, &f);
    CHECK(f.bytes <= 5 * cost && f.blocks == 5 && f.evictions == 1, "%s: within the budget: %llu blocks, %llu evicted",
          pol == V4PC_LRU ? "lru" : "fifo", f.blocks, f.evictions);
    const int p0 = v4pc_lookup_raw(pc, p[0], 8, 8), p1 = v4pc_lookup_raw(pc, p[1], 8, 8);
    if (pol != V4PC_FIFO)   /* p1's leaf was the least recently used (and never reused) */
        CHECK(p0 == 8 && p1 == 4, "lru kept p0 whole (%d) and cut p1 to its first block (%d)", p0, p1);
    else                   /* p0's leaf was the oldest insert */
        CHECK(p0 == 4 && p1 == 8, "fifo cut p0 (%d) and kept p1 (%d)", p0, p1);
    /* many more inserts: never above the budget, interior nodes after their children */
    for (int round = 0; round < 20; round++) {
        int32_t q[12];
        for (int i = 0; i < 12; i++)
            q[i] = 50000 + round * 100 + i;
        insert_all(pc, q, 12);
        v4pc_figs_get(pc, &f);
        CHECK(f.bytes <= 5 * cost, "round %d: %llu bytes > budget", round, f.bytes);
    }
    v4pc_free(pc);
    /* a budget of one block: a chain cannot grow past its first block (its parent stays) */
    o.budget_bytes = cost;
    pc = v4pc_new_raw(B, REC, &o, &err);
    insert_all(pc, p[3], 12);
    v4pc_figs_get(pc, &f);
    CHECK(pc && f.blocks == 1 && f.insert_skips == 2 && v4pc_lookup_raw(pc, p[3], 12, 12) == 4,
          "one-block budget: %llu blocks, %llu skipped", f.blocks, f.insert_skips);
    v4pc_free(pc);
    o.budget_bytes = cost - 1;
    v4_err_clear(&err);
    CHECK(v4pc_new_raw(B, REC, &o, &err) == NULL && err.code == V4_ERR_INVALID, "a budget below one block: '%s'",
          err.msg);
}

/* slru keeps a reused block over newer blocks nobody reused; lru does not. */
static void slru_vs_lru(void)
{
    for (int pol = 0; pol < 2; pol++) {
        v4_error err = {0};
        v4pc *probe = v4pc_new_raw(B, REC, NULL, &err);
        const size_t cost = v4pc_block_cost(probe);
        v4pc_free(probe);
        const v4pc_opts o = {.budget_bytes = 3 * cost, .policy = pol ? V4PC_LRU : V4PC_SLRU};
        v4pc *pc = v4pc_new_raw(B, REC, &o, &err);
        int32_t q[4][B];
        for (int k = 0; k < 4; k++)
            for (int i = 0; i < B; i++)
                q[k][i] = 7000 + 10 * k + i;
        insert_all(pc, q[0], B);
        CHECK(v4pc_lookup_raw(pc, q[0], B, B) == B, "A cached");   /* A reused once */
        insert_all(pc, q[1], B);
        insert_all(pc, q[2], B);
        insert_all(pc, q[3], B);   /* full: one of A, B, C goes */
        const int a = v4pc_lookup_raw(pc, q[0], B, B), b = v4pc_lookup_raw(pc, q[1], B, B);
        if (!pol)
            CHECK(a == B && b == 0, "slru: the reused A stays (%d), the unused B goes (%d)", a, b);
        else
            CHECK(a == 0 && b == B, "lru: the least recently used A goes (%d), B stays (%d)", a, b);
        v4pc_free(pc);
    }
}

static void with_model(void)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/golden/tiny/model", t_env("V4_TEST_DATA", "tests/data"));
    v4_model_files m;
    v4_error err = {0};
    if (v4_model_open(dir, &m, &err)) {
        CHECK(0, "open %s: %s", dir, err.msg);
        return;
    }
    v4_backend *be = v4_cpu_backend_create_ex(1, NULL, "exact", &err);
    v4_ctx *c = be ? v4_ctx_create(&m.w, be, 16, &err) : NULL;
    const v4pc_opts o = {.block = 100};   /* rounded up to 128 (the ratios' lcm) */
    v4pc *pc = v4pc_new(&m.cfg, &o, &err);
    CHECK(c && pc && v4pc_block(pc) == 128, "setup: %s (block %d)", err.msg, pc ? v4pc_block(pc) : -1);
    enum { N = 300 };
    int32_t ids[N];
    for (int i = 0; i < N; i++)
        ids[i] = (int32_t)((i * 7919 + 13) % m.cfg.vocab_size);
    v4_seq *a = c ? v4_seq_create(&m.w, N, &err) : NULL, *b = c ? v4_seq_create(&m.w, N, &err) : NULL;
    float *la = malloc(sizeof(float) * (size_t)m.cfg.vocab_size), *lb = malloc(sizeof(float) * (size_t)m.cfg.vocab_size);
    int ok = a && b && pc && la && lb;
    for (int at = 0; ok && at < 256; at += 16) {   /* prefill 256 in chunks, inserting at block ends */
        v4_seq *rows[16];
        for (int k = 0; k < 16; k++)
            rows[k] = a;
        ok = v4_step_rows(c, rows, ids + at, 16, NULL, NULL, NULL, &err) == 0;
        if (ok && (at + 16) % 128 == 0)
            ok = v4pc_insert(pc, a, ids, at + 16, &err) == 1;
    }
    CHECK(ok, "prefill and insert: %s", err.msg);
    ok = ok && v4pc_restore(pc, b, ids, N, N - 1, &err) == 256 && v4_seq_pos(b) == 256;
    CHECK(ok, "restore 256: %s", err.msg);
    for (int p = 256; ok && p < N; p++) {
        ok = v4_step(c, &a, &ids[p], 1, la, NULL, &err) == 0 && v4_step(c, &b, &ids[p], 1, lb, NULL, &err) == 0 &&
             !memcmp(la, lb, sizeof(float) * (size_t)m.cfg.vocab_size);
    }
    CHECK(ok, "the restored sequence continues as the prefilled one: %s", err.msg[0] ? err.msg : "logits differ");
    v4_err_clear(&err);
    CHECK(!pc || v4pc_insert(pc, b, ids, 128, &err) == -1, "insert with the sequence elsewhere than p is refused");
    free(la);
    free(lb);
    v4_seq_free(a);
    v4_seq_free(b);
    v4pc_free(pc);
    v4_ctx_free(c);
    if (be)
        be->ops->destroy(be);
    v4_model_close(&m);
}

int main(void)
{
    raw_index();
    budget(V4PC_LRU);
    budget(V4PC_SLRU);
    budget(V4PC_FIFO);
    slru_vs_lru();
    with_model();
    TEST_DONE();
}
