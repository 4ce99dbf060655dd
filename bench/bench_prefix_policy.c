/* bench_prefix_policy.c - the prefix cache's eviction policies (worker/prefix/
 * prefix_cache.h: lru, fifo) on synthetic request streams, through the index alone
 * (v4pc_new_raw: no model; every request looks its prompt up, then inserts its blocks
 * as a prefill would).  Streams: PREFIXES shared prefixes of 2..16 blocks, requested
 * with Zipf(s) popularity, each request adding 1..3 blocks of its own (a variable part
 * that is never reused); budgets of 5%..50% of the blocks the stream would keep.
 * Figure: token hit rate = prompt positions restored / prompt positions, the share of
 * prefill a policy saves.  Prints one table (machine-independent: a count, not a time).
 * Usage: bench_prefix_policy [requests (20000)] [prefixes (200)] [zipf s (1.0)] */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/prefix/prefix_cache.h"

enum { B = 16, REC = 64, MAXB = 24 };

static uint64_t rnd(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static double run(v4pc_policy pol, size_t budget_blocks, int requests, int prefixes, double s, int *lens,
                  double *cdf)
{
    v4_error err = {0};
    v4pc *probe = v4pc_new_raw(B, REC, NULL, &err);
    const size_t cost = v4pc_block_cost(probe);
    v4pc_free(probe);
    const v4pc_opts o = {.budget_bytes = budget_blocks * cost, .policy = pol};
    v4pc *pc = v4pc_new_raw(B, REC, &o, &err);
    if (!pc) {
        fprintf(stderr, "bench_prefix_policy: %s\n", err.msg);
        exit(1);
    }
    uint64_t x = 0x9E3779B97F4A7C15ull;
    int32_t ids[MAXB * B];
    unsigned char rec[REC] = {0};
    double saved = 0, total = 0;
    (void)s;
    for (int q = 0; q < requests; q++) {
        const double u = (double)(rnd(&x) % 1000000) / 1e6;
        int k = 0;
        while (k < prefixes - 1 && cdf[k] < u)
            k++;
        const int nb = lens[k], own = 1 + (int)(rnd(&x) % 3), n = (nb + own) * B;
        for (int i = 0; i < nb * B; i++)
            ids[i] = k * 100000 + i;
        for (int i = nb * B; i < n; i++)
            ids[i] = (int32_t)(rnd(&x) & 0x3FFFFFFF);
        saved += v4pc_lookup_raw(pc, ids, n, n - 1);
        total += n;
        for (int p = B; p <= n; p += B)
            v4pc_insert_raw(pc, ids, p, rec, &err);
    }
    v4pc_free(pc);
    return saved / total;
}

int main(int argc, char **argv)
{
    const int requests = argc > 1 ? atoi(argv[1]) : 20000, prefixes = argc > 2 ? atoi(argv[2]) : 200;
    const double s = argc > 3 ? atof(argv[3]) : 1.0;
    if (requests < 1 || prefixes < 1 || s <= 0) {
        fprintf(stderr, "usage: bench_prefix_policy [requests] [prefixes] [zipf s]\n");
        return 2;
    }
    int *lens = malloc(sizeof *lens * (size_t)prefixes);
    double *cdf = malloc(sizeof *cdf * (size_t)prefixes), z = 0;
    uint64_t x = 12345;
    size_t all = 0;
    for (int k = 0; k < prefixes; k++) {
        lens[k] = 2 + (int)(rnd(&x) % 15);
        all += (size_t)lens[k];
        z += 1.0 / pow(k + 1, s);
    }
    for (int k = 0, acc = 0; k < prefixes; k++, acc++)
        cdf[k] = (k ? cdf[k - 1] : 0) + 1.0 / pow(k + 1, s) / z;
    printf("bench_prefix_policy: %d requests over %d prefixes (%zu shared blocks), Zipf s=%.2f, 1-3 own blocks each\n",
           requests, prefixes, all, s);
    printf("| budget (blocks) | share of the shared blocks | lru hit rate | slru hit rate | fifo hit rate |\n"
           "|---|---|---|---|---|\n");
    const double shares[] = {0.05, 0.1, 0.25, 0.5, 1.0};
    for (size_t i = 0; i < sizeof shares / sizeof shares[0]; i++) {
        const size_t bb = (size_t)(shares[i] * (double)all) + 4;
        printf("| %zu | %.0f%% | %.1f%% | %.1f%% | %.1f%% |\n", bb, 100 * shares[i],
               100 * run(V4PC_LRU, bb, requests, prefixes, s, lens, cdf),
               100 * run(V4PC_SLRU, bb, requests, prefixes, s, lens, cdf),
               100 * run(V4PC_FIFO, bb, requests, prefixes, s, lens, cdf));
    }
    free(lens);
    free(cdf);
    return 0;
}
