/* cmd_logits.c - `v4fleet logits`: feed token ids one position at a time through the
 * decode path from position 0 and write every position's f32 logits
 * (little-endian, row-major [positions][vocab_size]); optionally a JSON-lines trace
 * of argmax, routed experts (+ weights) and indexer selections per layer.
 * This is the contract the golden checks use; keep its format stable. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/model_files.h"
#include "kernels/v4/model.h"
#include "cache/expert_provider.h"
#include "cli_util.h"
#include "commands.h"
#include "worker/serve/sampling.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: v4fleet logits --model DIR --tokens FILE.json --out FILE.bin [--trace FILE.jsonl]\n"
               "                      [--threads N] [--isa auto|scalar|avx2|avx512|avx512vnni]\n"
               "             " V4_EXPERT_FLAGS_USAGE "             " V4_DEVICE_FLAG_USAGE
               "             " V4_LOOKAHEAD_FLAG_USAGE);
}

static void write_trace_line(FILE *f, const v4_config *cfg, int pos, int am, const v4_trace *t)
{
    json_t *o = json_object(), *layers = json_array();
    json_object_set_new(o, "pos", json_integer(pos));
    json_object_set_new(o, "argmax", json_integer(am));
    for (int l = 0; l < cfg->n_layers; l++) {
        json_t *lo = json_object(), *ex = json_array(), *w = json_array();
        for (int k = 0; k < cfg->n_act_experts; k++) {
            json_array_append_new(ex, json_integer(t->route_ids[l * cfg->n_act_experts + k]));
            json_array_append_new(w, json_real(t->route_w[l * cfg->n_act_experts + k]));
        }
        json_object_set_new(lo, "experts", ex);
        json_object_set_new(lo, "weights", w);
        if (cfg->compress_ratios[l] == 4) {
            json_t *ix = json_array();
            for (int k = 0; k < t->index_count[l]; k++)
                json_array_append_new(ix, json_integer(t->index_ids[l * cfg->index_topk + k]));
            json_object_set_new(lo, "indexer", ix);
        } else {
            json_object_set_new(lo, "indexer", json_null());
        }
        json_array_append_new(layers, lo);
    }
    json_object_set_new(o, "layers", layers);
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9));
    fprintf(f, "%s\n", s);
    free(s);
    json_decref(o);
}

int v4_cmd_logits(int argc, char **argv)
{
    v4_engine_opts eo = {0};
    const char *tokens = NULL, *out = NULL, *trace = NULL;
    for (int i = 1; i < argc; i++) {
        int r = v4_opts_take(&eo, argc, argv, &i, "logits");
        if (r < 0)
            return 2;
        if (r)
            continue;
        if (!strcmp(argv[i], "--help")) {
            usage(stdout);
            printf(V4_LOOKAHEAD_HELP);
            return 0;
        }
        const char **dst = !strcmp(argv[i], "--tokens") ? &tokens : !strcmp(argv[i], "--out") ? &out
                         : !strcmp(argv[i], "--trace") ? &trace : NULL;
        if (!dst || i + 1 >= argc) {
            fprintf(stderr, "v4fleet logits: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
        *dst = argv[++i];
    }
    if (!eo.model || !tokens || !out) {
        usage(stderr);
        return 2;
    }
    v4_error err = {0};
    v4_model_files m;
    if (v4_model_open_paged(eo.model, &m, eo.host_cache_bytes > 0, &err)) {
        v4_print_error("logits", &err);
        return 1;
    }
    const v4_config *cfg = &m.cfg;
    int32_t *ids = NULL;
    int n = 0, rc = 1;
    v4_backend *be = NULL;
    v4_seq *s = NULL;
    v4_ctx *c = NULL;
    v4_xprov *xp = NULL;
    FILE *fo = NULL, *ft = NULL;
    float *logits = malloc(sizeof(float) * (size_t)cfg->vocab_size);
    int32_t *rid = calloc((size_t)cfg->n_layers * cfg->n_act_experts, 4);
    float *rw = calloc((size_t)cfg->n_layers * cfg->n_act_experts, 4);
    int32_t *iid = calloc((size_t)cfg->n_layers * cfg->index_topk, 4), *icnt = calloc((size_t)cfg->n_layers, 4);
    v4_trace tr = {.route_ids = rid, .route_w = rw, .index_ids = iid, .index_count = icnt};
    v4_trace *trp = &tr;
    if (v4_read_ids_json(tokens, &ids, &n, cfg->vocab_size, &err))
        goto fail;
    if (n == 0) {
        v4_err_set(&err, V4_ERR_INVALID, tokens, "no token ids");
        goto fail;
    }
    if (!(be = v4_open_backend(&eo, &err)) || !(s = v4_seq_create(&m.w, n, &err)) ||
        !(c = v4_ctx_create(&m.w, be, 1, &err)) || v4_attach_experts(&eo, be, &m, c, &xp, &err))
        goto fail;
    if (!(fo = fopen(out, "wb"))) {
        v4_err_set(&err, V4_ERR_IO, out, "cannot create output file");
        goto fail;
    }
    if (trace && !(ft = fopen(trace, "w"))) {
        v4_err_set(&err, V4_ERR_IO, trace, "cannot create trace file");
        goto fail;
    }
    for (int p = 0; p < n; p++) {
        if (v4_step(c, &s, &ids[p], 1, logits, &trp, &err))
            goto fail;
        if (fwrite(logits, sizeof(float), (size_t)cfg->vocab_size, fo) != (size_t)cfg->vocab_size) {
            v4_err_set(&err, V4_ERR_IO, out, "write failed");
            goto fail;
        }
        if (ft)
            write_trace_line(ft, cfg, p, v4_argmax(logits, cfg->vocab_size), &tr);
    }
    if (fclose(fo)) {
        fo = NULL;
        v4_err_set(&err, V4_ERR_IO, out, "write failed");
        goto fail;
    }
    fo = NULL;
    rc = 0;
fail:
    if (rc)
        v4_print_error("logits", &err);
    if (fo)
        fclose(fo);
    if (ft && fclose(ft) && !rc) {
        fprintf(stderr, "v4fleet logits: %s: write failed\n", trace);
        rc = 1;
    }
    free(ids); free(logits); free(rid); free(rw); free(iid); free(icnt);
    v4_ctx_free(c);
    v4_xprov_close(xp);
    v4_seq_free(s);
    if (be)
        be->ops->destroy(be);
    v4_model_close(&m);
    return rc;
}
