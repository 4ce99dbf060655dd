/* test_snapshot.c - block records of a sequence's state (kernels/v4/snapshot.h), the
 * basis of prefix caching (docs/prefix-cache.md).
 *
 *   - golden tiny model (window 32, compress ratios 0/4/128/4: the block is 128, the
 *     least common multiple): a prompt is prefilled in chunks that stop at every block
 *     end, where the block's record is saved.  A fresh sequence restored from the
 *     records of the first nb blocks must then (a) hold the caches of the prefilled one
 *     at that position (window ring, compressed entries, indexer keys, counts), and
 *     (b) continue bit for bit as a sequence that prefilled those positions itself:
 *     the rest of a longer prompt (ending inside a block, at a block end, past an HCA
 *     entry) and K decode steps give equal logits (memcmp), in exact and fast numerics;
 *   - restoring into a used sequence (other tokens, further on) gives the same;
 *   - v4_snap_block_len / v4_snap_block_bytes: the lcm rule and the record size;
 *   - errors: save off a block end, restore with records out of order, of another block
 *     length, or more blocks than the capacity (V4_ERR_INVALID; the sequence is reset).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/model_files.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/v4/model.h"
#include "kernels/v4/snapshot.h"
#include "tests/seq_testlib.h"
#include "tests/testutil.h"

enum { K = 12, CAP = 640, MAXB = 4 };

/* Feed toks[from..to) to s in chunks of up to 16 rows, never across a multiple of
 * block when recs is given; at each block end save its record into recs[k]. */
static int prefill(v4_ctx *c, v4_seq *s, const int32_t *toks, int from, int to, int block, void **recs,
                   v4_error *err)
{
    v4_seq *seqs[16];
    for (int k = 0; k < 16; k++)
        seqs[k] = s;
    for (int at = from; at < to;) {
        int rows = to - at < 16 ? to - at : 16;
        if (recs && (at / block + 1) * block - at < rows)
            rows = (at / block + 1) * block - at;
        if (v4_step_rows(c, seqs, toks + at, rows, NULL, NULL, NULL, err))
            return -1;
        at += rows;
        if (recs && at % block == 0 && at / block <= MAXB && v4_snap_block_save(s, block, recs[at / block - 1], err))
            return -1;
    }
    return 0;
}

/* One case: the prompt's first nb blocks come from records, the rest (to P) is
 * prefilled, then K decode steps; against a sequence that prefilled all P itself. */
static void one_case(const v4_model_files *m, v4_ctx *c, const char *mode, int block, int nb, int P, uint64_t seed)
{
    const int V = m->cfg.vocab_size;
    const size_t rb = v4_snap_block_bytes(&m->cfg, block);
    v4_error err = {0};
    int32_t prompt[CAP], toks[K];
    uint64_t x = seed;
    for (int i = 0; i < P; i++)
        prompt[i] = (int32_t)(t_seq_lcg(&x) % (uint64_t)V);
    for (int k = 0; k < K; k++)
        toks[k] = (int32_t)(t_seq_lcg(&x) % (uint64_t)V);
    void *recs[MAXB] = {0};
    for (int k = 0; k < MAXB; k++)
        recs[k] = malloc(rb);
    v4_seq *ref = v4_seq_create(&m->w, CAP, &err), *res = v4_seq_create(&m->w, CAP, &err);
    float *la = malloc(sizeof(float) * (size_t)K * V), *lb = malloc(sizeof(float) * (size_t)K * V);
    if (!ref || !res || !la || !lb || !recs[MAXB - 1]) {
        CHECK(0, "%s nb=%d P=%d: setup: %s", mode, nb, P, err.msg);
        goto out;
    }
    /* res is used first (other tokens), so the restore must overwrite everything */
    int32_t junk[50];
    for (int i = 0; i < 50; i++)
        junk[i] = (int32_t)(t_seq_lcg(&x) % (uint64_t)V);
    int ok = prefill(c, res, junk, 0, 50, block, NULL, &err) == 0;
    ok = ok && prefill(c, ref, prompt, 0, nb * block, block, recs, &err) == 0;
    CHECK(ok, "%s nb=%d P=%d: prefill: %s", mode, nb, P, err.msg);
    ok = ok && v4_snap_restore(res, block, (const void *const *)recs, nb, &err) == 0;
    CHECK(ok, "%s nb=%d P=%d: restore: %s", mode, nb, P, err.msg);
    CHECK(ok && v4_seq_pos(res) == nb * block && t_seq_same_caches(&m->cfg, ref, res),
          "%s nb=%d: the restored caches differ from the prefilled ones", mode, nb);
    ok = ok && prefill(c, ref, prompt, nb * block, P, block, NULL, &err) == 0;
    ok = ok && prefill(c, res, prompt, nb * block, P, block, NULL, &err) == 0;
    ok = ok && t_seq_decode(c, ref, toks, K, la, V, &err) == 0 && t_seq_decode(c, res, toks, K, lb, V, &err) == 0;
    CHECK(ok, "%s nb=%d P=%d: continue: %s", mode, nb, P, err.msg);
    CHECK(ok && !memcmp(la, lb, sizeof(float) * (size_t)K * V),
          "%s nb=%d P=%d: the restored sequence's logits differ from the prefilled one's", mode, nb, P);
    CHECK(ok && v4_seq_inexact(res) == 0, "%s: inexact cache values after a restore", mode);
out:
    for (int k = 0; k < MAXB; k++)
        free(recs[k]);
    v4_seq_free(ref);
    v4_seq_free(res);
    free(la);
    free(lb);
}

static void errors(const v4_model_files *m, v4_ctx *c, int block)
{
    const size_t rb = v4_snap_block_bytes(&m->cfg, block);
    v4_error err = {0};
    v4_seq *s = v4_seq_create(&m->w, CAP, &err), *small = v4_seq_create(&m->w, block, &err);
    void *r0 = malloc(rb), *r1 = malloc(rb);
    int32_t toks[256];
    for (int i = 0; i < 256; i++)
        toks[i] = (int32_t)(i * 37 % m->cfg.vocab_size);
    void *recs[2] = {r0, r1};
    int ok = s && small && r0 && r1 && prefill(c, s, toks, 0, 2 * block, block, recs, &err) == 0;
    CHECK(ok, "errors: setup: %s", err.msg);
    if (!ok)
        goto out;
    int32_t t = 5;
    CHECK(v4_step(c, &s, &t, 1, NULL, NULL, &err) == 0, "errors: step");
    v4_err_clear(&err);
    CHECK(v4_snap_block_save(s, block, r0, &err) == -1 && err.code == V4_ERR_INVALID,
          "save off a block end: %d '%s'", err.code, err.msg);
    v4_err_clear(&err);
    CHECK(v4_snap_block_save(s, block + 1, r0, &err) == -1 && err.code == V4_ERR_INVALID,
          "save with a block that is no multiple of the ratios: %d", err.code);
    const void *swapped[2] = {r1, r0};
    v4_err_clear(&err);
    CHECK(v4_snap_restore(s, block, swapped, 2, &err) == -1 && err.code == V4_ERR_INVALID && v4_seq_pos(s) == 0,
          "restore out of order: %d '%s' pos %d", err.code, err.msg, v4_seq_pos(s));
    const void *two[2] = {r0, r1};
    v4_err_clear(&err);
    CHECK(v4_snap_restore(small, block, two, 2, &err) == -1 && err.code == V4_ERR_INVALID,
          "restore past the capacity: %d '%s'", err.code, err.msg);
    v4_err_clear(&err);
    CHECK(v4_snap_restore(s, 2 * block, two, 1, &err) == -1 && err.code == V4_ERR_INVALID,
          "restore with another block length: %d '%s'", err.code, err.msg);
    CHECK(v4_snap_restore(s, block, two, 2, &err) == 0 && v4_seq_pos(s) == 2 * block, "restore after errors: %s",
          err.msg);
out:
    v4_seq_free(s);
    v4_seq_free(small);
    free(r0);
    free(r1);
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
    const int block = v4_snap_block_len(&m.cfg, 1);
    CHECK(block == 128, "the tiny model's block (ratios 4, 128) is 128, got %d", block);
    CHECK(v4_snap_block_len(&m.cfg, 200) == 256 && v4_snap_block_len(&m.cfg, 256) == 256,
          "block_len rounds up to a multiple of 128");
    CHECK(v4_snap_block_bytes(&m.cfg, 100) == 0 && v4_snap_block_bytes(&m.cfg, 256) > v4_snap_block_bytes(&m.cfg, 128),
          "block bytes: 0 off the rule, growing with the block");
    static const char *modes[2] = {"exact", "fast"};
    for (int mi = 0; mi < 2; mi++) {
        v4_backend *be = v4_cpu_backend_create_ex(1, NULL, modes[mi], &err);
        v4_ctx *c = be ? v4_ctx_create(&m.w, be, 16, &err) : NULL;
        CHECK(c != NULL, "%s context: %s", modes[mi], err.msg);
        if (c) {
            /* nb blocks restored, the prompt ending inside the next block, at its end, or
             * at the restore point (decode only); across the window (32) and HCA (128) */
            one_case(&m, c, modes[mi], block, 1, 128, 11);
            one_case(&m, c, modes[mi], block, 1, 131, 12);
            one_case(&m, c, modes[mi], block, 1, 256, 13);
#if !defined(__SANITIZE_ADDRESS__)
            one_case(&m, c, modes[mi], block, 2, 300, 14);
            one_case(&m, c, modes[mi], block, 3, 384, 15);
            one_case(&m, c, modes[mi], 2 * block, 1, 290, 16);
#endif
            if (mi == 0)
                errors(&m, c, block);
        }
        v4_ctx_free(c);
        if (be)
            be->ops->destroy(be);
    }
    v4_model_close(&m);
    TEST_DONE();
}
