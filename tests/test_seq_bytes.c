/* test_seq_bytes.c - a sequence's memory (v4_seq_bytes / v4_seq_bytes_for) and the
 * bf16 form of its caches (kernels/v4/seq.c).
 *
 *   - v4_seq_bytes of a created sequence equals v4_seq_bytes_for of its config and
 *     length, for lengths around the compression block boundaries (golden tiny model);
 *   - the size follows the layout model.h documents, computed here independently:
 *     bf16 window / compressed / indexer-key entries (2 bytes a value), f32 compressor
 *     state, plus a constant (the v4_seq and its layer array); the growth over 512
 *     tokens is exactly 512 tokens' worth of bf16 entries (f32 caches would double it)
 *     for the tiny, small and flash presets;
 *   - every value the engine stores in the caches is bf16 already (v4_seq_inexact stays
 *     0) over 300 decode steps of the tiny model (the window ring wraps 9 times, two HCA
 *     blocks complete), exact and fast numerics, and the counter does count a
 *     non-bf16 value (v4_seq_store_bf16 on 1 + 2^-20) and stores it rounded; reset
 *     clears it;
 *   - errors: max_len < 1 (V4_ERR_INVALID, bytes_for 0), v4_seq_bytes(NULL) = 0.
 * It prints the figures for small and flash at 4k / 64k / 1M tokens with the float32
 * caches of before for comparison (docs/memory.md quotes them).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/model_files.h"
#include "kernels/codec.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/v4/internal.h"
#include "kernels/v4/model.h"
#include "tests/testutil.h"
#include "worker/tools/mkmodel.h"

/* The layer part of model.h's layout with cache values of vb bytes (2: bf16 as now,
 * 4: the float32 caches of before); the compressor state is always f32. */
static size_t layout_bytes(const v4_config *c, long long len, size_t vb)
{
    size_t b = 0;
    for (int l = 0; l < c->n_layers; l++) {
        const int r = c->compress_ratios[l];
        b += (size_t)c->window * c->head_dim * vb;
        if (!r)
            continue;
        const size_t cap = (size_t)(len / r + 1);
        const size_t k = r == 4 ? 2 : 1;   /* overlap */
        b += cap * c->head_dim * vb + 2 * (k * r) * (k * c->head_dim) * sizeof(float);
        if (r == 4)
            b += cap * c->index_head_dim * vb + 2 * 8 * (2 * c->index_head_dim) * sizeof(float);
    }
    return b;
}

static void layout_checks(const char *name, const v4_config *c)
{
    const size_t fixed = v4_seq_bytes_for(c, 1) - layout_bytes(c, 1, 2);
    CHECK(fixed > 0 && fixed < 65536, "%s: fixed part %zu bytes", name, fixed);
    static const int lens[] = {2, 3, 4, 5, 127, 128, 129, 4096, 65536, 1048576};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        const size_t got = v4_seq_bytes_for(c, lens[i]), want = layout_bytes(c, lens[i], 2) + fixed;
        CHECK(got == want, "%s: %d tokens: v4_seq_bytes_for %zu, layout %zu", name, lens[i], got, want);
    }
    size_t grow = 0;   /* 512 tokens: 512 / r entries of every compressed layer (r divides 512) */
    for (int l = 0; l < c->n_layers; l++) {
        const int r = c->compress_ratios[l];
        if (r)
            grow += (size_t)(512 / r) * c->head_dim * 2;
        if (r == 4)
            grow += (size_t)(512 / 4) * c->index_head_dim * 2;
    }
    const size_t g = v4_seq_bytes_for(c, 4096 + 512) - v4_seq_bytes_for(c, 4096);
    CHECK(g == grow, "%s: 512 more tokens cost %zu bytes, expected %zu (bf16 entries)", name, g, grow);
    CHECK(v4_seq_bytes_for(c, 0) == 0 && v4_seq_bytes_for(c, -5) == 0, "%s: bytes_for of no tokens", name);
}

static void print_figures(const char *name, const v4_config *c)
{
    static const int lens[] = {4096, 65536, 1048576};
    const size_t fixed = v4_seq_bytes_for(c, 1) - layout_bytes(c, 1, 2);
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        const size_t now = v4_seq_bytes_for(c, lens[i]), before = layout_bytes(c, lens[i], 4) + fixed;
        printf("  %-5s %8d tokens: %12zu bytes (%8.2f MiB), f32 caches: %12zu bytes (%8.2f MiB), %.3fx\n", name,
               lens[i], now, now / 1048576.0, before, before / 1048576.0, (double)now / (double)before);
    }
}

/* n decode steps of the tiny model on a fresh sequence; returns its inexact count. */
static long run_tiny(const v4_model_files *m, const char *numerics, int n)
{
    v4_error err = {0};
    v4_backend *be = v4_cpu_backend_create_ex(1, NULL, numerics, &err);
    v4_ctx *c = be ? v4_ctx_create(&m->w, be, 1, &err) : NULL;
    v4_seq *s = c ? v4_seq_create(&m->w, n, &err) : NULL;
    float *logits = malloc(sizeof(float) * (size_t)m->cfg.vocab_size);
    CHECK(be && c && s && logits, "%s: setup: %s", numerics, err.msg);
    long bad = -1;
    if (be && c && s && logits) {
        uint64_t x = 12345;
        int ok = 1;
        for (int p = 0; p < n && ok; p++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            int32_t tok = (int32_t)((x >> 33) % (uint64_t)m->cfg.vocab_size);
            ok = v4_step(c, &s, &tok, 1, logits, NULL, &err) == 0;
            CHECK(ok, "%s: step %d: %s", numerics, p, err.msg);
        }
        int nc;
        (void)v4_seq_compressed(s, 2, &nc);
        CHECK(v4_seq_pos(s) == n && nc == n / 128, "%s: %d positions, %d HCA entries", numerics, v4_seq_pos(s), nc);
        bad = v4_seq_inexact(s);
        printf("  %s: %d steps, %ld non-bf16 cache values\n", numerics, n, bad);
    }
    free(logits);
    v4_seq_free(s);
    v4_ctx_free(c);
    if (be)
        be->ops->destroy(be);
    return bad;
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
    const v4_config *cfg = &m.cfg;

    /* a created sequence holds what bytes_for says */
    static const int lens[] = {1, 2, 3, 4, 5, 31, 32, 33, 127, 128, 129, 300, 4096};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        v4_seq *s = v4_seq_create(&m.w, lens[i], &err);
        CHECK(s != NULL, "create %d: %s", lens[i], err.msg);
        if (!s)
            continue;
        CHECK(v4_seq_bytes(s) == v4_seq_bytes_for(cfg, lens[i]), "%d tokens: v4_seq_bytes %zu, bytes_for %zu",
              lens[i], v4_seq_bytes(s), v4_seq_bytes_for(cfg, lens[i]));
        CHECK(v4_seq_capacity(s) == lens[i] && v4_seq_inexact(s) == 0, "%d tokens: capacity / inexact", lens[i]);
        v4_seq_free(s);
    }
    layout_checks("model", cfg);
    static const char *presets[] = {"tiny", "small", "flash"};
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        v4_config pc;
        CHECK(v4mk_preset(presets[i], 0, &pc, &err) == 0, "preset %s: %s", presets[i], err.msg);
        layout_checks(presets[i], &pc);
        if (i)
            print_figures(presets[i], &pc);
    }

    /* errors */
    v4_err_clear(&err);
    CHECK(v4_seq_create(&m.w, 0, &err) == NULL && err.code == V4_ERR_INVALID, "max_len 0 accepted");
    CHECK(v4_seq_bytes(NULL) == 0, "v4_seq_bytes(NULL)");

    /* the inexact counter counts, and stores rounded */
    {
        v4_seq *s = v4_seq_create(&m.w, 8, &err);
        CHECK(s != NULL, "create: %s", err.msg);
        if (s) {
            const float v[3] = {1.0f, 1.0f + 0x1p-20f, -0.0f};
            uint16_t out[3];
            v4_seq_store_bf16(s, out, v, 3);
            CHECK(v4_seq_inexact(s) == 1, "1 + 2^-20 not counted (%ld)", v4_seq_inexact(s));
            CHECK(out[0] == 0x3f80 && out[1] == 0x3f80 && out[2] == 0x8000, "stored %04x %04x %04x", out[0], out[1],
                  out[2]);
            v4_seq_reset(s);
            CHECK(v4_seq_inexact(s) == 0, "reset keeps the count");
            v4_seq_free(s);
        }
    }

    /* the engine's cache values are bf16 */
    CHECK(run_tiny(&m, "exact", 300) == 0, "exact: non-bf16 cache values");
    CHECK(run_tiny(&m, "fast", 300) == 0, "fast: non-bf16 cache values");
    v4_model_close(&m);
    TEST_DONE();
}
