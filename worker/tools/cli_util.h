/* cli_util.h - small helpers shared by the subcommands: option parsing of the
 * common engine flags (into serve/engine.h's v4_engine_opts), reading a JSON array of
 * token ids, printing an error.
 * Ownership: arrays returned through out-parameters are malloc'd; the caller frees.
 * Thread: main thread only. */
#ifndef V4_CLI_UTIL_H
#define V4_CLI_UTIL_H

#include <stdint.h>

#include "config/error.h"
#include "worker/serve/engine.h"

/* The usage line of the device and numerics flags, for the commands' --help. */
#define V4_DEVICE_FLAG_USAGE "         [--device cpu|cuda|cuda:N] [--numerics exact|fast]\n"

/* The usage line of the paged-expert flags, for the commands' --help. */
#define V4_EXPERT_FLAGS_USAGE \
    "         [--host-cache-bytes B [--pack DIR] [--cache-policy lru|slru|lfru|next] [--io-threads N]]\n"
/* The usage line of --no-lookahead alone (logits; generate and batch have it in
 * V4_CHUNK_FLAG_USAGE's line). */
#define V4_LOOKAHEAD_FLAG_USAGE "         [--no-lookahead]\n"
/* What --no-lookahead does: printed after the usage by the commands' --help (not with
 * a usage error, which stays short). */
#define V4_LOOKAHEAD_HELP \
    "--no-lookahead: the router look-ahead of paged experts (host cache or GPU slots) off: the\n" \
    "          next score-routed layer's predicted experts are not prefetched; fewer expert reads,\n" \
    "          more demand misses, the same outputs (without the flag: V4_LOOKAHEAD=0|1, default 1)\n"

/* The usage line of --prefill-chunk and --no-lookahead (generate, batch). */
#define V4_CHUNK_FLAG_USAGE "         [--prefill-chunk N] [--no-lookahead]\n"
/* --prefill-chunk's value into o->prefill_chunk: 0, or -1 (message printed). */
int v4_opt_prefill_chunk(v4_engine_opts *o, const char *v, const char *cmd);

/* Consume argv[*i] (and its value) if it is a common engine flag (--no-lookahead has
 * none: o->no_lookahead = 1); returns 1 if consumed, 0 if not ours, -1 on a missing/bad
 * value (message printed). */
int v4_opts_take(v4_engine_opts *o, int argc, char **argv, int *i, const char *cmd);
/* Read a JSON array of integers in [0, limit) (limit <= 0: no upper bound). */
int v4_read_ids_json(const char *path, int32_t **ids, int *n, int limit, v4_error *err);
/* One line "v4fleet CMD: WHERE: MESSAGE" on stderr. */
void v4_print_error(const char *cmd, const v4_error *err);

#endif
