/* test_cuda_plan.c - the CUDA decode mode's choice and memory split
 * (kernels/cuda/cuda_plan.h), a pure function tested on the CPU with made-up sizes:
 * the full V4-Flash (~156 GB) on one H200 (139 GiB) -> the resident step with paged
 * experts (not hybrid), a small model -> every expert resident, explicit settings
 * respected (hybrid, a V4_GPU_EXPERT_MEM budget, resident that cannot fit -> a precise
 * error), and no room for one step's experts -> hybrid; the sequences' reserve
 * (V4_GPU_SEQ_MEM, the default from the tasks' claims, capped); and the fast mode's MoE path
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

    /* the sequences' reserve (V4_GPU_SEQ_MEM, else every task at the full context, at most
     * an eighth of the device after the trunk unless one task needs more) */
    const size_t MiB = (size_t)1 << 20;
    in = flash(V4_CUDA_REQ_AUTO, 0);
    in.seq_claim = 447 * MiB;       /* one 64k-token V4-Flash sequence */
    in.seq_tasks = 2;
    CHECK(v4_cuda_auto_plan(&in, &p, &err) == 0 && p.resident && p.seq_bytes == 894 * MiB &&
              p.expert_budget == 127 * GiB - 894 * MiB && strstr(p.seq_why, "every task"),
          "two 64k tasks: sequences %zu, experts %zu (%s)", p.seq_bytes, p.expert_budget, p.seq_why);
    CHECK(p.trunk_bytes + p.pool_bytes + p.seq_bytes + p.headroom == in.free_bytes, "the split adds up");
    in.seq_tasks = 64;              /* 28 GiB asked: capped at 127 / 8 GiB */
    CHECK(v4_cuda_auto_plan(&in, &p, &err) == 0 && p.resident && p.seq_bytes == 127 * GiB / 8 &&
              p.expert_budget == 127 * GiB - 127 * GiB / 8 && strstr(p.seq_why, "eighth"),
          "64 tasks: sequences capped at %zu (%s)", p.seq_bytes, p.seq_why);
    in.seq_claim = 20 * GiB;        /* one task above the cap still fits alone */
    in.seq_tasks = 4;
    CHECK(v4_cuda_auto_plan(&in, &p, &err) == 0 && p.resident && p.seq_bytes == 20 * GiB &&
              strstr(p.seq_why, "one task"),
          "one long task: sequences %zu (%s)", p.seq_bytes, p.seq_why);
    in.seq_claim = 126 * GiB;       /* the default reserve shrinks to leave one step's experts (3 GiB) */
    in.seq_tasks = 1;
    CHECK(v4_cuda_auto_plan(&in, &p, &err) == 0 && p.resident && p.expert_budget == 3 * GiB &&
              p.seq_bytes == 124 * GiB,
          "huge claim: experts %zu, sequences %zu", p.expert_budget, p.seq_bytes);
    in.seq_claim = 200 * GiB;       /* one claim above everything: still leaves one step's experts */
    CHECK(v4_cuda_auto_plan(&in, &p, &err) == 0 && p.resident && p.expert_budget == 3 * GiB &&
              p.seq_bytes == 124 * GiB,
          "claim above the device: experts %zu, sequences %zu", p.expert_budget, p.seq_bytes);
    in.seq_claim = 447 * MiB;
    in.seq_budget = 10 * GiB;       /* explicit: as asked */
    CHECK(v4_cuda_auto_plan(&in, &p, &err) == 0 && p.resident && p.seq_bytes == 10 * GiB &&
              p.expert_budget == 117 * GiB && !strcmp(p.seq_why, "V4_GPU_SEQ_MEM"),
          "V4_GPU_SEQ_MEM=10G: sequences %zu, experts %zu", p.seq_bytes, p.expert_budget);
    in.seq_budget = 125 * GiB;      /* explicit and leaving less than one step: hybrid / an error */
    CHECK(v4_cuda_auto_plan(&in, &p, &err) == 0 && !p.resident, "V4_GPU_SEQ_MEM too large: auto -> hybrid");
    in.mode = V4_CUDA_REQ_RESIDENT;
    err = (v4_error){0};
    CHECK(v4_cuda_auto_plan(&in, &p, &err) == -1 && err.code == V4_ERR_NOMEM && strstr(err.msg, "sequences 125.00"),
          "resident impossible with the sequences: %s", err.msg);
    in = flash(V4_CUDA_REQ_AUTO, 100 * GiB);    /* explicit expert budget: the sequences get the rest */
    in.seq_claim = 447 * MiB;
    in.seq_tasks = 2;
    CHECK(v4_cuda_auto_plan(&in, &p, &err) == 0 && p.resident && p.expert_budget == 100 * GiB &&
              p.seq_bytes == 27 * GiB && strstr(p.seq_why, "rest"),
          "V4_GPU_EXPERT_MEM=100G: sequences %zu", p.seq_bytes);
    in.seq_budget = 28 * GiB;       /* both explicit and too much together: auto -> hybrid */
    CHECK(v4_cuda_auto_plan(&in, &p, &err) == 0 && !p.resident, "expert + sequence budgets over the free memory");
    in = (v4_cuda_plan_in){.mode = V4_CUDA_REQ_AUTO, .free_bytes = 138 * GiB, .trunk_bytes = GiB,
                           .experts_bytes = 4 * GiB, .slot_bytes = 1 << 20, .step_experts = 8, .headroom = GiB,
                           .seq_claim = 100 * MiB, .seq_tasks = 4};
    CHECK(v4_cuda_auto_plan(&in, &p, &err) == 0 && p.resident && p.expert_budget == 0 && p.seq_bytes == 132 * GiB,
          "every expert resident: the sequences get the rest (%zu)", p.seq_bytes);
    in.free_bytes = 6 * GiB + 399 * MiB;        /* all experts + 4 claims do not fit: page the experts */
    CHECK(v4_cuda_auto_plan(&in, &p, &err) == 0 && p.resident && p.expert_budget == 4 * GiB - MiB &&
              p.seq_bytes == 400 * MiB,
          "all resident would crowd out the sequences: experts %zu, sequences %zu", p.expert_budget, p.seq_bytes);

    /* synthetic experts (no bytes to upload) page even when they would all fit */
    in.free_bytes = 138 * GiB;
    in.must_page = 1;
    CHECK(v4_cuda_auto_plan(&in, &p, &err) == 0 && p.resident && p.expert_budget == 4 * GiB &&
              p.seq_bytes == 132 * GiB && strstr(p.why, "paged"),
          "synthetic experts: paged in slots for all (%zu), sequences %zu", p.expert_budget, p.seq_bytes);

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
