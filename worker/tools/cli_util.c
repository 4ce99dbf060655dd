/* cli_util.c - see cli_util.h. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/device_setting.h"   /* v4_parse_device */
#include "config/numerics_setting.h" /* v4_parse_numerics */
#include "config/worker_config.h"    /* v4_parse_bytes */
#include "cli_util.h"
#include "worker/serve/generate.h" /* V4_GEN_CHUNK_MAX */

int v4_opts_take(v4_engine_opts *o, int argc, char **argv, int *i, const char *cmd)
{
    const char *a = argv[*i];
    if (!strcmp(a, "--no-lookahead")) {   /* the one engine flag without a value */
        o->no_lookahead = 1;
        return 1;
    }
    static const char *const flags[] = {"--model", "--threads", "--isa", "--host-cache-bytes", "--pack",
                                        "--cache-policy", "--io-threads", "--device", "--numerics"};
    int ours = 0;
    for (size_t k = 0; k < sizeof flags / sizeof flags[0]; k++)
        ours |= !strcmp(a, flags[k]);
    if (!ours)
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
    } else if (!strcmp(a, "--device")) {
        if (v4_parse_device(v, NULL)) {
            fprintf(stderr, "v4fleet %s: --device wants cpu, cuda or cuda:N, got '%s'\n", cmd, v);
            return -1;
        }
        o->device = v;
    } else if (!strcmp(a, "--numerics")) {
        if (v4_parse_numerics(v, NULL)) {
            fprintf(stderr, "v4fleet %s: --numerics wants exact or fast, got '%s'\n", cmd, v);
            return -1;
        }
        o->numerics = v;
    } else if (!strcmp(a, "--pack")) {
        o->pack = v;
    } else if (!strcmp(a, "--cache-policy")) {
        if (strcmp(v, "lru") && strcmp(v, "slru") && strcmp(v, "lfru") && strcmp(v, "next")) {
            fprintf(stderr, "v4fleet %s: --cache-policy wants lru, slru, lfru or next, got '%s'\n", cmd, v);
            return -1;
        }
        o->cache_policy = v;
    } else if (!strcmp(a, "--host-cache-bytes")) {
        if (v4_parse_bytes(v, &o->host_cache_bytes)) {
            fprintf(stderr, "v4fleet %s: --host-cache-bytes wants a byte count (e.g. 64G, 512M), got '%s'\n", cmd, v);
            return -1;
        }
    } else {
        const int io = !strcmp(a, "--io-threads");
        const long hi = io ? 64 : 1024;
        char *end;
        long t = strtol(v, &end, 10);
        if (*end || end == v || t < (io ? 1 : 0) || t > hi) {
            fprintf(stderr, "v4fleet %s: %s wants an integer in [%d, %ld], got '%s'\n", cmd, a, io, hi, v);
            return -1;
        }
        if (io)
            o->io_threads = (int)t;
        else
            o->threads = (int)t;
    }
    return 1;
}

int v4_opt_prefill_chunk(v4_engine_opts *o, const char *v, const char *cmd)
{
    char *end;
    long t = strtol(v, &end, 10);
    if (*end || end == v || t < 1 || t > V4_GEN_CHUNK_MAX) {
        fprintf(stderr, "v4fleet %s: --prefill-chunk wants an integer in [1, %d], got '%s'\n", cmd, V4_GEN_CHUNK_MAX,
                v);
        return -1;
    }
    o->prefill_chunk = (int)t;
    return 0;
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
    /* data that fails its checksum carries the result code a task would get */
    const char *code = err->code == V4_ERR_CORRUPT ? "expert_corrupt: " : "";
    if (err->where[0])
        fprintf(stderr, "v4fleet %s: %s%s: %s\n", cmd, code, err->where, err->msg);
    else
        fprintf(stderr, "v4fleet %s: %s%s\n", cmd, code, err->msg);
}
