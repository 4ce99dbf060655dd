/* cuda_plan.c - the CUDA decode mode's choice and memory split (see cuda_plan.h).
 * Built into v4engine (plain C, no CUDA).  Ownership: none.  Thread: any.
 */
#include "cuda_plan.h"

#include <string.h>

#define GIB(x) ((double)(x) / 1073741824.0)

int v4_cuda_mode_req_parse(const char *s, v4_cuda_mode_req *out)
{
    if (!s || !*s || !strcmp(s, "auto"))
        *out = V4_CUDA_REQ_AUTO;
    else if (!strcmp(s, "resident"))
        *out = V4_CUDA_REQ_RESIDENT;
    else if (!strcmp(s, "hybrid"))
        *out = V4_CUDA_REQ_HYBRID;
    else
        return -1;
    return 0;
}

static int fits(const v4_cuda_plan_in *in, size_t pool)
{
    const size_t need = in->trunk_bytes + pool;
    return need >= in->trunk_bytes && need + in->headroom >= need && need + in->headroom <= in->free_bytes;
}

int v4_cuda_auto_plan(const v4_cuda_plan_in *in, v4_cuda_plan *out, v4_error *err)
{
    *out = (v4_cuda_plan){.resident = 0, .trunk_bytes = in->trunk_bytes, .headroom = in->headroom, .why = ""};
    if (in->mode == V4_CUDA_REQ_HYBRID) {
        out->why = "V4_CUDA_MODE=hybrid";
        return 0;
    }
    if (in->budget) {
        const size_t b = in->budget < in->experts_bytes ? in->budget : in->experts_bytes;
        if (in->mode == V4_CUDA_REQ_AUTO && !fits(in, b)) {
            out->why = "the resident step with the V4_GPU_EXPERT_MEM budget does not fit the free memory";
            return 0;
        }
        out->resident = 1;
        out->expert_budget = b;
        out->pool_bytes = b;
        out->why = "paged experts within V4_GPU_EXPERT_MEM";
        return 0;
    }
    if (fits(in, in->experts_bytes)) {
        out->resident = 1;
        out->pool_bytes = in->experts_bytes;
        out->why = "every expert fits the device";
        return 0;
    }
    const size_t room = in->free_bytes > in->trunk_bytes + in->headroom
                            ? in->free_bytes - in->trunk_bytes - in->headroom : 0;
    const size_t b = room < in->experts_bytes ? room : in->experts_bytes;
    const size_t one_step = (size_t)(in->step_experts > 0 ? in->step_experts : 1) * in->slot_bytes;
    if (b >= one_step && b >= in->slot_bytes) {
        out->resident = 1;
        out->expert_budget = b;
        out->pool_bytes = b;
        out->why = "the experts do not fit the device: paged within its free memory";
        return 0;
    }
    if (in->mode == V4_CUDA_REQ_RESIDENT)
        return v4_err_set(err, V4_ERR_NOMEM, "V4_CUDA_MODE",
                          "resident: %.2f GiB free, the trunk needs %.2f GiB and one step's experts %.2f GiB more "
                          "(with %.2f GiB headroom): use hybrid",
                          GIB(in->free_bytes), GIB(in->trunk_bytes), GIB(one_step), GIB(in->headroom));
    out->why = "no room for the resident step with paged experts";
    return 0;
}

int v4_cuda_fast_moe_grouped(int n, int K, int E)
{
    if (n < 1 || K < 1 || E < 1)
        return 0;
    const long pairs = (long)n * K, experts = pairs < E ? pairs : E;
    return pairs <= (long)V4_CUDA_FAST_GROUPED_ROWS * experts;
}
