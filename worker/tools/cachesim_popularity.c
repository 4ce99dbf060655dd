/* cachesim_popularity.c - the popularity file of `v4fleet cachesim --popularity`
 * (cachesim_lib.h v4_popularity_load): per (layer, expert) routing counts, as
 * `v4fleet stats --counts` writes them from the fleet's Redis counters, so that the
 * synthetic traces carry the skew of real routing instead of a Zipf fit.
 * Ownership: *w is malloc'd for the caller.  Thread: any.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cachesim_lib.h"

/* err = code, where "path:line", the message */
static void at(v4_error *err, v4_errcode code, const char *path, int ln, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void at(v4_error *err, v4_errcode code, const char *path, int ln, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err->code = code;
    snprintf(err->where, sizeof err->where, "%.200s:%d", path, ln);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
}

int v4_popularity_load(const char *path, int n_layers, int n_experts, int top_k, double **w, int *uniform,
                       double *total, v4_error *err)
{
    *w = NULL;
    *uniform = 0;
    *total = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return v4_err_set(err, V4_ERR_IO, path, "cannot open: %s", strerror(errno));
    const size_t n = (size_t)n_layers * (size_t)n_experts;
    double *c = calloc(n ? n : 1, sizeof(double));
    unsigned char *seen = calloc(n ? n : 1, 1);
    char line[512];
    int ln = 0, rc = -1;
    if (!c || !seen) {
        v4_err_set(err, V4_ERR_NOMEM, path, "out of memory");
        goto out;
    }
    while (fgets(line, sizeof line, f)) {
        ln++;
        char *s = line + strspn(line, " \t");
        if (*s == '#' || *s == '\n' || *s == '\r' || !*s)
            continue;
        long l, e;
        double v;
        char tail;
        if (sscanf(s, "%ld %ld %lf %c", &l, &e, &v, &tail) != 3 || !(v >= 0) || v > 1e18) {
            at(err, V4_ERR_FORMAT, path, ln, "want 'layer expert count' (a count >= 0)");
            goto out;
        }
        if (l < 0 || l >= n_layers || e < 0 || e >= n_experts) {
            at(err, V4_ERR_RANGE, path, ln, "layer %ld expert %ld outside the model's %d layers x %d experts", l, e,
               n_layers, n_experts);
            goto out;
        }
        const size_t k = (size_t)l * (size_t)n_experts + (size_t)e;
        if (seen[k]) {
            at(err, V4_ERR_FORMAT, path, ln, "layer %ld expert %ld listed twice", l, e);
            goto out;
        }
        seen[k] = 1;
        c[k] = v;
        *total += v;
    }
    if (ferror(f)) {
        v4_err_set(err, V4_ERR_IO, path, "read failed: %s", strerror(errno));
        goto out;
    }
    for (int l = 0; l < n_layers; l++) {
        int positive = 0;
        for (int e = 0; e < n_experts; e++)
            positive += c[(size_t)l * n_experts + e] > 0;
        *uniform += positive < top_k;
    }
    if (*uniform == n_layers) {
        v4_err_set(err, V4_ERR_INVALID, path, "no layer has %d experts with a count > 0: nothing to draw from", top_k);
        goto out;
    }
    *w = c;
    c = NULL;
    rc = 0;
out:
    fclose(f);
    free(c);
    free(seen);
    return rc;
}
