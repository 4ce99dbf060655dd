/* test_generate.c - the generation loop (worker/serve/generate.c) on a synthetic model with
 * its tokenizer (made by `v4fleet mkmodel`): seeded sampling is reproducible, a stop
 * string ends generation and is cut from the text, EOS ends generation, max_tokens
 * gives finish_reason "length", and a request that does not fit the sequence fails
 * cleanly, and the per-(layer, expert) routing counts match the decode path's traced
 * routes, and prefill chunks (the request's max_rows, a wide context) give the same
 * tokens in the expected number of steps.  Text is collected from the streaming
 * callback. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/model_files.h"
#include "kernels/cpu/cpu_backend.h"
#include "testutil.h"
#include "worker/serve/chat.h"
#include "worker/serve/generate.h"

typedef struct { char buf[1 << 16]; size_t len; } sink;

static void emit(void *ud, const char *t, size_t n)
{
    sink *s = ud;
    if (s->len + n < sizeof s->buf) {
        memcpy(s->buf + s->len, t, n);
        s->len += n;
        s->buf[s->len] = 0;
    }
}

typedef struct env {
    v4_model_files m;
    v4_tokenizer *tok;
    v4_backend *be;
    v4_ctx *ctx;
    v4_ids prompt;
} env;

static int gen(env *e, v4_gen_request req, int cap, sink *out, v4_gen_result *res, v4_error *err)
{
    v4_seq *s = v4_seq_create(&e->m.w, cap, err);
    out->len = 0;
    out->buf[0] = 0;
    int rc = s ? v4_generate(e->ctx, s, e->tok, &req, emit, out, res, err) : -1;
    v4_seq_free(s);
    return rc;
}

/* A cancel hook that never cancels: counts the forward steps. */
static int count_poll(void *ud)
{
    ++*(long *)ud;
    return 0;
}

int main(void)
{
    char dir[4200];
    if (t_mkmodel_tiny("gen_model", 7, dir, sizeof dir))
        return 1;
    env e = {0};
    v4_error err = {0};
    if (v4_model_open(dir, &e.m, &err) || v4_tok_load(dir, &e.tok, &err)) {
        fprintf(stderr, "%s: %s\n", err.where, err.msg);
        return 1;
    }
    e.be = v4_cpu_backend_create(0, "auto", &err);
    e.ctx = v4_ctx_create(&e.m.w, e.be, 1, &err);
    /* a prompt of ~100 tokens, so that chunks of 40 and 64 positions are exercised */
    v4_chat_msg msg = {V4_CHAT_USER, "Write a short poem about queues, workers, brokers and the experts that a fleet "
                                     "of stateless inference workers pages from NVMe into host memory and from there "
                                     "onto a GPU, one step at a time, while long documents wait for their summaries. "
                                     "Then write it again about the same queues, workers, brokers and experts, and "
                                     "about the people who wait for the summaries of their long documents."};
    CHECK(v4_chat_encode(e.tok, NULL, &msg, 1, 0, &e.prompt, &err) == 0 && e.prompt.n > 64,
          "chat encode: %s (%zu tokens, want more than 64)", err.msg, e.prompt.n);

    v4_gen_request req = {e.prompt.v, (int)e.prompt.n, 48, {.temperature = 1.0, .top_p = 1.0, .top_k = 0, .seed = 5},
                          -1, NULL, 0, NULL, NULL, NULL, 0, NULL, 0, NULL, NULL};
    static sink a, b;
    v4_gen_result ra = {0}, rb = {0};
    int cap = (int)e.prompt.n + 64;
    CHECK(gen(&e, req, cap, &a, &ra, &err) == 0, "generate: %s", err.msg);
    CHECK(gen(&e, req, cap, &b, &rb, &err) == 0, "generate again: %s", err.msg);
    CHECK(ra.n_tokens == 48 && !strcmp(ra.finish_reason, "length"), "max_tokens -> length (%d, %s)",
          ra.n_tokens, ra.finish_reason);
    CHECK(rb.n_tokens == ra.n_tokens && !memcmp(ra.tokens, rb.tokens, sizeof(int32_t) * ra.n_tokens) &&
          !strcmp(a.buf, b.buf), "same seed, same tokens and text");
    /* prefill chunks (a context of 64 rows; the request's max_rows, default V4_GEN_CHUNK,
     * the context's rows cap it): the same
     * tokens and text as one position per step, in the steps the chunk size implies
     * (counted through the cancel hook, polled once before every forward step) */
    v4_gen_result_free(&rb);
    {
        v4_ctx *one = e.ctx, *wide = v4_ctx_create(&e.m.w, e.be, 64, &err);
        CHECK(wide != NULL, "a context of 64 rows: %s", err.msg);
        static const int limits[] = {0, 1, 2, 3, 7, V4_GEN_CHUNK, 40, 64, 100};
        for (size_t i = 0; wide && i < sizeof limits / sizeof limits[0]; i++) {
            const int r = !limits[i] ? V4_GEN_CHUNK : limits[i] < 64 ? limits[i] : 64;
            long polls = 0, expect = ra.n_tokens - 1;   /* decode steps: the last token is not fed */
            for (int fed = 0, np = (int)e.prompt.n; fed < np; expect++) {
                const int left = np - fed;
                fed += left < 2 ? 1 : left < r ? left : r;
            }
            v4_gen_request rr = req;
            rr.max_rows = limits[i];
            rr.cancel = count_poll;
            rr.cancel_ud = &polls;
            e.ctx = wide;
            CHECK(gen(&e, rr, cap, &b, &rb, &err) == 0, "generate, max_rows %d: %s", limits[i], err.msg);
            e.ctx = one;
            CHECK(rb.n_tokens == ra.n_tokens && !memcmp(ra.tokens, rb.tokens, sizeof(int32_t) * ra.n_tokens) &&
                  !strcmp(a.buf, b.buf), "max_rows %d: the tokens and text of one position per step", limits[i]);
            CHECK(polls == expect, "max_rows %d: %ld steps for a %zu-token prompt + %d tokens (expected %ld)",
                  limits[i], polls, e.prompt.n, ra.n_tokens, expect);
            v4_gen_result_free(&rb);
        }
        v4_ctx_free(wide);
    }
    char *full = NULL;
    size_t flen = 0;
    CHECK(v4_tok_decode(e.tok, ra.tokens, (size_t)ra.n_tokens, V4_TOK_SKIP_SPECIAL, &full, &flen, &err) == 0 &&
          flen == a.len && !memcmp(full, a.buf, flen), "streamed text == decode(ids)");
    free(full);
    v4_gen_result_free(&rb);

    /* expert routing counts: every step adds K per layer; they equal the routes the
     * decode path reports when the same tokens are stepped one by one with a trace */
    {
        const v4_config *c = &e.m.cfg;
        const int L = c->n_layers, E = c->n_routed_experts, K = c->n_act_experts;
        uint32_t *cnt = calloc((size_t)L * E, sizeof *cnt), *ref = calloc((size_t)L * E, sizeof *ref);
        int32_t *rid = malloc(sizeof(int32_t) * L * K);
        float *rw = malloc(sizeof(float) * L * K);
        v4_gen_request rc = req;
        rc.expert_counts = cnt;
        CHECK(gen(&e, rc, cap, &b, &rb, &err) == 0 && rb.n_tokens == ra.n_tokens &&
              !memcmp(rb.tokens, ra.tokens, sizeof(int32_t) * ra.n_tokens), "counting does not change generation");
        long steps = (long)e.prompt.n + rb.n_tokens - 1;   /* finish "length": the last token is not fed */
        v4_seq *s = v4_seq_create(&e.m.w, cap, &err);
        v4_trace tr = {.route_ids = rid, .route_w = rw};
        v4_trace *trp = &tr;
        for (long p = 0; p < steps; p++) {
            int32_t tok = p < (long)e.prompt.n ? e.prompt.v[p] : rb.tokens[p - (long)e.prompt.n];
            CHECK(v4_step(e.ctx, &s, &tok, 1, NULL, &trp, &err) == 0, "traced step %ld", p);
            for (int l = 0; l < L; l++)
                for (int k = 0; k < K; k++)
                    ref[(size_t)l * E + rid[l * K + k]]++;
        }
        v4_seq_free(s);
        int same = 1;
        for (int l = 0; l < L; l++) {
            long sum = 0;
            for (int x = 0; x < E; x++) {
                sum += cnt[(size_t)l * E + x];
                same &= cnt[(size_t)l * E + x] == ref[(size_t)l * E + x];
            }
            CHECK(sum == steps * K, "layer %d: %ld routed = %ld steps x K=%d", l, sum, steps, K);
        }
        CHECK(same, "expert counts == traced routes");
        v4_gen_result_free(&rb);
        free(cnt);
        free(ref);
        free(rid);
        free(rw);
    }

    /* stop string: a piece from the middle of the text */
    if (a.len > 12) {
        char stop[5];
        memcpy(stop, a.buf + a.len / 2, 4);
        stop[4] = 0;
        const char *stops[1] = {stop};
        size_t first = (size_t)(strstr(a.buf, stop) - a.buf);
        v4_gen_request rs = req;
        rs.stops = stops;
        rs.n_stops = 1;
        CHECK(gen(&e, rs, cap, &b, &rb, &err) == 0, "generate with stop: %s", err.msg);
        CHECK(!strcmp(rb.finish_reason, "stop") && b.len == first && !memcmp(b.buf, a.buf, first),
              "stop '%s': text cut at %zu (got %zu, %s)", stop, first, b.len, rb.finish_reason);
        v4_gen_result_free(&rb);
    }
    /* EOS: make the 4th generated token the end-of-sequence id */
    v4_gen_request re = req;
    re.eos_id = ra.tokens[3];
    int first_eos = 0;
    while (ra.tokens[first_eos] != re.eos_id)
        first_eos++;
    CHECK(gen(&e, re, cap, &b, &rb, &err) == 0, "generate with eos: %s", err.msg);
    CHECK(rb.n_tokens == first_eos + 1 && !strcmp(rb.finish_reason, "stop"), "eos stops after %d tokens (got %d)",
          first_eos + 1, rb.n_tokens);
    v4_gen_result_free(&rb);
    v4_gen_result_free(&ra);
    /* greedy is temperature 0 and deterministic regardless of seed */
    v4_gen_result_free(&ra);   /* ra is reused below */
    v4_gen_request rg = req;
    rg.sampling = (v4_sampling_params){.temperature = 0.0, .top_p = 1.0, .top_k = 0, .seed = 1};
    CHECK(gen(&e, rg, cap, &a, &ra, &err) == 0, "greedy");
    rg.sampling.seed = 99;
    CHECK(gen(&e, rg, cap, &b, &rb, &err) == 0 && !memcmp(ra.tokens, rb.tokens, sizeof(int32_t) * 48),
          "greedy ignores the seed");
    v4_gen_result_free(&ra);
    v4_gen_result_free(&rb);
    /* too long for the sequence */
    CHECK(gen(&e, req, (int)e.prompt.n + 10, &a, &ra, &err) != 0 && err.code == V4_ERR_RANGE &&
          strstr(err.msg, "exceed"), "context check: %s", err.msg);
    v4_gen_request bad = req;
    bad.sampling.top_p = 0;
    CHECK(gen(&e, bad, cap, &a, &ra, &err) != 0 && !strcmp(err.where, "top_p"), "bad top_p: %s", err.msg);

    v4_ids_free(&e.prompt);
    v4_ctx_free(e.ctx);
    e.be->ops->destroy(e.be);
    v4_tok_free(e.tok);
    v4_model_close(&e.m);
    TEST_DONE();
}
