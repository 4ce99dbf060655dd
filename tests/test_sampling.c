/* test_sampling.c - the sampler on synthetic logits: reproducible seeds, temperature
 * 0 == greedy, top-k and top-p never leave their candidate set, the empirical
 * distribution follows softmax(logits/T), and bad parameters are rejected with an
 * error naming the field.  The request fields of sampling.h: logit_bias makes a token
 * win (+100) or bans it (-100), greedy and sampled; frequency / presence / repetition
 * penalties give the exact greedy sequences their definitions imply (counts over the
 * generated tokens, the prompt for repetition); min_p cuts the candidates below min_p x
 * the top probability after temperature (frequencies of what is left); the same seed
 * gives the same tokens with every field on; a zero bias (the adjusted copy) gives the
 * tokens of the plain path bit for bit; log probabilities equal an independent
 * log-softmax, top entries descend and never hold a -inf (refused) token. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "worker/serve/sampling.h"

enum { V = 1000 };

static void make_logits(float *l, unsigned seed)
{
    for (int i = 0; i < V; i++) {
        seed = seed * 1664525u + 1013904223u;
        l[i] = (float)((seed >> 8) % 10000) / 1000.0f;   /* 0 .. 10 */
    }
}

static v4_sampling_params P(double t, double top_p, int k, uint64_t seed)
{
    return (v4_sampling_params){.temperature = t, .top_p = top_p, .top_k = k, .seed = seed};
}

static int draw(float *l, v4_sampling_params p, int n, int *out)
{
    v4_error err = {0};
    v4_sampler *s = v4_sampler_create(V, &p, &err);
    if (!s)
        return -1;
    for (int i = 0; i < n; i++)
        out[i] = v4_sample(s, l);
    v4_sampler_free(s);
    return 0;
}

int main(void)
{
    static float l[V];
    static int a[2000], b[2000];
    make_logits(l, 7);
    int best = v4_argmax(l, V);

    v4_sampling_params p = P(1.0, 1.0, 0, 42);
    CHECK(draw(l, p, 2000, a) == 0 && draw(l, p, 2000, b) == 0, "create");
    CHECK(!memcmp(a, b, sizeof a), "same seed, same tokens");
    p.seed = 43;
    draw(l, p, 2000, b);
    CHECK(memcmp(a, b, sizeof a), "another seed, other tokens");

    p.temperature = 0.0;
    draw(l, p, 50, a);
    int greedy_ok = 1;
    for (int i = 0; i < 50; i++)
        greedy_ok &= a[i] == best;
    CHECK(greedy_ok, "temperature 0 is greedy");
    float tie[V] = {0};
    tie[5] = tie[9] = 3.0f;
    CHECK(v4_argmax(tie, V) == 5, "argmax ties to the lower id");

    /* top-k: only the k best ids */
    p = P(2.0, 1.0, 5, 1);
    draw(l, p, 2000, a);
    int in_k = 1;
    for (int i = 0; i < 2000; i++) {
        int rank = 0;
        for (int j = 0; j < V; j++)
            rank += l[j] > l[a[i]] || (l[j] == l[a[i]] && j < a[i]);
        in_k &= rank < 5;
    }
    CHECK(in_k, "top-k stays in the k best");

    /* top-p: the nucleus of softmax(l/T) */
    p = P(1.0, 0.5, 0, 3);
    double mx = l[best], z = 0;
    static double pr[V];
    for (int j = 0; j < V; j++)
        z += pr[j] = exp((double)l[j] - mx);
    draw(l, p, 2000, a);
    int in_p = 1;
    for (int i = 0; i < 2000; i++) {
        double above = 0;    /* mass strictly before a[i] in the sorted order */
        for (int j = 0; j < V; j++)
            if (l[j] > l[a[i]] || (l[j] == l[a[i]] && j < a[i]))
                above += pr[j] / z;
        in_p &= above < 0.5;
    }
    CHECK(in_p, "top-p stays in the nucleus");

    /* empirical distribution over 3 tokens */
    float three[V];
    for (int j = 0; j < V; j++)
        three[j] = -1e30f;
    three[10] = 0.0f, three[20] = (float)log(2.0), three[30] = (float)log(5.0);
    p = P(1.0, 1.0, 0, 99);
    static int c[20000];
    draw(three, p, 20000, c);
    int n10 = 0, n20 = 0, n30 = 0, other = 0;
    for (int i = 0; i < 20000; i++)
        n10 += c[i] == 10, n20 += c[i] == 20, n30 += c[i] == 30, other += c[i] != 10 && c[i] != 20 && c[i] != 30;
    CHECK(other == 0 && fabs(n10 / 20000.0 - 0.125) < 0.015 && fabs(n20 / 20000.0 - 0.25) < 0.02 &&
          fabs(n30 / 20000.0 - 0.625) < 0.02, "frequencies %d %d %d (expected 1:2:5)", n10, n20, n30);

    /* ---- logit_bias ---- */
    int low = v4_argmax(l, V) == 0 ? 1 : 0;
    for (int j = 0; j < V; j++)
        if (l[j] < l[low])
            low = j;
    v4_logit_bias up = {low, 100.0f}, ban = {best, -100.0f};
    p = P(0.0, 1.0, 0, 1);
    p.bias = &up, p.n_bias = 1;
    draw(l, p, 5, a);
    CHECK(a[0] == low && a[4] == low, "greedy: +100 makes the lowest token win (%d, want %d)", a[0], low);
    p.temperature = 1.0;
    draw(l, p, 500, a);
    int all_low = 1;
    for (int i = 0; i < 500; i++)
        all_low &= a[i] == low;
    CHECK(all_low, "sampled: +100 makes the lowest token win every draw");
    p = P(0.0, 1.0, 0, 1);
    p.bias = &ban, p.n_bias = 1;
    draw(l, p, 1, a);
    CHECK(a[0] != best, "greedy: -100 bans the best token");
    p.temperature = 2.0;
    draw(l, p, 2000, a);
    int banned = 0;
    for (int i = 0; i < 2000; i++)
        banned += a[i] == best;
    CHECK(banned == 0, "sampled at T=2: the banned token came %d times", banned);

    /* ---- penalties: greedy sequences ---- */
    float flat[V];
    for (int j = 0; j < V; j++)
        flat[j] = -1e30f;
    flat[10] = flat[20] = flat[30] = 1.0f;
    p = P(0.0, 1.0, 0, 1);
    p.frequency_penalty = 0.4;   /* a token's logit drops 0.4 per use: 10 20 30 10 20 30 */
    draw(flat, p, 6, a);
    CHECK(a[0] == 10 && a[1] == 20 && a[2] == 30 && a[3] == 10 && a[4] == 20 && a[5] == 30,
          "frequency_penalty cycles: %d %d %d %d %d %d", a[0], a[1], a[2], a[3], a[4], a[5]);
    flat[10] = 2.0f;             /* 10 leads by 1: it takes 3 uses at 0.4 to fall behind */
    draw(flat, p, 4, a);
    CHECK(a[0] == 10 && a[1] == 10 && a[2] == 10 && a[3] == 20, "frequency_penalty counts: %d %d %d %d", a[0], a[1],
          a[2], a[3]);
    p.frequency_penalty = 0, p.presence_penalty = 0.4;   /* once used, 10 stays at 1.6 > 1: it never drops again */
    draw(flat, p, 4, a);
    CHECK(a[0] == 10 && a[1] == 10 && a[2] == 10 && a[3] == 10, "presence_penalty is paid once: %d %d %d %d", a[0],
          a[1], a[2], a[3]);
    p.presence_penalty = 1.5;    /* 2 - 1.5 = 0.5 < 1: then 20 and 30, then all paid once: 20 (1-1.5) ... */
    draw(flat, p, 4, a);
    CHECK(a[0] == 10 && a[1] == 20 && a[2] == 30 && a[3] == 10, "presence_penalty 1.5: %d %d %d %d", a[0], a[1], a[2],
          a[3]);
    p.presence_penalty = 0, p.repetition_penalty = 1.3;   /* 2 / 1.3 = 1.54 > 1: 10 stays; with the prompt: 20 */
    float rp[V];
    for (int j = 0; j < V; j++)
        rp[j] = -1e30f;
    rp[10] = 5.0f, rp[20] = 4.5f, rp[30] = -1.0f, rp[40] = -1.2f;
    draw(rp, p, 3, a);   /* 10 (5), then 10 -> 3.85 < 4.5: 20, then 20 -> 3.46 < 3.85: 10 */
    CHECK(a[0] == 10 && a[1] == 20 && a[2] == 10, "repetition_penalty over generated tokens: %d %d %d", a[0], a[1],
          a[2]);
    {
        v4_error err = {0};
        v4_sampler *s = v4_sampler_create(V, &p, &err);
        int32_t prompt[3] = {10, 20, 10};
        CHECK(s && v4_sampler_prompt(s, prompt, 3, &err) == 0, "prompt: %s", err.msg);
        int t0 = v4_sample(s, rp);   /* 10 -> 3.85, 20 -> 3.46: 10 still first */
        v4_sampler_free(s);
        rp[10] = 4.0f, rp[20] = -1e30f, rp[30] = -1.0f;   /* negatives multiplied: -1 -> -1.3 < -1.2 */
        s = v4_sampler_create(V, &p, &err);
        int32_t prompt2[2] = {30, 10};
        v4_sampler_prompt(s, prompt2, 2, &err);
        rp[10] = -1e30f;
        int t1 = v4_sample(s, rp);
        v4_sampler_free(s);
        CHECK(t0 == 10 && t1 == 40, "repetition_penalty over the prompt: %d (want 10), %d (want 40)", t0, t1);
    }

    /* ---- min_p: after temperature, relative to the top probability ---- */
    p = P(1.0, 1.0, 0, 99);
    p.min_p = 0.3;               /* shares 1:2:5 -> 0.2, 0.4, 1 of the top: 10 goes, 20:30 stay 2:5 */
    draw(three, p, 20000, c);
    n10 = n20 = n30 = other = 0;
    for (int i = 0; i < 20000; i++)
        n10 += c[i] == 10, n20 += c[i] == 20, n30 += c[i] == 30, other += c[i] != 10 && c[i] != 20 && c[i] != 30;
    CHECK(n10 == 0 && other == 0 && fabs(n20 / 20000.0 - 2.0 / 7) < 0.02, "min_p 0.3: %d %d %d (want 0 : 2 : 5)",
          n10, n20, n30);
    p.temperature = 4.0;         /* at T=4 the shares are 1 : 1.19 : 1.50 -> 0.67, 0.79, 1 of the top: all stay */
    p.min_p = 0.6;
    draw(three, p, 6000, c);
    n10 = 0;
    for (int i = 0; i < 6000; i++)
        n10 += c[i] == 10;
    CHECK(n10 > 1000, "min_p applies after temperature: token 10 drawn %d times of 6000", n10);

    /* ---- determinism with every field on; the adjusted copy changes nothing by itself ---- */
    v4_logit_bias two[2] = {{3, 2.5f}, {77, -1.0f}};
    p = P(0.8, 0.9, 50, 1234);
    p.bias = two, p.n_bias = 2, p.presence_penalty = 0.3, p.frequency_penalty = 0.2, p.repetition_penalty = 1.1;
    p.min_p = 0.01;
    draw(l, p, 2000, a);
    draw(l, p, 2000, b);
    CHECK(!memcmp(a, b, sizeof a), "every field on: same seed, same tokens");
    v4_logit_bias zero = {5, 0.0f};
    p = P(1.0, 1.0, 0, 42);
    draw(l, p, 2000, a);
    p.bias = &zero, p.n_bias = 1, p.repetition_penalty = 1.0;
    draw(l, p, 2000, b);
    CHECK(!memcmp(a, b, sizeof a), "a zero bias (the adjusted copy) gives the plain path's tokens");

    /* ---- log probabilities ---- */
    {
        float m[V];
        memcpy(m, l, sizeof m);
        for (int j = 0; j < V; j += 3)
            m[j] = -INFINITY;    /* refused by a constraint */
        m[low] = l[low];         /* the biased token stays allowed */
        p = P(0.7, 1.0, 0, 5);
        p.logprobs = 1, p.top_logprobs = 20, p.bias = &up, p.n_bias = 1;
        v4_error err = {0};
        v4_sampler *s = v4_sampler_create(V, &p, &err);
        v4_sample_lp lp;
        int tok = v4_sample_ex(s, m, &lp);
        v4_sampler_free(s);
        double mx = -INFINITY, z = 0;
        float adj[V];
        memcpy(adj, m, sizeof adj);
        adj[low] = (float)((double)adj[low] + 100.0);
        for (int j = 0; j < V; j++)
            mx = adj[j] > mx ? adj[j] : mx;
        for (int j = 0; j < V; j++)
            z += adj[j] == -INFINITY ? 0 : exp((adj[j] - mx) / 0.7);
        double want = (adj[tok] - mx) / 0.7 - log(z);
        CHECK(fabs(lp.logprob - want) < 1e-12 && lp.logprob <= 0, "chosen logprob %g, want %g", lp.logprob, want);
        int sorted = lp.n_top == 20, refused = 0, found = 0;
        for (int i = 0; i < lp.n_top; i++) {
            sorted &= i == 0 || lp.top[i].logprob <= lp.top[i - 1].logprob;
            refused += m[lp.top[i].id] == -INFINITY;
            found += lp.top[i].id == tok && lp.top[i].logprob == lp.logprob;
        }
        CHECK(sorted && !refused && lp.top[0].id == low, "top 20 descend (%d), none refused (%d), the biased first",
              sorted, refused);
        CHECK(found == 1 || lp.logprob < lp.top[19].logprob, "the chosen token's entry holds its logprob");
        /* fewer allowed tokens than asked: only those */
        for (int j = 0; j < V; j++)
            m[j] = j == 7 || j == 8 ? 1.0f : -INFINITY;
        p = P(0.0, 1.0, 0, 5);
        p.logprobs = 1, p.top_logprobs = 5;
        s = v4_sampler_create(V, &p, &err);
        tok = v4_sample_ex(s, m, &lp);
        v4_sampler_free(s);
        CHECK(tok == 7 && lp.n_top == 2 && fabs(lp.logprob - log(0.5)) < 1e-12 && lp.top[1].id == 8,
              "two allowed tokens: n_top %d, logprob %g", lp.n_top, lp.logprob);
    }

    /* bad parameters */
    struct { v4_sampling_params p; const char *field; } bad[] = {
        {P(-0.5, 1.0, 0, 0), "temperature"}, {P(NAN, 1.0, 0, 0), "temperature"},
        {P(1.0, 0.0, 0, 0), "top_p"}, {P(1.0, 1.5, 0, 0), "top_p"}, {P(1.0, 1.0, -1, 0), "top_k"},
        {P(1.0, 1.0, 0, 0), "min_p"}, {P(1.0, 1.0, 0, 0), "presence_penalty"}, {P(1.0, 1.0, 0, 0), "frequency_penalty"},
        {P(1.0, 1.0, 0, 0), "repetition_penalty"}, {P(1.0, 1.0, 0, 0), "top_logprobs"}, {P(1.0, 1.0, 0, 0), "logit_bias"},
        {P(1.0, 1.0, 0, 0), "logit_bias"},
    };
    static const v4_logit_bias far = {V, 1.0f}, big = {3, 101.0f};
    bad[5].p.min_p = 1.5, bad[6].p.presence_penalty = 2.5, bad[7].p.frequency_penalty = -2.5;
    bad[8].p.repetition_penalty = -1, bad[9].p.top_logprobs = 21;
    bad[10].p.bias = &far, bad[10].p.n_bias = 1;   /* outside the vocabulary */
    bad[11].p.bias = &big, bad[11].p.n_bias = 1;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        v4_error err = {0};
        CHECK(v4_sampler_create(V, &bad[i].p, &err) == NULL && !strcmp(err.where, bad[i].field) &&
                  err.code == V4_ERR_INVALID, "bad %s rejected: %s %s", bad[i].field, err.where, err.msg);
    }
    TEST_DONE();
}
