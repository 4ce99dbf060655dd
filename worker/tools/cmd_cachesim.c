/* cmd_cachesim.c - `v4fleet cachesim`: replay a routing trace through the expert cache
 * policies (kernels/xpolicy.h; no I/O) and Belady's offline MIN at one byte budget,
 * and print hit rate, misses, evictions and bytes read per token for each.
 *
 * Design: the trace is loaded once (worker/tools/cachesim_trace.c) or made per batch size
 * (--synth: worker/tools/cachesim_synth.c), each policy replays it
 * (worker/tools/cachesim_replay.c); with --synth a summary table gives every policy's
 * misses against Belady's at each batch size.  Slots = floor(budget / slot bytes), slot bytes = the
 * expert block size (--block-bytes, or the block layout of --model DIR's config)
 * rounded up to V4_XBLOCK_ALIGN, as in the host cache.
 * Ownership: everything is local to the call.  Thread: main thread only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/expert_block.h"
#include "cachesim_lib.h"
#include "commands.h"
#include "config/model_config.h"
#include "mkmodel.h"

static void usage(FILE *f)
{
    fprintf(f,
        "usage: v4fleet cachesim (--trace FILE | --synth PRESET) (--budget-bytes B | --budget-pct P)\n"
        "                        [--block-bytes N | --model DIR] [--policy lru|slru|lfru|next|all]\n"
        "                        [--slru-protected N] [--lfru-age N]\n"
        "                        [--batch LIST] [--zipf Z | --popularity FILE] [--steps N] [--seed S]\n"
        "                                                                          (with --synth)\n"
        "\n"
        "Replays a routing trace through the expert cache's eviction policies (no I/O) and\n"
        "prints, per policy and for Belady's offline optimum (MIN: evict the expert whose\n"
        "next use is farthest away), the hit rate, misses, evictions and bytes read per token.\n"
        "\n"
        "  --trace FILE       `v4fleet logits --trace` JSON lines (one token per line, the\n"
        "                     \"experts\" of every layer), or plain text: \"layer expert\" per\n"
        "                     line ('#' comments), tokens separated by blank lines (a file\n"
        "                     without blank lines: every line is one token).  Auto-detected.\n"
        "  --synth PRESET     instead of a file, synthetic traces at a model's shape (%s:\n"
        "                     layers, experts, top-k, hash layers, block size): steps of\n"
        "                     --batch rows, each (step, layer) one pinned group of the union of\n"
        "                     its rows' experts; Zipf popularity per layer (uniform on hash\n"
        "                     layers); one table per batch size, then a summary vs Belady\n"
        "  --batch LIST       rows per step, comma-separated (default 1,16,64,128,256)\n"
        "  --zipf Z           popularity exponent (default 0.9)\n"
        "  --popularity FILE  the fleet's routing skew instead of Zipf: 'layer expert count'\n"
        "                     lines (`v4fleet stats --counts FILE` writes them from Redis);\n"
        "                     each layer draws from its counts (fewer than top-k counted:\n"
        "                     uniform)\n"
        "  --steps N          steps per trace (default: about 3M accesses per trace)\n"
        "  --seed S           trace seed (default 1)\n"
        "  --budget-bytes B   host cache bytes; slots = floor(B / block bytes)\n"
        "  --budget-pct P     slots = P%% of the model's routed experts (layers x experts)\n"
        "  --block-bytes N    bytes of one expert block (rounded up to %d)\n"
        "  --model DIR        take the block size (and the expert count) from DIR/config.json\n"
        "  --policy P         lru, slru, lfru, next or all (default all); MIN is always shown\n"
        "  --slru-protected N SLRU protected segment in slots (default slots - max(1, slots/5))\n"
        "  --lfru-age N       LFRU/NEXT halve all counts every N accesses (default 16 x layers x experts)\n"
        "\n"
        "Rule: the experts of one token (all its layers) are pinned together while the token\n"
        "is processed - a token's working set cannot evict itself - so the budget must hold\n"
        "the largest per-token working set (an error says which token needs more).  Every\n"
        "miss loads its block (no bypass); compulsory first misses are included.\n",
        v4mk_preset_names(), V4_XBLOCK_ALIGN);
}

static int parse_size(const char *s, long long *v)
{
    char *end;
    *v = strtoll(s, &end, 10);
    return end != s && !*end && *v >= 0 ? 0 : -1;
}

static void row(const char *name, const v4_simresult *r, const v4_simtrace *t, size_t block)
{
    int64_t acc = r->hits + r->misses;
    printf("%-8s %8.2f%% %10lld %10lld %10lld %14.0f %12.3f\n", name, acc ? 100.0 * (double)r->hits / (double)acc : 0.0,
           (long long)r->hits, (long long)r->misses, (long long)r->evictions,
           (double)r->misses * (double)block / t->n_steps,
           (double)r->misses * (double)block / t->n_steps / (1024.0 * 1024.0));
}

enum { MAXB = 16 };

typedef struct sim_opts {
    int all;
    v4_xpolicy_kind only;
    v4_xpolicy_params pp;
    size_t slot;
    int slots;
    int synth;      /* also the best fixed set ("static", v4_sim_static) */
} sim_opts;

/* Every selected policy and MIN on t; misses[k] per policy, misses[V4_XPOL_COUNT] = MIN, [V4_XPOL_COUNT + 1] = the best fixed set (synth). */
static int replay_all(const sim_opts *o, const v4_simtrace *t, int64_t *misses, v4_error *err)
{
    printf("%-8s %9s %10s %10s %10s %14s %12s\n", "policy", "hit_rate", "hits", "misses", "evictions",
           "bytes/token", "MiB/token");
    v4_xpolicy_params pp = o->pp;
    pp.n_layers = t->n_layers;
    v4_simresult r;
    for (int k = 0; k < V4_XPOL_COUNT; k++) {
        misses[k] = -1;
        if (!o->all && k != (int)o->only)
            continue;
        if (v4_sim_policy(t, (v4_xpolicy_kind)k, &pp, o->slots, &r, err))
            return -1;
        row(v4_xpolicy_name((v4_xpolicy_kind)k), &r, t, o->slot);
        misses[k] = r.misses;
    }
    if (v4_sim_belady(t, o->slots, &r, err))
        return -1;
    row("belady", &r, t, o->slot);
    misses[V4_XPOL_COUNT] = r.misses;
    if (o->synth) {
        if (v4_sim_static(t, o->slots, &r, err))
            return -1;
        row("static", &r, t, o->slot);
        misses[V4_XPOL_COUNT + 1] = r.misses;
    }
    return 0;
}

static int parse_batches(const char *s, int *b, int *nb)
{
    *nb = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > 1 << 20 || *nb == MAXB || (*end && *end != ','))
            return -1;
        b[(*nb)++] = (int)v;
        s = *end ? end + 1 : end;
    }
    return *nb ? 0 : -1;
}

static void summary(const sim_opts *o, const v4_synthspec *sp, const char *popularity, const int *batches, int nb,
                    int64_t (*m)[V4_XPOL_COUNT + 2])
{
    char pop[4200];
    if (popularity)
        snprintf(pop, sizeof pop, "popularity %s", popularity);
    else
        snprintf(pop, sizeof pop, "zipf %.2f", sp->zipf);
    printf("\nsummary: misses vs Belady's MIN, %d layers x %d experts, top-%d, %s, %d slots "
           "(%.1f%% of the experts)\n", sp->n_layers, sp->n_experts, sp->top_k, pop, o->slots,
           100.0 * o->slots / ((double)sp->n_layers * sp->n_experts));
    printf("| batch | belady misses | best fixed set |");
    for (int k = 0; k < V4_XPOL_COUNT; k++)
        if (m[0][k] >= 0)
            printf(" %s |", v4_xpolicy_name((v4_xpolicy_kind)k));
    printf("\n|---|---|---|");
    for (int k = 0; k < V4_XPOL_COUNT; k++)
        if (m[0][k] >= 0)
            printf("---|");
    printf("\n");
    for (int i = 0; i < nb; i++) {
        printf("| %d | %lld | %.2fx |", batches[i], (long long)m[i][V4_XPOL_COUNT],
               m[i][V4_XPOL_COUNT] ? (double)m[i][V4_XPOL_COUNT + 1] / (double)m[i][V4_XPOL_COUNT] : 0.0);
        for (int k = 0; k < V4_XPOL_COUNT; k++)
            if (m[i][k] >= 0)
                printf(" %.2fx |", m[i][V4_XPOL_COUNT] ? (double)m[i][k] / (double)m[i][V4_XPOL_COUNT] : 0.0);
        printf("\n");
    }
}

int v4_cmd_cachesim(int argc, char **argv)
{
    const char *trace = NULL, *model = NULL, *policy = "all", *synth = NULL, *batch_list = "1,16,64,128,256";
    const char *zipf_s = NULL, *popularity = NULL;
    long long budget = -1, block = -1, prot = -1, age = 0, pct = -1, steps = 0, seed = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "v4fleet cachesim: '%s' needs a value or is unknown\n", argv[i]);
            usage(stderr);
            return 2;
        }
        const char *a = argv[i], *v = argv[++i];
        long long *num = !strcmp(a, "--budget-bytes") ? &budget : !strcmp(a, "--block-bytes") ? &block
                       : !strcmp(a, "--slru-protected") ? &prot : !strcmp(a, "--lfru-age") ? &age
                       : !strcmp(a, "--budget-pct") ? &pct : !strcmp(a, "--steps") ? &steps
                       : !strcmp(a, "--seed") ? &seed : NULL;
        if (num) {
            if (parse_size(v, num)) {
                fprintf(stderr, "v4fleet cachesim: %s: bad number '%s'\n", a, v);
                return 2;
            }
        } else if (!strcmp(a, "--trace")) {
            trace = v;
        } else if (!strcmp(a, "--synth")) {
            synth = v;
        } else if (!strcmp(a, "--batch")) {
            batch_list = v;
        } else if (!strcmp(a, "--zipf")) {
            zipf_s = v;
        } else if (!strcmp(a, "--popularity")) {
            popularity = v;
        } else if (!strcmp(a, "--model")) {
            model = v;
        } else if (!strcmp(a, "--policy")) {
            policy = v;
        } else {
            fprintf(stderr, "v4fleet cachesim: unexpected argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    sim_opts o = {.all = !strcmp(policy, "all"), .only = V4_XPOL_LRU, .synth = synth != NULL};
    if (!o.all && v4_xpolicy_parse(policy, &o.only)) {
        fprintf(stderr, "v4fleet cachesim: unknown policy '%s' (lru, slru, lfru, next, all)\n", policy);
        return 2;
    }
    if (!trace == !synth || (budget < 0) == (pct < 0) || (block >= 0 && model) ||
        (block < 0 && !model && !synth) || pct > 100) {
        fprintf(stderr, "v4fleet cachesim: need one of --trace / --synth, one of --budget-bytes / --budget-pct "
                        "(0-100), and (with --trace) one of --block-bytes / --model\n");
        usage(stderr);
        return 2;
    }
    if ((zipf_s || popularity) && !synth) {
        fprintf(stderr, "v4fleet cachesim: --zipf and --popularity shape the --synth traces\n");
        return 2;
    }
    if (zipf_s && popularity) {
        fprintf(stderr, "v4fleet cachesim: --zipf and --popularity exclude each other\n");
        return 2;
    }
    if (!zipf_s)
        zipf_s = "0.9";
    int batches[MAXB], nb = 0;
    char *zend;
    double zipf = strtod(zipf_s, &zend);
    if (synth && (parse_batches(batch_list, batches, &nb) || zend == zipf_s || *zend || !(zipf >= 0 && zipf <= 8))) {
        fprintf(stderr, "v4fleet cachesim: --batch wants up to %d positive counts (1,16,64) and --zipf 0..8\n", MAXB);
        return 2;
    }
    v4_error err = {0};
    int n_experts = 0;
    v4_config cfg;
    if (model || synth) {
        if (model) {
            char path[4096];
            snprintf(path, sizeof path, "%s/config.json", model);
            if (v4_config_load(path, &cfg, &err)) {
                fprintf(stderr, "v4fleet cachesim: %s: %s\n", err.where, err.msg);
                return 1;
            }
        } else if (v4mk_preset(synth, 0, &cfg, &err)) {
            fprintf(stderr, "v4fleet cachesim: --synth: %s (%s)\n", err.msg, v4mk_preset_names());
            return 2;
        }
        if (block < 0) {
            v4_xblock_layout lo;
            v4_xblock_layout_of(&cfg, &lo);
            block = (long long)lo.bytes;
        }
        n_experts = cfg.n_routed_experts;
    }
    if (block <= 0) {
        fprintf(stderr, "v4fleet cachesim: --block-bytes must be > 0\n");
        return 2;
    }
    o.slot = ((size_t)block + V4_XBLOCK_ALIGN - 1) / V4_XBLOCK_ALIGN * V4_XBLOCK_ALIGN;
    o.pp = (v4_xpolicy_params){(int)(prot > 1 << 30 ? 1 << 30 : prot), age, 0};
    if (synth) {
        double *weights = NULL;
        if (popularity) {
            int uniform = 0;
            double total = 0;
            if (v4_popularity_load(popularity, cfg.n_layers, cfg.n_routed_experts, cfg.n_act_experts, &weights,
                                   &uniform, &total, &err)) {
                fprintf(stderr, "v4fleet cachesim: --popularity %s: %s\n", err.where, err.msg);
                return 1;
            }
            printf("popularity %s: %.0f expert assignments; %d of %d layers drawn from their counts, %d uniform "
                   "(fewer than %d experts counted)\n",
                   popularity, total, cfg.n_layers - uniform, cfg.n_layers, uniform, cfg.n_act_experts);
        }
        v4_synthspec sp = {cfg.n_layers, cfg.n_routed_experts, cfg.n_act_experts, cfg.n_hash_layers, 1, 0, zipf,
                           (uint64_t)seed, weights};
        long long all_keys = (long long)sp.n_layers * sp.n_experts;
        o.slots = pct >= 0 ? (int)(all_keys * pct / 100) : (int)(budget / (long long)o.slot);
        int64_t (*m)[V4_XPOL_COUNT + 2] = calloc((size_t)nb, sizeof *m);
        int rc = m ? 0 : 1;
        for (int i = 0; i < nb && !rc; i++) {
            sp.batch = batches[i];
            int per = sp.batch * sp.top_k < sp.n_experts ? sp.batch * sp.top_k : sp.n_experts;
            sp.steps = steps > 0 ? (int)(steps > 1 << 24 ? 1 << 24 : steps)
                                 : (int)(3000000 / ((long long)sp.n_layers * per) + 1);
            v4_simtrace t;
            if (v4_simtrace_synth(&sp, &t, &err)) {
                rc = 1;
                break;
            }
            printf("%ssynthetic %s trace: batch %d, %d steps, %d groups (step x layer), %d accesses, %d distinct "
                   "experts of %lld; %d slots (%.1f%%), block %zu bytes; largest group %d\n",
                   i ? "\n" : "", synth, sp.batch, sp.steps, t.n_steps, t.n_access, t.n_distinct, all_keys,
                   o.slots, 100.0 * o.slots / (double)all_keys, o.slot, t.max_step_keys);
            if (o.slots < 1 || replay_all(&o, &t, m[i], &err))
                rc = 1;
            v4_simtrace_free(&t);
        }
        if (!rc)
            summary(&o, &sp, popularity, batches, nb, m);
        else if (!m)
            fprintf(stderr, "v4fleet cachesim: out of memory\n");
        else
            fprintf(stderr, "v4fleet cachesim: %s: %s\n", err.where[0] ? err.where : "--budget",
                    err.msg[0] ? err.msg : "no slot at this budget");
        free(m);
        free(weights);
        return rc;
    }
    if (pct >= 0) {
        fprintf(stderr, "v4fleet cachesim: --budget-pct goes with --synth (a file's trace: --budget-bytes)\n");
        return 2;
    }
    long long slots_ll = budget / (long long)o.slot;
    o.slots = slots_ll > 1 << 30 ? 1 << 30 : (int)slots_ll;
    v4_simtrace t;
    if (v4_simtrace_load(trace, n_experts, &t, &err)) {
        fprintf(stderr, "v4fleet cachesim: %s: %s\n", err.where, err.msg);
        return 1;
    }
    int all_keys = t.n_layers * t.n_experts;
    printf("trace %s: %s, %d tokens, %d expert accesses, %d distinct experts of %d (%d layers x %d)\n", trace,
           t.json ? "logits --trace JSON" : "plain", t.n_steps, t.n_access, t.n_distinct, all_keys, t.n_layers,
           t.n_experts);
    printf("block %zu bytes, budget %lld bytes = %d slots (%.1f%% of all experts, %.1f%% of the distinct); "
           "largest token working set %d\n",
           o.slot, budget, o.slots, 100.0 * o.slots / all_keys, 100.0 * o.slots / t.n_distinct, t.max_step_keys);
    int64_t misses[V4_XPOL_COUNT + 2];
    int rc = replay_all(&o, &t, misses, &err);
    if (rc)
        fprintf(stderr, "v4fleet cachesim: %s: %s\n", err.where, err.msg);
    v4_simtrace_free(&t);
    return rc ? 1 : 0;
}
