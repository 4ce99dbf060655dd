/* expert_pack.h - the expert pack: every routed expert of a checkpoint as one
 * 4 KiB-aligned block in one file, with a JSON manifest of offsets and checksums, and
 * the expert source (expert_source.h) that reads it.
 *
 * On disk, PACKDIR/ holds:
 *   experts.bin    one block per (layer, expert), layer-major (block i = layer *
 *                  n_routed_experts + expert at offset i * block_bytes), each exactly the
 *                  cache/expert_block.h layout (padding zero); offsets are multiples of
 *                  4096 so O_DIRECT can read a block straight into a cache slot.
 *   manifest.json  format "v4fleet-expert-pack" version 1; the model shape (n_layers,
 *                  n_routed_experts, moe_inter, dim, expert_fp4), block_bytes, the six
 *                  part offsets/lengths, the hash name "xxh3-64", the source model's
 *                  identity (XXH3 of its config.json bytes and a data fingerprint, see
 *                  v4_pack_model_id_of) and per block: layer, expert, offset, bytes and
 *                  checksum (16 hex digits of XXH3_64bits over the whole block, padding
 *                  included).
 * The writer builds everything in PACKDIR.tmp.<pid>/, fsyncs experts.bin, then writes
 * manifest.json, fsyncs it and the directory, and renames the directory to PACKDIR
 * (RENAME_NOREPLACE; with V4_PACK_FORCE an existing PACKDIR is first moved aside and
 * removed after the rename).  A pack without manifest.json is never opened, so a
 * crashed run leaves at most a PACKDIR.tmp.<pid> that the next run removes (only when
 * that pid is no longer alive).
 *
 * Code: expert_pack.c (identity, writer), expert_pack_source.c (source "pack",
 * counters, verifier), expert_source_st.c (source "safetensors"), expert_pack_util.c.
 *
 * Ownership: v4_pack_write/v4_pack_verify own everything they allocate; a source
 * returned by v4_pack_source_open* is freed with v4_xsource_close.
 * Thread: write/verify/open from any one thread; the source's read() from any number of
 * threads at once (expert_source.h); v4_pack_source_counters from any thread.
 */
#ifndef V4_EXPERT_PACK_H
#define V4_EXPERT_PACK_H

#include <stddef.h>
#include <stdint.h>

#include "../config/error.h"
#include "../config/model_config.h"
#include "expert_source.h"
#include "safetensors.h"

#define V4_PACK_FORMAT "v4fleet-expert-pack"
#define V4_PACK_VERSION 1
#define V4_PACK_DATA_FILE "experts.bin"
#define V4_PACK_MANIFEST "manifest.json"

/* ------------------------------------------------------------------ model identity */

/* Which checkpoint a pack was made from: XXH3-64 of the config.json bytes, and XXH3-64
 * over the config.json bytes plus the first (up to) 4096 bytes of the w1.weight and
 * w2.weight of the first and last routed expert of every layer (so two checkpoints
 * with the same config but different weights, e.g. mkmodel --seed, differ). */
typedef struct v4_pack_model_id {
    uint64_t config_hash;
    uint64_t fingerprint;
} v4_pack_model_id;

/* cfg = the checkpoint's config; reads v4_ckpt_dir(ck)/config.json. */
int v4_pack_model_id_of(const v4_config *cfg, const v4_ckpt *ck, v4_pack_model_id *id, v4_error *err);

/* ------------------------------------------------------------------ writer */

typedef struct v4_pack_progress {
    uint64_t blocks_done, blocks_total;
    uint64_t bytes_done, bytes_total;
    double elapsed_s;
    double bytes_per_s;         /* average since the start */
} v4_pack_progress;

/* Called after every block (and once before the first); return non-zero to cancel
 * (the writer removes its temporary directory and fails with "cancelled"). */
typedef int (*v4_pack_progress_fn)(const v4_pack_progress *p, void *ud);

enum {
    V4_PACK_FORCE = 1,          /* replace an existing PACKDIR */
    V4_PACK_NO_SYNC = 2,        /* skip the fsyncs (tests; not crash-safe) */
};

/* Pack the routed experts of the checkpoint in model_dir into pack_dir (which must not
 * exist unless V4_PACK_FORCE).  Streams expert by expert from the mmap'ed checkpoint
 * through one aligned block buffer; page cache of the written file is released as it
 * goes.  progress may be NULL. */
int v4_pack_write(const char *model_dir, const char *pack_dir, int flags, v4_pack_progress_fn progress,
                  void *ud, v4_error *err);

/* ------------------------------------------------------------------ reader (source "pack") */

enum {
    V4_PACK_IO_AUTO = 0,        /* O_DIRECT, buffered pread where O_DIRECT is refused */
    V4_PACK_IO_BUFFERED = 1,    /* always buffered pread */
    V4_PACK_IO_DIRECT = 2,      /* O_DIRECT only: open fails if the filesystem refuses it */
    /* Test hooks, or'ed with V4_PACK_IO_AUTO (recent kernels accept O_DIRECT even on
     * tmpfs, so the refusal is simulated): behave as if open(O_DIRECT) failed with
     * EINVAL, or as if the first O_DIRECT read did. */
    V4_PACK_IO_SIM_REFUSE_OPEN = 0x10,
    V4_PACK_IO_SIM_REFUSE_READ = 0x20,
};

typedef struct v4_xsource_counters {
    uint64_t reads;             /* successful block reads */
    uint64_t bytes;             /* bytes delivered by them */
    uint64_t read_ns;           /* sum of their latencies (I/O + checksum) */
    uint64_t direct_reads;      /* of which through O_DIRECT */
    uint64_t buffered_reads;    /* of which through buffered pread */
    uint64_t errors;            /* failed reads (I/O, corrupt, quarantined) */
    uint64_t corrupt_blocks;    /* blocks quarantined so far */
    int direct_refused;         /* O_DIRECT was asked for (AUTO) but refused: fell back */
} v4_xsource_counters;

/* Open PACKDIR for a model with config cfg: checks the manifest (format, version,
 * shape == cfg, block layout == v4_xblock_layout_of(cfg), every block present once,
 * 4096-aligned and inside experts.bin).  cfg may be NULL (the shape is then taken from
 * the manifest; used by the verifier).  io = V4_PACK_IO_*.  This form does not check
 * which checkpoint the pack came from; v4_pack_source_open_model does. */
v4_xsource *v4_pack_source_open(const char *pack_dir, const v4_config *cfg, int io, v4_error *err);
/* As above, and refuse the pack unless it was made from ck (v4_pack_model_id_of). */
v4_xsource *v4_pack_source_open_model(const char *pack_dir, const v4_config *cfg, const v4_ckpt *ck, int io,
                                      v4_error *err);
/* Counters of a "pack", "safetensors" or "synthetic" source (zeroed for other kinds). */
void v4_xsource_get_counters(const v4_xsource *s, v4_xsource_counters *out);

/* ------------------------------------------------------------------ verifier */

typedef struct v4_pack_bad {
    int layer, expert;
    uint64_t offset;
    v4_error err;               /* V4_ERR_CORRUPT (checksum) or V4_ERR_IO */
} v4_pack_bad;

typedef struct v4_pack_verify_summary {
    uint64_t blocks, bytes, bad;
    double elapsed_s;
} v4_pack_verify_summary;

/* Re-read every block of PACKDIR (buffered reads; checksums recomputed) and call bad()
 * for each one that fails.  ck non-NULL: also refuse a pack made from another model.
 * Returns 0 when the pack could be opened and read to the end (check sum->bad), -1 on
 * an error that stops the verification (err).  progress may be NULL. */
int v4_pack_verify(const char *pack_dir, const v4_config *cfg, const v4_ckpt *ck,
                   void (*bad)(const v4_pack_bad *b, void *ud), v4_pack_progress_fn progress, void *ud,
                   v4_pack_verify_summary *sum, v4_error *err);

/* ------------------------------------------------------------------ source "safetensors" */

/* Pages experts straight from the checkpoint in model_dir (opened with
 * v4_model_open_ex(NO_PREPARE), owned by the source): read() copies the six tensors of
 * (layer, expert) from the mmap into the block layout (v4_xblock_fill).  No checksum
 * (safetensors has none).  A disk error while copying from the mapping is a SIGBUS,
 * not an error return (the same as the all-resident path). */
v4_xsource *v4_st_source_open(const char *model_dir, v4_error *err);

#endif
