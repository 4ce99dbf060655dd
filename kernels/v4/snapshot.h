/* snapshot.h - a sequence's state as block records, for prefix caching (the prefix
 * cache room, worker/prefix/prefix_cache.h; docs/prefix-cache.md).
 *
 * A V4 sequence at position p is: the compressed KV entries and the indexer keys of
 * positions < p (append-only: entry j of a layer of ratio r pools positions
 * [j*r, (j+1)*r) and is written once, at position (j+1)*r - 1), the window ring (the KV
 * of the last `window` positions), and each compressor's running rows.  Cut the
 * positions into blocks of B positions, B a multiple of every compression ratio: at a
 * block end p = k*B every compressor has just pooled, so a non-overlapping compressor's
 * rows are all rewritten before they are read again (nothing to keep) and an
 * overlapping one (ratio 4) carries only its "previous block" rows.  The record of block
 * k is then: per layer the entries written inside the block (B / r compressed entries,
 * B / 4 indexer keys: the append-only part, shared by every prompt that starts with the
 * same k+1 blocks) and the state at its end (the window ring, the overlapping
 * compressors' previous rows).  Restoring the records of blocks 0..k-1 into a fresh
 * sequence gives it, at position k*B, exactly the state that prefilling those k*B
 * positions gives (every byte the later steps read; tests/test_snapshot.c compares the
 * continuations bit for bit), so the rest of the prompt and the answer are the same.
 *
 * Record layout (v4_snap_block_bytes): a 16-byte header (magic, B, k, layers), then per
 * layer: window ring [window][head_dim] bf16 bits; ratio r > 0: the block's compressed
 * entries [B/r][head_dim] bf16; an overlapping compressor: its previous rows, kv then
 * score [r][width] f32; ratio 4: the block's indexer keys [B/4][index_head_dim] bf16 and
 * the indexer compressor's previous rows likewise.  Plain bytes, host order; the prefix
 * cache adds its own checksum where records leave memory.
 *
 * Ownership: records are caller-owned buffers; nothing here allocates.  Thread: any
 * (the sequence read or written must not be in use by another thread).
 */
#ifndef V4_SNAPSHOT_H
#define V4_SNAPSHOT_H

#include <stddef.h>

#include "../../config/error.h"
#include "model.h"

/* The block length for cfg nearest to want: want rounded up to a multiple of every
 * compression ratio of cfg (their least common multiple; want < 1: that multiple). */
int v4_snap_block_len(const v4_config *cfg, int want);
/* Bytes of one record of a block of `block` positions (0 when block is not a multiple of
 * every ratio of cfg). */
size_t v4_snap_block_bytes(const v4_config *cfg, int block);
/* Write the record of the block that s has just completed: s must be at position
 * (k+1) * block (k >= 0), not broken.  dst has v4_snap_block_bytes(cfg, block) bytes.
 * 0, or -1 with err (V4_ERR_INVALID: position or block wrong). */
int v4_snap_block_save(const v4_seq *s, int block, void *dst, v4_error *err);
/* Set s (any state; its capacity >= nb * block) to position nb * block from the records
 * of blocks 0..nb-1 (recs[k], each made by v4_snap_block_save with the same block on a
 * sequence of the same weights).  nb >= 1.  0, or -1 with err (V4_ERR_INVALID: a record
 * out of order or of another shape, the capacity too small; s is then reset). */
int v4_snap_restore(v4_seq *s, int block, const void *const *recs, int nb, v4_error *err);

#endif
