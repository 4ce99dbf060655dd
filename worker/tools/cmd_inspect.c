/* cmd_inspect.c - `v4fleet inspect --model DIR`: config and checkpoint summary.
 *
 * Design: loads DIR/config.json (v4_config_load) and the checkpoint (v4_ckpt_open,
 * which validates every shard header), then prints a config summary, tensor counts
 * and bytes per dtype, routed-expert bytes (names layers.L.ffn.experts.E.*) versus
 * trunk bytes (everything else), and the size of one routed expert.  The lookup
 * table is sorted by name, so all tensors of one expert are adjacent and are summed
 * in one pass.  Nothing is read from the tensor data (headers only).  A model whose
 * experts are synthetic (DIR/synthetic_experts.json, mkmodel --no-experts) gets a line
 * saying so (seed, count, bytes per expert) instead of the per-expert sizes.  The
 * memory of one sequence's decode state (v4_seq_bytes_for) is printed for 4k and 64k
 * tokens and the model's max_position_embeddings.  With --gpu-mem B it also prints the
 * CUDA plan the worker would follow on a device with B bytes free (engine.h v4_gpu_plan:
 * the same function, counting the step's device bytes without a device; --concurrency,
 * --context, --numerics and the V4_CUDA_MODE / V4_GPU_EXPERT_MEM / V4_GPU_SEQ_MEM
 * environment as the worker reads them), and how many tasks of the context fit the
 * sequences' budget at once.
 *
 * Ownership: everything is local to v4_cmd_inspect and released before it returns.
 * Exit status: 0 ok, 1 load/validation error (one line "v4fleet inspect: <where>:
 * <message>" on stderr), 2 usage error.
 * Thread: main thread only.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cache/expert_synth.h"
#include "cache/safetensors.h"
#include "config/model_config.h"
#include "cache/model_files.h"
#include "config/byte_suffix.h"
#include "kernels/cuda/cuda_plan.h"
#include "kernels/v4/model.h"
#include "worker/serve/engine.h"
#include "worker/serve/step_rows.h"

#include "commands.h"

#define PROG "v4fleet inspect"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: v4fleet inspect --model DIR [--gpu-mem B [--concurrency N] [--context T]\n"
            "                       [--numerics exact|fast]]\n"
            "\n"
            "Validate and summarize a DeepSeek-V4 checkpoint directory (config.json +\n"
            "model.safetensors.index.json and shards, or model.safetensors): config,\n"
            "tensor count and bytes by dtype, routed-expert vs trunk bytes, bytes per\n"
            "routed expert.\n"
            "\n"
            "options:\n"
            "  --model DIR        checkpoint directory\n"
            "  --gpu-mem B        also print the CUDA plan for a device with B bytes free\n"
            "                     (e.g. 139G): trunk, experts resident or paged, the\n"
            "                     sequences' budget; V4_CUDA_MODE, V4_GPU_EXPERT_MEM and\n"
            "                     V4_GPU_SEQ_MEM from the environment, as the worker\n"
            "  --concurrency N    tasks at once for the plan (V4_CONCURRENCY; default 1)\n"
            "  --context T        positions per task for the plan (V4_MAX_CONTEXT; default\n"
            "                     the model's max_position_embeddings)\n"
            "  --numerics M       exact or fast (default fast, the CUDA default: adds the\n"
            "                     bf16 forms of the head and wo_a)\n"
            "  -h, --help         this help\n");
}

/* ---------------------------------------------------------------- arguments */

typedef struct inspect_args {
    const char *model;
    int help;
    const char *gpu_mem;        /* NULL: no plan */
    int concurrency;
    long long context;          /* 0: the model's */
    int fast;
} inspect_args;

/* The value of option a (argv[*i]): "--opt V" or "--opt=V"; NULL (and a message) when missing. */
static const char *opt_value(int argc, char **argv, int *i, const char *name)
{
    const char *a = argv[*i];
    const size_t n = strlen(name);
    if (a[n] == '=')
        return a + n + 1;
    if (*i + 1 >= argc) {
        fprintf(stderr, PROG ": %s needs a value (see --help)\n", name);
        return NULL;
    }
    return argv[++*i];
}

static int is_opt(const char *a, const char *name)
{
    const size_t n = strlen(name);
    return !strncmp(a, name, n) && (a[n] == 0 || a[n] == '=');
}

static int parse_args(int argc, char **argv, inspect_args *o)
{
    *o = (inspect_args){.model = NULL, .help = 0, .gpu_mem = NULL, .concurrency = 1, .context = 0, .fast = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        char *end = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            o->help = 1;
        } else if (is_opt(a, "--model")) {
            if (!(o->model = opt_value(argc, argv, &i, "--model")))
                return -1;
        } else if (is_opt(a, "--gpu-mem")) {
            if (!(o->gpu_mem = opt_value(argc, argv, &i, "--gpu-mem")))
                return -1;
        } else if (is_opt(a, "--concurrency")) {
            if (!(v = opt_value(argc, argv, &i, "--concurrency")))
                return -1;
            const long n = strtol(v, &end, 10);
            if (end == v || *end || n < 1 || n > 4096) {
                fprintf(stderr, PROG ": --concurrency '%s': a whole number in 1..4096\n", v);
                return -1;
            }
            o->concurrency = (int)n;
        } else if (is_opt(a, "--context")) {
            if (!(v = opt_value(argc, argv, &i, "--context")))
                return -1;
            const long long n = strtoll(v, &end, 10);
            if (end == v || *end || n < 1 || n > (1LL << 30)) {
                fprintf(stderr, PROG ": --context '%s': a whole number of positions in 1..2^30\n", v);
                return -1;
            }
            o->context = n;
        } else if (is_opt(a, "--numerics")) {
            if (!(v = opt_value(argc, argv, &i, "--numerics")))
                return -1;
            if (strcmp(v, "exact") && strcmp(v, "fast")) {
                fprintf(stderr, PROG ": --numerics '%s': exact or fast\n", v);
                return -1;
            }
            o->fast = !strcmp(v, "fast");
        } else {
            fprintf(stderr, PROG ": unknown argument '%s' (see --help)\n", a);
            return -1;
        }
    }
    if (!o->help && (!o->model || !*o->model)) {
        fprintf(stderr, PROG ": --model DIR is required (see --help)\n");
        return -1;
    }
    if (!o->gpu_mem && (o->concurrency != 1 || o->context || !o->fast)) {
        fprintf(stderr, PROG ": --concurrency, --context and --numerics describe the CUDA plan: add --gpu-mem B\n");
        return -1;
    }
    return 0;
}

static int report(const v4_error *e, const char *fallback_where)
{
    fprintf(stderr, PROG ": %s: %s\n", e->where[0] ? e->where : fallback_where,
            e->msg[0] ? e->msg : v4_errcode_name(e->code));
    return 1;
}

/* ---------------------------------------------------------------- formatting */

static void fmt_bytes(char *buf, size_t cap, uint64_t b)
{
    if (b >= (1ull << 30))
        snprintf(buf, cap, "%.2f GiB", (double)b / (double)(1ull << 30));
    else if (b >= (1ull << 20))
        snprintf(buf, cap, "%.2f MiB", (double)b / (double)(1ull << 20));
    else if (b >= (1ull << 10))
        snprintf(buf, cap, "%.2f KiB", (double)b / (double)(1ull << 10));
    else
        snprintf(buf, cap, "%llu B", (unsigned long long)b);
}

/* Prints "N [a,b,c]" for the layers whose ratio class matches. */
static void print_layer_class(const v4_config *c, const char *label,
                              int (*pred)(const v4_config *, int))
{
    int n = 0;
    for (int l = 0; l < c->n_layers; l++)
        n += pred(c, l);
    printf("  %-22s %d", label, n);
    if (n) {
        printf(" [");
        int first = 1;
        for (int l = 0; l < c->n_layers; l++)
            if (pred(c, l)) {
                printf(first ? "%d" : ",%d", l);
                first = 0;
            }
        printf("]");
    }
    printf("\n");
}

static int is_window_only(const v4_config *c, int l) { return c->compress_ratios[l] == 0; }
static int is_csa(const v4_config *c, int l) { return v4_layer_is_csa(c, l); }
static int is_hca(const v4_config *c, int l) { return v4_layer_is_hca(c, l); }

static void print_config(const v4_config *c)
{
    printf("config: %d layers (+%d MTP), dim %d, vocab %d\n", c->n_layers, c->n_mtp_layers,
           c->dim, c->vocab_size);
    printf("  attention: %d heads x %d (rope %d), %d kv head, q_lora %d, o_groups %d x "
           "o_lora %d, window %d\n", c->n_heads, c->head_dim, c->rope_head_dim, c->n_kv_heads,
           c->q_lora_rank, c->o_groups, c->o_lora_rank, c->window);
    printf("  moe: %d routed experts, top-%d, %d shared, moe_inter %d, expert dtype %s\n",
           c->n_routed_experts, c->n_act_experts, c->n_shared_experts, c->moe_inter,
           c->expert_fp4 ? "fp4" : "fp8");
    printf("  hash-routed layers: %d", c->n_hash_layers);
    if (c->n_hash_layers > 0)
        printf(" [0..%d]", c->n_hash_layers - 1);
    printf("\n  indexer: %d heads x %d, top-%d; mHC x%d\n", c->index_n_heads,
           c->index_head_dim, c->index_topk, c->hc_mult);
    printf("layer types (compress_ratios [");
    for (int l = 0; l < c->n_layers; l++)
        printf(l ? ",%d" : "%d", c->compress_ratios[l]);
    printf("]):\n");
    print_layer_class(c, "window-only (0):", is_window_only);
    print_layer_class(c, "CSA (4):", is_csa);
    print_layer_class(c, "HCA (other):", is_hca);
}

/* ---------------------------------------------------------------- accounting */

/* One sequence's decode state (v4_seq_bytes_for: bf16 caches, f32 compressor state)
 * at a few context lengths, the model's maximum last. */
static void print_seq_bytes(const v4_config *c)
{
    const long long lens[] = {4096, 65536, c->max_position};
    printf("bytes per sequence (bf16 KV caches):");
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        if (lens[i] < 1 || lens[i] > 0x7fffffff || (i == 2 && (lens[i] == lens[0] || lens[i] == lens[1])))
            continue;
        char h[32];
        const size_t b = v4_seq_bytes_for(c, (int)lens[i]);
        fmt_bytes(h, sizeof h, b);
        printf("%s %lld tokens %zu (%s)", i ? "," : "", lens[i], b, h);
    }
    printf("\n");
}

/* "layers.L.ffn.experts.E." prefix -> 1 and L, E. */
static int read_uint(const char **p, int *v)
{
    const char *s = *p;
    long x = 0;
    if (*s < '0' || *s > '9')
        return 0;
    while (*s >= '0' && *s <= '9' && x < 100000000)
        x = x * 10 + (*s++ - '0');
    *v = (int)x;
    *p = s;
    return 1;
}

static int parse_expert_name(const char *name, int *layer, int *expert)
{
    const char *p = name;
    if (strncmp(p, "layers.", 7))
        return 0;
    p += 7;
    if (!read_uint(&p, layer) || strncmp(p, ".ffn.experts.", 13))
        return 0;
    p += 13;
    return read_uint(&p, expert) && *p == '.';
}

typedef struct summary {
    size_t count[V4_DT_F8_E8M0 + 1];
    uint64_t bytes[V4_DT_F8_E8M0 + 1];
    size_t n_tensors, expert_tensors, n_experts, n_mismatch;
    uint64_t total, expert_bytes;
    uint64_t ref_bytes;        /* layers.0.ffn.experts.0 (or the first expert seen) */
    int ref_layer, ref_expert;
    uint64_t min_bytes, max_bytes;
} summary;

static void close_group(summary *s, int layer, int expert, uint64_t bytes)
{
    if (s->n_experts == 0 || (layer == 0 && expert == 0 && (s->ref_layer || s->ref_expert))) {
        s->ref_bytes = bytes;
        s->ref_layer = layer;
        s->ref_expert = expert;
    }
    if (s->n_experts == 0 || bytes < s->min_bytes)
        s->min_bytes = bytes;
    if (s->n_experts == 0 || bytes > s->max_bytes)
        s->max_bytes = bytes;
    s->n_experts++;
}

static void summarize(const v4_ckpt *ck, summary *s)
{
    memset(s, 0, sizeof *s);
    s->n_tensors = v4_ckpt_count(ck);
    int cur_l = -1, cur_e = -1;
    uint64_t cur_bytes = 0;
    for (size_t i = 0; i < s->n_tensors; i++) {
        const v4_tensor *t = v4_ckpt_tensor(ck, i);
        s->count[t->dtype]++;
        s->bytes[t->dtype] += t->nbytes;
        s->total += t->nbytes;
        int l, e;
        if (!parse_expert_name(t->name, &l, &e))
            continue;
        s->expert_tensors++;
        s->expert_bytes += t->nbytes;
        if (l != cur_l || e != cur_e) {   /* names sorted: one expert is contiguous */
            if (cur_l >= 0)
                close_group(s, cur_l, cur_e, cur_bytes);
            cur_l = l;
            cur_e = e;
            cur_bytes = 0;
        }
        cur_bytes += t->nbytes;
    }
    if (cur_l >= 0)
        close_group(s, cur_l, cur_e, cur_bytes);
}

static uint64_t tensor_bytes(const v4_ckpt *ck, int l, int e, const char *suffix)
{
    char name[128];
    snprintf(name, sizeof name, "layers.%d.ffn.experts.%d.%s", l, e, suffix);
    const v4_tensor *t = v4_ckpt_find(ck, name);
    return t ? t->nbytes : 0;
}

static void print_expert_size(const v4_ckpt *ck, const v4_config *c, const summary *s)
{
    if (!s->n_experts) {
        printf("bytes per routed expert: no layers.L.ffn.experts.E.* tensors\n");
        return;
    }
    int l = s->ref_layer, e = s->ref_expert;
    printf("bytes per routed expert: %llu (layers.%d.ffn.experts.%d: w1 %llu+%llu, w3 %llu+%llu, "
           "w2 %llu+%llu weight+scale)\n", (unsigned long long)s->ref_bytes, l, e,
           (unsigned long long)tensor_bytes(ck, l, e, "w1.weight"),
           (unsigned long long)tensor_bytes(ck, l, e, "w1.scale"),
           (unsigned long long)tensor_bytes(ck, l, e, "w3.weight"),
           (unsigned long long)tensor_bytes(ck, l, e, "w3.scale"),
           (unsigned long long)tensor_bytes(ck, l, e, "w2.weight"),
           (unsigned long long)tensor_bytes(ck, l, e, "w2.scale"));
    if (s->min_bytes == s->max_bytes)
        printf("  all %zu routed experts have the same size\n", s->n_experts);
    else
        printf("  WARNING: routed experts differ in size (min %llu, max %llu bytes)\n",
               (unsigned long long)s->min_bytes, (unsigned long long)s->max_bytes);
    long long want = (long long)c->n_layers * c->n_routed_experts;
    if ((long long)s->n_experts != want)
        printf("  WARNING: found %zu routed experts, config implies %lld (%d layers x %d)\n",
               s->n_experts, want, c->n_layers, c->n_routed_experts);
}

/* synth: the model's routed experts are synthetic (mkmodel --no-experts), seed. */
static void print_checkpoint(const v4_ckpt *ck, const v4_config *c, int synth, uint64_t seed)
{
    summary s;
    summarize(ck, &s);
    char h[32];
    fmt_bytes(h, sizeof h, s.total);
    printf("checkpoint: %zu tensors in %zu shard%s, %llu bytes (%s)\n", s.n_tensors,
           v4_ckpt_n_shards(ck), v4_ckpt_n_shards(ck) == 1 ? "" : "s",
           (unsigned long long)s.total, h);
    printf("by dtype:\n");
    for (int d = V4_DT_BF16; d <= V4_DT_F8_E8M0; d++) {
        if (!s.count[d])
            continue;
        fmt_bytes(h, sizeof h, s.bytes[d]);
        printf("  %-8s %8zu tensors %16llu bytes (%s)\n", v4_dtype_name((v4_dtype)d), s.count[d],
               (unsigned long long)s.bytes[d], h);
    }
    fmt_bytes(h, sizeof h, s.expert_bytes);
    printf("routed experts: %zu tensors, %llu bytes (%s), %zu experts\n", s.expert_tensors,
           (unsigned long long)s.expert_bytes, h, s.n_experts);
    fmt_bytes(h, sizeof h, s.total - s.expert_bytes);
    printf("trunk: %zu tensors, %llu bytes (%s)\n", s.n_tensors - s.expert_tensors,
           (unsigned long long)(s.total - s.expert_bytes), h);
    if (synth) {
        v4_xblock_layout lo;
        v4_xblock_layout_of(c, &lo);
        size_t per = 0;
        for (int i = 0; i < V4_XBLOCK_NPART; i++)
            per += lo.len[i];
        printf("routed experts are synthetic (" V4_SYNTH_MARKER ", seed %llu): %d x %d experts of %zu bytes, "
               "generated when paged (run with --host-cache-bytes B)\n",
               (unsigned long long)seed, c->n_layers, c->n_routed_experts, per);
        return;
    }
    print_expert_size(ck, c, &s);
}

/* ---------------------------------------------------------------- CUDA plan */

/* The plan the worker would follow with o's figures on a device with o->gpu_mem bytes
 * free (v4_gpu_plan: the weights bound, nothing read or allocated on a device). */
static int print_gpu_plan(const inspect_args *o, int synth)
{
    double free_d = 0;
    if (strchr(o->gpu_mem, '%') || v4_parse_budget(o->gpu_mem, 0, &free_d) || !(free_d >= 1.0)) {
        fprintf(stderr, PROG ": --gpu-mem '%s': a byte count (139G, 80G)\n", o->gpu_mem);
        return 2;
    }
    v4_error err;
    v4_err_clear(&err);
    v4_model_files m;
    if (v4_model_open_ex(o->model, &m, V4_OPEN_NO_PREPARE | (synth ? V4_OPEN_EXPERTS_PAGED : 0), &err))
        return report(&err, o->model);
    /* the worker's step rows on a device: a prefill chunk beside one row per other task */
    const int conc = o->concurrency, chunk = v4_prefill_chunk_on(1, 0, conc);
    const int rows = conc + chunk - 1 < V4_DEVICE_STEP_ROWS ? conc + chunk - 1 : V4_DEVICE_STEP_ROWS;
    const v4_gpu_opts g = {.cuda_mode = NULL,
                           .expert_mem = NULL,
                           .cache_policy = NULL,
                           .weight_mem = NULL,
                           .seq_mem = NULL,
                           .context = o->context,
                           .no_lookahead = 0};
    v4_cuda_plan plan;
    v4_gpu_plan_info info;
    const size_t free_b = (size_t)free_d;
    if (v4_gpu_plan(&m, rows, conc, o->fast, &g, free_b, free_b, &plan, &info, &err)) {
        v4_model_close(&m);
        return report(&err, "CUDA plan");
    }
    char line[800];
    v4_gpu_plan_describe(&plan, &info, line, sizeof line);
    printf("CUDA plan (%s numerics, %d task%s of %lld positions, %d rows a step): %s\n", o->fast ? "fast" : "exact",
           conc, conc == 1 ? "" : "s", info.context, info.rows, line);
    if (plan.resident && info.claim) {
        const double fit = plan.seq_bytes ? (double)plan.seq_bytes / (double)info.claim : 0;
        char c[32];
        fmt_bytes(c, sizeof c, info.claim);
        printf("  a task of %lld positions claims %s of device cache pages; %s\n", info.context, c,
               !plan.seq_bytes ? "no sequences' budget (the free memory decides)"
               : fit >= conc  ? "all tasks fit at once at the full context"
                              : "fewer fit at once at the full context (shorter tasks claim less; the rest wait)");
        if (plan.seq_bytes)
            printf("  tasks of the full context at once within the sequences' budget: %lld\n",
                   fit < 1e12 ? (long long)fit : (long long)1e12);
        if (plan.seq_bytes && info.longest < info.context)
            printf("  WARNING: a task of %lld positions cannot finish on this device: one task alone reaches %lld "
                   "(set V4_MAX_CONTEXT at most that, or V4_GPU_SEQ_MEM / V4_GPU_EXPERT_MEM to give the sequences "
                   "more)\n",
                   info.context, info.longest);
    }
    v4_model_close(&m);
    return 0;
}

/* ---------------------------------------------------------------- entry point */

static char *config_path(const char *dir)
{
    size_t n = strlen(dir) + sizeof "/config.json";
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/config.json", dir);
    return p;
}

int v4_cmd_inspect(int argc, char **argv)
{
    inspect_args o;
    if (parse_args(argc, argv, &o))
        return 2;
    const char *model = o.model;
    if (o.help) {
        usage(stdout);
        return 0;
    }
    struct stat st;
    if (stat(model, &st) != 0) {
        fprintf(stderr, PROG ": %s: %s\n", model, strerror(errno));
        return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, PROG ": %s: not a directory\n", model);
        return 1;
    }
    char *cfg_path = config_path(model);
    if (!cfg_path) {
        fprintf(stderr, PROG ": %s: out of memory\n", model);
        return 1;
    }
    v4_error err;
    v4_err_clear(&err);
    v4_config cfg;
    if (v4_config_load(cfg_path, &cfg, &err)) {
        int rc = report(&err, cfg_path);
        free(cfg_path);
        return rc;
    }
    free(cfg_path);
    if (cfg.n_layers < 0 || cfg.n_layers > V4_MAX_LAYERS) {
        fprintf(stderr, PROG ": %s: num_hidden_layers %d out of range\n", model, cfg.n_layers);
        return 1;
    }
    uint64_t seed = 0;
    const int synth = v4_synth_marker_load(model, &seed, &err);
    if (synth < 0)
        return report(&err, model);
    v4_ckpt *ck;
    if (v4_ckpt_open(model, &ck, &err))
        return report(&err, model);
    printf("model: %s\n", model);
    print_config(&cfg);
    print_seq_bytes(&cfg);
    print_checkpoint(ck, &cfg, synth, seed);
    v4_ckpt_close(ck);
    fflush(stdout);
    return o.gpu_mem ? print_gpu_plan(&o, synth) : 0;
}
