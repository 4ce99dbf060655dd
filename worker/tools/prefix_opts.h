/* prefix_opts.h - the prefix cache's command-line flags and environment variables for
 * the offline commands that run tasks (`batch`), the same settings the worker reads
 * (config/worker_config.h): on by default (docs/prefix-cache.md).
 *   --no-prefix-cache          V4_PREFIX_CACHE=0
 *   --prefix-cache-bytes B     V4_PREFIX_CACHE_BYTES (1G)
 *   --prefix-block N           V4_PREFIX_BLOCK (256; rounded up to the model's ratios)
 *   --prefix-policy slru|lru|fifo   V4_PREFIX_POLICY (slru)
 * A flag wins over its variable.  Ownership: plain values (policy borrows argv or the
 * environment).  Thread: the main thread (reads the environment).
 */
#ifndef V4_TOOLS_PREFIX_OPTS_H
#define V4_TOOLS_PREFIX_OPTS_H

#include "worker/serve/task_run.h"

typedef struct v4_prefix_cli {
    int off;                /* 1: --no-prefix-cache / V4_PREFIX_CACHE=0 */
    int off_set;            /* the flag was given (the variable is not read) */
    long long bytes;        /* 0: the default */
    int block;              /* 0: the default */
    const char *policy;     /* NULL: slru */
} v4_prefix_cli;

#define V4_PREFIX_FLAGS_USAGE \
    "         [--no-prefix-cache] [--prefix-cache-bytes B] [--prefix-block N] [--prefix-policy slru|lru|fifo]\n"

/* argv[*i] if it is one of the flags above (its value taken, *i advanced): 1; not one: 0;
 * a bad value: -1 (a message on stderr naming prog). */
int v4_prefix_take(v4_prefix_cli *p, int argc, char **argv, int *i, const char *prog);
/* The variables for what the flags left unset; 0, or -1 (a message on stderr). */
int v4_prefix_env(v4_prefix_cli *p, const char *prog);
/* Into the runner's options (on unless off). */
void v4_prefix_apply(const v4_prefix_cli *p, v4_runner_opts *o);

#endif
