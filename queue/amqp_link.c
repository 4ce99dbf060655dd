/* amqp_link.c - connect, login with capabilities, channel open, reply checks.
 * See amqp_link.h.  Thread: the AMQP thread only. */
#include "amqp_link.h"

#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

static int lib_fail(v4_error *err, const char *what, int status)
{
    return v4_err_set(err, V4_ERR_IO, what, "%s", amqp_error_string2(status));
}

int v4q_link_open(v4q_link *l, const char *url, const v4q_tls *tls, int heartbeat_s, const char *conn_name,
                  v4_error *err)
{
    memset(l, 0, sizeof *l);
    char *copy = strdup(url);
    if (!copy)
        return v4_err_set(err, V4_ERR_NOMEM, "amqp", "out of memory");
    struct amqp_connection_info ci;
    amqp_default_connection_info(&ci);
    if (amqp_parse_url(copy, &ci) != AMQP_STATUS_OK) {
        free(copy);
        return v4_err_set(err, V4_ERR_CONFIG, "V4_AMQP_URL", "cannot parse the AMQP URL");
    }
    if (!ci.vhost || !*ci.vhost)
        ci.vhost = "/";   /* "amqp://host:port/" names the default vhost, as other clients read it */
    l->conn = amqp_new_connection();
    amqp_socket_t *s = ci.ssl ? amqp_ssl_socket_new(l->conn) : amqp_tcp_socket_new(l->conn);
    if (!l->conn || !s) {
        free(copy);
        v4q_link_free(l);
        return v4_err_set(err, V4_ERR_NOMEM, "amqp", "cannot create a connection");
    }
    if (ci.ssl) {
        const char *ca = tls ? tls->cacert : NULL, *cert = tls ? tls->cert : NULL, *key = tls ? tls->key : NULL;
        amqp_ssl_socket_set_ssl_versions(s, AMQP_TLSv1_2, AMQP_TLSvLATEST);
        const char *bad = NULL;
        if (ca && *ca && amqp_ssl_socket_set_cacert(s, ca) != AMQP_STATUS_OK)
            bad = "V4_AMQP_CACERT";
        else if (cert && *cert && amqp_ssl_socket_set_key(s, cert, key && *key ? key : cert) != AMQP_STATUS_OK)
            bad = "V4_AMQP_CERT";
        if (bad) {
            free(copy);
            v4q_link_free(l);
            return v4_err_set(err, V4_ERR_CONFIG, bad, "cannot load %s", !strcmp(bad, "V4_AMQP_CACERT") ?
                              "the CA file" : "the client certificate / key (V4_AMQP_CERT, V4_AMQP_KEY)");
        }
    }
    struct timeval tv = {5, 0};
    int st = amqp_socket_open_noblock(s, ci.host, ci.port, &tv);
    if (st != AMQP_STATUS_OK) {
        free(copy);
        v4q_link_free(l);
        return lib_fail(err, "amqp connect", st);
    }
    amqp_set_rpc_timeout(l->conn, &tv);
    amqp_table_entry_t caps[2], props[2];
    caps[0].key = amqp_cstring_bytes("consumer_cancel_notify");
    caps[0].value.kind = AMQP_FIELD_KIND_BOOLEAN;
    caps[0].value.value.boolean = 1;
    caps[1].key = amqp_cstring_bytes("connection.blocked");
    caps[1].value.kind = AMQP_FIELD_KIND_BOOLEAN;
    caps[1].value.value.boolean = 1;
    props[0].key = amqp_cstring_bytes("capabilities");
    props[0].value.kind = AMQP_FIELD_KIND_TABLE;
    props[0].value.value.table.num_entries = 2;
    props[0].value.value.table.entries = caps;
    props[1].key = amqp_cstring_bytes("connection_name");
    props[1].value.kind = AMQP_FIELD_KIND_UTF8;
    props[1].value.value.bytes = amqp_cstring_bytes(conn_name);
    amqp_table_t ptab = {2, props};
    amqp_rpc_reply_t r = amqp_login_with_properties(l->conn, ci.vhost, 0, 131072, heartbeat_s, &ptab,
                                                    AMQP_SASL_METHOD_PLAIN, ci.user, ci.password);
    free(copy);
    if (v4q_reply_check(l, r, "amqp login", err)) {
        v4q_link_free(l);
        return -1;
    }
    amqp_channel_open(l->conn, V4Q_CHANNEL);
    if (v4q_reply_check(l, amqp_get_rpc_reply(l->conn), "channel.open", err)) {
        v4q_link_free(l);
        return -1;
    }
    return 0;
}

void v4q_link_free(v4q_link *l)
{
    if (!l->conn)
        return;
    if (!l->dead) {
        struct timeval tv = {1, 0};
        amqp_set_rpc_timeout(l->conn, &tv);
        amqp_channel_close(l->conn, V4Q_CHANNEL, AMQP_REPLY_SUCCESS);
        amqp_connection_close(l->conn, AMQP_REPLY_SUCCESS);
    }
    amqp_destroy_connection(l->conn);
    l->conn = NULL;
    l->dead = 1;
}

static int server_close(v4q_link *l, amqp_method_number_t id, void *decoded, const char *what, v4_error *err)
{
    if (id == AMQP_CHANNEL_CLOSE_METHOD) {
        amqp_channel_close_t *m = decoded;
        amqp_channel_close_ok_t ok = {0};
        amqp_send_method(l->conn, V4Q_CHANNEL, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok);
        l->dead = 1;   /* simplest correct recovery: drop and reconnect the whole link */
        return v4_err_set(err, V4_ERR_IO, what, "server closed the channel: %u %.*s", m->reply_code,
                          (int)m->reply_text.len, (const char *)m->reply_text.bytes);
    }
    if (id == AMQP_CONNECTION_CLOSE_METHOD) {
        amqp_connection_close_t *m = decoded;
        amqp_connection_close_ok_t ok = {0};
        amqp_send_method(l->conn, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
        l->dead = 1;
        return v4_err_set(err, V4_ERR_IO, what, "server closed the connection: %u %.*s", m->reply_code,
                          (int)m->reply_text.len, (const char *)m->reply_text.bytes);
    }
    return 0;
}

int v4q_reply_check(v4q_link *l, amqp_rpc_reply_t r, const char *what, v4_error *err)
{
    switch (r.reply_type) {
    case AMQP_RESPONSE_NORMAL:
        return 0;
    case AMQP_RESPONSE_NONE:
        l->dead = 1;
        return v4_err_set(err, V4_ERR_IO, what, "missing RPC reply");
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
        l->dead = 1;
        return lib_fail(err, what, r.library_error);
    case AMQP_RESPONSE_SERVER_EXCEPTION:
        if (server_close(l, r.reply.id, r.reply.decoded, what, err))
            return -1;
        l->dead = 1;
        return v4_err_set(err, V4_ERR_IO, what, "unexpected server method 0x%08x", r.reply.id);
    }
    l->dead = 1;
    return v4_err_set(err, V4_ERR_INTERNAL, what, "unknown reply type");
}

int v4q_link_handle_method(v4q_link *l, const amqp_frame_t *f, v4_error *err)
{
    if (f->frame_type != AMQP_FRAME_METHOD)
        return 0;
    amqp_method_number_t id = f->payload.method.id;
    if (server_close(l, id, f->payload.method.decoded, "amqp", err))
        return -1;
    if (id == AMQP_BASIC_CANCEL_METHOD) {
        l->dead = 1;
        return v4_err_set(err, V4_ERR_IO, "amqp", "the broker cancelled the consumer (queue deleted?)");
    }
    if (id == AMQP_CONNECTION_BLOCKED_METHOD) {
        const amqp_connection_blocked_t *b = f->payload.method.decoded;
        l->blocked = 1;
        snprintf(l->blocked_reason, sizeof l->blocked_reason, "%.*s", (int)b->reason.len,
                 (const char *)b->reason.bytes);
    } else if (id == AMQP_CONNECTION_UNBLOCKED_METHOD) {
        l->blocked = 0;
        l->blocked_reason[0] = 0;
    }
    return 0;
}
