/* mkmodel_gen.c - the contents of a synthetic checkpoint's tensors, and the writing
 * of its shards (see mkmodel.h).
 *
 * Determinism: every tensor has its own xoshiro256** stream seeded from splitmix64 of
 * (--seed, FNV-1a of the tensor's base name), and per-block choices (FP8 block
 * classes, FP4 scale jitter) are stateless hashes of (base seed, block index), so a
 * weight and its .scale agree without shared state and the output depends only on
 * the preset and the seed - not on the number of threads or the order shards are
 * written in.  "Normal" samples are Irwin-Hall sums of four 16-bit uniforms (integer
 * arithmetic and one float multiply: identical on every IEEE machine); the FP8 code
 * tables use a normal quantile function evaluated at 256 points and rounded to e4m3.
 *
 * Weight initialization (roughly the statistics of a trained net, so that logits
 * are finite and vary with the input; fan_in = the matrix's input width):
 *   FP8 e4m3 matrices (wq_a, wq_b, wkv, wo_a, wo_b, shared experts, indexer wq_b):
 *     effective std 1/sqrt(fan_in).  Per 128x128 block a class c in {0,1,2} (hash);
 *     the E8M0 scale is 2^(e+c) and the block's codes come from a table of normal
 *     quantiles with std s0/2^c, s0 = std/2^e in (64, 128]: the scale bytes vary
 *     from block to block but every block has the same effective std, and codes use
 *     the e4m3 range up to ~340 (never saturating, NaN codes never produced).
 *   FP4 e2m1 routed experts (I8, low nibble = even input column): uniformly random
 *     codes (rms 2.93); per row and 32 inputs an E8M0 scale 2^(e+j), j in
 *     {-1,0,0,+1} (hash), e chosen so that the effective std is ~1/sqrt(fan_in).
 *   BF16: embed N(0,1); head N(0,1/sqrt(dim)); gate, compressor wkv/wgate,
 *     indexer weights_proj N(0,1/sqrt(dim)); every norm weight 1 + N(0,0.05).
 *   F32: hc_{attn,ffn}_fn and hc_head_fn N(0, 0.5/sqrt(hc_mult*dim)) (mix logits of
 *     std ~0.5); hc_{attn,ffn}_base N(0,0.1) plus +2 on the diagonal of the 4x4
 *     comb part (Sinkhorn then gives a diagonal-heavy, not uniform, mixing matrix);
 *     hc_*_scale 1 + N(0,0.1); hc_head_base N(0,0.1); attn_sink N(0,0.1);
 *     compressor ape N(0,0.1); gate.bias N(0,0.02).
 *   I64 tid2eid (layers < num_hash_layers): n_act distinct random ids per row.
 *
 * Writing: each shard is streamed through cache/st_writer (header first, data in
 * 4 MiB chunks, ".NAME.tmp" + fsync + rename).  Shards are independent files, so up to
 * `threads` threads write different shards at once (largest first; a V4-Flash layer
 * shard is ~3.6 GB); each thread owns its chunk buffer and writer, and only the
 * progress counter and the job cursor are shared (under a mutex).
 *
 * Owner: the mkmodel work package.  Thread: v4mk_write_shards from one thread; it
 * starts and joins its own workers.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/expert_synth.h"
#include "cache/st_writer.h"
#include "kernels/codec.h"
#include "mkmodel.h"

/* ------------------------------------------------------------------ PRNG */

/* The seeding, the byte fill and the FP4 expert contents are cache/expert_synth.h's, so
 * the synthetic expert source generates the very bytes written here. */
typedef v4_rng rng;
#define rng_next v4_rng_next

/* Approximately N(0,1): Irwin-Hall sum of four 16-bit uniforms (bounded at 3.46). */
static inline float rng_normal(rng *r)
{
    uint64_t x = rng_next(r);
    int32_t s = (int32_t)(x & 0xffff) + (int32_t)((x >> 16) & 0xffff) +
                (int32_t)((x >> 32) & 0xffff) + (int32_t)(x >> 48);
    return (float)(s - 131070) * 2.6429e-05f;   /* 1 / sqrt((65536^2 - 1) / 3) */
}

/* Uniform in [0, n) for n < 2^32 (multiply-shift; bias < 2^-32). */
static inline uint32_t rng_below(rng *r, uint32_t n)
{
    return (uint32_t)(((rng_next(r) >> 32) * (uint64_t)n) >> 32);
}

/* ------------------------------------------------------------- number helpers */

/* Inverse of the standard normal CDF (Acklam's rational approximation, |rel err|
 * < 1.2e-9), for 0 < p < 1. */
static double norm_quantile(double p)
{
    static const double a[6] = {-3.969683028665376e+01, 2.209460984245205e+02,
                                -2.759285104469687e+02, 1.383577518672690e+02,
                                -3.066479806614716e+01, 2.506628277459239e+00};
    static const double b[5] = {-5.447609879822406e+01, 1.615858368580409e+02,
                                -1.556989798598866e+02, 6.680131188771972e+01,
                                -1.328068155288572e+01};
    static const double c[6] = {-7.784894002430293e-03, -3.223964580411365e-01,
                                -2.400758277161838e+00, -2.549732539343734e+00,
                                4.374664141464968e+00, 2.938163982698783e+00};
    static const double d[4] = {7.784695709041462e-03, 3.224671290700398e-01,
                                2.445134137142996e+00, 3.754408661907416e+00};
    if (p < 0.02425 || p > 1 - 0.02425) {
        double q = sqrt(-2 * log(p < 0.5 ? p : 1 - p));
        double x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
                   ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
        return p < 0.5 ? x : -x;
    }
    double q = p - 0.5, r = q * q;
    return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
           (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

/* ceil(log2(x)) for x > 0, exact (frexp). */
static int ceil_log2(double x)
{
    int k;
    double m = frexp(x, &k);          /* x = m * 2^k, m in [0.5, 1) */
    return m == 0.5 ? k - 1 : k;
}

/* FP8 blocks: scale exponent of class 0, and the code tables of the 3 classes. */
static int fp8_exp(double std) { return ceil_log2(std / 128.0); }

#define FP8_CLASSES 3
static void fp8_luts(double std, uint8_t lut[FP8_CLASSES][256])
{
    double s0 = std / ldexp(1.0, fp8_exp(std));          /* (64, 128] */
    for (int c = 0; c < FP8_CLASSES; c++)
        for (int u = 128; u < 256; u++) {
            double z = norm_quantile((u + 0.5) / 256.0);  /* > 0 */
            uint8_t b = v4_e4m3_encode((float)(ldexp(s0, -c) * z));
            lut[c][u] = b;
            lut[c][255 - u] = (uint8_t)(b | 0x80);
        }
}

static int fp8_block_class(uint64_t seed, int64_t bi, int64_t bj)
{
    return (int)(v4_synth_mix64(seed, ((uint64_t)bi << 32) ^ (uint64_t)bj) % FP8_CLASSES);
}

/* ------------------------------------------------------------------ progress */

#define CHUNK_BYTES (4u << 20)
#define PROGRESS_MIN_BYTES (64ull << 20)

/* Shared by the writer threads: bytes done (under mu), the next 5% mark to report
 * (> 100 = silent). */
typedef struct progress {
    pthread_mutex_t mu;
    uint64_t done, total;
    int next_pct;
    struct timespec t0;
} progress;

double v4mk_seconds_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + 1e-9 * (double)(t.tv_nsec - t0->tv_nsec);
}

static void progress_add(progress *pg, uint64_t n)
{
    pthread_mutex_lock(&pg->mu);
    pg->done += n;
    if (pg->next_pct <= 100 && pg->total) {
        int pct = (int)(pg->done * 100 / pg->total);
        if (pct >= pg->next_pct) {
            double s = v4mk_seconds_since(&pg->t0);
            fprintf(stderr, "mkmodel: %3d%%  %.2f / %.2f GB  %.1f s  (%.2f GB/s)\n", pct, pg->done / 1e9,
                    pg->total / 1e9, s, s > 0 ? pg->done / 1e9 / s : 0.0);
            pg->next_pct = (pct / 5 + 1) * 5;
        }
    }
    pthread_mutex_unlock(&pg->mu);
}

/* ----------------------------------------------------------- tensor contents */

typedef struct gen {
    uint64_t seed;
    unsigned char *buf;         /* CHUNK_BYTES (or one row if larger) */
    size_t cap;
    v4_stw *w;
    progress *pg;
    const int *stop;            /* another thread failed: give up at the next tensor */
} gen;

static int emit(gen *g, size_t n, v4_error *err)
{
    if (v4_stw_write(g->w, g->buf, n, err))
        return -1;
    progress_add(g->pg, n);
    return 0;
}

static void put_f32(unsigned char *p, float f)
{
    uint32_t u = v4_f32_bits(f);
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(u >> (8 * i));
}

static void put_bf16(unsigned char *p, float f)
{
    uint16_t u = v4_bf16_bits(f);
    p[0] = (unsigned char)u;
    p[1] = (unsigned char)(u >> 8);
}

static float hc_base_value(const v4mk_tensor *t, rng *r, int64_t i)
{
    int hc = t->aux;
    float v = (float)t->std * rng_normal(r);
    int64_t j = i - 2 * hc;         /* index inside the hc x hc comb part */
    if (j >= 0 && j / hc == j % hc)
        v += (float)t->mean;
    return v;
}

/* V4MK_NORMAL and V4MK_HC_BASE: element-wise BF16 / F32. */
static int gen_elementwise(gen *g, const v4mk_tensor *t, rng *r, v4_error *err)
{
    size_t es = v4_stw_dtype_size(t->dt);
    uint64_t total = v4mk_tensor_bytes(t) / es, i = 0;
    size_t per = g->cap / es;
    while (i < total) {
        size_t n = total - i < per ? (size_t)(total - i) : per;
        for (size_t k = 0; k < n; k++) {
            float v = t->kind == V4MK_HC_BASE ? hc_base_value(t, r, (int64_t)(i + k))
                                           : (float)t->mean + (float)t->std * rng_normal(r);
            if (es == 2)
                put_bf16(g->buf + 2 * k, v);
            else
                put_f32(g->buf + 4 * k, v);
        }
        if (emit(g, n * es, err))
            return -1;
        i += n;
    }
    return 0;
}

/* Row-major [rows][cols] of one-byte elements, whole rows per chunk. */
static int gen_rows(gen *g, const v4mk_tensor *t, rng *r, const uint8_t lut[FP8_CLASSES][256],
                    uint64_t seed, v4_error *err)
{
    int64_t rows = t->shape[0], cols = t->shape[1];
    int64_t per = (int64_t)g->cap / (cols ? cols : 1);
    for (int64_t r0 = 0; r0 < rows; r0 += per) {
        int64_t nr = rows - r0 < per ? rows - r0 : per;
        for (int64_t i = 0; i < nr; i++) {
            unsigned char *row = g->buf + i * cols;
            if (!lut) {
                v4_synth_fp4_weight_rows(r, 1, cols, row);
                continue;
            }
            for (int64_t j0 = 0; j0 < cols; j0 += 128) {
                int cls = fp8_block_class(seed, (r0 + i) / 128, j0 / 128);
                int64_t n = cols - j0 < 128 ? cols - j0 : 128;
                v4_synth_fill_bytes(row + j0, (size_t)n, r, lut[cls]);
            }
        }
        if (emit(g, (size_t)(nr * cols), err))
            return -1;
    }
    return 0;
}

/* E8M0 scale grids: byte(i, j) from the stateless block choices. */
static int gen_scales(gen *g, const v4mk_tensor *t, uint64_t seed, v4_error *err)
{
    int64_t rows = t->shape[0], cols = t->shape[1];
    int64_t per = (int64_t)g->cap / (cols ? cols : 1);
    int e = fp8_exp(t->std);
    for (int64_t r0 = 0; r0 < rows; r0 += per) {
        int64_t nr = rows - r0 < per ? rows - r0 : per;
        if (t->kind == V4MK_FP4_S)
            v4_synth_fp4_scale_rows(seed, t->std, r0, nr, cols, g->buf);
        else
            for (int64_t i = 0; i < nr; i++)
                for (int64_t j = 0; j < cols; j++)
                    g->buf[i * cols + j] = v4_synth_e8m0(e + fp8_block_class(seed, r0 + i, j));
        if (emit(g, (size_t)(nr * cols), err))
            return -1;
    }
    return 0;
}

static void put_i64(unsigned char *p, int64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)((uint64_t)v >> (8 * i));
}

/* One row of tid2eid: k distinct expert ids. */
static void tid2eid_row(unsigned char *p, int k, int n_experts, rng *r)
{
    int ids[64];
    for (int a = 0; a < k; a++) {
        int id, dup;
        do {
            id = (int)rng_below(r, (uint32_t)n_experts);
            dup = 0;
            for (int b = 0; b < a; b++)
                dup |= ids[b] == id;
        } while (dup);
        ids[a] = id;
        put_i64(p + 8 * a, id);
    }
}

static int gen_tid2eid(gen *g, const v4mk_tensor *t, rng *r, v4_error *err)
{
    int64_t rows = t->shape[0];
    int k = (int)t->shape[1];
    if (k > 64 || k > t->aux)
        return v4_err_set(err, V4_ERR_CONFIG, t->name, "cannot pick %d distinct of %d experts",
                          k, t->aux);
    int64_t per = (int64_t)g->cap / (8 * k);
    for (int64_t r0 = 0; r0 < rows; r0 += per) {
        int64_t nr = rows - r0 < per ? rows - r0 : per;
        for (int64_t i = 0; i < nr; i++)
            tid2eid_row(g->buf + i * 8 * k, k, t->aux, r);
        if (emit(g, (size_t)(nr * 8 * k), err))
            return -1;
    }
    return 0;
}

static int gen_tensor(gen *g, const v4mk_tensor *t, v4_error *err)
{
    uint64_t seed = v4_synth_tensor_seed(g->seed, t->base);
    rng r;
    v4_synth_stream(&r, seed, t->name);
    switch (t->kind) {
    case V4MK_NORMAL:
    case V4MK_HC_BASE:
        return gen_elementwise(g, t, &r, err);
    case V4MK_FP8_W: {
        uint8_t lut[FP8_CLASSES][256];
        fp8_luts(t->std, lut);
        return gen_rows(g, t, &r, lut, seed, err);
    }
    case V4MK_FP4_W:
        return gen_rows(g, t, &r, NULL, seed, err);
    case V4MK_FP8_S:
    case V4MK_FP4_S:
        return gen_scales(g, t, seed, err);
    case V4MK_TID2EID:
        return gen_tid2eid(g, t, &r, err);
    }
    return v4_err_set(err, V4_ERR_INTERNAL, t->name, "unknown init kind");
}

/* Largest row of one-byte or element-wise data a chunk must hold. */
static size_t max_row_bytes(const v4mk_plan *p)
{
    size_t m = 0;
    for (int i = 0; i < p->n; i++)
        for (size_t k = 0; k < p->s[i].n; k++) {
            const v4mk_tensor *t = &p->s[i].t[k];
            size_t rb = (size_t)(t->ndim == 2 ? t->shape[1] : 1) * v4_stw_dtype_size(t->dt);
            if (rb > m)
                m = rb;
        }
    return m;
}

/* ------------------------------------------------------------------- writing */

static int write_shard(gen *g, const v4mk_shard *s, const char *dir, int sync, v4_error *err)
{
    char path[4096];
    if (v4mk_join_path(path, sizeof path, dir, s->file))
        return v4_err_set(err, V4_ERR_INVALID, dir, "output path too long");
    v4_stw *w = v4mk_shard_writer(s, err);
    if (!w)
        return -1;
    v4_stw_set_sync(w, sync);
    g->w = w;
    int rc = v4_stw_begin(w, path, err);
    for (size_t i = 0; i < s->n && !rc; i++) {
        if (__atomic_load_n(g->stop, __ATOMIC_RELAXED))
            rc = v4_err_set(err, V4_ERR_INTERNAL, s->file, "stopped: another shard failed");
        else
            rc = gen_tensor(g, &s->t[i], err);
    }
    if (!rc)
        rc = v4_stw_finish(w, err);
    g->w = NULL;
    v4_stw_free(w);
    return rc;
}


/* ------------------------------------------------------------ thread pool */

typedef struct pool {
    const v4mk_plan *p;
    const char *dir;
    uint64_t seed;
    int sync;
    int *order;                 /* shard indices, largest first */
    int next;                   /* next entry of order to take (under pg.mu) */
    int stop;                   /* atomic: set on the first failure */
    size_t cap;
    progress pg;
    v4_error err;               /* the first failure (under pg.mu) */
    int failed;
} pool;

static void *writer_main(void *arg)
{
    pool *pl = arg;
    gen g = {pl->seed, malloc(pl->cap), pl->cap, NULL, &pl->pg, &pl->stop};
    v4_error err = {0};
    int rc = g.buf ? 0 : v4_err_set(&err, V4_ERR_NOMEM, "mkmodel", "out of memory (chunk buffer)");
    while (!rc) {
        pthread_mutex_lock(&pl->pg.mu);
        int k = pl->next < pl->p->n && !__atomic_load_n(&pl->stop, __ATOMIC_RELAXED) ? pl->order[pl->next++] : -1;
        pthread_mutex_unlock(&pl->pg.mu);
        if (k < 0)
            break;
        const v4mk_shard *s = &pl->p->s[k];
        rc = write_shard(&g, s, pl->dir, pl->sync, &err);
        if (!rc)
            progress_add(&pl->pg, s->file_bytes - s->data_bytes);   /* the header */
    }
    free(g.buf);
    if (rc) {
        __atomic_store_n(&pl->stop, 1, __ATOMIC_RELAXED);
        pthread_mutex_lock(&pl->pg.mu);
        /* Keep the root cause, not a "stopped" note of another thread. */
        if (!pl->failed || (pl->err.code == V4_ERR_INTERNAL && err.code != V4_ERR_INTERNAL))
            pl->err = err;
        pl->failed = 1;
        pthread_mutex_unlock(&pl->pg.mu);
    }
    return NULL;
}

int v4mk_write_shards(const v4mk_plan *p, const char *dir, uint64_t seed, int sync, int threads,
                      v4_error *err)
{
    pool pl;
    memset(&pl, 0, sizeof pl);
    pl.p = p;
    pl.dir = dir;
    pl.seed = seed;
    pl.sync = sync;
    size_t cap = max_row_bytes(p);
    pl.cap = cap > CHUNK_BYTES ? cap : CHUNK_BYTES;
    pl.pg.total = p->total_file_bytes;
    pl.pg.next_pct = p->total_file_bytes >= PROGRESS_MIN_BYTES ? 5 : 101;
    clock_gettime(CLOCK_MONOTONIC, &pl.pg.t0);
    if (!(pl.order = malloc(sizeof(int) * (size_t)(p->n ? p->n : 1))))
        return v4_err_set(err, V4_ERR_NOMEM, "mkmodel", "out of memory");
    for (int i = 0; i < p->n; i++) {   /* insertion sort, largest file first, stable */
        int j = i;
        while (j > 0 && p->s[pl.order[j - 1]].file_bytes < p->s[i].file_bytes) {
            pl.order[j] = pl.order[j - 1];
            j--;
        }
        pl.order[j] = i;
    }
    if (pthread_mutex_init(&pl.pg.mu, NULL)) {
        free(pl.order);
        return v4_err_set(err, V4_ERR_INTERNAL, "mkmodel", "pthread_mutex_init failed");
    }
    if (threads < 1)
        threads = 1;
    if (threads > p->n)
        threads = p->n > 0 ? p->n : 1;
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    int started = 0;
    if (tid)
        for (; started < threads - 1; started++)
            if (pthread_create(&tid[started], NULL, writer_main, &pl))
                break;              /* fewer threads: the rest is done by those running */
    writer_main(&pl);               /* this thread is a writer too */
    for (int i = 0; i < started; i++)
        pthread_join(tid[i], NULL);
    free(tid);
    pthread_mutex_destroy(&pl.pg.mu);
    free(pl.order);
    if (pl.failed) {
        *err = pl.err;
        return -1;
    }
    return 0;
}
