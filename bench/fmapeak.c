/* fmapeak.c - see fmapeak.h.  Twelve independent accumulators per thread hide the FMA
 * latency (4 cycles on current x86 cores, two FMA pipes); the inputs stay in
 * registers, so the rate is the arithmetic ceiling, not a memory figure.  The result
 * is stored through a volatile sink so the loop is not removed.
 * Ownership/threads: each worker owns its slot of the array main passes it. */
#include <pthread.h>

#include "bench/fmapeak.h"
#include "bench/membw.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define X86 1
#endif

#define CHAINS 12
#define ITERS 40000000L

typedef struct fma_job {
    int kind;              /* 2 AVX-512, 1 AVX2+FMA, 0 scalar */
    double seconds, macs;
    float sink;
} fma_job;

#if X86
__attribute__((target("avx512f"))) static double run512(float *sink)
{
    __m512 acc[CHAINS];
    const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < CHAINS; i++)
        acc[i] = _mm512_set1_ps((float)i);
    for (long it = 0; it < ITERS; it++)
        for (int i = 0; i < CHAINS; i++)
            acc[i] = _mm512_fmadd_ps(acc[i], a, b);
    __m512 s = acc[0];
    for (int i = 1; i < CHAINS; i++)
        s = _mm512_add_ps(s, acc[i]);
    *sink = _mm512_reduce_add_ps(s);
    return (double)ITERS * CHAINS * 16;
}

__attribute__((target("avx2,fma"))) static double run256(float *sink)
{
    __m256 acc[CHAINS];
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < CHAINS; i++)
        acc[i] = _mm256_set1_ps((float)i);
    for (long it = 0; it < ITERS; it++)
        for (int i = 0; i < CHAINS; i++)
            acc[i] = _mm256_fmadd_ps(acc[i], a, b);
    __m256 s = acc[0];
    for (int i = 1; i < CHAINS; i++)
        s = _mm256_add_ps(s, acc[i]);
    float v[8];
    _mm256_storeu_ps(v, s);
    *sink = v[0] + v[7];
    return (double)ITERS * CHAINS * 8;
}
#endif

static double run1(float *sink)
{
    float acc[CHAINS];
    for (int i = 0; i < CHAINS; i++)
        acc[i] = (float)i;
    for (long it = 0; it < ITERS / 16; it++)
        for (int i = 0; i < CHAINS; i++)
            acc[i] = acc[i] * 0.999999f + 1e-7f;
    float s = 0;
    for (int i = 0; i < CHAINS; i++)
        s += acc[i];
    *sink = s;
    return (double)(ITERS / 16) * CHAINS;
}

static void *worker(void *p)
{
    fma_job *j = p;
    double t0 = v4_bench_now();
#if X86
    j->macs = j->kind == 2 ? run512(&j->sink) : j->kind == 1 ? run256(&j->sink) : run1(&j->sink);
#else
    j->macs = run1(&j->sink);
#endif
    j->seconds = v4_bench_now() - t0;
    return NULL;
}

double v4_bench_fma_peak(int threads, int runs, const char **isa)
{
    int kind = 0;
#if X86
    __builtin_cpu_init();
    kind = __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    if (isa)
        *isa = kind == 2 ? "avx512" : kind == 1 ? "avx2" : "scalar";
    if (threads < 1)
        threads = 1;
    if (threads > 64)
        threads = 64;
    if (runs < 1)
        runs = 1;
    if (runs > 32)
        runs = 32;
    double rate[32];
    volatile float sink = 0;
    for (int r = 0; r < runs; r++) {
        fma_job jobs[64];
        pthread_t tid[64];
        for (int t = 0; t < threads; t++) {
            jobs[t] = (fma_job){kind, 0, 0, 0};
            pthread_create(&tid[t], NULL, worker, &jobs[t]);
        }
        double macs = 0, slowest = 0;
        for (int t = 0; t < threads; t++) {
            pthread_join(tid[t], NULL);
            macs += jobs[t].macs;
            slowest = jobs[t].seconds > slowest ? jobs[t].seconds : slowest;
            sink = sink + jobs[t].sink;
        }
        rate[r] = slowest > 0 ? macs / slowest : 0;
    }
    return v4_bench_median(rate, runs);
}
