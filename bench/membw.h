/* membw.h - measured memory read bandwidth of this machine (STREAM-like "sum"
 * kernel over a buffer much larger than the caches), used as the 100% line of
 * every benchmark table.  Thread: call from one thread; it spawns its own workers. */
#ifndef V4_BENCH_MEMBW_H
#define V4_BENCH_MEMBW_H

#include <stddef.h>

/* Median GB/s (1e9 bytes/s) of `runs` passes reading `bytes` with `threads` threads. */
double v4_bench_read_bandwidth(size_t bytes, int threads, int runs);
/* "model name" of the first CPU in /proc/cpuinfo (or "unknown"), into buf. */
void v4_bench_cpu_name(char *buf, size_t cap);
double v4_bench_now(void);   /* monotonic seconds */
double v4_bench_median(double *v, int n);   /* sorts v */
/* Read one byte per page of every tensor of ck (cache/safetensors.h) so that timed
 * runs do not fault pages in. */
struct v4_ckpt;
void v4_bench_page_in(const struct v4_ckpt *ck);
/* dir := models/preset; generates it with `bin mkmodel --preset preset --seed 1` unless
 * it has a config.json (prog names the bench in the notice on stderr).  0 or -1. */
int v4_bench_ensure_model(const char *bin, const char *models, const char *preset, const char *prog, char *dir,
                          size_t cap);

#endif
