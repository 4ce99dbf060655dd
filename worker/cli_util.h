/* cli_util.h - small helpers shared by the subcommands: option parsing of the
 * common engine flags, reading a JSON array of token ids, printing an error.
 * Ownership: arrays returned through out-parameters are malloc'd; the caller frees.
 * Thread: main thread only. */
#ifndef V4_CLI_UTIL_H
#define V4_CLI_UTIL_H

#include <stdint.h>

#include "../config/device_setting.h"   /* v4_parse_device */
#include "../config/error.h"
#include "../kernels/backend.h"

typedef struct v4_engine_opts {
    const char *model;      /* --model DIR */
    int threads;            /* --threads N (0 = all cores) */
    const char *isa;        /* --isa auto|scalar|avx2|avx512|avx512vnni */
    /* paged experts (cache/expert_provider.h); host_cache_bytes 0 = all resident */
    long long host_cache_bytes;     /* --host-cache-bytes B (K/M/G suffixes) */
    const char *pack;               /* --pack DIR (else page from the safetensors) */
    const char *cache_policy;       /* --cache-policy lru|slru|lfru */
    int io_threads;                 /* --io-threads N */
    /* --device cpu|cuda|cuda:N (NULL: the V4_DEVICE environment variable, else cpu).
     * cuda runs the weight products on the GPU ("hybrid" mode, kernels/cuda/). */
    const char *device;
    /* The CUDA mode (auto|resident|hybrid) and the GPU expert budget (bytes or P%);
     * NULL or "": the V4_CUDA_MODE / V4_GPU_EXPERT_MEM environment variables. */
    const char *cuda_mode;
    const char *gpu_expert_mem;
} v4_engine_opts;

/* The usage line of the device flag, for the commands' --help. */
#define V4_DEVICE_FLAG_USAGE "         [--device cpu|cuda|cuda:N]\n"

/* The usage line of the paged-expert flags, for the commands' --help. */
#define V4_EXPERT_FLAGS_USAGE \
    "         [--host-cache-bytes B [--pack DIR] [--cache-policy lru|slru|lfru] [--io-threads N]]\n"


/* Consume argv[*i] (and its value) if it is a common engine flag; returns 1 if
 * consumed, 0 if not ours, -1 on a missing/bad value (message printed). */
int v4_opts_take(v4_engine_opts *o, int argc, char **argv, int *i, const char *cmd);
/* Read a JSON array of integers in [0, limit) (limit <= 0: no upper bound). */
int v4_read_ids_json(const char *path, int32_t **ids, int *n, int limit, v4_error *err);
/* v when set (non-NULL, non-empty), else the environment variable name, else "". */
const char *v4_opt_or_env(const char *v, const char *name);
/* One line "v4fleet CMD: WHERE: MESSAGE" on stderr. */
void v4_print_error(const char *cmd, const v4_error *err);
/* The backend o asks for: --device (or V4_DEVICE) cpu (default) -> the CPU backend
 * (--threads, --isa); cuda or cuda:N -> the CUDA backend on device N (0).  Asking
 * for cuda in a build without it, or on a machine without a usable GPU, is an error
 * (V4_ERR_INVALID, saying which), never a silent fallback to the CPU. */
v4_backend *v4_open_backend(const v4_engine_opts *o, v4_error *err);

struct v4_model_files;
struct v4_ctx;
struct v4_xprov;
/* When o asks for paged experts: open the expert cache for the model m opened from
 * o->model and attach it to ctx; *out = the provider to close after ctx is freed
 * (NULL when all experts stay resident).  Then v4_attach_gpu (max_batch 1, o's CUDA
 * mode and GPU expert budget).  0 or -1 with err. */
int v4_attach_experts(const v4_engine_opts *o, v4_backend *be, struct v4_model_files *m, struct v4_ctx *ctx,
                      struct v4_xprov **out, v4_error *err);
/* The GPU expert cache of the hybrid mode (kernels/cuda/gpu_experts.h) when gpu_mem
 * (NULL or "": the environment variable V4_GPU_EXPERT_MEM) is set (bytes with a
 * K/M/G/T suffix, or a percentage of the model's routed-expert bytes) and be is the
 * CUDA backend: attached to be (which owns it: freed with be), between ctx and its
 * experts (the host cache xp, or with xp NULL the weights' own); logs one line (budget,
 * slot size, slots) on stderr.  Unset: no-op; set with a CPU backend: ignored with a
 * notice.  0 or -1 with err (bad value, budget below one slot, CUDA failure). */
int v4_attach_gpu_experts(v4_backend *be, struct v4_model_files *m, struct v4_ctx *ctx, struct v4_xprov *xp,
                          const char *gpu_mem, v4_error *err);

/* For a CUDA backend: the decode mode (worker/device_step.c), from cuda_mode (NULL or
 * "": V4_CUDA_MODE) = auto (default) | resident | hybrid.  resident: the whole step on
 * the GPU (kernels/cuda/cuda_step.h, owned by be), set as ctx's step implementation for
 * up to max_batch sequences per step, every expert resident or paged within the GPU
 * expert budget gpu_mem (NULL or "": V4_GPU_EXPERT_MEM), the misses coming from the
 * host expert cache xp (its provider is ctx's already) or, with xp NULL, from the
 * mapped checkpoint; with xp and no budget, the budget is the device's free memory
 * after the trunk and 1 GiB.  hybrid: only the weight products on the GPU (the GPU
 * expert cache of v4_attach_gpu_experts serves that mode).  auto picks resident unless
 * the step does not fit the device's free memory with 1 GiB to spare.  Logs the choice
 * on stderr.  Returns 1 (resident), 0 (hybrid, or a CPU backend: a bad mode is still an
 * error), -1 with err. */
int v4_attach_device_step(v4_backend *be, struct v4_model_files *m, struct v4_ctx *ctx, int max_batch,
                          struct v4_xprov *xp, const char *cuda_mode, const char *gpu_mem, v4_error *err);
/* The GPU expert cache's cumulative figures, whichever mode runs it (the hybrid
 * cache of v4_attach_gpu_experts or the resident step's paged experts): hits,
 * misses, bytes_read = bytes uploaded host -> device, in_use_bytes = budget_bytes =
 * the slot pool's bytes (allocated once).  0 and f filled; -1 (f zeroed) when be has
 * no paged GPU experts (a CPU backend, every expert resident, a build without CUDA).
 * Thread: the thread that runs the steps (the counters are not locked). */
struct v4_runner_cache_figs;
int v4_gpu_cache_figs_get(const v4_backend *be, struct v4_runner_cache_figs *f);
/* v4_attach_device_step, then v4_attach_gpu_experts when it chose hybrid.  0 or -1. */
int v4_attach_gpu(v4_backend *be, struct v4_model_files *m, struct v4_ctx *ctx, int max_batch, struct v4_xprov *xp,
                  const char *cuda_mode, const char *gpu_mem, v4_error *err);

#endif
