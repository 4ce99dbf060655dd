/* test_heatmap_png.c - unit test of worker/tools/heatmap_png.c (no Redis).
 *
 * Checks the colormap (end stops, midpoint, clamping, NaN gray, monotonic
 * luminance), the cell-size rule, and a written PNG read back through libpng's
 * simplified API: dimensions, every pixel's color, no PATH.tmp left behind, an
 * existing file replaced; and the error paths (bad dimensions, bad value range,
 * unwritable directory) leave no file.  Scratch files live under V4_TMP.
 */
#include <math.h>
#include <png.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "worker/tools/heatmap_png.h"

static int same(const uint8_t *a, int r, int g, int b)
{
    return a[0] == r && a[1] == g && a[2] == b;
}

static void test_colormap(void)
{
    uint8_t c[3], d[3];
    v4_heatmap_color(0.0f, c);
    CHECK(same(c, 68, 1, 84), "t=0 -> dark purple, got %d,%d,%d", c[0], c[1], c[2]);
    v4_heatmap_color(1.0f, c);
    CHECK(same(c, 253, 231, 37), "t=1 -> yellow, got %d,%d,%d", c[0], c[1], c[2]);
    v4_heatmap_color(0.5f, c);
    CHECK(same(c, 33, 145, 140), "t=0.5 -> teal, got %d,%d,%d", c[0], c[1], c[2]);
    v4_heatmap_color(0.125f, c);   /* halfway between the first two stops */
    CHECK(same(c, 64, 42, 112), "t=0.125 interpolates, got %d,%d,%d", c[0], c[1], c[2]);
    v4_heatmap_color(-3.0f, c);
    v4_heatmap_color(0.0f, d);
    CHECK(!memcmp(c, d, 3), "below 0 clamps to 0");
    v4_heatmap_color(7.0f, c);
    v4_heatmap_color(1.0f, d);
    CHECK(!memcmp(c, d, 3), "above 1 clamps to 1");
    v4_heatmap_color(NAN, c);
    CHECK(same(c, 128, 128, 128), "NaN -> gray, got %d,%d,%d", c[0], c[1], c[2]);
    double prev = -1;
    int mono = 1;
    for (int i = 0; i <= 1000; i++) {
        v4_heatmap_color((float)i / 1000.0f, c);
        double y = 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
        if (y < prev - 0.75)   /* rounding to 8 bits may wobble by < 1 */
            mono = 0;
        prev = y;
    }
    CHECK(mono, "luminance rises monotonically along the colormap");
}

static void test_cell_size(void)
{
    static const int cases[][4] = {
        /* rows, cols, want cell_w, want cell_h */
        {3, 8, 32, 32}, {61, 256, 4, 4}, {4, 384, 2, 4}, {2, 5000, 1, 4}, {1, 1, 32, 32},
        {43, 128, 8, 8},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int w, h;
        v4_heatmap_cell_size(cases[i][0], cases[i][1], &w, &h);
        CHECK(w == cases[i][2] && h == cases[i][3], "%d x %d -> cell %d x %d, want %d x %d",
              cases[i][0], cases[i][1], w, h, cases[i][2], cases[i][3]);
        CHECK(cases[i][1] > 1024 || cases[i][1] * w <= 1024, "width <= 1024 for %d cols",
              cases[i][1]);
    }
}

static int exists(const char *p)
{
    return access(p, F_OK) == 0;
}

static void test_write(const char *dir)
{
    char path[700], tmp[720];
    snprintf(path, sizeof path, "%s/hm.png", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(path, "w");   /* an old file to be replaced */
    CHECK(f != NULL, "create %s", path);
    if (f) {
        fputs("not a png", f);
        fclose(f);
    }
    /* 2 rows x 3 cols on [0, 2]: 0 -> t 0, 1 -> t 0.5, 2 -> t 1, 5 clamps, NaN gray */
    const float v[6] = {0.0f, 1.0f, 2.0f, 5.0f, -1.0f, NAN};
    v4_heatmap h = {.v = v, .rows = 2, .cols = 3, .vmin = 0.0f, .vmax = 2.0f,
                    .cell_w = 2, .cell_h = 3};
    v4_error err;
    v4_err_clear(&err);
    int rc = v4_heatmap_write_png(path, &h, &err);
    CHECK(rc == 0, "write: %s: %s", err.where, err.msg);
    CHECK(!exists(tmp), "no %s left behind", tmp);

    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    CHECK(png_image_begin_read_from_file(&img, path), "read back: %s", img.message);
    CHECK(img.width == 6 && img.height == 6, "6 x 6 px, got %u x %u", img.width, img.height);
    CHECK(!(img.format & PNG_FORMAT_FLAG_ALPHA), "no alpha channel in the file");
    img.format = PNG_FORMAT_RGB;
    uint8_t *px = malloc(PNG_IMAGE_SIZE(img));
    CHECK(px && png_image_finish_read(&img, NULL, px, 0, NULL), "decode: %s", img.message);
    if (!px || img.width != 6 || img.height != 6) {
        free(px);
        png_image_free(&img);
        return;
    }
    const float t[6] = {0.0f, 0.5f, 1.0f, 1.0f, 0.0f, NAN};
    int bad = 0;
    for (int y = 0; y < 6; y++)
        for (int x = 0; x < 6; x++) {
            uint8_t want[3];
            v4_heatmap_color(t[(y / 3) * 3 + x / 2], want);
            if (memcmp(px + (y * 6 + x) * 3, want, 3))
                bad++;
        }
    CHECK(bad == 0, "%d of 36 pixels have the wrong color", bad);
    free(px);
    png_image_free(&img);
}

static void test_errors(const char *dir)
{
    char path[700];
    snprintf(path, sizeof path, "%s/err.png", dir);
    const float v[2] = {1, 2};
    v4_error err;

    v4_heatmap h = {.v = v, .rows = 0, .cols = 2, .vmin = 0, .vmax = 2, .cell_w = 1, .cell_h = 1};
    v4_err_clear(&err);
    CHECK(v4_heatmap_write_png(path, &h, &err) == -1 && err.code == V4_ERR_INVALID,
          "0 rows is invalid (code %d: %s)", err.code, err.msg);
    h.rows = 1;
    h.vmax = 0;
    v4_err_clear(&err);
    CHECK(v4_heatmap_write_png(path, &h, &err) == -1 && err.code == V4_ERR_INVALID &&
              strstr(err.msg, "range"), "vmax <= vmin is invalid (%s)", err.msg);
    h.vmax = 2;
    h.cell_w = 20000;
    v4_err_clear(&err);
    CHECK(v4_heatmap_write_png(path, &h, &err) == -1 && strstr(err.msg, "limit"),
          "oversized image refused (%s)", err.msg);
    CHECK(!exists(path), "no file written on invalid input");

    h.cell_w = 1;
    snprintf(path, sizeof path, "%s/no/such/dir/x.png", dir);
    v4_err_clear(&err);
    CHECK(v4_heatmap_write_png(path, &h, &err) == -1 && err.code == V4_ERR_IO &&
              strstr(err.msg, "cannot create") && strstr(err.where, "x.png.tmp"),
          "unwritable path: %s: %s", err.where, err.msg);
}

int main(void)
{
    char dir[400];
    snprintf(dir, sizeof dir, "%s/test_heatmap_png.XXXXXX", t_env("V4_TMP", "/tmp"));
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_colormap();
    test_cell_size();
    test_write(dir);
    test_errors(dir);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "warning: could not remove %s\n", dir);
    TEST_DONE();
}
