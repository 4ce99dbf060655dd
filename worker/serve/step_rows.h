/* step_rows.h - the one policy for how many rows (prompt positions of a prefill
 * chunk, plus one row per other sequence) a forward step may carry, shared by the
 * worker's runner (worker/serve/task_run.c) and `v4fleet generate` (worker/tools/cmd_generate.c).
 *
 * Policy: on the CPU backend a step may carry want_rows rows (a prefill chunk of
 * several positions costs one pass over the weights).  With paged experts (a host
 * expert cache) a step's MoE layer acquires the union of its rows' experts at once,
 * up to min(rows x n_act_experts, n_routed_experts) of them, and that union must fit
 * the cache's slots: unless the slots hold a whole layer's experts, the rows shrink to
 * slots / n_act_experts, never below floor_rows (the rows the caller needs anyway: one
 * per sequence of a batch).  Any other backend gets floor_rows, unless ctx's step
 * implementation takes several rows per sequence (the resident CUDA step with every
 * expert resident, or with device expert slots for a whole step's union: cuda_step.h):
 * then want_rows, at most ctx's rows, and with a host expert cache behind the device
 * slots (xp) the same limit by its slots as on the CPU (the misses of a layer are
 * fetched through it at once).  The hybrid mode takes one row per sequence.
 *
 * The prefill chunk (v4_prefill_chunk): the most prompt positions of one sequence a
 * step carries.  Asked for (--prefill-chunk, V4_PREFILL_CHUNK): that, within
 * 1..V4_GEN_CHUNK_MAX.  Default: V4_CPU_CHUNK (64) on the CPU (measured on `small`, a
 * 512-token prompt, 2 threads, medians of 3: 16 / 64 / 256 rows gave 31.9 / 34.8 / 35.3
 * prompt tokens/s exact and 36.3 / 45.8 / 48.0 fast: the experts see more rows per
 * weight pass; 64 takes most of the gain with a quarter of 256's step latency for the
 * tasks that share the step), and V4_DEVICE_CHUNK on a device, whose step
 * turns a chunk into tensor-core GEMMs; a device step carries at most
 * V4_DEVICE_STEP_ROWS rows, so there the chunk is also at most that minus the other
 * sequences' rows (max_batch - 1).
 *
 * Ownership: nothing is kept.  Thread: any (reads the cache's figures, which are
 * thread-safe).
 */
#ifndef V4_STEP_ROWS_H
#define V4_STEP_ROWS_H

#include "cache/expert_provider.h"
#include "config/model_config.h"
#include "kernels/backend.h"
#include "kernels/v4/model.h"
#include "generate.h"

/* The rows a step may carry: want_rows on the CPU backend, on any other backend
 * floor_rows, or with a chunk-taking step implementation on ctx (NULL: none yet)
 * want_rows within ctx's rows; either way at most xp's slots / cfg->n_act_experts
 * when xp (the host expert cache; NULL = experts resident) is given and holds fewer
 * slots than one layer's experts; never below floor_rows.  Also never above want_rows
 * (floor_rows > want_rows gives floor_rows). */
int v4_fit_step_rows(const v4_ctx *ctx, const v4_backend *be, v4_xprov *xp, const v4_config *cfg, int want_rows,
                     int floor_rows);

#define V4_CPU_CHUNK 64            /* the default prefill chunk on the CPU */
#define V4_DEVICE_CHUNK 256        /* the default prefill chunk on a device */
#define V4_DEVICE_STEP_ROWS 256    /* rows one device step takes (kernels/cuda/cuda_step.h) */
/* The prefill chunk on be (see above): asked (0 = the default) for a context that also
 * carries max_batch sequences' rows. */
int v4_prefill_chunk(const v4_backend *be, int asked, int max_batch);
/* The same by kind (device = 0: the CPU backend, else a device), for a plan made
 * without a backend (inspect --gpu-mem). */
int v4_prefill_chunk_on(int device, int asked, int max_batch);

#endif
