/* expert_synth.h - synthetic routed experts: the bytes `v4fleet mkmodel` writes for
 * layers.L.ffn.experts.E.{w1,w3,w2}.{weight,scale}, generated on demand from
 * (seed, layer, expert), and the marker file of a model whose experts are not on disk.
 *
 * One code path: mkmodel (worker/tools/mkmodel_gen.c) fills its FP4 expert tensors
 * with v4_synth_fp4_weight_rows / v4_synth_fp4_scale_rows and seeds every tensor with
 * v4_synth_tensor_seed / v4_synth_stream; v4_synth_expert_block calls the same
 * functions for the six parts of one expert, so the block equals what the safetensors
 * source (expert_pack.h v4_st_source_open) reads from a full mkmodel checkpoint of the
 * same seed, byte for byte.  Determinism (mkmodel_gen.c): each tensor has its own
 * xoshiro256** stream seeded from mix64(mix64(seed, fnv1a(base)), fnv1a(name)), where
 * base is "layers.L.ffn.experts.E.wK" and name adds ".weight"; every row of the packed
 * FP4 weight [out][in/2] takes whole 64-bit draws (the bytes of a row's last draw past
 * the row's end are dropped); a scale byte (row r, group g) is
 * E8M0(round_log2(std / (2.926 * 1.25)) + j), j in {-1, 0, 0, +1} from mix64(tensor seed,
 * r << 32 ^ g), std = 1/sqrt(in).  Only FP4 experts (cfg->expert_fp4) exist: mkmodel
 * writes no other kind.
 *
 * The marker: mkmodel --no-experts writes DIR/synthetic_experts.json
 *   {"format": "v4fleet-synthetic-experts", "version": 1, "seed": "S"}
 * (the seed as a decimal string: it is an unsigned 64-bit value, beyond JSON's exact
 * integers) and no routed-expert tensors; such a model runs only with paged experts.
 *
 * Ownership: plain functions on caller buffers; v4_synth_marker_json returns a malloc'd
 * string the caller frees; the source owns its copy of the config (v4_xsource_close).
 * Thread: any (no global state; v4_rng is the caller's); the source's read() from any
 * number of threads at once, close once after the reads returned.
 */
#ifndef V4_EXPERT_SYNTH_H
#define V4_EXPERT_SYNTH_H

#include <stddef.h>
#include <stdint.h>

#include "../config/error.h"
#include "../config/model_config.h"
#include "../config/rng.h"
#include "expert_block.h"
#include "expert_source.h"

#define V4_SYNTH_MARKER "synthetic_experts.json"
#define V4_SYNTH_FORMAT "v4fleet-synthetic-experts"

/* ---- the deterministic primitives (shared with mkmodel for every tensor) */
uint64_t v4_synth_mix64(uint64_t a, uint64_t b);    /* stateless hash of two words */
uint64_t v4_synth_fnv1a(const char *s);
/* Seed of the tensors named base (a weight and its .scale share it). */
uint64_t v4_synth_tensor_seed(uint64_t seed, const char *base);
/* The element stream of tensor `name` under tensor seed tseed. */
void v4_synth_stream(v4_rng *r, uint64_t tseed, const char *name);
/* n bytes of lut[random byte] (lut NULL: the raw random bytes), 8 per draw. */
void v4_synth_fill_bytes(unsigned char *p, size_t n, v4_rng *r, const uint8_t *lut);
uint8_t v4_synth_e8m0(int e);                       /* 2^e as E8M0, clamped to [0, 254] */

/* ---- FP4 e2m1 matrices (I8 [out][in/2] + F8_E8M0 [out][in/32]) */
/* nr rows of row_bytes packed codes into dst (row-major), continuing r's stream. */
void v4_synth_fp4_weight_rows(v4_rng *r, int64_t nr, int64_t row_bytes, unsigned char *dst);
/* Scale rows [r0, r0 + nr) of cols groups each into dst, for a matrix of effective std. */
void v4_synth_fp4_scale_rows(uint64_t tseed, double std, int64_t r0, int64_t nr, int64_t cols,
                             unsigned char *dst);

/* ---- one expert */
/* "layers.L.ffn.experts.E.wK" for part m = 0 (w1), 1 (w3), 2 (w2); -1 if it does not fit. */
int v4_synth_expert_base(char *out, size_t cap, int layer, int expert, int m);
/* Expert (layer, expert) of the model cfg with seed into block (lo->bytes bytes,
 * lo = v4_xblock_layout_of(cfg); the padding is zeroed).  -1 + err (V4_ERR_CONFIG) for
 * a config whose experts are not FP4 or (layer, expert) outside it. */
int v4_synth_expert_block(const v4_config *cfg, const v4_xblock_layout *lo, uint64_t seed, int layer, int expert,
                          void *block, v4_error *err);

/* ---- the source "synthetic" (expert_source_synth.c) */
/* A v4_xsource whose read() generates block (layer, expert) with v4_synth_expert_block
 * (cfg is copied).  bytes_per_s > 0 throttles it: a read that took t seconds sleeps
 * block_bytes / bytes_per_s - t more, so each I/O thread's reads average at most that
 * rate (an NVMe-like stand-in; n I/O threads together reach n times it).  0 = as fast
 * as the CPU generates.  NULL + err for a config synthetic experts cannot have. */
v4_xsource *v4_synth_source_open(const v4_config *cfg, uint64_t seed, double bytes_per_s, v4_error *err);
/* The rate V4_SYNTH_EXPERT_MBPS asks for, in bytes/s (decimal MB/s x 1e6): 0 when unset
 * or empty, -1 + err (V4_ERR_CONFIG) when it is not a positive number. */
double v4_synth_rate_from_env(v4_error *err);

/* ---- the marker */
char *v4_synth_marker_json(uint64_t seed);          /* NULL on allocation failure */
/* DIR/synthetic_experts.json: 1 and *seed when present and valid, 0 when absent,
 * -1 + err (V4_ERR_CONFIG, naming the file) when it cannot be read or is malformed. */
int v4_synth_marker_load(const char *dir, uint64_t *seed, v4_error *err);

#endif
