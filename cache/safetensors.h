/* safetensors.h - validated, memory-mapped safetensors files and sharded checkpoints.
 *
 * A safetensors file is: u64 little-endian header length N, N bytes of JSON
 * {"name": {"dtype": "F8_E4M3", "shape": [..], "data_offsets": [begin, end]}, ...,
 *  "__metadata__": {...}}, then the data area.  Offsets are relative to the data area.
 *
 * v4_st_parse_header() validates everything before any tensor is touched: header
 * length limits (<= 100 MiB and inside the file), valid JSON object, known dtype,
 * rank <= 8, non-negative dims, shape x element size == byte length (no overflow),
 * offsets inside the data area, and no two tensors overlapping.  Every error names
 * the file and, where relevant, the tensor.
 *
 * A checkpoint (v4_ckpt_open) is a directory with either model.safetensors or
 * model.safetensors.index.json + the shards it names.  Every shard is mmap'ed
 * read-only (never copied); tensors listed in the index must exist in the named
 * shard.
 *
 * Ownership: v4_ckpt owns the mappings and all v4_tensor records; pointers returned
 * by v4_ckpt_find / v4_ckpt_tensor (including tensor->data and tensor->name) stay
 * valid until v4_ckpt_close().  v4_st_header owns its tensor array; free with
 * v4_st_header_free().
 * Thread: open/close from one thread; lookups on an open checkpoint are read-only and
 * may run concurrently from any thread.
 */
#ifndef V4_SAFETENSORS_H
#define V4_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "../config/error.h"

typedef enum v4_dtype {
    V4_DT_INVALID = 0,
    V4_DT_BF16,
    V4_DT_F16,
    V4_DT_F32,
    V4_DT_F64,
    V4_DT_I64,
    V4_DT_I32,
    V4_DT_I16,
    V4_DT_I8,       /* V4 stores packed FP4 e2m1 (two codes per byte) as I8 */
    V4_DT_U8,
    V4_DT_BOOL,
    V4_DT_F8_E4M3,
    V4_DT_F8_E5M2,
    V4_DT_F8_E8M0,
} v4_dtype;

#define V4_ST_MAX_DIMS 8
#define V4_ST_MAX_HEADER (100u << 20)

typedef struct v4_tensor {
    char *name;                 /* owned by the header/checkpoint */
    v4_dtype dtype;
    int ndim;
    int64_t shape[V4_ST_MAX_DIMS];
    uint64_t offset;            /* byte offset inside the data area */
    uint64_t nbytes;
    const void *data;           /* mapped bytes (NULL for a header parsed without a file) */
    int shard;                  /* index of the shard file in the checkpoint */
} v4_tensor;

typedef struct v4_st_header {
    v4_tensor *tensors;         /* sorted by name */
    size_t n_tensors;
    uint64_t header_len;        /* N */
    uint64_t data_len;          /* file size - 8 - N */
} v4_st_header;

const char *v4_dtype_name(v4_dtype dt);
v4_dtype v4_dtype_from_name(const char *s);
size_t v4_dtype_size(v4_dtype dt);          /* bytes per element (1 for I8 packed FP4) */
int64_t v4_tensor_numel(const v4_tensor *t);

/* Validate and parse the header of a whole file image buf[0..len) (len = file size).
 * where = file name used in messages.  Used by the checkpoint loader and the fuzzer. */
int v4_st_parse_header(const uint8_t *buf, size_t len, const char *where,
                       v4_st_header *out, v4_error *err);
void v4_st_header_free(v4_st_header *h);

typedef struct v4_ckpt v4_ckpt;

int v4_ckpt_open(const char *dir, v4_ckpt **out, v4_error *err);
void v4_ckpt_close(v4_ckpt *ck);
const v4_tensor *v4_ckpt_find(const v4_ckpt *ck, const char *name);   /* NULL if absent */
size_t v4_ckpt_count(const v4_ckpt *ck);
const v4_tensor *v4_ckpt_tensor(const v4_ckpt *ck, size_t i);
size_t v4_ckpt_n_shards(const v4_ckpt *ck);
const char *v4_ckpt_shard_path(const v4_ckpt *ck, size_t i);
const char *v4_ckpt_dir(const v4_ckpt *ck);

/* Find a tensor and check dtype and shape (ndim dims; pass -1 for a dim to skip it;
 * ndim < 0 skips the shape check, dt == V4_DT_INVALID skips the dtype check).
 * Errors name the tensor, expected and actual dtype/shape; err->where = shard path. */
const v4_tensor *v4_ckpt_expect(const v4_ckpt *ck, const char *name, v4_dtype dt,
                                int ndim, const int64_t *shape, v4_error *err);

/* Paging hints for one tensor's bytes (madvise on the page-aligned range); best
 * effort: returns 0, or -1 when the kernel refused the hint (err filled). */
typedef enum v4_advice {
    V4_ADVISE_NORMAL = 0,
    V4_ADVISE_WILLNEED,     /* start reading it in now (prefetch)                */
    V4_ADVISE_DONTNEED,     /* drop the pages; they are re-read from the file    */
    V4_ADVISE_SEQUENTIAL,
    V4_ADVISE_RANDOM,
} v4_advice;
int v4_ckpt_advise(const v4_ckpt *ck, const v4_tensor *t, v4_advice adv, v4_error *err);

#endif
