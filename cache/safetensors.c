/* safetensors.c - dtype helpers and the strict safetensors header validator.
 *
 * Design: v4_st_parse_header() works on an in-memory file image (usually an mmap of
 * the whole file, or the fuzzer's input) and touches nothing past buf[len).  It
 * checks the 8-byte length prefix, parses the JSON header with jansson (duplicate
 * keys rejected), validates every entry (dtype, shape, data_offsets, byte count)
 * against the size of the data area, then rejects overlapping byte ranges and sorts
 * the tensors by name so that callers can bsearch them.  The first problem found is
 * reported as one line naming the file (err->where) and the tensor (in err->msg).
 *
 * Ownership: the header owns ONE heap block that holds the tensor array followed by
 * all tensor names (h->tensors points at its start); v4_st_header_free() frees it.
 * The jansson tree is freed before returning.  tensor->data is left NULL here; the
 * checkpoint loader fills it in.  No global mutable state; thread-safe.
 */
#include "safetensors.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* ---------------------------------------------------------------- dtypes */

static const struct {
    v4_dtype dt;
    const char *name;
    size_t size;
} dtype_table[] = {
    {V4_DT_BF16, "BF16", 2},    {V4_DT_F16, "F16", 2},
    {V4_DT_F32, "F32", 4},      {V4_DT_F64, "F64", 8},
    {V4_DT_I64, "I64", 8},      {V4_DT_I32, "I32", 4},
    {V4_DT_I16, "I16", 2},      {V4_DT_I8, "I8", 1},
    {V4_DT_U8, "U8", 1},        {V4_DT_BOOL, "BOOL", 1},
    {V4_DT_F8_E4M3, "F8_E4M3", 1}, {V4_DT_F8_E5M2, "F8_E5M2", 1},
    {V4_DT_F8_E8M0, "F8_E8M0", 1},
};
#define N_DTYPES (sizeof dtype_table / sizeof dtype_table[0])

const char *v4_dtype_name(v4_dtype dt)
{
    for (size_t i = 0; i < N_DTYPES; i++)
        if (dtype_table[i].dt == dt)
            return dtype_table[i].name;
    return "INVALID";
}

v4_dtype v4_dtype_from_name(const char *s)
{
    if (!s)
        return V4_DT_INVALID;
    for (size_t i = 0; i < N_DTYPES; i++)
        if (!strcmp(dtype_table[i].name, s))
            return dtype_table[i].dt;
    return V4_DT_INVALID;
}

size_t v4_dtype_size(v4_dtype dt)
{
    for (size_t i = 0; i < N_DTYPES; i++)
        if (dtype_table[i].dt == dt)
            return dtype_table[i].size;
    return 0;
}

int64_t v4_tensor_numel(const v4_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        if (__builtin_mul_overflow(n, t->shape[i], &n))
            return -1;   /* cannot happen for a validated tensor */
    return n;
}

/* ---------------------------------------------------------------- parser */

typedef struct parse_ctx {
    const char *where;      /* file name for messages */
    v4_error *err;
    uint64_t data_len;      /* size of the data area */
} parse_ctx;

/* Names in messages are clipped so that one line stays readable. */
#define NAME_FMT "%.200s"

static uint64_t read_le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static int fail(const parse_ctx *c, v4_errcode code, const char *name, const char *what)
{
    if (name)
        return v4_err_set(c->err, code, c->where, "tensor '" NAME_FMT "': %s", name, what);
    return v4_err_set(c->err, code, c->where, "%s", what);
}

static int check_metadata(const parse_ctx *c, json_t *meta)
{
    if (!json_is_object(meta))
        return fail(c, V4_ERR_FORMAT, NULL, "__metadata__ is not an object");
    const char *k;
    json_t *v;
    json_object_foreach(meta, k, v) {
        if (!json_is_string(v))
            return v4_err_set(c->err, V4_ERR_FORMAT, c->where,
                              "__metadata__ value '" NAME_FMT "' is not a string", k);
    }
    return 0;
}

static int parse_dtype(const parse_ctx *c, const char *name, json_t *v, v4_tensor *t)
{
    if (!json_is_string(v))
        return fail(c, V4_ERR_FORMAT, name, "dtype is missing or not a string");
    t->dtype = v4_dtype_from_name(json_string_value(v));
    if (t->dtype == V4_DT_INVALID)
        return v4_err_set(c->err, V4_ERR_FORMAT, c->where,
                          "tensor '" NAME_FMT "': unknown dtype '%.32s'", name,
                          json_string_value(v));
    return 0;
}

static int parse_shape(const parse_ctx *c, const char *name, json_t *v, v4_tensor *t)
{
    if (!json_is_array(v))
        return fail(c, V4_ERR_FORMAT, name, "shape is missing or not an array");
    size_t rank = json_array_size(v);
    if (rank > V4_ST_MAX_DIMS)
        return v4_err_set(c->err, V4_ERR_FORMAT, c->where,
                          "tensor '" NAME_FMT "': rank %zu exceeds the maximum of %d", name,
                          rank, V4_ST_MAX_DIMS);
    t->ndim = (int)rank;
    for (size_t i = 0; i < rank; i++) {
        json_t *d = json_array_get(v, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return v4_err_set(c->err, V4_ERR_FORMAT, c->where,
                              "tensor '" NAME_FMT "': shape[%zu] is not a non-negative integer",
                              name, i);
        t->shape[i] = (int64_t)json_integer_value(d);
    }
    return 0;
}

static int parse_offsets(const parse_ctx *c, const char *name, json_t *v, v4_tensor *t)
{
    if (!json_is_array(v) || json_array_size(v) != 2)
        return fail(c, V4_ERR_FORMAT, name, "data_offsets is not a [begin, end] array");
    json_t *jb = json_array_get(v, 0), *je = json_array_get(v, 1);
    if (!json_is_integer(jb) || !json_is_integer(je) || json_integer_value(jb) < 0 ||
        json_integer_value(je) < 0)
        return fail(c, V4_ERR_FORMAT, name, "data_offsets are not non-negative integers");
    uint64_t b = (uint64_t)json_integer_value(jb), e = (uint64_t)json_integer_value(je);
    if (b > e)
        return v4_err_set(c->err, V4_ERR_FORMAT, c->where,
                          "tensor '" NAME_FMT "': data_offsets [%" PRIu64 ", %" PRIu64
                          "] has begin > end", name, b, e);
    if (e > c->data_len)
        return v4_err_set(c->err, V4_ERR_FORMAT, c->where,
                          "tensor '" NAME_FMT "': data_offsets end %" PRIu64
                          " is beyond the data area (%" PRIu64 " bytes; file truncated?)",
                          name, e, c->data_len);
    t->offset = b;
    t->nbytes = e - b;
    return 0;
}

static int check_nbytes(const parse_ctx *c, const char *name, const v4_tensor *t)
{
    int64_t numel = 1;
    for (int i = 0; i < t->ndim; i++)
        if (__builtin_mul_overflow(numel, t->shape[i], &numel))
            return fail(c, V4_ERR_FORMAT, name, "shape element count overflows");
    uint64_t want;
    if (__builtin_mul_overflow((uint64_t)numel, (uint64_t)v4_dtype_size(t->dtype), &want))
        return fail(c, V4_ERR_FORMAT, name, "shape byte count overflows");
    if (want != t->nbytes)
        return v4_err_set(c->err, V4_ERR_FORMAT, c->where,
                          "tensor '" NAME_FMT "': data_offsets span %" PRIu64
                          " bytes but shape x %s needs %" PRIu64, name, t->nbytes,
                          v4_dtype_name(t->dtype), want);
    return 0;
}

static int parse_entry(const parse_ctx *c, const char *name, json_t *v, v4_tensor *t)
{
    if (!*name)
        return fail(c, V4_ERR_FORMAT, NULL, "empty tensor name");
    if (!json_is_object(v))
        return fail(c, V4_ERR_FORMAT, name, "entry is not an object");
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
        if (strcmp(k, "dtype") && strcmp(k, "shape") && strcmp(k, "data_offsets"))
            return v4_err_set(c->err, V4_ERR_FORMAT, c->where,
                              "tensor '" NAME_FMT "': unknown key '%.64s'", name, k);
    }
    if (parse_dtype(c, name, json_object_get(v, "dtype"), t) ||
        parse_shape(c, name, json_object_get(v, "shape"), t) ||
        parse_offsets(c, name, json_object_get(v, "data_offsets"), t))
        return -1;
    return check_nbytes(c, name, t);
}

static int cmp_by_name(const void *a, const void *b)
{
    return strcmp(((const v4_tensor *)a)->name, ((const v4_tensor *)b)->name);
}

static int cmp_by_offset(const void *a, const void *b)
{
    const v4_tensor *x = *(const v4_tensor *const *)a, *y = *(const v4_tensor *const *)b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    if (x->nbytes != y->nbytes)
        return x->nbytes < y->nbytes ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Two tensors overlap when their non-empty byte ranges intersect. */
static int check_overlaps(const parse_ctx *c, const v4_tensor *ts, size_t n)
{
    if (n < 2)
        return 0;
    const v4_tensor **order = malloc(n * sizeof *order);
    if (!order)
        return fail(c, V4_ERR_NOMEM, NULL, "out of memory sorting tensors");
    for (size_t i = 0; i < n; i++)
        order[i] = &ts[i];
    qsort(order, n, sizeof *order, cmp_by_offset);
    const v4_tensor *last = NULL;   /* non-empty tensor reaching furthest so far */
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        const v4_tensor *t = order[i];
        if (!t->nbytes)
            continue;
        if (last && t->offset < last->offset + last->nbytes)
            rc = v4_err_set(c->err, V4_ERR_FORMAT, c->where,
                            "tensors '" NAME_FMT "' [%" PRIu64 ", %" PRIu64 ") and '" NAME_FMT
                            "' [%" PRIu64 ", %" PRIu64 ") overlap", last->name, last->offset,
                            last->offset + last->nbytes, t->name, t->offset,
                            t->offset + t->nbytes);
        if (!last || t->offset + t->nbytes > last->offset + last->nbytes)
            last = t;
    }
    free(order);
    return rc;
}

/* One block: tensor array, then the names.  Returns NULL on out-of-memory. */
static v4_tensor *alloc_block(json_t *root, size_t *n_out, char **names_out)
{
    size_t n = 0, name_bytes = 0;
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        if (strcmp(k, "__metadata__")) {
            n++;
            name_bytes += strlen(k) + 1;
        }
    }
    v4_tensor *ts = calloc(1, n * sizeof *ts + name_bytes + 1);
    if (!ts)
        return NULL;
    *n_out = n;
    *names_out = (char *)(ts + n);
    return ts;
}

static int parse_root(const parse_ctx *c, json_t *root, v4_st_header *out)
{
    size_t n = 0;
    char *names = NULL;
    v4_tensor *ts = alloc_block(root, &n, &names);
    if (!ts)
        return fail(c, V4_ERR_NOMEM, NULL, "out of memory for the tensor table");
    size_t i = 0;
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        int rc;
        if (!strcmp(k, "__metadata__")) {
            rc = check_metadata(c, v);
        } else {
            v4_tensor *t = &ts[i++];
            size_t kl = strlen(k) + 1;
            memcpy(names, k, kl);
            t->name = names;
            names += kl;
            rc = parse_entry(c, k, v, t);
        }
        if (rc) {
            free(ts);
            return -1;
        }
    }
    if (check_overlaps(c, ts, n)) {
        free(ts);
        return -1;
    }
    qsort(ts, n, sizeof *ts, cmp_by_name);
    out->tensors = ts;
    out->n_tensors = n;
    return 0;
}

int v4_st_parse_header(const uint8_t *buf, size_t len, const char *where,
                       v4_st_header *out, v4_error *err)
{
    memset(out, 0, sizeof *out);
    parse_ctx c = {where ? where : "(buffer)", err, 0};
    if (len < 8)
        return v4_err_set(err, V4_ERR_FORMAT, c.where,
                          "file is %zu bytes, shorter than the 8-byte header length", len);
    uint64_t hlen = read_le64(buf);
    if (hlen == 0)
        return fail(&c, V4_ERR_FORMAT, NULL, "header length is 0");
    if (hlen > V4_ST_MAX_HEADER)
        return v4_err_set(err, V4_ERR_FORMAT, c.where,
                          "header length %" PRIu64 " exceeds the limit of %u bytes", hlen,
                          V4_ST_MAX_HEADER);
    if (hlen > len - 8)
        return v4_err_set(err, V4_ERR_FORMAT, c.where,
                          "header length %" PRIu64 " is beyond the end of the file (%zu bytes)",
                          hlen, len);
    c.data_len = (uint64_t)(len - 8) - hlen;

    json_error_t jerr;
    json_t *root = json_loadb((const char *)buf + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return v4_err_set(err, V4_ERR_FORMAT, c.where,
                          "header is not valid JSON: %s (line %d, column %d)", jerr.text,
                          jerr.line, jerr.column);
    int rc;
    if (!json_is_object(root))
        rc = fail(&c, V4_ERR_FORMAT, NULL, "header is not a JSON object");
    else
        rc = parse_root(&c, root, out);
    json_decref(root);
    if (rc)
        return -1;
    out->header_len = hlen;
    out->data_len = c.data_len;
    return 0;
}

void v4_st_header_free(v4_st_header *h)
{
    if (!h)
        return;
    free(h->tensors);   /* the names live in the same block */
    memset(h, 0, sizeof *h);
}
