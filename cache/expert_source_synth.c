/* expert_source_synth.c - expert source "synthetic": routed experts generated on
 * demand (expert_synth.h declares v4_synth_source_open).
 *
 * Design: read() runs v4_synth_expert_block into the caller's block; the state is the
 * config, the seed, the rate and atomic counters, so any number of I/O threads read at
 * once with nothing shared but the counters.  The throttle is per read and stateless:
 * after generating, the thread sleeps until block_bytes / rate seconds have passed
 * since the read began (clock_nanosleep, restarted on EINTR).  The counters report
 * every read as buffered (v4_xsource_get_counters).
 *
 * Ownership: the source owns itself (v4_xsource_close).  Thread: read() from any
 * number of threads; close once.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "expert_pack.h"
#include "expert_pack_util.h"
#include "expert_synth.h"

typedef struct synth_src {
    v4_xsource base;
    v4_config cfg;
    v4_xblock_layout lo;
    uint64_t seed;
    uint64_t min_ns;            /* per read (0 = unthrottled) */
    atomic_uint_fast64_t reads, bytes, read_ns, errors;
} synth_src;

static void sleep_until(uint64_t t_ns)
{
    struct timespec ts = {.tv_sec = (time_t)(t_ns / 1000000000ull), .tv_nsec = (long)(t_ns % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static int synth_read(v4_xsource *xs, int l, int e, void *dst, v4_error *err)
{
    synth_src *s = (synth_src *)xs;
    if (!dst || (uintptr_t)dst % V4_XBLOCK_ALIGN) {
        atomic_fetch_add(&s->errors, 1);
        return v4_err_set(err, V4_ERR_INVALID, "synthetic experts", "layer %d expert %d: destination buffer not %d-byte aligned",
                          l, e, V4_XBLOCK_ALIGN);
    }
    const uint64_t t0 = v4_xp_now_ns();
    if (v4_synth_expert_block(&s->cfg, &s->lo, s->seed, l, e, dst, err)) {
        atomic_fetch_add(&s->errors, 1);
        return -1;
    }
    if (s->min_ns)
        sleep_until(t0 + s->min_ns);
    atomic_fetch_add(&s->reads, 1);
    atomic_fetch_add(&s->bytes, s->lo.bytes);
    atomic_fetch_add(&s->read_ns, v4_xp_now_ns() - t0);
    return 0;
}

static void synth_close(v4_xsource *xs)
{
    free(xs);
}

static const v4_xsource_ops synth_ops = {.read = synth_read, .close = synth_close};

v4_xsource *v4_synth_source_open(const v4_config *cfg, uint64_t seed, double bytes_per_s, v4_error *err)
{
    if (!cfg->expert_fp4) {
        v4_err_set(err, V4_ERR_CONFIG, "synthetic experts",
                   "the config's routed experts are FP8; synthetic experts are FP4 only (as mkmodel writes them)");
        return NULL;
    }
    if (!(bytes_per_s >= 0)) {
        v4_err_set(err, V4_ERR_INVALID, "synthetic experts", "rate %g bytes/s is not >= 0", bytes_per_s);
        return NULL;
    }
    synth_src *s = calloc(1, sizeof *s);
    if (!s) {
        v4_err_set(err, V4_ERR_NOMEM, "synthetic experts", "out of memory");
        return NULL;
    }
    s->cfg = *cfg;
    s->seed = seed;
    v4_xblock_layout_of(cfg, &s->lo);
    if (bytes_per_s > 0) {
        const double ns = (double)s->lo.bytes / bytes_per_s * 1e9;
        s->min_ns = ns > 1e12 ? (uint64_t)1e12 : (uint64_t)ns;     /* at most 1000 s per block */
    }
    s->base.ops = &synth_ops;
    s->base.block_bytes = s->lo.bytes;
    s->base.n_layers = cfg->n_layers;
    s->base.n_experts = cfg->n_routed_experts;
    s->base.kind = "synthetic";
    return &s->base;
}

double v4_synth_rate_from_env(v4_error *err)
{
    const char *v = getenv("V4_SYNTH_EXPERT_MBPS");
    if (!v || !*v)
        return 0;
    char *end;
    errno = 0;
    double mb = strtod(v, &end);
    if (errno || end == v || *end || !(mb > 0) || mb > 1e9) {
        v4_err_set(err, V4_ERR_CONFIG, "V4_SYNTH_EXPERT_MBPS", "'%s' is not a positive rate in MB/s (1 MB = 10^6 bytes)", v);
        return -1;
    }
    return mb * 1e6;
}

/* Used by v4_xsource_get_counters (expert_pack_source.c) for the synthetic kind. */
void v4_synth_source_counters(const v4_xsource *xs, v4_xsource_counters *out);
void v4_synth_source_counters(const v4_xsource *xs, v4_xsource_counters *out)
{
    memset(out, 0, sizeof *out);
    if (!xs || xs->ops != &synth_ops)
        return;
    const synth_src *s = (const synth_src *)xs;
    out->reads = atomic_load(&s->reads);
    out->bytes = atomic_load(&s->bytes);
    out->read_ns = atomic_load(&s->read_ns);
    out->buffered_reads = out->reads;
    out->errors = atomic_load(&s->errors);
}
