/* test_numcheck.c - the measures of numerics-check (worker/tools/numcheck.h) against
 * values computed by hand, and the per-kernel check on the golden tiny model:
 *   - calc_diff: 0 for equal tensors and for all zeros; 1 - 2*2/5 = 0.2 for x against
 *     2x; 1 against -x... (2.0: 1 - 2(-1)/2); sums over several calls equal one call;
 *     NaN/Inf: matching patterns are left out, a NaN against a number, +inf against
 *     -inf and a number against inf each count once;
 *   - KL: 0 for equal rows and for rows that differ by a constant; KL of two 2-logit
 *     rows against the closed form; +inf where q has no mass; NaN for a NaN row;
 *   - top-2 margin and the lowest index on ties; Jaccard with duplicates and empty
 *     sets; nearest-rank quantiles;
 *   - v4nc_kernels on the golden tiny model: exact against exact gives calc_diff 0 and
 *     no pattern mismatch on every type/mode row, fast against exact stays within
 *     1e-6, the rows cover FP8 quant, FP8 bf16 (wo_a), FP4 quant, BF16 exact (router,
 *     compressor, indexer), BF16 bf16 (the head) and F32 exact (mHC), and the exact
 *     rows (V4_LIN_EXACT stays exact in the fast mode) give calc_diff 0. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cache/model_files.h"
#include "kernels/cpu/cpu_backend.h"
#include "testutil.h"
#include "worker/tools/numcheck.h"

static void measures(void)
{
    float x[4] = {1, -2, 0.5f, 3}, y[4], z[4] = {0, 0, 0, 0};
    v4_diff d = {0};
    v4_diff_add(&d, x, x, 4);
    CHECK(v4_diff_value(&d) == 0.0, "equal: %g", v4_diff_value(&d));
    d = (v4_diff){0};
    v4_diff_add(&d, z, z, 4);
    CHECK(v4_diff_value(&d) == 0.0 && d.n == 4, "zeros");
    for (int i = 0; i < 4; i++)
        y[i] = 2 * x[i];
    d = (v4_diff){0};
    v4_diff_add(&d, x, y, 4);
    CHECK(fabs(v4_diff_value(&d) - 0.2) < 1e-15, "x vs 2x: %.17g", v4_diff_value(&d));
    v4_diff d2 = {0};
    v4_diff_add(&d2, x, y, 2);
    v4_diff_add(&d2, x + 2, y + 2, 2);
    CHECK(v4_diff_value(&d2) == v4_diff_value(&d), "split sums");
    for (int i = 0; i < 4; i++)
        y[i] = -x[i];
    d = (v4_diff){0};
    v4_diff_add(&d, x, y, 4);
    CHECK(v4_diff_value(&d) == 2.0, "x vs -x: %g", v4_diff_value(&d));

    float a[6] = {NAN, INFINITY, -INFINITY, 1, NAN, 2}, b[6] = {NAN, INFINITY, -INFINITY, 1, 1, INFINITY};
    d = (v4_diff){0};
    v4_diff_add(&d, a, b, 6);
    CHECK(d.pattern_bad == 2 && d.n == 6 && v4_diff_value(&d) == 0.0, "pattern: %ld bad, %g", d.pattern_bad,
          v4_diff_value(&d));
    float c[2] = {INFINITY, 1}, e[2] = {-INFINITY, 1};
    d = (v4_diff){0};
    v4_diff_add(&d, c, e, 2);
    CHECK(d.pattern_bad == 1, "+inf vs -inf");

    float p[3] = {1, 2, 3}, q[3] = {11, 12, 13};
    CHECK(v4nc_kl(p, p, 3) == 0.0, "KL equal");
    CHECK(fabs(v4nc_kl(p, q, 3)) < 1e-15, "KL shifted: %g", v4nc_kl(p, q, 3));
    float p2[2] = {0, 0}, q2[2] = {0, (float)log(3.0)};
    /* p = (1/2, 1/2), q = (1/4, 3/4): KL = 1/2 ln 2 + 1/2 ln(2/3) */
    const double want = 0.5 * log(2.0) + 0.5 * log(2.0 / 3.0);
    CHECK(fabs(v4nc_kl(p2, q2, 2) - want) < 1e-7, "KL closed form: %.9g vs %.9g", v4nc_kl(p2, q2, 2), want);
    float q3[2] = {0, -INFINITY};
    CHECK(isinf(v4nc_kl(p2, q3, 2)), "KL no mass: %g", v4nc_kl(p2, q3, 2));
    float pn[2] = {0, NAN};
    CHECK(isnan(v4nc_kl(pn, p2, 2)), "KL NaN row");

    double m;
    float t[5] = {1, 4, 2, 4, 3.5f};
    CHECK(v4nc_top2(t, 5, &m) == 1 && m == 0.0, "top2 tie: margin %g", m);
    float t2[4] = {1, 4, 2, 3.75f};
    CHECK(v4nc_top2(t2, 4, &m) == 1 && m == 0.25, "top2: margin %g", m);

    int32_t s1[4] = {1, 2, 3, 3}, s2[3] = {3, 4, 1};
    CHECK(v4nc_jaccard(s1, 4, s2, 3) == 0.5, "jaccard %g", v4nc_jaccard(s1, 4, s2, 3));
    CHECK(v4nc_jaccard(s1, 0, s2, 0) == 1.0, "jaccard empty");
    CHECK(v4nc_jaccard(s1, 2, s2, 0) == 0.0, "jaccard one empty");
    CHECK(v4nc_jaccard(s2, 3, s2, 3) == 1.0, "jaccard equal");

    double v[10] = {9, 1, 8, 2, 7, 3, 6, 4, 5, 10};
    CHECK(v4nc_quantile(v, 10, 0.5) == 5.0, "median %g", v[4]);
    CHECK(v4nc_quantile(v, 10, 0.999) == 10.0, "p99.9");
    CHECK(v4nc_quantile(v, 10, 0.0) == 1.0, "p0");
    CHECK(v4nc_quantile(v, 0, 0.5) == 0.0, "empty");
}

static void kernels(void)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/golden/tiny/model", t_env("V4_TEST_DATA", "tests/data"));
    v4_model_files m;
    v4_error err = {0};
    if (v4_model_open(dir, &m, &err)) {
        CHECK(0, "open %s: %s", dir, err.msg);
        return;
    }
    v4_backend *ex = v4_cpu_backend_create_ex(1, "auto", "exact", &err);
    v4_backend *ex2 = v4_cpu_backend_create_ex(2, "scalar", "exact", &err);
    v4_backend *fa = v4_cpu_backend_create_ex(2, "auto", "fast", &err);
    CHECK(ex && ex2 && fa, "backends: %s", err.msg);
    if (ex && ex2 && fa) {
        v4nc_kernel_row r[16];
        int n = 0;
        CHECK(v4nc_kernels(&m.w, ex, ex2, 8, r, 16, &n, &err) == 0, "kernels: %s", err.msg);
        CHECK(n == 6, "type/mode rows %d", n);
        int seen = 0;
        for (int i = 0; i < n; i++) {
            CHECK(r[i].worst == 0.0 && r[i].pattern_bad == 0, "exact vs exact %s %s: %g", r[i].type, r[i].mode,
                  r[i].worst);
            const char *want[6][2] = {{"FP8", "quant"}, {"FP8", "bf16"}, {"FP4", "quant"}, {"BF16", "exact"},
                                      {"BF16", "bf16"}, {"F32", "exact"}};
            for (int j = 0; j < 6; j++)
                if (!strcmp(r[i].type, want[j][0]) && !strcmp(r[i].mode, want[j][1]))
                    seen |= 1 << j;
        }
        CHECK(seen == 63, "rows seen mask %d", seen);
        CHECK(v4nc_kernels(&m.w, ex, fa, 8, r, 16, &n, &err) == 0, "kernels fast: %s", err.msg);
        int total = 0;
        for (int i = 0; i < n; i++) {
            CHECK(r[i].worst <= 1e-6 && r[i].pattern_bad == 0, "fast %s %s: %g at %s", r[i].type, r[i].mode,
                  r[i].worst, r[i].worst_at);
            if (!strcmp(r[i].mode, "exact"))
                CHECK(r[i].worst == 0.0, "fast %s exact: %g (V4_LIN_EXACT must stay exact)", r[i].type, r[i].worst);
            total += r[i].matrices;
            printf("  fast vs exact %-4s %-5s %3d matrices  worst calc_diff %.3g (%s)\n", r[i].type, r[i].mode,
                   r[i].matrices, r[i].worst, r[i].worst_at);
        }
        /* tiny: 4 layers x (2 mHC + 5 attention + 6 shared/2 routed experts ... ) + head + hc_head */
        CHECK(total >= 4 * 16, "matrices checked %d", total);
    }
    v4_backend *all[3] = {ex, ex2, fa};
    for (int i = 0; i < 3; i++)
        if (all[i])
            all[i]->ops->destroy(all[i]);
    v4_model_close(&m);
}

int main(void)
{
    measures();
    kernels();
    TEST_DONE();
}
