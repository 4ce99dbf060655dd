/* test_task_run.c - one task through the engine (worker/serve/task_run.c) on a synthetic tiny
 * model: model names and aliases (an unknown model fails with model_not_available
 * naming every served name), the experts figures (hits = forwarded positions x layers
 * x experts per token, the counts match), context_length_exceeded, an input id outside
 * the vocabulary (invalid_field), a deadline already passed and one that passes during
 * the run (deadline_exceeded), and the abort hook (-2, no result). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/expert_block.h"
#include "config/model_config.h"
#include "testutil.h"
#include "worker/serve/task_packet.h"
#include "worker/serve/task_run.h"

static int run(v4_runner *r, const char *json, double deadline_ms, int (*abort_fn)(void *), v4_run_output *out,
               v4_task_error *e)
{
    v4_task t;
    memset(e, 0, sizeof *e);
    if (v4_task_parse(json, strlen(json), 1 << 20, &t, e)) {
        fprintf(stderr, "parse %s: %s\n", json, e->message);
        return 99;
    }
    int rc = v4_runner_run(r, &t, deadline_ms, abort_fn, NULL, out, e);
    v4_task_free(&t);
    return rc;
}

static int abort_now(void *ud)
{
    (void)ud;
    return 1;
}

int main(void)
{
    char dir[4200];
    if (t_mkmodel_tiny("task_run_model", 11, dir, sizeof dir))
        return 1;
    v4_task_error e = {0};
    v4_runner *r = v4_runner_open(dir, "flash,deepseek-v4,v4", NULL, &e);
    CHECK(r != NULL, "runner: %s: %s", e.where, e.message);
    if (!r)
        TEST_DONE();
    CHECK(!strcmp(v4_runner_model_name(r), "flash"), "served name = first (%s)", v4_runner_model_name(r));
    const v4_config *c = v4_runner_config(r);
    double far = 1e300;
    v4_run_output o;

    /* aliases accepted; the result is the same whichever name the task uses */
    CHECK(run(r, "{\"id\":\"a\",\"model\":\"v4\",\"input_ids\":[1,2,3],\"max_tokens\":5,\"temperature\":0}", far,
              NULL, &o, &e) == 0, "alias v4: %s", e.message);
    int32_t first[8];
    int nfirst = o.n_tokens;
    memcpy(first, o.tokens, sizeof(int32_t) * (size_t)(nfirst < 8 ? nfirst : 8));
    long fwd = 3 + o.n_tokens - 1;
    CHECK(o.forwarded == fwd, "forwarded %ld, want %ld", o.forwarded, fwd);
    CHECK(o.expert_hits == (long long)fwd * c->n_layers * c->n_act_experts && o.expert_misses == 0 &&
              o.expert_bytes_loaded == 0,
          "hits %lld = %ld x %d x %d", o.expert_hits, fwd, c->n_layers, c->n_act_experts);
    long long sum = 0;
    for (int i = 0; i < c->n_layers * c->n_routed_experts; i++)
        sum += o.expert_counts[i];
    CHECK(sum == o.expert_hits, "counts sum %lld == hits", sum);
    v4_run_output_free(&o);
    CHECK(run(r, "{\"id\":\"b\",\"model\":\"flash\",\"input_ids\":[1,2,3],\"max_tokens\":5,\"temperature\":0}", far,
              NULL, &o, &e) == 0 && o.n_tokens == nfirst && !memcmp(o.tokens, first, sizeof(int32_t) * (size_t)nfirst),
          "name flash: same greedy tokens");
    v4_run_output_free(&o);

    /* an unknown model names everything served */
    CHECK(run(r, "{\"id\":\"c\",\"model\":\"gpt-x\",\"prompt\":\"hi\"}", far, NULL, &o, &e) == -1 &&
              e.code == V4_TASK_MODEL_NOT_AVAILABLE && !strcmp(e.where, "model") &&
              strstr(e.message, "\"flash\" (also \"deepseek-v4\", \"v4\")") && strstr(e.message, "gpt-x"),
          "model_not_available: %s", e.message);
    CHECK(o.expert_counts == NULL && o.expert_hits == 0, "nothing ran, nothing counted");
    v4_run_output_free(&o);
    /* a prefix of a name is not the name */
    CHECK(run(r, "{\"id\":\"c2\",\"model\":\"fla\",\"prompt\":\"hi\"}", far, NULL, &o, &e) == -1 &&
              e.code == V4_TASK_MODEL_NOT_AVAILABLE, "prefix refused");
    v4_run_output_free(&o);

    /* context length */
    char big[256];
    snprintf(big, sizeof big, "{\"id\":\"d\",\"input_ids\":[1,2],\"max_tokens\":%lld}", c->max_position);
    CHECK(run(r, big, far, NULL, &o, &e) == -1 && e.code == V4_TASK_CONTEXT_LENGTH_EXCEEDED &&
              !strcmp(e.where, "max_tokens"), "context_length_exceeded: %s", e.message);
    v4_run_output_free(&o);
    /* input id outside the vocabulary */
    snprintf(big, sizeof big, "{\"id\":\"e\",\"input_ids\":[1,%d]}", c->vocab_size);
    CHECK(run(r, big, far, NULL, &o, &e) == -1 && e.code == V4_TASK_INVALID_FIELD && !strcmp(e.where, "input_ids") &&
              strstr(e.message, "index 1"), "vocab: %s", e.message);
    v4_run_output_free(&o);
    /* deadlines: already passed, and passing during a long run */
    CHECK(run(r, "{\"id\":\"f\",\"prompt\":\"x\"}", v4_now_ms() - 1, NULL, &o, &e) == -1 &&
              e.code == V4_TASK_DEADLINE_EXCEEDED, "deadline passed before start");
    v4_run_output_free(&o);
    double t0 = v4_now_ms();
    CHECK(run(r, "{\"id\":\"g\",\"input_ids\":[0,2,10,3,5],\"max_tokens\":100000,\"temperature\":0}", t0 + 150, NULL,
              &o, &e) == -1 && e.code == V4_TASK_DEADLINE_EXCEEDED, "deadline during the run: %s", e.message);
    CHECK(v4_now_ms() - t0 < 2000, "stopped within a step of the deadline (%.0f ms)", v4_now_ms() - t0);
    CHECK(o.expert_hits > 0 && o.forwarded > 0, "a failed run still reports what ran (%lld hits)", o.expert_hits);
    v4_run_output_free(&o);
    /* abort hook: -2, no result */
    CHECK(run(r, "{\"id\":\"h\",\"input_ids\":[1,2],\"max_tokens\":8}", far, abort_now, &o, &e) == -2 &&
              o.text == NULL, "abort -> -2");
    v4_run_output_free(&o);

    /* paged experts (safetensors source, a cache of 1/8 of the experts): same tokens as
     * resident; hits + misses + prefetched = activations; bytes = the loads' blocks; a
     * second runner doing the same gets the same figures */
    v4_xblock_layout lo;
    v4_xblock_layout_of(c, &lo);
    long long all = (long long)c->n_layers * c->n_routed_experts * (long long)lo.bytes;
    v4_runner_opts px = {.host_cache_bytes = all / 8, .policy = "lru", .io_threads = 2, .threads = 1, .max_batch = 1};
    long long fig1[3] = {-1, -1, -1};
    for (int pass = 0; pass < 2; pass++) {
    v4_runner *rp = v4_runner_open(dir, "flash", &px, &e);
    CHECK(rp != NULL, "paged runner: %s: %s", e.where, e.message);
    if (rp) {
        char desc[256];
        v4_runner_describe_experts(rp, desc, sizeof desc);
        CHECK(strstr(desc, "paged from the safetensors") != NULL, "describe: %s", desc);
        CHECK(run(rp, "{\"id\":\"p\",\"input_ids\":[1,2,3],\"max_tokens\":5,\"temperature\":0}", far, NULL, &o,
                  &e) == 0 && o.n_tokens == nfirst && !memcmp(o.tokens, first, sizeof(int32_t) * (size_t)nfirst),
              "paged: same greedy tokens as resident (%s: %s)", e.where, e.message);
        long long act = (long long)o.forwarded * c->n_layers * c->n_act_experts;
        CHECK(o.forwarded == 7 && o.expert_hits + o.expert_misses + o.expert_prefetched == act &&
                  o.expert_misses > 0 && o.expert_prefetched > 0 &&
                  o.expert_bytes_loaded == (o.expert_misses + o.expert_prefetched) * (long long)lo.bytes,
              "paged figures: hits %lld + misses %lld + prefetched %lld = %lld activations, %lld bytes",
              o.expert_hits, o.expert_misses, o.expert_prefetched, act, o.expert_bytes_loaded);
        long long fig[3] = {o.expert_hits, o.expert_misses, o.expert_prefetched};
        if (pass)
            CHECK(!memcmp(fig, fig1, sizeof fig), "the same run again: hits/misses/prefetched %lld/%lld/%lld, first "
                  "%lld/%lld/%lld", fig[0], fig[1], fig[2], fig1[0], fig1[1], fig1[2]);
        memcpy(fig1, fig, sizeof fig);
        v4_run_output_free(&o);
        v4_runner_free(rp);
    }
    }
    /* a corrupted pack (a flipped byte in every expert of layer 1): a task fails with
     * expert_corrupt naming layer, expert and offset, not a crash; the next task fails the
     * same way from the quarantine, and the runner stays usable */
    char pack[4300], cmd2[16000];
    snprintf(pack, sizeof pack, "%s/task_run_pack", t_env("V4_TMP", "/tmp"));
    snprintf(cmd2, sizeof cmd2, "rm -rf '%s' && '%s' pack --model '%s' --out '%s' >/dev/null 2>&1", pack,
             t_env("V4_BIN", "build/v4fleet"), dir, pack);
    CHECK(system(cmd2) == 0, "pack: %s", cmd2);
    v4_runner_opts cx = {.pack_dir = pack, .host_cache_bytes = all, .policy = "lru", .io_threads = 2, .threads = 1,
                         .max_batch = 1};
    snprintf(cmd2, sizeof cmd2, "%s/experts.bin", pack);
    FILE *pf = fopen(cmd2, "r+b");
    CHECK(pf != NULL, "open the pack data");
    for (int x = 0; pf && x < c->n_routed_experts; x++) {
        long off = (long)((size_t)(c->n_routed_experts + x) * lo.bytes + 64);   /* layer 1, expert x */
        int ch;
        fseek(pf, off, SEEK_SET);
        ch = fgetc(pf);
        fseek(pf, off, SEEK_SET);
        fputc(ch ^ 0x10, pf);
    }
    if (pf)
        fclose(pf);
    v4_runner *rp = v4_runner_open(dir, "flash", &cx, &e);
    CHECK(rp != NULL, "runner on the corrupted pack opens: %s", e.message);
    if (rp) {
        CHECK(run(rp, "{\"id\":\"x\",\"input_ids\":[1,2,3],\"max_tokens\":3}", far, NULL, &o, &e) == -1 &&
                  e.code == V4_TASK_EXPERT_CORRUPT && strstr(e.message, "layer 1") && strstr(e.message, "offset"),
              "expert_corrupt: %s: %s", v4_task_errcode_name(e.code), e.message);
        v4_run_output_free(&o);
        CHECK(run(rp, "{\"id\":\"y\",\"input_ids\":[4,5],\"max_tokens\":2}", far, NULL, &o, &e) == -1 &&
                  e.code == V4_TASK_EXPERT_CORRUPT, "the next task too (quarantined, fails fast): %s", e.message);
        v4_run_output_free(&o);
        v4_runner_free(rp);
    }

    px.host_cache_bytes = (long long)lo.bytes;   /* smaller than one layer's experts */
    rp = v4_runner_open(dir, "flash", &px, &e);
    if (rp) {
        CHECK(run(rp, "{\"id\":\"q\",\"input_ids\":[1,2,3],\"max_tokens\":2}", far, NULL, &o, &e) == -1 &&
                  e.code == V4_TASK_INTERNAL && strstr(e.message, "budget too small"),
              "a budget below one layer's experts fails the task clearly: %s", e.message);
        v4_run_output_free(&o);
        v4_runner_free(rp);
    } else {
        CHECK(strstr(e.message, "budget") != NULL, "or is refused at open: %s", e.message);
    }
    v4_runner_free(r);
    TEST_DONE();
}
