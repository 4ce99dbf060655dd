/* step_check.cpp - the check of the device-resident decode step (cuda_step.h)
 * against the CPU engine (kernels/v4, scalar backend) on the golden tiny model in
 * DATA/golden/tiny:
 *   1. one sequence, teacher-forced through the golden sequence's first P positions
 *      (136: the window wraps, CSA blocks complete and the first HCA block of 128
 *      completes): logits bit for bit, routed expert ids and weights, indexer
 *      selections and counts, at every position; every MoE layer ran the on-device
 *      grouped path (cuda_moe.h: all experts resident);
 *   2. three sequences stepped together in one batch, joining at different steps and
 *      leaving early: every row equals the single-sequence CPU run of its tokens; a
 *      reset sequence starts over; a fourth sequence takes the least recently used of
 *      the 3 device slots and the evicted sequence is then refused with a clear error;
 *   3. paged experts on the grouped path: engines with device slots for one layer's
 *      experts of a token, a quarter and all of the routed experts give the all-resident
 *      run's numbers byte for byte, hash and score layers alike (evictions with the small
 *      budgets, none with all; every MoE layer grouped; host waits: 0 per hash layer, 1
 *      per score layer, counted by the engine); a budget below one token's experts
 *      fails the step with the slot pool's reason;
 *   4. paged experts whose bytes come from the host expert cache (cache/
 *      expert_provider.h, source: the safetensors, half the experts' bytes) instead
 *      of the mapped weights: the same numbers, the misses loaded through the cache.
 *   5. prefill chunks: up to 40 rows of one sequence in a step, another sequence's
 *      row among them, some steps wanting only some rows' logits: every row equals
 *      the one-row CPU run, with every expert resident and with paged experts in slots
 *      for one layer's experts (a step's union fits: chunks, evicting inside a step);
 *      slots below that give one row per sequence; in the emulation also the fast
 *      mode's orchestration (its products decline, so the exact ones run): grouped and
 *      host-driven MoE layers mixed by rows per expert, the same bytes, counted; and
 *      with the tensor-core grouped products (cuda_mma.h, WMMA emulated) on: every
 *      layer step grouped, the large ones on the tensor cores, counted, the logits and
 *      expert sets within loose bounds of the exact run.
 * The misses are copied on a copy stream; in the emulation (simt_emu.h) such copies
 * run only when waited for, so a kernel that read a slot before its ready event
 * would see stale bytes and this check would fail.
 * Linked twice: with the CPU emulation of the kernels (emulate_step.cpp:
 * test_cuda_step_emulated, every CUDA build) and with the real CUDA library
 * (step_check_gpu.cpp: test_cuda_step, SKIPPED without a GPU).
 * Ownership/threads: a throwaway program; memory is freed at exit.
 */
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/calc_diff.h"
#include "kernels/cuda/cuda_plan.h"
#include "kernels/cuda/cuda_step.h"
#include "step_check.h"

extern "C" {
#include <jansson.h>

#include "cache/expert_block.h"
#include "cache/expert_provider.h"
#include "cache/model_files.h"
#include "kernels/cpu/cpu_backend.h"
}

static int bad_total;
/* the fast mode's tensor-core MoE against the exact run (chunk_check) */
#define NEAR_CALC_DIFF 1e-2
#define NEAR_ROUTES 0.9

struct obs {
    std::vector<float> logits, route_w;
    std::vector<int32_t> route_ids, index_ids, index_count;
};

static void obs_init(obs &o, const v4_config *c, v4_trace *t)
{
    o.logits.assign((size_t)c->vocab_size, 0.0f);
    o.route_ids.assign((size_t)c->n_layers * c->n_act_experts, -7);
    o.route_w.assign(o.route_ids.size(), -7.0f);
    o.index_ids.assign((size_t)c->n_layers * c->index_topk, -7);
    o.index_count.assign((size_t)c->n_layers, -1);
    *t = v4_trace{};
    t->route_ids = o.route_ids.data();
    t->route_w = o.route_w.data();
    t->index_ids = o.index_ids.data();
    t->index_count = o.index_count.data();
}

/* Run tokens through ctx one sequence at a time; obs per position. */
static int run_one(v4_ctx *ctx, const v4_weights *w, const std::vector<int> &toks, std::vector<obs> &out)
{
    const v4_config *c = &w->cfg;
    v4_error err = {};
    v4_seq *s = v4_seq_create(w, (int)toks.size() + 1, &err);
    if (!s)
        return -1;
    out.assign(toks.size(), obs{});
    for (size_t p = 0; p < toks.size(); p++) {
        obs &o = out[p];
        v4_trace t;
        obs_init(o, c, &t);
        v4_trace *tp = &t;
        int32_t tok = toks[p];
        if (v4_step(ctx, &s, &tok, 1, o.logits.data(), &tp, &err)) {
            printf("step %zu failed: %s: %s\n", p, err.where, err.msg);
            v4_seq_free(s);
            return -1;
        }
    }
    v4_seq_free(s);
    return 0;
}

static void compare(const char *what, const obs &a, const obs &b, int pos)
{
    int bad = 0;
    for (size_t i = 0; i < a.logits.size(); i++)
        if (memcmp(&a.logits[i], &b.logits[i], 4) && bad++ < 2)
            printf("  %s pos %d logit %zu: cpu %a device %a\n", what, pos, i, (double)a.logits[i],
                   (double)b.logits[i]);
    for (size_t i = 0; i < a.route_ids.size(); i++)
        if ((a.route_ids[i] != b.route_ids[i] || memcmp(&a.route_w[i], &b.route_w[i], 4)) && bad++ < 4)
            printf("  %s pos %d route %zu: cpu %d/%a device %d/%a\n", what, pos, i, a.route_ids[i],
                   (double)a.route_w[i], b.route_ids[i], (double)b.route_w[i]);
    for (size_t i = 0; i < a.index_ids.size(); i++)
        if (a.index_ids[i] != b.index_ids[i] && bad++ < 6)
            printf("  %s pos %d index %zu: cpu %d device %d\n", what, pos, i, a.index_ids[i], b.index_ids[i]);
    for (size_t i = 0; i < a.index_count.size(); i++)
        if (a.index_count[i] != b.index_count[i] && bad++ < 8)
            printf("  %s pos %d index count L%zu: cpu %d device %d\n", what, pos, i, a.index_count[i],
                   b.index_count[i]);
    bad_total += bad;
}

/* A paged engine (budget bytes of slots, misses from inner or the weights) on a new
 * context *ctx of be: the first P tokens of seq, compared with ref (labelled what).
 * NULL when it cannot be set up or a step fails (printed). */
static v4_cuda_engine *run_paged(v4_backend *be, const v4_weights *w, size_t budget, const v4_expert_provider *inner,
                                 const std::vector<int> &seq, int P, const std::vector<obs> &ref, const char *what,
                                 v4_ctx **ctx, int lookahead = 1)
{
    v4_error err = {};
    *ctx = v4_ctx_create(w, be, 3, &err);
    v4_cuda_engine *eng = *ctx ? v4_cuda_engine_create_paged(w, 3, 3, budget, inner, V4_XPOL_NEXT, &err) : NULL;
    if (!eng) {
        printf("%s engine: %s: %s\n", what, err.where, err.msg);
        return NULL;
    }
    v4_cuda_engine_set_lookahead(eng, lookahead);
    v4_step_impl impl = v4_cuda_engine_impl(eng);
    v4_ctx_set_step_impl(*ctx, &impl);
    std::vector<int> toks(seq.begin(), seq.begin() + P);
    std::vector<obs> out;
    if (run_one(*ctx, w, toks, out)) {
        v4_cuda_engine_free(eng);
        return NULL;
    }
    for (int p = 0; p < P; p++)
        compare(what, ref[(size_t)p], out[(size_t)p], p);
    return eng;
}

/* Three sequences (tokens rt[r], CPU references ref[r]) stepped together on dev, row
 * r joining at step starts[r] for lens[r] positions, n1 steps: every row compared
 * (labelled what).  Returns the steps run, or -1 when one fails (printed). */
static int run_batch(v4_ctx *dev, const v4_weights *w, v4_seq *const *ss, const std::vector<std::vector<int>> &rt,
                     const std::vector<std::vector<obs>> &ref, const int *starts, const int *lens, int n1,
                     const char *what)
{
    v4_error err = {};
    int steps = 0;
    for (int step = 0; step < n1; step++) {
        v4_seq *rows[3];
        int32_t tk[3], idx[3], n = 0;
        for (int r = 0; r < 3; r++) {
            const int p = step - starts[r];
            if (p < 0 || p >= lens[r])
                continue;
            rows[n] = ss[r];
            tk[n] = rt[r][(size_t)p];
            idx[n++] = r;
        }
        if (!n)
            continue;
        steps++;
        std::vector<obs> o((size_t)n);
        std::vector<v4_trace> t((size_t)n);
        std::vector<v4_trace *> tp((size_t)n);
        std::vector<float> lg((size_t)n * w->cfg.vocab_size);
        for (int k = 0; k < n; k++) {
            obs_init(o[k], &w->cfg, &t[k]);
            tp[k] = &t[k];
        }
        if (v4_step(dev, rows, tk, n, lg.data(), tp.data(), &err)) {
            printf("%s: step %d failed: %s: %s\n", what, step, err.where, err.msg);
            return -1;
        }
        for (int k = 0; k < n; k++) {
            o[k].logits.assign(lg.begin() + (long)k * w->cfg.vocab_size, lg.begin() + (long)(k + 1) * w->cfg.vocab_size);
            const int r = idx[k];
            compare(what, ref[r][(size_t)(step - starts[r])], o[k], step - starts[r]);
        }
    }
    return steps;
}

/* 5. prefill chunks: an engine of 48 rows (budget 0: every expert resident, else
 * paged experts in budget bytes of slots) takes sequence A's first P positions in
 * chunks of 1..40 rows (across the window's wrap, CSA and HCA blocks completing inside
 * a chunk), with a row of sequence B (tokens bt, one per step) in the middle of each
 * chunk; every step's rows equal the one-row CPU runs a / bref (logits, routes, indexer
 * selections); odd steps want only A's last row and B's row (the head runs on those
 * alone; the other rows' traces are still compared).  An engine whose rows_per_seq is 1
 * (paged slots below one step's union) must say so and is then fed one row per
 * sequence.  Returns 1 ok, 0 mismatches (counted), -1 a setup or step failure (printed). */
static int chunk_check(v4_backend *be, const v4_weights *w, size_t budget, const char *what, int P,
                       const std::vector<int> &seq, const std::vector<obs> &a, const std::vector<int> &bt,
                       const std::vector<obs> &bref, void *lt, int mma)
{
    v4_error err = {};
    const int before5 = bad_total, R = 48, K = w->cfg.n_act_experts, E = w->cfg.n_routed_experts;
    v4_ctx *dev5 = v4_ctx_create(w, be, R, &err);
    v4_cuda_engine *eng5 = !dev5     ? NULL
                           : budget ? v4_cuda_engine_create_paged(w, R, 4, budget, NULL, V4_XPOL_NEXT, &err)
                                    : v4_cuda_engine_create(w, R, 4, 0, &err);
    if (!eng5) {
        printf("chunk engine (%s): %s: %s\n", what, err.where, err.msg);
        return -1;
    }
    if (v4_cuda_engine_set_seq_page(eng5, 4, &err)) {
        printf("chunk engine (%s): %s\n", what, err.msg);
        return -1;
    }
    if (lt && (v4_cuda_engine_use_fast(eng5, lt, &err) || v4_cuda_engine_set_mma(eng5, mma))) {
        printf("chunk engine (%s): fast mode: %s: %s\n", what, err.where, err.msg);
        return -1;
    }
    v4_step_impl impl5 = v4_cuda_engine_impl(eng5);
    v4_ctx_set_step_impl(dev5, &impl5);
    const int per_seq = v4_ctx_rows_per_seq(dev5);
    v4_cuda_expert_stats xs0;
    v4_cuda_engine_expert_stats(eng5, &xs0);
    const int union_fits = !budget || xs0.slots >= (R * K < E ? R * K : E);
    v4_seq *A = v4_seq_create(w, P + 1, &err), *B = v4_seq_create(w, 64, &err);
    const int chunks[] = {1, 5, 37, 2, 40, 16, 35};
    int at = 0, bp = 0, steps = 0, maxc = 0;
    const int V = w->cfg.vocab_size, L = w->cfg.n_layers;
    /* the fast mode's expected counts, step by step: steps of few rows per expert take
     * the exact grouped kernels; the others the tensor-core grouped products (mma) or
     * the host-driven per-expert path (4 waits per layer); a paged score layer on the
     * grouped path waits once */
    uint64_t grouped = 0, mma_steps = 0, syncs = 0;
    int score_layers = 0;
    for (int l = 0; l < L; l++)
        score_layers += w->layers[l].tid2eid == NULL;
    /* with the tensor-core products the bytes differ from the exact path's: the logits
     * and routes are compared within bounds instead */
    v4_diff ld = {};
    long route_same = 0, route_all = 0, argmax_same = 0, argmax_all = 0, nonfinite = 0;
    while (at < P && bp < (int)bt.size()) {
        int c = chunks[steps % 7] < P - at ? chunks[steps % 7] : P - at;
        c = c < per_seq ? c : per_seq;
        const int n = c + 1;
        std::vector<v4_seq *> rows((size_t)n);
        std::vector<int32_t> tk((size_t)n);
        std::vector<int> want((size_t)n), src((size_t)n);   /* src: A's position, or -1 for B */
        for (int k = 0, j = 0; k < n; k++) {
            const int isb = k == c / 2;
            rows[k] = isb ? B : A;
            src[k] = isb ? -1 : at + j;
            tk[k] = isb ? bt[(size_t)bp] : seq[(size_t)(at + j)];
            want[k] = !(steps & 1) || isb || j == c - 1;
            j += !isb;
        }
        std::vector<obs> o((size_t)n);
        std::vector<v4_trace> t((size_t)n);
        std::vector<v4_trace *> tp((size_t)n);
        std::vector<float> lg((size_t)n * V);
        for (int k = 0; k < n; k++) {
            obs_init(o[k], &w->cfg, &t[k]);
            tp[k] = &t[k];
        }
        if (v4_step_rows(dev5, rows.data(), tk.data(), n, lg.data(), want.data(), tp.data(), &err)) {
            printf("chunk step %d (%s, %d rows) failed: %s: %s\n", steps, what, n, err.where, err.msg);
            return -1;
        }
        for (int k = 0; k < n; k++) {
            const obs &r = src[k] < 0 ? bref[(size_t)bp] : a[(size_t)src[k]];
            if (want[k])
                o[k].logits.assign(lg.begin() + (long)k * V, lg.begin() + (long)(k + 1) * V);
            else
                o[k].logits = r.logits;   /* unspecified: only the traces are compared */
            if (!(lt && mma)) {
                compare(src[k] < 0 ? "chunk B" : "chunk A", r, o[k], src[k] < 0 ? bp : src[k]);
                continue;
            }
            if (want[k]) {
                v4_diff_add(&ld, r.logits.data(), o[k].logits.data(), (size_t)V);
                int ia = 0, ib = 0;
                for (int v = 0; v < V; v++) {
                    ia = r.logits[(size_t)v] > r.logits[(size_t)ia] ? v : ia;
                    ib = o[k].logits[(size_t)v] > o[k].logits[(size_t)ib] ? v : ib;
                    nonfinite += !std::isfinite(o[k].logits[(size_t)v]);
                }
                argmax_same += ia == ib;
                argmax_all++;
            }
            for (int l = 0; l < L; l++)   /* the layer's expert set */
                for (int j = 0; j < K; j++) {
                    int found = 0;
                    for (int q = 0; q < K; q++)
                        found |= o[k].route_ids[(size_t)l * K + j] == r.route_ids[(size_t)l * K + q];
                    route_same += found;
                    route_all++;
                }
        }
        if (lt) {
            const int g = v4_cuda_fast_moe_grouped(n, K, E), on_dev = g || mma;
            grouped += on_dev ? (uint64_t)L : 0;
            mma_steps += !g && mma ? (uint64_t)L : 0;
            syncs += on_dev ? (budget ? (uint64_t)score_layers : 0) : 4 * (uint64_t)L;
        }
        at += c;
        bp++;
        steps++;
        maxc = c > maxc ? c : maxc;
    }
    v4_cuda_expert_stats xs;
    v4_cuda_engine_expert_stats(eng5, &xs);
    const int pos_ok = union_fits ? v4_seq_pos(A) == P && v4_seq_pos(B) == steps
                                  : v4_seq_pos(A) == steps && v4_seq_pos(B) == steps;
    const int paged_ok = !budget || (xs.misses > 0 && (union_fits ? xs.evictions > 0 : 1));
    /* counted exactly; without the tensor cores some layer steps are host-driven, with
     * them every one is grouped and some run the tensor-core products */
    const int fast_ok = !lt || (xs.grouped_moe_layers == grouped && xs.moe_host_syncs == syncs &&
                                xs.mma_moe_layers == mma_steps && grouped > 0 &&
                                (mma ? grouped == xs.moe_layers && mma_steps > 0 : grouped < xs.moe_layers));
    /* the tensor-core run within bounds of the exact one (the tiny model is chaotic: a
     * bf16 ulp flips routes downstream, so the bounds are loose; a layout fault gives
     * calc_diff ~0.5) */
    const double lcd = v4_diff_value(&ld);
    const int near_ok = !(lt && mma) || (nonfinite == 0 && ld.pattern_bad == 0 && lcd <= NEAR_CALC_DIFF &&
                                         route_same >= (long)(NEAR_ROUTES * (double)route_all) && argmax_all > 0);
    if (lt && mma)
        printf("  tensor-core run against the exact: logits calc_diff %.3g (bound %.0e), argmax %ld of %ld, expert "
               "sets %ld of %ld (bound %.0f%%), %ld non-finite\n",
               lcd, NEAR_CALC_DIFF, argmax_same, argmax_all, route_same, route_all, 100 * NEAR_ROUTES, nonfinite);
    const int ok5 =
        bad_total == before5 && per_seq == (union_fits ? R : 1) && pos_ok && paged_ok && fast_ok && near_ok;
    printf("prefill chunks, %s (%d slots; %d rows per sequence): %d positions of A in %d steps (up to %d rows) with "
           "B's rows between: %s (%d mismatches; A at %d, B at %d; misses %llu, evictions %llu; grouped %llu of %llu "
           "layer steps, %llu with tensor cores, host waits %llu)\n",
           what, xs.slots, per_seq, at, steps, maxc, ok5 ? "ok" : "FAIL", bad_total - before5, v4_seq_pos(A),
           v4_seq_pos(B), (unsigned long long)xs.misses, (unsigned long long)xs.evictions,
           (unsigned long long)xs.grouped_moe_layers, (unsigned long long)xs.moe_layers,
           (unsigned long long)xs.mma_moe_layers, (unsigned long long)xs.moe_host_syncs);
    bad_total += !ok5 && bad_total == before5;
    v4_seq_free(A);
    v4_seq_free(B);
    v4_cuda_engine_free(eng5);
    v4_ctx_free(dev5);
    return ok5;
}

int v4_step_check(const char *data, int P, void *stand_in_lt)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    char dir[4200], path[4300];
    snprintf(dir, sizeof dir, "%s/golden/tiny", data);
    snprintf(path, sizeof path, "%s/model", dir);
    v4_model_files m;
    v4_error err = {};
    if (v4_model_open(path, &m, &err)) {
        printf("model %s: %s\n", path, err.msg);
        return 1;
    }
    snprintf(path, sizeof path, "%s/tokens.json", dir);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    json_t *sq = root ? json_object_get(root, "sequence") : NULL;
    if (!sq || (int)json_array_size(sq) < P + 40) {
        printf("%s: no sequence of %d tokens\n", path, P + 40);
        return 1;
    }
    std::vector<int> seq(json_array_size(sq));
    for (size_t i = 0; i < seq.size(); i++)
        seq[i] = (int)json_integer_value(json_array_get(sq, i));
    json_decref(root);
    const v4_weights *w = &m.w;

    v4_backend *be = v4_cpu_backend_create(1, "scalar", &err);
    v4_ctx *cpu = be ? v4_ctx_create(w, be, 3, &err) : NULL;
    v4_ctx *dev = be ? v4_ctx_create(w, be, 3, &err) : NULL;
    v4_cuda_engine *eng = dev ? v4_cuda_engine_create(w, 3, 3, 0, &err) : NULL;
    if (!eng) {
        printf("setup: %s: %s\n", err.where, err.msg);
        return 1;
    }
    printf("device engine: %.1f MiB of (emulated) device memory\n", (double)v4_cuda_engine_bytes(eng) / (1 << 20));
    /* sequence cache pages of 2 entries: sections 1 and 2 cross a page every 8
     * positions of a ratio-4 layer (the indexer's scores and picks read through the
     * page tables); the paged-expert engines keep the default pages */
    if (v4_cuda_engine_set_seq_page(eng, 2, &err) || v4_cuda_engine_set_seq_page(eng, 3, &err) == 0) {
        printf("sequence pages: %s (or 3 entries accepted)\n", err.msg);
        return 1;
    }
    v4_step_impl impl = v4_cuda_engine_impl(eng);
    v4_ctx_set_step_impl(dev, &impl);

    /* 1. one sequence, P positions */
    std::vector<int> toks(seq.begin(), seq.begin() + P);
    std::vector<obs> a, b;
    if (run_one(cpu, w, toks, a) || run_one(dev, w, toks, b))
        return 1;
    for (int p = 0; p < P; p++)
        compare("single", a[p], b[p], p);
    int csa_sel = 0;
    for (int l = 0; l < w->cfg.n_layers; l++)
        csa_sel += a[P - 1].index_count[l] > 0;
    printf("single sequence, %d positions: %s (%d mismatches; %d CSA layers selecting at the end)\n", P,
           bad_total ? "FAIL" : "ok", bad_total, csa_sel);
    /* every expert resident: every MoE layer of every step ran the on-device grouped path */
    v4_cuda_expert_stats gs;
    v4_cuda_engine_expert_stats(eng, &gs);
    const int grouped_ok = gs.grouped_moe_layers == (uint64_t)P * w->cfg.n_layers;
    printf("all-resident MoE on the device (grouped, no host round trip): %s (%llu of %d layer steps)\n",
           grouped_ok ? "ok" : "FAIL", (unsigned long long)gs.grouped_moe_layers, P * w->cfg.n_layers);
    bad_total += !grouped_ok;

    /* 2. batches: rows join and leave; a new sequence reuses a device slot */
    const int before = bad_total;
    const int n1 = 40, starts[3] = {0, 5, 12}, lens[3] = {38, 20, 28};
    std::vector<std::vector<int>> rt(3);
    std::vector<std::vector<obs>> ref(3);
    for (int r = 0; r < 3; r++) {
        rt[r].assign(seq.begin() + 7 * r + 3, seq.begin() + 7 * r + 3 + lens[r]);
        if (run_one(cpu, w, rt[r], ref[r]))
            return 1;
    }
    v4_seq *ss[3];
    for (int r = 0; r < 3; r++)
        ss[r] = v4_seq_create(w, 64, &err);
    if (run_batch(dev, w, ss, rt, ref, starts, lens, n1, "batch") < 0)
        return 1;
    /* a reset sequence (same v4_seq, position 0) starts over on the device */
    v4_seq_reset(ss[0]);
    {
        obs o;
        v4_trace t;
        obs_init(o, &w->cfg, &t);
        v4_trace *tp = &t;
        int32_t tk = rt[0][0];
        if (v4_step(dev, &ss[0], &tk, 1, o.logits.data(), &tp, &err)) {
            printf("reset sequence: %s\n", err.msg);
            return 1;
        }
        compare("reset", ref[0][0], o, 0);
    }
    printf("batched rows joining/leaving, reset sequence: %s (%d mismatches)\n", bad_total > before ? "FAIL" : "ok",
           bad_total - before);

    /* a fourth live sequence takes the least recently stepped device slot (row 1's);
     * stepping row 1 again then fails with a clear error instead of wrong numbers */
    v4_seq *late = v4_seq_create(w, 64, &err);
    int32_t tk = 3;
    std::vector<float> lg1((size_t)w->cfg.vocab_size);
    const int late_ok = v4_step(dev, &late, &tk, 1, lg1.data(), NULL, &err) == 0;
    const int stale = v4_step(dev, &ss[1], &tk, 1, lg1.data(), NULL, &err) != 0 && strstr(err.msg, "no device state");
    printf("a fourth sequence takes the LRU slot: %s; the evicted one is refused: %s (%s)\n", late_ok ? "ok" : "FAIL",
           stale ? "ok" : "FAIL", err.msg);
    bad_total += !late_ok + !stale;

    /* every expert resident: no host wait inside any MoE layer */
    const int nosync_ok = gs.moe_host_syncs == 0 && gs.moe_layers == (uint64_t)P * w->cfg.n_layers;
    printf("all-resident MoE host waits: %s (%llu in %llu layer steps)\n", nosync_ok ? "ok" : "FAIL",
           (unsigned long long)gs.moe_host_syncs, (unsigned long long)gs.moe_layers);
    bad_total += !nosync_ok;

    /* 3. paged experts on the grouped path (device slot tables): budgets of the 4 slots
     * one token's layer needs (every layer evicts), a quarter of the routed experts (the
     * policy evicts within the step sequence) and all of them (no eviction); the hash
     * layers (tid2eid) and the score layers alike; every position's logits, routes and
     * index selections byte-identical to the all-resident device run (b); every MoE layer
     * ran the grouped path, with no host wait in a hash layer and one (the routes back)
     * in a score layer */
    {
        const int Pq = P < 48 ? P : 48, L = w->cfg.n_layers, E = w->cfg.n_routed_experts, K = w->cfg.n_act_experts;
        int score_layers = 0;
        for (int l = 0; l < L; l++)
            score_layers += w->layers[l].tid2eid == NULL;
        const size_t xb = (size_t)v4_expert_bytes(&w->layers[0].experts[0]);
        const struct {
            const char *what;
            int slots;
            int positions;
            int lookahead;
        } runs[4] = {{"paged, one layer's slots", K, 24, 1},
                     {"paged, a quarter", L * E / 4, Pq, 1},
                     {"paged, a quarter, no look-ahead", L * E / 4, Pq, 0},
                     {"paged, all", L * E, 24, 1}};
        uint64_t la_misses[2] = {0, 0};   /* a quarter: misses at the layers' own selections, look-ahead on, off */
        for (const auto &r : runs) {
            const int before3 = bad_total, P3 = r.positions;
            v4_ctx *dev2 = NULL;
            v4_cuda_engine *eng2 =
                run_paged(be, w, xb * (size_t)r.slots + xb / 2, NULL, seq, P3, b, r.what, &dev2, r.lookahead);
            if (!eng2)
                return 1;
            v4_cuda_expert_stats xs;
            v4_cuda_engine_expert_stats(eng2, &xs);
            const uint64_t layer_steps = (uint64_t)P3 * L;
            const int evict_ok = r.slots == L * E ? xs.evictions == 0 && xs.misses <= (uint64_t)L * E
                                                  : xs.evictions > 0 && (r.slots == K || xs.hits > 0);
            /* the router look-ahead: uploads (some used) where the budget evicts, none when
             * off; the misses at the layers' own selections no more than without it */
            const int quarter = r.slots == L * E / 4;
            const uint64_t own_misses = xs.misses - xs.lookahead_issued;
            if (quarter)
                la_misses[r.lookahead ? 0 : 1] = own_misses;
            const int la_ok = !r.lookahead ? xs.lookahead_issued == 0 && xs.lookahead_used == 0
                                           : xs.lookahead_used <= xs.lookahead_issued &&
                                                 (!quarter || (xs.lookahead_issued > 0 && xs.lookahead_used > 0));
            const int fewer_ok = !quarter || r.lookahead || la_misses[1] >= la_misses[0];
            const int ok3 = bad_total == before3 && xs.misses > 0 && evict_ok && xs.slots == r.slots &&
                            xs.grouped_moe_layers == layer_steps && xs.moe_layers == layer_steps &&
                            xs.moe_host_syncs == (uint64_t)P3 * score_layers && la_ok && fewer_ok;
            printf("%s (%d slots of %zu bytes), %d positions: %s (%d mismatches; hits %llu, misses %llu, "
                   "evictions %llu, %.1f MiB uploaded; grouped %llu of %llu layer steps, host waits %llu = %d score "
                   "layers x %d, staging waits %llu; look-ahead uploads %llu, used %llu, misses at the layers' own "
                   "selections %llu)\n",
                   r.what, xs.slots, xs.slot_bytes, P3, ok3 ? "ok" : "FAIL", bad_total - before3,
                   (unsigned long long)xs.hits, (unsigned long long)xs.misses, (unsigned long long)xs.evictions,
                   xs.bytes_uploaded / 1048576.0, (unsigned long long)xs.grouped_moe_layers,
                   (unsigned long long)layer_steps, (unsigned long long)xs.moe_host_syncs, score_layers, P3,
                   (unsigned long long)xs.staging_waits, (unsigned long long)xs.lookahead_issued,
                   (unsigned long long)xs.lookahead_used, (unsigned long long)own_misses);
            bad_total += !ok3 && bad_total == before3;
            v4_cuda_engine_free(eng2);
            v4_ctx_free(dev2);
        }
        /* a budget below one layer's experts of a step fails the step with the pool's reason */
        v4_ctx *dev3 = v4_ctx_create(w, be, 3, &err);
        v4_cuda_engine *eng3 = dev3 ? v4_cuda_engine_create(w, 3, 3, 2 * xb + xb / 2, &err) : NULL;
        int refused = 0;
        if (eng3) {
            v4_step_impl impl3 = v4_cuda_engine_impl(eng3);
            v4_ctx_set_step_impl(dev3, &impl3);
            v4_seq *s3 = v4_seq_create(w, 8, &err);
            int32_t tk3 = seq[0];
            v4_error e3 = {};
            refused = v4_step(dev3, &s3, &tk3, 1, NULL, NULL, &e3) != 0 && strstr(e3.msg, "slot") != NULL;
            printf("a budget of 2 slots for %d experts per token: %s (%s)\n", w->cfg.n_act_experts,
                   refused ? "refused" : "FAIL", e3.msg);
            v4_seq_free(s3);
        }
        bad_total += !refused;
        v4_cuda_engine_free(eng3);
        v4_ctx_free(dev3);

        /* batched rows with paged experts (a quarter): up to 12 experts in a layer, so
         * the misses are staged in several rounds through the 4 staging buffers (the
         * host waits for a buffer's earlier copy: staging_waits > 0); the rows equal
         * their one-sequence CPU runs (= the all-resident device run, part 2) */
        const int before3b = bad_total;
        v4_error eb = {};
        v4_ctx *dev4 = v4_ctx_create(w, be, 3, &eb);
        v4_cuda_engine *eng4 = dev4 ? v4_cuda_engine_create(w, 3, 3, xb * (size_t)(L * E / 4) + xb / 2, &eb) : NULL;
        if (!eng4) {
            printf("paged batch engine: %s: %s\n", eb.where, eb.msg);
            return 1;
        }
        v4_step_impl impl4 = v4_cuda_engine_impl(eng4);
        v4_ctx_set_step_impl(dev4, &impl4);
        v4_seq *sb[3];
        for (int r = 0; r < 3; r++)
            sb[r] = v4_seq_create(w, 64, &eb);
        const int steps = run_batch(dev4, w, sb, rt, ref, starts, lens, n1, "paged batch");
        if (steps < 0)
            return 1;
        v4_cuda_expert_stats xs;
        v4_cuda_engine_expert_stats(eng4, &xs);
        const int ok3b = bad_total == before3b && xs.staging_waits > 0 && xs.evictions > 0 &&
                         xs.grouped_moe_layers == (uint64_t)steps * L &&
                         xs.moe_host_syncs == (uint64_t)steps * score_layers;
        printf("paged experts, batched rows (%d steps): %s (%d mismatches; misses %llu, evictions %llu, staging "
               "waits %llu, host waits %llu)\n",
               steps, ok3b ? "ok" : "FAIL", bad_total - before3b, (unsigned long long)xs.misses,
               (unsigned long long)xs.evictions, (unsigned long long)xs.staging_waits,
               (unsigned long long)xs.moe_host_syncs);
        bad_total += !ok3b && bad_total == before3b;
        for (int r = 0; r < 3; r++)
            v4_seq_free(sb[r]);
        v4_cuda_engine_free(eng4);
        v4_ctx_free(dev4);
    }

    /* 4. the host expert cache as the source of the paged experts */
    {
        const int before4 = bad_total, P4 = P < 24 ? P : 24;
        const v4_config *c = &w->cfg;
        const size_t xb = (size_t)v4_expert_bytes(&w->layers[0].experts[0]);
        v4_xblock_layout lo;
        v4_xblock_layout_of(c, &lo);
        snprintf(path, sizeof path, "%s/model", dir);
        v4_xprov_opts xo = {path, NULL, (size_t)c->n_layers * c->n_routed_experts * lo.bytes / 2, "lru", 2, 0};
        v4_xprov *hx = v4_xprov_open(c, m.ck, &xo, &err);
        if (!hx) {
            printf("host expert cache: %s: %s\n", err.where, err.msg);
            return 1;
        }
        v4_ctx *dev4 = NULL;
        v4_cuda_engine *eng4 = run_paged(be, w, xb * (size_t)c->n_layers * c->n_routed_experts / 4 + xb / 2,
                                         v4_xprov_provider(hx), seq, P4, a, "host-cache paged", &dev4);
        if (!eng4)
            return 1;
        v4_cuda_expert_stats xs;
        v4_cuda_engine_expert_stats(eng4, &xs);
        v4_xcache_stats hs;
        v4_xprov_stats(hx, &hs);
        const int ok4 = bad_total == before4 && xs.misses > 0 && xs.evictions > 0 && hs.misses > 0 &&
                        hs.hits + hs.misses >= xs.misses;
        printf("paged experts from the host expert cache, %d positions: %s (%d mismatches; GPU hits %llu, misses "
               "%llu; host cache hits %llu, misses %llu)\n",
               P4, ok4 ? "ok" : "FAIL", bad_total - before4, (unsigned long long)xs.hits,
               (unsigned long long)xs.misses, (unsigned long long)hs.hits, (unsigned long long)hs.misses);
        bad_total += !ok4 && bad_total == before4;
        v4_cuda_engine_free(eng4);
        v4_ctx_free(dev4);
        v4_xprov_close(hx);
    }

    /* 5. prefill chunks (chunk_check): every expert resident, then paged experts in
     * slots for one layer's experts (E: a full step's union fits, so chunks; every layer
     * evicts the previous one's experts inside each chunk step) - the same numbers - and
     * in fewer slots than that (one row per sequence: no chunks) */
    {
        const size_t xb = (size_t)v4_expert_bytes(&w->layers[0].experts[0]);
        const int E = w->cfg.n_routed_experts;
        if (chunk_check(be, w, 0, "resident", P, seq, a, rt[0], ref[0], NULL, 0) < 0 ||
            chunk_check(be, w, xb * (size_t)E + xb / 2, "paged in one layer's slots", P, seq, a, rt[0], ref[0],
                        NULL, 0) < 0 ||
            chunk_check(be, w, xb * (size_t)(E / 2) + xb / 2, "paged in half a layer's slots", P < 24 ? P : 24, seq,
                        a, rt[0], ref[0], NULL, 0) < 0)
            return 1;
        /* the fast mode's MoE choice (v4_cuda_fast_moe_grouped) with the emulation's
         * declining products: resident and paged experts, grouped and host-driven
         * layers mixed within one sequence's steps, the same bytes */
        if (!stand_in_lt)
            printf("fast-mode orchestration: not run on a GPU (test_cuda_fast and numerics-check cover the fast "
                   "mode there)\n");
        else if (chunk_check(be, w, 0, "fast mode, resident", P < 64 ? P : 64, seq, a, rt[0], ref[0],
                             stand_in_lt, 0) < 0 ||
                 chunk_check(be, w, xb * (size_t)E + xb / 2, "fast mode, paged", P < 64 ? P : 64, seq, a, rt[0],
                             ref[0], stand_in_lt, 0) < 0 ||
                 chunk_check(be, w, 0, "fast mode, resident, tensor cores", P < 64 ? P : 64, seq, a, rt[0], ref[0],
                             stand_in_lt, 1) < 0 ||
                 chunk_check(be, w, xb * (size_t)E + xb / 2, "fast mode, paged, tensor cores", P < 64 ? P : 64, seq,
                             a, rt[0], ref[0], stand_in_lt, 1) < 0)
            return 1;
    }

    /* 6. admission by device memory (issue 20): a sequence's claim (fixed part + every
     * page at its capacity), the admit hook under a sequence budget (the banker's rule:
     * avail = the budget while the live sequences stay safe), an out-of-memory first
     * step that fails alone (not sticky: the engine and the other sequence go on, same
     * logits as the CPU) in a step with the other sequence's next row, reported as the
     * fault of its row (v4_ctx_step_fault: row 1, retryable; neither sequence advanced
     * nor broken), and release giving a finished sequence's memory back at once */
    {
        const int before6 = bad_total;
        v4_ctx *dev6 = v4_ctx_create(w, be, 3, &err);
        v4_cuda_engine *eng6 = dev6 ? v4_cuda_engine_create(w, 3, 3, 0, &err) : NULL;
        if (!eng6) {
            printf("admission setup: %s\n", err.msg);
            return 1;
        }
        v4_step_impl impl6 = v4_cuda_engine_impl(eng6);
        v4_ctx_set_step_impl(dev6, &impl6);
        const int ML = 16;
        const size_t need = v4_cuda_seq_bytes(&w->cfg, ML, V4_CUDA_SEQ_PAGE);
        v4_seq *sa = v4_seq_create(w, ML, &err), *sb = v4_seq_create(w, ML, &err);
        size_t nd = 0, av = 0;
        const int rc0 = v4_ctx_admit(dev6, sa, &nd, &av);
        /* the emulation cannot tell (1: admit), a device reports cudaMemGetInfo's figure */
        const int nobudget_ok = (rc0 == 1 && nd == 0) || (rc0 == 0 && nd == need && av > 0);
        /* a to b: a fits, b does not while a lives (its claim does, the budget less a's
         * hold does not leave a able to finish) */
        const size_t budget = need + need / 2;
        v4_cuda_engine_set_seq_budget(eng6, budget);
        const int adm_a = v4_ctx_admit(dev6, sa, &nd, &av) == 0 && nd == need && av == budget;
        std::vector<int> t6(seq.begin() + 2, seq.begin() + 5);
        std::vector<obs> r6;
        if (run_one(cpu, w, t6, r6))
            return 1;
        obs o6;
        v4_trace t;
        obs_init(o6, &w->cfg, &t);
        v4_trace *tp = &t;
        int32_t k0 = t6[0];
        const int step_a = v4_step(dev6, &sa, &k0, 1, o6.logits.data(), &tp, &err) == 0;
        if (step_a)
            compare("admission a0", r6[0], o6, 0);
        /* at position 0 a holds its fixed part (no entries yet: no pages) */
        const size_t held_a = v4_cuda_engine_seq_bytes_held(eng6);
        const int fixed_ok = held_a > 0 && held_a < need;
        v4_cuda_engine_set_seq_budget(eng6, need + held_a / 2);   /* b's fixed part does not fit beside a's claim */
        const int adm_b = v4_ctx_admit(dev6, sb, &nd, &av) == 0 && nd == need && av == 0;
        v4_error eb = {};
        int32_t k1 = t6[1];
        v4_seq *pair[2] = {sa, sb};
        const int32_t k10[2] = {k1, k0};
        const int oom_b = v4_step(dev6, pair, k10, 2, NULL, NULL, &eb) != 0 && eb.code == V4_ERR_NOMEM &&
                          strstr(eb.msg, "not an engine failure") != NULL;
        v4_step_fault fb = {};
        const int fault_b = v4_ctx_step_fault(dev6, &fb) == 0 && fb.row == 1 && fb.retryable == 1 && fb.stall == 0 &&
                            v4_seq_pos(sa) == 1 && v4_seq_pos(sb) == 0;
        const int after_oom = v4_step(dev6, &sa, &k1, 1, o6.logits.data(), &tp, &err) == 0;
        if (after_oom)
            compare("admission a1 after an OOM", r6[1], o6, 1);
        v4_step_fault fa = {};
        const int fault_gone = v4_ctx_step_fault(dev6, &fa) != 0 && fa.row == -1;
        v4_ctx_release_seq(dev6, sa);
        const int freed = v4_cuda_engine_seq_bytes_held(eng6) == 0;
        const int adm_b2 = v4_ctx_admit(dev6, sb, &nd, &av) == 0 && nd == need && av == need + held_a / 2;
        const int step_b = v4_step(dev6, &sb, &k0, 1, o6.logits.data(), &tp, &err) == 0;
        if (step_b)
            compare("admission b0 after the release", r6[0], o6, 0);
        printf("admission: no budget %s; claim %zu, fixed part %zu %s; admit %s/%s/%s; OOM not sticky %s (%s), its "
               "row reported %s (row %d, retryable %d; cleared by the next step %s), then a step %s; release frees "
               "%s; %s\n",
               nobudget_ok ? "ok" : "FAIL", need, held_a, fixed_ok ? "ok" : "FAIL", adm_a ? "ok" : "FAIL",
               adm_b ? "ok" : "FAIL", adm_b2 ? "ok" : "FAIL", oom_b ? "ok" : "FAIL", eb.msg, fault_b ? "ok" : "FAIL",
               fb.row, fb.retryable, fault_gone ? "ok" : "FAIL", after_oom && step_a && step_b ? "ok" : "FAIL",
               freed ? "ok" : "FAIL", bad_total > before6 ? "FAIL" : "ok");
        bad_total += !nobudget_ok + !fixed_ok + !adm_a + !adm_b + !adm_b2 + !oom_b + !fault_b + !fault_gone +
                     !after_oom + !step_a + !step_b + !freed;
        v4_seq_free(sa);
        v4_seq_free(sb);
        v4_cuda_engine_free(eng6);
        v4_ctx_free(dev6);
    }

    /* 7. growth in pages and the banker's rule (issue 20): pages of 2 entries, two
     * sequences of ML positions under a budget of one claim + one fixed part: both
     * are admitted, both step together until b would need its first
     * pages, which would leave a unable to finish: b stalls (fault {row 1, retryable,
     * stall}; nothing ran, neither advanced), a is stepped alone to its end (every
     * growth of a granted), released, then b runs to its end; every row equals the CPU
     * run; the bytes held grow page by page (a's after each step = its fixed part +
     * its pages), never pass the budget, and the pools' chunks are reused (b takes no
     * new chunk) */
    {
        const int before7 = bad_total, ML = 40;
        v4_ctx *dev7 = v4_ctx_create(w, be, 3, &err);
        v4_cuda_engine *eng7 = dev7 ? v4_cuda_engine_create(w, 3, 3, 0, &err) : NULL;
        if (!eng7 || v4_cuda_engine_set_seq_page(eng7, 2, &err)) {
            printf("growth setup: %s\n", err.msg);
            return 1;
        }
        v4_step_impl impl7 = v4_cuda_engine_impl(eng7);
        v4_ctx_set_step_impl(dev7, &impl7);
        std::vector<int> ta(seq.begin(), seq.begin() + ML), tb(seq.begin() + 7, seq.begin() + 7 + ML);
        std::vector<obs> ra, rb;
        if (run_one(cpu, w, ta, ra) || run_one(cpu, w, tb, rb))
            return 1;
        v4_seq *A = v4_seq_create(w, ML, &err), *B = v4_seq_create(w, ML, &err);
        const size_t claim = v4_cuda_seq_bytes(&w->cfg, ML, 2);
        /* the fixed part: what a sequence holds at position 0 (measured on a throwaway) */
        size_t fixed = 0;
        {
            v4_seq *T = v4_seq_create(w, ML, &err);
            obs o;
            v4_trace t;
            obs_init(o, &w->cfg, &t);
            v4_trace *tp = &t;
            int32_t k = ta[0];
            if (v4_step(dev7, &T, &k, 1, o.logits.data(), &tp, &err))
                return 1;
            fixed = v4_cuda_engine_seq_bytes_held(eng7);
            v4_ctx_release_seq(dev7, T);
            v4_seq_free(T);
        }
        const size_t budget = claim + fixed;
        v4_cuda_engine_set_seq_budget(eng7, budget);
        int pa = 0, pb = 0, stalls = 0, stall_pos = -1, over = 0, growth_ok = 1, released = 0, steps = 0, skip_b = 0;
        size_t pool_at_release = 0;
        while ((pa < ML || pb < ML) && steps++ < 4 * ML) {
            v4_seq *rows[2];
            int32_t tk[2];
            int who[2], n = 0;
            if (pa < ML) {
                rows[n] = A;
                tk[n] = ta[(size_t)pa];
                who[n++] = 0;
            }
            if (pb < ML && !skip_b) {
                rows[n] = B;
                tk[n] = tb[(size_t)pb];
                who[n++] = 1;
            }
            std::vector<obs> o(2);
            std::vector<v4_trace> t(2);
            v4_trace *tp[2];
            std::vector<float> lg((size_t)2 * w->cfg.vocab_size);
            for (int k = 0; k < 2; k++) {
                obs_init(o[k], &w->cfg, &t[k]);
                tp[k] = &t[k];
            }
            if (v4_step(dev7, rows, tk, n, lg.data(), tp, &err)) {
                v4_step_fault f = {};
                if (v4_ctx_step_fault(dev7, &f) || !f.stall || !f.retryable || who[f.row] != 1 || n != 2 ||
                    v4_seq_pos(A) != pa || v4_seq_pos(B) != pb) {
                    printf("growth: step failed unexpectedly (row %d, stall %d, a at %d/%d, b at %d/%d): %s: %s\n",
                           f.row, f.stall, v4_seq_pos(A), pa, v4_seq_pos(B), pb, err.where, err.msg);
                    return 1;
                }
                if (!stalls++) {
                    stall_pos = pb;
                    printf("growth: b stalls at position %d: %s\n", pb, err.msg);
                }
                skip_b = 1;   /* the next try without b: a alone (the executor's rule) */
                continue;
            }
            skip_b = 0;
            for (int k = 0; k < n; k++) {
                o[k].logits.assign(lg.begin() + (long)k * w->cfg.vocab_size,
                                   lg.begin() + (long)(k + 1) * w->cfg.vocab_size);
                compare(who[k] ? "growth b" : "growth a", who[k] ? rb[(size_t)pb] : ra[(size_t)pa], o[k],
                        who[k] ? pb : pa);
            }
            const size_t held = v4_cuda_engine_seq_bytes_held(eng7);
            over |= held > budget;
            for (int k = 0; k < n; k++)
                (who[k] ? pb : pa)++;
            /* a's bytes while b holds only its fixed part: a's fixed part + its pages */
            if (!released && pb <= stall_pos + 1 && stalls) {
                size_t pages = 0;
                for (int l = 0; l < w->cfg.n_layers; l++) {
                    const int r = w->cfg.compress_ratios[l];
                    if (!r)
                        continue;
                    const size_t np = (size_t)((pa / r + 1) / 2);
                    pages += np * 2 * sizeof(uint16_t) * (w->cfg.head_dim + (r == 4 ? w->cfg.index_head_dim : 0));
                }
                growth_ok &= held == 2 * fixed + pages;
            }
            if (pa == ML && !released) {
                v4_cuda_seq_stats st;
                v4_cuda_engine_seq_stats(eng7, &st);
                pool_at_release = st.pool_bytes;
                v4_ctx_release_seq(dev7, A);
                released = 1;
            }
        }
        v4_cuda_seq_stats st;
        v4_cuda_engine_seq_stats(eng7, &st);
        const int done = pa == ML && pb == ML && v4_seq_pos(A) == ML && v4_seq_pos(B) == ML;
        const int stall_ok = stalls > 0 && stall_pos >= 3 && stall_pos < 8 && st.stalls == (uint64_t)stalls;
        const int reuse = st.pool_bytes == pool_at_release && st.page_entries == 2 && st.live == 1;
        printf("growth in pages: claim %zu, fixed part %zu, budget %zu; b stalled %d times from position %d %s; "
               "held by page %s, never above the budget %s; pools %zu bytes, b reused them %s; both to the end %s; "
               "%s\n",
               claim, fixed, budget, stalls, stall_pos, stall_ok ? "ok" : "FAIL", growth_ok ? "ok" : "FAIL",
               over ? "FAIL" : "ok", st.pool_bytes, reuse ? "ok" : "FAIL", done ? "ok" : "FAIL",
               bad_total > before7 ? "FAIL" : "ok");
        bad_total += !done + !stall_ok + !reuse + over + !growth_ok;
        v4_seq_free(A);
        v4_seq_free(B);
        v4_cuda_engine_free(eng7);
        v4_ctx_free(dev7);
    }

    for (int r = 0; r < 3; r++)
        v4_seq_free(ss[r]);
    v4_seq_free(late);
    v4_cuda_engine_free(eng);
    v4_ctx_free(dev);
    v4_ctx_free(cpu);
    be->ops->destroy(be);
    v4_model_close(&m);
    printf("%s: %d mismatches\n", bad_total ? "FAILED" : "all equal", bad_total);
    return bad_total != 0;
}
