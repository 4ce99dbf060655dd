/* test_attn_fast.c - the SIMD attention math (kernels/v4/attn_kern.h) bit for bit
 * against the plain reference loops.
 *
 * For every implementation the CPU runs ("portable" always; "avx2", "avx512" when
 * supported, the others are reported as skipped), on random data:
 *   - v4_sparse_attn_heads_k against v4_sparse_attn_head called per head (the
 *     reference the CUDA kernels follow): head dims 64, 70 (a tail of hd % 8), 128,
 *     512; 1, 4, 8, 13, 32, 64 heads; 1..700 candidates with NULL slots (none, random,
 *     a fully masked first chunk, masked chunks in the middle, all masked); data of
 *     ordinary bf16 magnitudes, of mixed huge/tiny/negative/infinite values (dots
 *     overflowing to +-inf, NaN dots and scores), and of ties (repeated key rows, zero queries, equal
 *     scores); outputs compared with memcmp, plus a guard after o and unchanged
 *     inputs;
 *   - v4_index_scores_k against the reference loop v4_index_scores_ref (indexer.c, the
 *     loop from before the SIMD path): index dims 64, 128, 512; 1, 4, 8, 13, 16, 64 heads; 0..700
 *     keys, the same kinds of data and head weights of both signs;
 *   - the element-wise steps (div_bf16, relu_terms8) against their scalar expressions
 *     at bf16 rounding midpoints, NaN, +-inf, -0, all lengths 0..40;
 *   - every case again with the key rows as bf16 bits (the sequence caches' form:
 *     v4_sparse_attn_head_bf16 / v4_sparse_attn_heads_bf16_k, v4_index_scores_ref_bf16
 *     / v4_index_scores_bf16_k) against the float reference on rows holding the same
 *     values (the rows rounded to bf16 first where the data kind is not bf16);
 *   - the public entry points (v4_sparse_attn_heads, v4_index_scores) once each;
 *   - the choice that follows the CPU backend's ISA (v4_attn_kern_for_isa, and the
 *     path a v4_ctx on such a backend reports): scalar -> the reference loops
 *     (NULL), avx2 -> avx2, avx512 / avx512vnni -> avx512, auto -> the widest, for
 *     every ISA the CPU supports, named or through V4_CPU_ISA, each giving the
 *     reference's bits.
 * The double chains are long (hd up to 512 terms) with mixed signs and magnitudes, so
 * any change of summation order or a missing/extra rounding shows in the low bits.
 * Mutations tried during development and caught: the dots8 chain summed from d = hd-1
 * down (caught only thanks to the planted cancellations), its d tiles in reverse, the
 * accum8 chain over c reversed (idem) and its hd % 8 tail reversed, the indexer's head
 * order reversed within a group, bf16(p) left unrounded or added rounded to psum,
 * the hd % 8 tail skipped, the last key of a short block dropped, o = acc * (1/l),
 * the index terms unrounded, relu zeroing NaN, bf16 without its NaN rule or with
 * round-half-up.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/model_files.h"
#include "kernels/codec.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/v4/model.h"
#include "kernels/v4/attn_kern.h"
#include "kernels/v4/ops.h"
#include "tests/testutil.h"

typedef struct rng { uint64_t s; } rng;
static uint64_t rnext(rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double runif(rng *r) { return (double)(rnext(r) >> 11) * 0x1p-53; }
static int rint_(rng *r, int lo, int hi) { return lo + (int)(rnext(r) % (uint64_t)(hi - lo + 1)); }

enum { DATA_FULL, DATA_BF16, DATA_WILD, DATA_TIES, DATA_CANCEL, N_DATA };
static const char *data_name[N_DATA] = {"full", "bf16", "wild", "ties", "cancel"};

/* One value of the given kind.  full: float32 with a full mantissa and magnitudes
 * 2^-6..2^6, so the double sums are inexact and depend on their order (bf16 data,
 * as in the model, mostly sums exactly: any order gives the same bits there).
 * wild: also +-3e38 (dots overflow to +-inf, NaN scores), +-inf (NaN dots), +-1e30,
 * 1e-30, zeros. */
static float rvalue(rng *r, int kind)
{
    double g = runif(r) + runif(r) + runif(r) - 1.5;
    if (kind == DATA_WILD) {
        int k = rint_(r, 0, 79);
        if (k < 4)
            return (rnext(r) & 1) ? 3e38f : -3e38f;
        if (k == 4)
            return (rnext(r) & 1) ? INFINITY : -INFINITY;   /* with the zeros: NaN dots */
        k = k % 20;
        if (k == 1)
            return (float)(g * 1e30);
        if (k == 2)
            return (float)(g * 1e-30);
        if (k == 3)
            return 0.0f;
        return (float)(g * ldexp(1.0, rint_(r, -10, 10)));
    }
    if (kind == DATA_TIES)
        return (float)rint_(r, -2, 2);                 /* few distinct values: equal dots */
    if (kind == DATA_BF16)
        return v4_bf16((float)(g * 2.0));
    return (float)(g * ldexp(1.0, rint_(r, -6, 6)));
}

/* +-(1..2) * 2^e with a full mantissa */
static float rbig(rng *r, int e)
{
    float v = (float)ldexp(1.0 + runif(r), e);
    return (rnext(r) & 1) ? -v : v;
}

/* cancel data (on top of full data): a float32 result of a double chain rarely shows
 * the chain's order (the double error is ~2^-29 of a float ulp), unless big terms
 * cancel exactly and leave the rounded small terms added in between.  Planted here:
 *   q.k: q[1] = q[b] = Q_h, k[1] = U_c, k[b] = -U_c (~2^30), b = hd - 2: the products
 *     cancel exactly; in odd heads Q_h ~ 2^30, so the terms added between them are
 *     rounded to multiples of 2^8 (the scores depend on the dot's order), in even
 *     heads Q_h ~ 1 (moderate softmax, for the acc cancellation);
 *   acc: q is 0 on the dims d % 8 == 5, so those key dims do not change the scores;
 *     key row r + 3 is row r with those dims negated (r % 6 < 3), both ~2^30: the
 *     two candidates get the same p and their acc terms cancel exactly. */
static void plant_cancel(rng *r, float *q, int nq, float *rows, int nrows, int dim)
{
    const int b = dim - 2;
    for (int h = 0; h < nq; h++) {
        float *qh = q + (size_t)h * dim;
        qh[1] = qh[b] = fabsf(rbig(r, h % 2 ? 30 : 0));
        for (int d = 5; d < dim; d += 8)
            qh[d] = 0.0f;
    }
    for (int j = 0; j < nrows; j++) {
        float *k = rows + (size_t)j * dim;
        k[1] = rbig(r, 30);
        k[b] = -k[1];
        for (int d = 5; d < dim; d += 8)
            k[d] = rbig(r, 30);
    }
    for (int j = 0; j + 3 < nrows; j++)
        if (j % 6 < 3) {
            float *k = rows + (size_t)j * dim, *k3 = rows + (size_t)(j + 3) * dim;
            memcpy(k3, k, sizeof(float) * (size_t)dim);
            for (int d = 5; d < dim; d += 8)
                k3[d] = -k[d];
        }
}

enum { MASK_NONE, MASK_RANDOM, MASK_FIRST_CHUNK, MASK_MIDDLE, MASK_ALL, N_MASK };
static const char *mask_name[N_MASK] = {"none", "random", "first-chunk", "middle", "all"};

static int g_cases;

/* Index of the first float whose bits differ, SIZE_MAX when all n are identical. */
static size_t first_diff(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0)
            return i;
    return SIZE_MAX;
}

/* Rows as bf16 bits (kh) and as the floats those bits hold (kr); 1 when every value
 * was bf16 already (kr == rows bit for bit). */
static int to_bf16(const float *rows, size_t n, uint16_t *kh, float *kr)
{
    int exact = 1;
    for (size_t i = 0; i < n; i++) {
        kh[i] = v4_bf16_bits(rows[i]);
        kr[i] = v4_bf16_from_bits(kh[i]);
        exact &= memcmp(&kr[i], &rows[i], sizeof(float)) == 0;
    }
    return exact;
}

/* The bf16-row variants (the sequence caches' form: the reference
 * v4_sparse_attn_head_bf16 per head, and v4_sparse_attn_heads_bf16_k through K) on the
 * case's key rows rounded to bf16: the bits of the float reference on rows holding the
 * same values (oref itself when the rows were bf16 already). */
static void attn_bf16_case(const v4_attn_kern *K, const float *q, int H, int hd, int L, const float *kvbuf,
                           int nrows, const float *const *cand, float scale, const float *sinks, const float *oref,
                           const char *what)
{
    const size_t n = (size_t)nrows * hd, no = (size_t)H * hd;
    uint16_t *kh = malloc(sizeof(uint16_t) * n);
    float *kr = malloc(sizeof(float) * n), *want = malloc(sizeof(float) * no), *o = malloc(sizeof(float) * no);
    const uint16_t **ch = malloc(sizeof(uint16_t *) * (size_t)L);
    const float **cr = malloc(sizeof(float *) * (size_t)L);
    const int exact = to_bf16(kvbuf, n, kh, kr);
    for (int c = 0; c < L; c++) {
        ch[c] = cand[c] ? kh + (cand[c] - kvbuf) : NULL;
        cr[c] = cand[c] ? kr + (cand[c] - kvbuf) : NULL;
    }
    if (exact)
        memcpy(want, oref, sizeof(float) * no);
    else
        for (int h = 0; h < H; h++)
            v4_sparse_attn_head(q + (size_t)h * hd, cr, L, hd, scale, sinks[h], want + (size_t)h * hd);
    for (int h = 0; h < H; h++)
        v4_sparse_attn_head_bf16(q + (size_t)h * hd, ch, L, hd, scale, sinks[h], o + (size_t)h * hd);
    size_t i = first_diff(o, want, no);
    CHECK(i == SIZE_MAX, "%s: v4_sparse_attn_head_bf16 first difference head %zu d %zu", what, i / (size_t)hd,
          i % (size_t)hd);
    v4_sparse_attn_heads_bf16_k(K, q, H, ch, L, hd, scale, sinks, o);
    i = first_diff(o, want, no);
    CHECK(i == SIZE_MAX, "%s: bf16 rows through %s: first difference head %zu d %zu (rows %s bf16)", what,
          v4_attn_kern_name(K), i / (size_t)hd, i % (size_t)hd, exact ? "were" : "rounded to");
    free(kh);
    free(kr);
    free(want);
    free(o);
    free(ch);
    free(cr);
}

/* v4_index_scores_ref_bf16 and v4_index_scores_bf16_k on the keys rounded to bf16
 * against the float reference on the same values (sref when they were bf16 already). */
static void index_bf16_case(const v4_attn_kern *K, const float *q, const float *keys, int n, const float *wh, int ih,
                            int id, const float *sref, const char *what)
{
    const size_t nk = (size_t)n * id;
    uint16_t *kh = malloc(sizeof(uint16_t) * (nk + 1));
    float *kr = malloc(sizeof(float) * (nk + 1));
    float *want = malloc(sizeof(float) * ((size_t)n + 1)), *sc = malloc(sizeof(float) * ((size_t)n + 1));
    if (to_bf16(keys, nk, kh, kr))
        memcpy(want, sref, sizeof(float) * (size_t)n);
    else
        v4_index_scores_ref(q, kr, n, wh, ih, id, want);
    v4_index_scores_ref_bf16(q, kh, n, wh, ih, id, sc);
    size_t j = first_diff(sc, want, (size_t)n);
    CHECK(j == SIZE_MAX, "%s: v4_index_scores_ref_bf16 first difference key %zu", what, j);
    v4_index_scores_bf16_k(K, q, kh, n, wh, ih, id, sc);
    j = first_diff(sc, want, (size_t)n);
    CHECK(j == SIZE_MAX, "%s: bf16 keys through %s: first difference key %zu", what, v4_attn_kern_name(K), j);
    free(kh);
    free(kr);
    free(want);
    free(sc);
}

static void attn_case(const v4_attn_kern *K, rng *r, int H, int hd, int L, int data, int mask)
{
    const int nrows = L + 1;
    float *kvbuf = malloc(sizeof(float) * (size_t)nrows * hd);
    float *q = malloc(sizeof(float) * (size_t)H * hd), *q0 = malloc(sizeof(float) * (size_t)H * hd);
    float *sinks = malloc(sizeof(float) * (size_t)H);
    float *oref = malloc(sizeof(float) * (size_t)H * hd), *o = malloc(sizeof(float) * ((size_t)H * hd + 16));
    const float **cand = malloc(sizeof(float *) * (size_t)L);
    for (size_t i = 0; i < (size_t)nrows * hd; i++)
        kvbuf[i] = rvalue(r, data);
    for (size_t i = 0; i < (size_t)H * hd; i++)
        q[i] = rvalue(r, data);
    if (data == DATA_CANCEL)
        plant_cancel(r, q, H, kvbuf, nrows, hd);
    if (data == DATA_TIES && H > 1)
        memset(q + hd, 0, sizeof(float) * hd);          /* head 1: all scores 0 */
    for (int h = 0; h < H; h++)
        sinks[h] = v4_bf16((float)(runif(r) * 8.0 - 4.0));
    for (int c = 0; c < L; c++) {
        int row = data == DATA_TIES ? rint_(r, 0, nrows < 4 ? nrows - 1 : 3) : c; /* ties: repeated rows */
        cand[c] = kvbuf + (size_t)row * hd;
        int masked = 0;
        switch (mask) {
        case MASK_RANDOM: masked = rint_(r, 0, 9) < 3; break;
        case MASK_FIRST_CHUNK: masked = c < 64 || rint_(r, 0, 9) == 0; break;
        case MASK_MIDDLE: masked = (c >= 64 && c < 192) || (c >= 300 && c < 310); break;
        case MASK_ALL: masked = 1; break;
        default: break;
        }
        if (masked)
            cand[c] = NULL;
    }
    memcpy(q0, q, sizeof(float) * (size_t)H * hd);
    const float scale = (float)pow((double)hd, -0.5);
    for (int h = 0; h < H; h++)
        v4_sparse_attn_head(q + (size_t)h * hd, cand, L, hd, scale, sinks[h], oref + (size_t)h * hd);
    for (size_t i = 0; i < (size_t)H * hd + 16; i++)
        o[i] = -7.25f;                                  /* garbage in, guard after */
    v4_sparse_attn_heads_k(K, q, H, cand, L, hd, scale, sinks, o);
    const size_t i = first_diff(o, oref, (size_t)H * hd);
    CHECK(i == SIZE_MAX, "attn %s H=%d hd=%d L=%d data=%s mask=%s: first difference head %zu d %zu: %a vs reference %a",
          v4_attn_kern_name(K), H, hd, L, data_name[data], mask_name[mask], i / (size_t)hd, i % (size_t)hd,
          i == SIZE_MAX ? 0.0 : (double)o[i], i == SIZE_MAX ? 0.0 : (double)oref[i]);
    int guard = 1;
    for (int i = 0; i < 16; i++)
        guard &= o[(size_t)H * hd + i] == -7.25f;
    CHECK(guard, "attn %s H=%d hd=%d L=%d: wrote past o", v4_attn_kern_name(K), H, hd, L);
    CHECK(memcmp(q, q0, sizeof(float) * (size_t)H * hd) == 0, "attn %s: q modified", v4_attn_kern_name(K));
    char what[160];
    snprintf(what, sizeof what, "attn %s H=%d hd=%d L=%d data=%s mask=%s", v4_attn_kern_name(K), H, hd, L,
             data_name[data], mask_name[mask]);
    attn_bf16_case(K, q, H, hd, L, kvbuf, nrows, cand, scale, sinks, oref, what);
    g_cases++;
    free(kvbuf);
    free(q);
    free(q0);
    free(sinks);
    free(oref);
    free(o);
    free(cand);
}

static void index_case(const v4_attn_kern *K, rng *r, int ih, int id, int n, int data)
{
    float *q = malloc(sizeof(float) * (size_t)ih * id);
    float *keys = malloc(sizeof(float) * ((size_t)n * id + 1));
    float *wh = malloc(sizeof(float) * (size_t)ih);
    float *sref = malloc(sizeof(float) * ((size_t)n + 1)), *s = malloc(sizeof(float) * ((size_t)n + 16));
    for (size_t i = 0; i < (size_t)ih * id; i++)
        q[i] = rvalue(r, data);
    for (size_t i = 0; i < (size_t)n * id; i++)
        keys[i] = rvalue(r, data);
    if (data == DATA_TIES && n > 3)
        memcpy(keys + (size_t)2 * id, keys, sizeof(float) * id);  /* equal scores */
    float iw[1024];
    for (int h = 0; h < ih; h++)
        iw[h] = (float)(runif(r) * 4.0 - 2.0);
    if (data == DATA_CANCEL) {
        /* the q.k cancellation of plant_cancel, and over the heads: head h + 2 = head
         * h with the opposite weight ~2^65 (h % 4 < 2), so their terms cancel
         * exactly and the small terms between them are lost entirely */
        plant_cancel(r, q, ih, keys, n, id);
        for (int h = 0; h + 2 < ih; h++)
            if (h % 4 < 2) {
                memcpy(q + (size_t)(h + 2) * id, q + (size_t)h * id, sizeof(float) * (size_t)id);
                iw[h] = rbig(r, 65);
                iw[h + 2] = -iw[h];
            }
    }
    v4_index_head_weights(iw, ih, id, wh);
    v4_index_scores_ref(q, keys, n, wh, ih, id, sref);
    for (int i = 0; i < n + 16; i++)
        s[i] = -7.25f;
    v4_index_scores_k(K, q, keys, n, wh, ih, id, s);
    const size_t j = first_diff(s, sref, (size_t)n);
    CHECK(j == SIZE_MAX, "index %s ih=%d id=%d n=%d data=%s: first difference key %zu: %a vs reference %a",
          v4_attn_kern_name(K), ih, id, n, data_name[data], j, j == SIZE_MAX ? 0.0 : (double)s[j], j == SIZE_MAX ? 0.0 : (double)sref[j]);
    int guard = 1;
    for (int i = 0; i < 16; i++)
        guard &= s[n + i] == -7.25f;
    CHECK(guard, "index %s ih=%d id=%d n=%d: wrote past score", v4_attn_kern_name(K), ih, id, n);
    char what[160];
    snprintf(what, sizeof what, "index %s ih=%d id=%d n=%d data=%s", v4_attn_kern_name(K), ih, id, n,
             data_name[data]);
    index_bf16_case(K, q, keys, n, wh, ih, id, sref, what);
    g_cases++;
    free(q);
    free(keys);
    free(wh);
    free(sref);
    free(s);
}

/* A float within a few ulps of a bf16 rounding midpoint (ties, just above, just below). */
static float near_midpoint(rng *r)
{
    uint32_t u = (uint32_t)rnext(r) & 0x3fff0000u;      /* a bf16 value of moderate size */
    u |= 0x8000u;                                       /* + half a bf16 ulp */
    u += (uint32_t)rint_(r, -3, 3);
    if (rnext(r) & 1)
        u |= 0x80000000u;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* div_bf16 and relu_terms8 element by element against the scalar expressions, with
 * operands whose results sit at bf16 rounding midpoints (a different division or a
 * missing rounding shows), NaN, +-inf, +-0, negatives, and every length 0..40 (tails). */
static void elementwise(const v4_attn_kern *K, rng *r)
{
    for (int n = 0; n <= 40; n++)
        for (int rep = 0; rep < 25; rep++) {
            float x[48], ref[48], l = (float)(0.5 + runif(r) * 64.0);
            for (int i = 0; i < 48; i++) {
                const int k = rint_(r, 0, 15);
                x[i] = k == 0 ? NAN : k == 1 ? -INFINITY : k == 2 ? -0.0f : near_midpoint(r) * l;
                ref[i] = v4_bf16(x[i] / l);
            }
            memcpy(ref + n, x + n, sizeof(float) * (size_t)(48 - n));   /* untouched */
            K->div_bf16(x, n, l);
            const size_t i = first_diff(x, ref, 48);
            CHECK(i == SIZE_MAX, "div_bf16 %s n=%d l=%a: element %zu: %a vs %a", K->name, n, (double)l, i,
                  i == SIZE_MAX ? 0.0 : (double)x[i], i == SIZE_MAX ? 0.0 : (double)ref[i]);
        }
    for (int rows = 0; rows <= 9; rows++)
        for (int rep = 0; rep < 40; rep++) {
            double D[80], T[80], Tref[80];
            float w8[8];
            for (int i = 0; i < 8; i++)
                w8[i] = v4_bf16((float)(runif(r) * 4.0 - 2.0));
            for (int e = 0; e < 80; e++) {
                const int k = rint_(r, 0, 15);
                D[e] = k == 0 ? (double)NAN : k == 1 ? -INFINITY : k == 2 ? -0.0 : k == 3 ? 1e300
                       : (double)near_midpoint(r) * (1.0 + (runif(r) - 0.5) * 0x1p-30);
                float d = v4_bf16((float)D[e]);
                if (d < 0.0f)
                    d = 0.0f;
                Tref[e] = (double)v4_bf16(d * w8[e % 8]);
                T[e] = -7.25;
            }
            K->relu_terms8(D, rows, w8, T);
            for (int e = rows * 8; e < 80; e++)
                Tref[e] = -7.25;
            CHECK(memcmp(T, Tref, sizeof T) == 0, "relu_terms8 %s rows=%d differs", K->name, rows);
        }
}

static void run_impl(const v4_attn_kern *K, uint64_t seed)
{
    rng r = {seed};
    static const int hds[] = {64, 70, 128, 512};
    static const int Hs[] = {1, 4, 8, 13, 32, 64};
    static const int Ls[] = {1, 2, 5, 63, 64, 65, 127, 128, 129, 200, 333, 700};
    int before = g_cases;
    for (size_t a = 0; a < sizeof hds / sizeof hds[0]; a++)
        for (size_t b = 0; b < sizeof Hs / sizeof Hs[0]; b++) {
            const int hd = hds[a], H = Hs[b];
            /* work ~ H * L * hd: long lists for the small shapes, a few for the big ones */
            for (size_t c = 0; c < sizeof Ls / sizeof Ls[0]; c++) {
                const int L = Ls[c];
                if ((double)H * L * hd > 3e6 && c % 4 != 3)
                    continue;
                const int data = (int)((a + b + c) % N_DATA);
                int mask = (int)((a * 7 + b * 3 + c) % N_MASK);
                if (mask == MASK_ALL && c % 2)
                    mask = MASK_RANDOM;
                attn_case(K, &r, H, hd, L, data, mask);
            }
            /* every data kind with a fully masked first chunk, and unmasked */
            for (int data = 0; data < N_DATA; data++) {
                attn_case(K, &r, H, hd, 150, data, MASK_FIRST_CHUNK);
                if (H * hd <= 8192)
                    attn_case(K, &r, H, hd, rint_(&r, 1, 260), data, data == DATA_WILD ? MASK_NONE : MASK_RANDOM);
            }
        }
    printf("  %-8s attention: %d cases\n", K->name, g_cases - before);
    before = g_cases;
    static const int ids[] = {64, 128, 512};
    static const int ihs[] = {1, 4, 8, 13, 16, 64};
    static const int ns[] = {0, 1, 7, 63, 64, 65, 300, 700};
    for (size_t a = 0; a < sizeof ids / sizeof ids[0]; a++)
        for (size_t b = 0; b < sizeof ihs / sizeof ihs[0]; b++)
            for (size_t c = 0; c < sizeof ns / sizeof ns[0]; c++) {
                if ((double)ihs[b] * ns[c] * ids[a] > 4e6 && c % 3)
                    continue;
                index_case(K, &r, ihs[b], ids[a], ns[c], (int)((a + b + c) % N_DATA));
            }
    printf("  %-8s index scores: %d cases\n", K->name, g_cases - before);
    elementwise(K, &r);
}

/* The engine follows the CPU backend's ISA: for every ISA this CPU supports,
 * v4_attn_kern_for_isa picks the expected set (scalar: NULL, the reference loops;
 * avx512vnni: the AVX-512 set; auto: the widest), a context on a backend created with
 * that ISA (also through V4_CPU_ISA) reports the same path, and the set gives the
 * reference's bits on a few cases of each kind.  The context needs a model: the golden
 * tiny checkpoint (V4_TEST_DATA). */
static void isa_selection(void)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/golden/tiny/model", t_env("V4_TEST_DATA", "tests/data"));
    v4_model_files m;
    v4_error err = {0};
    if (v4_model_open(dir, &m, &err)) {
        CHECK(0, "open %s: %s", dir, err.msg);
        return;
    }
    unsetenv("V4_CPU_ISA");
    const v4_attn_kern *best = v4_attn_kern_get();
    static const struct { const char *isa, *path; } sel[] = {
        {"scalar", "reference"}, {"avx2", "avx2"}, {"avx512", "avx512"}, {"avx512vnni", "avx512"}, {"auto", NULL},
    };
    int ran = 0;
    for (size_t i = 0; i < sizeof sel / sizeof sel[0]; i++) {
        const char *isa = sel[i].isa, *want = sel[i].path ? sel[i].path : best->name;
        if (!v4_cpu_isa_supported(isa)) {
            printf("  isa %-10s skipped (not supported by this CPU)\n", isa);
            continue;
        }
        const v4_attn_kern *K = v4_attn_kern_for_isa(isa);
        CHECK(strcmp(v4_attn_kern_name(K), want) == 0, "isa %s: attention path %s, expected %s", isa,
              v4_attn_kern_name(K), want);
        CHECK((K == NULL) == (strcmp(isa, "scalar") == 0), "isa %s: the reference loops iff scalar", isa);
        v4_backend *be = v4_cpu_backend_create(1, isa, &err);
        CHECK(be != NULL, "backend %s: %s", isa, err.msg);
        v4_ctx *ctx = be ? v4_ctx_create(&m.w, be, 1, &err) : NULL;
        CHECK(ctx != NULL, "context on %s: %s", isa, err.msg);
        if (ctx) {
            CHECK(strcmp(v4_cpu_backend_isa_asked(be), isa) == 0, "backend %s: asked %s", isa,
                  v4_cpu_backend_isa_asked(be));
            CHECK(strcmp(v4_ctx_attn_path(ctx), want) == 0, "context on isa %s: attention path %s, expected %s",
                  isa, v4_ctx_attn_path(ctx), want);
        }
        v4_ctx_free(ctx);
        if (be)
            be->ops->destroy(be);
        /* the same ISA named through the environment with an "auto" backend */
        if (strcmp(isa, "auto") != 0) {
            setenv("V4_CPU_ISA", isa, 1);
            be = v4_cpu_backend_create(1, "auto", &err);
            ctx = be ? v4_ctx_create(&m.w, be, 1, &err) : NULL;
            CHECK(ctx && strcmp(v4_ctx_attn_path(ctx), want) == 0, "V4_CPU_ISA=%s: attention path %s, expected %s",
                  isa, ctx ? v4_ctx_attn_path(ctx) : "(no context)", want);
            v4_ctx_free(ctx);
            if (be)
                be->ops->destroy(be);
            unsetenv("V4_CPU_ISA");
        }
        rng r = {0xa11a0000u + i};
        const int before = g_cases;
        for (int data = 0; data < N_DATA; data++) {
            attn_case(K, &r, 13, data % 2 ? 70 : 128, 150 + 37 * data, data, (MASK_RANDOM + data) % N_MASK);
            index_case(K, &r, 13, data % 2 ? 64 : 128, 65 + 50 * data, data);
        }
        printf("  isa %-10s -> %-9s %d cases identical to the reference\n", isa, v4_attn_kern_name(K),
               g_cases - before);
        ran++;
    }
    CHECK(ran >= 2, "scalar and auto always run (%d ran)", ran);
    CHECK(v4_attn_kern_for_isa(NULL) == best && v4_attn_kern_for_isa("auto") == best, "auto / NULL: the widest");
    CHECK(v4_cpu_backend_isa_asked(NULL) == NULL, "no backend: no ISA");
    v4_model_close(&m);
}

int main(void)
{
    static const char *impls[] = {"portable", "avx2", "avx512"};
    int ran = 0;
    for (size_t i = 0; i < sizeof impls / sizeof impls[0]; i++) {
        const v4_attn_kern *K = v4_attn_kern_by_name(impls[i]);
        if (!K) {
            printf("  %-8s skipped (not supported by this CPU / architecture)\n", impls[i]);
            continue;
        }
        CHECK(strcmp(K->name, impls[i]) == 0, "kernel set %s reports name %s", impls[i], K->name);
        run_impl(K, 0x5eed0000u + i);
        ran++;
    }
    CHECK(ran >= 1, "no implementation ran");
    CHECK(v4_attn_kern_by_name("sse9") == NULL && v4_attn_kern_by_name(NULL) == NULL, "unknown names accepted");
    const v4_attn_kern *best = v4_attn_kern_get();
    CHECK(best != NULL && v4_attn_kern_by_name(best->name) == best, "v4_attn_kern_get: %s", best ? best->name : "NULL");
    printf("  default: %s\n", best ? best->name : "NULL");

    /* the public entry points (the default implementation) once each */
    {
        rng r = {42};
    const int kind = DATA_FULL;
        const int H = 16, hd = 128, L = 190;
        float *kv = malloc(sizeof(float) * (size_t)L * hd), *q = malloc(sizeof(float) * (size_t)H * hd);
        float *o = malloc(sizeof(float) * (size_t)H * hd), *oref = malloc(sizeof(float) * (size_t)H * hd);
        const float **cand = malloc(sizeof(float *) * (size_t)L);
        float sinks[16];
        for (size_t i = 0; i < (size_t)L * hd; i++)
            kv[i] = rvalue(&r, kind);
        for (size_t i = 0; i < (size_t)H * hd; i++)
            q[i] = rvalue(&r, kind);
        for (int h = 0; h < H; h++)
            sinks[h] = (float)h * 0.25f - 2.0f;
        for (int c = 0; c < L; c++)
            cand[c] = c % 5 == 3 ? NULL : kv + (size_t)c * hd;
        for (int h = 0; h < H; h++)
            v4_sparse_attn_head(q + (size_t)h * hd, cand, L, hd, 0.125f, sinks[h], oref + (size_t)h * hd);
        v4_sparse_attn_heads(q, H, cand, L, hd, 0.125f, sinks, o);
        CHECK(memcmp(o, oref, sizeof(float) * (size_t)H * hd) == 0, "v4_sparse_attn_heads differs");
        float wh[16], sref[190], s[190];
        for (int h = 0; h < H; h++)
            wh[h] = v4_bf16((float)h * 0.03125f - 0.2f);
        v4_index_scores_ref(q, kv, L, wh, H, hd, sref);
        v4_index_scores(q, kv, L, wh, H, hd, s);
        CHECK(memcmp(s, sref, sizeof s) == 0, "v4_index_scores differs");
        free(kv);
        free(q);
        free(o);
        free(oref);
        free(cand);
    }
    isa_selection();
    TEST_DONE();
}
