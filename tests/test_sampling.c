/* test_sampling.c - the sampler on synthetic logits: reproducible seeds, temperature
 * 0 == greedy, top-k and top-p never leave their candidate set, the empirical
 * distribution follows softmax(logits/T), and bad parameters are rejected with an
 * error naming the field. */
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

    /* bad parameters */
    struct { v4_sampling_params p; const char *field; } bad[] = {
        {P(-0.5, 1.0, 0, 0), "temperature"}, {P(NAN, 1.0, 0, 0), "temperature"},
        {P(1.0, 0.0, 0, 0), "top_p"}, {P(1.0, 1.5, 0, 0), "top_p"}, {P(1.0, 1.0, -1, 0), "top_k"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        v4_error err = {0};
        CHECK(v4_sampler_create(V, &bad[i].p, &err) == NULL && !strcmp(err.where, bad[i].field) &&
                  err.code == V4_ERR_INVALID, "bad %s rejected: %s %s", bad[i].field, err.where, err.msg);
    }
    TEST_DONE();
}
