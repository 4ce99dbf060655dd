/* stop.h - stop strings matched on the decoded text, across token boundaries.
 *
 * Text is fed in as it is decoded.  The matcher emits (through the callback) only
 * text that can no longer be part of a stop string: a tail that is a prefix of some
 * stop string is held back until the next chunk decides it.  When a stop string
 * appears, the text before it is emitted, the stop string and everything after it
 * are dropped, and feed returns 1.  At the end of generation, flush emits what is
 * held.  Matching is on bytes (stop strings and text are UTF-8).
 *
 * Ownership: the matcher copies the stop strings; free with v4_stop_free.
 * Thread: one thread at a time per matcher (one matcher per request).
 */
#ifndef V4_STOP_H
#define V4_STOP_H

#include <stddef.h>

#include "config/error.h"

typedef void (*v4_emit_fn)(void *ud, const char *text, size_t len);
typedef struct v4_stop v4_stop;

/* n may be 0 (then everything is emitted at once).  Empty stop strings are rejected. */
v4_stop *v4_stop_create(const char *const *stops, int n, v4_error *err);
void v4_stop_free(v4_stop *s);
/* Returns 1 when a stop string completed (nothing more will be emitted), 0 otherwise,
 * -1 on out of memory. */
int v4_stop_feed(v4_stop *s, const char *text, size_t len, v4_emit_fn emit, void *ud);
void v4_stop_flush(v4_stop *s, v4_emit_fn emit, void *ud);

#endif
