/* test_cuda_plan.c - the CUDA decode mode's choice and memory split
 * (kernels/cuda/cuda_plan.h), a pure function tested on the CPU with made-up sizes:
 * the full V4-Flash (~156 GB) on one H200 (139 GiB) -> the resident step with paged
 * experts (not hybrid), a small model -> every expert resident, explicit settings
 * respected (hybrid, a V4_GPU_EXPERT_MEM budget, resident that cannot fit -> a precise
 * error), and no room for one step's experts -> hybrid; and the fast mode's MoE path
 * by rows per expert (grouped for decode, tensor cores for large prefill chunks). */
#include <string.h>

#include "kernels/cuda/cuda_plan.h"
#include "testutil.h"

#define GiB ((size_t)1 << 30)

static v4_cuda_plan_in flash(v4_cuda_mode_req mode, size_t budget)
{
    /* V4-Flash: ~156 GB = 145 GiB, of which the routed experts ~135 GiB; an H200
     * shows ~139 GiB, ~138 free after the context */
    return (v4_cuda_plan_in){.mode = mode,
                             .free_bytes = 138 * GiB,
                             .trunk_bytes = 10 * GiB,
                             .experts_bytes = 135 * GiB,
                             .slot_bytes = 12 << 20,
                             .step_experts = 256,
                             .headroom = GiB,
                             .budget = budget};
}

int main(void)
{
    v4_cuda_plan p;
    v4_error err = {0};
    v4_cuda_plan_in in = flash(V4_CUDA_REQ_AUTO, 0);
    CHECK(v4_cuda_auto_plan(&in, &p, &err) == 0 && p.resident && p.expert_budget == 127 * GiB &&
              p.pool_bytes == 127 * GiB && p.trunk_bytes == 10 * GiB && p.headroom == GiB,
          "flash auto: resident %d, budget %zu (want 127 GiB)", p.resident, p.expert_budget);
    CHECK(p.trunk_bytes + p.pool_bytes + p.headroom <= in.free_bytes, "flash split within the free memory");
    CHECK(strstr(p.why, "paged") != NULL, "why: %s", p.why);
    in.mode = V4_CUDA_REQ_RESIDENT;
    CHECK(v4_cuda_auto_plan(&in, &p, &err) == 0 && p.resident && p.expert_budget == 127 * GiB, "flash resident: paged");

    /* a small model fits: every expert resident (budget 0) */
    in = (v4_cuda_plan_in){.mode = V4_CUDA_REQ_AUTO, .free_bytes = 138 * GiB, .trunk_bytes = GiB,
                           .experts_bytes = 4 * GiB, .slot_bytes = 1 << 20, .step_experts = 8, .headroom = GiB};
    CHECK(v4_cuda_auto_plan(&in, &p, &err) == 0 && p.resident && p.expert_budget == 0 && p.pool_bytes == 4 * GiB,
          "small auto: all resident (budget %zu)", p.expert_budget);
    /* exactly fitting (trunk + experts + headroom == free) is still all resident */
    in.free_bytes = 6 * GiB;
    CHECK(v4_cuda_auto_plan(&in, &p, &err) == 0 && p.resident && p.expert_budget == 0, "exact fit: all resident");
    in.free_bytes = 6 * GiB - 1;
    CHECK(v4_cuda_auto_plan(&in, &p, &err) == 0 && p.resident && p.expert_budget == 4 * GiB - 1,
          "one byte short: paged in %zu", p.expert_budget);

    /* explicit settings */
    in = flash(V4_CUDA_REQ_HYBRID, 0);
    CHECK(v4_cuda_auto_plan(&in, &p, &err) == 0 && !p.resident, "hybrid asked: hybrid");
    in = flash(V4_CUDA_REQ_AUTO, 12 * GiB);
    CHECK(v4_cuda_auto_plan(&in, &p, &err) == 0 && p.resident && p.expert_budget == 12 * GiB,
          "V4_GPU_EXPERT_MEM=12G: budget %zu", p.expert_budget);
    in = flash(V4_CUDA_REQ_AUTO, 200 * GiB);     /* above the experts: capped */
    CHECK(v4_cuda_auto_plan(&in, &p, &err) == 0 && !p.resident, "a budget that does not fit: auto -> hybrid");
    in.mode = V4_CUDA_REQ_RESIDENT;
    CHECK(v4_cuda_auto_plan(&in, &p, &err) == 0 && p.resident && p.expert_budget == 135 * GiB,
          "resident with a budget above the experts: capped at %zu", p.expert_budget);
    in = (v4_cuda_plan_in){.mode = V4_CUDA_REQ_AUTO, .free_bytes = 138 * GiB, .trunk_bytes = GiB,
                           .experts_bytes = 4 * GiB, .slot_bytes = 1 << 20, .step_experts = 8, .headroom = GiB,
                           .budget = GiB};
    CHECK(v4_cuda_auto_plan(&in, &p, &err) == 0 && p.resident && p.expert_budget == GiB,
          "small model with a budget: paged as asked");

    /* no room for one step's experts next to the trunk */
    in = flash(V4_CUDA_REQ_AUTO, 0);
    in.free_bytes = 12 * GiB;       /* 1 GiB after trunk + headroom < 256 x 12 MiB = 3 GiB */
    CHECK(v4_cuda_auto_plan(&in, &p, &err) == 0 && !p.resident && strstr(p.why, "no room"), "tiny device: hybrid");
    in.mode = V4_CUDA_REQ_RESIDENT;
    err = (v4_error){0};
    CHECK(v4_cuda_auto_plan(&in, &p, &err) == -1 && err.code == V4_ERR_NOMEM && strstr(err.msg, "hybrid") &&
              strstr(err.msg, "12.00 GiB free"),
          "resident impossible: %s", err.msg);
    in.free_bytes = 5 * GiB;        /* below the trunk + headroom: no underflow */
    in.mode = V4_CUDA_REQ_AUTO;
    CHECK(v4_cuda_auto_plan(&in, &p, &err) == 0 && !p.resident, "below the trunk: hybrid");

    v4_cuda_mode_req r;
    CHECK(!v4_cuda_mode_req_parse("", &r) && r == V4_CUDA_REQ_AUTO && !v4_cuda_mode_req_parse("hybrid", &r) &&
              r == V4_CUDA_REQ_HYBRID && !v4_cuda_mode_req_parse("resident", &r) && r == V4_CUDA_REQ_RESIDENT &&
              v4_cuda_mode_req_parse("Resident", &r) == -1,
          "mode names");

    /* the fast mode's MoE path: grouped while rows per routed expert <= 4 */
    CHECK(v4_cuda_fast_moe_grouped(1, 6, 256) && v4_cuda_fast_moe_grouped(64, 6, 256) &&
              v4_cuda_fast_moe_grouped(170, 6, 256) && !v4_cuda_fast_moe_grouped(171, 6, 256) &&
              !v4_cuda_fast_moe_grouped(256, 6, 256),
          "V4-Flash (K 6, E 256): decode up to 170 rows grouped, a 256-row prefill chunk on the tensor cores");
    CHECK(v4_cuda_fast_moe_grouped(16, 4, 16) && !v4_cuda_fast_moe_grouped(17, 4, 16) &&
              v4_cuda_fast_moe_grouped(3, 4, 16),
          "tiny (K 4, E 16): up to 16 rows grouped");
    CHECK(!v4_cuda_fast_moe_grouped(0, 6, 256) && !v4_cuda_fast_moe_grouped(4, 0, 256) &&
              !v4_cuda_fast_moe_grouped(4, 6, 0),
          "no rows / experts: not grouped");
    TEST_DONE();
}
