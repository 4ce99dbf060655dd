/* test_cuda_lt_align.c - the operand-alignment decision of the fast mode's cuBLASLt
 * products (kernels/cuda/cuda_lt_policy.h), a pure function tested on the CPU in every
 * build: an operand's alignment is the largest power of two dividing its address and its
 * column stride, capped at cuBLASLt's 256-byte default; addresses aligned to exactly 16,
 * 32, 64, 128 and 256 bytes (and more) give those preferences, 1/2/4/8-byte ones and NULL
 * are declined to the exact kernel; a column stride of 128 bytes (an FP8 K of 384) or 16
 * (a BF16 K of 8) lowers the value like a pointer would; the D operand's stride (rows
 * floats) enters as well.  Why: the heuristic picked algorithms for 256-byte operands by
 * default while weight row views and expert-slot parts are 16..128-byte aligned.  Also
 * the names of the self-test verdict's states (the metric's result label). */
#include <stdint.h>
#include <string.h>

#include "kernels/cuda/cuda_lt_policy.h"
#include "testutil.h"

/* An address aligned to exactly `a` bytes (a power of two): an odd multiple of a. */
static uintptr_t exactly(uintptr_t a) { return (uintptr_t)0x7f0000000000ull + 3 * a; }

static void t_align_of(void)
{
    /* exactly 2^k for k = 0..12, with a column stride that does not limit it */
    for (int k = 0; k <= 12; k++) {
        const uintptr_t a = (uintptr_t)1 << k;
        const uint32_t want = a < 256 ? (uint32_t)a : 256u;
        CHECK(v4cu_lt_align_of(exactly(a), 4096) == want, "align_of(exactly %lu) = %u, want %u", (unsigned long)a,
              v4cu_lt_align_of(exactly(a), 4096), want);
        CHECK(v4cu_lt_align_of(exactly(a), 0) == want, "align_of(exactly %lu, ld 0)", (unsigned long)a);
    }
    static const uint32_t named[5] = {16, 32, 64, 128, 256};
    for (int i = 0; i < 5; i++)
        CHECK(v4cu_lt_align_of(exactly(named[i]), 1u << 20) == named[i], "aligned to %u", named[i]);
    /* 256-byte pointers, strides that limit: FP8 K = 384 (128 B), 4096 (256), BF16 K = 8 (16 B), K = 12 (24 B) */
    CHECK(v4cu_lt_align_of(exactly(256), 384) == 128, "FP8 K=384: 128");
    CHECK(v4cu_lt_align_of(exactly(256), 4096) == 256, "FP8 K=4096: 256");
    CHECK(v4cu_lt_align_of(exactly(256), 2 * 8) == 16, "BF16 K=8: 16");
    CHECK(v4cu_lt_align_of(exactly(256), 2 * 12) == 8, "BF16 K=12: 8 (declined by the pick)");
    /* D: rows floats per column: 16 rows -> 64 B, 48 -> 64, 64 -> 256 */
    CHECK(v4cu_lt_align_of(exactly(256), 4 * 16) == 64 && v4cu_lt_align_of(exactly(256), 4 * 48) == 64 &&
              v4cu_lt_align_of(exactly(256), 4 * 64) == 256,
          "D strides");
    CHECK(v4cu_lt_align_of(0, 0) == 256, "NULL alone: only the cap (the pick declines NULL)");
}

static void t_pick(void)
{
    v4cu_lt_align al;
    /* every operand straight from cudaMalloc (256) with strides that keep it */
    CHECK(v4cu_lt_align_pick(exactly(256), 4096, exactly(512), 4096, exactly(4096), 4 * 256, exactly(4096), 4 * 256,
                             &al) == 0 &&
              al.a == 256 && al.b == 256 && al.c == 256 && al.d == 256,
          "all 256: accepted, preferences 256 (%u %u %u %u)", al.a, al.b, al.c, al.d);
    /* A a weight row view or expert-slot part: each power of two from 16 to 256 is told as is */
    static const uint32_t named[5] = {16, 32, 64, 128, 256};
    for (int i = 0; i < 5; i++) {
        const uintptr_t w = exactly(named[i]);
        const int r = v4cu_lt_align_pick(w, 4096, exactly(256), 4096, exactly(256), 4 * 128, exactly(256), 4 * 128, &al);
        CHECK(r == 0 && al.a == named[i] && al.b == 256 && al.c == 256 && al.d == 256,
              "A aligned to %u: accepted with A = %u (got r %d, A %u)", named[i], named[i], r, al.a);
        /* the same on B, C and D */
        CHECK(v4cu_lt_align_pick(exactly(256), 4096, w, 4096, exactly(256), 1024, exactly(256), 1024, &al) == 0 &&
                  al.b == named[i],
              "B aligned to %u", named[i]);
        CHECK(v4cu_lt_align_pick(exactly(256), 4096, exactly(256), 4096, w, 1024, w, 1024, &al) == 0 &&
                  al.c == named[i] && al.d == named[i],
              "C = D aligned to %u", named[i]);
    }
    /* misaligned operands: declined, preferences zeroed */
    static const uintptr_t bad[4] = {1, 2, 4, 8};
    for (int i = 0; i < 4; i++) {
        const uintptr_t p = exactly(bad[i]);
        al.a = al.b = al.c = al.d = 99;
        CHECK(v4cu_lt_align_pick(p, 4096, exactly(256), 4096, exactly(256), 1024, exactly(256), 1024, &al) == 1 &&
                  al.a == 0 && al.b == 0 && al.c == 0 && al.d == 0,
              "A aligned to %lu: declined", (unsigned long)bad[i]);
        CHECK(v4cu_lt_align_pick(exactly(256), 4096, p, 4096, exactly(256), 1024, exactly(256), 1024, &al) == 1,
              "B aligned to %lu: declined", (unsigned long)bad[i]);
        CHECK(v4cu_lt_align_pick(exactly(256), 4096, exactly(256), 4096, exactly(256), 1024, p, 1024, &al) == 1,
              "D aligned to %lu: declined", (unsigned long)bad[i]);
    }
    /* a stride below 16 bytes declines a well-aligned pointer; NULL declines */
    CHECK(v4cu_lt_align_pick(exactly(256), 2 * 12, exactly(256), 2 * 12, exactly(256), 1024, exactly(256), 1024, &al) ==
              1,
          "BF16 K=12 (24-byte columns): declined");
    CHECK(v4cu_lt_align_pick(0, 4096, exactly(256), 4096, exactly(256), 1024, exactly(256), 1024, &al) == 1,
          "NULL A: declined");
    CHECK(v4cu_lt_align_pick(exactly(256), 4096, exactly(256), 4096, exactly(256), 1024, 0, 1024, &al) == 1,
          "NULL D: declined");
    /* plans are keyed on the four values */
    v4cu_lt_align x = {256, 256, 64, 64}, y = {128, 256, 64, 64};
    CHECK(v4cu_lt_align_eq(&x, &x) && !v4cu_lt_align_eq(&x, &y), "align_eq");
}

static void t_state_names(void)
{
    CHECK(!strcmp(v4_fast_state_name(V4_FAST_NOT_RUN), "not_run") &&
              !strcmp(v4_fast_state_name(V4_FAST_PASSED), "passed") &&
              !strcmp(v4_fast_state_name(V4_FAST_FAILED), "failed") &&
              !strcmp(v4_fast_state_name(V4_FAST_UNAVAILABLE), "unavailable") &&
              !strcmp(v4_fast_state_name(42), "not_run"),
          "state names");
}

int main(void)
{
    t_align_of();
    t_pick();
    t_state_names();
    TEST_DONE();
}
