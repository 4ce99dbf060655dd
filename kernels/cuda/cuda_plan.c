/* cuda_plan.c - the CUDA decode mode's choice and memory split (see cuda_plan.h).
 * Built into v4engine (plain C, no CUDA).  Ownership: none.  Thread: any.
 */
#include "cuda_plan.h"

#include <stdint.h>
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

/* trunk + pool + headroom + extra <= free, without overflow */
static int fits(const v4_cuda_plan_in *in, size_t pool, size_t extra)
{
    size_t need = in->trunk_bytes;
    const size_t add[3] = {pool, in->headroom, extra};
    for (int i = 0; i < 3; i++) {
        if (need + add[i] < need)
            return 0;
        need += add[i];
    }
    return need <= in->free_bytes;
}

/* free - trunk - headroom, 0 when negative */
static size_t avail_of(const v4_cuda_plan_in *in)
{
    return in->free_bytes > in->trunk_bytes + in->headroom && in->trunk_bytes + in->headroom >= in->trunk_bytes
               ? in->free_bytes - in->trunk_bytes - in->headroom
               : 0;
}

/* The sequences' reserve before the experts take their share (see the header). */
static size_t seq_reserve(const v4_cuda_plan_in *in, const char **why)
{
    if (in->seq_budget) {
        *why = "V4_GPU_SEQ_MEM";
        return in->seq_budget;
    }
    if (!in->seq_claim) {
        *why = "no reserve: the free memory";
        return 0;
    }
    const size_t tasks = (size_t)(in->seq_tasks > 1 ? in->seq_tasks : 1);
    const size_t all = in->seq_claim <= SIZE_MAX / tasks ? tasks * in->seq_claim : SIZE_MAX;
    const size_t cap = avail_of(in) / 8 > in->seq_claim ? avail_of(in) / 8 : in->seq_claim;
    *why = all <= cap                ? "every task at the full context"
           : cap == in->seq_claim ? "one task at the full context"
                                  : "an eighth of the device after the trunk";
    return all <= cap ? all : cap;
}

int v4_cuda_auto_plan(const v4_cuda_plan_in *in, v4_cuda_plan *out, v4_error *err)
{
    *out = (v4_cuda_plan){.resident = 0, .trunk_bytes = in->trunk_bytes, .headroom = in->headroom, .why = "",
                          .seq_why = ""};
    if (in->mode == V4_CUDA_REQ_HYBRID) {
        out->why = "V4_CUDA_MODE=hybrid";
        return 0;
    }
    const size_t avail = avail_of(in);
    const char *seq_why = "";
    const size_t seq = seq_reserve(in, &seq_why);
    if (in->budget) {
        const size_t b = in->budget < in->experts_bytes ? in->budget : in->experts_bytes;
        if (in->mode == V4_CUDA_REQ_AUTO && !fits(in, b, in->seq_budget)) {
            out->why = "the resident step with the V4_GPU_EXPERT_MEM budget does not fit the free memory";
            return 0;
        }
        out->resident = 1;
        out->expert_budget = b;
        out->pool_bytes = b;
        out->why = "paged experts within V4_GPU_EXPERT_MEM";
        out->seq_bytes = in->seq_budget ? in->seq_budget : avail > b ? avail - b : 0;
        out->seq_why = in->seq_budget ? seq_why : "the rest after the expert budget";
        return 0;
    }
    if (!in->must_page && fits(in, in->experts_bytes, seq)) {
        out->resident = 1;
        out->pool_bytes = in->experts_bytes;
        out->why = "every expert fits the device";
        out->seq_bytes = in->seq_budget ? in->seq_budget : seq ? avail - in->experts_bytes : 0;
        out->seq_why = in->seq_budget ? seq_why : seq ? "the rest after the experts" : seq_why;
        return 0;
    }
    const size_t one_step = (size_t)(in->step_experts > 0 ? in->step_experts : 1) * in->slot_bytes;
    size_t s = seq;
    if (!in->seq_budget && s > 0 && avail > one_step && s > avail - one_step) {
        s = avail - one_step;               /* the default reserve leaves one step's experts */
        seq_why = "what one step's experts leave";
    }
    const size_t room = avail > s ? avail - s : 0;
    const size_t b = room < in->experts_bytes ? room : in->experts_bytes;
    if (b >= one_step && b >= in->slot_bytes) {
        out->resident = 1;
        out->expert_budget = b;
        out->pool_bytes = b;
        out->why = in->must_page && b == in->experts_bytes ? "synthetic experts: paged, a slot for each"
                                          : "the experts do not fit the device: paged within its free memory";
        out->seq_bytes = s;
        out->seq_why = seq_why;
        if (b == in->experts_bytes && !in->seq_budget && s) {   /* every expert has a slot: the rest */
            out->seq_bytes = avail - b;
            out->seq_why = "the rest after the experts";
        }
        return 0;
    }
    if (in->mode == V4_CUDA_REQ_RESIDENT)
        return v4_err_set(err, V4_ERR_NOMEM, "V4_CUDA_MODE",
                          "resident: %.2f GiB free, the trunk needs %.2f GiB, one step's experts %.2f GiB and the "
                          "sequences %.2f GiB more (with %.2f GiB headroom): use hybrid",
                          GIB(in->free_bytes), GIB(in->trunk_bytes), GIB(one_step), GIB(s), GIB(in->headroom));
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
