/* bench_pack.c - read throughput of the expert sources (cache/expert_pack.h): the pack
 * through O_DIRECT, the pack through buffered pread, and the safetensors checkpoint,
 * with 1 and 4 reader threads, cold and warm.
 *
 * "cold" = the files' page cache dropped first with posix_fadvise(POSIX_FADV_DONTNEED)
 * on experts.bin or on every *.safetensors shard (per file: no global drop_caches on a
 * shared machine; clean pages are dropped reliably, and the safetensors source unmaps
 * what it copied so its pages can go).  O_DIRECT bypasses the page cache, so it is
 * always device speed.  "warm" = a second pass right after a buffered one.  Each row
 * reads every block (or --blocks N) once in a fixed random order; threads share an
 * atomic cursor.  Prints one table row per case: blocks, GB, seconds, MB/s and the
 * mean latency of one read (from the source's counters).
 *
 * Usage: bench_pack --model DIR --pack PACKDIR [--blocks N] [--threads "1 4"]
 * Ownership: everything is local to main.  Thread: main + the reader threads.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache/expert_block.h"
#include "cache/expert_pack.h"

typedef struct job {
    v4_xsource *s;
    const int *order;
    int n;
    atomic_int next;
    atomic_int failed;
} job;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *worker(void *arg)
{
    job *j = arg;
    void *buf = aligned_alloc(V4_XBLOCK_ALIGN, j->s->block_bytes);
    int i;
    while ((i = atomic_fetch_add(&j->next, 1)) < j->n) {
        int b = j->order[i];
        v4_error err = {0};
        if (v4_xsource_read(j->s, b / j->s->n_experts, b % j->s->n_experts, buf, &err)) {
            if (!atomic_fetch_add(&j->failed, 1))
                fprintf(stderr, "bench_pack: %s\n", err.msg);
        }
    }
    free(buf);
    return NULL;
}

static void drop_file(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

static void drop_dir(const char *dir, const char *suffix)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    size_t sl = strlen(suffix);
    while ((de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (n >= sl && !strcmp(de->d_name + n - sl, suffix)) {
            char p[8192];
            snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
            drop_file(p);
        }
    }
    closedir(d);
}

static void run_case(const char *label, v4_xsource *s, const int *order, int n, int threads, const char *state)
{
    job j = {s, order, n, 0, 0};
    v4_xsource_counters c0, c1;
    v4_xsource_get_counters(s, &c0);
    pthread_t th[64];
    double t0 = now_s();
    for (int t = 0; t < threads; t++)
        pthread_create(&th[t], NULL, worker, &j);
    for (int t = 0; t < threads; t++)
        pthread_join(th[t], NULL);
    double dt = now_s() - t0;
    v4_xsource_get_counters(s, &c1);
    uint64_t reads = c1.reads - c0.reads, bytes = c1.bytes - c0.bytes;
    printf("%-22s %7d %-5s %7" PRIu64 " %8.2f %8.2f %9.0f %10.2f%s\n", label, threads, state, reads,
           (double)bytes / 1e9, dt, dt > 0 ? (double)bytes / dt / 1e6 : 0,
           reads ? (double)(c1.read_ns - c0.read_ns) / (double)reads / 1e6 : 0, atomic_load(&j.failed) ? "  ERRORS" : "");
    fflush(stdout);
}

int main(int argc, char **argv)
{
    const char *model = NULL, *pack = NULL, *threads_s = "1 4";
    int limit = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model"))
            model = argv[i + 1];
        else if (!strcmp(argv[i], "--pack"))
            pack = argv[i + 1];
        else if (!strcmp(argv[i], "--blocks"))
            limit = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads"))
            threads_s = argv[i + 1];
    }
    if (!model || !pack) {
        fprintf(stderr, "usage: bench_pack --model DIR --pack PACKDIR [--blocks N] [--threads \"1 4\"]\n");
        return 2;
    }
    int tlist[8], nt = 0;
    for (const char *p = threads_s; *p && nt < 8;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p)
            break;
        if (v >= 1 && v <= 64)
            tlist[nt++] = (int)v;
        p = end;
    }
    v4_error err = {0};
    v4_xsource *pd = v4_pack_source_open(pack, NULL, V4_PACK_IO_AUTO, &err);
    v4_xsource *pb = pd ? v4_pack_source_open(pack, NULL, V4_PACK_IO_BUFFERED, &err) : NULL;
    v4_xsource *st = pb ? v4_st_source_open(model, &err) : NULL;
    if (!st) {
        fprintf(stderr, "bench_pack: %s: %s\n", err.where, err.msg);
        return 1;
    }
    v4_xsource_counters k;
    v4_xsource_get_counters(pd, &k);
    int total = pd->n_layers * pd->n_experts;
    int n = limit > 0 && limit < total ? limit : total;
    int *order = malloc(sizeof *order * (size_t)total);
    for (int i = 0; i < total; i++)
        order[i] = i;
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int i = total - 1; i > 0; i--) {   /* Fisher-Yates with a fixed seed */
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        int r = (int)(x % (uint64_t)(i + 1));
        int t = order[i];
        order[i] = order[r];
        order[r] = t;
    }
    char data[8192];
    snprintf(data, sizeof data, "%s/experts.bin", pack);
    printf("pack %s: %d layers x %d experts, %zu bytes per block; reading %d blocks (%.2f GB) in random order%s\n",
           pack, pd->n_layers, pd->n_experts, pd->block_bytes, n, (double)n * (double)pd->block_bytes / 1e9,
           k.direct_refused ? "; O_DIRECT refused by the filesystem (auto = buffered)" : "");
    printf("%-22s %7s %-5s %7s %8s %8s %9s %10s\n", "source", "threads", "cache", "blocks", "GB", "s", "MB/s",
           "ms/read");
    for (int t = 0; t < nt; t++) {
        drop_file(data);
        run_case("pack O_DIRECT", pd, order, n, tlist[t], "cold");
    }
    for (int t = 0; t < nt; t++) {
        drop_file(data);
        run_case("pack buffered", pb, order, n, tlist[t], "cold");
        run_case("pack buffered", pb, order, n, tlist[t], "warm");
    }
    drop_file(data);
    for (int t = 0; t < nt; t++) {
        drop_dir(model, ".safetensors");
        run_case("safetensors (mmap)", st, order, n, tlist[t], "cold");
        run_case("safetensors (mmap)", st, order, n, tlist[t], "warm");
    }
    drop_dir(model, ".safetensors");
    free(order);
    v4_xsource_close(pd);
    v4_xsource_close(pb);
    v4_xsource_close(st);
    return 0;
}
