/* test_batch.c - batched decode equals decoding alone.
 *
 * Three sequences share one context and advance together, each at its own
 * position: sequence A starts the golden token sequence at step 0, B joins at step
 * 5, C at step 37 (so they sit at different positions, cross block boundaries of the
 * compressors at different steps, and route to different experts in the same step).
 * Every row of every step must equal the golden logits of that position bit for bit.
 * Also checks v4_seq_reset (a reset sequence replays identically) and that a bad
 * token id fails the step without advancing any sequence.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/model_files.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/v4/model.h"
#include "golden_data.h"
#include "testutil.h"

int main(void)
{
    v4_model_files m;
    v4_error err = {0};
    const int P = 120;
    int32_t *ids;
    float *ref;
    if (t_golden_load(&m, P, &ids, &ref, NULL, 0))
        return 1;
    const int V = m.cfg.vocab_size;

    v4_backend *be = v4_cpu_backend_create(2, "auto", &err);
    v4_ctx *c = v4_ctx_create(&m.w, be, 3, &err);
    v4_seq *s[3];
    for (int i = 0; i < 3; i++)
        s[i] = v4_seq_create(&m.w, P, &err);
    const int start[3] = {0, 5, 37};
    float *logits = malloc(sizeof(float) * 3 * (size_t)V);
    int mismatches = 0;
    for (int step = 0; step < P + 37; step++) {
        v4_seq *act[3];
        int32_t tk[3];
        int rowpos[3], n = 0;
        for (int i = 0; i < 3; i++) {
            int p = step - start[i];
            if (p < 0 || p >= P)
                continue;
            act[n] = s[i];
            tk[n] = ids[p];
            rowpos[n++] = p;
        }
        if (v4_step(c, act, tk, n, logits, NULL, &err)) {
            CHECK(0, "step %d: %s", step, err.msg);
            break;
        }
        for (int r = 0; r < n; r++)
            if (memcmp(logits + (size_t)r * V, ref + (size_t)rowpos[r] * V, sizeof(float) * V))
                mismatches++;
    }
    CHECK(mismatches == 0, "%d batched rows differ from the golden logits", mismatches);

    /* reset: replay the first 40 positions of sequence A alone */
    v4_seq_reset(s[0]);
    CHECK(v4_seq_pos(s[0]) == 0, "reset position");
    mismatches = 0;
    for (int p = 0; p < 40; p++) {
        if (v4_step(c, &s[0], &ids[p], 1, logits, NULL, &err))
            break;
        mismatches += memcmp(logits, ref + (size_t)p * V, sizeof(float) * V) != 0;
    }
    CHECK(mismatches == 0 && v4_seq_pos(s[0]) == 40, "reset replay: %d mismatches", mismatches);

    /* a bad token fails the whole step and advances nothing */
    v4_seq_reset(s[1]);
    int32_t badtk[2] = {3, V + 5};
    v4_seq *pair[2] = {s[0], s[1]};
    int rc = v4_step(c, pair, badtk, 2, logits, NULL, &err);
    CHECK(rc != 0 && err.code == V4_ERR_RANGE && strstr(err.msg, "out of range"), "bad token: %s", err.msg);
    CHECK(v4_seq_pos(s[0]) == 40 && v4_seq_pos(s[1]) == 0, "positions unchanged after a failed step");
    /* a full sequence is refused */
    v4_seq *tinyseq = v4_seq_create(&m.w, 1, &err);
    CHECK(v4_step(c, &tinyseq, &ids[0], 1, logits, NULL, &err) == 0, "first token fits");
    CHECK(v4_step(c, &tinyseq, &ids[1], 1, logits, NULL, &err) != 0 && strstr(err.msg, "full"),
          "full sequence refused: %s", err.msg);
    v4_seq_free(tinyseq);

    for (int i = 0; i < 3; i++)
        v4_seq_free(s[i]);
    v4_ctx_free(c);
    be->ops->destroy(be);
    free(logits); free(ref); free(ids);
    v4_model_close(&m);
    TEST_DONE();
}
