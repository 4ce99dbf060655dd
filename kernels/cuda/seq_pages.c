/* seq_pages.c - page pool and the banker's test of seq_pages.h. */
#include "seq_pages.h"

#include <stdlib.h>

struct v4_page_pool {
    size_t page_bytes;
    int per_chunk;
    v4_chunk_alloc_fn alloc_fn;
    v4_chunk_free_fn free_fn;
    void *ud;
    void **free_pages;          /* stack of pages not handed out */
    int n_free, cap_free;
    void **chunks;
    int n_chunks, cap_chunks;
};

v4_page_pool *v4_page_pool_create(size_t page_bytes, int pages_per_chunk, v4_chunk_alloc_fn alloc_fn,
                                  v4_chunk_free_fn free_fn, void *ud)
{
    if (!page_bytes || pages_per_chunk < 1 || !alloc_fn || !free_fn)
        return NULL;
    v4_page_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    *p = (v4_page_pool){
        .page_bytes = page_bytes, .per_chunk = pages_per_chunk, .alloc_fn = alloc_fn, .free_fn = free_fn, .ud = ud};
    return p;
}

void v4_page_pool_free(v4_page_pool *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n_chunks; i++)
        p->free_fn(p->ud, p->chunks[i]);
    free(p->chunks);
    free(p->free_pages);
    free(p);
}

static int grow_array(void ***a, int *cap, int need)
{
    if (need <= *cap)
        return 0;
    int c = *cap ? *cap : 16;
    while (c < need)
        c *= 2;
    void **n = realloc(*a, sizeof(void *) * (size_t)c);
    if (!n)
        return -1;
    *a = n;
    *cap = c;
    return 0;
}

void *v4_page_pool_get(v4_page_pool *p)
{
    if (!p->n_free) {
        /* room first, so that a chunk once allocated is always recorded */
        if (grow_array(&p->chunks, &p->cap_chunks, p->n_chunks + 1) ||
            grow_array(&p->free_pages, &p->cap_free, p->per_chunk * (p->n_chunks + 1)))
            return NULL;
        unsigned char *c = p->alloc_fn(p->ud, p->page_bytes * (size_t)p->per_chunk);
        if (!c)
            return NULL;
        p->chunks[p->n_chunks++] = c;
        for (int i = p->per_chunk - 1; i >= 0; i--)   /* the chunk's first page on top */
            p->free_pages[p->n_free++] = c + (size_t)i * p->page_bytes;
    }
    return p->free_pages[--p->n_free];
}

void v4_page_pool_put(v4_page_pool *p, void *page)
{
    /* never fails: the stack has room for every page of every chunk */
    p->free_pages[p->n_free++] = page;
}

size_t v4_page_pool_page_bytes(const v4_page_pool *p) { return p->page_bytes; }

size_t v4_page_pool_free_bytes(const v4_page_pool *p) { return p ? p->page_bytes * (size_t)p->n_free : 0; }

size_t v4_page_pool_bytes(const v4_page_pool *p)
{
    return p ? p->page_bytes * (size_t)p->per_chunk * (size_t)p->n_chunks : 0;
}

int v4_seq_mem_safe(const size_t *held, const size_t *claim, int n, size_t total, unsigned char *scratch)
{
    size_t sum = 0;
    for (int i = 0; i < n; i++) {
        sum += held[i];
        scratch[i] = 0;
    }
    if (sum > total)
        return 0;
    size_t free_b = total - sum;
    /* one resource: finishing any sequence whose rest fits only adds to what is free,
     * so taking them greedily finds an order whenever one exists */
    for (int left = n; left > 0;) {
        int found = 0;
        for (int i = 0; i < n; i++)
            if (!scratch[i] && (claim[i] > held[i] ? claim[i] - held[i] : 0) <= free_b) {
                scratch[i] = 1;
                free_b += held[i];
                left--;
                found = 1;
            }
        if (!found)
            return 0;
    }
    return 1;
}
