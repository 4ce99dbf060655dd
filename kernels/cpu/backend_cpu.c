/* backend_cpu.c - the CPU backend: activation quantization + row kernels.
 * (Single-threaded scalar version; SIMD and the thread pool plug in here.) */
#include <stdlib.h>
#include <string.h>

#include "cpu_backend.h"
#include "cpu_kernels.h"

typedef struct cpu_impl {
    float *xq, *xs;
    size_t cap;
} cpu_impl;

static void cpu_linear(v4_backend *be, const v4_mat *W, v4_lin_mode mode,
                       int n, const float *x, int ldx, float *y, int ldy)
{
    cpu_impl *c = be->impl;
    if (mode == V4_LIN_EXACT) {
        v4_rows_exact_scalar(W, n, NULL, NULL, x, ldx, y, ldy, 0, W->rows);
        return;
    }
    size_t need = (size_t)n * W->cols;
    if (need > c->cap) {
        free(c->xq); free(c->xs);
        c->xq = malloc(need * sizeof(float));
        c->xs = malloc((need / 128 + 1) * sizeof(float));
        c->cap = need;
    }
    for (int b = 0; b < n; b++)
        v4_act_quant(x + (size_t)b * ldx, W->cols, c->xq + (size_t)b * W->cols,
                     c->xs + (size_t)b * (W->cols / 128));
    if (W->type == V4_W_FP8)
        v4_rows_fp8_scalar(W, n, c->xq, c->xs, x, ldx, y, ldy, 0, W->rows);
    else
        v4_rows_fp4_scalar(W, n, c->xq, c->xs, x, ldx, y, ldy, 0, W->rows);
}

static void cpu_destroy(v4_backend *be)
{
    if (!be) return;
    cpu_impl *c = be->impl;
    free(c->xq); free(c->xs); free(c);
    free(be);
}

static const v4_backend_ops cpu_ops = {"cpu", cpu_linear, cpu_destroy};

v4_backend *v4_cpu_backend_create(int n_threads, const char *isa, v4_error *err)
{
    (void)n_threads; (void)isa;
    v4_backend *be = calloc(1, sizeof *be);
    cpu_impl *c = calloc(1, sizeof *c);
    if (!be || !c) {
        free(be); free(c);
        v4_err_set(err, V4_ERR_NOMEM, "cpu backend", "out of memory");
        return NULL;
    }
    be->ops = &cpu_ops;
    be->impl = c;
    return be;
}

const char *v4_cpu_backend_isa(const v4_backend *be) { (void)be; return "scalar"; }
int v4_cpu_isa_supported(const char *isa) { return strcmp(isa, "scalar") == 0; }

v4_mat v4_mat_rows(const v4_mat *W, int r0, int nr)
{
    v4_mat m = *W;
    m.rows = nr;
    switch (W->type) {
    case V4_W_FP8:
        m.w = (const uint8_t *)W->w + (size_t)r0 * W->cols;
        m.scale = W->scale + (size_t)(r0 / 128) * ((W->cols + 127) / 128);
        break;
    case V4_W_FP4:
        m.w = (const uint8_t *)W->w + (size_t)r0 * (W->cols / 2);
        m.scale = W->scale + (size_t)r0 * (W->cols / 32);
        break;
    case V4_W_BF16:
        m.w = (const uint16_t *)W->w + (size_t)r0 * W->cols;
        break;
    case V4_W_F32:
        m.w = (const float *)W->w + (size_t)r0 * W->cols;
        break;
    }
    return m;
}
