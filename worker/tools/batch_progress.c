/* batch_progress.c - progress bar / lines of the batch command (see batch_progress.h).
 * Thread: the driver's thread. */
#include "batch_progress.h"

#include <string.h>
#include <unistd.h>

#include "worker/serve/task_run.h"

void v4_bp_start(v4_batch_progress *p, FILE *f, int tty, double interval_ms, long total, long skipped)
{
    memset(p, 0, sizeof *p);
    p->f = f;
    p->tty = tty < 0 ? isatty(fileno(f)) : tty;
    p->interval_ms = interval_ms > 0 ? interval_ms : 5000;
    p->total = total;
    p->skipped = skipped;
    p->t0_ms = p->last_ms = v4_now_ms();
}

static void fmt_dur(char *out, size_t n, double s)
{
    if (s < 0)
        snprintf(out, n, "?");
    else if (s < 60)
        snprintf(out, n, "%.0fs", s);
    else if (s < 3600)
        snprintf(out, n, "%dm%02ds", (int)(s / 60), (int)s % 60);
    else
        snprintf(out, n, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
}

void v4_bp_generated(v4_batch_progress *p, long long generated)
{
    p->generated = generated;
}

/* The tokens a progress line shows: generated so far (answered lines' at least). */
static long long live_tokens(const v4_batch_progress *p)
{
    return p->generated > p->tokens ? p->generated : p->tokens;
}

static void figures(const v4_batch_progress *p, long long tokens, double *el_s, double *tps, char *eta, size_t n)
{
    *el_s = (v4_now_ms() - p->t0_ms) / 1e3;
    *tps = *el_s > 0 ? (double)tokens / *el_s : 0;
    fmt_dur(eta, n, p->done ? *el_s / (double)p->done * (double)(p->total - p->done) : -1);
}

static void draw(v4_batch_progress *p)
{
    double el, tps;
    char eta[32];
    const long long tokens = live_tokens(p);
    figures(p, tokens, &el, &tps, eta, sizeof eta);
    if (p->tty) {
        char bar[25];
        int fill = p->total ? (int)(24 * p->done / p->total) : 24;
        for (int i = 0; i < 24; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[24] = 0;
        fprintf(p->f, "\r\033[K[%s] %ld/%ld done, %d running, %ld failed, %.1f tok/s, ETA %s", bar, p->done, p->total,
                p->running, p->failed, tps, eta);
        p->drawn = 1;
    } else {
        fprintf(p->f,
                "v4fleet batch: %ld/%ld done, %d running, %ld failed, %lld tokens, %.1f tokens/s, elapsed %.1f s, "
                "ETA %s\n",
                p->done, p->total, p->running, p->failed, tokens, tps, el, eta);
    }
    fflush(p->f);
}

void v4_bp_tick(v4_batch_progress *p)
{
    double now = v4_now_ms();
    if (now - p->last_ms < (p->tty ? 100 : p->interval_ms))
        return;
    p->last_ms = now;
    draw(p);
}

void v4_bp_line(v4_batch_progress *p, int failed, long long tokens)
{
    p->done++;
    p->failed += failed != 0;
    p->tokens += tokens;
    if (p->tty) {   /* the bar follows every line; plain lines keep their period */
        p->last_ms = v4_now_ms();
        draw(p);
    } else {
        v4_bp_tick(p);
    }
}

void v4_bp_clear(v4_batch_progress *p)
{
    if (p->tty && p->drawn) {
        fprintf(p->f, "\r\033[K");
        fflush(p->f);
        p->drawn = 0;
    }
}

void v4_bp_finish(v4_batch_progress *p, const char *how)
{
    if (p->tty && p->drawn) {
        draw(p);
        fputc('\n', p->f);
        p->drawn = 0;
    }
    double el, tps;
    char eta[32];
    figures(p, p->tokens, &el, &tps, eta, sizeof eta);
    fprintf(p->f, "v4fleet batch: %s: %ld tasks, %ld failed, %ld skipped, %lld tokens, %.2f s, %.1f tokens/s\n", how,
            p->done, p->failed, p->skipped, p->tokens, el, tps);
    fflush(p->f);
}
