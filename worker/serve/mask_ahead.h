/* mask_ahead.h - output-constraint masks computed while the forward pass runs (issue 35:
 * the mask off the step's critical path).  The continuous executor hands the constraint
 * states of the rows that will sample after this step to v4_mask_ahead_start before it
 * calls v4_step, and v4_mask_ahead_join after it returns: a thread of its own computes
 * each state's next mask (v4_constrain_prepare) meanwhile, so that sampling then only
 * applies it.  The masks are the same as computed at sampling time; only when they are
 * computed changes (docs/structured-outputs.md "How masks apply").
 *
 * Ownership: the caller owns the v4_mask_ahead and the states; the states must not be
 * used or freed between start and join.  Thread: start and join on the same thread (the
 * executor's); the work runs on one thread of its own per start.
 */
#ifndef V4_MASK_AHEAD_H
#define V4_MASK_AHEAD_H

#include <pthread.h>

#include "constrain.h"

typedef struct v4_mask_ahead {
    pthread_t th;
    int running;                /* a thread was started and not yet joined */
    v4_constrain **states;      /* borrowed, [n] */
    int n;
    double busy_s;              /* seconds the thread spent computing (the last start) */
} v4_mask_ahead;

/* Start computing the masks of states[0..n) (n == 0: nothing).  When no thread can be
 * made the masks are simply computed at sampling time, as without it. */
void v4_mask_ahead_start(v4_mask_ahead *m, v4_constrain **states, int n);
/* Wait for the thread started last (nothing when none runs). */
void v4_mask_ahead_join(v4_mask_ahead *m);

#endif
