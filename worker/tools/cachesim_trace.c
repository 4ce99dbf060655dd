/* cachesim_trace.c - load a routing trace for `v4fleet cachesim` (format rules in
 * cachesim_lib.h): JSON lines of `v4fleet logits --trace`, or plain "layer expert".
 *
 * Design: one pass over the lines appends (layer, expert) pairs and step starts to
 * growing arrays; keys are formed at the end, once the expert stride is known; a
 * second pass over the steps counts distinct keys per step with a stamp array.
 * Ownership: the v4_simtrace arrays are malloc'd (v4_simtrace_free).
 * Thread: any.
 */
#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cachesim_lib.h"

typedef struct grow {
    int *v;
    size_t n, cap;
} grow;

static int push(grow *g, int x)
{
    if (g->n == g->cap) {
        size_t nc = g->cap ? 2 * g->cap : 1024;
        int *p = realloc(g->v, nc * sizeof *p);
        if (!p)
            return -1;
        g->v = p;
        g->cap = nc;
    }
    g->v[g->n++] = x;
    return 0;
}

static const char *skip_ws(const char *s)
{
    while (*s && isspace((unsigned char)*s))
        s++;
    return s;
}

int v4_simtrace_count(v4_simtrace *t, v4_error *err)
{
    int n_keys = t->n_layers * t->n_experts;
    int *stamp = malloc(sizeof(int) * (size_t)n_keys);
    if (!stamp)
        return v4_err_set(err, V4_ERR_NOMEM, "cachesim", "out of memory for %d keys", n_keys);
    for (int k = 0; k < n_keys; k++)
        stamp[k] = -1;
    t->n_distinct = t->max_step_keys = t->max_step = 0;
    for (int s = 0; s < t->n_steps; s++) {
        int d = 0;
        for (int i = t->step_off[s]; i < t->step_off[s + 1]; i++) {
            int k = t->keys[i];
            if (stamp[k] == -1)
                t->n_distinct++;
            if (stamp[k] != s) {
                stamp[k] = s;
                d++;
            }
        }
        if (d > t->max_step_keys) {
            t->max_step_keys = d;
            t->max_step = s;
        }
    }
    free(stamp);
    return 0;
}

void v4_simtrace_free(v4_simtrace *t)
{
    free(t->keys);
    free(t->step_off);
    free(t->step_line);
    memset(t, 0, sizeof *t);
}

/* one JSON line -> pairs; returns 0 or -1 (err) */
static int parse_json_line(const char *line, const char *path, int lineno, grow *lay, grow *exp,
                           int *n_layers, v4_error *err)
{
    json_error_t je;
    json_t *o = json_loads(line, 0, &je);
    json_t *layers = o ? json_object_get(o, "layers") : NULL;
    if (!json_is_array(layers)) {
        json_decref(o);
        return v4_err_set(err, V4_ERR_FORMAT, path, "line %d: not a `logits --trace` record (%s)", lineno,
                          o ? "no \"layers\" array" : je.text);
    }
    size_t nl = json_array_size(layers);
    if ((int)nl > *n_layers)
        *n_layers = (int)nl;
    for (size_t l = 0; l < nl; l++) {
        json_t *ex = json_object_get(json_array_get(layers, l), "experts");
        if (!json_is_array(ex)) {
            json_decref(o);
            return v4_err_set(err, V4_ERR_FORMAT, path, "line %d: layer %zu has no \"experts\" array", lineno, l);
        }
        for (size_t k = 0; k < json_array_size(ex); k++) {
            json_t *e = json_array_get(ex, k);
            if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > 1 << 24) {
                json_decref(o);
                return v4_err_set(err, V4_ERR_FORMAT, path, "line %d: layer %zu: bad expert id", lineno, l);
            }
            if (push(lay, (int)l) || push(exp, (int)json_integer_value(e))) {
                json_decref(o);
                return v4_err_set(err, V4_ERR_NOMEM, path, "out of memory");
            }
        }
    }
    json_decref(o);
    return 0;
}

int v4_simtrace_load(const char *path, int n_experts, v4_simtrace *t, v4_error *err)
{
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "r");
    if (!f)
        return v4_err_set(err, V4_ERR_IO, path, "cannot open trace: %s", strerror(errno));
    grow lay = {0}, exp = {0}, steps = {0}, lines = {0};
    char *line = NULL;
    size_t lcap = 0;
    int lineno = 0, fmt = -1, blank_seen = 0, in_step = 0, rc = -1, max_e = -1;
    while (getline(&line, &lcap, f) >= 0) {
        lineno++;
        const char *s = skip_ws(line);
        if (fmt < 0 && *s)
            fmt = *s == '{';
        if (fmt == 1) {
            if (!*s)
                continue;
            if (push(&steps, (int)lay.n) || push(&lines, lineno)) {
                v4_err_set(err, V4_ERR_NOMEM, path, "out of memory");
                goto out;
            }
            if (parse_json_line(s, path, lineno, &lay, &exp, &t->n_layers, err))
                goto out;
            continue;
        }
        if (!*s) {
            blank_seen = 1;
            in_step = 0;
            continue;
        }
        if (*s == '#')
            continue;
        char *end;
        long l = strtol(s, &end, 10), e = -1;
        int ok = end != s && l >= 0 && l < 1 << 16;
        if (ok) {
            const char *s2 = end;
            e = strtol(s2, &end, 10);
            ok = end != s2 && e >= 0 && e < 1 << 24 && !*skip_ws(end);
        }
        if (!ok) {
            v4_err_set(err, V4_ERR_FORMAT, path, "line %d: expected \"layer expert\"", lineno);
            goto out;
        }
        if (!in_step) {
            if (push(&steps, (int)lay.n) || push(&lines, lineno)) {
                v4_err_set(err, V4_ERR_NOMEM, path, "out of memory");
                goto out;
            }
            in_step = 1;
        }
        if (push(&lay, (int)l) || push(&exp, (int)e)) {
            v4_err_set(err, V4_ERR_NOMEM, path, "out of memory");
            goto out;
        }
        if (l + 1 > t->n_layers)
            t->n_layers = (int)l + 1;
    }
    if (ferror(f)) {
        v4_err_set(err, V4_ERR_IO, path, "read error");
        goto out;
    }
    if (fmt == 0 && !blank_seen) {      /* no blank line: every line is a step */
        steps.n = lines.n = 0;
        free(lines.v);
        lines = (grow){0};
        rewind(f);
        /* line numbers of the pairs: recount (only for messages) */
        int ln = 0;
        while (getline(&line, &lcap, f) >= 0) {
            ln++;
            const char *s = skip_ws(line);
            if (*s && *s != '#' && (push(&steps, (int)steps.n) || push(&lines, ln))) {
                v4_err_set(err, V4_ERR_NOMEM, path, "out of memory");
                goto out;
            }
        }
    }
    if (lay.n == 0) {
        v4_err_set(err, V4_ERR_FORMAT, path, "empty trace");
        goto out;
    }
    if (lay.n > (size_t)1 << 30) {
        v4_err_set(err, V4_ERR_RANGE, path, "trace too long");
        goto out;
    }
    for (size_t i = 0; i < exp.n; i++)
        if (exp.v[i] > max_e)
            max_e = exp.v[i];
    if (n_experts > 0 && max_e >= n_experts) {
        v4_err_set(err, V4_ERR_RANGE, path, "expert id %d is not below the model's %d experts", max_e, n_experts);
        goto out;
    }
    t->n_experts = n_experts > 0 ? n_experts : max_e + 1;
    if ((int64_t)t->n_layers * t->n_experts > INT32_MAX / 2) {
        v4_err_set(err, V4_ERR_RANGE, path, "too many keys (%d layers x %d experts)", t->n_layers, t->n_experts);
        goto out;
    }
    t->json = fmt == 1;
    t->n_access = (int)lay.n;
    t->n_steps = (int)steps.n;
    t->keys = malloc(sizeof(int32_t) * lay.n);
    t->step_off = malloc(sizeof(int) * (steps.n + 1));
    t->step_line = lines.v;
    lines.v = NULL;
    if (!t->keys || !t->step_off) {
        v4_err_set(err, V4_ERR_NOMEM, path, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < lay.n; i++)
        t->keys[i] = lay.v[i] * t->n_experts + exp.v[i];
    memcpy(t->step_off, steps.v, sizeof(int) * steps.n);
    t->step_off[steps.n] = (int)lay.n;
    if (v4_simtrace_count(t, err))
        goto out;
    rc = 0;
out:
    free(line);
    fclose(f);
    free(lay.v);
    free(exp.v);
    free(steps.v);
    free(lines.v);
    if (rc)
        v4_simtrace_free(t);
    return rc;
}
