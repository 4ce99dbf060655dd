/* fmapeak.h - measured FP32 multiply-add rate of this machine's cores (the compute
 * ceiling of a roofline next to membw.h's read bandwidth): independent fused
 * multiply-add chains in registers, the widest vectors the CPU has (AVX-512, else
 * AVX2+FMA, else scalar), one chain set per thread.
 * Thread: call from one thread; it spawns its own workers. */
#ifndef V4_BENCH_FMAPEAK_H
#define V4_BENCH_FMAPEAK_H

/* Median multiply-adds per second (all threads together) of `runs` passes of about
 * 0.2 s each with `threads` threads; *isa (may be NULL) = the vector width used. */
double v4_bench_fma_peak(int threads, int runs, const char **isa);

#endif
