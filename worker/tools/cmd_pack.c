/* cmd_pack.c - `v4fleet pack`: build or verify an expert pack (cache/expert_pack.h).
 *
 *   v4fleet pack --model DIR --out PACKDIR [--force] [--no-sync]
 *   v4fleet pack --verify PACKDIR [--model DIR]
 *
 * Design: a thin CLI over v4_pack_write / v4_pack_verify.  Progress goes to stderr
 * (percent, GB done, MB/s, ETA): rewritten in place with '\r' twice a second on a
 * terminal, otherwise one line every 10% (or 30 s) for packs of 64 MiB or more.  The final summary goes to stdout.
 * SIGINT/SIGTERM cancel a pack cleanly (its temporary directory is removed); the flag
 * is the one piece of process-wide state (a signal handler cannot reach a context).
 * Test hook: V4_PACK_TEST_CRASH_AFTER=N kills the process with SIGKILL after N blocks
 * have been written (a simulated crash: the leftover PACKDIR.tmp.<pid> must never be
 * used and the next run removes it).
 *
 * Exit status: 0 ok (verify: every block good), 1 error (verify: corrupt blocks,
 * each listed on stdout, or the pack could not be opened), 2 usage.
 * Ownership: everything is local to the command.  Thread: main thread only.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache/expert_pack.h"
#include "cache/safetensors.h"
#include "config/model_config.h"

#include "cli_util.h"
#include "commands.h"

#define PROG "v4fleet pack"

static volatile sig_atomic_t g_pack_cancel;

static void on_signal(int sig)
{
    (void)sig;
    g_pack_cancel = 1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: v4fleet pack --model DIR --out PACKDIR [--force] [--no-sync]\n"
            "       v4fleet pack --verify PACKDIR [--model DIR]\n"
            "\n"
            "Repack the routed experts of a checkpoint into an expert pack: PACKDIR/experts.bin\n"
            "holds one 4 KiB-aligned block per (layer, expert) (w1, w3, w2 and their scales),\n"
            "PACKDIR/manifest.json the offsets and an XXH3-64 checksum per block.  The pack is\n"
            "written to PACKDIR.tmp.<pid> and renamed into place when complete.\n"
            "\n"
            "options:\n"
            "  --model DIR       checkpoint directory (config.json + safetensors)\n"
            "  --out PACKDIR     pack directory to create (must not exist)\n"
            "  --force           replace an existing pack at PACKDIR\n"
            "  --no-sync         skip fsync (faster; the pack may be lost on a power failure)\n"
            "  --verify PACKDIR  re-read every block and check its checksum; with --model, also\n"
            "                    check that the pack was made from that checkpoint\n"
            "  -h, --help        this help\n"
            "\n"
            "exit status: 0 ok, 1 error or corrupt blocks (listed on stdout), 2 usage\n");
}

typedef struct opts {
    const char *model, *out, *verify;
    int force, no_sync;
} opts;

static int need_value(int argc, char **argv, int *i, const char **dst)
{
    const char *a = argv[*i];
    const char *eq = strchr(a, '=');
    if (eq && eq[1]) {
        *dst = eq + 1;
        return 0;
    }
    if (eq || *i + 1 >= argc || !argv[*i + 1][0]) {
        fprintf(stderr, PROG ": %.*s needs a value (see --help)\n", (int)(eq ? eq - a : (long)strlen(a)), a);
        return -1;
    }
    *dst = argv[++*i];
    return 0;
}

/* 0 ok, 1 help printed, -1 usage error (printed). */
static int parse_args(int argc, char **argv, opts *o)
{
    memset(o, 0, sizeof *o);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 1;
        } else if (!strcmp(a, "--force")) {
            o->force = 1;
        } else if (!strcmp(a, "--no-sync")) {
            o->no_sync = 1;
        } else if (!strncmp(a, "--model", 7) && (a[7] == 0 || a[7] == '=')) {
            if (need_value(argc, argv, &i, &o->model))
                return -1;
        } else if (!strncmp(a, "--out", 5) && (a[5] == 0 || a[5] == '=')) {
            if (need_value(argc, argv, &i, &o->out))
                return -1;
        } else if (!strncmp(a, "--verify", 8) && (a[8] == 0 || a[8] == '=')) {
            if (need_value(argc, argv, &i, &o->verify))
                return -1;
        } else {
            fprintf(stderr, PROG ": unknown argument '%s' (see --help)\n", a);
            return -1;
        }
    }
    if (o->verify) {
        if (o->out || o->force || o->no_sync) {
            fprintf(stderr, PROG ": --verify takes only --model (see --help)\n");
            return -1;
        }
        return 0;
    }
    if (!o->model || !o->out) {
        fprintf(stderr, PROG ": --model DIR and --out PACKDIR are required (or --verify PACKDIR; see --help)\n");
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- progress */

typedef struct progress_ctx {
    const char *what;           /* "pack" | "verify" */
    int tty;
    double last_print;
    int last_decile;
    long long crash_after;      /* test hook (pack only); < 0 = off */
    uint64_t bad_listed;
} progress_ctx;

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void print_progress(const progress_ctx *c, const v4_pack_progress *p)
{
    double pct = p->bytes_total ? 100.0 * (double)p->bytes_done / (double)p->bytes_total : 100.0;
    double eta = p->bytes_per_s > 0 ? (double)(p->bytes_total - p->bytes_done) / p->bytes_per_s : 0;
    int em = (int)(eta / 60), es = (int)eta % 60;
    fprintf(stderr, "%s%s: %5.1f%%  %.2f/%.2f GB  %.0f MB/s  ETA %d:%02d%s", c->tty ? "\r" : "", c->what, pct,
            (double)p->bytes_done / 1e9, (double)p->bytes_total / 1e9, p->bytes_per_s / 1e6, em, es,
            c->tty ? "   " : "\n");
    fflush(stderr);
}

static int on_progress(const v4_pack_progress *p, void *ud)
{
    progress_ctx *c = ud;
    if (c->crash_after >= 0 && p->blocks_done >= (uint64_t)c->crash_after) {
        fprintf(stderr, PROG ": V4_PACK_TEST_CRASH_AFTER=%lld: simulating a crash (SIGKILL)\n", c->crash_after);
        fflush(stderr);
        raise(SIGKILL);
    }
    if (g_pack_cancel)
        return 1;
    double t = mono_s();
    int decile = p->bytes_total ? (int)(10 * p->bytes_done / p->bytes_total) : 10;
    int done = p->blocks_done == p->blocks_total;
    if (c->tty ? (t - c->last_print >= 0.5 || done)
               : p->bytes_total >= (64u << 20) && (decile > c->last_decile || t - c->last_print >= 30)) {
        if (p->blocks_done || c->tty)
            print_progress(c, p);
        c->last_print = t;
        c->last_decile = decile;
    }
    if (done && c->tty) {
        fputc('\n', stderr);
        c->tty = 0;     /* no second newline */
    }
    return 0;
}

static void on_bad(const v4_pack_bad *b, void *ud)
{
    progress_ctx *c = ud;
    c->bad_listed++;
    if (c->tty)
        fputc('\n', stderr);
    printf("BAD layer %d expert %d offset %" PRIu64 ": %s\n", b->layer, b->expert, b->offset, b->err.msg);
    fflush(stdout);
}

static void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* ---------------------------------------------------------------- verify */

static int do_verify(const opts *o, progress_ctx *pc)
{
    v4_error err;
    v4_err_clear(&err);
    v4_config cfg;
    v4_ckpt *ck = NULL;
    if (o->model) {
        char path[4200];
        snprintf(path, sizeof path, "%s/config.json", o->model);
        if (v4_config_load(path, &cfg, &err) || v4_ckpt_open(o->model, &ck, &err)) {
            v4_print_error("pack", &err);
            return 1;
        }
    }
    v4_pack_verify_summary sum;
    int rc = v4_pack_verify(o->verify, ck ? &cfg : NULL, ck, on_bad, on_progress, pc, &sum, &err);
    if (ck)
        v4_ckpt_close(ck);
    if (rc) {
        v4_print_error("pack", &err);
        return 1;
    }
    double mbs = sum.elapsed_s > 0 ? (double)sum.bytes / sum.elapsed_s / 1e6 : 0;
    printf("verified %s: %" PRIu64 " blocks, %.2f GB in %.1f s (%.0f MB/s): %s%" PRIu64 " corrupt\n", o->verify,
           sum.blocks, (double)sum.bytes / 1e9, sum.elapsed_s, mbs, sum.bad ? "FAILED, " : "ok, ", sum.bad);
    return sum.bad ? 1 : 0;
}

/* ---------------------------------------------------------------- pack */

static int do_pack(const opts *o, progress_ctx *pc)
{
    const char *hook = getenv("V4_PACK_TEST_CRASH_AFTER");
    if (hook && *hook)
        pc->crash_after = atoll(hook);
    v4_error err;
    v4_err_clear(&err);
    int flags = (o->force ? V4_PACK_FORCE : 0) | (o->no_sync ? V4_PACK_NO_SYNC : 0);
    double t0 = mono_s();
    if (v4_pack_write(o->model, o->out, flags, on_progress, pc, &err)) {
        if (pc->tty)
            fputc('\n', stderr);
        v4_print_error("pack", &err);
        return 1;
    }
    double dt = mono_s() - t0;
    v4_xsource *s = v4_pack_source_open(o->out, NULL, V4_PACK_IO_BUFFERED, &err);
    if (!s) {
        v4_print_error("pack", &err);
        return 1;
    }
    uint64_t total = (uint64_t)s->n_layers * (uint64_t)s->n_experts * s->block_bytes;
    printf("packed %s -> %s: %d layers x %d experts, %zu bytes per block, %.2f GB in %.1f s (%.0f MB/s)\n", o->model,
           o->out, s->n_layers, s->n_experts, s->block_bytes, (double)total / 1e9, dt,
           dt > 0 ? (double)total / dt / 1e6 : 0);
    v4_xsource_close(s);
    return 0;
}

int v4_cmd_pack(int argc, char **argv)
{
    opts o;
    int r = parse_args(argc, argv, &o);
    if (r)
        return r > 0 ? 0 : 2;
    progress_ctx pc = {o.verify ? "verify" : "pack", isatty(STDERR_FILENO), 0, 0, -1, 0};
    pc.last_print = mono_s();
    install_signals();
    return o.verify ? do_verify(&o, &pc) : do_pack(&o, &pc);
}
