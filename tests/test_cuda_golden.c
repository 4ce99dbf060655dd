/* test_cuda_golden.c - the golden tiny model (tests/data/golden/tiny) decoded with the
 * CUDA backend ("hybrid" mode: weight products on the GPU, the rest on the CPU) must
 * give the golden logits bit for bit.
 *
 * Exits 77 (SKIPPED, saying why) when the build has no CUDA backend or the machine no
 * usable GPU.  Otherwise, for the prepared model (EXACT weights in the R8 layout) and
 * the mapped row-major one (V4_OPEN_NO_PREPARE), with a fresh CUDA backend each: feeds
 * the 320-token golden sequence one position at a time and requires every position's
 * logits to equal logits.bin bit for bit (reporting the first diverging position and
 * the worst max|d|/std there after), the argmax to match, and the greedy generation
 * from the prompt to reproduce the generated ids and greedy_logits.bin.  The full
 * sub-layer comparison stays in test_golden (CPU); this test needs only the outputs.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/model_files.h"
#include "kernels/v4/model.h"
#include "testutil.h"
#include "worker/serve/sampling.h"
#include "kernels/cpu/cpu_backend.h"
#ifdef V4_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

#ifdef V4_HAVE_CUDA
/* V4_CUDA_GOLDEN_SELFTEST=1: run the same checks with the scalar CPU backend (to
 * validate this test on a machine without a GPU; not a GPU result). */
static int g_cpu;

static float *load_bin(const char *dir, const char *name, size_t n)
{
    char path[4600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    float *buf = malloc(sizeof(float) * (n ? n : 1));
    size_t got = f ? fread(buf, sizeof(float), n, f) : 0;
    if (f)
        fclose(f);
    if (got != n) {
        fprintf(stderr, "%s: %zu floats, expected %zu\n", path, got, n);
        free(buf);
        return NULL;
    }
    return buf;
}

static int *json_ids(json_t *root, const char *key, int *n)
{
    json_t *a = json_object_get(root, key);
    *n = (int)json_array_size(a);
    int *ids = malloc(sizeof(int) * (size_t)(*n + 1));
    for (int i = 0; i < *n; i++)
        ids[i] = (int)json_integer_value(json_array_get(a, (size_t)i));
    return ids;
}

static int same_bits(const float *a, const float *b, int n)
{
    return memcmp(a, b, sizeof(float) * (size_t)n) == 0;
}

static void run_model(const char *dir, int flags, const int *seq, int P, const int *prompt, int np, const int *gen,
                      int ng)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/model", dir);
    v4_model_files m;
    v4_error err = {0};
    if (v4_model_open_ex(path, &m, flags, &err)) {
        CHECK(0, "open %s: %s: %s", path, err.where, err.msg);
        return;
    }
    const char *lay = flags ? "row-major" : "R8";
    const int V = m.cfg.vocab_size;
    float *ref = load_bin(dir, "logits.bin", (size_t)P * V), *gref = load_bin(dir, "greedy_logits.bin", (size_t)ng * V);
    v4_backend *be = g_cpu ? v4_cpu_backend_create(1, "scalar", &err) : v4_cuda_backend_create(0, &err);
    CHECK(be != NULL && ref && gref, "backend: %s", err.msg);
    if (!be || !ref || !gref) {
        free(ref);
        free(gref);
        v4_model_close(&m);
        return;
    }
    v4_seq *s = v4_seq_create(&m.w, P, &err);
    v4_ctx *c = v4_ctx_create(&m.w, be, 1, &err);
    CHECK(s && c, "create: %s", err.msg);
    float *logits = malloc(sizeof(float) * (size_t)V);
    int first_div = -1, bad_argmax = 0;
    double worst = 0;
    for (int p = 0; s && c && p < P; p++) {
        if (v4_step(c, &s, &seq[p], 1, logits, NULL, &err)) {
            CHECK(0, "%s: step %d: %s", lay, p, err.msg);
            break;
        }
        const float *rp = ref + (size_t)p * V;
        if (!same_bits(logits, rp, V)) {
            if (first_div < 0)
                first_div = p;
            double sd = 0, mean = 0, md = 0;
            for (int i = 0; i < V; i++)
                mean += rp[i];
            mean /= V;
            for (int i = 0; i < V; i++) {
                sd += (rp[i] - mean) * (rp[i] - mean);
                double d = fabs((double)logits[i] - rp[i]);
                md = d > md || isnan(d) ? d : md;
            }
            sd = sqrt(sd / V);
            if (!(md / sd <= worst))
                worst = md / sd;
        }
        bad_argmax += v4_argmax(logits, V) != v4_argmax(rp, V);
    }
    CHECK(first_div < 0, "%s: logits differ from the golden ones from position %d on (worst max|d|/std %g)", lay,
          first_div, worst);
    CHECK(bad_argmax == 0, "%s: %d argmax mismatches", lay, bad_argmax);
    printf("%s weights (%s): %d positions, first divergence %d, worst max|d|/std %g, %zu MiB of weights on the GPU\n",
           lay, be->ops->name, P, first_div, worst, g_cpu ? (size_t)0 : v4_cuda_backend_weight_bytes(be) >> 20);
    v4_seq_free(s);
    v4_ctx_free(c);

    /* greedy generation from the prompt */
    s = v4_seq_create(&m.w, np + ng, &err);
    c = v4_ctx_create(&m.w, be, 1, &err);
    int tok = prompt[0], ok = s && c;
    for (int p = 0; ok && p < np + ng - 1; p++) {
        if (v4_step(c, &s, &tok, 1, logits, NULL, &err)) {
            CHECK(0, "%s: greedy step %d: %s", lay, p, err.msg);
            ok = 0;
            break;
        }
        if (p + 1 < np) {
            tok = prompt[p + 1];
            continue;
        }
        const int i = p + 1 - np;
        tok = v4_argmax(logits, V);
        if (tok != gen[i] || !same_bits(logits, gref + (size_t)i * V, V)) {
            CHECK(0, "%s: greedy token %d: got %d want %d (logits %s)", lay, i, tok, gen[i],
                  same_bits(logits, gref + (size_t)i * V, V) ? "equal" : "differ");
            ok = 0;
        }
    }
    CHECK(ok, "%s: greedy generation reproduces %d tokens", lay, ng);
    CHECK(g_cpu || v4_cuda_backend_status(be, &err) == 0, "%s: CUDA failure: %s", lay, err.msg);
    free(logits);
    free(ref);
    free(gref);
    v4_seq_free(s);
    v4_ctx_free(c);
    be->ops->destroy(be);
    v4_model_close(&m);
}
#endif

int main(void)
{
#ifndef V4_HAVE_CUDA
    (void)t_failures;
    (void)t_checks;
    printf("SKIPPED: built without the CUDA backend (V4_CUDA=OFF or no nvcc)\n");
    return 77;
#else
    char why[256] = "";
    const char *self = getenv("V4_CUDA_GOLDEN_SELFTEST");
    g_cpu = self && !strcmp(self, "1");
    if (!g_cpu && v4_cuda_device_count(why, sizeof why) <= 0) {
        printf("SKIPPED: %s\n", why);
        return 77;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/golden/tiny", t_env("V4_TEST_DATA", "tests/data"));
    char path[4200];
    snprintf(path, sizeof path, "%s/tokens.json", dir);
    json_error_t jerr;
    json_t *tok = json_load_file(path, 0, &jerr);
    CHECK(tok != NULL, "%s: %s", path, jerr.text);
    if (!tok)
        TEST_DONE();
    int P, np, ng;
    int *seq = json_ids(tok, "sequence", &P), *prompt = json_ids(tok, "prompt", &np), *gen = json_ids(tok, "generated", &ng);
    run_model(dir, 0, seq, P, prompt, np, gen, ng);
    run_model(dir, V4_OPEN_NO_PREPARE, seq, P, prompt, np, gen, ng);
    json_decref(tok);
    free(seq);
    free(prompt);
    free(gen);
    TEST_DONE();
#endif
}
