/* test_expert_provider.c - the decode path with routed experts from a provider
 * (kernels/v4/model.h v4_expert_provider) on the golden tiny model: a provider that
 * copies each requested expert into a fresh block (cache/expert_block.h) and poisons it
 * on release reproduces the golden logits bit for bit, single and batched (3 sequences
 * at different positions); acquire gets distinct ids in ascending order; the hash
 * layers' experts are prefetched before they are acquired; a failing acquire fails the
 * step with the provider's error, marks the sequences broken (later steps refused) and
 * v4_seq_reset makes them usable again. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/expert_block.h"
#include "cache/model_files.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/v4/model.h"
#include "golden_data.h"
#include "testutil.h"

typedef struct prov {
    const v4_weights *w;
    v4_xblock_layout lo;
    uint8_t *blocks[1024];      /* one fresh block per acquired id of the current layer */
    int held, acquires, releases, order_bad, prefetch_miss;
    int fail_layer, fail_at;    /* fail the fail_at-th acquire (counting from 1) of fail_layer */
    uint8_t prefetched[64][1024];
} prov;

static int p_acquire(void *ud, int layer, const int *ids, int n, v4_expert_w *out, v4_error *err)
{
    prov *p = ud;
    p->acquires++;
    if (layer == p->fail_layer && p->acquires == p->fail_at)
        return v4_err_set(err, V4_ERR_CORRUPT, "test provider", "layer %d expert %d: injected failure", layer, ids[0]);
    for (int i = 0; i < n; i++) {
        if (i && ids[i] <= ids[i - 1])
            p->order_bad++;
        if (p->w->layers[layer].tid2eid && !p->prefetched[layer][ids[i]])
            p->prefetch_miss++;
        p->blocks[i] = aligned_alloc(V4_XBLOCK_ALIGN, p->lo.bytes);
        v4_xblock_fill(&p->w->cfg, &p->lo, &p->w->layers[layer].experts[ids[i]], p->blocks[i]);
        v4_xblock_bind(&p->w->cfg, &p->lo, p->blocks[i], &out[i]);
    }
    p->held = n;
    return 0;
}

static void p_release(void *ud, int layer, const int *ids, int n)
{
    (void)layer;
    (void)ids;
    prov *p = ud;
    p->releases++;
    for (int i = 0; i < n && i < p->held; i++) {
        memset(p->blocks[i], 0xFF, p->lo.bytes);   /* any later use would show */
        free(p->blocks[i]);
    }
    p->held = 0;
}

static void p_prefetch(void *ud, int layer, const int *ids, int n)
{
    prov *p = ud;
    for (int i = 0; i < n; i++)
        p->prefetched[layer][ids[i]] = 1;
}

int main(void)
{
    v4_model_files m;
    v4_error err = {0};
    const int P = 64;
    int32_t *ids;
    float *ref;
    if (t_golden_load(&m, P, &ids, &ref, NULL, 0))
        return 1;
    const int V = m.cfg.vocab_size;

    static prov pv;
    pv.w = &m.w;
    v4_xblock_layout_of(&m.cfg, &pv.lo);
    pv.fail_layer = -1;
    v4_expert_provider xp = {p_acquire, p_release, p_prefetch, &pv};
    v4_backend *be = v4_cpu_backend_create(1, "auto", &err);
    v4_ctx *c = v4_ctx_create(&m.w, be, 3, &err);
    v4_ctx_set_expert_provider(c, &xp);
    float *logits = malloc(sizeof(float) * 3 * (size_t)V);

    /* one sequence */
    v4_seq *s = v4_seq_create(&m.w, P, &err);
    int bad = 0;
    for (int p = 0; p < P; p++) {
        memset(pv.prefetched, 0, sizeof pv.prefetched);
        CHECK(v4_step(c, &s, &ids[p], 1, logits, NULL, &err) == 0, "step %d: %s", p, err.msg);
        bad += memcmp(logits, ref + (size_t)p * V, sizeof(float) * V) != 0;
    }
    CHECK(bad == 0, "%d positions differ from the golden logits with provided experts", bad);
    CHECK(pv.acquires == P * m.cfg.n_layers && pv.releases == pv.acquires, "one acquire + release per layer and step "
          "(%d, %d)", pv.acquires, pv.releases);
    CHECK(pv.order_bad == 0, "ids ascending and distinct");
    CHECK(pv.prefetch_miss == 0, "hash layers' experts were prefetched before acquire (%d misses)", pv.prefetch_miss);

    /* batched: 3 sequences offset by 0 / 3 / 11 */
    v4_seq *b3[3];
    for (int i = 0; i < 3; i++)
        b3[i] = v4_seq_create(&m.w, P, &err);
    const int start[3] = {0, 3, 11};
    bad = 0;
    for (int step = 0; step < P + 11; step++) {
        v4_seq *act[3];
        int32_t tk[3];
        int rowpos[3], n = 0;
        for (int i = 0; i < 3; i++) {
            int p = step - start[i];
            if (p < 0 || p >= P)
                continue;
            act[n] = b3[i];
            tk[n] = ids[p];
            rowpos[n++] = p;
        }
        memset(pv.prefetched, 0, sizeof pv.prefetched);
        CHECK(v4_step(c, act, tk, n, logits, NULL, &err) == 0, "batched step %d: %s", step, err.msg);
        for (int r = 0; r < n; r++)
            bad += memcmp(logits + (size_t)r * V, ref + (size_t)rowpos[r] * V, sizeof(float) * V) != 0;
    }
    CHECK(bad == 0, "%d batched rows differ", bad);
    CHECK(pv.prefetch_miss == 0 && pv.order_bad == 0, "batched: prefetch and order");

    /* a failing acquire */
    v4_seq_reset(s);
    pv.acquires = pv.releases = 0;
    pv.fail_layer = 2;
    pv.fail_at = 3;   /* layers 0, 1 succeed, layer 2 fails */
    CHECK(v4_step(c, &s, &ids[0], 1, logits, NULL, &err) == -1 && err.code == V4_ERR_CORRUPT &&
              strstr(err.msg, "injected failure"), "provider error fails the step: %s", err.msg);
    CHECK(pv.held == 0 && pv.releases == 2, "the layers before the failure were released (%d)", pv.releases);
    pv.fail_layer = -1;
    CHECK(v4_step(c, &s, &ids[0], 1, logits, NULL, &err) == -1 && strstr(err.msg, "broken"),
          "a broken sequence is refused: %s", err.msg);
    v4_seq_reset(s);
    CHECK(v4_step(c, &s, &ids[0], 1, logits, NULL, &err) == 0 && !memcmp(logits, ref, sizeof(float) * V),
          "after reset the sequence works again");

    /* provider removed: the weights' experts */
    v4_ctx_set_expert_provider(c, NULL);
    int before = pv.acquires;
    CHECK(v4_step(c, &s, &ids[1], 1, logits, NULL, &err) == 0 && pv.acquires == before &&
              !memcmp(logits, ref + V, sizeof(float) * V), "without a provider");

    for (int i = 0; i < 3; i++)
        v4_seq_free(b3[i]);
    v4_seq_free(s);
    v4_ctx_free(c);
    be->ops->destroy(be);
    free(logits);
    free(ref);
    free(ids);
    v4_model_close(&m);
    TEST_DONE();
}
