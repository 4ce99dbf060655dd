/* test_batch.c - batched decode equals decoding alone.
 *
 * Three sequences share one context and advance together, each at its own
 * position: sequence A starts the golden token sequence at step 0, B joins at step
 * 5, C at step 37 (so they sit at different positions, cross block boundaries of the
 * compressors at different steps, and route to different experts in the same step).
 * Every row of every step must equal the golden logits of that position bit for bit.
 * Also checks v4_seq_reset (a reset sequence replays identically), that a bad
 * token id fails the step without advancing any sequence, and prefill chunks (one
 * sequence in many rows of a step) against the golden logits.
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

/* a step implementation that must not be reached */
static int never_step(void *ud, const v4_seq_view *seqs, const int32_t *tokens, int n, float *logits,
                      const int *want, v4_trace *const *traces, v4_step_fault *fault, v4_error *err)
{
    (void)ud; (void)seqs; (void)tokens; (void)n; (void)logits; (void)want; (void)traces; (void)fault;
    return v4_err_set(err, V4_ERR_INVALID, "never_step", "reached");
}

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

    /* prefill chunks: sequence D feeds the golden positions several rows per step
     * (chunks of 1, 7, 33, 64 and 15 rows: across the window (32), the CSA/HCA
     * compressor blocks and the indexer), while E advances one position per step
     * with its row placed inside D's rows; every row equals the golden logits */
    {
        const int chunks[] = {1, 7, 33, 64, 15}, NB = 66;
        v4_ctx *cc = v4_ctx_create(&m.w, be, NB, &err);
        v4_seq *d = v4_seq_create(&m.w, P, &err), *e = v4_seq_create(&m.w, P, &err);
        float *lg = malloc(sizeof(float) * (size_t)NB * V);
        v4_seq *rs[66];
        int32_t rt[66];
        int rp[66], at = 0, pe = 0, bad = 0, fails = 0;
        for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
            int n = 0, epos = chunks[k] / 2;
            for (int i = 0; i < chunks[k]; i++) {
                if (i == epos) {
                    rs[n] = e; rt[n] = ids[pe]; rp[n++] = pe++;
                }
                rs[n] = d; rt[n] = ids[at]; rp[n++] = at++;
            }
            /* odd chunks ask for the logits of every third row only (v4_step_rows) */
            int want[66];
            for (int r = 0; r < n; r++)
                want[r] = !(k & 1) || r % 3 == 0;
            if (v4_step_rows(cc, rs, rt, n, lg, want, NULL, &err)) {
                fails++;
                CHECK(0, "prefill chunk %zu (%d rows): %s", k, n, err.msg);
                break;
            }
            for (int r = 0; r < n; r++)
                bad += want[r] && memcmp(lg + (size_t)r * V, ref + (size_t)rp[r] * V, sizeof(float) * V) != 0;
        }
        CHECK(!fails && bad == 0 && v4_seq_pos(d) == at && at == 120 && v4_seq_pos(e) == pe,
              "prefill chunks: %d of %d rows differ from the golden logits (D at %d, E at %d)", bad, at + pe,
              v4_seq_pos(d), v4_seq_pos(e));
        /* more rows than the sequence has room for: refused, nothing advances */
        v4_seq *f = v4_seq_create(&m.w, 4, &err);
        v4_seq *ff[5] = {f, f, f, f, f};
        CHECK(v4_step(cc, ff, ids, 5, lg, NULL, &err) != 0 && strstr(err.msg, "full") && v4_seq_pos(f) == 0,
              "5 rows into a 4-position sequence: %s", err.msg);
        CHECK(v4_step(cc, ff, ids, 4, lg, NULL, &err) == 0 && v4_seq_pos(f) == 4, "4 rows fit: %s", err.msg);
        /* a step implementation takes at most its rows_per_seq rows per sequence: more are
         * refused before it runs (never_step fails the test if called) */
        v4_step_impl impl = {.step = never_step, .ud = NULL, .rows_per_seq = 0};
        v4_ctx_set_step_impl(cc, &impl);
        v4_seq_reset(f);
        CHECK(v4_ctx_rows_per_seq(cc) == 1 && v4_step(cc, ff, ids, 2, lg, NULL, &err) != 0 &&
                  strstr(err.msg, "more than 1 rows") && v4_seq_pos(f) == 0,
              "two rows of one sequence with a one-row step implementation: %s", err.msg);
        impl.rows_per_seq = 3;
        v4_ctx_set_step_impl(cc, &impl);
        CHECK(v4_ctx_rows_per_seq(cc) == 3 && v4_step(cc, ff, ids, 4, lg, NULL, &err) != 0 &&
                  strstr(err.msg, "more than 3 rows") && v4_seq_pos(f) == 0,
              "four rows of one sequence with a three-row step implementation: %s", err.msg);
        v4_ctx_set_step_impl(cc, NULL);
        v4_seq_free(f);
        v4_seq_free(d);
        v4_seq_free(e);
        v4_ctx_free(cc);
        free(lg);
    }

    for (int i = 0; i < 3; i++)
        v4_seq_free(s[i]);
    v4_ctx_free(c);
    be->ops->destroy(be);
    free(logits); free(ref); free(ids);
    v4_model_close(&m);
    TEST_DONE();
}
