/* prefix_opts.c - see prefix_opts.h. */
#include "prefix_opts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/worker_config.h"
#include "worker/prefix/prefix_cache.h"

static int bad(const char *prog, const char *what, const char *want, const char *v)
{
    fprintf(stderr, "v4fleet %s: %s wants %s, got '%s'\n", prog, what, want, v);
    return -1;
}

static int set_bytes(v4_prefix_cli *p, const char *what, const char *v, const char *prog)
{
    if (v4_parse_bytes(v, &p->bytes))
        return bad(prog, what, "a byte count (512M, 2G)", v);
    return 0;
}

static int set_block(v4_prefix_cli *p, const char *what, const char *v, const char *prog)
{
    char *end;
    const long n = strtol(v, &end, 10);
    if (*end || end == v || n < 1 || n > 65536)
        return bad(prog, what, "a block length in 1..65536 positions", v);
    p->block = (int)n;
    return 0;
}

static int set_policy(v4_prefix_cli *p, const char *what, const char *v, const char *prog)
{
    v4pc_policy pol;
    if (v4pc_policy_parse(v, &pol))
        return bad(prog, what, "slru, lru or fifo", v);
    p->policy = v;
    return 0;
}

int v4_prefix_take(v4_prefix_cli *p, int argc, char **argv, int *i, const char *prog)
{
    const char *a = argv[*i];
    if (!strcmp(a, "--no-prefix-cache")) {
        p->off = p->off_set = 1;
        return 1;
    }
    const int bytes = !strcmp(a, "--prefix-cache-bytes"), block = !strcmp(a, "--prefix-block"),
              policy = !strcmp(a, "--prefix-policy");
    if (!bytes && !block && !policy)
        return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "v4fleet %s: %s needs a value\n", prog, a);
        return -1;
    }
    const char *v = argv[++*i];
    const int r = bytes ? set_bytes(p, a, v, prog) : block ? set_block(p, a, v, prog) : set_policy(p, a, v, prog);
    return r ? -1 : 1;
}

int v4_prefix_env(v4_prefix_cli *p, const char *prog)
{
    const char *on = getenv("V4_PREFIX_CACHE"), *b = getenv("V4_PREFIX_CACHE_BYTES"),
               *k = getenv("V4_PREFIX_BLOCK"), *pol = getenv("V4_PREFIX_POLICY");
    if (!p->off_set && on && *on) {
        if (strcmp(on, "0") && strcmp(on, "1"))
            return bad(prog, "V4_PREFIX_CACHE", "0 or 1", on);
        p->off = !strcmp(on, "0");
    }
    if (!p->bytes && b && *b && set_bytes(p, "V4_PREFIX_CACHE_BYTES", b, prog))
        return -1;
    if (!p->block && k && *k && set_block(p, "V4_PREFIX_BLOCK", k, prog))
        return -1;
    if (!p->policy && pol && *pol && set_policy(p, "V4_PREFIX_POLICY", pol, prog))
        return -1;
    return 0;
}

void v4_prefix_apply(const v4_prefix_cli *p, v4_runner_opts *o)
{
    o->prefix_cache = !p->off;
    o->prefix_cache_bytes = p->bytes;
    o->prefix_block = p->block;
    o->prefix_policy = p->policy;
}
