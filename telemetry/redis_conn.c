/* redis_conn.c - Redis URL parsing/masking and the timed sync connect; see redis_conn.h.
 * Pure functions plus one caller-owned redisContext; no global state. */
#include "redis_conn.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#define SCHEME "redis://"

void v4_redis_url_mask(const char *url, char *out, size_t n)
{
    if (!out || n == 0)
        return;
    if (!url) {
        snprintf(out, n, "(null)");
        return;
    }
    const char *auth = strstr(url, "://");
    if (!auth) {
        /* Not a URL we understand: if it has an '@', hide everything before it. */
        const char *at = strrchr(url, '@');
        if (at)
            snprintf(out, n, "***%s", at);
        else
            snprintf(out, n, "%s", url);
        return;
    }
    auth += 3;
    size_t alen = strcspn(auth, "/?#");
    const char *at = NULL;
    for (size_t i = 0; i < alen; i++)
        if (auth[i] == '@')
            at = auth + i;
    if (!at) {
        snprintf(out, n, "%s", url);
        return;
    }
    const char *colon = memchr(auth, ':', (size_t)(at - auth));
    if (colon)   /* keep the user, hide the password */
        snprintf(out, n, "%.*s:***%s", (int)(colon - url), url, at);
    else         /* a lone userinfo may be a password: hide it all */
        snprintf(out, n, "%.*s***%s", (int)(auth - url), url, at);
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = tolower(c);
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Percent-decode s[0..len) into out (size n).  0 ok, -1 bad escape, -2 too long. */
static int pct_decode(const char *s, size_t len, char *out, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        int c = (unsigned char)s[i];
        if (c == '%') {
            if (i + 2 >= len)
                return -1;
            int h = hexval((unsigned char)s[i + 1]), l = hexval((unsigned char)s[i + 2]);
            if (h < 0 || l < 0)
                return -1;
            c = h * 16 + l;
            if (c == 0)
                return -1;
            i += 2;
        }
        if (o + 1 >= n)
            return -2;
        out[o++] = (char)c;
    }
    out[o] = '\0';
    return 0;
}

/* Decimal digits only, value in [lo, hi]. */
static int parse_uint(const char *s, size_t len, long lo, long hi, long *out)
{
    if (len == 0 || len > 10)
        return -1;
    long v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int v4_redis_url_parse_full(const char *url, v4_redis_url *u, v4_error *err)
{
    char where[300];
    v4_redis_url_mask(url, where, sizeof where);
    if (!u)
        return v4_err_set(err, V4_ERR_INVALID, where, "no output for the parsed URL");
    memset(u, 0, sizeof *u);
    if (!url || !*url)
        return v4_err_set(err, V4_ERR_CONFIG, "redis url", "empty Redis URL");
    const char *sep = strstr(url, "://");
    if (!sep)
        return v4_err_set(err, V4_ERR_CONFIG, where,
                          "not a Redis URL: expected redis://[user:password@]host[:port][/db]");
    if ((size_t)(sep - url) != strlen(SCHEME) - 3 || strncasecmp(url, SCHEME, strlen(SCHEME)) != 0)
        return v4_err_set(err, V4_ERR_CONFIG, where,
                          "unsupported scheme '%.*s' (only redis://; TLS and unix sockets are not supported)",
                          (int)(sep - url) > 32 ? 32 : (int)(sep - url), url);
    const char *p = url + strlen(SCHEME);
    for (const char *q = p; *q; q++)
        if ((unsigned char)*q <= ' ' || *q == 0x7f)
            return v4_err_set(err, V4_ERR_CONFIG, where, "whitespace or control character at offset %d",
                              (int)(q - url));
    size_t alen = strcspn(p, "/?#");
    const char *rest = p + alen;

    /* userinfo: up to the last '@' of the authority */
    const char *hp = p;
    for (size_t i = 0; i < alen; i++)
        if (p[i] == '@')
            hp = p + i + 1;
    if (hp != p) {
        size_t ulen = (size_t)(hp - 1 - p);
        const char *colon = memchr(p, ':', ulen);
        if (!colon)
            return v4_err_set(err, V4_ERR_CONFIG, where,
                              "credentials without ':' (write redis://user:password@host or "
                              "redis://:password@host)");
        int rc = pct_decode(p, (size_t)(colon - p), u->user, sizeof u->user);
        if (rc == -1)
            return v4_err_set(err, V4_ERR_CONFIG, where, "bad %%-escape in the user name");
        if (rc == -2)
            return v4_err_set(err, V4_ERR_CONFIG, where, "user name longer than %zu bytes",
                              sizeof u->user - 1);
        rc = pct_decode(colon + 1, (size_t)(hp - 1 - colon - 1), u->password, sizeof u->password);
        if (rc == -1)
            return v4_err_set(err, V4_ERR_CONFIG, where, "bad %%-escape in the password");
        if (rc == -2)
            return v4_err_set(err, V4_ERR_CONFIG, where, "password longer than %zu bytes",
                              sizeof u->password - 1);
        if (!u->password[0])
            return v4_err_set(err, V4_ERR_CONFIG, where, "empty password after ':'");
    }

    /* host[:port] */
    size_t hlen = (size_t)(p + alen - hp);
    const char *host = hp, *port = NULL;
    size_t host_len;
    if (hlen > 0 && hp[0] == '[') {
        const char *rb = memchr(hp, ']', hlen);
        if (!rb)
            return v4_err_set(err, V4_ERR_CONFIG, where, "IPv6 address without closing ']'");
        host = hp + 1;
        host_len = (size_t)(rb - host);
        if (host_len == 0)
            return v4_err_set(err, V4_ERR_CONFIG, where, "empty IPv6 address '[]'");
        const char *after = rb + 1;
        if (after < p + alen) {
            if (*after != ':')
                return v4_err_set(err, V4_ERR_CONFIG, where, "unexpected text after ']' (expected ':port')");
            port = after + 1;
        }
    } else {
        const char *colon = memchr(hp, ':', hlen);
        host_len = colon ? (size_t)(colon - hp) : hlen;
        if (colon) {
            port = colon + 1;
            if (memchr(port, ':', (size_t)(p + alen - port)))
                return v4_err_set(err, V4_ERR_CONFIG, where,
                                  "more than one ':' in host:port (write IPv6 addresses as [addr])");
        }
    }
    if (host_len == 0)
        return v4_err_set(err, V4_ERR_CONFIG, where, "empty host");
    if (host_len >= sizeof u->host)
        return v4_err_set(err, V4_ERR_CONFIG, where, "host longer than %zu bytes", sizeof u->host - 1);
    memcpy(u->host, host, host_len);
    u->host[host_len] = '\0';
    u->port = V4_REDIS_DEFAULT_PORT;
    if (port) {
        size_t plen = (size_t)(p + alen - port);
        long v;
        if (plen == 0)
            return v4_err_set(err, V4_ERR_CONFIG, where, "empty port after ':'");
        if (parse_uint(port, plen, 1, 65535, &v) != 0)
            return v4_err_set(err, V4_ERR_CONFIG, where, "port '%.*s' is not a number in 1..65535",
                              (int)(plen > 16 ? 16 : plen), port);
        u->port = (int)v;
    }

    /* [/db] */
    u->db = 0;
    if (*rest == '/') {
        const char *d = rest + 1;
        size_t dlen = strcspn(d, "?#");
        if (dlen > 0) {
            long v;
            if (parse_uint(d, dlen, 0, 2147483647L, &v) != 0)
                return v4_err_set(err, V4_ERR_CONFIG, where,
                                  "database '%.*s' is not a number in 0..2147483647",
                                  (int)(dlen > 16 ? 16 : dlen), d);
            u->db = (int)v;
        }
        rest = d + dlen;
    }
    if (*rest == '?' || *rest == '#')
        return v4_err_set(err, V4_ERR_CONFIG, where, "query strings and fragments are not supported ('%c...')",
                          *rest);
    return 0;
}

int v4_redis_url_parse(const char *url, char *host, size_t hn, int *port, char *password, size_t pn,
                       int *db, v4_error *err)
{
    v4_redis_url u;
    if (v4_redis_url_parse_full(url, &u, err) != 0)
        return -1;
    char where[300];
    v4_redis_url_mask(url, where, sizeof where);
    if (!host || strlen(u.host) >= hn)
        return v4_err_set(err, V4_ERR_CONFIG, where, "host does not fit in %zu bytes", hn);
    if (u.password[0] && (!password || strlen(u.password) >= pn)) {
        memset(u.password, 0, sizeof u.password);
        return v4_err_set(err, V4_ERR_CONFIG, where, "password does not fit in %zu bytes", pn);
    }
    strcpy(host, u.host);
    if (password && pn)
        strcpy(password, u.password);
    if (port)
        *port = u.port;
    if (db)
        *db = u.db;
    memset(u.password, 0, sizeof u.password);
    return 0;
}

/* Describe the last I/O error of c: a read/write timeout reads as such. */
static void ctx_reason(const redisContext *c, long timeout_ms, char *out, size_t n)
{
    if (c->err == REDIS_ERR_IO && (strstr(c->errstr, "temporarily unavailable") || strstr(c->errstr, "timed out")))
        snprintf(out, n, "no answer within %ld ms", timeout_ms);
    else if (c->err == REDIS_ERR_EOF)
        snprintf(out, n, "server closed the connection");
    else
        snprintf(out, n, "%s", c->errstr[0] ? c->errstr : "unknown error");
}

/* One command; 0 ok (reply not an error), -1 + err. */
static int handshake_cmd(redisContext *c, int argc, const char **argv, const char *what, const char *where,
                         long timeout_ms, v4_error *err)
{
    redisReply *r = redisCommandArgv(c, argc, argv, NULL);
    if (!r) {
        char reason[160];
        ctx_reason(c, timeout_ms, reason, sizeof reason);
        return v4_err_set(err, V4_ERR_IO, where, "%s failed: %s", what, reason);
    }
    int rc = 0;
    if (r->type == REDIS_REPLY_ERROR)
        rc = v4_err_set(err, V4_ERR_IO, where, "%s refused: %.*s", what, (int)(r->len > 200 ? 200 : r->len),
                        r->str);
    freeReplyObject(r);
    return rc;
}

redisContext *v4_redis_connect(const char *url, long timeout_ms, v4_error *err)
{
    v4_redis_url u;
    if (v4_redis_url_parse_full(url, &u, err) != 0)
        return NULL;
    if (timeout_ms <= 0)
        timeout_ms = 1000;
    char where[300];
    v4_redis_url_mask(url, where, sizeof where);
    struct timeval tv = { .tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000 };
    redisContext *c = redisConnectWithTimeout(u.host, u.port, tv);
    if (!c) {
        memset(&u, 0, sizeof u);
        v4_err_set(err, V4_ERR_NOMEM, where, "cannot allocate a Redis context");
        return NULL;
    }
    if (c->err) {
        char reason[160];
        ctx_reason(c, timeout_ms, reason, sizeof reason);
        v4_err_set(err, V4_ERR_IO, where, "cannot connect to %s:%d: %s", u.host, u.port, reason);
        goto fail;
    }
    if (redisSetTimeout(c, tv) != REDIS_OK) {
        v4_err_set(err, V4_ERR_IO, where, "cannot set the %ld ms timeout: %s", timeout_ms, c->errstr);
        goto fail;
    }
    if (redisEnableKeepAlive(c) != REDIS_OK) {
        v4_err_set(err, V4_ERR_IO, where, "cannot enable TCP keepalive: %s", c->errstr);
        goto fail;
    }
    int round_trips = 0;
    if (u.password[0]) {
        const char *argv[3] = { "AUTH", u.user, u.password };
        int rc = u.user[0] ? handshake_cmd(c, 3, argv, "AUTH", where, timeout_ms, err)
                           : (argv[1] = u.password, handshake_cmd(c, 2, argv, "AUTH", where, timeout_ms, err));
        if (rc != 0)
            goto fail;
        round_trips++;
    }
    if (u.db != 0) {
        char dbs[16];
        snprintf(dbs, sizeof dbs, "%d", u.db);
        const char *argv[2] = { "SELECT", dbs };
        if (handshake_cmd(c, 2, argv, "SELECT", where, timeout_ms, err) != 0)
            goto fail;
        round_trips++;
    }
    if (round_trips == 0) {
        const char *argv[1] = { "PING" };
        if (handshake_cmd(c, 1, argv, "PING", where, timeout_ms, err) != 0)
            goto fail;
    }
    memset(&u, 0, sizeof u);
    return c;
fail:
    memset(&u, 0, sizeof u);
    redisFree(c);
    return NULL;
}
