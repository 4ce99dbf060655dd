/* mkmodel.h - internal interface of `v4fleet mkmodel` (synthetic checkpoints).
 *
 * The command is split into single-purpose files:
 *   mkmodel_presets.c  the model configurations (tiny, small, flash) and --layers;
 *   mkmodel_plan.c     the tensor plan: every shard's tensors (name, dtype, shape,
 *                      init), file sizes, the index JSON, bytes read per token;
 *   mkmodel_gen.c      the tensor contents (deterministic PRNG streams) and the
 *                      writing of shards, in parallel over a few threads;
 *   mkmodel_dir.c      the output directory (create, refuse/clean, atomic text files);
 *   cmd_mkmodel.c      options, summary, order of the writes.
 *
 * Ownership: a plan owns its shard and tensor arrays (v4mk_plan_free).  Thread: the
 * plan is built and freed on one thread; v4mk_write_shards reads it from several
 * worker threads of its own (read-only) and returns after joining them.
 */
#ifndef V4_MKMODEL_H
#define V4_MKMODEL_H

#include <stdint.h>
#include <stdio.h>
#include <time.h>

#include "cache/safetensors.h"
#include "config/error.h"
#include "config/model_config.h"

#define V4MK_NAME_MAX 112

typedef enum v4mk_init {
    V4MK_NORMAL,    /* BF16/F32: mean + std * N(0,1) */
    V4MK_HC_BASE,   /* F32 [(2+hc)*hc]: N(0,std), +mean on the comb diagonal */
    V4MK_FP8_W,     /* F8_E4M3 [out][in] */
    V4MK_FP8_S,     /* F8_E8M0 [ceil(out/128)][ceil(in/128)] */
    V4MK_FP4_W,     /* I8 [out][in/2] */
    V4MK_FP4_S,     /* F8_E8M0 [out][in/32] */
    V4MK_TID2EID,   /* I64 [vocab][n_act], aux = n_routed_experts */
} v4mk_init;

typedef struct v4mk_tensor {
    char name[V4MK_NAME_MAX];
    char base[V4MK_NAME_MAX];   /* seeding name: shared by a weight and its .scale */
    v4_dtype dt;
    int ndim;
    int64_t shape[2];
    v4mk_init kind;
    double mean, std;
    int aux;
} v4mk_tensor;

typedef struct v4mk_shard {
    v4mk_tensor *t;
    size_t n, cap;
    char file[64];
    uint64_t file_bytes, data_bytes;
} v4mk_shard;

typedef struct v4mk_plan {
    v4mk_shard *s;
    int n;
    int no_experts;             /* the routed experts are left out (mkmodel --no-experts) */
    uint64_t total_file_bytes;  /* shards only */
    uint64_t total_size;        /* sum of tensor bytes (index metadata.total_size) */
    size_t n_tensors;
} v4mk_plan;

typedef struct v4mk_token_bytes {
    uint64_t trunk;     /* non-expert layer tensors, hc/norm/head (embed: one row) */
    uint64_t experts;   /* n_act routed experts per layer */
    uint64_t total;
} v4mk_token_bytes;

/* ---- presets (mkmodel_presets.c) */
/* Fill c with preset `name` (tiny, small, flash); layers > 0 truncates it to that many
 * layers (the first ones of the preset's layer pattern), 0 = the preset's own count.
 * -1 + err for an unknown name or a layer count outside [1, the preset's count]. */
int v4mk_preset(const char *name, int layers, v4_config *c, v4_error *err);
const char *v4mk_preset_names(void);   /* "tiny|small|flash" */

/* ---- plan (mkmodel_plan.c) */
/* no_experts: leave out every layers.L.ffn.experts.E.* tensor (the synthetic expert
 * source, cache/expert_synth.h, generates them); the per-token figures still count them. */
int v4mk_plan_build(v4mk_plan *p, const v4_config *c, int no_experts, v4_error *err);
void v4mk_plan_free(v4mk_plan *p);
uint64_t v4mk_tensor_bytes(const v4mk_tensor *t);
v4mk_token_bytes v4mk_per_token_bytes(const v4mk_plan *p, const v4_config *c);
/* A writer with shard s's declarations (no file yet); NULL + err on failure. */
struct v4_stw *v4mk_shard_writer(const v4mk_shard *s, v4_error *err);
/* The index JSON text (malloc'd), NULL on allocation failure. */
char *v4mk_index_json(const v4mk_plan *p);

/* ---- contents + shard writing (mkmodel_gen.c) */
/* Write every shard of p into dir with up to `threads` threads (largest shards first);
 * progress to stderr every 5% when the checkpoint is >= 64 MiB.  The first failure is
 * returned in err (the other threads stop at their next tensor). */
int v4mk_write_shards(const v4mk_plan *p, const char *dir, uint64_t seed, int sync, int threads,
                      v4_error *err);
double v4mk_seconds_since(const struct timespec *t0);

/* ---- output directory (mkmodel_dir.c) */
/* Create dir, or check that it is empty; with force, delete a checkpoint in it. */
int v4mk_prepare_dir(const char *dir, int force, v4_error *err);
/* Write text (owned, freed here; NULL = its builder failed (err set) or OOM) to dir/name
 * atomically. */
int v4mk_write_text(const char *dir, const char *name, char *text, int sync, v4_error *err);
int v4mk_join_path(char *out, size_t cap, const char *dir, const char *name);

#endif
