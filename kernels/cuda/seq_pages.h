/* seq_pages.h - the bookkeeping of the CUDA engine's sequence memory (issue 20, item 3),
 * in plain C: no CUDA here, so that it builds and is unit-tested on every machine
 * (tests/test_seq_pages.c).
 *
 * Page pool: a sequence's compressed KV entries and indexer keys live in fixed-size
 * pages (a power-of-two number of entries each), taken from a pool as the sequence
 * grows and returned when it ends or restarts.  The pool cuts its pages from chunks
 * (pages_per_chunk pages each) that the caller's alloc callback provides (cudaMalloc in
 * the engine, malloc in the tests); a chunk stays with the pool until the pool is freed,
 * so a returned page is reused without touching the allocator.  get returns NULL when
 * the callback does (out of memory), with the pool unchanged.
 *
 * Safety (no deadlock, no failure while memory will free up): every live sequence has a
 * claim (the most bytes it can hold: its state at its full capacity) and holds some of
 * it.  v4_seq_mem_safe is the banker's test for one resource: the state is safe when the
 * sequences can be ordered so that each one's remaining claim fits in what is free once
 * the ones before it have finished and released everything.  The engine grants a growth
 * (or a new sequence) only when the state after it is safe; a refused growth waits (the
 * sequence skips steps, its state kept) and, in a safe state, the first sequence of the
 * order always gets its pages, so someone always progresses and memory frees as it
 * finishes.
 *
 * Ownership: the pool owns its free list and chunk list; the chunks' memory is the
 * callback's (freed through free_fn by v4_page_pool_free).  Thread: none inside; one
 * thread at a time (the engine's stepping thread).
 */
#ifndef V4_SEQ_PAGES_H
#define V4_SEQ_PAGES_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct v4_page_pool v4_page_pool;

/* bytes of memory or NULL (no memory); free_fn(ud, p) returns a chunk. */
typedef void *(*v4_chunk_alloc_fn)(void *ud, size_t bytes);
typedef void (*v4_chunk_free_fn)(void *ud, void *p);

/* NULL when page_bytes or pages_per_chunk is 0 or host memory is short. */
v4_page_pool *v4_page_pool_create(size_t page_bytes, int pages_per_chunk, v4_chunk_alloc_fn alloc_fn,
                                  v4_chunk_free_fn free_fn, void *ud);
/* Frees every chunk (pages still handed out become invalid). */
void v4_page_pool_free(v4_page_pool *p);
/* A page (page_bytes, contents undefined), or NULL when a new chunk was needed and the
 * callback had no memory. */
void *v4_page_pool_get(v4_page_pool *p);
/* Returns a page from v4_page_pool_get. */
void v4_page_pool_put(v4_page_pool *p, void *page);
size_t v4_page_pool_page_bytes(const v4_page_pool *p);
/* Bytes of the pages not handed out (reusable without allocating). */
size_t v4_page_pool_free_bytes(const v4_page_pool *p);
/* Bytes of every chunk held. */
size_t v4_page_pool_bytes(const v4_page_pool *p);

/* The banker's test: n sequences holding held[i] <= claim[i] bytes, total the bytes
 * sequences may hold in all.  1 when safe (sum of held <= total and an order exists in
 * which each claim - held fits in total - the held of those not yet finished), else 0.
 * scratch: n bytes (any contents). */
int v4_seq_mem_safe(const size_t *held, const size_t *claim, int n, size_t total, unsigned char *scratch);

#ifdef __cplusplus
}
#endif

#endif
