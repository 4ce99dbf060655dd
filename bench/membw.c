/* membw.c - see membw.h.  Each thread sums 64-bit words of its own slice (the loop
 * vectorizes at -O2); the buffer is written once first so its pages are real. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "membw.h"

#include "cache/safetensors.h"

typedef struct {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
} slice;

static void *sum_slice(void *arg)
{
    slice *s = arg;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    size_t i = 0;
    for (; i + 4 <= s->n; i += 4) {
        a += s->p[i];
        b += s->p[i + 1];
        c += s->p[i + 2];
        d += s->p[i + 3];
    }
    for (; i < s->n; i++)
        a += s->p[i];
    s->sum = a + b + c + d;
    return NULL;
}

double v4_bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double v4_bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double v4_bench_read_bandwidth(size_t bytes, int threads, int runs)
{
    if (threads < 1)
        threads = 1;
    if (threads > 64)
        threads = 64;
    if (runs < 1 || runs > 64)
        runs = 5;
    size_t words = bytes / 8;
    uint64_t *buf = malloc(words * 8);
    if (!buf)
        return 0.0;
    for (size_t i = 0; i < words; i++)
        buf[i] = i;
    double gbs[64];
    uint64_t sink = 0;
    for (int r = 0; r < runs; r++) {
        pthread_t tid[64];
        slice sl[64];
        double t0 = v4_bench_now();
        for (int t = 0; t < threads; t++) {
            size_t a = words * (size_t)t / (size_t)threads, b = words * (size_t)(t + 1) / (size_t)threads;
            sl[t] = (slice){buf + a, b - a, 0};
            pthread_create(&tid[t], NULL, sum_slice, &sl[t]);
        }
        for (int t = 0; t < threads; t++) {
            pthread_join(tid[t], NULL);
            sink += sl[t].sum;
        }
        gbs[r] = (double)(words * 8) / (v4_bench_now() - t0) / 1e9;
    }
    free(buf);
    if (sink == 42)   /* keep the sums observable */
        fputc(' ', stderr);
    return v4_bench_median(gbs, runs);
}

void v4_bench_cpu_name(char *buf, size_t cap)
{
    snprintf(buf, cap, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "model name", 10)) {
            char *c = strchr(line, ':');
            if (c) {
                c++;
                while (*c == ' ')
                    c++;
                c[strcspn(c, "\n")] = 0;
                snprintf(buf, cap, "%s", c);
            }
            break;
        }
    }
    fclose(f);
}

void v4_bench_page_in(const v4_ckpt *ck)
{
    volatile unsigned char acc = 0;
    for (size_t i = 0; i < v4_ckpt_count(ck); i++) {
        const v4_tensor *t = v4_ckpt_tensor(ck, i);
        const unsigned char *p = t->data;
        for (uint64_t off = 0; off < t->nbytes; off += 4096)
            acc ^= p[off];
    }
    (void)acc;
}

int v4_bench_ensure_model(const char *bin, const char *models, const char *preset, const char *prog, char *dir,
                          size_t cap)
{
    snprintf(dir, cap, "%s/%s", models, preset);
    char cfg[4200], cmd[9000];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    struct stat st;
    if (stat(cfg, &st) == 0)
        return 0;
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && '%s' mkmodel --out '%s' --preset %s --seed 1 --force", models, bin,
             dir, preset);
    fprintf(stderr, "%s: generating %s model: %s\n", prog, preset, cmd);
    return system(cmd) == 0 ? 0 : -1;
}
