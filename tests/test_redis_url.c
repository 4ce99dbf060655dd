/* test_redis_url.c - unit cases for telemetry/redis_conn.c (Redis URL parser and masking)
 * and the pure parts of telemetry/util_redis.c (key names, option validation, start while
 * Redis is unreachable).  Needs no Redis: the Redis-backed checks are in
 * tests/test_util_redis.sh (tests/util_redis_check.c). */
#include <string.h>
#include <unistd.h>
#include <pthread.h>

#include "telemetry/util_redis.h"
#include "testutil.h"

static void ok_case(const char *url, const char *host, int port, const char *pw, int db, const char *user)
{
    char h[256], p[256];
    int po = -1, d = -1;
    v4_error e;
    v4_err_clear(&e);
    int rc = v4_redis_url_parse(url, h, sizeof h, &po, p, sizeof p, &d, &e);
    CHECK(rc == 0, "%s: unexpected error: %s (%s)", url, e.msg, e.where);
    if (rc != 0)
        return;
    CHECK(strcmp(h, host) == 0, "%s: host '%s' want '%s'", url, h, host);
    CHECK(po == port, "%s: port %d want %d", url, po, port);
    CHECK(strcmp(p, pw) == 0, "%s: password '%s' want '%s'", url, p, pw);
    CHECK(d == db, "%s: db %d want %d", url, d, db);
    v4_redis_url u;
    CHECK(v4_redis_url_parse_full(url, &u, &e) == 0 && strcmp(u.user, user) == 0, "%s: user '%s' want '%s'",
          url, u.user, user);
}

/* The message must contain want; neither message nor where may contain the password. */
static void bad_case(const char *url, const char *want)
{
    char h[256], p[256];
    int po, d;
    v4_error e;
    v4_err_clear(&e);
    int rc = v4_redis_url_parse(url, h, sizeof h, &po, p, sizeof p, &d, &e);
    CHECK(rc == -1, "%s: accepted", url ? url : "(null)");
    CHECK(e.code == V4_ERR_CONFIG, "%s: code %s", url ? url : "(null)", v4_errcode_name(e.code));
    CHECK(strstr(e.msg, want) != NULL, "%s: message '%s' lacks '%s'", url ? url : "(null)", e.msg, want);
    CHECK(!strstr(e.msg, "s3cret") && !strstr(e.where, "s3cret"), "%s: password leaked: %s / %s", url, e.msg,
          e.where);
}

static void mask_case(const char *url, const char *want)
{
    char out[256];
    v4_redis_url_mask(url, out, sizeof out);
    CHECK(strcmp(out, want) == 0, "mask(%s) = '%s' want '%s'", url, out, want);
}

typedef struct { pthread_mutex_t mu; char buf[8192]; } logbuf;

static void cap_log(void *ud, int level, const char *line)
{
    logbuf *lb = ud;
    pthread_mutex_lock(&lb->mu);
    size_t n = strlen(lb->buf);
    snprintf(lb->buf + n, sizeof lb->buf - n, "%d %s\n", level, line);
    pthread_mutex_unlock(&lb->mu);
}

int main(void)
{
    ok_case("redis://127.0.0.1:6379/0", "127.0.0.1", 6379, "", 0, "");
    ok_case("redis://localhost", "localhost", 6379, "", 0, "");
    ok_case("REDIS://localhost/", "localhost", 6379, "", 0, "");
    ok_case("redis://:s3cret@cache.example:7000/3", "cache.example", 7000, "s3cret", 3, "");
    ok_case("redis://alice:p%40ss%3Aw%2F@h/15", "h", 6379, "p@ss:w/", 15, "alice");
    ok_case("redis://[::1]:6380/2", "::1", 6380, "", 2, "");
    ok_case("redis://[::1]", "::1", 6379, "", 0, "");
    ok_case("redis://h:65535/2147483647", "h", 65535, "", 2147483647, "");
    ok_case("redis://u:a:b@h", "h", 6379, "a:b", 0, "u");   /* first ':' splits user and password */

    bad_case(NULL, "empty Redis URL");
    bad_case("", "empty Redis URL");
    bad_case("127.0.0.1:6379", "not a Redis URL");
    bad_case("http://h", "unsupported scheme 'http'");
    bad_case("rediss://:s3cret@h", "unsupported scheme 'rediss'");
    bad_case("unix:///tmp/redis.sock", "unsupported scheme 'unix'");
    bad_case("redis://", "empty host");
    bad_case("redis://:6379", "empty host");
    bad_case("redis://:s3cret@", "empty host");
    bad_case("redis://h:0", "port '0' is not a number in 1..65535");
    bad_case("redis://h:65536", "port '65536' is not a number in 1..65535");
    bad_case("redis://h:abc/0", "port 'abc' is not a number");
    bad_case("redis://h:-1", "port '-1' is not a number");
    bad_case("redis://h:", "empty port");
    bad_case("redis://h/x", "database 'x' is not a number");
    bad_case("redis://h/-1", "database '-1' is not a number");
    bad_case("redis://h/2147483648", "database '2147483648' is not a number");
    bad_case("redis://h/1/2", "database '1/2' is not a number");
    bad_case("redis://h/0?timeout=1", "query strings and fragments are not supported");
    bad_case("redis://h#x", "query strings and fragments are not supported");
    bad_case("redis://s3cret@h", "credentials without ':'");
    bad_case("redis://u:@h", "empty password");
    bad_case("redis://u:s3cret%zz@h", "bad %-escape in the password");
    bad_case("redis://u:s3cret%4@h", "bad %-escape in the password");
    bad_case("redis://u:s3cret%00@h", "bad %-escape in the password");
    bad_case("redis://u%g1:s3cret@h", "bad %-escape in the user name");
    bad_case("redis://::1:6379", "more than one ':'");
    bad_case("redis://fe80::1/0", "more than one ':'");
    bad_case("redis://[::1/0", "without closing ']'");
    bad_case("redis://[]:1", "empty IPv6 address");
    bad_case("redis://[::1]x", "unexpected text after ']'");
    bad_case("redis://h ost:1", "whitespace or control character at offset 9");
    {
        char longhost[400];
        memset(longhost, 'a', sizeof longhost);
        memcpy(longhost, "redis://", 8);
        longhost[sizeof longhost - 1] = '\0';
        bad_case(longhost, "host longer than 255 bytes");
    }
    {   /* buffers of the caller too small: error, not truncation */
        char h[4], p[4];
        int po, d;
        v4_error e;
        CHECK(v4_redis_url_parse("redis://hostname", h, sizeof h, &po, p, sizeof p, &d, &e) == -1 &&
                  strstr(e.msg, "host does not fit in 4 bytes"), "small host buffer: %s", e.msg);
        char h2[64];
        CHECK(v4_redis_url_parse("redis://:s3cret@h", h2, sizeof h2, &po, p, sizeof p, &d, &e) == -1 &&
                  strstr(e.msg, "password does not fit in 4 bytes") && !strstr(e.msg, "s3cret"),
              "small password buffer: %s", e.msg);
        CHECK(v4_redis_url_parse("redis://:s3cret@h", h2, sizeof h2, &po, NULL, 0, &d, &e) == -1,
              "password without a buffer accepted");
        CHECK(v4_redis_url_parse("redis://h", h2, sizeof h2, &po, NULL, 0, &d, &e) == 0,
              "no password buffer needed without a password: %s", e.msg);
    }
    {   /* where carries the masked URL */
        char h[64], p[64];
        int po, d;
        v4_error e;
        v4_redis_url_parse("redis://bob:s3cret@h:99999", h, sizeof h, &po, p, sizeof p, &d, &e);
        CHECK(strcmp(e.where, "redis://bob:***@h:99999") == 0, "where '%s'", e.where);
    }

    mask_case("redis://h:1/0", "redis://h:1/0");
    mask_case("redis://:s3cret@h:1/0", "redis://:***@h:1/0");
    mask_case("redis://bob:s3cret@h", "redis://bob:***@h");
    mask_case("redis://s3cret@h", "redis://***@h");
    mask_case("redis://bob:s3c@ret@h/2", "redis://bob:***@h/2");
    mask_case("s3cret@h", "***@h");

    /* key names */
    char k[256];
    v4_util_key_total(NULL, "dsv4", k, sizeof k);
    CHECK(strcmp(k, "v4:util:dsv4:total") == 0, "%s", k);
    v4_util_key_total("fleet", "dsv4", k, sizeof k);
    CHECK(strcmp(k, "fleet:util:dsv4:total") == 0, "%s", k);
    v4_util_key_bucket("v4", "m", 1700000000LL, 3600, k, sizeof k);   /* 2023-11-14 22:13:20 UTC */
    CHECK(strcmp(k, "v4:util:m:b:202311142200") == 0, "%s", k);
    v4_util_key_bucket("v4", "m", 1700000000LL, 60, k, sizeof k);
    CHECK(strcmp(k, "v4:util:m:b:202311142213") == 0, "%s", k);
    v4_util_key_bucket("v4", "m", 1700000000LL, 86400, k, sizeof k);
    CHECK(strcmp(k, "v4:util:m:b:202311140000") == 0, "%s", k);
    v4_util_key_bucket("v4", "m", 1700000000LL, 0, k, sizeof k);      /* default 3600 */
    CHECK(strcmp(k, "v4:util:m:b:202311142200") == 0, "%s", k);
    v4_util_key_bucket("v4", "m", 1700000400LL, 900, k, sizeof k);    /* 22:20:00 -> 22:15 */
    CHECK(strcmp(k, "v4:util:m:b:202311142215") == 0, "%s", k);
    v4_util_key_bucket("v4", "m", -1LL, 3600, k, sizeof k);           /* floor, not truncation */
    CHECK(strcmp(k, "v4:util:m:b:196912312300") == 0, "%s", k);
    v4_util_key_done(NULL, "task-42", k, sizeof k);
    CHECK(strcmp(k, "v4:done:task-42") == 0, "%s", k);
    v4_util_key_done("p", "x", k, 5);                                 /* truncates like snprintf */
    CHECK(strcmp(k, "p:do") == 0, "%s", k);

    /* option validation */
    v4_util_opts o = { .redis_url = "", .model = "m", .n_layers = 2, .n_experts = 4, .top_k = 2 };
    v4_error e;
    e.code = V4_ERR_IO;
    CHECK(v4_util_start(&o, NULL, NULL, &e) == NULL && e.code == V4_OK, "empty URL: disabled with code ok");
    o.redis_url = NULL;
    CHECK(v4_util_start(&o, NULL, NULL, &e) == NULL && e.code == V4_OK, "NULL URL: disabled with code ok");
    o.redis_url = "redis://:s3cret@h:0";
    CHECK(v4_util_start(&o, NULL, NULL, &e) == NULL && e.code == V4_ERR_CONFIG && strstr(e.msg, "port '0'") &&
              !strstr(e.where, "s3cret"), "bad URL: %s", e.msg);
    o.redis_url = "redis://127.0.0.1:1/0";
    o.model = "";
    CHECK(v4_util_start(&o, NULL, NULL, &e) == NULL && e.code == V4_ERR_CONFIG && strstr(e.msg, "model name"),
          "no model: %s", e.msg);
    o.model = "m";
    o.top_k = 5;
    CHECK(v4_util_start(&o, NULL, NULL, &e) == NULL && e.code == V4_ERR_CONFIG &&
              strstr(e.msg, "n_layers 2, n_experts 4, top_k 5"), "bad shape: %s", e.msg);
    o.top_k = 2;
    o.n_layers = 70000;
    o.n_experts = 70000;
    CHECK(v4_util_start(&o, NULL, NULL, &e) == NULL && e.code == V4_ERR_CONFIG && strstr(e.msg, "above the limit"),
          "huge shape: %s", e.msg);
    o.n_layers = 2;
    o.n_experts = 4;

    /* NULL handle (disabled) is accepted everywhere */
    uint32_t c8[8] = { 1, 0, 2, 0, 0, 0, 0, 3 };
    v4_util_stats st;
    CHECK(v4_util_record(NULL, "t", c8, 1) == 0, "record on a disabled handle");
    CHECK(v4_util_flush(NULL, 10) == 0, "flush on a disabled handle");
    v4_util_get_stats(NULL, &st);
    CHECK(st.recorded == 0, "stats of a disabled handle");
    v4_util_free(NULL);

    /* starts while Redis is unreachable (port 1: refused); record never waits; free drops */
    logbuf lb = { .mu = PTHREAD_MUTEX_INITIALIZER };
    o.redis_url = "redis://:s3cret@127.0.0.1:1/0";
    o.timeout_ms = 200;
    o.max_backlog = 2;
    v4_util *u = v4_util_start(&o, cap_log, &lb, &e);
    CHECK(u != NULL, "start with Redis down: %s", e.msg);
    if (u) {
        CHECK(v4_util_record(u, "a", c8, 4) == 0, "record a");
        CHECK(v4_util_record(u, "b", c8, 4) == 0, "record b");
        CHECK(v4_util_record(u, "c", c8, 4) == 1, "record c: backlog of 2 is full -> dropped");
        CHECK(v4_util_record(u, "", c8, 4) == -1, "empty task id");
        CHECK(v4_util_record(u, NULL, c8, 4) == -1, "NULL task id");
        CHECK(v4_util_record(u, "d", NULL, 4) == -1, "NULL counts");
        CHECK(v4_util_record(u, "d", c8, -1) == -1, "negative tokens");
        char longid[600];
        memset(longid, 'x', sizeof longid - 1);
        longid[sizeof longid - 1] = '\0';
        CHECK(v4_util_record(u, longid, c8, 1) == -1, "task id over 512 bytes");
        CHECK(v4_util_flush(u, 300) == 2, "flush with Redis down leaves 2 pending");
        usleep(300 * 1000);
        v4_util_get_stats(u, &st);
        CHECK(st.recorded == 2 && st.dropped == 1 && st.pending == 2 && st.sent == 0 && st.errors >= 1 &&
                  st.connects == 0, "stats: recorded %llu dropped %llu pending %llu errors %llu",
              (unsigned long long)st.recorded, (unsigned long long)st.dropped, (unsigned long long)st.pending,
              (unsigned long long)st.errors);
        v4_util_free(u);
        CHECK(strstr(lb.buf, "0 util-redis: redis://:***@127.0.0.1:1/0 unreachable: cannot connect to 127.0.0.1:1"),
              "log: %s", lb.buf);
        CHECK(strstr(lb.buf, "backlog full") != NULL, "log: %s", lb.buf);
        CHECK(strstr(lb.buf, "shutting down with 2 records not sent") != NULL, "log: %s", lb.buf);
        CHECK(strstr(lb.buf, "s3cret") == NULL, "password in the log: %s", lb.buf);
    }
    TEST_DONE();
}
