/* cmd_cachesim.c - `v4fleet cachesim`: replay a routing trace through the expert cache
 * policies (cache/xpolicy.h; no I/O) and Belady's offline MIN at one byte budget,
 * and print hit rate, misses, evictions and bytes read per token for each.
 *
 * Design: the trace is loaded once (worker/tools/cachesim_trace.c), each policy replays it
 * (worker/tools/cachesim_replay.c).  Slots = floor(budget / slot bytes), slot bytes = the
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

static void usage(FILE *f)
{
    fprintf(f,
        "usage: v4fleet cachesim --trace FILE --budget-bytes B (--block-bytes N | --model DIR)\n"
        "                        [--policy lru|slru|lfru|all] [--slru-protected N] [--lfru-age N]\n"
        "\n"
        "Replays a routing trace through the expert cache's eviction policies (no I/O) and\n"
        "prints, per policy and for Belady's offline optimum (MIN: evict the expert whose\n"
        "next use is farthest away), the hit rate, misses, evictions and bytes read per token.\n"
        "\n"
        "  --trace FILE       `v4fleet logits --trace` JSON lines (one token per line, the\n"
        "                     \"experts\" of every layer), or plain text: \"layer expert\" per\n"
        "                     line ('#' comments), tokens separated by blank lines (a file\n"
        "                     without blank lines: every line is one token).  Auto-detected.\n"
        "  --budget-bytes B   host cache bytes; slots = floor(B / block bytes)\n"
        "  --block-bytes N    bytes of one expert block (rounded up to %d)\n"
        "  --model DIR        take the block size (and the expert count) from DIR/config.json\n"
        "  --policy P         lru, slru, lfru or all (default all); MIN is always shown\n"
        "  --slru-protected N SLRU protected segment in slots (default slots - max(1, slots/5))\n"
        "  --lfru-age N       LFRU halves all counts every N accesses (default 16 x layers x experts)\n"
        "\n"
        "Rule: the experts of one token (all its layers) are pinned together while the token\n"
        "is processed - a token's working set cannot evict itself - so the budget must hold\n"
        "the largest per-token working set (an error says which token needs more).  Every\n"
        "miss loads its block (no bypass); compulsory first misses are included.\n",
        V4_XBLOCK_ALIGN);
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

int v4_cmd_cachesim(int argc, char **argv)
{
    const char *trace = NULL, *model = NULL, *policy = "all";
    long long budget = -1, block = -1, prot = -1, age = 0;
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
                       : !strcmp(a, "--slru-protected") ? &prot : !strcmp(a, "--lfru-age") ? &age : NULL;
        if (num) {
            if (parse_size(v, num)) {
                fprintf(stderr, "v4fleet cachesim: %s: bad number '%s'\n", a, v);
                return 2;
            }
        } else if (!strcmp(a, "--trace")) {
            trace = v;
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
    v4_xpolicy_kind only = V4_XPOL_LRU;
    int all = !strcmp(policy, "all");
    if (!all && v4_xpolicy_parse(policy, &only)) {
        fprintf(stderr, "v4fleet cachesim: unknown policy '%s' (lru, slru, lfru, all)\n", policy);
        return 2;
    }
    if (!trace || budget < 0 || (block < 0) == !model) {
        fprintf(stderr, "v4fleet cachesim: need --trace, --budget-bytes and one of --block-bytes / --model\n");
        usage(stderr);
        return 2;
    }
    v4_error err = {0};
    int n_experts = 0;
    if (model) {
        char path[4096];
        v4_config cfg;
        snprintf(path, sizeof path, "%s/config.json", model);
        if (v4_config_load(path, &cfg, &err)) {
            fprintf(stderr, "v4fleet cachesim: %s: %s\n", err.where, err.msg);
            return 1;
        }
        v4_xblock_layout lo;
        v4_xblock_layout_of(&cfg, &lo);
        block = (long long)lo.bytes;
        n_experts = cfg.n_routed_experts;
    }
    if (block <= 0) {
        fprintf(stderr, "v4fleet cachesim: --block-bytes must be > 0\n");
        return 2;
    }
    size_t slot = ((size_t)block + V4_XBLOCK_ALIGN - 1) / V4_XBLOCK_ALIGN * V4_XBLOCK_ALIGN;
    long long slots_ll = budget / (long long)slot;
    int slots = slots_ll > 1 << 30 ? 1 << 30 : (int)slots_ll;
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
           slot, budget, slots, 100.0 * slots / all_keys, 100.0 * slots / t.n_distinct, t.max_step_keys);
    printf("%-8s %9s %10s %10s %10s %14s %12s\n", "policy", "hit_rate", "hits", "misses", "evictions",
           "bytes/token", "MiB/token");
    v4_xpolicy_params pp = {(int)(prot > 1 << 30 ? 1 << 30 : prot), age};
    int rc = 0;
    v4_simresult r;
    for (int k = 0; k < V4_XPOL_COUNT && !rc; k++) {
        if (!all && k != (int)only)
            continue;
        if (v4_sim_policy(&t, (v4_xpolicy_kind)k, &pp, slots, &r, &err))
            rc = 1;
        else
            row(v4_xpolicy_name((v4_xpolicy_kind)k), &r, &t, slot);
    }
    if (!rc) {
        if (v4_sim_belady(&t, slots, &r, &err))
            rc = 1;
        else
            row("belady", &r, &t, slot);
    }
    if (rc)
        fprintf(stderr, "v4fleet cachesim: %s: %s\n", err.where, err.msg);
    v4_simtrace_free(&t);
    return rc;
}
