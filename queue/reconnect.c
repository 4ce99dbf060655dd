/* reconnect.c - bring both links up (publisher: topology + confirm mode; consumer:
 * basic.qos + the consumers of the cancel, task, urgent and own affinity queues), drop them, and the
 * backoff between attempts.
 *
 * Every successful connect and every disconnect bumps the generation, so deliveries
 * of an older connection are never acked/nacked on a new channel (delivery tags are
 * per channel).  Backoff: 200 ms doubling up to V4Q_BACKOFF_MAX_S (10 s), times a
 * jitter factor in [0.5, 1], slept on the condition variable (woken early by quit or
 * a request).  The cap bounds how long the worker stays idle after the broker is back
 * (checklist R7: consumption resumes within 15 s of a broker restart); with 30 s a
 * restart longer than ~13 s could leave the fleet idle for up to 30 s.
 * Thread: the AMQP thread.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "service_internal.h"
#include "topology.h"

#define V4Q_BACKOFF_MAX_S 10.0

static int consume(v4q_service *s, const char *queue, int no_ack, char *tag, size_t tag_cap, v4_error *err)
{
    amqp_basic_consume_ok_t *ok = amqp_basic_consume(s->cons.conn, V4Q_CHANNEL, amqp_cstring_bytes(queue),
                                                     amqp_empty_bytes, 0, no_ack, 0, amqp_empty_table);
    if (v4q_reply_check(&s->cons, amqp_get_rpc_reply(s->cons.conn), queue, err))
        return -1;
    snprintf(tag, tag_cap, "%.*s", (int)ok->consumer_tag.len, (const char *)ok->consumer_tag.bytes);
    return 0;
}

/* The consumers of the new consumer link: first the cancel queue (declared and bound
 * here: exclusive to this connection, so that a cancel published once a task can reach
 * this worker is not missed), then the task queue, the urgent queue and (fleet
 * affinity) this worker's own queue. */
static int start_consumers(v4q_service *s, v4_error *err)
{
    s->consumer_tag[0] = s->urgent_tag[0] = s->affinity_tag[0] = s->cancel_tag[0] = s->cancel_queue[0] = 0;
    if (s->cfg.cancel_exchange[0]) {
        /* this connection's own queue on the fanout (gone with the connection; no acks: a
         * cancel lost with a connection is as if it had come before this one started) */
        amqp_queue_declare_ok_t *q = amqp_queue_declare(s->cons.conn, V4Q_CHANNEL, amqp_empty_bytes, 0, 0, 1, 1,
                                                        amqp_empty_table);
        if (v4q_reply_check(&s->cons, amqp_get_rpc_reply(s->cons.conn), "cancel queue", err))
            return -1;
        snprintf(s->cancel_queue, sizeof s->cancel_queue, "%.*s", (int)q->queue.len, (const char *)q->queue.bytes);
        amqp_queue_bind(s->cons.conn, V4Q_CHANNEL, amqp_cstring_bytes(s->cancel_queue),
                        amqp_cstring_bytes(s->cfg.cancel_exchange), amqp_empty_bytes, amqp_empty_table);
        if (v4q_reply_check(&s->cons, amqp_get_rpc_reply(s->cons.conn), s->cfg.cancel_exchange, err) ||
            consume(s, s->cancel_queue, 1, s->cancel_tag, sizeof s->cancel_tag, err))
            return -1;
    }
    pthread_mutex_lock(&s->mu);
    int stopped = s->stopped;
    pthread_mutex_unlock(&s->mu);
    if (stopped)
        return 0;
    return consume(s, s->cfg.task_queue, 0, s->consumer_tag, sizeof s->consumer_tag, err) ||
                   (s->cfg.urgent_queue[0] &&
                    consume(s, s->cfg.urgent_queue, 0, s->urgent_tag, sizeof s->urgent_tag, err)) ||
                   (s->cfg.affinity_queue[0] &&
                    consume(s, s->cfg.affinity_queue, 0, s->affinity_tag, sizeof s->affinity_tag, err))
               ? -1
               : 0;
}

/* Drop both links; the broker requeues every unacked delivery. */
void v4q_disconnect(v4q_service *s, const v4_error *why)
{
    if (!s->connected)
        return;
    v4q_logf(s, 0, "amqp: connection lost (%s: %s); reconnecting", why->where, why->msg);
    v4q_link_free(&s->cons);
    v4q_link_free(&s->pub);
    s->connected = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->box_n; i++)
        v4q_delivery_free(s->box[i]);
    s->box_n = 0;
    s->generation++;   /* older tags are now meaningless */
    pthread_mutex_unlock(&s->mu);
}

int v4q_connect_all(v4q_service *s, v4_error *err)
{
    char name[200];
    const v4q_tls tls = {s->cfg.amqp_cacert, s->cfg.amqp_cert, s->cfg.amqp_key};
    snprintf(name, sizeof name, "v4fleet %s publisher", s->cfg.worker_id);
    if (v4q_link_open(&s->pub, s->cfg.amqp_url, &tls, s->cfg.heartbeat_s, name, err))
        return -1;
    if (v4q_declare_topology(&s->pub, &s->cfg, err))
        goto fail;
    amqp_confirm_select(s->pub.conn, V4Q_CHANNEL);
    if (v4q_reply_check(&s->pub, amqp_get_rpc_reply(s->pub.conn), "confirm.select", err))
        goto fail;
    s->pub_seq = 0;
    snprintf(name, sizeof name, "v4fleet %s consumer", s->cfg.worker_id);
    if (v4q_link_open(&s->cons, s->cfg.amqp_url, &tls, s->cfg.heartbeat_s, name, err))
        goto fail;
    amqp_basic_qos(s->cons.conn, V4Q_CHANNEL, 0, (uint16_t)s->cfg.prefetch, 0);
    if (v4q_reply_check(&s->cons, amqp_get_rpc_reply(s->cons.conn), "basic.qos", err))
        goto fail;
    if (start_consumers(s, err))
        goto fail;
    pthread_mutex_lock(&s->mu);
    s->generation++;
    pthread_mutex_unlock(&s->mu);
    s->connected = 1;
    s->attempt = 0;
    return 0;
fail:
    v4q_link_free(&s->cons);
    v4q_link_free(&s->pub);
    return -1;
}

/* Sleep the backoff delay on the condition variable (woken early by quit). */
void v4q_backoff(v4q_service *s)
{
    double base = 0.2 * (double)(1u << (s->attempt < 8 ? s->attempt : 8));
    if (base > V4Q_BACKOFF_MAX_S)
        base = V4Q_BACKOFF_MAX_S;
    double delay = base * (0.5 + 0.5 * (rand_r(&s->rnd) / (double)RAND_MAX));
    s->attempt++;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long ns = ts.tv_nsec + (long long)(delay * 1e9);
    ts.tv_sec += ns / 1000000000;
    ts.tv_nsec = ns % 1000000000;
    pthread_mutex_lock(&s->mu);
    while (!s->quit && !s->req && pthread_cond_timedwait(&s->cv, &s->mu, &ts) == 0)
        ;
    pthread_mutex_unlock(&s->mu);
}
