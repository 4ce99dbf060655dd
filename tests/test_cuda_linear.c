/* test_cuda_linear.c - the CUDA backend's linear op against the scalar CPU reference,
 * bit for bit, for every mode/type/layout backend.h allows.
 *
 * Without the CUDA backend compiled in (V4_CUDA=OFF) or without a usable GPU this test
 * exits 77 (SKIPPED) and says why; before skipping on a machine without a GPU it checks
 * that v4_cuda_backend_create fails cleanly (NULL, V4_ERR_INVALID, a message) and that
 * v4_open_backend refuses --device cuda the same way (no silent CPU fallback).
 *
 * With a GPU: random FP8/FP4 QUANT and BF16/F32/FP8 EXACT matrices (row-major and R8,
 * row views, odd rows/columns, batches 1..8 and 17) built with the hard cases of
 * tests/test_linear.c (generators copied from it: e4m3 subnormals, E8M0 scales from
 * 2^-127 to 2^5 plus NaN scales, amax-clamped tiny blocks, order-sensitive EXACT sums
 * with planted +-2^28/2^40 cancellations, NaN weight codes, NaN/inf activations) run
 * through the scalar CPU backend and the CUDA backend; outputs must have identical
 * bits (a NaN only has to be a NaN: the GPU's NaN payloads are canonical), and y's
 * padding (ldy > rows) must be untouched.  Also: an R8 matrix in QUANT mode gives NaN,
 * a weight range at an odd device offset (the kernels' unaligned-load path), a
 * second call served from the weight cache, and the backend's sticky status stays OK.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/codec.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/v4/weights.h"
#include "linear_gen.h"
#include "testutil.h"
#include "worker/tools/cli_util.h"
#ifdef V4_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

#ifdef V4_HAVE_CUDA

enum { F_NAN = 1, F_TINY = 2, F_XNAN = 4, F_SNAN = 8 };

typedef struct mat_buf {
    v4_mat W;
    void *w;
    uint8_t *s;
} mat_buf;

static mat_buf make_mat(rng *r, v4_wtype t, int rows, int cols, int flags)
{
    mat_buf m = {{t, rows, cols, NULL, NULL, V4_LAYOUT_ROWMAJOR}, NULL, NULL};
    size_t nw = (size_t)rows * cols, ns = 0;
    switch (t) {
    case V4_W_FP8: {
        uint8_t *w = malloc(nw);
        for (size_t i = 0; i < nw; i++)
            w[i] = rand_e4m3(r);
        if (flags & F_NAN)
            for (int k = 0; k < 3; k++)
                w[rnext(r) % nw] = (k & 1) ? 0xff : 0x7f;
        ns = (size_t)((rows + 127) / 128) * ((cols + 127) / 128);
        m.w = w;
        break;
    }
    case V4_W_FP4: {
        uint8_t *w = malloc(nw / 2);
        for (size_t i = 0; i < nw / 2; i++)
            w[i] = (uint8_t)rnext(r);
        ns = (size_t)rows * (cols / 32);
        m.w = w;
        break;
    }
    case V4_W_BF16:
    case V4_W_F32:
        m.w = rand_dense_weights(r, t, nw);
        break;
    }
    if (ns) {
        m.s = malloc(ns);
        for (size_t i = 0; i < ns; i++)
            m.s[i] = (flags & F_TINY) ? (uint8_t)rint_(r, 0, 6) : rand_e8m0(r);
        if (flags & F_SNAN)
            m.s[rnext(r) % ns] = 0xff;
    }
    /* EXACT types: column K-2 repeats column 1 (planted cancellation, see test_linear.c) */
    if (t != V4_W_FP4 && cols >= 4)
        for (int i = 0; i < rows; i++) {
            size_t a = (size_t)i * cols + 1, b = (size_t)i * cols + cols - 2;
            if (t == V4_W_FP8)
                ((uint8_t *)m.w)[b] = ((uint8_t *)m.w)[a];
            else if (t == V4_W_BF16)
                ((uint16_t *)m.w)[b] = ((uint16_t *)m.w)[a];
            else
                ((float *)m.w)[b] = ((float *)m.w)[a];
        }
    m.W.w = m.w;
    m.W.scale = m.s;
    return m;
}

/* R8 copy (library packer), garbage-free padding; shares m's scales */
static mat_buf to_r8(const mat_buf *m)
{
    const size_t bytes = v4_mat_r8_bytes(&m->W);
    const int ng = (m->W.rows + 7) / 8;
    void *d = malloc(bytes);
    v4_mat_pack_r8(&m->W, d, 0, ng);
    mat_buf o = {m->W, d, NULL};
    o.W.w = d;
    o.W.layout = V4_LAYOUT_R8;
    return o;
}

static void free_mat(mat_buf *m)
{
    free(m->w);
    free(m->s);
}

static const char *tname(v4_wtype t)
{
    return t == V4_W_FP8 ? "fp8" : t == V4_W_FP4 ? "fp4" : t == V4_W_BF16 ? "bf16" : "f32";
}

#define PAD 5
static const float SENTINEL = -12345.5f;
static int mismatches, compared, nan_outputs;

static float *run_linear(v4_backend *be, const v4_mat *W, v4_lin_mode mode, int n, const float *x, int ldx)
{
    int ldy = W->rows + PAD;
    float *y = malloc(sizeof(float) * (size_t)n * (size_t)ldy);
    for (size_t i = 0; i < (size_t)n * (size_t)ldy; i++)
        y[i] = SENTINEL;
    v4_linear(be, W, mode, n, x, ldx, y, ldy);
    return y;
}

/* bits equal, or both NaN; padding untouched */
static int compare(const char *what, int rows, int n, const float *ref, const float *got)
{
    int ldy = rows + PAD, bad = 0;
    for (int b = 0; b < n; b++)
        for (int r = 0; r < ldy; r++) {
            size_t i = (size_t)b * ldy + r;
            if (r >= rows) {
                CHECK(v4_f32_bits(got[i]) == v4_f32_bits(SENTINEL), "%s wrote padding b=%d r=%d", what, b, r);
                continue;
            }
            compared++;
            nan_outputs += isnan(ref[i]) != 0;
            if (v4_f32_bits(ref[i]) != v4_f32_bits(got[i]) && !(isnan(ref[i]) && isnan(got[i]))) {
                if (bad < 5)
                    fprintf(stderr, "  %s: b=%d r=%d ref=%a (%08x) got=%a (%08x)\n", what, b, r, (double)ref[i],
                            v4_f32_bits(ref[i]), (double)got[i], v4_f32_bits(got[i]));
                bad++;
            }
        }
    CHECK(bad == 0, "%s: %d of %d outputs differ", what, bad, rows * n);
    mismatches += bad;
    return bad;
}

static void run_case(rng *r, v4_backend *sc, v4_backend *cu, v4_wtype t, v4_lin_mode mode, int rows, int cols,
                     int n, int flags)
{
    mat_buf m = make_mat(r, t, rows, cols, flags);
    int ldx = cols + 3;
    float *x = malloc(sizeof(float) * (size_t)n * ldx);
    for (int b = 0; b < n; b++) {
        float *xb = x + (size_t)b * ldx;
        rand_acts(r, xb, cols, t != V4_W_F32 || mode == V4_LIN_QUANT);
        if (mode == V4_LIN_EXACT && cols >= 4 && b % 2 == 0) {
            xb[1] = b % 4 ? 0x1p28f : 0x1p40f;
            xb[cols - 2] = -xb[1];
        }
        if (flags & F_XNAN) {
            if (b == 0) {
                xb[5] = v4_f32_from_bits(0x7fc01234u);
                xb[cols - 1] = v4_f32_from_bits(0xffc00077u);
            } else if (b <= 2) {
                xb[cols / 2] = b == 1 ? INFINITY : -INFINITY;
            }
        }
    }
    char what[160];
    snprintf(what, sizeof what, "%s %s%s%s%s %dx%d n=%d", mode == V4_LIN_QUANT ? "quant" : "exact", tname(t),
             flags & F_NAN ? " nan-codes" : "", flags & F_TINY ? " tiny-scales" : "",
             flags & F_XNAN ? " nan/inf-x" : "", rows, cols, n);
    float *ref = run_linear(sc, &m.W, mode, n, x, ldx);
    float *got = run_linear(cu, &m.W, mode, n, x, ldx);
    compare(what, rows, n, ref, got);
    free(got);
    got = run_linear(cu, &m.W, mode, n, x, ldx);             /* weights from the cache */
    char w2[200];
    snprintf(w2, sizeof w2, "%s (cached)", what);
    compare(w2, rows, n, ref, got);
    free(got);
    if (mode == V4_LIN_EXACT) {
        mat_buf m8 = to_r8(&m);
        got = run_linear(cu, &m8.W, mode, n, x, ldx);
        snprintf(w2, sizeof w2, "%s R8", what);
        compare(w2, rows, n, ref, got);
        free(got);
        /* a row view of the R8 matrix (FP8: at a 128-row block), as attention takes of wo_a */
        const int r0 = t == V4_W_FP8 ? (rows >= 256 ? 128 : 0) : (rows >= 16 ? 8 : 0);
        const int nr = rows - r0 > 12 ? rows - r0 - 3 : rows - r0;
        v4_mat view = v4_mat_rows(&m8.W, r0, nr);
        float *vref = run_linear(sc, &view, mode, n, x, ldx);
        got = run_linear(cu, &view, mode, n, x, ldx);
        snprintf(w2, sizeof w2, "%s R8 view %d+%d", what, r0, nr);
        compare(w2, nr, n, vref, got);
        free(got);
        free(vref);
        v4_cuda_backend_drop_weights(cu);           /* m8's memory is freed next */
        free_mat(&m8);
    } else if (rows >= 256 && t == V4_W_FP8) {
        v4_mat view = v4_mat_rows(&m.W, 128, rows - 128);
        float *vref = run_linear(sc, &view, mode, n, x, ldx);
        got = run_linear(cu, &view, mode, n, x, ldx);
        snprintf(w2, sizeof w2, "%s view 128+%d", what, rows - 128);
        compare(w2, rows - 128, n, vref, got);
        free(got);
        free(vref);
    }
    v4_cuda_backend_drop_weights(cu);
    free(ref);
    free(x);
    free_mat(&m);
}

/* FP8 / FP4 weights at an odd byte offset inside an already uploaded range: the
 * kernels take their byte-load path. */
static void unaligned_case(rng *r, v4_backend *sc, v4_backend *cu, v4_wtype t)
{
    const int rows = 40, cols = 256;
    mat_buf big = make_mat(r, t, rows + 1, cols, 0);
    v4_mat W = big.W;
    W.rows = rows;
    W.w = (const uint8_t *)big.w + 1;
    float x[2 * 256], y[41 * 2];
    rand_acts(r, x, 256, 1);
    rand_acts(r, x + 256, 256, 1);
    v4_linear(cu, &big.W, V4_LIN_QUANT, 1, x, cols, y, rows + 1);   /* uploads the whole range */
    float *ref = run_linear(sc, &W, V4_LIN_QUANT, 2, x, cols);
    float *got = run_linear(cu, &W, V4_LIN_QUANT, 2, x, cols);
    char what[64];
    snprintf(what, sizeof what, "quant %s at an odd byte offset", tname(t));
    compare(what, rows, 2, ref, got);
    free(ref);
    free(got);
    v4_cuda_backend_drop_weights(cu);
    free_mat(&big);
}

static int run_gpu(v4_backend *cu)
{
    v4_error err = {0};
    v4_backend *sc = v4_cpu_backend_create(1, "scalar", &err);
    CHECK(sc != NULL, "scalar backend: %s", err.msg);
    if (!sc)
        return 1;
    rng r = {0xc0dacafe1234ull};
    static const int qshapes[][2] = {{256, 256}, {384, 640}, {129, 128}, {4096, 256}, {8, 128},
                                     {200, 384}, {3, 4096}, {1, 1152}, {300, 2048}};
    for (size_t s = 0; s < sizeof qshapes / sizeof qshapes[0]; s++)
        for (int n = 1; n <= 8; n += (s % 2 ? 2 : 3)) {
            run_case(&r, sc, cu, V4_W_FP8, V4_LIN_QUANT, qshapes[s][0], qshapes[s][1], n, 0);
            run_case(&r, sc, cu, V4_W_FP4, V4_LIN_QUANT, qshapes[s][0], qshapes[s][1], n, 0);
        }
    for (int n = 1; n <= 8; n++) {
        run_case(&r, sc, cu, V4_W_FP8, V4_LIN_QUANT, 136, 256, n, 0);
        run_case(&r, sc, cu, V4_W_FP4, V4_LIN_QUANT, 136, 512, n, 0);
    }
    run_case(&r, sc, cu, V4_W_FP8, V4_LIN_QUANT, 136, 256, 17, 0);
    run_case(&r, sc, cu, V4_W_FP4, V4_LIN_QUANT, 136, 256, 17, 0);
    run_case(&r, sc, cu, V4_W_FP8, V4_LIN_QUANT, 256, 384, 2, F_NAN);
    run_case(&r, sc, cu, V4_W_FP8, V4_LIN_QUANT, 130, 384, 2, F_TINY);
    run_case(&r, sc, cu, V4_W_FP4, V4_LIN_QUANT, 130, 384, 3, F_TINY);
    run_case(&r, sc, cu, V4_W_FP8, V4_LIN_QUANT, 256, 384, 3, F_SNAN);
    run_case(&r, sc, cu, V4_W_FP4, V4_LIN_QUANT, 64, 384, 3, F_SNAN);
    run_case(&r, sc, cu, V4_W_FP8, V4_LIN_QUANT, 256, 384, 3, F_XNAN);
    run_case(&r, sc, cu, V4_W_FP4, V4_LIN_QUANT, 256, 384, 3, F_XNAN);
    /* QUANT with cols % 128 != 0 (outside the contract; the reference's tail rules) */
    run_case(&r, sc, cu, V4_W_FP8, V4_LIN_QUANT, 64, 160, 2, 0);
    run_case(&r, sc, cu, V4_W_FP4, V4_LIN_QUANT, 64, 160, 3, 0);

    static const int xshapes[][2] = {{256, 256}, {129, 128}, {24, 1024}, {200, 300}, {64, 1000},
                                     {5, 7}, {384, 640}, {33, 65}, {1, 1}};
    for (size_t s = 0; s < sizeof xshapes / sizeof xshapes[0]; s++)
        for (int n = 1; n <= 8; n += (s % 2 ? 3 : 2)) {
            run_case(&r, sc, cu, V4_W_BF16, V4_LIN_EXACT, xshapes[s][0], xshapes[s][1], n, 0);
            run_case(&r, sc, cu, V4_W_F32, V4_LIN_EXACT, xshapes[s][0], xshapes[s][1], n, 0);
            run_case(&r, sc, cu, V4_W_FP8, V4_LIN_EXACT, xshapes[s][0], xshapes[s][1], n, 0);
        }
    run_case(&r, sc, cu, V4_W_BF16, V4_LIN_EXACT, 1100, 256, 1, 0);
    run_case(&r, sc, cu, V4_W_BF16, V4_LIN_EXACT, 100, 200, 17, 0);
    run_case(&r, sc, cu, V4_W_F32, V4_LIN_EXACT, 24, 4096, 1, 0);
    run_case(&r, sc, cu, V4_W_FP8, V4_LIN_EXACT, 130, 300, 2, F_TINY);
    run_case(&r, sc, cu, V4_W_FP8, V4_LIN_EXACT, 130, 300, 2, F_NAN);
    run_case(&r, sc, cu, V4_W_FP8, V4_LIN_EXACT, 384, 384, 3, F_SNAN);
    run_case(&r, sc, cu, V4_W_BF16, V4_LIN_EXACT, 130, 300, 3, F_XNAN);
    run_case(&r, sc, cu, V4_W_F32, V4_LIN_EXACT, 24, 1000, 3, F_XNAN);
    run_case(&r, sc, cu, V4_W_FP8, V4_LIN_EXACT, 130, 300, 3, F_XNAN);

    /* a host buffer refilled with other weights (a paged-expert slot): the cached copy
     * must be refreshed, not reused */
    {
        mat_buf m = make_mat(&r, V4_W_FP4, 64, 512, 0);
        float x[512];
        rand_acts(&r, x, 512, 1);
        float *ref = run_linear(sc, &m.W, V4_LIN_QUANT, 1, x, 512), *got = run_linear(cu, &m.W, V4_LIN_QUANT, 1, x, 512);
        compare("fp4 slot, first content", 64, 1, ref, got);
        free(ref);
        free(got);
        const size_t before = v4_cuda_backend_reuploads(cu);
        for (size_t i = 0; i < 64 * 256; i++)
            ((uint8_t *)m.w)[i] = (uint8_t)rnext(&r);
        for (size_t i = 0; i < 64 * 16; i++)
            m.s[i] = rand_e8m0(&r);
        ref = run_linear(sc, &m.W, V4_LIN_QUANT, 1, x, 512);
        got = run_linear(cu, &m.W, V4_LIN_QUANT, 1, x, 512);
        compare("fp4 slot, refilled in place", 64, 1, ref, got);
        CHECK(v4_cuda_backend_reuploads(cu) >= before + 2, "refilled weights and scales re-uploaded (%zu -> %zu)",
              before, v4_cuda_backend_reuploads(cu));
        free(ref);
        free(got);
        v4_cuda_backend_drop_weights(cu);
        free_mat(&m);
    }
    unaligned_case(&r, sc, cu, V4_W_FP8);
    unaligned_case(&r, sc, cu, V4_W_FP4);

    /* an R8 matrix in QUANT mode is a caller bug: NaN outputs (as on the CPU) */
    {
        mat_buf m = make_mat(&r, V4_W_FP8, 128, 128, 0);
        mat_buf m8 = to_r8(&m);
        float x[128], y[128];
        rand_acts(&r, x, 128, 1);
        v4_linear(cu, &m8.W, V4_LIN_QUANT, 1, x, 128, y, 128);
        int nans = 0;
        for (int i = 0; i < 128; i++)
            nans += isnan(y[i]) != 0;
        CHECK(nans == 128, "R8 in QUANT mode: %d NaN outputs of 128", nans);
        free_mat(&m8);
        free_mat(&m);
    }
    CHECK(v4_cuda_backend_status(cu, &err) == 0, "sticky CUDA error: %s", err.msg);
    CHECK(nan_outputs > 0, "the NaN cases produced NaN outputs");
    printf("%d outputs compared on %s, %d mismatching (%d NaN outputs)\n", compared,
           v4_cuda_backend_device_name(cu), mismatches, nan_outputs);
    sc->ops->destroy(sc);
    return 0;
}
#endif /* V4_HAVE_CUDA */

int main(void)
{
#if !defined(V4_HAVE_CUDA)
    (void)t_failures;
    (void)t_checks;
    /* the CLI must refuse cuda in a build without it */
    v4_engine_opts o = {0};
    o.device = "cuda";
    v4_error err = {0};
    v4_backend *be = v4_open_backend(&o, &err);
    if (be || err.code != V4_ERR_INVALID || !strstr(err.msg, "no CUDA backend")) {
        fprintf(stderr, "v4_open_backend(--device cuda) in a build without CUDA: expected a clear error, got '%s'\n",
                err.msg);
        return 1;
    }
    printf("SKIPPED: built without the CUDA backend (V4_CUDA=OFF or no nvcc)\n");
    return 77;
#else
    char why[256] = "";
    int count = v4_cuda_device_count(why, sizeof why);
    if (count <= 0) {
        v4_error err = {0};
        v4_backend *be = v4_cuda_backend_create(0, &err);
        CHECK(be == NULL && err.code == V4_ERR_INVALID && err.msg[0], "create without a GPU: NULL + error");
        v4_engine_opts o = {0};
        o.device = "cuda";
        v4_error e2 = {0};
        be = v4_open_backend(&o, &e2);
        CHECK(be == NULL && e2.code == V4_ERR_INVALID, "--device cuda without a GPU must fail");
        o.device = "tpu";
        CHECK(v4_open_backend(&o, &e2) == NULL && strstr(e2.msg, "unknown device"), "--device tpu: %s", e2.msg);
        if (t_failures)
            TEST_DONE();
        printf("SKIPPED: %s (v4_cuda_backend_create says: %s)\n", why, err.msg);
        return 77;
    }
    v4_error err = {0};
    v4_backend *cu = v4_cuda_backend_create(0, &err);
    CHECK(cu != NULL, "cuda backend: %s", err.msg);
    if (!cu)
        TEST_DONE();
    CHECK(strcmp(cu->ops->name, "cuda") == 0, "backend name");
    {
        v4_error e2 = {0};
        CHECK(v4_cuda_backend_create(count, &e2) == NULL && e2.code == V4_ERR_INVALID, "device %d must not exist",
              count);
    }
    printf("GPU: %s (%d device%s)\n", v4_cuda_backend_device_name(cu), count, count == 1 ? "" : "s");
    run_gpu(cu);
    cu->ops->destroy(cu);
    TEST_DONE();
#endif
}
