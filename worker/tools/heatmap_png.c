/* heatmap_png.c - see heatmap_png.h.
 *
 * The colormap is five stops sampled by eye from the viridis family (they are just
 * RGB values), interpolated linearly in sRGB; every segment raises the luminance,
 * so the ramp reads as "more" from dark to bright for color-blind readers and in
 * grayscale print.  One pixel row is built per matrix row and written cell_h times.
 */
#include "heatmap_png.h"

#include <errno.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const uint8_t STOPS[][3] = {
    {68, 1, 84},     /* 0.00 dark purple */
    {59, 82, 139},   /* 0.25 blue        */
    {33, 145, 140},  /* 0.50 teal        */
    {94, 201, 98},   /* 0.75 green       */
    {253, 231, 37},  /* 1.00 yellow      */
};
#define N_STOPS ((int)(sizeof STOPS / sizeof STOPS[0]))

void v4_heatmap_color(float t, uint8_t rgb[3])
{
    if (isnan(t)) {
        rgb[0] = rgb[1] = rgb[2] = 128;
        return;
    }
    if (t < 0.0f)
        t = 0.0f;
    if (t > 1.0f)
        t = 1.0f;
    float x = t * (float)(N_STOPS - 1);
    int i = (int)x;
    if (i >= N_STOPS - 1)
        i = N_STOPS - 2;
    float f = x - (float)i;
    for (int k = 0; k < 3; k++) {
        float a = STOPS[i][k], b = STOPS[i + 1][k];
        rgb[k] = (uint8_t)lrintf(a + (b - a) * f);
    }
}

void v4_heatmap_cell_size(int rows, int cols, int *cell_w, int *cell_h)
{
    (void)rows;
    int w = cols > 0 ? 1024 / cols : 1;
    if (w < 1)
        w = 1;
    if (w > 32)
        w = 32;
    int h = w < 4 ? 4 : w;
    *cell_w = w;
    *cell_h = h;
}

/* ---------------------------------------------------------------- libpng glue */

typedef struct png_ctx {
    char msg[256];
} png_ctx;

static void on_png_error(png_structp png, png_const_charp msg)
{
    png_ctx *ctx = png_get_error_ptr(png);
    snprintf(ctx->msg, sizeof ctx->msg, "libpng: %s", msg ? msg : "unknown error");
    png_longjmp(png, 1);
}

static void on_png_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;   /* warnings do not make the image wrong; stay quiet */
}

/* Pixel row for matrix row r. */
static void build_row(const v4_heatmap *h, int r, uint8_t *row)
{
    float span = h->vmax - h->vmin;
    for (int c = 0; c < h->cols; c++) {
        float v = h->v[(size_t)r * (size_t)h->cols + (size_t)c];
        uint8_t rgb[3];
        v4_heatmap_color(isnan(v) ? v : (v - h->vmin) / span, rgb);
        uint8_t *p = row + (size_t)c * (size_t)h->cell_w * 3;
        for (int x = 0; x < h->cell_w; x++, p += 3)
            memcpy(p, rgb, 3);
    }
}

/* Everything between fopen and fclose; libpng errors longjmp back here. */
static int write_stream(FILE *fp, const v4_heatmap *h, uint8_t *row, png_ctx *ctx)
{
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, ctx, on_png_error,
                                              on_png_warning);
    if (!png) {
        snprintf(ctx->msg, sizeof ctx->msg, "libpng: cannot create write struct");
        return -1;
    }
    png_infop info = png_create_info_struct(png);
    if (!info) {
        png_destroy_write_struct(&png, NULL);
        snprintf(ctx->msg, sizeof ctx->msg, "libpng: cannot create info struct");
        return -1;
    }
    /* png, info, fp, row and h are not modified after setjmp: no volatile needed. */
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        return -1;
    }
    png_init_io(png, fp);
    png_set_IHDR(png, info, (png_uint_32)(h->cols * h->cell_w), (png_uint_32)(h->rows * h->cell_h),
                 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int r = 0; r < h->rows; r++) {
        build_row(h, r, row);
        for (int y = 0; y < h->cell_h; y++)
            png_write_row(png, row);
    }
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    return 0;
}

static int check_dims(const v4_heatmap *h, v4_error *err)
{
    if (!h->v || h->rows < 1 || h->cols < 1 || h->cell_w < 1 || h->cell_h < 1)
        return v4_err_set(err, V4_ERR_INVALID, "heatmap",
                          "bad dimensions: %d x %d cells of %d x %d px", h->rows, h->cols,
                          h->cell_w, h->cell_h);
    if ((long long)h->cols * h->cell_w > V4_HEATMAP_MAX_EDGE ||
        (long long)h->rows * h->cell_h > V4_HEATMAP_MAX_EDGE)
        return v4_err_set(err, V4_ERR_INVALID, "heatmap",
                          "image of %lld x %lld px exceeds the %d px limit",
                          (long long)h->cols * h->cell_w, (long long)h->rows * h->cell_h,
                          V4_HEATMAP_MAX_EDGE);
    if (!(h->vmax > h->vmin) || !isfinite(h->vmin) || !isfinite(h->vmax))
        return v4_err_set(err, V4_ERR_INVALID, "heatmap", "bad value range [%g, %g]",
                          (double)h->vmin, (double)h->vmax);
    return 0;
}

int v4_heatmap_write_png(const char *path, const v4_heatmap *h, v4_error *err)
{
    if (check_dims(h, err))
        return -1;
    size_t n = strlen(path) + sizeof ".tmp";
    char *tmp = malloc(n);
    uint8_t *row = malloc((size_t)h->cols * (size_t)h->cell_w * 3);
    if (!tmp || !row) {
        free(tmp);
        free(row);
        return v4_err_set(err, V4_ERR_NOMEM, path, "out of memory");
    }
    snprintf(tmp, n, "%s.tmp", path);
    int rc = -1;
    FILE *fp = fopen(tmp, "wb");
    if (!fp) {
        v4_err_set(err, V4_ERR_IO, tmp, "cannot create: %s", strerror(errno));
        goto out;
    }
    png_ctx ctx = {{0}};
    int wrc = write_stream(fp, h, row, &ctx);
    int werr = ferror(fp);
    int cerr = fclose(fp);
    int saved = errno;
    if (wrc) {
        v4_err_set(err, V4_ERR_IO, tmp, "%s", ctx.msg);
    } else if (werr || cerr) {
        v4_err_set(err, V4_ERR_IO, tmp, "write failed: %s", strerror(werr ? EIO : saved));
    } else if (rename(tmp, path)) {
        v4_err_set(err, V4_ERR_IO, path, "cannot rename %s: %s", tmp, strerror(errno));
    } else {
        rc = 0;
    }
    if (rc)
        unlink(tmp);
out:
    free(tmp);
    free(row);
    return rc;
}
