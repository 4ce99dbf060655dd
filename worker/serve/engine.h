/* engine.h - assembling the engine that a command or the worker runs: the backend
 * (CPU or CUDA), paged experts (host expert cache), and on CUDA the decode mode
 * (resident step or hybrid products) with the GPU expert cache.  The serving core
 * (task_run.c) and the subcommands build their engine through these calls, so every
 * entry point reads the same flags and environment variables the same way.
 * Ownership: a backend returned by v4_open_backend belongs to the caller
 * (be->ops->destroy); whatever v4_attach_* attaches to it is owned by the backend or,
 * for the host expert cache, by the caller (*out).  Thread: the thread that builds the
 * engine (main thread); the counters of v4_gpu_cache_figs_get belong to the stepping
 * thread.
 */
#ifndef V4_SERVE_ENGINE_H
#define V4_SERVE_ENGINE_H

#include <stdint.h>

#include "config/error.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_lt_policy.h"
#include "kernels/xpolicy.h"

typedef struct v4_engine_opts {
    const char *model;      /* --model DIR */
    int threads;            /* --threads N (0 = all cores) */
    const char *isa;        /* --isa auto|scalar|avx2|avx512|avx512vnni */
    /* paged experts (cache/expert_provider.h); host_cache_bytes 0 = all resident */
    long long host_cache_bytes;     /* --host-cache-bytes B (K/M/G suffixes) */
    const char *pack;               /* --pack DIR (else page from the safetensors) */
    const char *cache_policy;       /* --cache-policy lru|slru|lfru|next (NULL: next) */
    int io_threads;                 /* --io-threads N */
    /* --device cpu|cuda|cuda:N (NULL: the V4_DEVICE environment variable, else cpu).
     * cuda runs the weight products on the GPU ("hybrid" mode, kernels/cuda/). */
    const char *device;
    /* The CUDA mode (auto|resident|hybrid) and the GPU expert budget (bytes or P%);
     * NULL or "": the V4_CUDA_MODE / V4_GPU_EXPERT_MEM environment variables. */
    const char *cuda_mode;
    const char *gpu_expert_mem;
    /* The GPU expert slots' eviction policy (lru|slru|lfru|next) and the hybrid mode's
     * weight-copy budget (bytes or P% of the device); NULL or "": V4_GPU_CACHE_POLICY
     * (else next) / V4_GPU_WEIGHT_MEM (else the free memory less 1 GiB). */
    const char *gpu_cache_policy;
    const char *gpu_weight_mem;
    /* The resident step's sequence caches: bytes or P% of the device; NULL or "":
     * V4_GPU_SEQ_MEM (else every task at the full context, at most an eighth of the
     * device after the trunk: kernels/cuda/cuda_plan.h). */
    const char *gpu_seq_mem;
    /* --numerics exact|fast (NULL or "": the V4_NUMERICS environment variable, else
     * exact on the CPU and fast on CUDA).  CPU: kernels/cpu/cpu_backend.h; CUDA:
     * kernels/cuda/cuda_backend.h (tensor cores through cuBLASLt; exact products when
     * cuBLASLt does not start or fails its self-test: v4_backend_numerics tells). */
    const char *numerics;
    /* --prefill-chunk N: prompt positions per forward step (0: the backend's default,
     * worker/serve/step_rows.h); only the commands that prefill (generate, batch). */
    int prefill_chunk;
    /* --no-lookahead: 1 = the router look-ahead of paged experts off (v4_lookahead_on);
     * 0 = the V4_LOOKAHEAD environment variable, else on. */
    int no_lookahead;
} v4_engine_opts;

/* The GPU settings of one engine; each string NULL or "": its environment variable
 * (V4_CUDA_MODE, V4_GPU_EXPERT_MEM, V4_GPU_CACHE_POLICY, V4_GPU_WEIGHT_MEM,
 * V4_GPU_SEQ_MEM).  A NULL v4_gpu_opts pointer reads them all from the environment
 * (context 0).  Borrowed strings. */
typedef struct v4_gpu_opts {
    const char *cuda_mode;      /* auto | resident | hybrid */
    const char *expert_mem;     /* GPU expert budget: bytes or P% of the routed experts */
    const char *cache_policy;   /* lru | slru | lfru | next (default next) */
    const char *weight_mem;     /* hybrid weight copies: bytes or P% of the device */
    const char *seq_mem;        /* resident step: the sequences' caches, bytes or P% of the device */
    long context;               /* positions a task may use (prompt + max_tokens); 0: the model's */
    int no_lookahead;           /* 1: the resident step's router look-ahead off; 0: V4_LOOKAHEAD, else on */
} v4_gpu_opts;

/* v when set (non-NULL, non-empty), else the environment variable name, else "". */
const char *v4_opt_or_env(const char *v, const char *name);
/* The router look-ahead of paged experts (a prefetch hint, outputs unchanged: the CPU
 * path's v4_ctx_set_lookahead, kernels/v4/model.h, and the resident CUDA step's
 * v4_cuda_engine_set_lookahead, kernels/cuda/cuda_step.h): 0 when no_lookahead is set
 * (--no-lookahead, or the worker's V4_LOOKAHEAD=0 through v4_runner_opts), else the
 * environment variable V4_LOOKAHEAD (0 or 1; unset or empty: 1).  Returns 1 or 0, or -1
 * with err (V4_ERR_CONFIG naming V4_LOOKAHEAD) when V4_LOOKAHEAD is anything else.
 * Reads the environment: the thread that builds the engine. */
int v4_lookahead_on(int no_lookahead, v4_error *err);
/* The backend o asks for: --device (or V4_DEVICE) cpu (default) -> the CPU backend
 * (--threads, --isa); cuda or cuda:N -> the CUDA backend on device N (0).  Asking
 * for cuda in a build without it, or on a machine without a usable GPU, is an error
 * (V4_ERR_INVALID, saying which), never a silent fallback to the CPU. */
v4_backend *v4_open_backend(const v4_engine_opts *o, v4_error *err);
/* The numerics mode be runs: "exact" or "fast" (what each result reports). */
const char *v4_backend_numerics(const v4_backend *be);
/* The fast mode's start-up self-test of be (kernels/cuda/cuda_lt_policy.h): a CUDA
 * backend's verdict (passed, or failed / unavailable with the product, the cuBLAS or CUDA
 * status and the reason), V4_FAST_NOT_RUN for a CPU or exact backend and in builds without
 * CUDA.  Copied into *out (not NULL). */
void v4_backend_fast_selftest(const v4_backend *be, v4_fast_selftest *out);

struct v4_model_files;
struct v4_ctx;
struct v4_xprov;
/* When o asks for paged experts: open the expert cache for the model m opened from
 * o->model and attach it to ctx; *out = the provider to close after ctx is freed
 * (NULL when all experts stay resident).  Sets ctx's router look-ahead to
 * v4_lookahead_on(o->no_lookahead).  Then v4_attach_gpu (max_batch 1, o's CUDA mode,
 * GPU expert budget and look-ahead).  0 or -1 with err. */
int v4_attach_experts(const v4_engine_opts *o, v4_backend *be, struct v4_model_files *m, struct v4_ctx *ctx,
                      struct v4_xprov **out, v4_error *err);
/* The GPU expert cache of the hybrid mode (kernels/cuda/gpu_experts.h) when g's
 * expert_mem (NULL or "": the environment variable V4_GPU_EXPERT_MEM) is set (bytes with a
 * K/M/G/T suffix, or a percentage of the model's routed-expert bytes) and be is the
 * CUDA backend: attached to be (which owns it: freed with be), between ctx and its
 * experts (the host cache xp, or with xp NULL the weights' own); logs one line (budget,
 * slot size, slots, policy) on stderr; the slots evict by g's cache_policy.  Unset: no-op; set with a CPU backend: ignored with a
 * notice.  0 or -1 with err (bad value, budget below one slot, CUDA failure). */
int v4_attach_gpu_experts(v4_backend *be, struct v4_model_files *m, struct v4_ctx *ctx, struct v4_xprov *xp,
                          const v4_gpu_opts *g, v4_error *err);
/* g's GPU cache policy (default next); 0, or -1 with err (V4_ERR_CONFIG naming
 * V4_GPU_CACHE_POLICY) on an unknown name. */
int v4_gpu_cache_policy(const v4_gpu_opts *g, v4_xpolicy_kind *kind, v4_error *err);

/* For a CUDA backend: the decode mode (engine.c), from g's cuda_mode (NULL or
 * "": V4_CUDA_MODE) = auto (default) | resident | hybrid.  resident: the whole step on
 * the GPU (kernels/cuda/cuda_step.h, owned by be), set as ctx's step implementation for
 * up to max_batch sequences per step and ctx's rows (v4_ctx_max_rows, at most 256: with
 * every expert resident a prefill chunk fills the spare rows), every expert resident or
 * paged within the GPU expert budget (g's expert_mem, else V4_GPU_EXPERT_MEM; unset and
 * the experts do not fit: the device's free memory after the trunk and 1 GiB), evicting
 * by g's cache_policy, the misses coming from the host expert cache xp (its provider is
 * ctx's already) or, with xp NULL, from the mapped checkpoint; the engine's router
 * look-ahead of paged experts is v4_lookahead_on(g's no_lookahead) (an error in
 * V4_LOOKAHEAD fails the call, on any backend).  hybrid: only the weight
 * products on the GPU (the GPU expert cache of v4_attach_gpu_experts serves that mode).
 * auto decides by kernels/cuda/cuda_plan.h: resident with every expert when it fits,
 * else resident with paged experts, hybrid only when not even one step's experts fit
 * next to the trunk.  Logs the choice and the split (trunk, experts, headroom) on
 * stderr.  Returns 1 (resident), 0 (hybrid, or a CPU backend: a bad mode is still an
 * error), -1 with err. */
int v4_attach_device_step(v4_backend *be, struct v4_model_files *m, struct v4_ctx *ctx, int max_batch,
                          struct v4_xprov *xp, const v4_gpu_opts *g, v4_error *err);
/* The GPU expert cache's cumulative figures, whichever mode runs it (the hybrid
 * cache of v4_attach_gpu_experts or the resident step's paged experts): hits,
 * misses, bytes_read = bytes uploaded host -> device, in_use_bytes = budget_bytes =
 * the slot pool's bytes (allocated once).  0 and f filled; -1 (f zeroed) when be has
 * no paged GPU experts (a CPU backend, every expert resident, a build without CUDA).
 * Thread: the thread that runs the steps (the counters are not locked). */
struct v4_runner_cache_figs;
int v4_gpu_cache_figs_get(const v4_backend *be, struct v4_runner_cache_figs *f);
/* Device memory of a CUDA backend.  Resident step: held = every byte its engine holds
 * (trunk + expert slots + the sequences' fixed parts and page pools), trunk = weights
 * and scratch, experts = the expert slots, seq_budget = the bytes sequences may hold
 * (the plan's, cuda_plan.h; 0 = none: the free memory), seq_held = what they hold now.
 * Hybrid: held = experts = its GPU expert pool, the rest 0.  0, or -1 (all 0) for a CPU
 * backend or a CUDA one with neither.  Thread: the engine's (stepping) thread. */
typedef struct v4_gpu_memory {
    int resident;               /* 1 = the resident step's figures, 0 = hybrid (or none) */
    unsigned long long held, trunk, experts, seq_budget, seq_held;
} v4_gpu_memory;
int v4_gpu_memory_get(const v4_backend *be, v4_gpu_memory *m);
/* The CUDA plan (kernels/cuda/cuda_plan.h) the resident step would follow for model m
 * on a device with free_b bytes free of total_b: the trunk and scratch for rows rows
 * (at least max_batch; fast: the fast mode's bf16 forms too), the routed experts, the
 * sequences' claims of max_batch tasks at g's context (0: the model's) and g's
 * settings (NULL: the environment).  info gets the figures it used.  0, or -1 with err
 * (a bad setting: V4_ERR_CONFIG; resident asked and impossible: V4_ERR_NOMEM).  CUDA
 * builds only; allocates nothing on the device (v4_cuda_engine_need counts).  Thread:
 * any. */
struct v4_cuda_plan;
typedef struct v4_gpu_plan_info {
    long long context;          /* positions per task the claims are for */
    size_t claim;               /* one task's sequence claim at context (v4_cuda_seq_bytes) */
    int max_batch, rows;        /* tasks at once; the step's rows */
    size_t routed_bytes;        /* every routed expert in the step's layout */
    size_t free_bytes, total_bytes;
    long long longest;          /* resident with a sequences' budget: the most positions (<= context)
                                 * one task may reach alone within it; else 0 */
} v4_gpu_plan_info;
int v4_gpu_plan(const struct v4_model_files *m, int rows, int max_batch, int fast, const v4_gpu_opts *g,
                size_t free_b, size_t total_b, struct v4_cuda_plan *plan, v4_gpu_plan_info *info, v4_error *err);
/* One line of the plan for a log: mode, why, trunk, experts (share of the routed
 * experts), sequences (where that figure came from, the claims), headroom, free. */
void v4_gpu_plan_describe(const struct v4_cuda_plan *plan, const v4_gpu_plan_info *info, char *out, size_t n);
/* v4_attach_device_step, then when it chose hybrid v4_attach_gpu_experts and the
 * weight-copy budget of the hybrid backend (g's weight_mem, else the device's free
 * memory after the expert pool less 1 GiB; v4_cuda_backend_set_weight_budget).  0 or
 * -1. */
int v4_attach_gpu(v4_backend *be, struct v4_model_files *m, struct v4_ctx *ctx, int max_batch, struct v4_xprov *xp,
                  const v4_gpu_opts *g, v4_error *err);

#endif
