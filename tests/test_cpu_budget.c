/* test_cpu_budget.c - the default thread count (kernels/cpu/cpu_budget.h) on fake
 * /proc/self/cgroup + /sys/fs/cgroup trees: cgroup v2 cpu.max at the process's cgroup
 * and its parents (the tightest wins), "max" (no quota), v1 cfs quota / period, the
 * affinity mask below the online CPUs, a quota below one CPU (still 1 thread), and the
 * real machine (a sane figure, logged). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "kernels/cpu/cpu_budget.h"
#include "testutil.h"

static char root[4096];

static void put(const char *rel, const char *text)
{
    char path[8192], cmd[9000];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", path);
    if (system(cmd) != 0)
        return;
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void fresh(const char *name)
{
    char cmd[9000];
    snprintf(root, sizeof root, "%s/cpu_budget_%s", t_env("V4_TMP", "/tmp"), name);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", root, root);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot make %s\n", root);
}

int main(void)
{
    v4_cpu_budget b;
    char line[600];

    fresh("none");   /* no cgroup files at all: the online CPUs, or the affinity mask */
    v4_cpu_budget_at(root, 8, 0, &b);
    CHECK(b.threads == 8 && b.quota == 0, "no cgroup, 8 online: %s", v4_cpu_budget_describe(&b, line, sizeof line));
    v4_cpu_budget_at(root, 8, 3, &b);
    CHECK(b.threads == 3, "affinity 3 of 8: %s", v4_cpu_budget_describe(&b, line, sizeof line));

    fresh("v2");   /* cgroup v2: the process's cpu.max and its parents' */
    put("proc/self/cgroup", "0::/kubepods/pod1/ctr\n");
    put("sys/fs/cgroup/kubepods/pod1/ctr/cpu.max", "max 100000\n");
    v4_cpu_budget_at(root, 8, 8, &b);
    CHECK(b.threads == 8 && b.quota == 0, "v2 max: no quota: %s", v4_cpu_budget_describe(&b, line, sizeof line));
    put("sys/fs/cgroup/kubepods/pod1/cpu.max", "250000 100000\n");
    v4_cpu_budget_at(root, 8, 8, &b);
    CHECK(b.threads == 2 && b.quota > 2.49 && b.quota < 2.51 && strstr(b.quota_src, "pod1/cpu.max"),
          "v2 parent quota 2.5: 2 threads: %s", v4_cpu_budget_describe(&b, line, sizeof line));
    put("sys/fs/cgroup/kubepods/pod1/ctr/cpu.max", "150000 100000\n");
    v4_cpu_budget_at(root, 8, 8, &b);
    CHECK(b.threads == 1 && b.quota > 1.49 && b.quota < 1.51 && strstr(b.quota_src, "ctr/cpu.max"),
          "v2 tighter child 1.5: 1 thread: %s", v4_cpu_budget_describe(&b, line, sizeof line));
    put("sys/fs/cgroup/kubepods/pod1/ctr/cpu.max", "20000 100000\n");
    v4_cpu_budget_at(root, 8, 8, &b);
    CHECK(b.threads == 1 && b.quota < 0.21, "v2 quota 0.2: still 1 thread: %s",
          v4_cpu_budget_describe(&b, line, sizeof line));

    fresh("ns");   /* a container: cgroup namespace root "/" */
    put("proc/self/cgroup", "0::/\n");
    put("sys/fs/cgroup/cpu.max", "400000 100000\n");
    v4_cpu_budget_at(root, 16, 16, &b);
    CHECK(b.threads == 4, "v2 namespace root quota 4: %s", v4_cpu_budget_describe(&b, line, sizeof line));
    v4_cpu_budget_at(root, 16, 2, &b);
    CHECK(b.threads == 2, "affinity 2 below quota 4: %s", v4_cpu_budget_describe(&b, line, sizeof line));

    fresh("v1");   /* cgroup v1 */
    put("proc/self/cgroup", "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n0::/\n");
    put("sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "300000\n");
    put("sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
    v4_cpu_budget_at(root, 8, 8, &b);
    CHECK(b.threads == 3 && strstr(b.quota_src, "cpu.cfs_quota_us"), "v1 quota 3: %s",
          v4_cpu_budget_describe(&b, line, sizeof line));
    put("sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "-1\n");
    v4_cpu_budget_at(root, 8, 8, &b);
    CHECK(b.threads == 8 && b.quota == 0, "v1 quota -1: none: %s", v4_cpu_budget_describe(&b, line, sizeof line));

    /* this machine: at least 1 thread, no more than online */
    v4_cpu_budget_get(&b);
    printf("this machine: %s\n", v4_cpu_budget_describe(&b, line, sizeof line));
    CHECK(b.threads >= 1 && b.threads <= b.online, "this machine: %s", line);
    TEST_DONE();
}
