/* stats_report.h - print the `v4fleet stats` report (text table or one JSON object)
 * from a v4_umat matrix; no Redis, no option parsing.
 *
 * Text: a header (model, prefix, source, tasks, tokens, shape), one row per layer
 * (routed tokens = assignments / K, population std of the per-expert counts over all
 * E experts, CV = std / mean, max / mean, idle experts, top-N experts as id(share%)),
 * then a fleet line (mean CV over the layers with data, the worst layer, idle
 * experts).  JSON: the same figures, full precision (10 significant digits), null
 * where a figure is undefined (a layer without data).
 *
 * Ownership: borrows everything; allocates only temporaries.
 * Thread: main thread (writes to the given FILE).
 */
#ifndef V4_STATS_REPORT_H
#define V4_STATS_REPORT_H

#include <stddef.h>
#include <stdio.h>

#include "config/error.h"
#include "telemetry/stats_util.h"

typedef struct v4_stats_report {
    const char *model, *prefix;
    const char *redis;               /* URL without password */
    const char *const *buckets;      /* bucket names summed; none: the total hash */
    size_t n_buckets;
    int hours;                       /* --hours H (buckets summed), 0: --bucket or total */
    int top_n;
    const char *png_path;            /* NULL: no heatmap written */
    int png_w, png_h;
} v4_stats_report;

void v4_stats_print_text(FILE *f, const v4_stats_report *r, const v4_umat *u);
int v4_stats_print_json(FILE *f, const v4_stats_report *r, const v4_umat *u, v4_error *err);

#endif
