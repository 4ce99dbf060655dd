/* expert_pack_util.h - small file and clock helpers shared by the expert pack's writer
 * (expert_pack.c) and reader/verifier (expert_pack_source.c).  Internal to cache/.
 *
 * Ownership: functions returning char * return malloc'd strings (caller frees).
 * Thread: all reentrant; any thread.
 */
#ifndef V4_EXPERT_PACK_UTIL_H
#define V4_EXPERT_PACK_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "../config/error.h"

double v4_xp_now_s(void);                       /* CLOCK_MONOTONIC seconds */
uint64_t v4_xp_now_ns(void);
void v4_xp_hex16(char out[17], uint64_t v);     /* 16 lowercase hex digits */
int v4_xp_parse_hex16(const char *s, uint64_t *v);   /* exactly 16 lowercase hex digits; -1 otherwise */
char *v4_xp_join(const char *a, const char *b); /* "a/b" */
char *v4_xp_trim_path(const char *path);        /* without trailing slashes */
char *v4_xp_parent_dir(const char *path);
/* Whole small file (< 64 MiB) into a malloc'd buffer (not NUL-terminated). */
char *v4_xp_read_small_file(const char *path, size_t *len, v4_error *err);
int v4_xp_fsync_path(const char *path, v4_error *err);
/* Remove a flat directory: every entry (files only), then the directory. */
int v4_xp_remove_flat_dir(const char *dir);
/* pread/pwrite the whole range (EINTR, short transfers); -1 with errno (0 = end of file). */
int v4_xp_pread_all(int fd, void *dst, size_t len, uint64_t off);
int v4_xp_pwrite_all(int fd, const void *src, size_t len, uint64_t off);
/* Buffered block read: cached pages via RWF_NOWAIT, one WILLNEED readahead for the rest. */
int v4_xp_buffered_read(int fd, void *dst, size_t len, uint64_t off);

#endif
