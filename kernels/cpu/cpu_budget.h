/* cpu_budget.h - how many CPUs this process may really use, for the default thread
 * count of the CPU backend: the CPUs online, those in its affinity mask
 * (sched_getaffinity: taskset, cpusets) and the cgroup CPU quota (v2 cpu.max at the
 * process's cgroup and every parent; v1 cpu.cfs_quota_us / cpu.cfs_period_us), as
 * Kubernetes `resources.limits.cpu` and `docker run --cpus` set it.
 *
 * threads = min(affinity (or online), floor(quota)), at least 1: a quota of 1.5 CPUs
 * gets 1 thread, since a pool wider than its quota is throttled for the rest of each
 * period once it has used it up.
 *
 * Ownership: fills the caller's struct; nothing is kept.  Thread: any (reads /proc
 * and /sys each call).
 */
#ifndef V4_CPU_BUDGET_H
#define V4_CPU_BUDGET_H

#include <stddef.h>

typedef struct v4_cpu_budget {
    int online;                 /* CPUs online */
    int affinity;               /* CPUs in the affinity mask (0: unknown) */
    double quota;               /* the tightest cgroup quota in CPUs (0: none) */
    char quota_src[256];        /* the file it came from ("" when none) */
    int threads;                /* the default thread count (>= 1) */
} v4_cpu_budget;

void v4_cpu_budget_get(v4_cpu_budget *b);
/* The same with /proc/self/cgroup and /sys/fs/cgroup read under root ("" = the real
 * ones; tests give a fake tree), online and affinity given (affinity 0: unknown). */
void v4_cpu_budget_at(const char *root, int online, int affinity, v4_cpu_budget *b);
/* One line for the start-up log, e.g. "2 threads (4 CPUs online, 2 in the affinity
 * mask, cgroup quota 2.50 CPUs from /sys/fs/cgroup/cpu.max)"; returns buf. */
const char *v4_cpu_budget_describe(const v4_cpu_budget *b, char *buf, size_t cap);

#endif
