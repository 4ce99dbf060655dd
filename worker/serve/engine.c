/* engine.c - assembling the engine a command or the worker runs (see engine.h): the
 * backend (--device / V4_DEVICE: CPU with --threads and --isa, or CUDA), paged experts
 * (the host expert cache of cache/expert_provider.h when --host-cache-bytes is set), and
 * on a CUDA backend the decode mode: "resident" runs the whole step on the GPU
 * (kernels/cuda/cuda_step.h: weights uploaded once, sequence state on the device);
 * "hybrid" keeps the step on the CPU and runs only the weight products on the GPU
 * (kernels/cuda/cuda_backend.h).  auto follows kernels/cuda/cuda_plan.h: every
 * expert resident when the model fits; otherwise the resident step paging routed
 * experts (from the mapped checkpoint or the host expert cache) within
 * V4_GPU_EXPERT_MEM or, unset, what the device has free after the trunk and 1 GiB of
 * headroom; hybrid only when not even that fits.  The slots evict by
 * V4_GPU_CACHE_POLICY (default next); the hybrid mode's weight copies are bounded by
 * V4_GPU_WEIGHT_MEM (default: free memory less 1 GiB).  The choice and the memory split
 * are logged.  The router look-ahead of paged experts (--no-lookahead / V4_LOOKAHEAD,
 * v4_lookahead_on) goes to the ctx (CPU path) and to the resident step's engine.
 * v4_gpu_cache_figs_get reads either mode's expert counters for /metrics.
 * Ownership: the engine is owned by the backend (freed with it).  Thread: main thread.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/expert_provider.h"
#include "cache/model_files.h"
#include "config/byte_suffix.h"
#include "config/device_setting.h"
#include "engine.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cuda/cuda_plan.h"
#include "task_run.h"
#ifdef V4_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_step.h"
#include "kernels/cuda/gpu_experts.h"
#include "kernels/cuda/slot_pool.h"
#endif

const char *v4_opt_or_env(const char *v, const char *name)
{
    if (v && *v)
        return v;
    v = getenv(name);
    return v ? v : "";
}

int v4_lookahead_on(int no_lookahead, v4_error *err)
{
    if (no_lookahead)
        return 0;
    const char *v = v4_opt_or_env(NULL, "V4_LOOKAHEAD");
    if (!*v)
        return 1;
    char *end;
    const long x = strtol(v, &end, 10);
    if (*end || end == v || (x != 0 && x != 1))
        return v4_err_set(err, V4_ERR_CONFIG, "V4_LOOKAHEAD", "'%s' is not 0 or 1 (the router look-ahead of paged "
                                                              "experts: 1 on, the default; 0 off)", v);
    return (int)x;
}

v4_backend *v4_open_backend(const v4_engine_opts *o, v4_error *err)
{
    const char *dev = o->device;
    const char *src = "--device";
    if (!dev || !*dev) {
        dev = getenv("V4_DEVICE");
        src = "V4_DEVICE";
    }
    int cuda = -1;
    if (dev && *dev && v4_parse_device(dev, &cuda)) {
        v4_err_set(err, V4_ERR_INVALID, src, "unknown device '%s' (cpu, cuda, cuda:N)", dev);
        return NULL;
    }
    if (cuda >= 0) {
        /* the CUDA default is fast (tensor cores); exact stays the reference */
        const char *num = v4_opt_or_env(o->numerics, "V4_NUMERICS");
        v4_numerics nm = V4_NUM_FAST;
        if (*num && v4_parse_numerics(num, &nm)) {
            v4_err_set(err, V4_ERR_INVALID, o->numerics && *o->numerics ? "--numerics" : "V4_NUMERICS",
                       "numerics '%s': exact or fast", num);
            return NULL;
        }
#ifdef V4_HAVE_CUDA
        return v4_cuda_backend_create_ex(cuda, nm == V4_NUM_FAST, err);
#else
        v4_err_set(err, V4_ERR_INVALID, src,
                   "device '%s' asked for, but this build has no CUDA backend (configure with -DV4_CUDA=ON where "
                   "nvcc is installed)", dev);
        return NULL;
#endif
    }
    const char *isa = o->isa ? o->isa : getenv("V4_CPU_ISA");
    return v4_cpu_backend_create_ex(o->threads, isa && *isa ? isa : "auto", o->numerics, err);
}

const char *v4_backend_numerics(const v4_backend *be)
{
#ifdef V4_HAVE_CUDA
    if (be && !strcmp(be->ops->name, "cuda"))
        return v4_numerics_name(v4_cuda_backend_fast(be) ? V4_NUM_FAST : V4_NUM_EXACT);
#endif
    return v4_numerics_name(v4_cpu_backend_numerics(be));
}

void v4_backend_fast_selftest(const v4_backend *be, v4_fast_selftest *out)
{
    memset(out, 0, sizeof *out);
    out->state = V4_FAST_NOT_RUN;
#ifdef V4_HAVE_CUDA
    if (be && !strcmp(be->ops->name, "cuda"))
        v4_cuda_backend_selftest(be, out);
#else
    (void)be;
#endif
}

static v4_gpu_opts gpu_opts_of(const v4_engine_opts *o)
{
    return (v4_gpu_opts){.cuda_mode = o->cuda_mode,
                         .expert_mem = o->gpu_expert_mem,
                         .cache_policy = o->gpu_cache_policy,
                         .weight_mem = o->gpu_weight_mem,
                         .seq_mem = o->gpu_seq_mem,
                         .context = 0,
                         .no_lookahead = o->no_lookahead};
}

int v4_attach_experts(const v4_engine_opts *o, v4_backend *be, struct v4_model_files *m, struct v4_ctx *ctx,
                      struct v4_xprov **out, v4_error *err)
{
    *out = NULL;
    const v4_gpu_opts g = gpu_opts_of(o);
    const int la = v4_lookahead_on(o->no_lookahead, err);
    if (la < 0)
        return -1;
    v4_ctx_set_lookahead(ctx, la);
    if (o->host_cache_bytes <= 0) {
        if (o->pack || o->cache_policy || o->io_threads)
            return v4_err_set(err, V4_ERR_INVALID, "--host-cache-bytes",
                              "--pack, --cache-policy and --io-threads need --host-cache-bytes");
        return v4_attach_gpu(be, m, ctx, 1, NULL, &g, err);
    }
    v4_xprov_opts xo = {o->model, o->pack, (size_t)o->host_cache_bytes, o->cache_policy, o->io_threads, 0};
    if (!(*out = v4_xprov_open(&m->cfg, m->ck, &xo, err)))
        return -1;
    v4_ctx_set_expert_provider(ctx, v4_xprov_provider(*out));
    return v4_attach_gpu(be, m, ctx, 1, *out, &g, err);
}

static const char *g_str(const v4_gpu_opts *g, int which)
{
    static const char *const env[5] = {"V4_CUDA_MODE", "V4_GPU_EXPERT_MEM", "V4_GPU_CACHE_POLICY", "V4_GPU_WEIGHT_MEM",
                                       "V4_GPU_SEQ_MEM"};
    const char *const v[5] = {g ? g->cuda_mode : NULL, g ? g->expert_mem : NULL, g ? g->cache_policy : NULL,
                              g ? g->weight_mem : NULL, g ? g->seq_mem : NULL};
    return v4_opt_or_env(v[which], env[which]);
}

int v4_gpu_cache_policy(const v4_gpu_opts *g, v4_xpolicy_kind *kind, v4_error *err)
{
    const char *s = g_str(g, 2);
    *kind = V4_XPOL_NEXT;
    if (*s && v4_xpolicy_parse(s, kind))
        return v4_err_set(err, V4_ERR_CONFIG, "V4_GPU_CACHE_POLICY", "'%s' is not lru, slru, lfru or next", s);
    return 0;
}

int v4_attach_gpu_experts(v4_backend *be, struct v4_model_files *m, struct v4_ctx *ctx, struct v4_xprov *xp,
                          const v4_gpu_opts *g, v4_error *err)
{
    const char *spec = g_str(g, 1);
    if (!*spec)
        return 0;
    if (strcmp(be->ops->name, "cuda")) {
        fprintf(stderr, "v4fleet: V4_GPU_EXPERT_MEM=%s ignored: the device is %s (the GPU expert cache needs "
                        "--device cuda)\n", spec, be->ops->name);
        return 0;
    }
#ifdef V4_HAVE_CUDA
    const v4_config *cfg = &m->cfg;
    const uint64_t total = (uint64_t)cfg->n_layers * (uint64_t)cfg->n_routed_experts * v4_gpu_expert_bytes(cfg);
    size_t budget;
    v4_xpolicy_kind pol;
    const v4_expert_provider *p;
    if (v4_slot_pool_budget_parse(spec, total, "V4_GPU_EXPERT_MEM", &budget, err) ||
        v4_gpu_cache_policy(g, &pol, err) ||
        v4_gpu_experts_attach(be, &m->w, xp ? v4_xprov_provider(xp) : NULL, budget, pol, &p, err))
        return -1;
    v4_ctx_set_expert_provider(ctx, p);
    v4_gpu_experts_stats st;
    v4_gpu_experts_stats_get(be, &st);
    fprintf(stderr, "v4fleet: GPU expert cache on %s: budget %zu bytes (%.2f MiB from V4_GPU_EXPERT_MEM=%s; the "
                    "routed experts are %.2f MiB), %d slots of %zu bytes = %zu bytes (%.1f%% of the %d experts), "
                    "%s eviction, experts from the %s\n",
            v4_cuda_backend_device_name(be), budget, budget / 1048576.0, spec, total / 1048576.0, st.slots,
            st.slot_bytes, st.pool_bytes, 100.0 * st.slots / ((double)cfg->n_layers * cfg->n_routed_experts),
            cfg->n_layers * cfg->n_routed_experts, v4_xpolicy_name(pol), xp ? "host expert cache" : "mapped checkpoint");
    return 0;
#else
    (void)m;
    (void)ctx;
    (void)xp;
    return v4_err_set(err, V4_ERR_INTERNAL, "V4_GPU_EXPERT_MEM", "a CUDA device in a build without CUDA");
#endif
}

#define HEADROOM ((size_t)1 << 30)      /* device bytes left for the runtime (the sequences have their own reserve) */
#define GIB(x) ((double)(x) / 1073741824.0)

#ifdef V4_HAVE_CUDA
/* The hybrid mode's weight copies: a byte budget (V4_GPU_WEIGHT_MEM: bytes or P% of the
 * device's memory; unset: what is free now less the headroom), logged. */
static int hybrid_weight_budget(v4_backend *be, const v4_gpu_opts *g, v4_error *err)
{
    const char *spec = g_str(g, 3);
    size_t free_b = 0, total_b = 0;
    if (v4_cuda_backend_mem_info(be, &free_b, &total_b))
        return v4_err_set(err, V4_ERR_INVALID, "cuda", "cannot query the memory of %s", v4_cuda_backend_device_name(be));
    size_t budget = free_b > 2 * HEADROOM ? free_b - HEADROOM : free_b / 2;
    double bytes = 0;
    if (*spec) {
        if (v4_parse_budget(spec, total_b, &bytes) || !(bytes >= 1.0))
            return v4_err_set(err, V4_ERR_CONFIG, "V4_GPU_WEIGHT_MEM",
                              "'%s' is not a byte count (40G, 512M) or a percentage of the device's memory (90%%)",
                              spec);
        budget = (size_t)bytes;
    }
    v4_cuda_backend_set_weight_budget(be, budget);
    fprintf(stderr, "v4fleet: CUDA hybrid mode on %s: weight copies within %.2f GiB (%s; %.2f GiB free of %.2f), "
                    "least recently used evicted first\n",
            v4_cuda_backend_device_name(be), GIB(budget), *spec ? spec : "free memory less 1 GiB", GIB(free_b),
            GIB(total_b));
    return 0;
}
#endif

int v4_gpu_plan(const struct v4_model_files *m, int rows, int max_batch, int fast, const v4_gpu_opts *g,
                size_t free_b, size_t total_b, v4_cuda_plan *plan, v4_gpu_plan_info *info, v4_error *err)
{
#ifndef V4_HAVE_CUDA
    (void)m, (void)rows, (void)max_batch, (void)fast, (void)g, (void)free_b, (void)total_b, (void)plan;
    *info = (v4_gpu_plan_info){0, 0, 0, 0, 0, 0, 0, 0};
    return v4_err_set(err, V4_ERR_INVALID, "cuda", "a CUDA plan in a build without CUDA");
#else
    const char *mode = g_str(g, 0);
    v4_cuda_mode_req req;
    if (!v4_cuda_mode_ok(mode) || v4_cuda_mode_req_parse(mode, &req))
        return v4_err_set(err, V4_ERR_CONFIG, "V4_CUDA_MODE", "'%s': expected auto, resident or hybrid", mode);
    const v4_config *cfg = &m->cfg;
    max_batch = max_batch < 1 ? 1 : max_batch;
    rows = rows < max_batch ? max_batch : rows;
    const size_t fast_b = fast ? v4_cuda_engine_fast_need(&m->w) : 0;
    const char *spec = g_str(g, 1);
    const size_t xbytes = v4_expert_bytes(&m->w.layers[0].experts[0]);
    const uint64_t total = (uint64_t)cfg->n_layers * (uint64_t)cfg->n_routed_experts * xbytes;
    size_t budget = 0;
    if (*spec && v4_slot_pool_budget_parse(spec, total, "V4_GPU_EXPERT_MEM", &budget, err))
        return -1;
    /* the sequences' caches: V4_GPU_SEQ_MEM, else from one task's claim at the context */
    const char *seq_spec = g_str(g, 4);
    double seq_asked = 0;
    if (*seq_spec && (v4_parse_budget(seq_spec, total_b, &seq_asked) || !(seq_asked >= 1.0)))
        return v4_err_set(err, V4_ERR_CONFIG, "V4_GPU_SEQ_MEM",
                          "'%s' is not a byte count (8G, 512M) or a percentage of the device's memory (10%%)",
                          seq_spec);
    long long context = g && g->context > 0 && g->context < cfg->max_position ? g->context : cfg->max_position;
    if (context > INT_MAX || context < 1)
        context = context < 1 ? 1 : INT_MAX;
    const size_t claim = v4_cuda_seq_bytes(cfg, (int)context, V4_CUDA_SEQ_PAGE);
    size_t trunk = 0, all = 0;
    if (req != V4_CUDA_REQ_HYBRID) {
        trunk = v4_cuda_engine_need(&m->w, rows, 1) + fast_b;     /* trunk + scratch, no slot */
        all = v4_cuda_engine_need(&m->w, rows, 0) + fast_b;       /* every expert resident */
    }
    const int step_x = cfg->n_act_experts * max_batch < cfg->n_routed_experts ? cfg->n_act_experts * max_batch
                                                                              : cfg->n_routed_experts;
    /* synthetic experts have no bytes in the weights (the count skips them): their size
     * is the slots' */
    const size_t xall = m->experts_synthetic ? (size_t)total : all > trunk ? all - trunk : 0;
    const v4_cuda_plan_in in = {.mode = req,
                                .free_bytes = free_b,
                                .trunk_bytes = trunk,
                                .experts_bytes = xall,
                                .slot_bytes = xbytes + 6 * 256,
                                .step_experts = step_x,
                                .headroom = HEADROOM,
                                .budget = budget,
                                .seq_claim = claim,
                                .seq_tasks = max_batch,
                                .seq_budget = (size_t)seq_asked,
                                .must_page = m->experts_synthetic};
    *info = (v4_gpu_plan_info){.context = context,
                               .claim = claim,
                               .max_batch = max_batch,
                               .rows = rows,
                               .routed_bytes = in.experts_bytes,
                               .free_bytes = free_b,
                               .total_bytes = total_b};
    if (v4_cuda_auto_plan(&in, plan, err))
        return -1;
    if (plan->resident && plan->seq_bytes) {   /* the longest task alone within the sequences' budget */
        long long lo = 0, hi = context;
        while (lo < hi) {
            const long long mid = lo + (hi - lo + 1) / 2;
            if (v4_cuda_seq_bytes(cfg, (int)mid, V4_CUDA_SEQ_PAGE) <= plan->seq_bytes)
                lo = mid;
            else
                hi = mid - 1;
        }
        info->longest = lo;
    }
    return 0;
#endif
}

/* "1.23 GiB" from 1 GiB on, else "12.3 MiB" (small models' plans stay readable) */
static const char *gib_or_mib(char *buf, size_t n, double bytes)
{
    if (bytes >= 1073741824.0)
        snprintf(buf, n, "%.2f GiB", bytes / 1073741824.0);
    else
        snprintf(buf, n, "%.1f MiB", bytes / 1048576.0);
    return buf;
}

void v4_gpu_plan_describe(const v4_cuda_plan *plan, const v4_gpu_plan_info *info, char *out, size_t n)
{
    char b[7][32];
    char seqs[240] = "";
    if (plan->resident)
        snprintf(seqs, sizeof seqs, ", sequences %s (%s; %d x %lld positions claim %s)",
                 gib_or_mib(b[0], sizeof b[0], (double)plan->seq_bytes), plan->seq_why, info->max_batch, info->context,
                 gib_or_mib(b[1], sizeof b[1], (double)info->max_batch * (double)info->claim));
    char pct[64] = "";
    if (plan->resident && plan->expert_budget && info->routed_bytes)
        snprintf(pct, sizeof pct, ", %.1f%% of the routed experts",
                 100.0 * (double)plan->expert_budget / (double)info->routed_bytes);
    snprintf(out, n, "%s mode (%s): trunk %s, experts %s (%s%s)%s, headroom %s; %s free of %s",
             plan->resident ? "resident" : "hybrid", plan->why, gib_or_mib(b[2], sizeof b[2], (double)plan->trunk_bytes),
             gib_or_mib(b[3], sizeof b[3], (double)plan->pool_bytes),
             !plan->resident ? "not on the device step" : plan->expert_budget ? "paged" : "all resident", pct, seqs,
             gib_or_mib(b[4], sizeof b[4], (double)plan->headroom), gib_or_mib(b[5], sizeof b[5], (double)info->free_bytes),
             gib_or_mib(b[6], sizeof b[6], (double)info->total_bytes));
}

int v4_attach_device_step(v4_backend *be, struct v4_model_files *m, struct v4_ctx *ctx, int max_batch,
                          struct v4_xprov *xp, const v4_gpu_opts *g, v4_error *err)
{
    const char *mode = g_str(g, 0);
    v4_cuda_mode_req req;
    if (!v4_cuda_mode_ok(mode) || v4_cuda_mode_req_parse(mode, &req))
        return v4_err_set(err, V4_ERR_CONFIG, "V4_CUDA_MODE", "'%s': expected auto, resident or hybrid", mode);
    const int la = v4_lookahead_on(g ? g->no_lookahead : 0, err);
    if (la < 0)
        return -1;
    if (strcmp(be->ops->name, "cuda"))
        return 0;   /* the CPU path: nothing to choose */
#ifdef V4_HAVE_CUDA
    const char *dev = v4_cuda_backend_device_name(be);
    v4_xpolicy_kind pol;
    if (v4_gpu_cache_policy(g, &pol, err))
        return -1;
    if (req == V4_CUDA_REQ_HYBRID) {
        fprintf(stderr, "v4fleet: CUDA hybrid mode on %s (V4_CUDA_MODE=hybrid): weight products on the GPU\n", dev);
        return 0;
    }
    /* the engine's rows: the context's (a prefill chunk plus a row per other sequence),
     * at most the 256 a device step takes */
    int rows = v4_ctx_max_rows(ctx) < 256 ? v4_ctx_max_rows(ctx) : 256;
    void *lt = v4_cuda_backend_lt(be);   /* fast numerics: tensor-core products, bf16 forms */
    size_t free_b = 0, total_b = 0;
    if (v4_cuda_backend_mem_info(be, &free_b, &total_b))
        return v4_err_set(err, V4_ERR_INVALID, "cuda", "cannot query the memory of %s", dev);
    v4_cuda_plan plan;
    v4_gpu_plan_info info;
    if (v4_gpu_plan(m, rows, max_batch, lt != NULL, g, free_b, total_b, &plan, &info, err)) {
        if (err->code == V4_ERR_NOMEM)
            snprintf(err->where, sizeof err->where, "V4_CUDA_MODE (%s)", dev);
        return -1;
    }
    rows = info.rows;
    char line[700];
    v4_gpu_plan_describe(&plan, &info, line, sizeof line);
    fprintf(stderr, "v4fleet: CUDA %s: %s\n", dev, line);
    if (plan.resident && plan.seq_bytes && info.longest < info.context)
        fprintf(stderr, "v4fleet: WARNING: a task of %lld positions cannot finish on %s: one task alone reaches %lld "
                        "(V4_MAX_CONTEXT at most that, or more V4_GPU_SEQ_MEM); longer tasks fail with device_memory\n",
                info.context, dev, info.longest);
    if (!plan.resident)
        return 0;
    const size_t budget = plan.expert_budget;
    const char *spec = g_str(g, 1);
    v4_cuda_engine *e = v4_cuda_engine_create_paged(&m->w, rows, 2 * max_batch + 2, budget,
                                                    xp ? v4_xprov_provider(xp) : NULL, pol, err);
    if (!e)
        return -1;
    if (lt && v4_cuda_engine_use_fast(e, lt, err)) {
        v4_cuda_engine_free(e);
        return -1;
    }
    if (plan.seq_bytes)
        v4_cuda_engine_set_seq_budget(e, plan.seq_bytes);
    v4_cuda_engine_set_lookahead(e, la);   /* only paged experts use it */
    v4_cuda_backend_own_engine(be, e);
    v4_step_impl impl = v4_cuda_engine_impl(e);
    v4_ctx_set_step_impl(ctx, &impl);
    v4_cuda_expert_stats xs;
    v4_cuda_engine_expert_stats(e, &xs);
    char paged[240] = "every expert resident";
    if (budget)
        snprintf(paged, sizeof paged, "experts paged in %d slots of %.2f MiB (%s, %s eviction, router look-ahead %s) "
                 "from the %s", xs.slots, xs.slot_bytes / 1048576.0, *spec ? spec : "the free device memory",
                 v4_xpolicy_name(pol), la ? "on" : "off", xp ? "host expert cache" : "mapped checkpoint");
    fprintf(stderr, "v4fleet: CUDA resident mode on %s: the whole decode step on the GPU, %s, %s numerics; %.2f "
                    "GiB held (%.2f GiB free of %.2f)\n",
            dev, paged, lt ? "fast (tensor cores)" : "exact", GIB(v4_cuda_engine_bytes(e)), GIB(free_b), GIB(total_b));
    return 1;
#else
    (void)m;
    (void)ctx;
    (void)max_batch;
    (void)xp;
    (void)req;
    (void)la;
    return v4_err_set(err, V4_ERR_INTERNAL, "cuda", "a CUDA device in a build without CUDA");
#endif
}

int v4_attach_gpu(v4_backend *be, struct v4_model_files *m, struct v4_ctx *ctx, int max_batch, struct v4_xprov *xp,
                  const v4_gpu_opts *g, v4_error *err)
{
    const int r = v4_attach_device_step(be, m, ctx, max_batch, xp, g, err);
    if (r != 0)
        return r < 0 ? -1 : 0;
    if (v4_attach_gpu_experts(be, m, ctx, xp, g, err))
        return -1;
#ifdef V4_HAVE_CUDA
    if (!strcmp(be->ops->name, "cuda"))     /* hybrid: bound the weight copies (after the expert pool) */
        return hybrid_weight_budget(be, g, err);
#endif
    return 0;
}

#ifdef V4_HAVE_CUDA
/* Which GPU expert cache a CUDA backend runs: 1 = the hybrid mode's (*hs), 2 = the
 * resident step engine's (*e, *xs: slots 0 when every expert is resident), -1 = none. */
static int gpu_figs(const v4_backend *be, v4_gpu_experts_stats *hs, const struct v4_cuda_engine **e,
                    v4_cuda_expert_stats *xs)
{
    if (!be || strcmp(be->ops->name, "cuda") != 0)
        return -1;
    if (v4_gpu_experts_stats_get(be, hs) == 0)
        return 1;
    if (!(*e = v4_cuda_backend_engine(be)))
        return -1;
    v4_cuda_engine_expert_stats(*e, xs);
    return 2;
}
#endif

int v4_gpu_memory_get(const v4_backend *be, v4_gpu_memory *m)
{
    *m = (v4_gpu_memory){0, 0, 0, 0, 0, 0};
#ifdef V4_HAVE_CUDA
    v4_gpu_experts_stats hs;
    const struct v4_cuda_engine *e = NULL;
    v4_cuda_expert_stats xs;
    const int k = gpu_figs(be, &hs, &e, &xs);
    if (k == 1) {                                       /* hybrid: the products' expert pool */
        m->held = m->experts = hs.pool_bytes;
    } else if (k == 2) {
        v4_cuda_seq_stats ss;
        v4_cuda_engine_seq_stats(e, &ss);
        const unsigned long long eng = v4_cuda_engine_bytes(e);
        m->experts = xs.slots > 0 ? (unsigned long long)xs.slots * xs.slot_bytes : 0;
        m->trunk = eng > m->experts ? eng - m->experts : 0;
        m->seq_budget = ss.budget_bytes;
        m->seq_held = ss.held_bytes;
        m->resident = 1;
        /* device bytes for sequences: what they hold plus the pools' free pages */
        m->held = eng + ss.held_bytes + ss.pool_free_bytes;
    }
    return k > 0 ? 0 : -1;
#else
    (void)be;
    return -1;
#endif
}

int v4_gpu_cache_figs_get(const v4_backend *be, v4_runner_cache_figs *f)
{
    memset(f, 0, sizeof *f);
#ifdef V4_HAVE_CUDA
    v4_gpu_experts_stats hs;
    const struct v4_cuda_engine *e = NULL;
    v4_cuda_expert_stats xs;
    const int k = gpu_figs(be, &hs, &e, &xs);
    if (k == 1) {                                       /* hybrid: the products' cache */
        *f = (v4_runner_cache_figs){hs.hits, hs.misses, hs.bytes_uploaded, hs.pool_bytes, hs.pool_bytes};
        return 0;
    }
    if (k != 2 || xs.slots <= 0)                        /* none, or every expert resident */
        return -1;
    const unsigned long long pool = (unsigned long long)xs.slots * xs.slot_bytes;
    *f = (v4_runner_cache_figs){xs.hits, xs.misses, xs.bytes_uploaded, pool, pool};
    return 0;
#else
    (void)be;
    return -1;
#endif
}
