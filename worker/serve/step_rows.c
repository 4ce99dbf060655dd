/* step_rows.c - see step_rows.h. */
#include "step_rows.h"

#include <string.h>

int v4_fit_step_rows(const v4_backend *be, v4_xprov *xp, const v4_config *cfg, int want_rows, int floor_rows)
{
    if (floor_rows < 1)
        floor_rows = 1;
    if (strcmp(be->ops->name, "cpu") || want_rows <= floor_rows)
        return floor_rows;
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
