/* task_prefix.c - the runner's prefix cache (worker/prefix/prefix_cache.h; docs/prefix-cache.md):
 * opening it from the runner options, its start-up line and figures, and the generation's
 * hook that caches a prompt block (see task_run_internal.h).  Restoring a prompt's cached
 * prefix happens where the job's sequence is made (task_run.c v4_runner_prepare_choice).
 * Thread: the runner's (the figures: any, the cache locks). */
#include <stdio.h>
#include <string.h>

#include "task_run_internal.h"
#include "worker/prefix/prefix_cache.h"

int v4_runner_open_prefix(v4_runner *r, const v4_runner_opts *ex, v4_error *err)
{
    v4pc_opts po = {.budget_bytes = ex->prefix_cache_bytes > 0 ? (size_t)ex->prefix_cache_bytes : 0,
                    .block = ex->prefix_block,
                    .policy = V4PC_SLRU};
    if (ex->prefix_policy && *ex->prefix_policy && v4pc_policy_parse(ex->prefix_policy, &po.policy))
        return v4_err_set(err, V4_ERR_CONFIG, "V4_PREFIX_POLICY", "'%s' is not slru, lru or fifo", ex->prefix_policy);
    if (!v4_ctx_seq_forkable(r->ctx)) {
        snprintf(r->pc_off, sizeof r->pc_off, "the device step keeps the sequences' state on the GPU");
        return 0;
    }
    r->pc = v4pc_new(&r->m.cfg, &po, err);
    return r->pc ? 0 : -1;
}

int v4_runner_prefix_figs(const v4_runner *r, v4pc_figs *f)
{
    memset(f, 0, sizeof *f);
    if (!r->pc)
        return -1;
    v4pc_figs_get(r->pc, f);
    return 0;
}

void v4_runner_describe_prefix(const v4_runner *r, char *out, size_t n)
{
    if (!r->pc) {
        snprintf(out, n, "prefix cache off%s%s%s", r->pc_off[0] ? " (" : "", r->pc_off, r->pc_off[0] ? ")" : "");
        return;
    }
    v4pc_figs f;
    v4pc_figs_get(r->pc, &f);
    snprintf(out, n, "prefix cache %.2f GiB, blocks of %d positions (%.1f MiB each, up to %llu blocks)",
             (double)f.budget / 1073741824.0, f.block, (double)v4pc_block_cost(r->pc) / 1048576.0,
             (unsigned long long)(f.budget / v4pc_block_cost(r->pc)));
}

void v4_runner_cache_block(void *ud, v4_seq *seq, int p)
{
    v4_run_job *j = ud;
    v4_error err = {0};
    if (j->r->pc && p > j->cached)
        v4pc_insert(j->r->pc, seq, j->ids.v, p, &err);   /* a failure (memory) only costs a later hit */
}
