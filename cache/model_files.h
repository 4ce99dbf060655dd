/* model_files.h - open a model directory in one call: config.json, the safetensors
 * checkpoint (mmap'ed), the bound weights, and (by default) their preparation:
 * v4_weights_prepare repacks the EXACT-mode matrices into owned row-interleaved
 * copies (kernels/v4/weights.h; about 1/3 of the per-token bytes for V4 shapes, e.g.
 * +0.8 GB for the small bench preset).  Results are bit-identical either way.
 * v4_model_open skips the preparation when the environment variable V4_NO_PREPARE is
 * set to a non-empty value other than "0" (to compare layouts or save memory);
 * v4_model_open_ex takes the choice as a flag instead.  Running out of memory for the
 * copies fails the open (the message names V4_NO_PREPARE).
 *
 * A model whose routed experts are synthetic (DIR/synthetic_experts.json, written by
 * `mkmodel --no-experts`, expert_synth.h) has no expert tensors: it opens only with
 * V4_OPEN_EXPERTS_PAGED (the caller pages the experts through an expert provider,
 * expert_provider.h, which generates them); the experts are then bound as shapes
 * without bytes (bind_weights.h V4_BIND_NO_ROUTED) and experts_synthetic is 1.
 * Without the flag the open fails with V4_ERR_CONFIG naming the directory and the fix
 * (--host-cache-bytes / V4_HOST_CACHE_BYTES).
 *
 * Ownership: v4_model_files owns all three; v4_model_close releases them (weights
 * first, then the mappings).  Thread: open/close from one thread; the weights are
 * read-only and may be shared by any number of forward contexts.
 */
#ifndef V4_MODEL_FILES_H
#define V4_MODEL_FILES_H

#include "../config/model_config.h"
#include "../kernels/v4/weights.h"
#include "safetensors.h"

typedef struct v4_model_files {
    v4_config cfg;
    v4_ckpt *ck;
    v4_weights w;
    int experts_synthetic;      /* the routed experts are synthetic (not in w) */
} v4_model_files;

enum { V4_OPEN_NO_PREPARE = 1, V4_OPEN_EXPERTS_PAGED = 2 };

int v4_model_open(const char *dir, v4_model_files *m, v4_error *err);
/* As v4_model_open; paged != 0: the caller pages the routed experts (V4_OPEN_EXPERTS_PAGED). */
int v4_model_open_paged(const char *dir, v4_model_files *m, int paged, v4_error *err);
/* flags: V4_OPEN_NO_PREPARE | V4_OPEN_EXPERTS_PAGED (the environment is not consulted). */
int v4_model_open_ex(const char *dir, v4_model_files *m, int flags, v4_error *err);
void v4_model_close(v4_model_files *m);

#endif
