/* expert_pack.c - the expert pack's model identity and writer (v4_pack_write); the
 * on-disk format is described in expert_pack.h, the reader and verifier are in
 * expert_pack_source.c.
 *
 * Design: the checkpoint is opened with v4_model_open_ex(NO_PREPARE) (mmap'ed, the
 * routed experts bound in place); one V4_XBLOCK_ALIGN-aligned block buffer is filled
 * per (layer, expert) with v4_xblock_fill, hashed (XXH3-64) and pwrite'n at its
 * offset.  Memory stays bounded: the checkpoint pages of an expert are dropped from
 * the mapping once copied (MADV_DONTNEED; the next expert gets MADV_WILLNEED), and the
 * written file is flushed in 64 MiB windows (sync_file_range, then
 * POSIX_FADV_DONTNEED on the window before), so neither RSS nor dirty page cache grow
 * with the model (~110-185 MB peak RSS for the 9 GB small preset).  Only the
 * per-block checksums (8 bytes each) are kept until the manifest is written.
 * Atomicity: PACKDIR.tmp.<pid>/ -> fsync data, write + fsync manifest.json, fsync the
 * directory -> rename to PACKDIR (RENAME_NOREPLACE) -> fsync the parent.
 *
 * Ownership: the writer frees everything it allocates (and removes its temporary
 * directory on failure) before returning.  No global mutable state.
 * Thread: any one thread per call.
 */
#define _GNU_SOURCE
#include "expert_pack.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>
#include <xxhash.h>

#include "expert_block.h"
#include "expert_pack_util.h"
#include "model_files.h"

#define WB_WINDOW (64u << 20)   /* flush / drop the written file in windows of this size */
#define FP_SAMPLE 4096          /* bytes of each sampled tensor in the model fingerprint */

/* Leftovers of crashed runs next to pack_dir: NAME.tmp.<pid> / NAME.old.<pid> whose
 * process is gone are removed; those of a live process are left alone. */
static void remove_leftovers(const char *pack_dir)
{
    char *parent = v4_xp_parent_dir(pack_dir);
    const char *slash = strrchr(pack_dir, '/');
    const char *base = slash ? slash + 1 : pack_dir;
    size_t bl = strlen(base);
    DIR *d = parent ? opendir(parent) : NULL;
    if (!d) {
        free(parent);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *n = de->d_name;
        if (strncmp(n, base, bl) || (strncmp(n + bl, ".tmp.", 5) && strncmp(n + bl, ".old.", 5)))
            continue;
        char *end;
        long pid = strtol(n + bl + 5, &end, 10);
        if (*end || pid <= 0 || pid > INT_MAX || pid == (long)getpid())
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        char *p = v4_xp_join(parent, n);
        if (p)
            v4_xp_remove_flat_dir(p);
        free(p);
    }
    closedir(d);
    free(parent);
}

/* Page-rounded madvise over [p, p+len) of a file mapping (best effort). */
static void advise_range(const void *p, size_t len, int advice)
{
    if (!p || !len)
        return;
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)p & ~(pg - 1), b = ((uintptr_t)p + len + pg - 1) & ~(pg - 1);
    (void)madvise((void *)a, b - a, advice);
}

static void advise_expert(const v4_xblock_layout *lo, const v4_expert_w *e, int advice)
{
    const v4_mat *m[3] = {&e->w1, &e->w3, &e->w2};
    for (int i = 0; i < 3; i++) {
        advise_range(m[i]->w, lo->len[2 * i], advice);
        advise_range(m[i]->scale, lo->len[2 * i + 1], advice);
    }
}

/* ================================================================== model identity */

int v4_pack_model_id_of(const v4_config *cfg, const v4_ckpt *ck, v4_pack_model_id *id, v4_error *err)
{
    char *path = v4_xp_join(v4_ckpt_dir(ck), "config.json");
    if (!path)
        return v4_err_set(err, V4_ERR_NOMEM, v4_ckpt_dir(ck), "out of memory");
    size_t len;
    char *text = v4_xp_read_small_file(path, &len, err);
    free(path);
    if (!text)
        return -1;
    id->config_hash = XXH3_64bits(text, len);
    XXH3_state_t *st = XXH3_createState();
    if (!st) {
        free(text);
        return v4_err_set(err, V4_ERR_NOMEM, v4_ckpt_dir(ck), "out of memory");
    }
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, text, len);
    free(text);
    static const char *const parts[2] = {"w1.weight", "w2.weight"};
    int rc = 0;
    for (int l = 0; l < cfg->n_layers && !rc; l++)
        for (int k = 0; k < 2 && !rc; k++) {
            int e = k ? cfg->n_routed_experts - 1 : 0;
            for (int p = 0; p < 2; p++) {
                char name[128];
                snprintf(name, sizeof name, "layers.%d.ffn.experts.%d.%s", l, e, parts[p]);
                const v4_tensor *t = v4_ckpt_find(ck, name);
                if (!t) {
                    rc = v4_err_set(err, V4_ERR_MISSING, v4_ckpt_dir(ck), "tensor %s not found", name);
                    break;
                }
                XXH3_64bits_update(st, t->data, t->nbytes < FP_SAMPLE ? t->nbytes : FP_SAMPLE);
            }
        }
    id->fingerprint = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return rc;
}

/* ================================================================== manifest */

static json_t *manifest_json(const v4_config *c, const v4_xblock_layout *lo, const v4_pack_model_id *id,
                             const char *model_dir, const uint64_t *sums)
{
    char h[17];
    json_t *root = json_object();
    json_object_set_new(root, "format", json_string(V4_PACK_FORMAT));
    json_object_set_new(root, "version", json_integer(V4_PACK_VERSION));
    json_t *model = json_object();
    v4_xp_hex16(h, id->config_hash);
    json_object_set_new(model, "config_xxh3", json_string(h));
    v4_xp_hex16(h, id->fingerprint);
    json_object_set_new(model, "fingerprint", json_string(h));
    json_object_set_new(model, "source_dir", json_string(model_dir));
    json_object_set_new(root, "model", model);
    json_t *shape = json_object();
    json_object_set_new(shape, "n_layers", json_integer(c->n_layers));
    json_object_set_new(shape, "n_routed_experts", json_integer(c->n_routed_experts));
    json_object_set_new(shape, "moe_inter", json_integer(c->moe_inter));
    json_object_set_new(shape, "dim", json_integer(c->dim));
    json_object_set_new(shape, "expert_fp4", json_boolean(c->expert_fp4));
    json_object_set_new(root, "shape", shape);
    json_object_set_new(root, "file", json_string(V4_PACK_DATA_FILE));
    json_object_set_new(root, "block_bytes", json_integer((json_int_t)lo->bytes));
    json_object_set_new(root, "block_used", json_integer((json_int_t)lo->used));
    json_object_set_new(root, "align", json_integer(V4_XBLOCK_ALIGN));
    json_t *parts = json_array();
    for (int i = 0; i < V4_XBLOCK_NPART; i++) {
        json_t *p = json_object();
        json_object_set_new(p, "name", json_string(v4_xblock_part_names[i]));
        json_object_set_new(p, "offset", json_integer((json_int_t)lo->off[i]));
        json_object_set_new(p, "length", json_integer((json_int_t)lo->len[i]));
        json_array_append_new(parts, p);
    }
    json_object_set_new(root, "parts", parts);
    json_object_set_new(root, "hash", json_string("xxh3-64"));
    json_t *blocks = json_array();
    for (int l = 0; l < c->n_layers; l++)
        for (int e = 0; e < c->n_routed_experts; e++) {
            size_t i = (size_t)l * (size_t)c->n_routed_experts + (size_t)e;
            json_t *b = json_object();
            json_object_set_new(b, "layer", json_integer(l));
            json_object_set_new(b, "expert", json_integer(e));
            json_object_set_new(b, "offset", json_integer((json_int_t)(i * lo->bytes)));
            json_object_set_new(b, "bytes", json_integer((json_int_t)lo->bytes));
            v4_xp_hex16(h, sums[i]);
            json_object_set_new(b, "checksum", json_string(h));
            json_array_append_new(blocks, b);
        }
    json_object_set_new(root, "blocks", blocks);
    return root;
}

static int write_manifest(const char *path, json_t *root, int sync, v4_error *err)
{
    char *text = json_dumps(root, JSON_INDENT(1) | JSON_PRESERVE_ORDER);
    if (!text)
        return v4_err_set(err, V4_ERR_NOMEM, path, "out of memory");
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    int rc = 0;
    if (fd < 0) {
        rc = v4_err_set(err, V4_ERR_IO, path, "cannot create: %s", strerror(errno));
    } else {
        size_t n = strlen(text);
        text[n] = '\n';     /* json_dumps' terminator becomes the final newline */
        if (v4_xp_pwrite_all(fd, text, n + 1, 0) || (sync && fsync(fd)))
            rc = v4_err_set(err, V4_ERR_IO, path, "write failed: %s", strerror(errno));
        if (close(fd) && !rc)
            rc = v4_err_set(err, V4_ERR_IO, path, "close failed: %s", strerror(errno));
    }
    free(text);
    return rc;
}

/* ================================================================== writer */

typedef struct writer {
    const char *pack_dir;
    char *tmp_dir, *data_path, *man_path, *old_dir;
    int fd, flags;
    uint8_t *buf;
    uint64_t *sums;
    v4_model_files m;
    int model_open;
} writer;

static void writer_free(writer *w, int remove_tmp)
{
    if (w->fd >= 0)
        close(w->fd);
    if (remove_tmp && w->tmp_dir)
        v4_xp_remove_flat_dir(w->tmp_dir);
    if (w->model_open)
        v4_model_close(&w->m);
    free(w->tmp_dir);
    free(w->data_path);
    free(w->man_path);
    free(w->old_dir);
    free(w->buf);
    free(w->sums);
}

/* An existing PACKDIR may be replaced only if it looks like a pack (or is empty):
 * --force must not delete an unrelated directory. */
static int check_replaceable(const char *dir, v4_error *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return v4_err_set(err, V4_ERR_IO, dir, "exists and cannot be read: %s", strerror(errno));
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d)) && !rc) {
        const char *n = de->d_name;
        if (strcmp(n, ".") && strcmp(n, "..") && strcmp(n, V4_PACK_DATA_FILE) && strcmp(n, V4_PACK_MANIFEST))
            rc = v4_err_set(err, V4_ERR_INVALID, dir,
                            "exists and holds '%s', which is not part of an expert pack; not replacing it", n);
    }
    closedir(d);
    return rc;
}

/* Move the finished temporary directory to pack_dir. */
static int install(writer *w, v4_error *err)
{
    int sync = !(w->flags & V4_PACK_NO_SYNC);
    struct stat st;
    int exists = lstat(w->pack_dir, &st) == 0;
    if (exists) {
        if (!(w->flags & V4_PACK_FORCE))
            return v4_err_set(err, V4_ERR_INVALID, w->pack_dir, "already exists (use --force to replace it)");
        if (!S_ISDIR(st.st_mode))
            return v4_err_set(err, V4_ERR_INVALID, w->pack_dir, "exists and is not a directory");
        if (check_replaceable(w->pack_dir, err))
            return -1;
        size_t n = strlen(w->pack_dir) + 32;
        w->old_dir = malloc(n);
        if (!w->old_dir)
            return v4_err_set(err, V4_ERR_NOMEM, w->pack_dir, "out of memory");
        snprintf(w->old_dir, n, "%s.old.%ld", w->pack_dir, (long)getpid());
        if (rename(w->pack_dir, w->old_dir))
            return v4_err_set(err, V4_ERR_IO, w->pack_dir, "cannot move the old pack aside: %s", strerror(errno));
    }
    int rc = renameat2(AT_FDCWD, w->tmp_dir, AT_FDCWD, w->pack_dir, RENAME_NOREPLACE);
    if (rc && errno == EINVAL) {   /* filesystem without RENAME_NOREPLACE */
        rc = lstat(w->pack_dir, &st) == 0 ? (errno = EEXIST, -1) : rename(w->tmp_dir, w->pack_dir);
    }
    if (rc) {
        int e = errno;
        if (w->old_dir)
            (void)rename(w->old_dir, w->pack_dir);
        if (e == EEXIST || e == ENOTEMPTY)
            return v4_err_set(err, V4_ERR_INVALID, w->pack_dir,
                              "appeared while packing (another run?); use --force to replace it");
        return v4_err_set(err, V4_ERR_IO, w->pack_dir, "cannot rename %s to it: %s", w->tmp_dir, strerror(e));
    }
    free(w->tmp_dir);
    w->tmp_dir = NULL;      /* installed: nothing to clean up any more */
    if (w->old_dir)
        v4_xp_remove_flat_dir(w->old_dir);
    if (sync) {
        char *parent = v4_xp_parent_dir(w->pack_dir);
        int r = parent ? v4_xp_fsync_path(parent, err) : v4_err_set(err, V4_ERR_NOMEM, w->pack_dir, "out of memory");
        free(parent);
        return r;
    }
    return 0;
}

static int write_blocks(writer *w, const v4_xblock_layout *lo, v4_pack_progress_fn progress, void *ud,
                        v4_error *err)
{
    const v4_config *c = &w->m.cfg;
    const int sync = !(w->flags & V4_PACK_NO_SYNC);
    const uint64_t n = (uint64_t)c->n_layers * (uint64_t)c->n_routed_experts;
    v4_pack_progress p = {0, n, 0, n * lo->bytes, 0, 0};
    const double t0 = v4_xp_now_s();
    if (progress && progress(&p, ud))
        return v4_err_set(err, V4_ERR_INVALID, w->pack_dir, "cancelled");
    uint64_t win_start = 0, prev_start = 0;
    int have_prev = 0;
    for (uint64_t i = 0; i < n; i++) {
        const int l = (int)(i / (uint64_t)c->n_routed_experts), e = (int)(i % (uint64_t)c->n_routed_experts);
        const v4_expert_w *x = &w->m.w.layers[l].experts[e];
        if (i + 1 < n) {
            const uint64_t j = i + 1;
            advise_expert(lo, &w->m.w.layers[j / (uint64_t)c->n_routed_experts].experts[j % (uint64_t)c->n_routed_experts],
                          MADV_WILLNEED);
        }
        v4_xblock_fill(c, lo, x, w->buf);
        advise_expert(lo, x, MADV_DONTNEED);
        w->sums[i] = XXH3_64bits(w->buf, lo->bytes);
        const uint64_t off = i * lo->bytes;
        if (v4_xp_pwrite_all(w->fd, w->buf, lo->bytes, off))
            return v4_err_set(err, V4_ERR_IO, w->data_path, "write of layer %d expert %d at offset %" PRIu64 " failed: %s",
                              l, e, off, strerror(errno));
        const uint64_t end = off + lo->bytes;
        if (end - win_start >= WB_WINDOW || i + 1 == n) {
            if (sync)
                (void)sync_file_range(w->fd, (off_t)win_start, (off_t)(end - win_start), SYNC_FILE_RANGE_WRITE);
            if (have_prev) {
                if (sync)
                    (void)sync_file_range(w->fd, (off_t)prev_start, (off_t)(win_start - prev_start),
                                          SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                              SYNC_FILE_RANGE_WAIT_AFTER);
                (void)posix_fadvise(w->fd, (off_t)prev_start, (off_t)(win_start - prev_start), POSIX_FADV_DONTNEED);
            }
            prev_start = win_start;
            have_prev = 1;
            win_start = end;
        }
        p.blocks_done = i + 1;
        p.bytes_done = end;
        p.elapsed_s = v4_xp_now_s() - t0;
        p.bytes_per_s = p.elapsed_s > 0 ? (double)p.bytes_done / p.elapsed_s : 0;
        if (progress && progress(&p, ud))
            return v4_err_set(err, V4_ERR_INVALID, w->pack_dir, "cancelled after %" PRIu64 " of %" PRIu64 " blocks",
                              p.blocks_done, n);
    }
    if (sync && fsync(w->fd))
        return v4_err_set(err, V4_ERR_IO, w->data_path, "fsync failed: %s", strerror(errno));
    (void)posix_fadvise(w->fd, 0, 0, POSIX_FADV_DONTNEED);
    if (close(w->fd)) {
        w->fd = -1;
        return v4_err_set(err, V4_ERR_IO, w->data_path, "close failed: %s", strerror(errno));
    }
    w->fd = -1;
    return 0;
}

int v4_pack_write(const char *model_dir, const char *pack_dir_in, int flags, v4_pack_progress_fn progress,
                  void *ud, v4_error *err)
{
    writer w = {0};
    w.fd = -1;
    w.flags = flags;
    char *pack_dir = v4_xp_trim_path(pack_dir_in);
    if (!pack_dir)
        return v4_err_set(err, V4_ERR_NOMEM, pack_dir_in, "out of memory");
    w.pack_dir = pack_dir;
    int rc = -1;
    struct stat st;
    if (!*pack_dir) {
        v4_err_set(err, V4_ERR_INVALID, pack_dir_in, "empty pack directory name");
        goto out;
    }
    if (lstat(pack_dir, &st) == 0) {   /* checked again at the rename; this saves a wasted pack */
        if (!(flags & V4_PACK_FORCE)) {
            v4_err_set(err, V4_ERR_INVALID, pack_dir, "already exists (use --force to replace it)");
            goto out;
        }
        if (!S_ISDIR(st.st_mode)) {
            v4_err_set(err, V4_ERR_INVALID, pack_dir, "exists and is not a directory");
            goto out;
        }
        if (check_replaceable(pack_dir, err))
            goto out;
    }
    if (v4_model_open_ex(model_dir, &w.m, V4_OPEN_NO_PREPARE, err))
        goto out;
    w.model_open = 1;
    const v4_config *c = &w.m.cfg;
    v4_xblock_layout lo;
    v4_xblock_layout_of(c, &lo);
    v4_pack_model_id id;
    if (v4_pack_model_id_of(c, w.m.ck, &id, err))
        goto out;
    remove_leftovers(pack_dir);
    size_t tn = strlen(pack_dir) + 32;
    w.tmp_dir = malloc(tn);
    if (!w.tmp_dir) {
        v4_err_set(err, V4_ERR_NOMEM, pack_dir, "out of memory");
        goto out;
    }
    snprintf(w.tmp_dir, tn, "%s.tmp.%ld", pack_dir, (long)getpid());
    if (mkdir(w.tmp_dir, 0755)) {
        int e = errno;
        if (e == EEXIST)   /* ours from a previous call in this process: start over */
            e = v4_xp_remove_flat_dir(w.tmp_dir) || mkdir(w.tmp_dir, 0755) ? errno : 0;
        if (e) {
            free(w.tmp_dir);
            w.tmp_dir = NULL;   /* not ours to remove */
            v4_err_set(err, V4_ERR_IO, pack_dir, "cannot create the temporary directory %s.tmp.%ld: %s", pack_dir,
                       (long)getpid(), strerror(e));
            goto out;
        }
    }
    w.data_path = v4_xp_join(w.tmp_dir, V4_PACK_DATA_FILE);
    w.man_path = v4_xp_join(w.tmp_dir, V4_PACK_MANIFEST);
    const uint64_t n = (uint64_t)c->n_layers * (uint64_t)c->n_routed_experts;
    w.buf = aligned_alloc(V4_XBLOCK_ALIGN, lo.bytes);
    w.sums = malloc(sizeof *w.sums * (n ? n : 1));
    if (!w.data_path || !w.man_path || !w.buf || !w.sums) {
        v4_err_set(err, V4_ERR_NOMEM, pack_dir, "out of memory");
        goto out;
    }
    w.fd = open(w.data_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (w.fd < 0) {
        v4_err_set(err, V4_ERR_IO, w.data_path, "cannot create: %s", strerror(errno));
        goto out;
    }
    const uint64_t total = n * lo.bytes;
    if (total && fallocate(w.fd, 0, 0, (off_t)total) && errno != EOPNOTSUPP && errno != ENOSYS) {
        v4_err_set(err, V4_ERR_IO, w.data_path, "cannot reserve %" PRIu64 " bytes: %s", total, strerror(errno));
        goto out;
    }
    if (write_blocks(&w, &lo, progress, ud, err))
        goto out;
    json_t *man = manifest_json(c, &lo, &id, model_dir, w.sums);
    if (!man) {
        v4_err_set(err, V4_ERR_NOMEM, pack_dir, "out of memory");
        goto out;
    }
    rc = write_manifest(w.man_path, man, !(flags & V4_PACK_NO_SYNC), err);
    json_decref(man);
    if (rc)
        goto out;
    if (!(flags & V4_PACK_NO_SYNC) && v4_xp_fsync_path(w.tmp_dir, err)) {
        rc = -1;
        goto out;
    }
    rc = install(&w, err);
out:
    writer_free(&w, 1);
    free(pack_dir);
    return rc;
}

