/* cpu_budget.c - see cpu_budget.h. */
#define _GNU_SOURCE
#include "cpu_budget.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The first line of a file into buf; 0 or -1. */
static int read_line(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    const int ok = fgets(buf, (int)cap, f) != NULL;
    fclose(f);
    return ok ? 0 : -1;
}

static void take(v4_cpu_budget *b, double cpus, const char *src)
{
    if (cpus > 0 && (b->quota == 0 || cpus < b->quota)) {
        b->quota = cpus;
        size_t n = strlen(src);
        if (n >= sizeof b->quota_src)
            n = sizeof b->quota_src - 1;
        memcpy(b->quota_src, src, n);
        b->quota_src[n] = 0;
    }
}

/* cgroup v2: cpu.max ("max P" or "Q P") at dir and each parent below base. */
static void v2_walk(v4_cpu_budget *b, const char *base, const char *cg)
{
    char rel[1024], path[1400], line[128];
    snprintf(rel, sizeof rel, "%s", cg);
    for (;;) {
        const int k = snprintf(path, sizeof path, "%s%s%s/cpu.max", base, rel[0] == '/' ? "" : "/",
                               strcmp(rel, "/") ? rel : "");
        if (k > 0 && k < (int)sizeof path && !read_line(path, line, sizeof line) && strncmp(line, "max", 3)) {
            long long q = 0, p = 0;
            if (sscanf(line, "%lld %lld", &q, &p) == 2 && q > 0 && p > 0)
                take(b, (double)q / (double)p, path);
        }
        char *slash = strrchr(rel, '/');
        if (!slash || (slash == rel && !rel[1]))
            break;
        if (slash == rel)
            rel[1] = 0;   /* the namespace's root */
        else
            *slash = 0;
    }
}

/* cgroup v1: cpu.cfs_quota_us / cpu.cfs_period_us under the cpu controller's mount,
 * at the process's path and at the mount's root (a container sees its own there). */
static void v1_read(v4_cpu_budget *b, const char *base, const char *cg)
{
    static const char *const mounts[] = {"cpu,cpuacct", "cpu", "cpuacct,cpu"};
    for (size_t m = 0; m < sizeof mounts / sizeof mounts[0]; m++)
        for (int at_root = 0; at_root < 2; at_root++) {
            char dir[1400], path[1500], line[64];
            snprintf(dir, sizeof dir, "%s/%s%s", base, mounts[m], at_root || !strcmp(cg, "/") ? "" : cg);
            long long q = 0, p = 0;
            snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", dir);
            if (read_line(path, line, sizeof line) || sscanf(line, "%lld", &q) != 1 || q <= 0)
                continue;
            char ppath[1500];
            snprintf(ppath, sizeof ppath, "%s/cpu.cfs_period_us", dir);
            if (read_line(ppath, line, sizeof line) || sscanf(line, "%lld", &p) != 1 || p <= 0)
                continue;
            take(b, (double)q / (double)p, path);
        }
}

void v4_cpu_budget_at(const char *root, int online, int affinity, v4_cpu_budget *b)
{
    memset(b, 0, sizeof *b);
    b->online = online > 0 ? online : 1;
    b->affinity = affinity;
    char path[1200], base[1200], line[1100];
    snprintf(path, sizeof path, "%s/proc/self/cgroup", root);
    snprintf(base, sizeof base, "%s/sys/fs/cgroup", root);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c1 = *c2 = 0;
        const char *ctrl = c1 + 1, *cg = c2 + 1;
        if (!strcmp(line, "0") && !*ctrl)
            v2_walk(b, base, cg);                          /* "0::/path" */
        else {
            char list[256];
            snprintf(list, sizeof list, ",%s,", ctrl);
            if (strstr(list, ",cpu,"))
                v1_read(b, base, cg);
        }
    }
    if (f)
        fclose(f);
    int n = affinity > 0 && affinity < b->online ? affinity : b->online;
    if (b->quota > 0 && (int)b->quota < n)
        n = (int)b->quota;
    b->threads = n > 0 ? n : 1;
}

void v4_cpu_budget_get(v4_cpu_budget *b)
{
    const long on = sysconf(_SC_NPROCESSORS_ONLN);
    int aff = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        aff = CPU_COUNT(&set);
    v4_cpu_budget_at("", on > 0 ? (int)on : 1, aff, b);
}

const char *v4_cpu_budget_describe(const v4_cpu_budget *b, char *buf, size_t cap)
{
    char q[360] = "no cgroup CPU quota";
    if (b->quota > 0)
        snprintf(q, sizeof q, "cgroup quota %.2f CPUs from %s", b->quota, b->quota_src);
    char a[48] = "affinity unknown";
    if (b->affinity > 0)
        snprintf(a, sizeof a, "%d in the affinity mask", b->affinity);
    snprintf(buf, cap, "%d thread%s (%d CPUs online, %s, %s)", b->threads, b->threads == 1 ? "" : "s", b->online, a,
             q);
    return buf;
}
