/* expert_pack_source.c - the expert source "pack" (v4_pack_source_open*), its
 * counters, and the verifier (v4_pack_verify); format in expert_pack.h.
 *
 * Design: the manifest is parsed and checked completely at open (format, version,
 * shape against the model's config, block layout against v4_xblock_layout_of, every
 * (layer, expert) listed once, 4096-aligned, inside experts.bin; optionally the model
 * identity).  Two descriptors on experts.bin: one O_DIRECT (when allowed) and one
 * buffered.  read() preads the block (EINTR and short reads handled; buffered reads
 * take what the page cache holds with RWF_NOWAIT and issue one WILLNEED readahead for
 * the rest), hashes it (XXH3-64) and compares with the manifest.  If O_DIRECT is
 * refused at open (EINVAL: tmpfs on older kernels) or on the first read, the source
 * switches to the buffered descriptor for good and says so in its counters.  Corrupt
 * blocks are quarantined in a per-block flag array (the bad hash is stored under a
 * mutex before the flag is released) so later reads fail at once with the same
 * message.  Counters are atomics; the read path takes no lock.
 *
 * Ownership: a pack_src owns its path strings, descriptors and arrays (freed by
 * close).  The verifier frees what it allocates.  No global mutable state.
 * Thread: read() and the counters from any thread; open/close/verify from one.
 */
#define _GNU_SOURCE
#include "expert_pack.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <xxhash.h>

#include "expert_block.h"
#include "expert_pack_util.h"

/* ================================================================== reader */

typedef struct pack_src {
    v4_xsource base;
    char *dir, *data_path;
    int fd_direct, fd_buf;
    int sim_refuse_read;        /* V4_PACK_IO_SIM_REFUSE_READ */
    atomic_int use_direct;
    int direct_refused_at_open;
    atomic_int direct_refused;
    uint64_t *offs, *sums, *got;
    atomic_uchar *quar;
    pthread_mutex_t qlock;
    atomic_uint_fast64_t reads, bytes, read_ns, direct_reads, buffered_reads, errors, corrupt;
} pack_src;

static const v4_xsource_ops pack_ops;

static void pack_close(v4_xsource *xs)
{
    pack_src *s = (pack_src *)xs;
    if (!s)
        return;
    if (s->fd_direct >= 0)
        close(s->fd_direct);
    if (s->fd_buf >= 0)
        close(s->fd_buf);
    free(s->dir);
    free(s->data_path);
    free(s->offs);
    free(s->sums);
    free(s->got);
    free(s->quar);
    pthread_mutex_destroy(&s->qlock);
    free(s);
}

static int corrupt_err(const pack_src *s, int l, int e, size_t i, uint64_t got, v4_error *err)
{
    char want_h[17], got_h[17];
    v4_xp_hex16(want_h, s->sums[i]);
    v4_xp_hex16(got_h, got);
    return v4_err_set(err, V4_ERR_CORRUPT, s->data_path,
                      "layer %d expert %d: checksum mismatch in %s at offset %" PRIu64 " (want %s, got %s)", l, e,
                      s->data_path, s->offs[i], want_h, got_h);
}

static int pack_read(v4_xsource *xs, int l, int e, void *dst, v4_error *err)
{
    pack_src *s = (pack_src *)xs;
    if (l < 0 || l >= s->base.n_layers || e < 0 || e >= s->base.n_experts) {
        atomic_fetch_add(&s->errors, 1);
        return v4_err_set(err, V4_ERR_RANGE, s->dir, "layer %d expert %d: outside the pack (%d layers x %d experts)",
                          l, e, s->base.n_layers, s->base.n_experts);
    }
    if (!dst || (uintptr_t)dst % V4_XBLOCK_ALIGN) {
        atomic_fetch_add(&s->errors, 1);
        return v4_err_set(err, V4_ERR_INVALID, s->dir, "layer %d expert %d: destination buffer not %d-byte aligned",
                          l, e, V4_XBLOCK_ALIGN);
    }
    const size_t i = (size_t)l * (size_t)s->base.n_experts + (size_t)e;
    if (atomic_load_explicit(&s->quar[i], memory_order_acquire)) {
        atomic_fetch_add(&s->errors, 1);
        return corrupt_err(s, l, e, i, s->got[i], err);
    }
    const uint64_t t0 = v4_xp_now_ns();
    const size_t n = s->base.block_bytes;
    int direct = atomic_load_explicit(&s->use_direct, memory_order_relaxed);
    int rc;
    if (direct && s->sim_refuse_read) {
        rc = -1;
        errno = EINVAL;
    } else {
        rc = direct ? v4_xp_pread_all(s->fd_direct, dst, n, s->offs[i]) : v4_xp_buffered_read(s->fd_buf, dst, n, s->offs[i]);
    }
    if (rc && direct && errno == EINVAL) {
        /* The filesystem accepted O_DIRECT at open but refuses the I/O: buffered for good. */
        atomic_store(&s->use_direct, 0);
        atomic_store(&s->direct_refused, 1);
        direct = 0;
        rc = v4_xp_buffered_read(s->fd_buf, dst, n, s->offs[i]);
    }
    if (rc) {
        int en = errno;
        atomic_fetch_add(&s->errors, 1);
        return v4_err_set(err, V4_ERR_IO, s->data_path, "layer %d expert %d: read of %zu bytes at offset %" PRIu64 " failed: %s",
                          l, e, n, s->offs[i], en ? strerror(en) : "file too short");
    }
    const uint64_t h = XXH3_64bits(dst, n);
    if (h != s->sums[i]) {
        pthread_mutex_lock(&s->qlock);   /* rare path: got[i] is written once, before the flag */
        if (!atomic_load_explicit(&s->quar[i], memory_order_relaxed)) {
            s->got[i] = h;
            atomic_store_explicit(&s->quar[i], 1, memory_order_release);
            atomic_fetch_add(&s->corrupt, 1);
        }
        pthread_mutex_unlock(&s->qlock);
        atomic_fetch_add(&s->errors, 1);
        return corrupt_err(s, l, e, i, h, err);
    }
    atomic_fetch_add(&s->reads, 1);
    atomic_fetch_add(&s->bytes, n);
    atomic_fetch_add(&s->read_ns, v4_xp_now_ns() - t0);
    atomic_fetch_add(direct ? &s->direct_reads : &s->buffered_reads, 1);
    return 0;
}

static const v4_xsource_ops pack_ops = {pack_read, pack_close};

/* ---------------------------------------------------------------- manifest parsing */

static int jint(json_t *o, const char *key, long long lo, long long hi, long long *v, const char *where,
                v4_error *err)
{
    json_t *x = json_object_get(o, key);
    if (!json_is_integer(x))
        return v4_err_set(err, V4_ERR_FORMAT, where, "\"%s\" missing or not an integer", key);
    *v = json_integer_value(x);
    if (*v < lo || *v > hi)
        return v4_err_set(err, V4_ERR_FORMAT, where, "\"%s\" = %lld outside [%lld, %lld]", key, *v, lo, hi);
    return 0;
}

static const char *jstr(json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

/* Parse and check manifest.json against cfg (NULL: trust its shape); fills s (arrays, base) and the recorded model id. */
static int load_manifest(pack_src *s, const char *man_path, const v4_config *cfg, v4_pack_model_id *id,
                         v4_error *err)
{
    json_error_t je;
    json_t *root = json_load_file(man_path, 0, &je);
    if (!root) {
        struct stat st;
        if (stat(man_path, &st))
            return v4_err_set(err, V4_ERR_IO, man_path,
                              "no manifest.json: not an expert pack, or an incomplete one (%s)", strerror(errno));
        return v4_err_set(err, V4_ERR_FORMAT, man_path, "line %d: %s", je.line, je.text);
    }
    int rc = -1;
    long long v = 0, L = 0, E = 0, inter = 0, dim = 0, bb = 0, used = 0;
    const char *fmt = jstr(root, "format");
    json_t *shape = json_object_get(root, "shape"), *model = json_object_get(root, "model");
    json_t *parts = json_object_get(root, "parts"), *blocks = json_object_get(root, "blocks");
    if (!fmt || strcmp(fmt, V4_PACK_FORMAT)) {
        v4_err_set(err, V4_ERR_FORMAT, man_path, "format is \"%s\", expected \"%s\"", fmt ? fmt : "(none)", V4_PACK_FORMAT);
        goto out;
    }
    if (jint(root, "version", 0, 1000000, &v, man_path, err))
        goto out;
    if (v != V4_PACK_VERSION) {
        v4_err_set(err, V4_ERR_FORMAT, man_path, "pack version %lld, this build reads version %d", v, V4_PACK_VERSION);
        goto out;
    }
    const char *hash = jstr(root, "hash"), *file = jstr(root, "file");
    if (!hash || strcmp(hash, "xxh3-64")) {
        v4_err_set(err, V4_ERR_FORMAT, man_path, "hash \"%s\" is not supported (xxh3-64)", hash ? hash : "(none)");
        goto out;
    }
    if (!file || strcmp(file, V4_PACK_DATA_FILE)) {
        v4_err_set(err, V4_ERR_FORMAT, man_path, "file \"%s\", expected \"%s\"", file ? file : "(none)", V4_PACK_DATA_FILE);
        goto out;
    }
    if (!json_is_object(shape) || !json_is_object(model) || !json_is_array(parts) || !json_is_array(blocks)) {
        v4_err_set(err, V4_ERR_FORMAT, man_path, "\"shape\", \"model\", \"parts\" or \"blocks\" missing");
        goto out;
    }
    json_t *fp4j = json_object_get(shape, "expert_fp4");
    if (jint(shape, "n_layers", 1, V4_MAX_LAYERS, &L, man_path, err) ||
        jint(shape, "n_routed_experts", 1, 1 << 20, &E, man_path, err) ||
        jint(shape, "moe_inter", 1, 1 << 24, &inter, man_path, err) || jint(shape, "dim", 1, 1 << 24, &dim, man_path, err) ||
        jint(root, "block_bytes", V4_XBLOCK_ALIGN, 1ll << 40, &bb, man_path, err) ||
        jint(root, "block_used", 1, 1ll << 40, &used, man_path, err))
        goto out;
    if (!json_is_boolean(fp4j)) {
        v4_err_set(err, V4_ERR_FORMAT, man_path, "\"shape.expert_fp4\" missing or not a boolean");
        goto out;
    }
    v4_config mc;
    memset(&mc, 0, sizeof mc);
    mc.n_layers = (int)L;
    mc.n_routed_experts = (int)E;
    mc.moe_inter = (int)inter;
    mc.dim = (int)dim;
    mc.expert_fp4 = json_is_true(fp4j);
    if (cfg && (cfg->n_layers != mc.n_layers || cfg->n_routed_experts != mc.n_routed_experts ||
                cfg->moe_inter != mc.moe_inter || cfg->dim != mc.dim || !!cfg->expert_fp4 != mc.expert_fp4)) {
        v4_err_set(err, V4_ERR_CONFIG, man_path,
                   "pack shape (%d layers x %d experts, moe_inter %d, dim %d, %s) does not match the model "
                   "(%d x %d, moe_inter %d, dim %d, %s)",
                   mc.n_layers, mc.n_routed_experts, mc.moe_inter, mc.dim, mc.expert_fp4 ? "fp4" : "fp8",
                   cfg->n_layers, cfg->n_routed_experts, cfg->moe_inter, cfg->dim, cfg->expert_fp4 ? "fp4" : "fp8");
        goto out;
    }
    v4_xblock_layout lo;
    v4_xblock_layout_of(&mc, &lo);
    if ((size_t)bb != lo.bytes || (size_t)used != lo.used || json_array_size(parts) != V4_XBLOCK_NPART) {
        v4_err_set(err, V4_ERR_FORMAT, man_path, "block layout (%lld bytes, %lld used, %zu parts) differs from this "
                   "build's (%zu, %zu, %d)", bb, used, json_array_size(parts), lo.bytes, lo.used, V4_XBLOCK_NPART);
        goto out;
    }
    for (int p = 0; p < V4_XBLOCK_NPART; p++) {
        json_t *pj = json_array_get(parts, (size_t)p);
        long long po, pl;
        const char *pn = jstr(pj, "name");
        if (jint(pj, "offset", 0, bb, &po, man_path, err) || jint(pj, "length", 0, bb, &pl, man_path, err))
            goto out;
        if (!pn || strcmp(pn, v4_xblock_part_names[p]) || (size_t)po != lo.off[p] || (size_t)pl != lo.len[p]) {
            v4_err_set(err, V4_ERR_FORMAT, man_path, "part %d (%s at %lld, %lld bytes) differs from this build's "
                       "(%s at %zu, %zu bytes)", p, pn ? pn : "?", po, pl, v4_xblock_part_names[p], lo.off[p], lo.len[p]);
            goto out;
        }
    }
    if (v4_xp_parse_hex16(jstr(model, "config_xxh3"), &id->config_hash) ||
        v4_xp_parse_hex16(jstr(model, "fingerprint"), &id->fingerprint)) {
        v4_err_set(err, V4_ERR_FORMAT, man_path, "\"model.config_xxh3\" / \"model.fingerprint\" missing or not 16 hex digits");
        goto out;
    }
    const size_t n = (size_t)L * (size_t)E;
    if (json_array_size(blocks) != n) {
        v4_err_set(err, V4_ERR_FORMAT, man_path, "%zu blocks listed, the shape implies %zu", json_array_size(blocks), n);
        goto out;
    }
    s->offs = malloc(n * sizeof *s->offs);
    s->sums = malloc(n * sizeof *s->sums);
    s->got = calloc(n, sizeof *s->got);
    s->quar = calloc(n, sizeof *s->quar);
    unsigned char *seen = calloc(n, 1);
    if (!s->offs || !s->sums || !s->got || !s->quar || !seen) {
        free(seen);
        v4_err_set(err, V4_ERR_NOMEM, man_path, "out of memory");
        goto out;
    }
    for (size_t k = 0; k < n; k++) {
        json_t *b = json_array_get(blocks, k);
        long long bl, be, bo, bn;
        char where[64];
        snprintf(where, sizeof where, "blocks[%zu]", k);
        if (jint(b, "layer", 0, L - 1, &bl, man_path, err) || jint(b, "expert", 0, E - 1, &be, man_path, err) ||
            jint(b, "offset", 0, 1ll << 62, &bo, man_path, err) || jint(b, "bytes", bb, bb, &bn, man_path, err)) {
            if (err) {
                char m[sizeof err->msg + sizeof where + 8];
                snprintf(m, sizeof m, "%s: %s", where, err->msg);
                m[sizeof err->msg - 1] = 0;
                memcpy(err->msg, m, sizeof err->msg);
            }
            free(seen);
            goto out;
        }
        size_t i = (size_t)bl * (size_t)E + (size_t)be;
        uint64_t sum;
        if (seen[i] || bo % V4_XBLOCK_ALIGN || v4_xp_parse_hex16(jstr(b, "checksum"), &sum)) {
            v4_err_set(err, V4_ERR_FORMAT, man_path, "%s (layer %lld expert %lld): %s", where, bl, be,
                       seen[i] ? "listed twice" : bo % V4_XBLOCK_ALIGN ? "offset not 4096-aligned"
                                                                       : "checksum not 16 hex digits");
            free(seen);
            goto out;
        }
        seen[i] = 1;
        s->offs[i] = (uint64_t)bo;
        s->sums[i] = sum;
    }
    free(seen);
    s->base.block_bytes = lo.bytes;
    s->base.n_layers = (int)L;
    s->base.n_experts = (int)E;
    rc = 0;
out:
    json_decref(root);
    return rc;
}

static v4_xsource *open_impl(const char *pack_dir, const v4_config *cfg, const v4_ckpt *ck, int io, v4_error *err)
{
    pack_src *s = calloc(1, sizeof *s);
    if (!s) {
        v4_err_set(err, V4_ERR_NOMEM, pack_dir, "out of memory");
        return NULL;
    }
    s->base.ops = &pack_ops;
    s->base.kind = "pack";
    pthread_mutex_init(&s->qlock, NULL);
    s->fd_direct = s->fd_buf = -1;
    s->dir = v4_xp_trim_path(pack_dir);
    s->data_path = s->dir ? v4_xp_join(s->dir, V4_PACK_DATA_FILE) : NULL;
    char *man = s->dir ? v4_xp_join(s->dir, V4_PACK_MANIFEST) : NULL;
    v4_pack_model_id pid, mid;
    if (!man || !s->data_path) {
        v4_err_set(err, V4_ERR_NOMEM, pack_dir, "out of memory");
        goto fail;
    }
    if (load_manifest(s, man, cfg, &pid, err))
        goto fail;
    if (ck) {
        const v4_config *c = cfg;
        if (v4_pack_model_id_of(c, ck, &mid, err))
            goto fail;
        char a[17], b[17];
        if (mid.config_hash != pid.config_hash) {
            v4_xp_hex16(a, pid.config_hash);
            v4_xp_hex16(b, mid.config_hash);
            v4_err_set(err, V4_ERR_CONFIG, s->dir, "pack was made from a model with a different config.json (pack %s, "
                       "model %s/config.json %s): repack it for this model", a, v4_ckpt_dir(ck), b);
            goto fail;
        }
        if (mid.fingerprint != pid.fingerprint) {
            v4_xp_hex16(a, pid.fingerprint);
            v4_xp_hex16(b, mid.fingerprint);
            v4_err_set(err, V4_ERR_CONFIG, s->dir, "pack was made from a different checkpoint (same config.json, "
                       "different expert weights: pack fingerprint %s, model %s %s): repack it for this model",
                       a, v4_ckpt_dir(ck), b);
            goto fail;
        }
    }
    s->fd_buf = open(s->data_path, O_RDONLY | O_CLOEXEC);
    if (s->fd_buf < 0) {
        v4_err_set(err, V4_ERR_IO, s->data_path, "cannot open: %s", strerror(errno));
        goto fail;
    }
    struct stat st;
    if (fstat(s->fd_buf, &st) || !S_ISREG(st.st_mode)) {
        v4_err_set(err, V4_ERR_IO, s->data_path, "not a regular file");
        goto fail;
    }
    const size_t n = (size_t)s->base.n_layers * (size_t)s->base.n_experts;
    for (size_t i = 0; i < n; i++)
        if (s->offs[i] + s->base.block_bytes > (uint64_t)st.st_size) {
            v4_err_set(err, V4_ERR_FORMAT, s->data_path, "layer %zu expert %zu: block at offset %" PRIu64
                       " ends beyond the end of the file (%lld bytes): truncated pack",
                       i / (size_t)s->base.n_experts, i % (size_t)s->base.n_experts, s->offs[i], (long long)st.st_size);
            goto fail;
        }
    const int mode = io & 3;
    s->sim_refuse_read = !!(io & V4_PACK_IO_SIM_REFUSE_READ);
    if (mode != V4_PACK_IO_BUFFERED) {
        if (io & V4_PACK_IO_SIM_REFUSE_OPEN)
            errno = EINVAL;
        else
            s->fd_direct = open(s->data_path, O_RDONLY | O_DIRECT | O_CLOEXEC);
        if (s->fd_direct < 0) {
            int e = errno;
            if (mode == V4_PACK_IO_DIRECT || e != EINVAL) {
                v4_err_set(err, V4_ERR_IO, s->data_path, "cannot open with O_DIRECT: %s", strerror(e));
                goto fail;
            }
            s->direct_refused_at_open = 1;
            atomic_store(&s->direct_refused, 1);
        } else {
            atomic_store(&s->use_direct, 1);
        }
    }
    free(man);
    return &s->base;
fail:
    free(man);
    pack_close(&s->base);
    return NULL;
}

v4_xsource *v4_pack_source_open(const char *pack_dir, const v4_config *cfg, int io, v4_error *err)
{
    return open_impl(pack_dir, cfg, NULL, io, err);
}

v4_xsource *v4_pack_source_open_model(const char *pack_dir, const v4_config *cfg, const v4_ckpt *ck, int io,
                                      v4_error *err)
{
    if (!cfg || !ck) {
        v4_err_set(err, V4_ERR_INVALID, pack_dir, "v4_pack_source_open_model needs the model's config and checkpoint");
        return NULL;
    }
    return open_impl(pack_dir, cfg, ck, io, err);
}

void v4_st_source_counters(const v4_xsource *s, v4_xsource_counters *out);      /* expert_source_st.c */
void v4_synth_source_counters(const v4_xsource *s, v4_xsource_counters *out);   /* expert_source_synth.c */

void v4_xsource_get_counters(const v4_xsource *xs, v4_xsource_counters *out)
{
    memset(out, 0, sizeof *out);
    if (!xs)
        return;
    if (xs->ops != &pack_ops) {
        if (!strcmp(xs->kind, "synthetic"))
            v4_synth_source_counters(xs, out);
        else
            v4_st_source_counters(xs, out);
        return;
    }
    pack_src *s = (pack_src *)xs;
    out->reads = atomic_load(&s->reads);
    out->bytes = atomic_load(&s->bytes);
    out->read_ns = atomic_load(&s->read_ns);
    out->direct_reads = atomic_load(&s->direct_reads);
    out->buffered_reads = atomic_load(&s->buffered_reads);
    out->errors = atomic_load(&s->errors);
    out->corrupt_blocks = atomic_load(&s->corrupt);
    out->direct_refused = atomic_load(&s->direct_refused);
}

/* ================================================================== verifier */

int v4_pack_verify(const char *pack_dir, const v4_config *cfg, const v4_ckpt *ck,
                   void (*bad)(const v4_pack_bad *b, void *ud), v4_pack_progress_fn progress, void *ud,
                   v4_pack_verify_summary *sum, v4_error *err)
{
    memset(sum, 0, sizeof *sum);
    v4_xsource *xs = ck ? v4_pack_source_open_model(pack_dir, cfg, ck, V4_PACK_IO_AUTO, err)
                        : v4_pack_source_open(pack_dir, cfg, V4_PACK_IO_AUTO, err);
    if (!xs)
        return -1;
    pack_src *s = (pack_src *)xs;
    void *buf = aligned_alloc(V4_XBLOCK_ALIGN, xs->block_bytes);
    if (!buf) {
        v4_xsource_close(xs);
        return v4_err_set(err, V4_ERR_NOMEM, pack_dir, "out of memory");
    }
    const uint64_t n = (uint64_t)xs->n_layers * (uint64_t)xs->n_experts;
    const double t0 = v4_xp_now_s();
    v4_pack_progress p = {0, n, 0, n * xs->block_bytes, 0, 0};
    int rc = 0;
    for (uint64_t i = 0; i < n; i++) {
        const int l = (int)(i / (uint64_t)xs->n_experts), e = (int)(i % (uint64_t)xs->n_experts);
        v4_pack_bad b = {l, e, s->offs[i], {0}};
        if (v4_xsource_read(xs, l, e, buf, &b.err)) {
            sum->bad++;
            if (bad)
                bad(&b, ud);
        }
        (void)posix_fadvise(s->fd_buf, (off_t)s->offs[i], (off_t)xs->block_bytes, POSIX_FADV_DONTNEED);
        p.blocks_done = i + 1;
        p.bytes_done = (i + 1) * xs->block_bytes;
        p.elapsed_s = v4_xp_now_s() - t0;
        p.bytes_per_s = p.elapsed_s > 0 ? (double)p.bytes_done / p.elapsed_s : 0;
        if (progress && progress(&p, ud)) {
            rc = v4_err_set(err, V4_ERR_INVALID, pack_dir, "cancelled");
            break;
        }
    }
    sum->blocks = p.blocks_done;
    sum->bytes = p.bytes_done;
    sum->elapsed_s = v4_xp_now_s() - t0;
    free(buf);
    v4_xsource_close(xs);
    return rc;
}
