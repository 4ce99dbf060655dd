/* st_writer.h - a streaming safetensors file writer.
 *
 * Design: a file is described first and written second, so that a multi-GB shard is
 * never held in memory:
 *   1. v4_stw_new(), then v4_stw_add() for every tensor (name, dtype, shape), in the
 *      order the data will be streamed; data offsets are assigned back to back.
 *   2. v4_stw_begin(path): opens "DIR/.NAME.tmp" next to path and writes the header
 *      (u64 little-endian length N + compact JSON in declaration order, ending with
 *      "__metadata__":{"format":"pt"}, padded with spaces so that N % 8 == 0 - the
 *      layout of the real V4 shards).
 *   3. v4_stw_write() any number of times: the data area as one byte stream, tensor
 *      after tensor in declaration order (a call may span tensor boundaries).  Writes
 *      go through an internal buffer (V4_STW_BUFSZ) with large write(2) calls.
 *   4. v4_stw_finish(): checks that exactly the declared number of bytes arrived,
 *      flushes, fsyncs (unless disabled), closes and renames the .tmp file to path.
 *      Until then no file named path exists, so a reader never sees a partial shard.
 * v4_stw_free() on an unfinished writer closes and removes the .tmp file.
 *
 * Dtype names and element sizes come from a private table (the safetensors strings
 * of cache/safetensors.h's v4_dtype), so this file has no link dependency on the
 * checkpoint loader.  I8 is one byte per element (V4 stores packed FP4 as I8 with
 * the packed shape).
 *
 * Ownership: the writer owns copies of all names and its buffer; free with
 * v4_stw_free().  Thread: one writer per thread; distinct writers are independent.
 */
#ifndef V4_ST_WRITER_H
#define V4_ST_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "../config/error.h"
#include "safetensors.h"

#define V4_STW_BUFSZ (8u << 20)

typedef struct v4_stw v4_stw;

v4_stw *v4_stw_new(void);                      /* NULL on allocation failure */
void v4_stw_free(v4_stw *w);                   /* removes an unfinished .tmp file */

/* Declare the next tensor.  ndim 0..V4_ST_MAX_DIMS, dims >= 0, known dtype, unique
 * name (checked).  Only before v4_stw_begin(). */
int v4_stw_add(v4_stw *w, const char *name, v4_dtype dt, int ndim, const int64_t *shape,
               v4_error *err);

size_t v4_stw_count(const v4_stw *w);
uint64_t v4_stw_data_bytes(const v4_stw *w);   /* sum of the declared tensor sizes */
uint64_t v4_stw_tensor_bytes(const v4_stw *w, size_t i);
const char *v4_stw_tensor_name(const v4_stw *w, size_t i);
/* Size of the whole file: 8 + padded header + data (builds the header if needed). */
int v4_stw_file_bytes(v4_stw *w, uint64_t *out, v4_error *err);

/* Skip the fsync before the rename (tests, scratch output).  Default: sync. */
void v4_stw_set_sync(v4_stw *w, int sync);

int v4_stw_begin(v4_stw *w, const char *path, v4_error *err);
int v4_stw_write(v4_stw *w, const void *data, size_t n, v4_error *err);
uint64_t v4_stw_written(const v4_stw *w);      /* data bytes accepted so far */
int v4_stw_finish(v4_stw *w, v4_error *err);

/* The safetensors dtype string / element size, from the writer's own table
 * (NULL / 0 for an unknown dtype). */
const char *v4_stw_dtype_name(v4_dtype dt);
size_t v4_stw_dtype_size(v4_dtype dt);

/* "DIR/.NAME.tmp" for path "DIR/NAME" (also "NAME" -> ".NAME.tmp"); the temporary
 * name used by the writer and by other atomic writers (config.json, index).  Returns
 * -1 if it does not fit in cap bytes. */
int v4_stw_tmp_path(const char *path, char *out, size_t cap);

/* Write a small whole file atomically: "DIR/.NAME.tmp", fsync (if sync), rename. */
int v4_write_file_atomic(const char *path, const void *data, size_t n, int sync, v4_error *err);

#endif
