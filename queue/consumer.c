/* consumer.c - the consumer link (its consumers - the task queue, the urgent queue, the
 * cancel queue, with fleet affinity this worker's own queue - are started by reconnect.c):
 * take deliveries into the mailbox (marked urgent when they come from the urgent queue,
 * affinity when from the own queue), take cancel messages into the cancelled-id set, ack/nack
 * deliveries, cancel the task consumers (basic.cancel) and handle what arrives outside
 * deliveries (server channel.close -> close-ok, connection.close, basic.cancel, blocked).
 *
 * A delivery that cannot be taken (stopped, mailbox full, out of memory) is nacked
 * with requeue at once.  Acks/nacks are only sent for deliveries of the current
 * generation (tags of an older channel would be a 406 PRECONDITION_FAILED).
 * Thread: the AMQP thread.
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "service_internal.h"

static int is_tag(amqp_bytes_t b, const char *tag)
{
    return tag[0] && b.len == strlen(tag) && !memcmp(b.bytes, tag, b.len);
}

/* A message of the cancel queue: {"cancel": "<task id>"} -> the set (others logged). */
static void take_cancel(v4q_service *s, const amqp_envelope_t *env)
{
    json_error_t je;
    json_t *o = env->message.body.len <= 65536 ? json_loadb(env->message.body.bytes, env->message.body.len,
                                                            JSON_REJECT_DUPLICATES, &je) : NULL;
    json_t *id = json_object_get(o, "cancel");
    if (!json_is_string(id) || !json_string_length(id) || json_string_length(id) > 128) {
        v4q_logf(s, 0, "amqp: cancel message ignored: the body (%zu bytes) is not {\"cancel\": \"<task id>\"} "
                       "with an id of 1..128 bytes", env->message.body.len);
        json_decref(o);
        return;
    }
    pthread_mutex_lock(&s->mu);
    int rc = s->cancels ? v4q_cancel_set_add(s->cancels, json_string_value(id), json_string_length(id), v4q_now_s())
                        : -1;
    if (rc >= 0)
        s->cancel_epoch++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (rc < 0)
        v4q_logf(s, 0, "amqp: cancel of task '%s' dropped: out of memory", json_string_value(id));
    else
        v4q_logf(s, 1, "amqp: cancel of task '%s' received (remembered for %ld s)", json_string_value(id),
                 s->cfg.cancel_ttl_s);
    json_decref(o);
}

int v4q_send_nack(v4q_service *s, const v4q_delivery *d, int requeue)
{
    pthread_mutex_lock(&s->mu);
    int stale = d->generation != s->generation;
    pthread_mutex_unlock(&s->mu);
    if (!s->connected || stale)
        return -1;
    return amqp_basic_nack(s->cons.conn, V4Q_CHANNEL, d->tag, 0, requeue) == AMQP_STATUS_OK ? 0 : -1;
}

/* The caller has checked that d belongs to the current, live connection. */
int v4q_send_ack(v4q_service *s, const v4q_delivery *d)
{
    return amqp_basic_ack(s->cons.conn, V4Q_CHANNEL, d->tag, 0) == AMQP_STATUS_OK ? 0 : -1;
}

/* One round of the consumer link: take at most one delivery (waits up to tv). */
void v4q_poll_consumer(v4q_service *s, struct timeval tv)
{
    if (!s->connected)
        return;
    v4_error err = {0};
    amqp_envelope_t env;
    amqp_maybe_release_buffers(s->cons.conn);
    amqp_rpc_reply_t r = amqp_consume_message(s->cons.conn, &env, &tv, 0);
    if (r.reply_type == AMQP_RESPONSE_NORMAL && is_tag(env.consumer_tag, s->cancel_tag)) {
        take_cancel(s, &env);
        amqp_destroy_envelope(&env);
        return;
    }
    if (r.reply_type == AMQP_RESPONSE_NORMAL) {
        pthread_mutex_lock(&s->mu);
        uint64_t gen = s->generation;
        int take = !s->stopped && s->box_n < V4Q_MAILBOX;
        pthread_mutex_unlock(&s->mu);
        v4q_delivery *d = take ? v4q_delivery_from(&env, gen) : NULL;
        if (d) {
            d->urgent = is_tag(env.consumer_tag, s->urgent_tag);
            d->affinity = is_tag(env.consumer_tag, s->affinity_tag);
            pthread_mutex_lock(&s->mu);
            s->box[s->box_n++] = d;
            pthread_cond_broadcast(&s->cv);
            pthread_mutex_unlock(&s->mu);
            v4q_logf(s, 2, "amqp: delivery tag %llu (%zu bytes%s)", (unsigned long long)env.delivery_tag,
                     env.message.body.len, d->urgent ? ", urgent" : d->affinity ? ", affinity queue" : "");
        } else {
            amqp_basic_nack(s->cons.conn, V4Q_CHANNEL, env.delivery_tag, 0, 1);
        }
        amqp_destroy_envelope(&env);
        return;
    }
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_TIMEOUT)
        return;
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION && r.library_error == AMQP_STATUS_UNEXPECTED_STATE) {
        amqp_frame_t f;
        struct timeval zero = {0, 0};
        int st = amqp_simple_wait_frame_noblock(s->cons.conn, &f, &zero);
        if (st == AMQP_STATUS_TIMEOUT)
            return;
        if (st != AMQP_STATUS_OK) {
            v4_err_set(&err, V4_ERR_IO, "amqp consumer", "%s", amqp_error_string2(st));
            v4q_disconnect(s, &err);
            return;
        }
        if (v4q_link_handle_method(&s->cons, &f, &err))
            v4q_disconnect(s, &err);
        return;
    }
    v4_err_set(&err, V4_ERR_IO, "amqp consumer", "%s",
               r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION ? amqp_error_string2(r.library_error) : "server exception");
    v4q_disconnect(s, &err);
}

/* The stop request: no more deliveries are taken, basic.cancel of the task consumers
 * (the cancel consumer stays: a task running out its grace period can still be
 * cancelled), and the deliveries still in the mailbox (never handed out) are nacked
 * with requeue. */
void v4q_cancel_consumer(v4q_service *s, v4q_request *q)
{
    pthread_mutex_lock(&s->mu);
    s->stopped = 1;
    v4q_delivery *left[V4Q_MAILBOX];
    int n = s->box_n;
    memcpy(left, s->box, sizeof left[0] * (size_t)n);
    s->box_n = 0;
    pthread_mutex_unlock(&s->mu);
    char *tags[3] = {s->consumer_tag, s->urgent_tag, s->affinity_tag};
    for (int i = 0; i < 3; i++)
        if (s->connected && tags[i][0]) {
            amqp_basic_cancel(s->cons.conn, V4Q_CHANNEL, amqp_cstring_bytes(tags[i]));
            v4q_reply_check(&s->cons, amqp_get_rpc_reply(s->cons.conn), "basic.cancel", &q->err);
            tags[i][0] = 0;
        }
    for (int i = 0; i < n; i++) {
        v4q_send_nack(s, left[i], 1);
        v4q_delivery_free(left[i]);
    }
    v4q_logf(s, 1, "amqp: consumer cancelled, %d unstarted deliveries requeued", n);
    q->rc = 0;
}
