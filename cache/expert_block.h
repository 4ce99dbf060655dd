/* expert_block.h - the byte layout of one routed expert as a single block.
 *
 * A block is what the expert pack stores per (layer, expert), what one I/O reads and
 * what one slot of the expert cache holds: the six tensors of the expert, in the
 * checkpoint's own encodings (no conversion), at fixed offsets that depend only on
 * the model config:
 *   w1.weight, w1.scale, w3.weight, w3.scale, w2.weight, w2.scale
 * each starting at a multiple of 64 bytes (cache lines, SIMD loads); the block size is
 * rounded up to 4096 bytes (O_DIRECT, page-aligned slots).  Weights are FP4 (two
 * e2m1 nibbles per byte, E8M0 scale per 32 inputs) when cfg->expert_fp4, else FP8
 * e4m3 with E8M0 scales per 128x128 tile - exactly as cache/bind_weights.c binds them.
 * Every block of a model has the same size, so the cache can use fixed-size slots.
 *
 * Ownership: plain values; v4_xblock_bind's matrices point into the caller's block.
 * Thread: any.
 */
#ifndef V4_EXPERT_BLOCK_H
#define V4_EXPERT_BLOCK_H

#include <stddef.h>
#include <stdint.h>

#include "../config/model_config.h"
#include "../kernels/v4/weights.h"

#define V4_XBLOCK_ALIGN 4096
#define V4_XBLOCK_NPART 6

typedef struct v4_xblock_layout {
    size_t off[V4_XBLOCK_NPART];    /* w1, w1.scale, w3, w3.scale, w2, w2.scale */
    size_t len[V4_XBLOCK_NPART];
    size_t used;                    /* end of the last part */
    size_t bytes;                   /* block size: used rounded up to V4_XBLOCK_ALIGN */
} v4_xblock_layout;

/* Names of the parts as the checkpoint suffixes them: "w1.weight", "w1.scale", ... */
extern const char *const v4_xblock_part_names[V4_XBLOCK_NPART];

void v4_xblock_layout_of(const v4_config *cfg, v4_xblock_layout *lo);
/* Point e's matrices into block (which must hold lo->bytes bytes laid out as above). */
void v4_xblock_bind(const v4_config *cfg, const v4_xblock_layout *lo, const void *block, v4_expert_w *e);
/* Copy a bound (e.g. checkpoint-mapped, row-major) expert into block (lo->bytes bytes;
 * the padding is zeroed). */
void v4_xblock_fill(const v4_config *cfg, const v4_xblock_layout *lo, const v4_expert_w *e, void *block);

#endif
