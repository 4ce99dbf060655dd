/* http_server.c - libuv HTTP/1.x endpoint for health and metrics (see http_server.h).
 *
 * Connection life: accept -> read into buf until the end of the head ("\r\n\r\n" or
 * "\n\n") -> one response written with uv_write -> uv_shutdown (FIN) -> discard input
 * until EOF / error / linger timer -> close.  The tcp handle and the timer of a
 * connection are closed together; the struct is freed when both close callbacks ran.
 * Stop: uv_async_send from the owner's thread; the async callback closes every handle
 * (uv_walk) so uv_run returns.
 * Thread: everything below runs on the HTTP thread except v4_http_start (before the
 * thread exists) and v4_http_stop (async send + join).
 */
#include "http_server.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#define HEAD_MAX 8192
#define MAX_CONNS 64
#define REQUEST_TIMEOUT_MS 5000
#define LINGER_MS 1000

struct v4_http {
    uv_loop_t loop;
    uv_tcp_t listener;
    uv_async_t stop;
    pthread_t thread;
    v4_http_handlers h;
    v4_log *log;
    int nconns;
    int port;                   /* bound port (set before the thread starts) */
    int refusing;               /* at the connection limit: logged once per episode */
};

typedef struct conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_write_t wr;
    uv_shutdown_t sd;
    v4_http *srv;
    char buf[HEAD_MAX];
    size_t n;
    char *resp;
    int responded, closing, open_handles;
} conn;

static void on_conn_closed(uv_handle_t *h)
{
    conn *c = h->data;
    if (--c->open_handles)
        return;
    c->srv->nconns--;
    free(c->resp);
    free(c);
}

static void close_conn(conn *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
    uv_close((uv_handle_t *)&c->timer, on_conn_closed);
}

static void on_timeout(uv_timer_t *t)
{
    close_conn(t->data);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    (void)req;
    (void)status;   /* the reads (EOF / error) or the linger timer close the connection */
}

static void on_written(uv_write_t *req, int status)
{
    conn *c = req->data;
    if (status < 0 || c->closing) {
        close_conn(c);
        return;
    }
    c->sd.data = c;
    if (uv_shutdown(&c->sd, (uv_stream_t *)&c->tcp, on_shutdown)) {
        close_conn(c);
        return;
    }
    uv_timer_start(&c->timer, on_timeout, LINGER_MS, 0);
}

static void respond(conn *c, int code, const char *reason, const char *ctype, const char *body, size_t len,
                    int head_only, const char *extra)
{
    c->responded = 1;
    char hdr[512];
    int hn = snprintf(hdr, sizeof hdr,
                      "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: no-store\r\n%s"
                      "Connection: close\r\n\r\n",
                      code, reason, ctype, len, extra ? extra : "");
    size_t blen = head_only ? 0 : len;
    c->resp = malloc((size_t)hn + blen);
    if (!c->resp) {
        close_conn(c);
        return;
    }
    memcpy(c->resp, hdr, (size_t)hn);
    if (blen)
        memcpy(c->resp + hn, body, blen);
    uv_buf_t b = uv_buf_init(c->resp, (unsigned)((size_t)hn + blen));
    c->wr.data = c;
    if (uv_write(&c->wr, (uv_stream_t *)&c->tcp, &b, 1, on_written))
        close_conn(c);
}

static void respond_text(conn *c, int code, const char *reason, const char *body, int head_only, const char *extra)
{
    respond(c, code, reason, "text/plain; charset=utf-8", body, strlen(body), head_only, extra);
}

static int is_tchar(char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z');
}

/* The head is complete in c->buf[0..n): interpret its request line. */
static void handle_request(conn *c)
{
    v4_http *s = c->srv;
    const char *p = c->buf, *end = c->buf + c->n;
    const char *m0 = p;
    while (p < end && is_tchar(*p) && p - m0 < 16)
        p++;
    size_t mlen = (size_t)(p - m0);
    if (!mlen || p >= end || *p != ' ') {
        respond_text(c, 400, "Bad Request", "bad request line\n", 0, NULL);
        return;
    }
    const char *t0 = ++p;
    while (p < end && *p != ' ' && *p != '\r' && *p != '\n' && (unsigned char)*p > 0x20 && (unsigned char)*p < 0x7f)
        p++;
    size_t tlen = (size_t)(p - t0);
    const char *v0 = p + 1;
    if (!tlen || *t0 != '/' || p >= end || *p != ' ' || end - v0 < 9 || strncmp(v0, "HTTP/1.", 7) ||
        (v0[7] != '0' && v0[7] != '1') || (v0[8] != '\r' && v0[8] != '\n')) {
        respond_text(c, 400, "Bad Request", "bad request line\n", 0, NULL);
        return;
    }
    int head = mlen == 4 && !memcmp(m0, "HEAD", 4);
    if (!head && !(mlen == 3 && !memcmp(m0, "GET", 3))) {
        respond_text(c, 405, "Method Not Allowed", "only GET and HEAD\n", 0, "Allow: GET, HEAD\r\n");
        return;
    }
    size_t plen = strcspn(t0, "? ");
    if (plen > tlen)
        plen = tlen;
#define PATH_IS(lit) (plen == sizeof(lit) - 1 && !memcmp(t0, lit, plen))
    if (PATH_IS("/healthz")) {
        respond_text(c, 200, "OK", "ok\n", head, NULL);
    } else if (PATH_IS("/readyz")) {
        char why[200] = "", body[256];
        int ok = s->h.ready ? s->h.ready(s->h.ud, why, sizeof why) : 1;
        snprintf(body, sizeof body, ok ? "ready\n" : "not ready: %s\n", why);
        respond_text(c, ok ? 200 : 503, ok ? "OK" : "Service Unavailable", body, head, NULL);
    } else if (PATH_IS("/metrics")) {
        size_t len = 0;
        char *m = s->h.metrics ? s->h.metrics(s->h.ud, &len) : NULL;
        if (m)
            respond(c, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", m, len, head, NULL);
        else
            respond_text(c, 500, "Internal Server Error", "metrics unavailable\n", head, NULL);
        free(m);
    } else {
        respond_text(c, 404, "Not Found", "not found (try /healthz, /readyz, /metrics)\n", head, NULL);
    }
#undef PATH_IS
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    (void)suggested;
    conn *c = h->data;
    if (c->responded || c->n >= HEAD_MAX)   /* after the response: discard into the buffer's start */
        *b = uv_buf_init(c->buf, 512);
    else
        *b = uv_buf_init(c->buf + c->n, (unsigned)(HEAD_MAX - c->n));
}

static int head_complete(const conn *c, size_t from)
{
    size_t i = from > 3 ? from - 3 : 0;
    for (; i < c->n; i++) {
        if (i + 3 < c->n && !memcmp(c->buf + i, "\r\n\r\n", 4))
            return 1;
        if (i + 1 < c->n && !memcmp(c->buf + i, "\n\n", 2))
            return 1;
    }
    return 0;
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *b)
{
    (void)b;
    conn *c = st->data;
    if (nread < 0) {
        close_conn(c);
        return;
    }
    if (nread == 0 || c->responded || c->closing)
        return;
    size_t from = c->n;
    c->n += (size_t)nread;
    if (head_complete(c, from))
        handle_request(c);
    else if (c->n >= HEAD_MAX)
        respond_text(c, 431, "Request Header Fields Too Large", "request head over 8 KiB\n", 0, NULL);
}

static void on_reject_closed(uv_handle_t *h)
{
    free(h);
}

static void on_connection(uv_stream_t *ls, int status)
{
    v4_http *s = ls->data;
    if (status < 0)
        return;
    if (s->nconns >= MAX_CONNS) {
        uv_tcp_t *t = malloc(sizeof *t);
        if (!t)
            return;
        uv_tcp_init(&s->loop, t);
        t->data = NULL;
        uv_accept(ls, (uv_stream_t *)t);
        uv_close((uv_handle_t *)t, on_reject_closed);
        if (!s->refusing)
            v4_log_emit(s->log, V4_LOG_INFO, "http", NULL, NULL,
                        "http: 64 connections open: closing new ones until some finish");
        s->refusing = 1;
        return;
    }
    s->refusing = 0;
    conn *c = calloc(1, sizeof *c);
    if (!c)
        return;
    c->srv = s;
    uv_tcp_init(&s->loop, &c->tcp);
    uv_timer_init(&s->loop, &c->timer);
    c->tcp.data = c->timer.data = c;
    c->open_handles = 2;
    s->nconns++;
    if (uv_accept(ls, (uv_stream_t *)&c->tcp) || uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read)) {
        close_conn(c);
        return;
    }
    uv_timer_start(&c->timer, on_timeout, REQUEST_TIMEOUT_MS, 0);
}

/* Close every handle; connections through close_conn (their struct is freed once). */
static void close_walk(uv_handle_t *h, void *arg)
{
    v4_http *s = arg;
    if (uv_is_closing(h))
        return;
    if (h == (uv_handle_t *)&s->listener || h == (uv_handle_t *)&s->stop || !h->data)
        uv_close(h, NULL);
    else
        close_conn(h->data);
}

static void on_stop(uv_async_t *a)
{
    uv_walk(a->loop, close_walk, a->data);
}

static void *http_main(void *arg)
{
    v4_http *s = arg;
    uv_run(&s->loop, UV_RUN_DEFAULT);
    return NULL;
}

v4_http *v4_http_start(const char *addr, int port, const v4_http_handlers *h, v4_log *log, v4_error *err)
{
    v4_http *s = calloc(1, sizeof *s);
    if (!s) {
        v4_err_set(err, V4_ERR_NOMEM, "http", "out of memory");
        return NULL;
    }
    s->h = *h;
    s->log = log;
    struct sockaddr_storage sa;
    int rc;
    if (uv_ip4_addr(addr, port, (struct sockaddr_in *)&sa) && uv_ip6_addr(addr, port, (struct sockaddr_in6 *)&sa)) {
        v4_err_set(err, V4_ERR_CONFIG, "V4_HTTP_ADDR", "'%s' is not an IPv4 or IPv6 address", addr);
        free(s);
        return NULL;
    }
    if ((rc = uv_loop_init(&s->loop))) {
        v4_err_set(err, V4_ERR_IO, "http", "uv_loop_init: %s", uv_strerror(rc));
        free(s);
        return NULL;
    }
    uv_tcp_init(&s->loop, &s->listener);
    s->listener.data = s;
    uv_async_init(&s->loop, &s->stop, on_stop);
    s->stop.data = s;
    if ((rc = uv_tcp_bind(&s->listener, (const struct sockaddr *)&sa, 0)) ||
        (rc = uv_listen((uv_stream_t *)&s->listener, 128, on_connection))) {
        v4_err_set(err, V4_ERR_IO, "V4_HTTP_PORT", "cannot listen on %s:%d: %s", addr, port, uv_strerror(rc));
        goto fail;
    }
    struct sockaddr_storage bound;
    int blen = sizeof bound;
    if (uv_tcp_getsockname(&s->listener, (struct sockaddr *)&bound, &blen) == 0)
        s->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                    : ((struct sockaddr_in *)&bound)->sin_port);
    if ((rc = pthread_create(&s->thread, NULL, http_main, s))) {
        v4_err_set(err, V4_ERR_IO, "http", "cannot start the thread: %s", strerror(rc));
        goto fail;
    }
    return s;
fail:
    s->listener.data = NULL;
    uv_close((uv_handle_t *)&s->listener, NULL);
    uv_close((uv_handle_t *)&s->stop, NULL);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    uv_loop_close(&s->loop);
    free(s);
    return NULL;
}

int v4_http_port(const v4_http *s)
{
    return s->port;
}

void v4_http_stop(v4_http *s)
{
    if (!s)
        return;
    uv_async_send(&s->stop);
    pthread_join(s->thread, NULL);
    uv_loop_close(&s->loop);
    free(s);
}
