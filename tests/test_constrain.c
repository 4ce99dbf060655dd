/* test_constrain.c - one sequence's constraint state (worker/serve/constrain.h) on the tiny
 * model's tokenizer, with made-up logits (no forward pass):
 *   - the masked logits keep exactly the tokens the engine's mask allows, -inf elsewhere,
 *     ids past the tokenizer's vocabulary included; EOS only where the answer is complete;
 *   - greedy and seeded sampling over them (worker/serve/sampling.h) pick allowed tokens
 *     only, and the same seed gives the same tokens; a walk to EOS spells one choice;
 *   - thinking: before </think> everything but EOS is allowed and nothing is committed;
 *     after it the constraint governs;
 *   - committing a refused token is an error naming "constraint";
 *   - masks computed ahead on mask_ahead.h's thread (as the continuous executor does)
 *     give the same answers as masks computed at sampling (choices, a JSON Schema).
 * docs/structured-outputs.md "How masks apply".
 */
#include <math.h>
#include <string.h>

#include "config/rng.h"
#include "testutil.h"
#include "worker/serve/constrain.h"
#include "worker/serve/mask_ahead.h"
#include "worker/serve/sampling.h"

static v4_tokenizer *T;
static v4g_vocab *V;
static int32_t EOS, END_THINK;

static void random_logits(float *l, int n, uint64_t seed)
{
    v4_rng r;
    v4_rng_seed(&r, seed);
    for (int i = 0; i < n; i++)
        l[i] = (float)(v4_rng_unit(&r) * 8.0 - 4.0);
}

/* Sample to the end under c; the text (bytes of the tokens before EOS) into out.  ahead:
 * every mask computed first on mask_ahead.h's thread, as the continuous executor does. */
static int walk(v4g_constraint *c, int n_logits, double temperature, uint64_t seed, char *out, size_t cap, int ahead)
{
    v4_error err = {0};
    v4_constrain *s = v4_constrain_new(c, V, n_logits, EOS, -1, &err);
    v4_sampling_params sp = {.temperature = temperature, .top_p = 1.0, .top_k = 0, .seed = seed};
    v4_sampler *smp = v4_sampler_create(n_logits, &sp, &err);
    float *l = malloc(sizeof *l * (size_t)n_logits);
    size_t at = 0;
    int ended = 0;
    for (int step = 0; s && smp && l && step < 64 && !ended; step++) {
        random_logits(l, n_logits, seed * 1000 + (uint64_t)step);
        if (ahead) {
            v4_mask_ahead ma = {0};
            v4_mask_ahead_start(&ma, &s, 1);
            v4_mask_ahead_join(&ma);
            CHECK(ma.busy_s >= 0, "mask thread ran");
        }
        const float *m = v4_constrain_apply(s, l, &err);
        CHECK(m != NULL, "apply: %s", err.msg);
        if (!m)
            break;
        int tok = v4_sample(smp, m);
        CHECK(isfinite(m[tok]), "sampled a refused token %d", tok);
        CHECK(v4_constrain_commit(s, tok, &err) == 0, "commit %d: %s", tok, err.msg);
        if (tok == EOS) {
            ended = 1;
            break;
        }
        size_t n;
        const char *b = v4_tok_bytes(T, tok, &n);
        if (b && at + n < cap) {
            memcpy(out + at, b, n);
            at += n;
        }
    }
    out[at] = 0;
    free(l);
    v4_sampler_free(smp);
    v4_constrain_free(s);
    return ended;
}

int main(void)
{
    char dir[4096];
    v4_error err = {0};
    if (t_mkmodel_tiny("constrain_model", 2, dir, sizeof dir) || v4_tok_load(dir, &T, &err)) {
        fprintf(stderr, "no tokenizer: %s\n", err.msg);
        return 1;
    }
    EOS = v4_tok_eos(T);
    END_THINK = v4_tok_find(T, "</think>");
    CHECK(EOS >= 0 && END_THINK >= 0, "the tiny tokenizer has EOS and </think>");
    V = v4_grammar_vocab(T, EOS, &err);
    CHECK(V != NULL, "vocab: %s", err.msg);
    const int nv = v4g_vocab_size(V), NL = nv + 7;   /* logits wider than the tokenizer */
    const char *choices = "[\"yes\",\"no\",\"maybe later\"]";
    v4g_constraint *c = v4g_compile(V4G_CHOICE, choices, strlen(choices), NULL, &err);
    CHECK(c != NULL, "compile: %s", err.msg);

    /* the masked logits are the mask, EOS refused at the start */
    v4_constrain *s = v4_constrain_new(c, V, NL, EOS, -1, &err);
    float *l = malloc(sizeof *l * NL);
    uint32_t *bits = calloc(((size_t)nv + 31) / 32, sizeof *bits);
    random_logits(l, NL, 1);
    const float *m = v4_constrain_apply(s, l, &err);
    v4g_matcher *ref = v4g_matcher_new(c, V, &err);
    CHECK(m && ref && v4g_matcher_mask(ref, bits, &err) == 0, "mask: %s", err.msg);
    int allowed = 0, agree = 1;
    for (int i = 0; m && i < NL; i++) {
        const int ok = i < nv && ((bits[i >> 5] >> (i & 31)) & 1);
        allowed += ok;
        agree &= ok ? m[i] == l[i] : m[i] == -INFINITY;
    }
    CHECK(agree && allowed > 0, "masked logits = the mask (%d allowed)", allowed);
    CHECK(m && m[EOS] == -INFINITY && m[NL - 1] == -INFINITY, "EOS and ids past the vocabulary refused");
    /* a refused token is an error naming the constraint */
    const int32_t z = v4_tok_find(T, "z");
    CHECK(z >= 0 && v4_constrain_commit(s, z, &err) < 0 && !strcmp(err.where, "constraint"),
          "refused commit: %s (%s)", err.msg, err.where);
    v4_constrain_free(s);
    v4g_matcher_free(ref);

    /* walks: every answer is one of the choices; the same seed, the same answer */
    for (uint64_t seed = 1; seed <= 6; seed++) {
        char a[256], b[256];
        int ea = walk(c, NL, seed == 6 ? 0.0 : 1.0, seed, a, sizeof a, 0);
        int eb = walk(c, NL, seed == 6 ? 0.0 : 1.0, seed, b, sizeof b, seed & 1);
        CHECK(ea && (!strcmp(a, "yes") || !strcmp(a, "no") || !strcmp(a, "maybe later")), "seed %llu: '%s'",
              (unsigned long long)seed, a);
        CHECK(eb && !strcmp(a, b), "seed %llu: deterministic%s ('%s' / '%s')", (unsigned long long)seed,
              seed & 1 ? ", masks computed ahead or not" : "", a, b);
    }
    /* a JSON Schema: the masks computed ahead on their thread give the same answers */
    {
        const char *sch = "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"maximum\":99},"
                          "\"t\":{\"enum\":[\"ab\",\"cd\"]}},\"required\":[\"n\",\"t\"],\"additionalProperties\":false}";
        const v4g_opts co = {.compact = 1};
        v4g_constraint *js = v4g_compile(V4G_JSON_SCHEMA, sch, strlen(sch), &co, &err);
        CHECK(js != NULL, "compile schema: %s", err.msg);
        for (uint64_t seed = 1; js && seed <= 4; seed++) {
            char a[256], b[256];
            int ea = walk(js, NL, 1.0, seed, a, sizeof a, 0), eb = walk(js, NL, 1.0, seed, b, sizeof b, 1);
            CHECK(ea == eb && !strcmp(a, b), "schema seed %llu: masks ahead = masks at sampling ('%s' / '%s')",
                  (unsigned long long)seed, a, b);
        }
        v4g_constraint_unref(js);
    }

    /* thinking: free but for EOS until </think>, then the constraint */
    s = v4_constrain_new(c, V, NL, EOS, END_THINK, &err);
    CHECK(s && !v4_constrain_active(s), "reasoning phase first");
    m = v4_constrain_apply(s, l, &err);
    int free_all = m != NULL;
    for (int i = 0; m && i < NL; i++)
        free_all &= i == EOS ? m[i] == -INFINITY : m[i] == l[i];
    CHECK(free_all, "reasoning: every token but EOS");
    CHECK(v4_constrain_commit(s, z, &err) == 0 && !v4_constrain_active(s) && v4_constrain_tokens(s) == 0,
          "reasoning tokens are not the answer's");
    CHECK(v4_constrain_commit(s, END_THINK, &err) == 0 && v4_constrain_active(s), "</think> starts the answer");
    m = v4_constrain_apply(s, l, &err);
    CHECK(m && m[z] == -INFINITY && m[EOS] == -INFINITY, "the answer is constrained");
    const int32_t y = v4_tok_find(T, "yes");
    if (y >= 0) {   /* "yes" is one token in this vocabulary: then EOS may follow */
        CHECK(isfinite(m[y]) && v4_constrain_commit(s, y, &err) == 0, "'yes' taken");
        m = v4_constrain_apply(s, l, &err);
        CHECK(m && isfinite(m[EOS]), "EOS allowed once the answer is complete");
        CHECK(v4_constrain_commit(s, EOS, &err) == 0 && v4_constrain_tokens(s) == 2, "EOS committed");
    }
    v4_constrain_free(s);
    free(l);
    free(bits);
    v4g_constraint_unref(c);
    v4g_vocab_free(V);
    v4_tok_free(T);
    TEST_DONE();
}
