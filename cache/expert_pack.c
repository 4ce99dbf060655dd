/* expert_pack.c - the expert pack: model identity, writer, reader (source "pack") and
 * verifier (see expert_pack.h for the on-disk format).
 *
 * Writer: the checkpoint is opened with v4_model_open_ex(NO_PREPARE) (mmap'ed, the
 * routed experts bound in place); one V4_XBLOCK_ALIGN-aligned block buffer is filled
 * per (layer, expert) with v4_xblock_fill, hashed (XXH3-64) and pwrite'n at its
 * offset.  Memory stays bounded: the checkpoint pages of an expert are dropped from
 * the mapping once copied (MADV_DONTNEED; the next expert gets MADV_WILLNEED), and the
 * written file is flushed in 64 MiB windows (sync_file_range, then
 * POSIX_FADV_DONTNEED on the window before), so neither RSS nor dirty page cache grow
 * with the model.  Only the per-block checksums (8 bytes each) are kept until the
 * manifest is written.
 *
 * Reader: two descriptors on experts.bin, one O_DIRECT (when allowed) and one
 * buffered.  read() preads the block (EINTR and short reads handled; buffered reads
 * take what the page cache holds with RWF_NOWAIT and issue one WILLNEED readahead for
 * the rest), hashes it and compares with the manifest.  If O_DIRECT is refused at open (EINVAL: tmpfs) or on the
 * first read, the source switches to the buffered descriptor for good and says so in
 * its counters.  Corrupt blocks are quarantined in a per-block byte array (atomic
 * flag, the bad hash stored before the flag is released) so later reads fail at once
 * with the same message.  Counters are atomics; no locks on the read path.
 *
 * Ownership: a pack_src owns its path strings, descriptors and arrays (freed by
 * close).  The writer and verifier free everything they allocate before returning.
 * No global mutable state.
 * Thread: read() and the counters from any thread; open/close/write/verify from one.
 */
#define _GNU_SOURCE
#include "expert_pack.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <xxhash.h>

#include "expert_block.h"
#include "model_files.h"

#define WB_WINDOW (64u << 20)   /* writer: flush / drop the written file in windows of this size */
#define FP_SAMPLE 4096          /* bytes of each sampled tensor in the model fingerprint */

/* ================================================================== helpers */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void hex16(char out[17], uint64_t v)
{
    snprintf(out, 17, "%016" PRIx64, v);
}

static int parse_hex16(const char *s, uint64_t *v)
{
    if (!s || strlen(s) != 16)
        return -1;
    uint64_t x = 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return -1;
        x = x << 4 | (uint64_t)d;
    }
    *v = x;
    return 0;
}

static char *join(const char *a, const char *b)
{
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = malloc(n);
    if (p)
        snprintf(p, n, "%s/%s", a, b);
    return p;
}

/* malloc'd copy of path without trailing slashes ("/" stays "/"). */
static char *trim_path(const char *path)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, path, n);
        p[n] = 0;
    }
    return p;
}

static char *read_small_file(const char *path, size_t *len, v4_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        v4_err_set(err, V4_ERR_IO, path, "cannot open: %s", strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (n < cap)
            break;
        char *nb = cap < (64u << 20) ? realloc(buf, cap * 2) : NULL;
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf || bad) {
        free(buf);
        v4_err_set(err, bad ? V4_ERR_IO : V4_ERR_NOMEM, path, bad ? "read failed" : "out of memory");
        return NULL;
    }
    *len = n;
    return buf;
}

static int fsync_path(const char *path, v4_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return v4_err_set(err, V4_ERR_IO, path, "cannot open to fsync: %s", strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc)
        return v4_err_set(err, V4_ERR_IO, path, "fsync failed: %s", strerror(e));
    return 0;
}

static char *parent_dir(const char *path)
{
    const char *s = strrchr(path, '/');
    if (!s)
        return trim_path(".");
    if (s == path)
        return trim_path("/");
    char *p = malloc((size_t)(s - path) + 1);
    if (p) {
        memcpy(p, path, (size_t)(s - path));
        p[s - path] = 0;
    }
    return p;
}

/* Remove a flat directory (a pack or a pack's temporary): its files, then itself. */
static int remove_flat_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : -1;
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char *p = join(dir, de->d_name);
        if (!p || unlink(p))
            rc = -1;
        free(p);
    }
    closedir(d);
    return rmdir(dir) || rc ? -1 : 0;
}

/* Leftovers of crashed runs next to pack_dir: NAME.tmp.<pid> / NAME.old.<pid> whose
 * process is gone are removed; those of a live process are left alone. */
static void remove_leftovers(const char *pack_dir)
{
    char *parent = parent_dir(pack_dir);
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
        char *p = join(parent, n);
        if (p)
            remove_flat_dir(p);
        free(p);
    }
    closedir(d);
    free(parent);
}

static int pread_all(int fd, void *dst, size_t len, uint64_t off)
{
    size_t done = 0;
    while (done < len) {
        ssize_t r = pread(fd, (char *)dst + done, len - done, (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0) {
            errno = 0;      /* end of file: the caller reports a short file */
            return -1;
        }
        done += (size_t)r;
    }
    return 0;
}

/* Buffered read of one block: what the page cache holds is copied without blocking
 * (RWF_NOWAIT); for the rest, one readahead request of the whole remainder is issued
 * before the pread (otherwise the kernel reads a cold block in synchronous 128 KiB
 * readahead steps: ~200 MB/s instead of ~1 GB/s on the test VM). */
static int buffered_read(int fd, void *dst, size_t len, uint64_t off)
{
    struct iovec iov = {dst, len};
    ssize_t r = preadv2(fd, &iov, 1, (off_t)off, RWF_NOWAIT);
    size_t got = r > 0 ? (size_t)r : 0;
    if (got == len)
        return 0;
    (void)posix_fadvise(fd, (off_t)(off + got), (off_t)(len - got), POSIX_FADV_WILLNEED);
    return pread_all(fd, (char *)dst + got, len - got, off + got);
}

static int pwrite_all(int fd, const void *src, size_t len, uint64_t off)
{
    size_t done = 0;
    while (done < len) {
        ssize_t r = pwrite(fd, (const char *)src + done, len - done, (off_t)(off + done));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        done += (size_t)r;
    }
    return 0;
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
    char *path = join(v4_ckpt_dir(ck), "config.json");
    if (!path)
        return v4_err_set(err, V4_ERR_NOMEM, v4_ckpt_dir(ck), "out of memory");
    size_t len;
    char *text = read_small_file(path, &len, err);
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
    hex16(h, id->config_hash);
    json_object_set_new(model, "config_xxh3", json_string(h));
    hex16(h, id->fingerprint);
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
            hex16(h, sums[i]);
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
        if (pwrite_all(fd, text, n + 1, 0) || (sync && fsync(fd)))
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
        remove_flat_dir(w->tmp_dir);
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
        remove_flat_dir(w->old_dir);
    if (sync) {
        char *parent = parent_dir(w->pack_dir);
        int r = parent ? fsync_path(parent, err) : v4_err_set(err, V4_ERR_NOMEM, w->pack_dir, "out of memory");
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
    const double t0 = now_s();
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
        if (pwrite_all(w->fd, w->buf, lo->bytes, off))
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
        p.elapsed_s = now_s() - t0;
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
    char *pack_dir = trim_path(pack_dir_in);
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
            e = remove_flat_dir(w.tmp_dir) || mkdir(w.tmp_dir, 0755) ? errno : 0;
        if (e) {
            free(w.tmp_dir);
            w.tmp_dir = NULL;   /* not ours to remove */
            v4_err_set(err, V4_ERR_IO, pack_dir, "cannot create the temporary directory %s.tmp.%ld: %s", pack_dir,
                       (long)getpid(), strerror(e));
            goto out;
        }
    }
    w.data_path = join(w.tmp_dir, V4_PACK_DATA_FILE);
    w.man_path = join(w.tmp_dir, V4_PACK_MANIFEST);
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
    if (!(flags & V4_PACK_NO_SYNC) && fsync_path(w.tmp_dir, err)) {
        rc = -1;
        goto out;
    }
    rc = install(&w, err);
out:
    writer_free(&w, 1);
    free(pack_dir);
    return rc;
}

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
    hex16(want_h, s->sums[i]);
    hex16(got_h, got);
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
    const uint64_t t0 = now_ns();
    const size_t n = s->base.block_bytes;
    int direct = atomic_load_explicit(&s->use_direct, memory_order_relaxed);
    int rc;
    if (direct && s->sim_refuse_read) {
        rc = -1;
        errno = EINVAL;
    } else {
        rc = direct ? pread_all(s->fd_direct, dst, n, s->offs[i]) : buffered_read(s->fd_buf, dst, n, s->offs[i]);
    }
    if (rc && direct && errno == EINVAL) {
        /* The filesystem accepted O_DIRECT at open but refuses the I/O: buffered for good. */
        atomic_store(&s->use_direct, 0);
        atomic_store(&s->direct_refused, 1);
        direct = 0;
        rc = buffered_read(s->fd_buf, dst, n, s->offs[i]);
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
    atomic_fetch_add(&s->read_ns, now_ns() - t0);
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
    long long v, L, E, inter, dim, bb, used;
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
    if (parse_hex16(jstr(model, "config_xxh3"), &id->config_hash) ||
        parse_hex16(jstr(model, "fingerprint"), &id->fingerprint)) {
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
        if (seen[i] || bo % V4_XBLOCK_ALIGN || parse_hex16(jstr(b, "checksum"), &sum)) {
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
    s->dir = trim_path(pack_dir);
    s->data_path = s->dir ? join(s->dir, V4_PACK_DATA_FILE) : NULL;
    char *man = s->dir ? join(s->dir, V4_PACK_MANIFEST) : NULL;
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
            hex16(a, pid.config_hash);
            hex16(b, mid.config_hash);
            v4_err_set(err, V4_ERR_CONFIG, s->dir, "pack was made from a model with a different config.json (pack %s, "
                       "model %s/config.json %s): repack it for this model", a, v4_ckpt_dir(ck), b);
            goto fail;
        }
        if (mid.fingerprint != pid.fingerprint) {
            hex16(a, pid.fingerprint);
            hex16(b, mid.fingerprint);
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

void v4_st_source_counters(const v4_xsource *s, v4_xsource_counters *out);   /* expert_source_st.c */

void v4_xsource_get_counters(const v4_xsource *xs, v4_xsource_counters *out)
{
    memset(out, 0, sizeof *out);
    if (!xs)
        return;
    if (xs->ops != &pack_ops) {
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
    const double t0 = now_s();
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
        p.elapsed_s = now_s() - t0;
        p.bytes_per_s = p.elapsed_s > 0 ? (double)p.bytes_done / p.elapsed_s : 0;
        if (progress && progress(&p, ud)) {
            rc = v4_err_set(err, V4_ERR_INVALID, pack_dir, "cancelled");
            break;
        }
    }
    sum->blocks = p.blocks_done;
    sum->bytes = p.bytes_done;
    sum->elapsed_s = now_s() - t0;
    free(buf);
    v4_xsource_close(xs);
    return rc;
}
