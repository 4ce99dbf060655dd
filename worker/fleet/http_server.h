/* http_server.h - the worker's HTTP endpoint: /healthz, /readyz, /metrics.
 *
 * Design: one owned thread runs a libuv loop with a TCP listener; each connection gets
 * a fixed 8 KiB request-head buffer and a 5 s timer from accept to close.  Only the
 * request line is interpreted (headers are skipped; bodies ignored); every response
 * carries "Connection: close" and the connection is shut down after it (the rest of
 * the input is read and discarded until EOF or a 1 s linger timer, so a client that
 * sent more than we read still gets the response instead of a reset).
 *   GET|HEAD /healthz -> 200 "ok"            (the process and this thread are alive)
 *   GET|HEAD /readyz  -> 200 "ready" | 503 "not ready: <why>"   (ready callback)
 *   GET|HEAD /metrics -> 200 Prometheus text 0.0.4 (metrics callback) | 500
 *   other path -> 404; other method -> 405; malformed request line -> 400; a request
 *   head over 8 KiB -> 431; more than 64 open connections -> the newest is closed at once.
 * A query string ("?...") is ignored.  The callbacks run on the HTTP thread and must not
 * block for long (they read counters and locks held briefly); nothing here ever waits
 * for the worker's inference thread.
 *
 * Ownership: v4_http owns its thread, loop and connections; the handlers' ud and the
 * log are borrowed and must outlive v4_http_stop.  Thread: start/stop from one thread;
 * callbacks on the HTTP thread.
 */
#ifndef V4_HTTP_SERVER_H
#define V4_HTTP_SERVER_H

#include <stddef.h>

#include "config/error.h"
#include "log.h"

typedef struct v4_http_handlers {
    /* 1 ready, 0 not ready (why: a short reason, NUL-terminated, at most n bytes). */
    int (*ready)(void *ud, char *why, size_t n);
    /* The /metrics body (malloc'd; *len its length), NULL = 500. */
    char *(*metrics)(void *ud, size_t *len);
    void *ud;
} v4_http_handlers;

typedef struct v4_http v4_http;

/* Binds addr:port (IPv4 or IPv6 literal; port 0..65535, 0 = any free port, for tests) and
 * listens before returning, so a port in use is an error here (V4_ERR_IO, where
 * "V4_HTTP_PORT"); then starts the thread. */
v4_http *v4_http_start(const char *addr, int port, const v4_http_handlers *h, v4_log *log, v4_error *err);
/* The port actually bound. */
int v4_http_port(const v4_http *s);
/* Closes every connection and the listener, joins the thread, frees.  NULL is a no-op. */
void v4_http_stop(v4_http *s);

#endif
