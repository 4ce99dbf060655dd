/* heatmap_png.h - write a float matrix as a PNG heatmap (libpng), independent of
 * where the numbers come from (`v4fleet stats --png` passes count / layer mean).
 *
 * Design: row r of the matrix is drawn as a band of cell_h pixel rows, column c as
 * cell_w pixel columns (image = cols*cell_w x rows*cell_h, 8-bit RGB, no alpha).
 * A value maps linearly onto [vmin, vmax] (clamped) and then onto a perceptual,
 * viridis-like colormap: dark purple (vmin) -> blue -> teal (midpoint) -> green ->
 * yellow (vmax), luminance increasing monotonically.  NaN cells (no data) are drawn
 * mid-gray.  The file is written to PATH.tmp, flushed, closed and renamed onto PATH,
 * so readers never see a half-written PNG; on any error PATH.tmp is removed and PATH
 * is left as it was.  libpng errors are caught with setjmp and reported through
 * v4_error (never abort, never print).
 *
 * Ownership: the caller owns the matrix; nothing is retained after a call.
 * Thread: any thread; calls share no state.
 */
#ifndef V4_HEATMAP_PNG_H
#define V4_HEATMAP_PNG_H

#include <stdint.h>

#include "config/error.h"

typedef struct v4_heatmap {
    const float *v;     /* rows*cols values, row-major (v[r*cols + c]) */
    int rows, cols;     /* >= 1 */
    float vmin, vmax;   /* vmin -> first colormap stop, vmax -> last; vmax > vmin */
    int cell_w, cell_h; /* pixels per cell, >= 1 */
} v4_heatmap;

/* Largest image edge accepted (pixels). */
#define V4_HEATMAP_MAX_EDGE 16384

/* Color of t in [0, 1] (clamped; NaN -> gray 128,128,128) on the colormap. */
void v4_heatmap_color(float t, uint8_t rgb[3]);

/* Cell size for a rows x cols matrix: cell_w = 1024/cols clamped to [1, 32] (so the
 * image is at most ~1024 px wide unless cols > 1024), cell_h = max(cell_w, 4)
 * clamped to 32 (thin matrices stay readable). */
void v4_heatmap_cell_size(int rows, int cols, int *cell_w, int *cell_h);

/* Write h to path (via path.tmp + rename).  Returns 0, or -1 with err filled
 * (V4_ERR_INVALID for bad dimensions, V4_ERR_IO for file/libpng errors). */
int v4_heatmap_write_png(const char *path, const v4_heatmap *h, v4_error *err);

#endif
