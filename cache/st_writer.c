/* st_writer.c - streaming safetensors writer (see st_writer.h).
 *
 * The header JSON is built with jansson (JSON_COMPACT | JSON_PRESERVE_ORDER, so
 * names are escaped correctly and tensors appear in declaration order), then padded
 * with spaces to a multiple of 8.  Data goes through one buffer of V4_STW_BUFSZ
 * bytes; writes larger than the buffer bypass it.  All I/O errors name the file.
 *
 * Owner: the mkmodel work package (cache/st_writer.*).
 */
#include "st_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct stw_tensor {
    char *name;
    v4_dtype dt;
    int ndim;
    int64_t shape[V4_ST_MAX_DIMS];
    uint64_t begin, nbytes;
} stw_tensor;

struct v4_stw {
    stw_tensor *t;
    size_t n, cap;
    uint64_t data_bytes;
    char *header;            /* padded header text (not NUL-terminated past len) */
    size_t header_len;       /* multiple of 8 */
    int sync;
    int fd;                  /* -1 when closed */
    char *path, *tmp;
    uint64_t written;
    unsigned char *buf;
    size_t buf_used;
};

typedef struct { v4_dtype dt; const char *name; size_t size; } dtype_info;

static const dtype_info DTYPES[] = {
    {V4_DT_BF16, "BF16", 2},     {V4_DT_F16, "F16", 2},         {V4_DT_F32, "F32", 4},
    {V4_DT_F64, "F64", 8},       {V4_DT_I64, "I64", 8},         {V4_DT_I32, "I32", 4},
    {V4_DT_I16, "I16", 2},       {V4_DT_I8, "I8", 1},           {V4_DT_U8, "U8", 1},
    {V4_DT_BOOL, "BOOL", 1},     {V4_DT_F8_E4M3, "F8_E4M3", 1}, {V4_DT_F8_E5M2, "F8_E5M2", 1},
    {V4_DT_F8_E8M0, "F8_E8M0", 1},
};

const char *v4_stw_dtype_name(v4_dtype dt)
{
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
        if (DTYPES[i].dt == dt)
            return DTYPES[i].name;
    return NULL;
}

size_t v4_stw_dtype_size(v4_dtype dt)
{
    for (size_t i = 0; i < sizeof DTYPES / sizeof DTYPES[0]; i++)
        if (DTYPES[i].dt == dt)
            return DTYPES[i].size;
    return 0;
}

int v4_stw_tmp_path(const char *path, char *out, size_t cap)
{
    const char *slash = strrchr(path, '/');
    int dirlen = slash ? (int)(slash - path + 1) : 0;
    const char *base = slash ? slash + 1 : path;
    int n = snprintf(out, cap, "%.*s.%s.tmp", dirlen, path, base);
    return (n < 0 || (size_t)n >= cap) ? -1 : 0;
}

v4_stw *v4_stw_new(void)
{
    v4_stw *w = calloc(1, sizeof *w);
    if (w) {
        w->fd = -1;
        w->sync = 1;
    }
    return w;
}

void v4_stw_free(v4_stw *w)
{
    if (!w)
        return;
    if (w->fd >= 0) {
        close(w->fd);
        if (w->tmp)
            unlink(w->tmp);
    }
    for (size_t i = 0; i < w->n; i++)
        free(w->t[i].name);
    free(w->t);
    free(w->header);
    free(w->path);
    free(w->tmp);
    free(w->buf);
    free(w);
}

void v4_stw_set_sync(v4_stw *w, int sync) { w->sync = sync; }
size_t v4_stw_count(const v4_stw *w) { return w->n; }
uint64_t v4_stw_data_bytes(const v4_stw *w) { return w->data_bytes; }
uint64_t v4_stw_written(const v4_stw *w) { return w->written; }

uint64_t v4_stw_tensor_bytes(const v4_stw *w, size_t i)
{
    return i < w->n ? w->t[i].nbytes : 0;
}

const char *v4_stw_tensor_name(const v4_stw *w, size_t i)
{
    return i < w->n ? w->t[i].name : NULL;
}

/* numel * elsize with overflow checks; -1 on overflow. */
static int tensor_nbytes(v4_dtype dt, int ndim, const int64_t *shape, uint64_t *out)
{
    uint64_t n = v4_stw_dtype_size(dt);
    for (int d = 0; d < ndim; d++) {
        uint64_t s = (uint64_t)shape[d];
        if (s && n > UINT64_MAX / s)
            return -1;
        n *= s;
    }
    *out = n;
    return 0;
}

static int check_new_tensor(const v4_stw *w, const char *name, v4_dtype dt, int ndim,
                            const int64_t *shape, v4_error *err)
{
    if (w->header)
        return v4_err_set(err, V4_ERR_INVALID, name, "tensor declared after the header was built");
    if (!name || !*name || !strcmp(name, "__metadata__"))
        return v4_err_set(err, V4_ERR_INVALID, name, "invalid tensor name");
    if (!v4_stw_dtype_name(dt))
        return v4_err_set(err, V4_ERR_DTYPE, name, "unknown dtype %d", (int)dt);
    if (ndim < 0 || ndim > V4_ST_MAX_DIMS)
        return v4_err_set(err, V4_ERR_SHAPE, name, "rank %d out of range", ndim);
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0)
            return v4_err_set(err, V4_ERR_SHAPE, name, "negative dimension %lld",
                              (long long)shape[d]);
    for (size_t i = 0; i < w->n; i++)
        if (!strcmp(w->t[i].name, name))
            return v4_err_set(err, V4_ERR_INVALID, name, "duplicate tensor name");
    return 0;
}

int v4_stw_add(v4_stw *w, const char *name, v4_dtype dt, int ndim, const int64_t *shape,
               v4_error *err)
{
    if (check_new_tensor(w, name, dt, ndim, shape, err))
        return -1;
    uint64_t nb;
    if (tensor_nbytes(dt, ndim, shape, &nb) || nb > UINT64_MAX - w->data_bytes)
        return v4_err_set(err, V4_ERR_SHAPE, name, "tensor size overflows");
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 64;
        stw_tensor *t = realloc(w->t, cap * sizeof *t);
        if (!t)
            return v4_err_set(err, V4_ERR_NOMEM, name, "out of memory");
        w->t = t;
        w->cap = cap;
    }
    stw_tensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name)))
        return v4_err_set(err, V4_ERR_NOMEM, name, "out of memory");
    t->dt = dt;
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    t->begin = w->data_bytes;
    t->nbytes = nb;
    w->data_bytes += nb;
    w->n++;
    return 0;
}

static json_t *tensor_json(const stw_tensor *t)
{
    json_t *shape = json_array(), *offs = json_array();
    if (!shape || !offs)
        goto fail;
    for (int d = 0; d < t->ndim; d++)
        if (json_array_append_new(shape, json_integer((json_int_t)t->shape[d])))
            goto fail;
    if (json_array_append_new(offs, json_integer((json_int_t)t->begin)) ||
        json_array_append_new(offs, json_integer((json_int_t)(t->begin + t->nbytes))))
        goto fail;
    /* "o" steals both arrays, also when packing fails. */
    return json_pack("{s:s, s:o, s:o}", "dtype", v4_stw_dtype_name(t->dt), "shape", shape,
                     "data_offsets", offs);
fail:
    json_decref(shape);
    json_decref(offs);
    return NULL;
}

static json_t *header_json(const v4_stw *w)
{
    json_t *root = json_object(), *meta = json_object();
    if (!root || !meta)
        goto fail;
    for (size_t i = 0; i < w->n; i++) {
        json_t *tj = tensor_json(&w->t[i]);
        if (!tj || json_object_set_new(root, w->t[i].name, tj))
            goto fail;
    }
    if (json_object_set_new(meta, "format", json_string("pt")))
        goto fail;
    if (json_object_set_new(root, "__metadata__", meta)) {
        meta = NULL;
        goto fail;
    }
    return root;
fail:
    json_decref(meta);
    json_decref(root);
    return NULL;
}

static int build_header(v4_stw *w, v4_error *err)
{
    if (w->header)
        return 0;
    json_t *root = header_json(w);
    char *text = root ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    if (!text)
        return v4_err_set(err, V4_ERR_NOMEM, "safetensors header", "cannot build header JSON");
    size_t len = strlen(text), padded = (len + 7) & ~(size_t)7;
    if (padded > V4_ST_MAX_HEADER) {
        free(text);
        return v4_err_set(err, V4_ERR_FORMAT, "safetensors header",
                          "header of %zu bytes exceeds the %u byte limit", padded,
                          (unsigned)V4_ST_MAX_HEADER);
    }
    w->header = malloc(padded);
    if (!w->header) {
        free(text);
        return v4_err_set(err, V4_ERR_NOMEM, "safetensors header", "out of memory");
    }
    memcpy(w->header, text, len);
    memset(w->header + len, ' ', padded - len);
    w->header_len = padded;
    free(text);
    return 0;
}

int v4_stw_file_bytes(v4_stw *w, uint64_t *out, v4_error *err)
{
    if (build_header(w, err))
        return -1;
    *out = 8 + (uint64_t)w->header_len + w->data_bytes;
    return 0;
}

/* write(2) all of buf, retrying on EINTR and short writes. */
static int write_all(int fd, const void *buf, size_t n, const char *where, v4_error *err)
{
    const unsigned char *p = buf;
    while (n) {
        ssize_t k = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return v4_err_set(err, V4_ERR_IO, where, "write failed: %s",
                              k < 0 ? strerror(errno) : "no progress");
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

static int flush_buf(v4_stw *w, v4_error *err)
{
    if (w->buf_used && write_all(w->fd, w->buf, w->buf_used, w->tmp, err))
        return -1;
    w->buf_used = 0;
    return 0;
}

static int set_paths(v4_stw *w, const char *path, v4_error *err)
{
    size_t cap = strlen(path) + 8;
    free(w->path);
    free(w->tmp);
    w->path = strdup(path);
    w->tmp = malloc(cap);
    if (!w->path || !w->tmp || v4_stw_tmp_path(path, w->tmp, cap))
        return v4_err_set(err, V4_ERR_NOMEM, path, "out of memory");
    return 0;
}

int v4_stw_begin(v4_stw *w, const char *path, v4_error *err)
{
    if (w->fd >= 0)
        return v4_err_set(err, V4_ERR_INVALID, path, "writer already started");
    if (build_header(w, err) || set_paths(w, path, err))
        return -1;
    if (!w->buf && !(w->buf = malloc(V4_STW_BUFSZ)))
        return v4_err_set(err, V4_ERR_NOMEM, path, "out of memory");
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0)
        return v4_err_set(err, V4_ERR_IO, w->tmp, "cannot create: %s", strerror(errno));
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)w->header_len >> (8 * i));
    w->written = 0;
    w->buf_used = 0;
    if (write_all(w->fd, len8, 8, w->tmp, err) ||
        write_all(w->fd, w->header, w->header_len, w->tmp, err))
        return -1;
    return 0;
}

int v4_stw_write(v4_stw *w, const void *data, size_t n, v4_error *err)
{
    if (w->fd < 0)
        return v4_err_set(err, V4_ERR_INVALID, w->path, "write before begin");
    if (n > w->data_bytes - w->written)
        return v4_err_set(err, V4_ERR_INVALID, w->tmp,
                          "writing %zu bytes past the declared data size (%llu of %llu written)",
                          n, (unsigned long long)w->written, (unsigned long long)w->data_bytes);
    w->written += n;
    if (w->buf_used + n <= V4_STW_BUFSZ) {
        memcpy(w->buf + w->buf_used, data, n);
        w->buf_used += n;
        return 0;
    }
    if (flush_buf(w, err))
        return -1;
    if (n >= V4_STW_BUFSZ / 2)
        return write_all(w->fd, data, n, w->tmp, err);
    memcpy(w->buf, data, n);
    w->buf_used = n;
    return 0;
}

int v4_stw_finish(v4_stw *w, v4_error *err)
{
    if (w->fd < 0)
        return v4_err_set(err, V4_ERR_INVALID, w->path, "finish before begin");
    if (w->written != w->data_bytes)
        return v4_err_set(err, V4_ERR_INVALID, w->tmp,
                          "only %llu of %llu data bytes written",
                          (unsigned long long)w->written, (unsigned long long)w->data_bytes);
    if (flush_buf(w, err))
        return -1;
    if (w->sync && fsync(w->fd))
        return v4_err_set(err, V4_ERR_IO, w->tmp, "fsync failed: %s", strerror(errno));
    int rc = close(w->fd);
    w->fd = -1;
    if (rc) {
        unlink(w->tmp);
        return v4_err_set(err, V4_ERR_IO, w->tmp, "close failed: %s", strerror(errno));
    }
    if (rename(w->tmp, w->path)) {
        int e = errno;
        unlink(w->tmp);
        return v4_err_set(err, V4_ERR_IO, w->path, "rename from %s failed: %s", w->tmp,
                          strerror(e));
    }
    return 0;
}

int v4_write_file_atomic(const char *path, const void *data, size_t n, int sync, v4_error *err)
{
    size_t cap = strlen(path) + 8;
    char *tmp = malloc(cap);
    if (!tmp || v4_stw_tmp_path(path, tmp, cap)) {
        free(tmp);
        return v4_err_set(err, V4_ERR_NOMEM, path, "out of memory");
    }
    int rc = -1;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        v4_err_set(err, V4_ERR_IO, tmp, "cannot create: %s", strerror(errno));
        goto out;
    }
    if (write_all(fd, data, n, tmp, err))
        goto out_close;
    if (sync && fsync(fd)) {
        v4_err_set(err, V4_ERR_IO, tmp, "fsync failed: %s", strerror(errno));
        goto out_close;
    }
    if (close(fd)) {
        fd = -1;
        v4_err_set(err, V4_ERR_IO, tmp, "close failed: %s", strerror(errno));
        goto out_unlink;
    }
    fd = -1;
    if (rename(tmp, path)) {
        v4_err_set(err, V4_ERR_IO, path, "rename from %s failed: %s", tmp, strerror(errno));
        goto out_unlink;
    }
    rc = 0;
    goto out;
out_close:
    close(fd);
out_unlink:
    unlink(tmp);
out:
    free(tmp);
    return rc;
}
