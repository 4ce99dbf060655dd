/* golden_data.h - the golden tiny set (tests/data/golden/tiny) for the C tests that
 * compare against it (header-only): open its model, read the first n token ids of its
 * sequence and the first n rows of its logits.
 * Ownership: *ids and *logits are malloc'd (the caller frees); the model is closed with
 * v4_model_close.  Thread: test main thread. */
#ifndef V4_GOLDEN_DATA_H
#define V4_GOLDEN_DATA_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/model_files.h"
#include "kernels/v4/model.h"
#include "testutil.h"

/* 0, or -1 with a message on stderr.  model_dir (may be NULL) receives the model path. */
static int t_golden_load(v4_model_files *m, int n, int32_t **ids, float **logits, char *model_dir, size_t cap)
{
    char dir[4096], path[4300];
    snprintf(dir, sizeof dir, "%s/golden/tiny", t_env("V4_TEST_DATA", "tests/data"));
    snprintf(path, sizeof path, "%s/model", dir);
    if (model_dir)
        snprintf(model_dir, cap, "%s", path);
    v4_error err = {0};
    if (v4_model_open(path, m, &err)) {
        fprintf(stderr, "%s: %s: %s\n", path, err.where, err.msg);
        return -1;
    }
    const size_t V = (size_t)m->cfg.vocab_size;
    snprintf(path, sizeof path, "%s/tokens.json", dir);
    json_error_t je;
    json_t *tok = json_load_file(path, 0, &je);
    json_t *seq = json_object_get(tok, "sequence");
    *ids = malloc(sizeof(int32_t) * (size_t)n);
    *logits = malloc(sizeof(float) * (size_t)n * V);
    int ok = tok && json_array_size(seq) >= (size_t)n && *ids && *logits;
    for (int i = 0; ok && i < n; i++)
        (*ids)[i] = (int32_t)json_integer_value(json_array_get(seq, (size_t)i));
    json_decref(tok);
    snprintf(path, sizeof path, "%s/logits.bin", dir);
    FILE *f = ok ? fopen(path, "rb") : NULL;
    ok = f && fread(*logits, sizeof(float), (size_t)n * V, f) == (size_t)n * V;
    if (f)
        fclose(f);
    if (!ok) {
        fprintf(stderr, "%s: cannot read %d golden tokens and logits\n", dir, n);
        v4_model_close(m);
        return -1;
    }
    return 0;
}

/* Positions 0..npos-1 of ids through c (batch 0: one sequence; 1: three sequences offset
 * by 0/2/7 steps), each row's logits compared bit for bit with ref [npos][vocab]: the
 * number of positions that differ, or -1 when a step failed (err filled). */
static inline int t_golden_run(const v4_model_files *m, v4_ctx *c, int batch, const int32_t *ids, const float *ref,
                               int npos, v4_error *err)
{
    const int V = m->cfg.vocab_size;
    float *logits = malloc(sizeof(float) * 3 * (size_t)V);
    v4_seq *s[3] = {0};
    const int start[3] = {0, 2, 7};
    int bad = 0, nseq = batch ? 3 : 1;
    for (int i = 0; i < nseq; i++)
        s[i] = v4_seq_create(&m->w, npos, err);
    for (int step = 0; step < npos + (batch ? 7 : 0) && bad >= 0; step++) {
        v4_seq *act[3];
        int32_t tk[3];
        int pos[3], n = 0;
        for (int i = 0; i < nseq; i++) {
            int p = step - start[i];
            if (p < 0 || p >= npos)
                continue;
            act[n] = s[i];
            tk[n] = ids[p];
            pos[n++] = p;
        }
        if (v4_step(c, act, tk, n, logits, NULL, err)) {
            bad = -1;
            break;
        }
        for (int r = 0; r < n; r++)
            bad += memcmp(logits + (size_t)r * V, ref + (size_t)pos[r] * V, sizeof(float) * V) != 0;
    }
    for (int i = 0; i < nseq; i++)
        v4_seq_free(s[i]);
    free(logits);
    return bad;
}

#endif
