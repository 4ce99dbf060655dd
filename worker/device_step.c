/* device_step.c - choosing the GPU decode mode for a CUDA backend (cli_util.h
 * v4_attach_device_step): "resident" runs the whole step on the GPU
 * (kernels/cuda/cuda_step.h: weights uploaded once, sequence state on the device);
 * "hybrid" keeps the step on the CPU and runs only the weight products on the GPU
 * (kernels/cuda/cuda_backend.h), the mode that works with the host expert cache.  With
 * V4_GPU_EXPERT_MEM the resident step pages experts within that budget; the choice is
 * logged.
 * Ownership: the engine is owned by the backend (freed with it).  Thread: main thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../cache/model_files.h"
#include "cli_util.h"
#ifdef V4_HAVE_CUDA
#include "../kernels/cuda/cuda_backend.h"
#include "../kernels/cuda/cuda_step.h"
#include "../kernels/cuda/slot_pool.h"
#endif

#define HEADROOM ((size_t)1 << 30)      /* device bytes left for sequences and the runtime */

int v4_attach_device_step(v4_backend *be, struct v4_model_files *m, struct v4_ctx *ctx, int max_batch,
                          int host_paged, v4_error *err)
{
    const char *mode = getenv("V4_CUDA_MODE");
    if (mode && *mode && strcmp(mode, "auto") && strcmp(mode, "resident") && strcmp(mode, "hybrid"))
        return v4_err_set(err, V4_ERR_CONFIG, "V4_CUDA_MODE", "'%s': expected auto, resident or hybrid", mode);
    if (strcmp(be->ops->name, "cuda"))
        return 0;   /* the CPU path: nothing to choose */
#ifdef V4_HAVE_CUDA
    const int want_resident = mode && !strcmp(mode, "resident"), want_hybrid = mode && !strcmp(mode, "hybrid");
    const char *dev = v4_cuda_backend_device_name(be);
    if (want_hybrid) {
        fprintf(stderr, "v4fleet: CUDA hybrid mode on %s (V4_CUDA_MODE=hybrid): weight products on the GPU\n", dev);
        return 0;
    }
    if (host_paged) {
        if (want_resident)
            return v4_err_set(err, V4_ERR_CONFIG, "V4_CUDA_MODE",
                              "resident pages experts from the mapped checkpoint within V4_GPU_EXPERT_MEM; it does "
                              "not combine with the host expert cache (--host-cache-bytes) yet: use hybrid");
        fprintf(stderr, "v4fleet: CUDA hybrid mode on %s (host expert cache): weight products on the GPU\n", dev);
        return 0;
    }
    const v4_config *cfg = &m->cfg;
    const char *spec = getenv("V4_GPU_EXPERT_MEM");
    size_t budget = 0;
    if (spec && *spec) {
        const uint64_t total = (uint64_t)cfg->n_layers * (uint64_t)cfg->n_routed_experts *
                               v4_expert_bytes(&m->w.layers[0].experts[0]);
        if (v4_slot_pool_budget_parse(spec, total, "V4_GPU_EXPERT_MEM", &budget, err))
            return -1;
    }
    const size_t need = v4_cuda_engine_need(&m->w, max_batch, budget);
    size_t free_b = 0, total_b = 0;
    if (v4_cuda_backend_mem_info(be, &free_b, &total_b))
        return v4_err_set(err, V4_ERR_INVALID, "cuda", "cannot query the memory of %s", dev);
    if (!want_resident && need + HEADROOM > free_b) {
        fprintf(stderr, "v4fleet: CUDA hybrid mode on %s: the resident step needs %.2f GiB, %.2f GiB free "
                        "(set V4_GPU_EXPERT_MEM to page experts on the GPU)\n",
                dev, need / 1073741824.0, free_b / 1073741824.0);
        return 0;
    }
    v4_cuda_engine *e = v4_cuda_engine_create(&m->w, max_batch, 2 * max_batch + 2, budget, err);
    if (!e)
        return -1;
    v4_cuda_backend_own_engine(be, e);
    v4_step_impl impl = v4_cuda_engine_impl(e);
    v4_ctx_set_step_impl(ctx, &impl);
    v4_cuda_expert_stats xs;
    v4_cuda_engine_expert_stats(e, &xs);
    char paged[200] = "every expert resident";
    if (budget)
        snprintf(paged, sizeof paged, "experts paged in %d slots of %.2f MiB (V4_GPU_EXPERT_MEM=%s)", xs.slots,
                 xs.slot_bytes / 1048576.0, spec);
    fprintf(stderr, "v4fleet: CUDA resident mode on %s: the whole decode step on the GPU, %s; %.2f GiB held "
                    "(%.2f GiB free of %.2f)\n",
            dev, paged, v4_cuda_engine_bytes(e) / 1073741824.0, free_b / 1073741824.0, total_b / 1073741824.0);
    return 1;
#else
    (void)m;
    (void)ctx;
    (void)max_batch;
    (void)host_paged;
    return v4_err_set(err, V4_ERR_INTERNAL, "cuda", "a CUDA device in a build without CUDA");
#endif
}
