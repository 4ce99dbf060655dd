/* test_expert_pack.c - the expert pack (cache/expert_pack.h) and both expert sources on
 * a real tiny checkpoint made with `$V4_BIN mkmodel --preset tiny` in $V4_TMP:
 *  - v4_pack_write: manifest fields (format, shape, layout, hash, model identity, one
 *    block per (layer, expert), 4096-aligned layer-major offsets, checksums = XXH3 of
 *    the reference block), file size, progress callback, cancel leaves nothing behind,
 *    existing PACKDIR refused without V4_PACK_FORCE;
 *  - every block read through the pack source (O_DIRECT, forced buffered, and the
 *    O_DIRECT-refused fallback on tmpfs /dev/shm) and through the safetensors source
 *    equals v4_xblock_fill of the checkpoint expert byte for byte; counters;
 *  - identity: a pack opened for another checkpoint (mkmodel --seed 7) or another
 *    shape is refused with a clear message;
 *  - corruption: one flipped byte -> that block fails with V4_ERR_CORRUPT naming
 *    layer, expert, file and offset, again on the next read (quarantine, even after the
 *    byte is restored), other blocks fine; 4 threads reading concurrently get correct
 *    bytes and the same error for the bad block. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <xxhash.h>

#include "cache/expert_block.h"
#include "cache/expert_pack.h"
#include "cache/model_files.h"
#include "testutil.h"

static char g_root[1024];
static v4_model_files g_m;
static v4_xblock_layout g_lo;
static uint8_t *g_ref;          /* all reference blocks, layer-major */
static int g_n;

static int run(const char *cmd)
{
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

static const uint8_t *ref(int l, int e)
{
    return g_ref + ((size_t)l * (size_t)g_m.cfg.n_routed_experts + (size_t)e) * g_lo.bytes;
}

static int exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* Read every block through s; returns the number of blocks that differ or fail. */
static int read_all(v4_xsource *s, const char *label)
{
    uint8_t *buf = aligned_alloc(V4_XBLOCK_ALIGN, g_lo.bytes);
    int bad = 0;
    for (int l = 0; l < g_m.cfg.n_layers; l++)
        for (int e = 0; e < g_m.cfg.n_routed_experts; e++) {
            v4_error err = {0};
            memset(buf, 0x5A, g_lo.bytes);
            if (v4_xsource_read(s, l, e, buf, &err)) {
                fprintf(stderr, "%s: layer %d expert %d: %s\n", label, l, e, err.msg);
                bad++;
            } else if (memcmp(buf, ref(l, e), g_lo.bytes)) {
                fprintf(stderr, "%s: layer %d expert %d: bytes differ\n", label, l, e);
                bad++;
            }
        }
    free(buf);
    return bad;
}

typedef struct prog {
    int calls, cancel_at;
    uint64_t last_done, total;
} prog;

static int on_prog(const v4_pack_progress *p, void *ud)
{
    prog *g = ud;
    g->calls++;
    g->last_done = p->bytes_done;
    g->total = p->bytes_total;
    return g->cancel_at > 0 && p->blocks_done >= (uint64_t)g->cancel_at;
}

static void check_manifest(const char *pack, const char *model)
{
    char path[1300];
    snprintf(path, sizeof path, "%s/manifest.json", pack);
    json_error_t je;
    json_t *r = json_load_file(path, 0, &je);
    CHECK(r != NULL, "manifest parses: %s", je.text);
    if (!r)
        return;
    const v4_config *c = &g_m.cfg;
    CHECK(!strcmp(json_string_value(json_object_get(r, "format")), "v4fleet-expert-pack"), "format");
    CHECK(json_integer_value(json_object_get(r, "version")) == 1, "version");
    CHECK(!strcmp(json_string_value(json_object_get(r, "hash")), "xxh3-64"), "hash name");
    json_t *sh = json_object_get(r, "shape");
    CHECK(json_integer_value(json_object_get(sh, "n_layers")) == c->n_layers, "n_layers");
    CHECK(json_integer_value(json_object_get(sh, "n_routed_experts")) == c->n_routed_experts, "n_routed_experts");
    CHECK(json_integer_value(json_object_get(sh, "moe_inter")) == c->moe_inter, "moe_inter");
    CHECK(json_integer_value(json_object_get(sh, "dim")) == c->dim, "dim");
    CHECK(json_is_true(json_object_get(sh, "expert_fp4")) == !!c->expert_fp4, "expert_fp4");
    CHECK((size_t)json_integer_value(json_object_get(r, "block_bytes")) == g_lo.bytes, "block_bytes");
    json_t *parts = json_object_get(r, "parts");
    CHECK(json_array_size(parts) == 6, "six parts");
    for (size_t i = 0; i < json_array_size(parts) && i < 6; i++) {
        json_t *p = json_array_get(parts, i);
        CHECK(!strcmp(json_string_value(json_object_get(p, "name")), v4_xblock_part_names[i]) &&
                  (size_t)json_integer_value(json_object_get(p, "offset")) == g_lo.off[i] &&
                  (size_t)json_integer_value(json_object_get(p, "length")) == g_lo.len[i],
              "part %zu name/offset/length", i);
    }
    /* model identity: config.json hash */
    char cpath[1300];
    snprintf(cpath, sizeof cpath, "%s/config.json", model);
    FILE *f = fopen(cpath, "rb");
    char cbuf[65536];
    size_t cn = f ? fread(cbuf, 1, sizeof cbuf, f) : 0;
    if (f)
        fclose(f);
    char want[17];
    snprintf(want, sizeof want, "%016" PRIx64, (uint64_t)XXH3_64bits(cbuf, cn));
    json_t *model_j = json_object_get(r, "model");
    CHECK(!strcmp(json_string_value(json_object_get(model_j, "config_xxh3")), want), "config_xxh3 = %s", want);
    CHECK(json_string_value(json_object_get(model_j, "fingerprint")) != NULL, "fingerprint recorded");
    json_t *blocks = json_object_get(r, "blocks");
    CHECK((int)json_array_size(blocks) == g_n, "%zu blocks listed, %d expected", json_array_size(blocks), g_n);
    int bad = 0;
    for (int i = 0; i < g_n && i < (int)json_array_size(blocks); i++) {
        json_t *b = json_array_get(blocks, (size_t)i);
        int l = i / c->n_routed_experts, e = i % c->n_routed_experts;
        json_int_t off = json_integer_value(json_object_get(b, "offset"));
        char sum[17];
        snprintf(sum, sizeof sum, "%016" PRIx64, (uint64_t)XXH3_64bits(ref(l, e), g_lo.bytes));
        const char *cs = json_string_value(json_object_get(b, "checksum"));
        bad += json_integer_value(json_object_get(b, "layer")) != l ||
               json_integer_value(json_object_get(b, "expert")) != e || off % 4096 != 0 ||
               off != (json_int_t)((size_t)i * g_lo.bytes) ||
               (size_t)json_integer_value(json_object_get(b, "bytes")) != g_lo.bytes || !cs || strcmp(cs, sum);
    }
    CHECK(bad == 0, "%d block entries wrong (layer-major, 4096-aligned, checksum = XXH3 of the block)", bad);
    json_decref(r);
    snprintf(path, sizeof path, "%s/experts.bin", pack);
    struct stat st;
    CHECK(stat(path, &st) == 0 && (uint64_t)st.st_size == (uint64_t)g_n * g_lo.bytes, "experts.bin is %d blocks",
          g_n);
}

/* ---------------------------------------------------------------- concurrency */

typedef struct thr {
    v4_xsource *s;
    int seed, bad_l, bad_e;
    int wrong, corrupt_seen;
} thr;

static void *reader(void *arg)
{
    thr *t = arg;
    uint8_t *buf = aligned_alloc(V4_XBLOCK_ALIGN, g_lo.bytes);
    unsigned x = (unsigned)t->seed * 2654435761u + 1;
    for (int k = 0; k < 3 * g_n; k++) {
        x = x * 1103515245u + 12345u;
        int i = (int)((x >> 8) % (unsigned)g_n);
        int l = i / g_m.cfg.n_routed_experts, e = i % g_m.cfg.n_routed_experts;
        v4_error err = {0};
        int rc = v4_xsource_read(t->s, l, e, buf, &err);
        if (l == t->bad_l && e == t->bad_e) {
            if (rc && err.code == V4_ERR_CORRUPT)
                t->corrupt_seen++;
            else
                t->wrong++;
        } else if (rc || memcmp(buf, ref(l, e), g_lo.bytes)) {
            t->wrong++;
        }
    }
    free(buf);
    return NULL;
}

/* ---------------------------------------------------------------- main */

int main(void)
{
    const char *bin = getenv("V4_BIN");
    if (!bin || !*bin) {
        fprintf(stderr, "V4_BIN not set\n");
        return 77;
    }
    snprintf(g_root, sizeof g_root, "%s/xpack_c.%ld", t_env("V4_TMP", "/tmp"), (long)getpid());
    char cmd[8192], m1[1100], m2[1100], p1[1100], p3[1100];
    snprintf(m1, sizeof m1, "%s/m1", g_root);
    snprintf(m2, sizeof m2, "%s/m2", g_root);
    snprintf(p1, sizeof p1, "%s/p1", g_root);
    snprintf(p3, sizeof p3, "%s/p3", g_root);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && '%s' mkmodel --preset tiny --out '%s' --no-sync >/dev/null 2>&1"
             " && '%s' mkmodel --preset tiny --seed 7 --out '%s' --no-sync >/dev/null 2>&1", g_root, g_root, bin, m1, bin, m2);
    if (run(cmd)) {
        fprintf(stderr, "mkmodel failed: %s\n", cmd);
        return 1;
    }
    v4_error err = {0};
    if (v4_model_open_ex(m1, &g_m, V4_OPEN_NO_PREPARE, &err)) {
        fprintf(stderr, "%s: %s\n", err.where, err.msg);
        return 1;
    }
    const v4_config *c = &g_m.cfg;
    v4_xblock_layout_of(c, &g_lo);
    g_n = c->n_layers * c->n_routed_experts;
    g_ref = aligned_alloc(V4_XBLOCK_ALIGN, (size_t)g_n * g_lo.bytes);
    for (int l = 0; l < c->n_layers; l++)
        for (int e = 0; e < c->n_routed_experts; e++)
            v4_xblock_fill(c, &g_lo, &g_m.w.layers[l].experts[e], (uint8_t *)ref(l, e));

    /* ---- write */
    prog pg = {0, 0, 0, 0};
    int rc = v4_pack_write(m1, p1, 0, on_prog, &pg, &err);
    CHECK(rc == 0, "pack written: %s", err.msg);
    CHECK(pg.calls == g_n + 1 && pg.last_done == pg.total && pg.total == (uint64_t)g_n * g_lo.bytes,
          "progress: %d calls, %" PRIu64 "/%" PRIu64 " bytes", pg.calls, pg.last_done, pg.total);
    check_manifest(p1, m1);
    char tmpname[1300];
    snprintf(tmpname, sizeof tmpname, "%s.tmp.%ld", p1, (long)getpid());
    CHECK(!exists(tmpname), "no temporary directory left after success");
    rc = v4_pack_write(m1, p1, 0, NULL, NULL, &err);
    CHECK(rc != 0 && strstr(err.msg, "already exists") && strstr(err.msg, "--force"), "existing pack refused: %s",
          err.msg);
    rc = v4_pack_write(m1, p1, V4_PACK_FORCE | V4_PACK_NO_SYNC, NULL, NULL, &err);
    CHECK(rc == 0, "--force replaces: %s", err.msg);
    /* cancel in the middle: no PACKDIR, no temporary directory */
    prog pc = {0, 5, 0, 0};
    rc = v4_pack_write(m1, p3, 0, on_prog, &pc, &err);
    CHECK(rc != 0 && strstr(err.msg, "cancelled"), "cancel reported: %s", err.msg);
    snprintf(tmpname, sizeof tmpname, "%s.tmp.%ld", p3, (long)getpid());
    CHECK(!exists(p3) && !exists(tmpname), "cancelled pack leaves neither PACKDIR nor its .tmp");
    v4_xsource *s = v4_pack_source_open(p3, c, V4_PACK_IO_AUTO, &err);
    CHECK(!s && strstr(err.msg, "manifest.json"), "missing pack refused: %s", err.msg);
    /* a parent that does not exist */
    char p4[1300];
    snprintf(p4, sizeof p4, "%s/no/such/dir/p", g_root);
    rc = v4_pack_write(m1, p4, 0, NULL, NULL, &err);
    CHECK(rc != 0 && err.code == V4_ERR_IO && strstr(err.msg, "temporary directory"), "unwritable location: %s",
          err.msg);

    /* ---- read: O_DIRECT (when the filesystem allows it), buffered, auto, safetensors */
    v4_xsource_counters k;
    s = v4_pack_source_open(p1, c, V4_PACK_IO_BUFFERED, &err);
    CHECK(s != NULL, "open buffered: %s", err.msg);
    if (s) {
        CHECK(s->block_bytes == g_lo.bytes && s->n_layers == c->n_layers && s->n_experts == c->n_routed_experts &&
                  !strcmp(s->kind, "pack"), "source shape");
        /* cold (page cache of experts.bin dropped: readahead + pread path), then warm
         * (RWF_NOWAIT path) */
        char dpath[1300];
        snprintf(dpath, sizeof dpath, "%s/experts.bin", p1);
        int dfd = open(dpath, O_RDONLY);
        CHECK(dfd >= 0 && posix_fadvise(dfd, 0, 0, POSIX_FADV_DONTNEED) == 0, "drop the pack's page cache");
        if (dfd >= 0)
            close(dfd);
        CHECK(read_all(s, "buffered cold") == 0, "buffered reads (cold) equal the checkpoint blocks");
        CHECK(read_all(s, "buffered warm") == 0, "buffered reads (warm) equal the checkpoint blocks");
        v4_xsource_get_counters(s, &k);
        CHECK(k.reads == 2 * (uint64_t)g_n && k.buffered_reads == 2 * (uint64_t)g_n && k.direct_reads == 0 &&
                  k.bytes == 2 * (uint64_t)g_n * g_lo.bytes && k.read_ns > 0 && k.errors == 0,
              "buffered counters: %" PRIu64 " reads, %" PRIu64 " buffered, %" PRIu64 " direct", k.reads, k.buffered_reads,
              k.direct_reads);
        v4_xsource_close(s);
    }
    v4_xsource *sd = v4_pack_source_open(p1, c, V4_PACK_IO_DIRECT, &err);
    int tmp_direct = sd != NULL;
    if (!sd)
        printf("note: %s refuses O_DIRECT (%s); the direct path is tested on other filesystems only\n", g_root, err.msg);
    s = v4_pack_source_open(p1, c, V4_PACK_IO_AUTO, &err);
    CHECK(s != NULL, "open auto: %s", err.msg);
    if (s) {
        CHECK(read_all(s, "auto") == 0, "auto (O_DIRECT) reads equal the checkpoint blocks");
        v4_xsource_get_counters(s, &k);
        if (tmp_direct)
            CHECK(k.direct_reads == (uint64_t)g_n && !k.direct_refused, "O_DIRECT used: %" PRIu64 " direct reads",
                  k.direct_reads);
        else
            CHECK(k.buffered_reads == (uint64_t)g_n && k.direct_refused, "fallback used");
        /* range and alignment errors */
        uint8_t *b = aligned_alloc(V4_XBLOCK_ALIGN, g_lo.bytes + V4_XBLOCK_ALIGN);
        rc = v4_xsource_read(s, c->n_layers, 0, b, &err);
        CHECK(rc != 0 && err.code == V4_ERR_RANGE, "layer out of range: %s", err.msg);
        rc = v4_xsource_read(s, 0, 0, b + 64, &err);
        CHECK(rc != 0 && err.code == V4_ERR_INVALID, "misaligned buffer refused: %s", err.msg);
        free(b);
        v4_xsource_close(s);
    }
    if (sd) {
        CHECK(read_all(sd, "direct") == 0, "forced O_DIRECT reads equal the checkpoint blocks");
        v4_xsource_get_counters(sd, &k);
        CHECK(k.direct_reads == (uint64_t)g_n, "direct counters");
        v4_xsource_close(sd);
    }
    v4_xsource *st = v4_st_source_open(m1, &err);
    CHECK(st != NULL, "safetensors source: %s", err.msg);
    if (st) {
        CHECK(st->block_bytes == g_lo.bytes && !strcmp(st->kind, "safetensors"), "safetensors source shape");
        CHECK(read_all(st, "safetensors") == 0, "safetensors source blocks equal the fill reference");
        v4_xsource_get_counters(st, &k);
        CHECK(k.reads == (uint64_t)g_n && k.bytes == (uint64_t)g_n * g_lo.bytes, "safetensors counters");
        v4_xsource_close(st);
    }

    /* ---- tmpfs: O_DIRECT refused at open -> buffered fallback (counter says so) */
    struct stat shm;
    if (stat("/dev/shm", &shm) == 0 && S_ISDIR(shm.st_mode) && access("/dev/shm", W_OK) == 0) {
        char ps[4300];
        snprintf(ps, sizeof ps, "/dev/shm/v4fleet-xpack-test.%ld", (long)getpid());
        rc = v4_pack_write(m1, ps, V4_PACK_NO_SYNC, NULL, NULL, &err);
        CHECK(rc == 0, "pack on tmpfs: %s", err.msg);
        v4_xsource *d = v4_pack_source_open(ps, c, V4_PACK_IO_DIRECT, &err);
        if (d) {
            printf("note: /dev/shm accepts O_DIRECT here; the fallback is covered by the simulated refusals below\n");
            v4_xsource_close(d);
        } else {
            CHECK(err.code == V4_ERR_IO && strstr(err.msg, "O_DIRECT"), "forced O_DIRECT on tmpfs fails: %s", err.msg);
            s = v4_pack_source_open(ps, c, V4_PACK_IO_AUTO, &err);
            CHECK(s != NULL, "auto open on tmpfs: %s", err.msg);
            if (s) {
                CHECK(read_all(s, "tmpfs fallback") == 0, "fallback reads equal the checkpoint blocks");
                v4_xsource_get_counters(s, &k);
                CHECK(k.direct_refused == 1 && k.buffered_reads == (uint64_t)g_n && k.direct_reads == 0,
                      "fallback counted: refused %d, %" PRIu64 " buffered", k.direct_refused, k.buffered_reads);
                v4_xsource_close(s);
            }
        }
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", ps);
        run(cmd);
    } else {
        printf("note: /dev/shm not available; fallback covered by the simulated refusals only\n");
    }
    /* ---- refusal simulated (kernels >= 6.6 accept O_DIRECT on tmpfs): at open, at the first read */
    for (int sim = 0; sim < 2; sim++) {
        int io = V4_PACK_IO_AUTO | (sim ? V4_PACK_IO_SIM_REFUSE_READ : V4_PACK_IO_SIM_REFUSE_OPEN);
        s = v4_pack_source_open(p1, c, io, &err);
        CHECK(s != NULL, "open with simulated refusal: %s", err.msg);
        if (!s)
            continue;
        CHECK(read_all(s, sim ? "refused at read" : "refused at open") == 0, "fallback (%s) reads equal the blocks",
              sim ? "read" : "open");
        v4_xsource_get_counters(s, &k);
        CHECK(k.direct_refused == 1 && k.buffered_reads == (uint64_t)g_n && k.direct_reads == 0 && k.errors == 0,
              "fallback (%s) counted: refused %d, %" PRIu64 " buffered, %" PRIu64 " direct", sim ? "read" : "open",
              k.direct_refused, k.buffered_reads, k.direct_reads);
        v4_xsource_close(s);
    }
    s = v4_pack_source_open(p1, c, V4_PACK_IO_DIRECT | V4_PACK_IO_SIM_REFUSE_OPEN, &err);
    CHECK(!s && err.code == V4_ERR_IO && strstr(err.msg, "O_DIRECT"), "forced O_DIRECT refused: %s", err.msg);

    /* ---- identity and shape */
    v4_ckpt *ck2;
    CHECK(v4_ckpt_open(m2, &ck2, &err) == 0, "open m2: %s", err.msg);
    s = v4_pack_source_open_model(p1, c, ck2, V4_PACK_IO_AUTO, &err);
    CHECK(!s && err.code == V4_ERR_CONFIG && strstr(err.msg, "different checkpoint"),
          "pack of another checkpoint refused: %s", err.msg);
    v4_xsource_close(s);
    v4_ckpt_close(ck2);
    s = v4_pack_source_open_model(p1, c, g_m.ck, V4_PACK_IO_AUTO, &err);
    CHECK(s != NULL, "pack of this checkpoint accepted: %s", err.msg);
    v4_xsource_close(s);
    v4_config other = *c;
    other.moe_inter *= 2;
    s = v4_pack_source_open(p1, &other, V4_PACK_IO_AUTO, &err);
    CHECK(!s && err.code == V4_ERR_CONFIG && strstr(err.msg, "does not match"), "other shape refused: %s", err.msg);
    v4_xsource_close(s);

    /* ---- corruption and quarantine */
    const int bl = 2 % c->n_layers, be = 5 % c->n_routed_experts;
    const uint64_t boff = ((uint64_t)bl * (uint64_t)c->n_routed_experts + (uint64_t)be) * g_lo.bytes;
    char data[1300];
    snprintf(data, sizeof data, "%s/experts.bin", p1);
    int fd = open(data, O_RDWR);
    uint8_t byte = 0;
    CHECK(fd >= 0 && pread(fd, &byte, 1, (off_t)(boff + 1000)) == 1, "read the byte to flip");
    uint8_t flipped = byte ^ 0x10;
    CHECK(pwrite(fd, &flipped, 1, (off_t)(boff + 1000)) == 1, "flip one byte");
    fsync(fd);
    s = v4_pack_source_open(p1, c, V4_PACK_IO_AUTO, &err);
    CHECK(s != NULL, "open corrupted pack: %s", err.msg);
    if (s) {
        uint8_t *b = aligned_alloc(V4_XBLOCK_ALIGN, g_lo.bytes);
        char want[1400], off_s[64];
        snprintf(want, sizeof want, "layer %d expert %d: checksum mismatch in %s at offset %" PRIu64 " (want ", bl, be,
                 data, boff);
        snprintf(off_s, sizeof off_s, "at offset %" PRIu64, boff);
        rc = v4_xsource_read(s, bl, be, b, &err);
        CHECK(rc != 0 && err.code == V4_ERR_CORRUPT && strstr(err.msg, want), "corrupt block: %s", err.msg);
        char first[512];
        memcpy(first, err.msg, sizeof first);
        v4_error e2 = {0};
        rc = v4_xsource_read(s, bl, be, b, &e2);
        CHECK(rc != 0 && e2.code == V4_ERR_CORRUPT && !strcmp(e2.msg, first), "second read fails the same way: %s",
              e2.msg);
        v4_xsource_get_counters(s, &k);
        CHECK(k.corrupt_blocks == 1 && k.errors == 2, "one block quarantined (%" PRIu64 "), two failed reads",
              k.corrupt_blocks);
        /* quarantine is sticky: restoring the byte does not bring the block back for this source */
        CHECK(pwrite(fd, &byte, 1, (off_t)(boff + 1000)) == 1, "restore the byte");
        rc = v4_xsource_read(s, bl, be, b, &e2);
        CHECK(rc != 0 && e2.code == V4_ERR_CORRUPT && !strcmp(e2.msg, first), "still quarantined after repair");
        CHECK(pwrite(fd, &flipped, 1, (off_t)(boff + 1000)) == 1, "flip again");
        rc = v4_xsource_read(s, bl, (be + 1) % c->n_routed_experts, b, &e2);
        CHECK(rc == 0 && !memcmp(b, ref(bl, (be + 1) % c->n_routed_experts), g_lo.bytes), "neighbour block fine");
        free(b);
        v4_xsource_close(s);
    }
    /* 4 threads on a fresh source over the corrupted pack */
    for (int io = 0; io < 2; io++) {
        s = v4_pack_source_open(p1, c, io ? V4_PACK_IO_BUFFERED : V4_PACK_IO_AUTO, &err);
        CHECK(s != NULL, "open for threads: %s", err.msg);
        if (!s)
            break;
        thr t[4];
        pthread_t th[4];
        for (int i = 0; i < 4; i++) {
            t[i] = (thr){s, i + 1 + 10 * io, bl, be, 0, 0};
            pthread_create(&th[i], NULL, reader, &t[i]);
        }
        int wrong = 0, seen = 0;
        for (int i = 0; i < 4; i++) {
            pthread_join(th[i], NULL);
            wrong += t[i].wrong;
            seen += t[i].corrupt_seen;
        }
        v4_xsource_get_counters(s, &k);
        CHECK(wrong == 0, "%s: 4 threads: %d wrong results", io ? "buffered" : "auto", wrong);
        CHECK(seen > 0 && k.corrupt_blocks == 1 && k.errors == (uint64_t)seen,
              "4 threads: corrupt block seen %d times, quarantined once", seen);
        v4_xsource_close(s);
    }
    close(fd);

    free(g_ref);
    v4_model_close(&g_m);
    if (!t_failures) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
        run(cmd);
    }
    TEST_DONE();
}
