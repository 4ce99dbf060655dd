/* test_seq_fork.c - forking a sequence (kernels/v4/seq.c v4_seq_fork / v4_seq_copy_from,
 * model.h): the basis of several answers from one prefill (worker/serve/choices.h).
 *
 *   - golden tiny model (window 32, compress ratios 0/4/128/4): a prompt of P tokens is
 *     prefilled in chunks, the sequence is forked (and copied into a used sequence with
 *     v4_seq_copy_from), then the original and each copy decode the same K tokens: the
 *     logits of every step are equal bit for bit (memcmp).  P covers a fork at a
 *     compression block boundary and inside blocks, after the window ring wrapped and
 *     after an HCA entry (128) was written; the original is run to the end first, so a
 *     copy shares nothing with it (its later steps cannot change the copy);
 *   - the original and its copy stepped together in one v4_step (two rows of a batch)
 *     give each the logits of the alone runs;
 *   - the copy's caches equal the original's (window ring, compressed entries, indexer
 *     keys, counts) right after the fork;
 *   - errors: copy into a sequence of another capacity (V4_ERR_INVALID, dst unchanged);
 *   - v4_ctx_seq_forkable is 1 on the CPU path.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/model_files.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/v4/model.h"
#include "tests/seq_testlib.h"
#include "tests/testutil.h"

enum { K = 24, CAP = 400 };

/* Feed n tokens to s in chunks of up to 16 rows (a prefill). */
static int prefill(v4_ctx *c, v4_seq *s, const int32_t *toks, int n, v4_error *err)
{
    v4_seq *seqs[16];
    for (int k = 0; k < 16; k++)
        seqs[k] = s;
    for (int at = 0; at < n;) {
        int rows = n - at < 16 ? n - at : 16;
        if (v4_step_rows(c, seqs, toks + at, rows, NULL, NULL, NULL, err))
            return -1;
        at += rows;
    }
    return 0;
}

static void fork_at(const v4_model_files *m, v4_ctx *c, int P, uint64_t seed)
{
    const int V = m->cfg.vocab_size;
    v4_error err = {0};
    int32_t prompt[CAP], toks[K];
    uint64_t x = seed;
    for (int i = 0; i < P; i++)
        prompt[i] = (int32_t)(t_seq_lcg(&x) % (uint64_t)V);
    for (int k = 0; k < K; k++)
        toks[k] = (int32_t)(t_seq_lcg(&x) % (uint64_t)V);
    v4_seq *orig = v4_seq_create(&m->w, CAP, &err), *used = v4_seq_create(&m->w, CAP, &err);
    float *la = malloc(sizeof(float) * (size_t)K * V), *lb = malloc(sizeof(float) * (size_t)K * V);
    float *lc = malloc(sizeof(float) * (size_t)K * V), *pair = malloc(sizeof(float) * 2 * (size_t)V);
    if (!orig || !used || !la || !lb || !lc || !pair) {
        CHECK(0, "P=%d: setup: %s", P, err.msg);
        goto out;
    }
    /* a used sequence (other tokens, further on) to copy into */
    int32_t junk[40];
    for (int i = 0; i < 40; i++)
        junk[i] = (int32_t)(t_seq_lcg(&x) % (uint64_t)V);
    CHECK(prefill(c, used, junk, 40, &err) == 0, "P=%d: junk prefill: %s", P, err.msg);
    CHECK(prefill(c, orig, prompt, P, &err) == 0, "P=%d: prefill: %s", P, err.msg);
    v4_seq *fork = v4_seq_fork(orig, &err);
    CHECK(fork != NULL, "P=%d: fork: %s", P, err.msg);
    CHECK(v4_seq_copy_from(used, orig, &err) == 0, "P=%d: copy_from: %s", P, err.msg);
    if (!fork)
        goto out;
    CHECK(t_seq_same_caches(&m->cfg, orig, fork) && t_seq_same_caches(&m->cfg, orig, used),
          "P=%d: the copies' caches differ", P);
    CHECK(v4_seq_pos(fork) == P && v4_seq_capacity(fork) == CAP && v4_seq_bytes(fork) == v4_seq_bytes(orig),
          "P=%d: fork pos %d capacity %d", P, v4_seq_pos(fork), v4_seq_capacity(fork));
    /* the original runs to the end first: a copy must not share its state */
    int ok = t_seq_decode(c, orig, toks, K, la, V, &err) == 0;
    ok = ok && t_seq_decode(c, fork, toks, K, lb, V, &err) == 0;
    ok = ok && t_seq_decode(c, used, toks, K, lc, V, &err) == 0;
    CHECK(ok, "P=%d: decode: %s", P, err.msg);
    const size_t bytes = sizeof(float) * (size_t)K * V;
    CHECK(ok && !memcmp(la, lb, bytes), "P=%d: the fork's logits differ from the original's", P);
    CHECK(ok && !memcmp(la, lc, bytes), "P=%d: the copy_from's logits differ from the original's", P);
    /* the original and a fresh fork, two rows of one step */
    v4_seq_free(fork);
    v4_seq *f2 = NULL;
    if (ok) {
        v4_seq_reset(orig);
        ok = prefill(c, orig, prompt, P, &err) == 0 && (f2 = v4_seq_fork(orig, &err)) != NULL;
        for (int k = 0; ok && k < K; k++) {
            v4_seq *two[2] = {orig, f2};
            const int32_t t2[2] = {toks[k], toks[k]};
            ok = v4_step(c, two, t2, 2, pair, NULL, &err) == 0;
            ok = ok && !memcmp(pair, la + (size_t)k * V, sizeof(float) * V) &&
                 !memcmp(pair + V, la + (size_t)k * V, sizeof(float) * V);
        }
        CHECK(ok, "P=%d: original + fork in one batch: %s", P, err.msg[0] ? err.msg : "logits differ");
    }
    v4_seq_free(f2);
out:
    v4_seq_free(orig);
    v4_seq_free(used);
    free(la);
    free(lb);
    free(lc);
    free(pair);
}

int main(void)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/golden/tiny/model", t_env("V4_TEST_DATA", "tests/data"));
    v4_model_files m;
    v4_error err = {0};
    if (v4_model_open(dir, &m, &err)) {
        CHECK(0, "open %s: %s", dir, err.msg);
        TEST_DONE();
    }
    v4_backend *be = v4_cpu_backend_create_ex(1, NULL, "exact", &err);
    v4_ctx *c = be ? v4_ctx_create(&m.w, be, 16, &err) : NULL;
    CHECK(c != NULL, "context: %s", err.msg);
    if (c) {
        CHECK(v4_ctx_seq_forkable(c) == 1, "the CPU path is forkable");
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
        /* ~3x slower under the sanitizers: the start, past a compression block, past a
         * ratio-128 entry, after the window wrapped (the memory checks are what count) */
        static const int Ps[] = {1, 33, 131, 301};
#else
        static const int Ps[] = {1, 5, 32, 33, 128, 131, 150, 256, 301};
#endif
        for (size_t i = 0; i < sizeof Ps / sizeof Ps[0]; i++)
            fork_at(&m, c, Ps[i], 1000 + i);
        /* errors: another capacity */
        v4_seq *a = v4_seq_create(&m.w, 64, &err), *b = v4_seq_create(&m.w, 65, &err);
        int32_t t = 7;
        CHECK(a && b && v4_step(c, &b, &t, 1, NULL, NULL, &err) == 0, "setup: %s", err.msg);
        v4_err_clear(&err);
        CHECK(a && b && v4_seq_copy_from(b, a, &err) == -1 && err.code == V4_ERR_INVALID && v4_seq_pos(b) == 1,
              "copy into another capacity: %d '%s'", err.code, err.msg);
        CHECK(a && v4_seq_copy_from(a, a, &err) == 0, "copy onto itself");
        v4_seq_free(a);
        v4_seq_free(b);
    }
    v4_ctx_free(c);
    if (be)
        be->ops->destroy(be);
    v4_model_close(&m);
    TEST_DONE();
}
