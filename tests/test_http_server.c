/* test_http_server.c - the worker's HTTP endpoint (worker/fleet/http_server.h) over real
 * loopback sockets: status codes and bodies of /healthz, /readyz (both states),
 * /metrics (content type, query string ignored, HEAD without body, callback failure ->
 * 500), 404 / 405 / 400 (garbage, bad version, bare newline heads) / 431 (a head over
 * 8 KiB: the response still arrives, no reset), a client that connects and sends nothing
 * is closed after the request timeout while others are served at once, more than 64
 * idle connections (the extra ones closed at once, service resumes when they go), 8
 * threads x 40 parallel requests, clients that vanish mid-request, the bind errors
 * (port in use, bad address). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"
#include "worker/fleet/http_server.h"

static int g_port;

typedef struct state {
    volatile int ready, metrics_fail, metrics_calls;
} state;

static int cb_ready(void *ud, char *why, size_t n)
{
    state *s = ud;
    snprintf(why, n, "because the test says so");
    return s->ready;
}

static char *cb_metrics(void *ud, size_t *len)
{
    state *s = ud;
    __sync_fetch_and_add(&s->metrics_calls, 1);
    if (s->metrics_fail)
        return NULL;
    const char *t = "# HELP x X.\n# TYPE x counter\nx 1\n";
    *len = strlen(t);
    return strdup(t);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int dial(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* Read until EOF (or timeout_ms); returns bytes read, -1 on error (e.g. reset). */
static long read_all(int fd, char *buf, size_t cap, int timeout_ms)
{
    size_t n = 0;
    double end = now_s() + timeout_ms / 1e3;
    for (;;) {
        int left = (int)((end - now_s()) * 1e3);
        struct pollfd p = {fd, POLLIN, 0};
        if (left <= 0 || poll(&p, 1, left) <= 0)
            return -2;   /* timeout */
        ssize_t r = recv(fd, buf + n, cap - 1 - n, 0);
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        n += (size_t)r;
        if (n >= cap - 1)
            break;
    }
    buf[n] = 0;
    return (long)n;
}

/* One request (raw bytes), the whole response in out; returns the status code or -1. */
static int request(const char *raw, size_t len, char *out, size_t cap)
{
    int fd = dial();
    if (fd < 0)
        return -1;
    size_t off = 0;
    while (off < len) {
        ssize_t w = send(fd, raw + off, len - off, MSG_NOSIGNAL);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    long n = read_all(fd, out, cap, 3000);
    close(fd);
    int code = -1;
    if (n > 12 && sscanf(out, "HTTP/1.1 %d", &code) != 1)
        code = -1;
    return code;
}

static int get(const char *path, char *out, size_t cap)
{
    char raw[512];
    snprintf(raw, sizeof raw, "GET %s HTTP/1.1\r\nHost: x\r\nUser-Agent: test\r\n\r\n", path);
    return request(raw, strlen(raw), out, cap);
}

static const char *body_of(const char *resp)
{
    const char *b = strstr(resp, "\r\n\r\n");
    return b ? b + 4 : "";
}

static void *hammer(void *arg)
{
    int *ok = arg;
    char out[4096];
    for (int i = 0; i < 40; i++)
        *ok += get(i % 2 ? "/metrics" : "/healthz", out, sizeof out) == 200;
    return NULL;
}

int main(void)
{
    v4_log log;
    v4_error err = {0};
    v4_log_init(&log, "text", 2, "test", stderr, &err);
    state st = {0};
    v4_http_handlers h = {cb_ready, cb_metrics, &st};
    v4_http *srv = v4_http_start("127.0.0.1", 0, &h, &log, &err);
    CHECK(srv, "start: %s: %s", err.where, err.msg);
    if (!srv)
        TEST_DONE();
    g_port = v4_http_port(srv);
    CHECK(g_port > 0, "bound port %d", g_port);
    char out[65536];

    CHECK(get("/healthz", out, sizeof out) == 200 && !strcmp(body_of(out), "ok\n"), "healthz: %s", out);
    CHECK(strstr(out, "Connection: close\r\n") && strstr(out, "Content-Length: 3\r\n"), "headers: %s", out);
    CHECK(get("/readyz", out, sizeof out) == 503 && !strcmp(body_of(out), "not ready: because the test says so\n"),
          "readyz (not ready): %s", out);
    st.ready = 1;
    CHECK(get("/readyz", out, sizeof out) == 200 && !strcmp(body_of(out), "ready\n"), "readyz (ready): %s", out);
    CHECK(get("/metrics", out, sizeof out) == 200 && !strcmp(body_of(out), "# HELP x X.\n# TYPE x counter\nx 1\n") &&
              strstr(out, "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"),
          "metrics: %s", out);
    CHECK(get("/metrics?name=x", out, sizeof out) == 200, "query string ignored: %s", out);
    const char *headreq = "HEAD /metrics HTTP/1.0\r\n\r\n";
    CHECK(request(headreq, strlen(headreq), out, sizeof out) == 200 && !*body_of(out) &&
              strstr(out, "Content-Length: 33\r\n"),
          "HEAD: %s", out);
    st.metrics_fail = 1;
    CHECK(get("/metrics", out, sizeof out) == 500, "metrics failure -> 500: %s", out);
    st.metrics_fail = 0;
    CHECK(get("/", out, sizeof out) == 404 && get("/healthz/x", out, sizeof out) == 404 &&
              get("/metricsx", out, sizeof out) == 404,
          "unknown paths -> 404");
    const char *post = "POST /healthz HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc";
    CHECK(request(post, strlen(post), out, sizeof out) == 405 && strstr(out, "Allow: GET, HEAD\r\n"), "POST: %s", out);
    static const char *const bad[] = {"garbage\r\n\r\n", "GET\r\n\r\n", "GET /healthz\r\n\r\n",
                                      "GET /healthz HTTP/2.0\r\n\r\n", "GET healthz HTTP/1.1\r\n\r\n",
                                      "GET  /healthz HTTP/1.1\r\n\r\n", "\r\n\r\n", "G\x01T / HTTP/1.1\r\n\r\n",
                                      "GET /a\x7f HTTP/1.1\r\n\r\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(request(bad[i], strlen(bad[i]), out, sizeof out) == 400, "bad request %zu -> %s", i, out);
    const char *bare = "GET /healthz HTTP/1.0\n\n";
    CHECK(request(bare, strlen(bare), out, sizeof out) == 200, "bare-newline head: %s", out);

    /* a head over 8 KiB: 431, and the response is read intact (no reset) */
    size_t big = 64 * 1024;
    char *huge = malloc(big);
    memcpy(huge, "GET /healthz HTTP/1.1\r\nX-Big: ", 30);
    memset(huge + 30, 'a', big - 30);
    CHECK(request(huge, big, out, sizeof out) == 431, "huge head: %.80s", out);
    free(huge);

    /* a silent client is dropped after the timeout; others are served meanwhile */
    int silent = dial();
    double t0 = now_s();
    CHECK(get("/healthz", out, sizeof out) == 200 && now_s() - t0 < 1, "served while a client is silent");
    long n = read_all(silent, out, sizeof out, 8000);
    double waited = now_s() - t0;
    CHECK(n == 0 && waited > 4 && waited < 7, "silent client closed after %.1f s (read %ld)", waited, n);
    close(silent);

    /* a client that sends half a request and vanishes */
    for (int i = 0; i < 20; i++) {
        int fd = dial();
        send(fd, "GET /metr", 9, MSG_NOSIGNAL);
        close(fd);
    }
    CHECK(get("/healthz", out, sizeof out) == 200, "alive after vanishing clients");
    usleep(300000);     /* let the server reap them before the idle-limit check */

    /* more than 64 idle connections: the extra ones are closed at once */
    int idle[80], closed_fast = 0;
    for (int i = 0; i < 80; i++)
        idle[i] = dial();
    usleep(300000);
    for (int i = 0; i < 80; i++) {
        struct pollfd p = {idle[i], POLLIN, 0};
        char c;
        if (idle[i] >= 0 && poll(&p, 1, 0) == 1 && recv(idle[i], &c, 1, MSG_DONTWAIT) <= 0)
            closed_fast++;
    }
    /* 16 over the limit; more if connections of the steps above still linger: the 20
     * vanished clients hold slots until the server has read their EOF, which a loaded
     * machine (ASan, tests in parallel) delayed once (37 closed) */
    CHECK(closed_fast >= 16 && closed_fast <= 38, "%d of 80 idle connections closed at once (want 16..38)",
          closed_fast);
    for (int i = 0; i < 80; i++)
        if (idle[i] >= 0)
            close(idle[i]);
    usleep(200000);
    CHECK(get("/healthz", out, sizeof out) == 200, "served again once the idle clients left");

    /* parallel clients */
    pthread_t th[8];
    int ok[8] = {0};
    for (int i = 0; i < 8; i++)
        pthread_create(&th[i], NULL, hammer, &ok[i]);
    int total = 0;
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        total += ok[i];
    }
    CHECK(total == 320, "%d of 320 parallel requests answered 200", total);

    /* bind errors */
    v4_http *dup = v4_http_start("127.0.0.1", g_port, &h, &log, &err);
    CHECK(!dup && !strcmp(err.where, "V4_HTTP_PORT"), "port in use: %s: %s", err.where, err.msg);
    v4_http_stop(dup);
    dup = v4_http_start("not-an-ip", 0, &h, &log, &err);
    CHECK(!dup && !strcmp(err.where, "V4_HTTP_ADDR"), "bad address: %s: %s", err.where, err.msg);
    v4_http_stop(dup);

    v4_http_stop(srv);
    CHECK(dial() < 0, "closed after stop");
    v4_log_destroy(&log);
    TEST_DONE();
}
