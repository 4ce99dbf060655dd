/* cancel_set.h - the task ids named by cancel messages, remembered for a while
 * (docs/queue-worker.md "Cancellation").
 *
 * Design: a FIFO ring of at most cap entries {id, time added}; adding to a full ring
 * drops the oldest, and an entry older than ttl_s no longer counts (nor is kept: it is
 * dropped when the ring is next touched).  Lookups compare a 64-bit FNV-1a hash before
 * the string, so a check is a linear pass over cap integers (cap is a setting,
 * V4_CANCEL_MAX, 10000 by default: a few microseconds).  Re-adding a remembered id
 * refreshes its time.  The AMQP service (service.c) keeps one, under its mutex, fills
 * it from the cancel consumer and answers v4q_cancelled() from it.
 *
 * Ownership: the set owns copies of the ids.  Thread: not locked; the owner serializes
 * the calls.  Times are the caller's clock in seconds (monotonic).
 */
#ifndef V4_QUEUE_CANCEL_SET_H
#define V4_QUEUE_CANCEL_SET_H

#include <stddef.h>

typedef struct v4q_cancel_set v4q_cancel_set;

/* cap >= 1 entries, ttl_s > 0.  NULL when out of memory. */
v4q_cancel_set *v4q_cancel_set_new(int cap, double ttl_s);
void v4q_cancel_set_free(v4q_cancel_set *c);
/* Remember id (len bytes, no NUL needed) at time now: 1 added, 0 refreshed, -1 out of memory. */
int v4q_cancel_set_add(v4q_cancel_set *c, const char *id, size_t len, double now);
/* 1 when id was added (or refreshed) less than ttl_s before now and not pushed out since. */
int v4q_cancel_set_has(v4q_cancel_set *c, const char *id, double now);
/* Ids remembered now (after dropping the expired ones). */
int v4q_cancel_set_count(v4q_cancel_set *c, double now);

#endif
