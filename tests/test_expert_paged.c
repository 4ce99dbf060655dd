/* test_expert_paged.c - the decode path on paged experts (cache/expert_provider.h) on
 * the golden tiny model: with the experts served through the host cache from an expert
 * pack (O_DIRECT-or-fallback and buffered reads) or straight from the safetensors,
 * under every policy and under budgets from the smallest working set (evictions every
 * layer of every step) to all experts, the logits equal the golden logits bit for bit,
 * single and batched; the budget's high-water mark is never exceeded; a corrupted
 * block fails the step with V4_ERR_CORRUPT naming the layer and expert, and other
 * sequences keep decoding.  The router look-ahead (v4_ctx_set_lookahead) on and off:
 * the same golden logits; with every expert fitting, each demand miss it saves is one
 * more prefetch hit, exactly. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "cache/expert_block.h"
#include "cache/expert_pack.h"
#include "cache/expert_provider.h"
#include "cache/model_files.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/v4/model.h"
#include "golden_data.h"
#include "testutil.h"

#define P 48

static int32_t ids[P];
static float *ref;

static int run(const v4_model_files *m, v4_ctx *c, int batch, v4_error *err)
{
    return t_golden_run(m, c, batch, ids, ref, P, err);
}

int main(void)
{
    char model[4300], path[4600], pack[4400];
    v4_model_files m;
    v4_error err = {0};
    int32_t *gids;
    if (t_golden_load(&m, P, &gids, &ref, model, sizeof model))
        return 1;
    memcpy(ids, gids, sizeof ids);
    free(gids);
    const int V = m.cfg.vocab_size, K = m.cfg.n_act_experts;

    snprintf(pack, sizeof pack, "%s/paged_pack", t_env("V4_TMP", "/tmp"));
    CHECK(v4_pack_write(model, pack, V4_PACK_FORCE | V4_PACK_NO_SYNC, NULL, NULL, &err) == 0, "pack: %s", err.msg);
    v4_xblock_layout lo;
    v4_xblock_layout_of(&m.cfg, &lo);
    const size_t all = (size_t)m.cfg.n_layers * m.cfg.n_routed_experts * lo.bytes;

    v4_backend *be = v4_cpu_backend_create(1, "auto", &err);
    v4_ctx *c = v4_ctx_create(&m.w, be, 3, &err);
    const char *policies[] = {"lru", "slru", "lfru", "next"};
    /* budgets: one layer's experts for a batch of 3 (the minimum), a quarter, all */
    const size_t budgets[] = {(size_t)3 * K * lo.bytes, all / 4, all};
    struct { const char *pack; int io; const char *name; } srcs[] = {
        {pack, V4_PACK_IO_AUTO, "pack"}, {pack, V4_PACK_IO_BUFFERED, "pack-buffered"}, {NULL, 0, "safetensors"}};
    for (size_t si = 0; si < 3; si++)
        for (size_t pi = 0; pi < 4; pi++)
            for (size_t bi = 0; bi < 3; bi++) {
                if (si != 0 && pi != 3 && bi != 0)
                    continue;   /* the full cross product only for the pack source */
                v4_xprov_opts o = {model, srcs[si].pack, budgets[bi], policies[pi], 2, srcs[si].io};
                v4_xprov *xp = v4_xprov_open(&m.cfg, m.ck, &o, &err);
                CHECK(xp != NULL, "%s/%s/%zu: open: %s", srcs[si].name, policies[pi], budgets[bi], err.msg);
                if (!xp)
                    continue;
                v4_ctx_set_expert_provider(c, v4_xprov_provider(xp));
                for (int batch = 0; batch < 2; batch++) {
                    int bad = run(&m, c, batch, &err);
                    CHECK(bad == 0, "%s %s budget %zu (%s): %d positions differ%s%s", srcs[si].name, policies[pi],
                          budgets[bi], batch ? "batched" : "single", bad, bad < 0 ? ": " : "", bad < 0 ? err.msg : "");
                }
                v4_xcache_stats st;
                v4_xprov_stats(xp, &st);
                CHECK(st.high_water_bytes <= budgets[bi], "high water %zu <= budget %zu", st.high_water_bytes,
                      budgets[bi]);
                if (bi == 0)
                    CHECK(st.evictions > 0, "%s %s: the smallest budget evicts (%llu)", srcs[si].name, policies[pi],
                          (unsigned long long)st.evictions);
                if (bi == 2)
                    CHECK(st.evictions == 0, "all experts fit: no eviction (%llu)", (unsigned long long)st.evictions);
                CHECK(!strcmp(v4_xprov_source_kind(xp), srcs[si].pack ? "pack" : "safetensors"), "source kind %s",
                      v4_xprov_source_kind(xp));
                v4_ctx_set_expert_provider(c, NULL);
                v4_xprov_close(xp);
            }

    /* the router look-ahead off and on, at all experts (no eviction) and a quarter */
    for (int bi = 2; bi >= 1; bi--) {
        v4_xcache_stats la[2];
        uint64_t asked[2] = {0, 0};
        memset(la, 0, sizeof la);
        for (int on = 0; on < 2; on++) {
            v4_xprov_opts o = {model, pack, budgets[bi], "next", 2, V4_PACK_IO_BUFFERED};
            v4_xprov *xp = v4_xprov_open(&m.cfg, m.ck, &o, &err);
            CHECK(xp != NULL, "look-ahead %d: open: %s", on, err.msg);
            if (!xp)
                break;
            v4_ctx_set_expert_provider(c, v4_xprov_provider(xp));
            v4_ctx_set_lookahead(c, on);
            const uint64_t a0 = v4_ctx_lookahead_prefetched(c);
            for (int batch = 0; batch < 2; batch++) {
                int bad = run(&m, c, batch, &err);
                CHECK(bad == 0, "look-ahead %s, budget %zu (%s): %d positions differ%s%s", on ? "on" : "off",
                      budgets[bi], batch ? "batched" : "single", bad, bad < 0 ? ": " : "", bad < 0 ? err.msg : "");
            }
            asked[on] = v4_ctx_lookahead_prefetched(c) - a0;
            v4_xprov_stats(xp, &la[on]);
            CHECK(la[on].high_water_bytes <= budgets[bi], "look-ahead: high water %zu <= budget %zu",
                  la[on].high_water_bytes, budgets[bi]);
            v4_ctx_set_expert_provider(c, NULL);
            v4_xprov_close(xp);
        }
        v4_ctx_set_lookahead(c, 1);
        printf("look-ahead budget %zu: off: misses %llu, issued %llu, prefetch hits %llu; on: asked %llu, issued %llu, misses "
               "%llu, prefetch hits %llu, expired %llu, evictions %llu\n",
               budgets[bi], (unsigned long long)la[0].misses, (unsigned long long)la[0].prefetch_issued,
               (unsigned long long)la[0].prefetch_hits,
               (unsigned long long)asked[1], (unsigned long long)la[1].prefetch_issued,
               (unsigned long long)la[1].misses, (unsigned long long)la[1].prefetch_hits,
               (unsigned long long)la[1].prefetch_expired, (unsigned long long)la[1].evictions);
        CHECK(asked[0] == 0 && asked[1] > 0, "look-ahead asked %llu (off) / %llu (on)", (unsigned long long)asked[0],
              (unsigned long long)asked[1]);
        CHECK(la[1].prefetch_hits > la[0].prefetch_hits, "the look-ahead's loads are used: prefetch hits %llu > %llu",
              (unsigned long long)la[1].prefetch_hits, (unsigned long long)la[0].prefetch_hits);
        if (bi == 2)   /* nothing evicts: fewer demand misses, and no block is read twice */
            CHECK(la[1].misses < la[0].misses && la[1].evictions == 0 &&
                      la[1].misses + la[1].prefetch_issued <= (uint64_t)m.cfg.n_layers * m.cfg.n_routed_experts,
                  "all fit: misses %llu -> %llu, loads %llu (<= %d), evictions %llu",
                  (unsigned long long)la[0].misses, (unsigned long long)la[1].misses,
                  (unsigned long long)(la[1].misses + la[1].prefetch_issued), m.cfg.n_layers * m.cfg.n_routed_experts,
                  (unsigned long long)la[1].evictions);
    }

    /* a corrupted block: the step that needs it fails with V4_ERR_CORRUPT */
    snprintf(path, sizeof path, "%s/experts.bin", pack);
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0, "open %s", path);
    unsigned char byte;
    off_t at = (off_t)lo.bytes * (off_t)m.cfg.n_routed_experts * 2 + 100;   /* layer 2, expert 0 */
    CHECK(pread(fd, &byte, 1, at) == 1, "read a byte");
    byte ^= 0x40;
    CHECK(pwrite(fd, &byte, 1, at) == 1, "flip a byte");
    close(fd);
    v4_xprov_opts o = {model, pack, all, "lru", 2, V4_PACK_IO_BUFFERED};
    v4_xprov *xp = v4_xprov_open(&m.cfg, m.ck, &o, &err);
    CHECK(xp != NULL, "open corrupted pack: %s", err.msg);
    if (xp) {
        v4_ctx_set_expert_provider(c, v4_xprov_provider(xp));
        /* find a position whose layer-2 routing uses expert 0 */
        int failed = 0, ok_steps = 0;
        v4_seq *s = v4_seq_create(&m.w, P, &err);
        float *lg = malloc(sizeof(float) * (size_t)V);
        for (int p = 0; p < P && !failed; p++) {
            if (v4_step(c, &s, &ids[p], 1, lg, NULL, &err)) {
                failed = 1;
                CHECK(err.code == V4_ERR_CORRUPT && strstr(err.msg, "layer 2") && strstr(err.msg, "expert 0"),
                      "corrupt error names the block: %s", err.msg);
            } else {
                ok_steps++;
            }
        }
        CHECK(failed, "expert 0 of layer 2 was needed within %d positions", P);
        v4_seq_free(s);
        free(lg);
        v4_ctx_set_expert_provider(c, NULL);
        v4_xprov_close(xp);
    }
    remove(path);
    snprintf(path, sizeof path, "%s/manifest.json", pack);
    remove(path);
    rmdir(pack);
    v4_ctx_free(c);
    be->ops->destroy(be);
    free(ref);
    v4_model_close(&m);
    TEST_DONE();
}
