/* cpu_backend.h - create the CPU implementation of the backend interface.
 *
 * isa: "auto" (best the CPU supports), "scalar", "avx2", "avx512" or "avx512vnni"
 * (avx512 with the VNNI FP4 kernel); asking for an ISA the CPU lacks is an error.  With
 * "auto" (or NULL) the environment variable V4_CPU_ISA, if set, names the ISA instead
 * (scalar|avx2|avx512|avx512vnni|auto).  Every ISA gives
 * bit-identical results.  n_threads: 0 = one per CPU this process may use (cpu_budget.h:
 * the affinity mask and the cgroup CPU quota); the backend owns a pool of n_threads-1
 * worker threads plus the calling thread.
 *
 * Ownership: the caller owns the returned backend and frees it with
 * be->ops->destroy(be) (or v4_backend_destroy).
 * Thread: create/destroy and every op from one thread at a time.
 */
#ifndef V4_CPU_BACKEND_H
#define V4_CPU_BACKEND_H

#include "../../config/error.h"
#include "../../config/numerics_setting.h"
#include "../backend.h"
#include "threadpool.h"

v4_backend *v4_cpu_backend_create(int n_threads, const char *isa, v4_error *err);
/* The same with a numerics mode: "exact" or "fast" (config/numerics_setting.h); NULL or
 * "": the environment variable V4_NUMERICS, else exact.  An unknown mode is an error
 * (V4_ERR_INVALID, where = "numerics" or "V4_NUMERICS").  fast: the FP8 and EXACT
 * products accumulate in float in a fixed order (kernels/cpu/linear_fast.c):
 * deterministic, the same bits on every ISA and at every batch size, not the goldens'. */
v4_backend *v4_cpu_backend_create_ex(int n_threads, const char *isa, const char *numerics, v4_error *err);
/* The backend's numerics mode (V4_NUM_EXACT for a backend that is not the CPU one). */
v4_numerics v4_cpu_backend_numerics(const v4_backend *be);
/* The ISA the backend actually uses ("scalar", "avx2", "avx512", "avx512vnni"). */
const char *v4_cpu_backend_isa(const v4_backend *be);
/* The ISA as asked: "auto" when the backend chose it (isa "auto" or NULL, and
 * V4_CPU_ISA unset or "auto"), else the one named ("scalar", "avx2", "avx512",
 * "avx512vnni"); NULL when be is not the CPU backend.  The engine's attention loops
 * follow it (kernels/v4/attn_kern.h v4_attn_kern_for_isa). */
const char *v4_cpu_backend_isa_asked(const v4_backend *be);
/* Threads the backend uses (including the caller). */
int v4_cpu_backend_threads(const v4_backend *be);
/* The thread pool's counters (threadpool.h: runs, stalls on descheduled workers,
 * runs done alone while backing off); zeros for another backend.  Thread: the stepping thread. */
void v4_cpu_backend_pool_stats(const v4_backend *be, v4_pool_stats *st);
/* Which ISAs this CPU supports (for tests that run every path); "scalar" and "auto"
 * always. */
int v4_cpu_isa_supported(const char *isa);

#endif
