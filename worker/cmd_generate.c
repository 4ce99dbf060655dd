/* cmd_generate.c - `v4fleet generate`: feed the prompt ids, then greedily append the
 * argmax token (lowest id on ties) up to --max-tokens, stopping early at the model's
 * EOS id unless --ignore-eos; prints the generated ids as a JSON array on stdout.
 * Sampling options arrive with the tokenizer/sampling issue; --greedy is required. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../cache/model_files.h"
#include "../kernels/v4/model.h"
#include "cli_util.h"
#include "commands.h"
#include "sampling.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: v4fleet generate --model DIR --prompt-ids FILE.json --max-tokens N --greedy\n"
               "                        [--ignore-eos] [--threads N] [--isa auto|scalar|avx2|avx512]\n");
}

int v4_cmd_generate(int argc, char **argv)
{
    v4_engine_opts eo = {0};
    const char *prompt = NULL;
    long max_tokens = -1;
    int greedy = 0, ignore_eos = 0;
    for (int i = 1; i < argc; i++) {
        int r = v4_opts_take(&eo, argc, argv, &i, "generate");
        if (r < 0)
            return 2;
        if (r)
            continue;
        if (!strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--greedy")) {
            greedy = 1;
        } else if (!strcmp(argv[i], "--ignore-eos")) {
            ignore_eos = 1;
        } else if (!strcmp(argv[i], "--prompt-ids") && i + 1 < argc) {
            prompt = argv[++i];
        } else if (!strcmp(argv[i], "--max-tokens") && i + 1 < argc) {
            char *end;
            max_tokens = strtol(argv[++i], &end, 10);
            if (*end || max_tokens < 0 || max_tokens > 1 << 20) {
                fprintf(stderr, "v4fleet generate: --max-tokens wants an integer in [0, 1048576]\n");
                return 2;
            }
        } else {
            fprintf(stderr, "v4fleet generate: unexpected argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!eo.model || !prompt || max_tokens < 0) {
        usage(stderr);
        return 2;
    }
    if (!greedy) {
        fprintf(stderr, "v4fleet generate: only --greedy decoding is available in this build\n");
        return 2;
    }
    v4_error err = {0};
    v4_model_files m;
    if (v4_model_open(eo.model, &m, &err)) {
        v4_print_error("generate", &err);
        return 1;
    }
    const v4_config *cfg = &m.cfg;
    int32_t *ids = NULL, *out = NULL;
    int n = 0, rc = 1, nout = 0;
    v4_backend *be = NULL;
    v4_seq *s = NULL;
    v4_ctx *c = NULL;
    float *logits = malloc(sizeof(float) * (size_t)cfg->vocab_size);
    if (v4_read_ids_json(prompt, &ids, &n, cfg->vocab_size, &err))
        goto done;
    if (n == 0) {
        v4_err_set(&err, V4_ERR_INVALID, prompt, "the prompt has no token ids");
        goto done;
    }
    out = malloc(sizeof(int32_t) * ((size_t)max_tokens + 1));
    if (!out || !(be = v4_open_backend(&eo, &err)) ||
        !(s = v4_seq_create(&m.w, n + (int)max_tokens, &err)) || !(c = v4_ctx_create(&m.w, be, 1, &err)))
        goto done;
    int32_t tok = ids[0];
    for (int p = 0; nout < max_tokens; p++) {
        if (v4_step(c, &s, &tok, 1, logits, NULL, &err))
            goto done;
        if (p + 1 < n) {
            tok = ids[p + 1];
            continue;
        }
        int best = v4_argmax(logits, cfg->vocab_size);
        out[nout++] = tok = best;
        if (!ignore_eos && best == cfg->eos_id)
            break;
    }
    printf("[");
    for (int i = 0; i < nout; i++)
        printf(i ? ", %d" : "%d", out[i]);
    printf("]\n");
    rc = 0;
done:
    if (rc)
        v4_print_error("generate", &err);
    free(ids); free(out); free(logits);
    v4_ctx_free(c);
    v4_seq_free(s);
    if (be)
        be->ops->destroy(be);
    v4_model_close(&m);
    return rc;
}
