/* admit.h - admission of a sequence by free device memory (issue 20, item 3).
 *
 * A step implementation that keeps per-sequence state in a limited memory (the CUDA
 * engine's device memory) reports, for a new sequence, the bytes it will allocate at
 * its first step (need) and the bytes it can allocate now (avail: free memory plus
 * what idle sequence slots hold).  The continuous executor (exec_cont.c) asks this rule
 * before a job's first row is gathered:
 *   need <= avail                      run: admit it into this step;
 *   need > avail, others active        wait: stay queued, ask again next step (the
 *                                      others' memory frees as they retire);
 *   need > avail, nothing else active  fail: it cannot fit even alone.
 * `avail` passed here is already net of what earlier admissions of the same step will
 * take (they allocate during that step).  Pure: no state, any thread.
 */
#ifndef V4_SERVE_ADMIT_H
#define V4_SERVE_ADMIT_H

#include <stddef.h>

typedef enum v4_admit_verdict { V4_ADMIT_RUN = 0, V4_ADMIT_WAIT, V4_ADMIT_FAIL } v4_admit_verdict;

v4_admit_verdict v4_admit_decide(size_t need, size_t avail, int others_active);
/* "run", "wait", "fail" (static strings). */
const char *v4_admit_verdict_name(v4_admit_verdict v);

#endif
