/* test_seq_pages.c - the CUDA engine's sequence-memory bookkeeping (kernels/cuda/
 * seq_pages.h) on the CPU: the page pool cuts pages from chunks of the callback (page
 * addresses inside the chunk, distinct, aligned to the page size), reuses returned pages
 * without allocating, counts free and held bytes, and leaves itself unchanged when the
 * callback has no memory; the banker's test on hand-made states (two long documents
 * that cannot both finish, the same once one has finished its growth, over-held totals)
 * and on random states against an exhaustive search over every finishing order. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/seq_pages.h"
#include "testutil.h"

typedef struct heap {
    int allocs, frees, refuse_after;   /* refuse_after: allocations allowed (-1: any) */
} heap;

static void *h_alloc(void *ud, size_t bytes)
{
    heap *h = ud;
    if (h->refuse_after >= 0 && h->allocs >= h->refuse_after)
        return NULL;
    h->allocs++;
    return malloc(bytes);
}

static void h_free(void *ud, void *p)
{
    heap *h = ud;
    h->frees++;
    free(p);
}

static void test_pool(void)
{
    heap h = {.refuse_after = -1};
    CHECK(v4_page_pool_create(0, 4, h_alloc, h_free, &h) == NULL, "a 0-byte page is refused");
    CHECK(v4_page_pool_create(64, 0, h_alloc, h_free, &h) == NULL, "0 pages per chunk are refused");
    v4_page_pool *p = v4_page_pool_create(64, 4, h_alloc, h_free, &h);
    CHECK(p != NULL, "pool created");
    if (!p)
        return;
    CHECK(v4_page_pool_bytes(p) == 0 && v4_page_pool_free_bytes(p) == 0 && h.allocs == 0,
          "nothing allocated before the first page");
    unsigned char *pg[10];
    for (int i = 0; i < 10; i++)
        pg[i] = v4_page_pool_get(p);
    CHECK(h.allocs == 3, "10 pages of 4 per chunk: 3 chunks (%d)", h.allocs);
    CHECK(v4_page_pool_bytes(p) == 3 * 4 * 64 && v4_page_pool_free_bytes(p) == 2 * 64,
          "held %zu, free %zu bytes", v4_page_pool_bytes(p), v4_page_pool_free_bytes(p));
    int distinct = 1, chunked = 1;
    for (int i = 0; i < 10; i++) {
        for (int j = 0; j < i; j++) {
            const ptrdiff_t d = pg[i] > pg[j] ? pg[i] - pg[j] : pg[j] - pg[i];
            distinct &= d >= 64;
        }
        chunked &= (uintptr_t)(pg[i] - pg[i / 4 * 4]) == (uintptr_t)(i % 4) * 64;   /* in its chunk, in order */
    }
    CHECK(distinct, "pages never overlap");
    CHECK(chunked, "a chunk's pages are handed out in address order");
    for (int i = 0; i < 10; i++)
        memset(pg[i], i, 64);   /* ASan: every page is writable over its whole size */
    v4_page_pool_put(p, pg[3]);
    v4_page_pool_put(p, pg[7]);
    CHECK(v4_page_pool_free_bytes(p) == 4 * 64, "two pages back: 4 free (%zu bytes)", v4_page_pool_free_bytes(p));
    unsigned char *a = v4_page_pool_get(p), *b = v4_page_pool_get(p);
    CHECK(a == pg[7] && b == pg[3], "returned pages are reused, last returned first");
    CHECK(h.allocs == 3, "reuse allocates nothing");
    /* every page back (more than one chunk's worth on the free stack) */
    for (int i = 0; i < 10; i++)
        v4_page_pool_put(p, pg[i]);
    CHECK(v4_page_pool_free_bytes(p) == 12 * 64, "all 12 pages free");
    for (int i = 0; i < 12; i++)
        pg[i % 10] = v4_page_pool_get(p);
    CHECK(h.allocs == 3 && v4_page_pool_free_bytes(p) == 0, "12 pages again from the 3 chunks");
    h.refuse_after = 3;
    CHECK(v4_page_pool_get(p) == NULL, "no memory for a 4th chunk: NULL");
    CHECK(v4_page_pool_bytes(p) == 12 * 64 && v4_page_pool_free_bytes(p) == 0, "the pool is unchanged");
    h.refuse_after = -1;
    CHECK(v4_page_pool_get(p) != NULL && h.allocs == 4, "memory back: a 4th chunk");
    v4_page_pool_free(p);
    CHECK(h.frees == 4, "every chunk freed (%d)", h.frees);
    v4_page_pool_free(NULL);
    CHECK(v4_page_pool_free_bytes(NULL) == 0 && v4_page_pool_bytes(NULL) == 0, "NULL pool: 0 bytes");
}

/* exhaustive: some order of the n sequences finishes (n <= 6) */
static int safe_brute(const size_t *held, const size_t *claim, int n, size_t total, unsigned mask, size_t free_b)
{
    if (mask == (1u << n) - 1)
        return 1;
    for (int i = 0; i < n; i++)
        if (!(mask & (1u << i)) && claim[i] - held[i] <= free_b &&
            safe_brute(held, claim, n, total, mask | (1u << i), free_b + held[i]))
            return 1;
    return 0;
}

static void test_banker(void)
{
    unsigned char sc[8];
    /* two 64k documents of 430 MB each, 600 MB for sequences */
    const size_t M = 1000000;
    size_t held[3] = {100 * M, 100 * M}, claim[3] = {430 * M, 430 * M};
    CHECK(v4_seq_mem_safe(held, claim, 2, 600 * M, sc) == 1, "both at 100 MB: one can finish (330 <= 400 free)");
    held[0] = 300 * M;
    held[1] = 280 * M;
    CHECK(v4_seq_mem_safe(held, claim, 2, 600 * M, sc) == 0, "300 + 280 MB held: neither rest fits in 20 MB");
    held[1] = 160 * M;
    CHECK(v4_seq_mem_safe(held, claim, 2, 600 * M, sc) == 1, "300 + 160: the first's 130 fits in 140");
    held[0] = 430 * M;
    held[1] = 170 * M;
    CHECK(v4_seq_mem_safe(held, claim, 2, 600 * M, sc) == 1, "the first at its claim: it finishes, then the second");
    CHECK(v4_seq_mem_safe(held, claim, 2, 599 * M, sc) == 0, "held above the total: unsafe");
    CHECK(v4_seq_mem_safe(held, claim, 0, 0, sc) == 1, "no sequences: safe");
    held[2] = 0;
    claim[2] = 700 * M;
    held[0] = held[1] = 0;
    CHECK(v4_seq_mem_safe(held, claim, 3, 600 * M, sc) == 0, "a claim above the total never finishes");
    /* random states against the exhaustive search */
    uint64_t s = 12345;
    int agree = 1, n_safe = 0, n_unsafe = 0;
    for (int t = 0; t < 20000; t++) {
        const int n = 1 + (int)(s % 6);
        size_t h[6], c[6], sum = 0;
        for (int i = 0; i < n; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            c[i] = (size_t)(s >> 40) % 100;
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            h[i] = c[i] ? (size_t)(s >> 40) % (c[i] + 1) : 0;
            sum += h[i];
        }
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const size_t total = sum + (size_t)(s >> 40) % 120;
        const int want = safe_brute(h, c, n, total, 0, total - sum);
        const int got = v4_seq_mem_safe(h, c, n, total, sc);
        agree &= want == got;
        n_safe += want;
        n_unsafe += !want;
    }
    CHECK(agree, "the banker's test agrees with the exhaustive search on 20000 random states");
    CHECK(n_safe > 1000 && n_unsafe > 1000, "both outcomes drawn (%d safe, %d unsafe)", n_safe, n_unsafe);
}

int main(void)
{
    test_pool();
    test_banker();
    TEST_DONE();
}
