/* service.c - the AMQP thread: its main loop (connect with backoff, run the posted
 * request, otherwise sleep in poll() ≤ 100 ms and service both links), the dispatch of
 * one request, and v4q_service_start / v4q_service_free.  See service.h for the
 * contract and service_internal.h for the state, the locking and the other files.
 * Thread: service_main runs on the AMQP thread; start/free on the owner's thread.
 */
#include "service.h"

#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "service_internal.h"

static void run_request(v4q_service *s, v4q_request *q)
{
    q->rc = -1;
    if (q->kind == V4Q_REQ_STOP) {
        v4q_cancel_consumer(s, q);
        return;
    }
    pthread_mutex_lock(&s->mu);
    int stale = q->d->generation != s->generation;
    pthread_mutex_unlock(&s->mu);
    if (!s->connected || stale) {
        v4_err_set(&q->err, V4_ERR_IO, "amqp", "the delivery belongs to a lost connection (the broker requeued it)");
        return;
    }
    if (q->kind == V4Q_REQ_REQUEUE || q->kind == V4Q_REQ_REJECT) {
        q->rc = v4q_send_nack(s, q->d, q->kind == V4Q_REQ_REQUEUE);
        return;
    }
    int fault_exit = 0;
    for (int i = 0; i < q->n; i++) {   /* every message confirmed (or diverted) before the one ack */
        const v4q_message *m = &q->m[i];
        int pr = v4q_publish_confirmed(s, m, &q->err);
        if (pr == 2 && m->divert_unroutable) {
            v4_error returned = q->err;
            pr = v4q_publish_unroutable(s, m, &q->err);
            if (pr == 0) {
                q->diverted |= 1u << i;
                v4q_logf(s, 2, "amqp: %s; republished to '%s'", returned.msg, s->cfg.unroutable_queue);
                continue;
            }
            if (pr > 0)
                v4q_logf(s, 0, "amqp: %s, and so was its copy to '%s' (%s): the task is requeued", returned.msg,
                         s->cfg.unroutable_queue, q->err.msg);
        } else if (pr == 2) {
            v4q_logf(s, 0, "amqp: message returned by the broker: %s: the task is requeued", q->err.msg);
        }
        if (pr > 0) {
            v4q_send_nack(s, q->d, 1);
            return;
        }
        if (pr < 0)
            return;
        fault_exit |= m->fault_exit_before_ack;
    }
    if (fault_exit) {   /* test hook, see service.h (R13) */
        v4q_logf(s, 0, "amqp: fault_exit_before_ack: result confirmed, exiting with status 86 before the ack");
        _exit(86);
    }
    if (v4q_send_ack(s, q->d)) {
        v4_err_set(&q->err, V4_ERR_IO, "amqp ack", "cannot send the ack");
        return;
    }
    q->rc = 0;
}

/* Sleep until either socket is readable, a request is posted, or timeout_ms passes. */
static void wait_io(v4q_service *s, int timeout_ms)
{
    struct pollfd p[3];
    int n = 0;
    p[n++] = (struct pollfd){s->wake[0], POLLIN, 0};
    if (s->connected) {
        if (amqp_frames_enqueued(s->cons.conn) || amqp_data_in_buffer(s->cons.conn) ||
            amqp_frames_enqueued(s->pub.conn) || amqp_data_in_buffer(s->pub.conn))
            return;
        p[n++] = (struct pollfd){amqp_get_sockfd(s->cons.conn), POLLIN, 0};
        p[n++] = (struct pollfd){amqp_get_sockfd(s->pub.conn), POLLIN, 0};
    }
    poll(p, (nfds_t)n, timeout_ms);
    char buf[64];
    while (read(s->wake[0], buf, sizeof buf) > 0)
        ;
}

/* Answer the posted request (the AMQP thread is done with it). */
static void request_done(v4q_service *s, v4q_request *q)
{
    pthread_mutex_lock(&s->mu);
    q->done = 1;
    s->req = NULL;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void *service_main(void *arg)
{
    v4q_service *s = arg;
    char masked[V4_CFG_STR];
    v4_mask_url(s->cfg.amqp_url, masked, sizeof masked);
    for (;;) {
        pthread_mutex_lock(&s->mu);
        int quit = s->quit;
        v4q_request *q = s->req;
        pthread_mutex_unlock(&s->mu);
        if (quit)
            break;
        if (!s->connected) {
            v4_error err = {0};
            if (v4q_connect_all(s, &err) == 0) {
                v4q_logf(s, 1, "amqp: connected to %s (queue '%s', urgent queue '%s', cancel exchange '%s', prefetch %d "
                         "per lane, heartbeat %d s)", masked, s->cfg.task_queue,
                         s->cfg.urgent_queue[0] ? s->cfg.urgent_queue : "off",
                         s->cfg.cancel_exchange[0] ? s->cfg.cancel_exchange : "off", s->cfg.prefetch,
                         s->cfg.heartbeat_s);
            } else {
                v4q_logf(s, 0, "amqp: cannot connect to %s: %s: %s", masked, err.where, err.msg);
                if (q) {   /* the delivery is gone with the old connection: answer at once */
                    v4_err_set(&q->err, V4_ERR_IO, "amqp", "not connected");
                    q->rc = -1;
                    request_done(s, q);
                }
                v4q_backoff(s);
                continue;
            }
        }
        if (q) {
            run_request(s, q);
            request_done(s, q);
            continue;
        }
        wait_io(s, 100);   /* <= 100 ms between library calls: heartbeats keep flowing */
        v4q_poll_consumer(s, (struct timeval){0, 0});
        v4q_poll_publisher(s);
    }
    if (s->connected) {
        v4q_link_free(&s->cons);
        v4q_link_free(&s->pub);
        s->connected = 0;
    }
    return NULL;
}

v4q_service *v4q_service_start(const v4_worker_config *cfg, v4q_log_fn log, void *log_ud, v4_error *err)
{
    v4q_service *s = calloc(1, sizeof *s);
    if (!s) {
        v4_err_set(err, V4_ERR_NOMEM, "amqp", "out of memory");
        return NULL;
    }
    s->cfg = *cfg;
    s->log = log;
    s->log_ud = log_ud;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    s->rnd = (unsigned)(ts.tv_nsec ^ ts.tv_sec);
    s->cons.dead = s->pub.dead = 1;
    if (cfg->cancel_exchange[0] && !(s->cancels = v4q_cancel_set_new(cfg->cancel_max, (double)cfg->cancel_ttl_s))) {
        free(s);
        v4_err_set(err, V4_ERR_NOMEM, "V4_CANCEL_MAX", "out of memory for %d cancelled ids", cfg->cancel_max);
        return NULL;
    }
    if (pipe(s->wake)) {
        v4q_cancel_set_free(s->cancels);
        free(s);
        v4_err_set(err, V4_ERR_IO, "amqp", "cannot create the wake-up pipe");
        return NULL;
    }
    fcntl(s->wake[0], F_SETFL, O_NONBLOCK);
    fcntl(s->wake[1], F_SETFL, O_NONBLOCK);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->thread, NULL, service_main, s)) {
        close(s->wake[0]);
        close(s->wake[1]);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        v4q_cancel_set_free(s->cancels);
        free(s);
        v4_err_set(err, V4_ERR_INTERNAL, "amqp", "cannot start the AMQP thread");
        return NULL;
    }
    return s;
}

void v4q_service_free(v4q_service *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->quit = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (write(s->wake[1], "q", 1) < 0) {
        /* full pipe: a wake-up is already pending */
    }
    pthread_join(s->thread, NULL);
    close(s->wake[0]);
    close(s->wake[1]);
    for (int i = 0; i < s->box_n; i++)
        v4q_delivery_free(s->box[i]);
    v4q_cancel_set_free(s->cancels);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}
