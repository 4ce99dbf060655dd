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
    if (strcmp(be->ops->name, "cpu")) {   /* a device step that takes prefill chunks, or one row per sequence */
        if (!ctx || v4_ctx_rows_per_seq(ctx) <= 1)
            return floor_rows;
        const int rows = want_rows < v4_ctx_max_rows(ctx) ? want_rows : v4_ctx_max_rows(ctx);
        return rows > floor_rows ? rows : floor_rows;
    }
    int rows = want_rows;
    if (xp && cfg->n_act_experts > 0) {
        v4_xcache_stats st;
        v4_xprov_stats(xp, &st);
        const int fit = st.slots / cfg->n_act_experts;
        if (fit < rows)
            rows = fit;
    }
    return rows > floor_rows ? rows : floor_rows;
}
