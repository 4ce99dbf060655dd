/* model_files.h - open a model directory in one call: config.json, the safetensors
 * checkpoint (mmap'ed), and the bound weights.
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
} v4_model_files;

int v4_model_open(const char *dir, v4_model_files *m, v4_error *err);
void v4_model_close(v4_model_files *m);

#endif
