/* cli_util.c - see cli_util.h. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../cache/expert_provider.h"
#include "../cache/model_files.h"
#include "../config/worker_config.h"
#include "../kernels/cpu/cpu_backend.h"
#ifdef V4_HAVE_CUDA
#include "../kernels/cuda/cuda_backend.h"
#include "../kernels/cuda/gpu_experts.h"
#include "../kernels/cuda/slot_pool.h"
#endif
#include "cli_util.h"

int v4_opts_take(v4_engine_opts *o, int argc, char **argv, int *i, const char *cmd)
{
    const char *a = argv[*i];
    static const char *const flags[] = {"--model", "--threads", "--isa", "--host-cache-bytes", "--pack",
                                        "--cache-policy", "--io-threads", "--device"};
    int ours = 0;
    for (size_t k = 0; k < sizeof flags / sizeof flags[0]; k++)
        ours |= !strcmp(a, flags[k]);
    if (!ours)
        return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "v4fleet %s: %s needs a value\n", cmd, a);
        return -1;
    }
    const char *v = argv[++*i];
    if (!strcmp(a, "--model")) {
        o->model = v;
    } else if (!strcmp(a, "--isa")) {
        o->isa = v;
    } else if (!strcmp(a, "--device")) {
        if (v4_parse_device(v, NULL)) {
            fprintf(stderr, "v4fleet %s: --device wants cpu, cuda or cuda:N, got '%s'\n", cmd, v);
            return -1;
        }
        o->device = v;
    } else if (!strcmp(a, "--pack")) {
        o->pack = v;
    } else if (!strcmp(a, "--cache-policy")) {
        if (strcmp(v, "lru") && strcmp(v, "slru") && strcmp(v, "lfru")) {
            fprintf(stderr, "v4fleet %s: --cache-policy wants lru, slru or lfru, got '%s'\n", cmd, v);
            return -1;
        }
        o->cache_policy = v;
    } else if (!strcmp(a, "--host-cache-bytes")) {
        if (v4_parse_bytes(v, &o->host_cache_bytes)) {
            fprintf(stderr, "v4fleet %s: --host-cache-bytes wants a byte count (e.g. 64G, 512M), got '%s'\n", cmd, v);
            return -1;
        }
    } else {
        const int io = !strcmp(a, "--io-threads");
        const long hi = io ? 64 : 1024;
        char *end;
        long t = strtol(v, &end, 10);
        if (*end || end == v || t < (io ? 1 : 0) || t > hi) {
            fprintf(stderr, "v4fleet %s: %s wants an integer in [%d, %ld], got '%s'\n", cmd, a, io, hi, v);
            return -1;
        }
        if (io)
            o->io_threads = (int)t;
        else
            o->threads = (int)t;
    }
    return 1;
}

int v4_read_ids_json(const char *path, int32_t **ids, int *n, int limit, v4_error *err)
{
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return v4_err_set(err, V4_ERR_FORMAT, path, "invalid JSON at line %d, column %d: %s",
                          je.line, je.column, je.text);
    if (!json_is_array(root)) {
        json_decref(root);
        return v4_err_set(err, V4_ERR_FORMAT, path, "expected a JSON array of token ids");
    }
    size_t len = json_array_size(root);
    int32_t *out = malloc(sizeof(int32_t) * (len + 1));
    if (!out) {
        json_decref(root);
        return v4_err_set(err, V4_ERR_NOMEM, path, "out of memory");
    }
    for (size_t k = 0; k < len; k++) {
        json_t *v = json_array_get(root, k);
        json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;
        if (!json_is_integer(v) || x < 0 || (limit > 0 && x >= limit)) {
            free(out);
            json_decref(root);
            return v4_err_set(err, V4_ERR_RANGE, path,
                              "element %zu is not a token id in [0, %d)", k, limit);
        }
        out[k] = (int32_t)x;
    }
    json_decref(root);
    *ids = out;
    *n = (int)len;
    return 0;
}

void v4_print_error(const char *cmd, const v4_error *err)
{
    if (err->where[0])
        fprintf(stderr, "v4fleet %s: %s: %s\n", cmd, err->where, err->msg);
    else
        fprintf(stderr, "v4fleet %s: %s\n", cmd, err->msg);
}

const char *v4_opt_or_env(const char *v, const char *name)
{
    if (v && *v)
        return v;
    v = getenv(name);
    return v ? v : "";
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
#ifdef V4_HAVE_CUDA
        return v4_cuda_backend_create(cuda, err);
#else
        v4_err_set(err, V4_ERR_INVALID, src,
                   "device '%s' asked for, but this build has no CUDA backend (configure with -DV4_CUDA=ON where "
                   "nvcc is installed)", dev);
        return NULL;
#endif
    }
    const char *isa = o->isa ? o->isa : getenv("V4_CPU_ISA");
    return v4_cpu_backend_create(o->threads, isa && *isa ? isa : "auto", err);
}

int v4_attach_experts(const v4_engine_opts *o, v4_backend *be, struct v4_model_files *m, struct v4_ctx *ctx,
                      struct v4_xprov **out, v4_error *err)
{
    *out = NULL;
    if (o->host_cache_bytes <= 0) {
        if (o->pack || o->cache_policy || o->io_threads)
            return v4_err_set(err, V4_ERR_INVALID, "--host-cache-bytes",
                              "--pack, --cache-policy and --io-threads need --host-cache-bytes");
        return v4_attach_gpu(be, m, ctx, 1, NULL, o->cuda_mode, o->gpu_expert_mem, err);
    }
    v4_xprov_opts xo = {o->model, o->pack, (size_t)o->host_cache_bytes, o->cache_policy, o->io_threads, 0};
    if (!(*out = v4_xprov_open(&m->cfg, m->ck, &xo, err)))
        return -1;
    v4_ctx_set_expert_provider(ctx, v4_xprov_provider(*out));
    return v4_attach_gpu(be, m, ctx, 1, *out, o->cuda_mode, o->gpu_expert_mem, err);
}

int v4_attach_gpu_experts(v4_backend *be, struct v4_model_files *m, struct v4_ctx *ctx, struct v4_xprov *xp,
                          const char *gpu_mem, v4_error *err)
{
    const char *spec = v4_opt_or_env(gpu_mem, "V4_GPU_EXPERT_MEM");
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
    const v4_expert_provider *p;
    if (v4_slot_pool_budget_parse(spec, total, "V4_GPU_EXPERT_MEM", &budget, err) ||
        v4_gpu_experts_attach(be, &m->w, xp ? v4_xprov_provider(xp) : NULL, budget, &p, err))
        return -1;
    v4_ctx_set_expert_provider(ctx, p);
    v4_gpu_experts_stats st;
    v4_gpu_experts_stats_get(be, &st);
    fprintf(stderr, "v4fleet: GPU expert cache on %s: budget %zu bytes (%.2f MiB from V4_GPU_EXPERT_MEM=%s; the "
                    "routed experts are %.2f MiB), %d slots of %zu bytes = %zu bytes (%.1f%% of the %d experts), "
                    "experts from the %s\n",
            v4_cuda_backend_device_name(be), budget, budget / 1048576.0, spec, total / 1048576.0, st.slots,
            st.slot_bytes, st.pool_bytes, 100.0 * st.slots / ((double)cfg->n_layers * cfg->n_routed_experts),
            cfg->n_layers * cfg->n_routed_experts, xp ? "host expert cache" : "mapped checkpoint");
    return 0;
#else
    (void)m;
    (void)ctx;
    (void)xp;
    return v4_err_set(err, V4_ERR_INTERNAL, "V4_GPU_EXPERT_MEM", "a CUDA device in a build without CUDA");
#endif
}
