/* seq_testlib.h - helpers of the sequence-state tests (test_seq_fork: forks,
 * test_snapshot: block records): a deterministic token stream (t_seq_lcg), k decode steps
 * of one sequence (t_seq_decode), and byte equality of two sequences' caches (window
 * rings, compressed entries, indexer keys, counts and position: t_seq_same_caches).
 * Ownership: nothing kept; logits are the caller's ([k][V]).  Thread: the test's. */
#ifndef V4_TESTS_SEQ_TESTLIB_H
#define V4_TESTS_SEQ_TESTLIB_H

#include <stdint.h>
#include <string.h>

#include "kernels/v4/model.h"

static inline uint64_t t_seq_lcg(uint64_t *x)
{
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    return *x >> 33;
}

/* k decode steps of s on toks; logits [k][V].  0, or -1 (err filled). */
static inline int t_seq_decode(v4_ctx *c, v4_seq *s, const int32_t *toks, int k, float *logits, int V, v4_error *err)
{
    for (int i = 0; i < k; i++)
        if (v4_step(c, &s, &toks[i], 1, logits + (size_t)i * V, NULL, err))
            return -1;
    return 0;
}

static inline int t_seq_same_caches(const v4_config *cfg, const v4_seq *a, const v4_seq *b)
{
    int ok = v4_seq_pos(a) == v4_seq_pos(b);
    for (int l = 0; l < cfg->n_layers && ok; l++) {
        ok &= !memcmp(v4_seq_window(a, l), v4_seq_window(b, l), sizeof(uint16_t) * cfg->window * cfg->head_dim);
        if (!cfg->compress_ratios[l])
            continue;
        int na, nb;
        const uint16_t *ca = v4_seq_compressed(a, l, &na), *cb = v4_seq_compressed(b, l, &nb);
        ok &= na == nb && !memcmp(ca, cb, sizeof(uint16_t) * (size_t)na * cfg->head_dim);
        if (cfg->compress_ratios[l] == 4) {
            ca = v4_seq_index_keys(a, l, &na);
            cb = v4_seq_index_keys(b, l, &nb);
            ok &= na == nb && !memcmp(ca, cb, sizeof(uint16_t) * (size_t)na * cfg->index_head_dim);
        }
    }
    return ok;
}

#endif
