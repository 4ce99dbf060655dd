/* cmd_mkmodel.c - `v4fleet mkmodel`: write a synthetic DeepSeek-V4 checkpoint.
 *
 *   v4fleet mkmodel --out DIR [--preset tiny|small|flash] [--layers L] [--seed S]
 *                   [--threads N] [--force] [--no-sync] [--no-experts]
 *   v4fleet mkmodel --dry-run [--preset ...] [--layers L]     (plan only, writes nothing)
 *
 * Output (the real V4-Flash naming, dtypes and shard layout, spec v4-decode.md §3):
 *   DIR/config.json                      Hugging Face keys (v4_config_to_json)
 *   DIR/model-00001-of-0000N.safetensors embed.weight
 *   DIR/model-0000{L+2}-of-...           everything of layer L, in the real order
 *   DIR/model-0000N-of-0000N.safetensors hc_head_base, hc_head_fn, hc_head_scale,
 *                                        norm.weight, head.weight
 *   DIR/model.safetensors.index.json     weight_map (sorted) + metadata.total_size
 *   DIR/tokenizer.json, tokenizer_config.json  a small byte-level BPE tokenizer with
 *                                        exactly vocab_size ids, BOS 0 / EOS 1 (mktokenizer.h)
 * With --no-experts the layer shards lack every layers.L.ffn.experts.E.* tensor (the
 * index and total_size too) and DIR/synthetic_experts.json records the seed
 * (cache/expert_synth.h): the model then runs only with paged experts
 * (--host-cache-bytes), which the synthetic expert source generates - the very bytes a
 * full mkmodel of the same preset and seed writes (the flash trunk is ~9 GB of ~156).
 * For the tiny preset the shard headers, the index and the config are the same as
 * those of tests/data/golden/tiny/model (only the weight values differ).  The presets
 * (mkmodel_presets.c): tiny (golden shape), small (half-width Flash), flash (the real
 * V4-Flash config, 43 layers, ~156 GB; --layers L keeps the first L layers).
 *
 * Design: the whole checkpoint is first planned (mkmodel_plan.c) as a list of tensor
 * specs per shard; the plan gives every file's size, the total, and the bytes one
 * decode token reads, which are printed before anything is written (--dry-run stops
 * there).  The shards are then written by mkmodel_gen.c, several at once (--threads,
 * default: the number of CPUs).  The index is written after the shards and
 * config.json last, so a directory with a config.json (what scripts test for) or an
 * index is complete (the marker of --no-experts is written before the index); with --force the old config.json and index are deleted before
 * anything else is touched (mkmodel_dir.c).  The preset is checked with
 * v4_config_validate() and the written config.json is parsed back before writing.
 * Progress goes to stderr every 5% for checkpoints of 64 MiB or more.  The output
 * depends only on the preset, --layers and the seed (not on --threads).
 *
 * Owner: the mkmodel work package.  Thread: main thread (a command).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache/expert_synth.h"
#include "cache/st_writer.h"
#include "cli_util.h"
#include "commands.h"
#include "config/model_config.h"
#include "mkmodel.h"
#include "worker/tokenizer/mktokenizer.h"

/* config.json text, checked by parsing it back (NULL + err on failure). */
static char *config_json(const v4_config *c, v4_error *err)
{
    char *text = v4_config_to_json(c);
    v4_config back;
    if (!text) {
        v4_err_set(err, V4_ERR_NOMEM, "config.json", "cannot build JSON");
        return NULL;
    }
    if (v4_config_parse(text, "config.json (written)", &back, err)) {
        free(text);
        return NULL;
    }
    return text;
}

/* The tokenizer for the model's vocabulary; its BOS/EOS ids are the config's. */
static int write_tokenizer(const char *dir, const v4_config *c, int sync, v4_error *err)
{
    if (c->bos_id != 0 || c->eos_id != 1)
        return v4_err_set(err, V4_ERR_CONFIG, "mkmodel", "the generated tokenizer has BOS 0 and EOS 1");
    char *tj, *cj;
    if (v4_mktokenizer(c->vocab_size, &tj, &cj, err))
        return -1;
    if (v4mk_write_text(dir, "tokenizer.json", tj, sync, err)) {
        free(cj);
        return -1;
    }
    return v4mk_write_text(dir, "tokenizer_config.json", cj, sync, err);
}

/* ---------------------------------------------------------------- the command */

typedef struct opts {
    const char *out, *preset;
    uint64_t seed;
    int force, sync, layers, threads, dry_run, no_experts;
} opts;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: v4fleet mkmodel --out DIR [--preset tiny|small|flash] [--layers L] [--seed S]\n"
            "                       [--threads N] [--force] [--no-sync] [--no-experts]\n"
            "       v4fleet mkmodel --dry-run [--preset tiny|small|flash] [--layers L]\n\n"
            "Write a synthetic DeepSeek-V4 checkpoint (V4-Flash naming, dtypes, shard layout)\n"
            "with deterministic random weights.\n\n"
            "  --out DIR        output directory (created; must be empty unless --force)\n"
            "  --preset NAME    tiny (golden tiny shape, ~11 MB), small (~9 GB, ~2.6 GB read\n"
            "                   per decode token) or flash (the real V4-Flash config: 43\n"
            "                   layers, ~156 GB; ~3.6 GB per layer); default tiny\n"
            "  --layers L       keep only the first L layers of the preset (its layer\n"
            "                   pattern, hash layers and vocabulary unchanged)\n"
            "  --seed S         unsigned 64-bit seed (default 1)\n"
            "  --threads N      shards written at once (default: the number of CPUs)\n"
            "  --force          overwrite a checkpoint in a non-empty DIR\n"
            "  --no-sync        skip fsync before each rename (faster, less durable)\n"
            "  --no-experts     write no routed-expert tensors; " V4_SYNTH_MARKER " marks them\n"
            "                   synthetic (this seed): run the model with --host-cache-bytes B\n"
            "                   and they are generated on demand, the same bytes as without\n"
            "                   this flag (V4_SYNTH_EXPERT_MBPS=R throttles that to R MB/s per\n"
            "                   I/O thread)\n"
            "  --dry-run        print the plan (tensors, bytes, bytes per token) and exit\n");
}

static int parse_seed(const char *s, uint64_t *out)
{
    char *end;
    errno = 0;
    if (!s || !*s || *s == '-')
        return -1;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

static int parse_int(const char *s, int lo, int hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return -1;
    *out = (int)v;
    return 0;
}

/* Returns 0 ok, 1 = --help printed, -1 = usage error (message printed). */
static int parse_args(int argc, char **argv, opts *o)
{
    *o = (opts){.preset = "tiny", .seed = 1, .sync = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(a, "--force")) {
            o->force = 1;
        } else if (!strcmp(a, "--no-sync")) {
            o->sync = 0;
        } else if (!strcmp(a, "--no-experts")) {
            o->no_experts = 1;
        } else if (!strcmp(a, "--dry-run")) {
            o->dry_run = 1;
        } else if (!strcmp(a, "--out") && v) {
            o->out = v, i++;
        } else if (!strcmp(a, "--preset") && v) {
            o->preset = v, i++;
        } else if (!strcmp(a, "--layers") && v) {
            if (parse_int(v, 1, V4_MAX_LAYERS, &o->layers)) {
                fprintf(stderr, "mkmodel: --layers wants an integer in [1, %d], got '%s'\n", V4_MAX_LAYERS, v);
                return -1;
            }
            i++;
        } else if (!strcmp(a, "--threads") && v) {
            if (parse_int(v, 1, 1024, &o->threads)) {
                fprintf(stderr, "mkmodel: --threads wants an integer in [1, 1024], got '%s'\n", v);
                return -1;
            }
            i++;
        } else if (!strcmp(a, "--seed") && v) {
            if (parse_seed(v, &o->seed)) {
                fprintf(stderr, "mkmodel: --seed wants an unsigned integer, got '%s'\n", v);
                return -1;
            }
            i++;
        } else {
            fprintf(stderr, "mkmodel: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return -1;
        }
    }
    if (!o->out && !o->dry_run) {
        fprintf(stderr, "mkmodel: --out DIR is required\n");
        usage(stderr);
        return -1;
    }
    return 0;
}

static void print_summary(const v4mk_plan *p, const v4_config *c, const char *preset)
{
    v4mk_token_bytes tb = v4mk_per_token_bytes(p, c);
    printf("mkmodel: preset %s: %d layers, dim %d, %d experts (top %d), vocab %d, %d shards\n",
           preset, c->n_layers, c->dim, c->n_routed_experts, c->n_act_experts, c->vocab_size,
           p->n);
    printf("mkmodel: checkpoint %llu bytes (%.3f GB; tensors %llu bytes)\n",
           (unsigned long long)p->total_file_bytes, p->total_file_bytes / 1e9,
           (unsigned long long)p->total_size);
    printf("mkmodel: read per decode token %llu bytes (%.3f GB): trunk %.3f GB + routed "
           "experts %.3f GB\n",
           (unsigned long long)tb.total, tb.total / 1e9, tb.trunk / 1e9, tb.experts / 1e9);
    if (p->no_experts)
        printf("mkmodel: routed experts not written (--no-experts): synthetic, generated when paged\n");
    fflush(stdout);
}

/* Machine-readable plan (--dry-run): one "key value" per line. */
static void print_plan(const v4mk_plan *p, const v4_config *c)
{
    v4mk_token_bytes tb = v4mk_per_token_bytes(p, c);
    int csa = 0, hca = 0;
    for (int l = 0; l < c->n_layers; l++) {
        csa += v4_layer_is_csa(c, l);
        hca += v4_layer_is_hca(c, l);
    }
    printf("plan.layers %d\nplan.window_only %d\nplan.csa %d\nplan.hca %d\nplan.hash_layers %d\n", c->n_layers,
           c->n_layers - csa - hca, csa, hca, c->n_hash_layers);
    printf("plan.shards %d\nplan.tensors %zu\nplan.tensor_bytes %llu\nplan.file_bytes %llu\n", p->n, p->n_tensors,
           (unsigned long long)p->total_size, (unsigned long long)p->total_file_bytes);
    printf("plan.token_bytes %llu\nplan.token_trunk_bytes %llu\nplan.token_expert_bytes %llu\n",
           (unsigned long long)tb.total, (unsigned long long)tb.trunk, (unsigned long long)tb.experts);
}

static int default_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > 64 ? 64 : (int)n;
}

static int generate(const opts *o, const v4mk_plan *p, const v4_config *c, v4_error *err)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int threads = o->threads ? o->threads : default_threads();
    int rc = v4mk_write_shards(p, o->out, o->seed, o->sync, threads, err);
    if (!rc && o->no_experts)
        rc = v4mk_write_text(o->out, V4_SYNTH_MARKER, v4_synth_marker_json(o->seed), o->sync, err);
    if (!rc)
        rc = v4mk_write_text(o->out, "model.safetensors.index.json", v4mk_index_json(p), o->sync, err);
    if (!rc)
        rc = write_tokenizer(o->out, c, o->sync, err);
    if (!rc)
        rc = v4mk_write_text(o->out, "config.json", config_json(c, err), o->sync, err);
    if (!rc) {
        double s = v4mk_seconds_since(&t0);
        printf("mkmodel: wrote %s in %.1f s (%.2f GB/s, %d threads)\n", o->out, s,
               s > 0 ? p->total_file_bytes / 1e9 / s : 0.0, threads < p->n ? threads : p->n);
    }
    return rc;
}

int v4_cmd_mkmodel(int argc, char **argv)
{
    opts o;
    int a = parse_args(argc, argv, &o);
    if (a)
        return a > 0 ? 0 : 2;
    v4_config cfg;
    v4_error err = {0};
    if (v4mk_preset(o.preset, o.layers, &cfg, &err)) {
        fprintf(stderr, "mkmodel: %s: %s\n", err.where, err.msg);
        return 2;
    }
    v4mk_plan p;
    if (v4_config_validate(&cfg, o.preset, &err) || v4mk_plan_build(&p, &cfg, o.no_experts, &err)) {
        v4_print_error("mkmodel", &err);
        return 1;
    }
    int rc = 0;
    if (o.dry_run) {
        print_summary(&p, &cfg, o.preset);
        print_plan(&p, &cfg);
    } else if (!(rc = v4mk_prepare_dir(o.out, o.force, &err))) {
        print_summary(&p, &cfg, o.preset);
        rc = generate(&o, &p, &cfg, &err);
    }
    v4mk_plan_free(&p);
    if (rc) {
        v4_print_error("mkmodel", &err);
        return 1;
    }
    return 0;
}
