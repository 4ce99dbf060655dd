/* step_rows.c - see step_rows.h. */
#include "step_rows.h"

#include <string.h>

int v4_fit_step_rows(const v4_ctx *ctx, const v4_backend *be, v4_xprov *xp, const v4_config *cfg, int want_rows,
                     int floor_rows)
{
    if (floor_rows < 1)
        floor_rows = 1;
    if (want_rows <= floor_rows)
        return floor_rows;
    int rows = want_rows;
    if (strcmp(be->ops->name, "cpu")) {   /* a device step that takes prefill chunks, or one row per sequence */
        if (!ctx || v4_ctx_rows_per_seq(ctx) <= 1)
            return floor_rows;
        if (rows > v4_ctx_max_rows(ctx))
            rows = v4_ctx_max_rows(ctx);
    }
    if (xp && cfg->n_act_experts > 0) {
        v4_xcache_stats st;
        v4_xprov_stats(xp, &st);
        const int fit = st.slots / cfg->n_act_experts;
        if (fit < rows && st.slots < cfg->n_routed_experts)   /* slots for a whole layer: any rows fit */
            rows = fit;
    }
    return rows > floor_rows ? rows : floor_rows;
}

int v4_prefill_chunk(const v4_backend *be, int asked, int max_batch)
{
    return v4_prefill_chunk_on(strcmp(be->ops->name, "cpu") != 0, asked, max_batch);
}

int v4_prefill_chunk_on(int device, int asked, int max_batch)
{
    const int cpu = !device;
    int chunk = asked > 0 ? asked : cpu ? V4_CPU_CHUNK : V4_DEVICE_CHUNK;
    if (chunk > V4_GEN_CHUNK_MAX)
        chunk = V4_GEN_CHUNK_MAX;
    if (!cpu) {
        const int room = V4_DEVICE_STEP_ROWS - (max_batch > 1 ? max_batch - 1 : 0);
        if (chunk > room)
            chunk = room;
    }
    return chunk < 1 ? 1 : chunk;
}
