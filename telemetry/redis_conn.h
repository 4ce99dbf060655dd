/* redis_conn.h - Redis URLs and one synchronous, timed hiredis connection.
 *
 * URL form: redis://[user:password@]host[:port][/db]
 *   - password-only form redis://:password@host; user and password are percent-decoded
 *     (%XX), so a password may contain ':' '@' '/' when written as %3A %40 %2F;
 *   - host is a name, an IPv4 address or a bracketed IPv6 address ([::1]);
 *   - port 1..65535, default 6379; db 0..2147483647, default 0; "/" alone means db 0;
 *   - rejected with a precise message: another scheme (rediss:// TLS and unix:// are
 *     not supported), empty host, bad or out-of-range port or db, a query string or
 *     fragment, a bad %-escape, a user without a password, values too long for the
 *     caller's buffers.
 * Error messages and err->where carry the masked URL (v4_redis_url_mask: the password
 * is replaced by "***"); the password itself never appears in an error or log line.
 *
 * v4_redis_connect(): redisConnectWithTimeout + redisSetTimeout (connect and command
 * timeout timeout_ms) + TCP keepalive, then AUTH (user + password when the URL names a
 * user, Redis >= 6 ACLs) and SELECT when needed; when neither is needed one PING, so
 * that a returned context has always had one answered round trip (a SIGSTOPped server
 * still accepts TCP connections in the kernel; it would otherwise look connected).
 * Note: hiredis writes with write(2); the caller decides about SIGPIPE (the utilization
 * thread of util_redis.c blocks it in its own thread).
 *
 * Ownership: the returned redisContext belongs to the caller (redisFree).  All
 * functions are reentrant; a redisContext must be used by one thread at a time.
 */
#ifndef V4_REDIS_CONN_H
#define V4_REDIS_CONN_H

#include <stddef.h>

#include <hiredis/hiredis.h>

#include "../config/error.h"

#define V4_REDIS_DEFAULT_PORT 6379

typedef struct v4_redis_url {
    char host[256];
    int port;
    char user[128];      /* "" when the URL has no user */
    char password[256];  /* "" when the URL has no password */
    int db;
} v4_redis_url;

/* Full parse (with the ACL user).  0 ok, -1 + err (V4_ERR_CONFIG) otherwise. */
int v4_redis_url_parse_full(const char *url, v4_redis_url *out, v4_error *err);

/* The parser as `v4fleet stats` uses it: host, port, password and db into caller
 * buffers (password may be NULL when pn is 0 and the URL has none).  The ACL user is
 * checked but not returned; use v4_redis_url_parse_full or v4_redis_connect for it.
 * A value that does not fit its buffer is an error, never truncated. */
int v4_redis_url_parse(const char *url, char *host, size_t hn, int *port, char *password, size_t pn,
                       int *db, v4_error *err);

/* The URL with the password replaced by "***" (user kept), for logs and errors.
 * Works on malformed URLs too (everything between "//" and the last '@' before the host
 * part is masked when unsure). */
void v4_redis_url_mask(const char *url, char *out, size_t n);

/* Connected, authenticated, db-selected sync context with connect and command
 * timeouts of timeout_ms (<= 0: 1000); NULL + err (V4_ERR_CONFIG for a bad URL,
 * V4_ERR_IO for connection/AUTH/SELECT failures, message names host:port and the
 * reason) on failure. */
redisContext *v4_redis_connect(const char *url, long timeout_ms, v4_error *err);

#endif
