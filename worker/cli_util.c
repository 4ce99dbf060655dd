/* cli_util.c - see cli_util.h. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/cpu/cpu_backend.h"
#include "cli_util.h"

int v4_opts_take(v4_engine_opts *o, int argc, char **argv, int *i, const char *cmd)
{
    const char *a = argv[*i];
    if (strcmp(a, "--model") && strcmp(a, "--threads") && strcmp(a, "--isa"))
        return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "v4fleet %s: %s needs a value\n", cmd, a);
        return -1;
    }
    const char *v = argv[++*i];
    if (!strcmp(a, "--model")) {
        o->model = v;
    } else if (!strcmp(a, "--isa")) {
        o->isa = v;
    } else {
        char *end;
        long t = strtol(v, &end, 10);
        if (*end || t < 0 || t > 1024) {
            fprintf(stderr, "v4fleet %s: --threads wants an integer in [0, 1024], got '%s'\n", cmd, v);
            return -1;
        }
        o->threads = (int)t;
    }
    return 1;
}

int v4_read_ids_json(const char *path, int32_t **ids, int *n, int limit, v4_error *err)
{
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return v4_err_set(err, V4_ERR_FORMAT, path, "invalid JSON at line %d, column %d: %s",
                          je.line, je.column, je.text);
    if (!json_is_array(root)) {
        json_decref(root);
        return v4_err_set(err, V4_ERR_FORMAT, path, "expected a JSON array of token ids");
    }
    size_t len = json_array_size(root);
    int32_t *out = malloc(sizeof(int32_t) * (len + 1));
    if (!out) {
        json_decref(root);
        return v4_err_set(err, V4_ERR_NOMEM, path, "out of memory");
    }
    for (size_t k = 0; k < len; k++) {
        json_t *v = json_array_get(root, k);
        json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;
        if (!json_is_integer(v) || x < 0 || (limit > 0 && x >= limit)) {
            free(out);
            json_decref(root);
            return v4_err_set(err, V4_ERR_RANGE, path,
                              "element %zu is not a token id in [0, %d)", k, limit);
        }
        out[k] = (int32_t)x;
    }
    json_decref(root);
    *ids = out;
    *n = (int)len;
    return 0;
}

void v4_print_error(const char *cmd, const v4_error *err)
{
    if (err->where[0])
        fprintf(stderr, "v4fleet %s: %s: %s\n", cmd, err->where, err->msg);
    else
        fprintf(stderr, "v4fleet %s: %s\n", cmd, err->msg);
}

v4_backend *v4_open_backend(const v4_engine_opts *o, v4_error *err)
{
    const char *isa = o->isa ? o->isa : getenv("V4_CPU_ISA");
    return v4_cpu_backend_create(o->threads, isa && *isa ? isa : "auto", err);
}
