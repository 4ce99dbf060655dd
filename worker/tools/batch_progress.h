/* batch_progress.h - progress of `v4fleet batch` on stderr.
 *
 * On a terminal: one line redrawn in place ("\r" + erase) with a bar, done/total,
 * running (the tasks in flight), failed, tokens/s and ETA, at most every 100 ms; other messages call
 * v4_bp_clear() first so they do not mix with the bar.  Otherwise: a plain line every
 * interval_ms (~5 s) and nothing in between.  Both end with one summary line
 * (tasks, failed, skipped, tokens, wall time, tokens/s).  The bar and the lines count the
 * tokens generated so far (v4_bp_generated: the runner's live count, fed before every
 * forward step, so tokens/s moves while long tasks run, not only when one ends); the
 * summary counts the completion tokens of the answered lines (failed tasks and a
 * summary's inner passes generate tokens that no line reports).  The ETA is the
 * remaining lines times the mean time per line so far.
 *
 * Ownership: plain values; the stream is borrowed.  Thread: the driver's thread.
 */
#ifndef V4_BATCH_PROGRESS_H
#define V4_BATCH_PROGRESS_H

#include <stdio.h>

typedef struct v4_batch_progress {
    FILE *f;
    int tty;
    double interval_ms;
    long total;                     /* lines to answer in this run (skipped excluded) */
    long done, failed, skipped;
    int running;                    /* tasks in flight (the driver keeps it current) */
    long long tokens;               /* completion tokens of the answered lines */
    long long generated;            /* tokens generated so far (v4_bp_generated) */
    double t0_ms, last_ms;
    int drawn;                      /* a bar is on screen */
} v4_batch_progress;

/* tty: -1 = isatty(fileno(f)).  interval_ms: plain-line period (<= 0: 5000). */
void v4_bp_start(v4_batch_progress *p, FILE *f, int tty, double interval_ms, long total, long skipped);
/* One output line written: failed (0/1), completion tokens. */
void v4_bp_line(v4_batch_progress *p, int failed, long long tokens);
/* The tokens generated so far, in-flight tasks included (a count that only grows); the
 * bar and lines show the larger of it and the answered lines' tokens. */
void v4_bp_generated(v4_batch_progress *p, long long generated);
/* Redraw / print when due (also while a task runs). */
void v4_bp_tick(v4_batch_progress *p);
/* Erase the bar before printing something else (the next tick redraws it). */
void v4_bp_clear(v4_batch_progress *p);
/* The summary line; how: "done" or e.g. "interrupted". */
void v4_bp_finish(v4_batch_progress *p, const char *how);

#endif
