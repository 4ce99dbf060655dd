/* publisher.c - the publisher link: publish one message (persistent, mandatory,
 * message_id / correlation_id) and wait for the broker's confirm; republish a returned
 * (unroutable) one to the unroutable queue with headers saying why (service.h); service
 * the link between requests (heartbeats, dead-peer detection).
 *
 * The publisher socket is polled right before each publish so that a peer that went
 * silent is detected before amqp_basic_publish() (rabbitmq-c 0.11 #780 hangs there,
 * spec §2.4).  While waiting for the confirm (≤ 50 ms per library call) the consumer
 * link is polled too, so its heartbeats keep flowing.  No confirm within
 * confirm_timeout_ms, or any link failure: both links are dropped (the broker then
 * requeues the delivery; it is never acked).  After a confirm timeout the publisher
 * link is dropped without a close handshake: a broker that did not confirm is frozen
 * or has blocked the connection (resource alarm) and does not read its socket, so a
 * close would only wait for the RPC timeout.
 * Resource alarms: while the broker blocks the publisher connection (connection.blocked,
 * advertised at login; rabbitmq-c 0.11 itself ignores it) the confirm clock is
 * suspended: a broker-wide alarm is not cured by reconnecting, and dropping the links
 * would requeue the task, re-run it and count a delivery against x-delivery-limit
 * (observed with a 9 s memory alarm: six deliveries, then the valid task was
 * dead-lettered).  The delivery stays unacked, both links keep being serviced; after
 * connection.unblocked the broker reads the pending publish and the full confirm timeout
 * applies again.  The wait stays bounded by link failures and, ultimately, by the
 * broker's consumer_timeout on the unacked delivery (a channel.close that ends it).
 * Thread: the AMQP thread.
 */
#include <stdio.h>

#include "service_internal.h"

/* A method frame outside a confirm: close / cancel / blocked (see amqp_link.h); logs
 * blocked <-> unblocked transitions of the publisher.  0 harmless, -1 drop the links. */
static int pub_method(v4q_service *s, const amqp_frame_t *f, v4_error *err)
{
    int was = s->pub.blocked;
    if (v4q_link_handle_method(&s->pub, f, err))
        return -1;
    if (s->pub.blocked && !was)
        v4q_logf(s, 0, "amqp: the broker blocked the publisher connection (%s): confirm timeout suspended, "
                 "the task stays unacked until it unblocks", s->pub.blocked_reason);
    else if (was && !s->pub.blocked)
        v4q_logf(s, 1, "amqp: the broker unblocked the publisher connection");
    return 0;
}

/* Service the publisher link without waiting (heartbeats; detects a dead peer). */
void v4q_poll_publisher(v4q_service *s)
{
    if (!s->connected)
        return;
    amqp_frame_t f;
    struct timeval zero = {0, 0};
    v4_error err = {0};
    amqp_maybe_release_buffers(s->pub.conn);
    int st = amqp_simple_wait_frame_noblock(s->pub.conn, &f, &zero);
    if (st == AMQP_STATUS_TIMEOUT)
        return;
    if (st != AMQP_STATUS_OK) {
        v4_err_set(&err, V4_ERR_IO, "amqp publisher", "%s", amqp_error_string2(st));
        v4q_disconnect(s, &err);
        return;
    }
    if (pub_method(s, &f, &err))
        v4q_disconnect(s, &err);
}

/* Publish m's body and properties to exchange / routing key with the given headers
 * (NULL: none) + wait for the confirm.  0 confirmed, 1 nacked, 2 returned, -1 link failure. */
static int publish_to(v4q_service *s, const v4q_message *m, const char *exchange, const char *routing_key,
                      const amqp_table_t *headers, v4_error *err)
{
    v4q_poll_publisher(s);   /* #780 guard: detect a dead peer before publishing */
    if (!s->connected)
        return v4_err_set(err, V4_ERR_IO, "amqp publish", "not connected");
    amqp_basic_properties_t p = {0};
    p._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG;
    if (headers) {
        p._flags |= AMQP_BASIC_HEADERS_FLAG;
        p.headers = *headers;
    }
    p.content_type = amqp_cstring_bytes("application/json");
    p.delivery_mode = 2;
    if (m->message_id) {
        p._flags |= AMQP_BASIC_MESSAGE_ID_FLAG;
        p.message_id = amqp_cstring_bytes(m->message_id);
    }
    if (m->correlation_id) {
        p._flags |= AMQP_BASIC_CORRELATION_ID_FLAG;
        p.correlation_id = amqp_cstring_bytes(m->correlation_id);
    }
    amqp_bytes_t body = {m->len, (void *)m->body};
    int st = amqp_basic_publish(s->pub.conn, V4Q_CHANNEL, amqp_cstring_bytes(exchange),
                                amqp_cstring_bytes(routing_key), 1, 0, &p, body);
    if (st != AMQP_STATUS_OK) {
        v4_err_set(err, V4_ERR_IO, "amqp publish", "%s", amqp_error_string2(st));
        v4q_disconnect(s, err);
        return -1;
    }
    uint64_t seq = ++s->pub_seq;
    int returned = 0;
    double deadline = v4q_now_s() + s->cfg.confirm_timeout_ms / 1000.0;
    while (v4q_now_s() < deadline) {
        if (s->pub.blocked)   /* resource alarm: the confirm clock does not run (see above) */
            deadline = v4q_now_s() + s->cfg.confirm_timeout_ms / 1000.0;
        amqp_frame_t f;
        struct timeval tv = {0, 50000};
        st = amqp_simple_wait_frame_noblock(s->pub.conn, &f, &tv);
        if (st == AMQP_STATUS_TIMEOUT) {
            v4q_poll_consumer(s, (struct timeval){0, 0});
            if (!s->connected)
                return v4_err_set(err, V4_ERR_IO, "amqp", "consumer connection lost during the confirm wait");
            continue;
        }
        if (st != AMQP_STATUS_OK) {
            v4_err_set(err, V4_ERR_IO, "amqp confirm", "%s", amqp_error_string2(st));
            v4q_disconnect(s, err);
            return -1;
        }
        if (f.frame_type != AMQP_FRAME_METHOD)
            continue;
        amqp_method_number_t id = f.payload.method.id;
        if (id == AMQP_BASIC_ACK_METHOD || id == AMQP_BASIC_NACK_METHOD) {
            uint64_t tag;
            int multiple;
            if (id == AMQP_BASIC_ACK_METHOD) {
                amqp_basic_ack_t *a = f.payload.method.decoded;
                tag = a->delivery_tag;
                multiple = a->multiple;
            } else {
                amqp_basic_nack_t *a = f.payload.method.decoded;
                tag = a->delivery_tag;
                multiple = a->multiple;
            }
            if (tag == seq || (multiple && tag >= seq)) {
                if (id == AMQP_BASIC_NACK_METHOD)
                    return v4_err_set(err, V4_ERR_IO, "amqp confirm", "the broker nacked the message"), 1;
                return returned ? 2 : 0;
            }
            continue;
        }
        if (id == AMQP_BASIC_RETURN_METHOD) {
            amqp_basic_return_t *r = f.payload.method.decoded;
            v4_err_set(err, V4_ERR_IO, "amqp publish", "unroutable: %u %.*s (exchange '%s', routing key '%s')",
                       r->reply_code, (int)r->reply_text.len, (const char *)r->reply_text.bytes, exchange,
                       routing_key);
            snprintf(s->last_return, sizeof s->last_return, "%u %.*s", r->reply_code, (int)r->reply_text.len,
                     (const char *)r->reply_text.bytes);
            v4q_logf(s, 2, "amqp: message returned by the broker: %s", err->msg);
            returned = 1;
            amqp_message_t msg;
            amqp_rpc_reply_t rr = amqp_read_message(s->pub.conn, V4Q_CHANNEL, &msg, 0);
            if (rr.reply_type != AMQP_RESPONSE_NORMAL) {
                v4_error e2 = {0};
                v4_err_set(&e2, V4_ERR_IO, "amqp publish", "cannot read a returned message");
                v4q_disconnect(s, &e2);
                return -1;
            }
            amqp_destroy_message(&msg);
            continue;
        }
        if (pub_method(s, &f, err)) {
            v4q_disconnect(s, err);
            return -1;
        }
    }
    v4_err_set(err, V4_ERR_IO, "amqp confirm", "no confirm within %ld ms", s->cfg.confirm_timeout_ms);
    s->pub.dead = 1;   /* no close handshake with a broker that does not answer */
    v4q_disconnect(s, err);
    return -1;
}

int v4q_publish_confirmed(v4q_service *s, const v4q_message *m, v4_error *err)
{
    return publish_to(s, m, m->exchange, m->routing_key, NULL, err);
}

static amqp_table_entry_t str_entry(const char *key, const char *value)
{
    amqp_table_entry_t e;
    e.key = amqp_cstring_bytes(key);
    e.value.kind = AMQP_FIELD_KIND_UTF8;
    e.value.value.bytes = amqp_cstring_bytes(value ? value : "");
    return e;
}

int v4q_publish_unroutable(v4q_service *s, const v4q_message *m, v4_error *err)
{
    const char *why = s->last_return;
    char reason[1024];
    if (m->reply_to)
        snprintf(reason, sizeof reason, "reply_to queue '%s' not found (the broker returned the result: %s)", m->reply_to, why);
    else
        snprintf(reason, sizeof reason, "no route from exchange '%s' with routing key '%s' (the broker returned the message: %s)", m->exchange,
                 m->routing_key, why);
    amqp_table_entry_t e[5];
    int n = 0;
    e[n++] = str_entry("x-unroutable-reason", reason);
    e[n++] = str_entry("x-original-exchange", m->exchange);
    e[n++] = str_entry("x-original-routing-key", m->routing_key);
    if (m->reply_to)
        e[n++] = str_entry("x-original-reply-to", m->reply_to);
    if (m->correlation_id)
        e[n++] = str_entry("x-original-correlation-id", m->correlation_id);
    amqp_table_t h = {n, e};
    return publish_to(s, m, "", s->cfg.unroutable_queue, &h, err);
}
