/* checkpoint.c - a (sharded) safetensors checkpoint directory, memory-mapped.
 *
 * Design: v4_ckpt_open() reads DIR/model.safetensors.index.json when present (its
 * weight_map names the shard of every tensor), otherwise DIR/model.safetensors.  Each
 * distinct shard is mmap'ed read-only (PROT_READ, MAP_PRIVATE; the file descriptor is
 * closed right after mapping, nothing is copied) and its header is validated by
 * v4_st_parse_header().  Tensor records get their data pointer (base + 8 + header
 * length + offset) and shard index.  Every name of the weight_map must exist in the
 * shard it names; tensors present in a shard but absent from the index stay
 * reachable.  A name found in two shards is an error.  Lookups go through one array
 * of tensor pointers sorted by name (bsearch; ~70k names for V4-Flash).
 *
 * Ownership: v4_ckpt owns the directory string, the shard paths, the mappings, each
 * shard's v4_st_header (tensor records + names) and the lookup array; all of it is
 * released by v4_ckpt_close().  No global mutable state.
 * Thread: open/close on one thread; find/tensor/expect/advise are read-only.
 */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#define INDEX_NAME "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"

typedef struct v4_shard {
    char *name;              /* file name inside the directory */
    char *path;              /* dir + "/" + name */
    const uint8_t *base;     /* mapping of the whole file (NULL when empty) */
    size_t size;
    v4_st_header hdr;
} v4_shard;

struct v4_ckpt {
    char *dir;
    v4_shard *shards;
    size_t n_shards;
    const v4_tensor **by_name;   /* all tensors of all shards, sorted by name */
    size_t n_tensors;
};

/* ---------------------------------------------------------------- helpers */

static char *path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p)
        return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p)
        memcpy(p, s, n);
    return p;
}

static int is_regular_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int map_file(const char *path, const uint8_t **base, size_t *size, v4_error *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return v4_err_set(err, V4_ERR_IO, path, "cannot open shard: %s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int e = errno;
        close(fd);
        return v4_err_set(err, V4_ERR_IO, path, "not a regular file%s%s", e ? ": " : "",
                          e ? strerror(e) : "");
    }
    *base = NULL;
    *size = (size_t)st.st_size;
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return v4_err_set(err, V4_ERR_IO, path, "mmap failed: %s", strerror(e));
        }
        *base = p;
    }
    close(fd);
    return 0;
}

/* Map one shard, validate its header and point its tensors at the mapping. */
static int open_shard(v4_shard *sh, int index, v4_error *err)
{
    if (map_file(sh->path, &sh->base, &sh->size, err))
        return -1;
    if (v4_st_parse_header(sh->base, sh->size, sh->path, &sh->hdr, err))
        return -1;
    const uint8_t *data = sh->base + 8 + sh->hdr.header_len;
    for (size_t i = 0; i < sh->hdr.n_tensors; i++) {
        v4_tensor *t = &sh->hdr.tensors[i];
        t->data = data + t->offset;
        t->shard = index;
    }
    return 0;
}

static int init_shard(v4_ckpt *ck, size_t i, const char *name, v4_error *err)
{
    v4_shard *sh = &ck->shards[i];
    sh->name = dup_str(name);
    sh->path = path_join(ck->dir, name);
    if (!sh->name || !sh->path)
        return v4_err_set(err, V4_ERR_NOMEM, ck->dir, "out of memory");
    return open_shard(sh, (int)i, err);
}

static int cmp_str_ptr(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int cmp_tensor_ptr(const void *a, const void *b)
{
    return strcmp((*(const v4_tensor *const *)a)->name, (*(const v4_tensor *const *)b)->name);
}

static int cmp_key_tensor_ptr(const void *key, const void *elem)
{
    return strcmp((const char *)key, (*(const v4_tensor *const *)elem)->name);
}

static int cmp_key_tensor(const void *key, const void *elem)
{
    return strcmp((const char *)key, ((const v4_tensor *)elem)->name);
}

static const v4_tensor *shard_find(const v4_shard *sh, const char *name)
{
    if (!sh->hdr.n_tensors)
        return NULL;
    return bsearch(name, sh->hdr.tensors, sh->hdr.n_tensors, sizeof *sh->hdr.tensors,
                   cmp_key_tensor);
}

/* ---------------------------------------------------------------- lookup table */

static int build_lookup(v4_ckpt *ck, v4_error *err)
{
    size_t n = 0;
    for (size_t s = 0; s < ck->n_shards; s++)
        n += ck->shards[s].hdr.n_tensors;
    ck->by_name = malloc((n ? n : 1) * sizeof *ck->by_name);
    if (!ck->by_name)
        return v4_err_set(err, V4_ERR_NOMEM, ck->dir, "out of memory for %zu tensor names", n);
    size_t k = 0;
    for (size_t s = 0; s < ck->n_shards; s++)
        for (size_t i = 0; i < ck->shards[s].hdr.n_tensors; i++)
            ck->by_name[k++] = &ck->shards[s].hdr.tensors[i];
    qsort(ck->by_name, n, sizeof *ck->by_name, cmp_tensor_ptr);
    ck->n_tensors = n;
    for (size_t i = 1; i < n; i++) {
        const v4_tensor *a = ck->by_name[i - 1], *b = ck->by_name[i];
        if (!strcmp(a->name, b->name))
            return v4_err_set(err, V4_ERR_FORMAT, ck->shards[b->shard].path,
                              "tensor '%.200s' appears in both %s and %s", a->name,
                              ck->shards[a->shard].name, ck->shards[b->shard].name);
    }
    return 0;
}

/* ---------------------------------------------------------------- index */

static int check_shard_name(const char *idx_path, const char *tensor, const char *shard,
                            v4_error *err)
{
    if (!*shard || strchr(shard, '/') || strstr(shard, ".."))
        return v4_err_set(err, V4_ERR_FORMAT, idx_path,
                          "tensor '%.200s': invalid shard file name '%.200s'", tensor, shard);
    return 0;
}

/* Validate the weight_map and return its distinct shard names, sorted (the strings
 * belong to the JSON tree).  *names_out is malloc'd. */
static int collect_shards(const char *idx_path, json_t *wm, const char ***names_out,
                          size_t *n_out, v4_error *err)
{
    size_t n = json_object_size(wm);
    const char **names = malloc(n * sizeof *names);
    if (!names)
        return v4_err_set(err, V4_ERR_NOMEM, idx_path, "out of memory");
    size_t k = 0;
    const char *key;
    json_t *v;
    json_object_foreach(wm, key, v) {
        if (!json_is_string(v)) {
            free(names);
            return v4_err_set(err, V4_ERR_FORMAT, idx_path,
                              "weight_map entry '%.200s' is not a string", key);
        }
        if (check_shard_name(idx_path, key, json_string_value(v), err)) {
            free(names);
            return -1;
        }
        names[k++] = json_string_value(v);
    }
    qsort(names, n, sizeof *names, cmp_str_ptr);
    size_t u = 0;
    for (size_t i = 0; i < n; i++)
        if (!u || strcmp(names[u - 1], names[i]))
            names[u++] = names[i];
    *names_out = names;
    *n_out = u;
    return 0;
}

static json_t *load_weight_map(const char *idx_path, json_t **root_out, v4_error *err)
{
    json_error_t jerr;
    json_t *root = json_load_file(idx_path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        v4_err_set(err, V4_ERR_FORMAT, idx_path, "invalid JSON: %s (line %d, column %d)",
                   jerr.text, jerr.line, jerr.column);
        return NULL;
    }
    *root_out = root;
    json_t *wm = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(root))
        v4_err_set(err, V4_ERR_FORMAT, idx_path, "index is not a JSON object");
    else if (!json_is_object(wm))
        v4_err_set(err, V4_ERR_FORMAT, idx_path, "weight_map is missing or not an object");
    else if (json_object_size(wm) == 0)
        v4_err_set(err, V4_ERR_FORMAT, idx_path, "weight_map is empty");
    else
        return wm;
    return NULL;
}

/* Every weight_map name must be present in the shard it names. */
static int check_index_entries(const v4_ckpt *ck, json_t *wm, const char **shard_names,
                               v4_error *err)
{
    const char *key;
    json_t *v;
    json_object_foreach(wm, key, v) {
        const char *sname = json_string_value(v);
        const char **hit = bsearch(&sname, shard_names, ck->n_shards, sizeof *shard_names,
                                   cmp_str_ptr);
        if (!hit)   /* cannot happen: shard_names was built from this weight_map */
            return v4_err_set(err, V4_ERR_INTERNAL, ck->dir, "shard %.200s not opened", sname);
        const v4_shard *sh = &ck->shards[hit - shard_names];
        if (!shard_find(sh, key))
            return v4_err_set(err, V4_ERR_MISSING, sh->path,
                              "tensor '%.200s' listed in index but missing from shard %s", key,
                              sh->name);
    }
    return 0;
}

static int open_indexed(v4_ckpt *ck, const char *idx_path, v4_error *err)
{
    json_t *root = NULL;
    const char **names = NULL;
    int rc = -1;
    json_t *wm = load_weight_map(idx_path, &root, err);
    if (!wm || collect_shards(idx_path, wm, &names, &ck->n_shards, err))
        goto done;
    ck->shards = calloc(ck->n_shards, sizeof *ck->shards);
    if (!ck->shards) {
        ck->n_shards = 0;
        v4_err_set(err, V4_ERR_NOMEM, idx_path, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < ck->n_shards; i++)
        if (init_shard(ck, i, names[i], err))
            goto done;
    rc = check_index_entries(ck, wm, names, err);
done:
    free(names);
    json_decref(root);
    return rc;
}

static int open_single(v4_ckpt *ck, v4_error *err)
{
    ck->shards = calloc(1, sizeof *ck->shards);
    if (!ck->shards)
        return v4_err_set(err, V4_ERR_NOMEM, ck->dir, "out of memory");
    ck->n_shards = 1;
    return init_shard(ck, 0, SINGLE_NAME, err);
}

static int open_files(v4_ckpt *ck, v4_error *err)
{
    struct stat st;
    if (stat(ck->dir, &st) != 0)
        return v4_err_set(err, V4_ERR_IO, ck->dir, "cannot open checkpoint directory: %s",
                          strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return v4_err_set(err, V4_ERR_IO, ck->dir, "checkpoint path is not a directory");
    char *idx_path = path_join(ck->dir, INDEX_NAME);
    char *single = path_join(ck->dir, SINGLE_NAME);
    int rc;
    if (!idx_path || !single)
        rc = v4_err_set(err, V4_ERR_NOMEM, ck->dir, "out of memory");
    else if (is_regular_file(idx_path))
        rc = open_indexed(ck, idx_path, err);
    else if (is_regular_file(single))
        rc = open_single(ck, err);
    else
        rc = v4_err_set(err, V4_ERR_IO, ck->dir, "no %s or %s in the checkpoint directory",
                        INDEX_NAME, SINGLE_NAME);
    free(idx_path);
    free(single);
    return rc;
}

/* ---------------------------------------------------------------- public API */

int v4_ckpt_open(const char *dir, v4_ckpt **out, v4_error *err)
{
    *out = NULL;
    if (!dir || !*dir)
        return v4_err_set(err, V4_ERR_INVALID, "v4_ckpt_open", "empty checkpoint directory");
    v4_ckpt *ck = calloc(1, sizeof *ck);
    if (!ck || !(ck->dir = dup_str(dir))) {
        free(ck);
        return v4_err_set(err, V4_ERR_NOMEM, dir, "out of memory");
    }
    if (open_files(ck, err) || build_lookup(ck, err)) {
        v4_ckpt_close(ck);
        return -1;
    }
    *out = ck;
    return 0;
}

void v4_ckpt_close(v4_ckpt *ck)
{
    if (!ck)
        return;
    for (size_t i = 0; i < ck->n_shards; i++) {
        v4_shard *sh = &ck->shards[i];
        v4_st_header_free(&sh->hdr);
        if (sh->base)
            munmap((void *)sh->base, sh->size);
        free(sh->name);
        free(sh->path);
    }
    free(ck->shards);
    free(ck->by_name);
    free(ck->dir);
    free(ck);
}

const v4_tensor *v4_ckpt_find(const v4_ckpt *ck, const char *name)
{
    if (!ck || !name || !ck->n_tensors)
        return NULL;
    const v4_tensor *const *hit = bsearch(name, ck->by_name, ck->n_tensors,
                                          sizeof *ck->by_name, cmp_key_tensor_ptr);
    return hit ? *hit : NULL;
}

size_t v4_ckpt_count(const v4_ckpt *ck) { return ck ? ck->n_tensors : 0; }

const v4_tensor *v4_ckpt_tensor(const v4_ckpt *ck, size_t i)
{
    return ck && i < ck->n_tensors ? ck->by_name[i] : NULL;
}

size_t v4_ckpt_n_shards(const v4_ckpt *ck) { return ck ? ck->n_shards : 0; }

const char *v4_ckpt_shard_path(const v4_ckpt *ck, size_t i)
{
    return ck && i < ck->n_shards ? ck->shards[i].path : NULL;
}

const char *v4_ckpt_dir(const v4_ckpt *ck) { return ck ? ck->dir : NULL; }

/* "[a,b,c]" into buf; dims < 0 print as '*'. */
static void format_shape(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && k < cap; i++) {
        const char *sep = i ? "," : "";
        if (shape[i] < 0)
            k += (size_t)snprintf(buf + k, cap - k, "%s*", sep);
        else
            k += (size_t)snprintf(buf + k, cap - k, "%s%lld", sep, (long long)shape[i]);
    }
    if (k < cap)
        snprintf(buf + k, cap - k, "]");
}

static int shape_matches(const v4_tensor *t, int ndim, const int64_t *shape)
{
    if (ndim < 0)
        return 1;
    if (t->ndim != ndim)
        return 0;
    for (int i = 0; i < ndim; i++)
        if (shape[i] >= 0 && shape[i] != t->shape[i])
            return 0;
    return 1;
}

const v4_tensor *v4_ckpt_expect(const v4_ckpt *ck, const char *name, v4_dtype dt,
                                int ndim, const int64_t *shape, v4_error *err)
{
    if (ndim > V4_ST_MAX_DIMS || (ndim > 0 && !shape)) {
        v4_err_set(err, V4_ERR_INVALID, name, "v4_ckpt_expect: bad expected rank %d", ndim);
        return NULL;
    }
    const v4_tensor *t = v4_ckpt_find(ck, name);
    if (!t) {
        v4_err_set(err, V4_ERR_MISSING, ck ? ck->dir : NULL,
                   "tensor '%.200s' not found in the checkpoint", name);
        return NULL;
    }
    const char *where = ck->shards[t->shard].path;
    if (dt != V4_DT_INVALID && t->dtype != dt) {
        v4_err_set(err, V4_ERR_DTYPE, where, "%.200s: dtype %s, expected %s", name,
                   v4_dtype_name(t->dtype), v4_dtype_name(dt));
        return NULL;
    }
    if (!shape_matches(t, ndim, shape)) {
        char got[128], want[128];
        format_shape(got, sizeof got, t->ndim, t->shape);
        format_shape(want, sizeof want, ndim, shape);
        v4_err_set(err, V4_ERR_SHAPE, where, "%.200s: shape %s, expected %s", name, got, want);
        return NULL;
    }
    return t;
}

int v4_ckpt_advise(const v4_ckpt *ck, const v4_tensor *t, v4_advice adv, v4_error *err)
{
    if (!ck || !t || !t->data || !t->nbytes)
        return 0;
    static const int advice_map[] = {MADV_NORMAL, MADV_WILLNEED, MADV_DONTNEED,
                                     MADV_SEQUENTIAL, MADV_RANDOM};
    if ((unsigned)adv >= sizeof advice_map / sizeof advice_map[0])
        return v4_err_set(err, V4_ERR_INVALID, t->name, "unknown advice %d", (int)adv);
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t pg = page > 0 ? (uintptr_t)page : 4096u;
    uintptr_t begin = (uintptr_t)t->data & ~(pg - 1);
    uintptr_t end = (uintptr_t)t->data + t->nbytes;
    if (madvise((void *)begin, end - begin, advice_map[adv]) != 0)
        return v4_err_set(err, V4_ERR_IO, ck->shards[t->shard].path,
                          "madvise on tensor '%.200s' failed: %s", t->name, strerror(errno));
    return 0;
}
