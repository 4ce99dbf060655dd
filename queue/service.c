/* service.c - the AMQP thread (see service.h for the design and the contract).
 *
 * Locking: s->mu guards the mailbox, the request slot, the flags and the generation.
 * The AMQP thread never holds s->mu during network I/O; callers hold it only to post a
 * request or take a delivery, then wait on a condition variable.
 * Thread: service_main runs on the AMQP thread; the public functions on any thread.
 */
#include "service.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "amqp_link.h"
#include "topology.h"

#define MAILBOX 64

enum req_kind { REQ_FINISH, REQ_REQUEUE, REQ_STOP };

typedef struct request {
    enum req_kind kind;
    const v4q_delivery *d;
    const v4q_message *m;
    int done, rc;
    v4_error err;
} request;

struct v4q_service {
    v4_worker_config cfg;
    v4q_log_fn log;
    void *log_ud;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;              /* mailbox / request / done / quit changes */
    v4q_delivery *box[MAILBOX];
    int box_n;
    request *req;                   /* pending request, NULL if none */
    int quit, stopped;              /* quit: thread exits; stopped: no more consuming */
    uint64_t generation;
    int wake[2];                    /* self-pipe: a request was posted (wakes poll()) */
    /* AMQP-thread-only state */
    v4q_link cons, pub;
    int connected, attempt;
    uint64_t pub_seq;
    unsigned rnd;
    char consumer_tag[160];
};

static void logf_(v4q_service *s, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void logf_(v4q_service *s, int level, const char *fmt, ...)
{
    if (!s->log || level > s->cfg.log_level)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    s->log(s->log_ud, level, line);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void v4q_delivery_free(v4q_delivery *d)
{
    if (!d)
        return;
    free(d->body);
    free(d->reply_to);
    free(d->correlation_id);
    free(d->message_id);
    free(d);
}

static char *dup_bytes(amqp_bytes_t b)
{
    char *p = malloc(b.len + 1);
    if (p) {
        if (b.len)
            memcpy(p, b.bytes, b.len);
        p[b.len] = 0;
    }
    return p;
}

static long long header_int(const amqp_basic_properties_t *p, const char *key)
{
    if (!(p->_flags & AMQP_BASIC_HEADERS_FLAG))
        return 0;
    for (int i = 0; i < p->headers.num_entries; i++) {
        const amqp_table_entry_t *e = &p->headers.entries[i];
        if (e->key.len != strlen(key) || memcmp(e->key.bytes, key, e->key.len))
            continue;
        switch (e->value.kind) {
        case AMQP_FIELD_KIND_I8: return e->value.value.i8;
        case AMQP_FIELD_KIND_U8: return e->value.value.u8;
        case AMQP_FIELD_KIND_I16: return e->value.value.i16;
        case AMQP_FIELD_KIND_U16: return e->value.value.u16;
        case AMQP_FIELD_KIND_I32: return e->value.value.i32;
        case AMQP_FIELD_KIND_U32: return e->value.value.u32;
        case AMQP_FIELD_KIND_I64: return e->value.value.i64;
        case AMQP_FIELD_KIND_U64: return (long long)e->value.value.u64;
        default: return 0;
        }
    }
    return 0;
}

static v4q_delivery *delivery_from(const amqp_envelope_t *env, uint64_t gen)
{
    v4q_delivery *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    const amqp_basic_properties_t *p = &env->message.properties;
    d->tag = env->delivery_tag;
    d->generation = gen;
    d->redelivered = env->redelivered;
    d->len = env->message.body.len;
    d->body = dup_bytes(env->message.body);
    if (p->_flags & AMQP_BASIC_REPLY_TO_FLAG)
        d->reply_to = dup_bytes(p->reply_to);
    if (p->_flags & AMQP_BASIC_CORRELATION_ID_FLAG)
        d->correlation_id = dup_bytes(p->correlation_id);
    if (p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG)
        d->message_id = dup_bytes(p->message_id);
    if (p->_flags & AMQP_BASIC_TIMESTAMP_FLAG)
        d->timestamp_s = (long long)p->timestamp;
    d->delivery_count = header_int(p, "x-delivery-count");
    if (!d->body || ((p->_flags & AMQP_BASIC_REPLY_TO_FLAG) && !d->reply_to) ||
        ((p->_flags & AMQP_BASIC_CORRELATION_ID_FLAG) && !d->correlation_id) ||
        ((p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) && !d->message_id)) {
        v4q_delivery_free(d);
        return NULL;
    }
    return d;
}

/* Drop both links; the broker requeues every unacked delivery. */
static void disconnect(v4q_service *s, const v4_error *why)
{
    if (!s->connected)
        return;
    logf_(s, 0, "amqp: connection lost (%s: %s); reconnecting", why->where, why->msg);
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

static int connect_all(v4q_service *s, v4_error *err)
{
    char name[200];
    snprintf(name, sizeof name, "v4fleet %s publisher", s->cfg.worker_id);
    if (v4q_link_open(&s->pub, s->cfg.amqp_url, s->cfg.heartbeat_s, name, err))
        return -1;
    if (v4q_declare_topology(&s->pub, &s->cfg, err))
        goto fail;
    amqp_confirm_select(s->pub.conn, V4Q_CHANNEL);
    if (v4q_reply_check(&s->pub, amqp_get_rpc_reply(s->pub.conn), "confirm.select", err))
        goto fail;
    s->pub_seq = 0;
    snprintf(name, sizeof name, "v4fleet %s consumer", s->cfg.worker_id);
    if (v4q_link_open(&s->cons, s->cfg.amqp_url, s->cfg.heartbeat_s, name, err))
        goto fail;
    amqp_basic_qos(s->cons.conn, V4Q_CHANNEL, 0, (uint16_t)s->cfg.prefetch, 0);
    if (v4q_reply_check(&s->cons, amqp_get_rpc_reply(s->cons.conn), "basic.qos", err))
        goto fail;
    pthread_mutex_lock(&s->mu);
    int stopped = s->stopped;
    pthread_mutex_unlock(&s->mu);
    if (!stopped) {
        amqp_basic_consume_ok_t *ok = amqp_basic_consume(s->cons.conn, V4Q_CHANNEL, amqp_cstring_bytes(s->cfg.task_queue),
                                                         amqp_empty_bytes, 0, 0, 0, amqp_empty_table);
        if (v4q_reply_check(&s->cons, amqp_get_rpc_reply(s->cons.conn), "basic.consume", err))
            goto fail;
        snprintf(s->consumer_tag, sizeof s->consumer_tag, "%.*s", (int)ok->consumer_tag.len,
                 (const char *)ok->consumer_tag.bytes);
    }
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
static void backoff(v4q_service *s)
{
    double base = 0.2 * (double)(1u << (s->attempt < 8 ? s->attempt : 8));
    if (base > 30)
        base = 30;
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

static int send_nack(v4q_service *s, const v4q_delivery *d, int requeue)
{
    pthread_mutex_lock(&s->mu);
    int stale = d->generation != s->generation;
    pthread_mutex_unlock(&s->mu);
    if (!s->connected || stale)
        return -1;
    return amqp_basic_nack(s->cons.conn, V4Q_CHANNEL, d->tag, 0, requeue) == AMQP_STATUS_OK ? 0 : -1;
}

/* One round of the consumer link: take at most one delivery (waits up to tv). */
static void poll_consumer(v4q_service *s, struct timeval tv)
{
    if (!s->connected)
        return;
    v4_error err = {0};
    amqp_envelope_t env;
    amqp_maybe_release_buffers(s->cons.conn);
    amqp_rpc_reply_t r = amqp_consume_message(s->cons.conn, &env, &tv, 0);
    if (r.reply_type == AMQP_RESPONSE_NORMAL) {
        pthread_mutex_lock(&s->mu);
        uint64_t gen = s->generation;
        int take = !s->stopped && s->box_n < MAILBOX;
        pthread_mutex_unlock(&s->mu);
        v4q_delivery *d = take ? delivery_from(&env, gen) : NULL;
        if (d) {
            pthread_mutex_lock(&s->mu);
            s->box[s->box_n++] = d;
            pthread_cond_broadcast(&s->cv);
            pthread_mutex_unlock(&s->mu);
            logf_(s, 2, "amqp: delivery tag %llu (%zu bytes)", (unsigned long long)env.delivery_tag, env.message.body.len);
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
            disconnect(s, &err);
            return;
        }
        if (v4q_link_handle_method(&s->cons, &f, &err))
            disconnect(s, &err);
        return;
    }
    v4_err_set(&err, V4_ERR_IO, "amqp consumer", "%s",
               r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION ? amqp_error_string2(r.library_error) : "server exception");
    disconnect(s, &err);
}

/* Service the publisher link without waiting (heartbeats; detects a dead peer). */
static void poll_publisher(v4q_service *s)
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
        disconnect(s, &err);
        return;
    }
    if (v4q_link_handle_method(&s->pub, &f, &err))
        disconnect(s, &err);
}

/* Publish + wait for the confirm.  0 confirmed, 1 returned or nacked, -1 link failure. */
static int publish_confirmed(v4q_service *s, const v4q_message *m, v4_error *err)
{
    poll_publisher(s);   /* #780 guard: detect a dead peer before publishing */
    if (!s->connected)
        return v4_err_set(err, V4_ERR_IO, "amqp publish", "not connected");
    amqp_basic_properties_t p = {0};
    p._flags = AMQP_BASIC_CONTENT_TYPE_FLAG | AMQP_BASIC_DELIVERY_MODE_FLAG;
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
    int st = amqp_basic_publish(s->pub.conn, V4Q_CHANNEL, amqp_cstring_bytes(m->exchange),
                                amqp_cstring_bytes(m->routing_key), 1, 0, &p, body);
    if (st != AMQP_STATUS_OK) {
        v4_err_set(err, V4_ERR_IO, "amqp publish", "%s", amqp_error_string2(st));
        disconnect(s, err);
        return -1;
    }
    uint64_t seq = ++s->pub_seq;
    int returned = 0;
    double deadline = now_s() + s->cfg.confirm_timeout_ms / 1000.0;
    while (now_s() < deadline) {
        amqp_frame_t f;
        struct timeval tv = {0, 50000};
        st = amqp_simple_wait_frame_noblock(s->pub.conn, &f, &tv);
        if (st == AMQP_STATUS_TIMEOUT) {
            poll_consumer(s, (struct timeval){0, 0});
            if (!s->connected)
                return v4_err_set(err, V4_ERR_IO, "amqp", "consumer connection lost during the confirm wait");
            continue;
        }
        if (st != AMQP_STATUS_OK) {
            v4_err_set(err, V4_ERR_IO, "amqp confirm", "%s", amqp_error_string2(st));
            disconnect(s, err);
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
                if (returned)
                    return 1;
                return 0;
            }
            continue;
        }
        if (id == AMQP_BASIC_RETURN_METHOD) {
            amqp_basic_return_t *r = f.payload.method.decoded;
            v4_err_set(err, V4_ERR_IO, "amqp publish", "unroutable: %u %.*s (exchange '%s', routing key '%s')",
                       r->reply_code, (int)r->reply_text.len, (const char *)r->reply_text.bytes, m->exchange,
                       m->routing_key);
            logf_(s, 0, "amqp: result returned by the broker: %s", err->msg);
            returned = 1;
            amqp_message_t msg;
            amqp_rpc_reply_t rr = amqp_read_message(s->pub.conn, V4Q_CHANNEL, &msg, 0);
            if (rr.reply_type != AMQP_RESPONSE_NORMAL) {
                v4_error e2 = {0};
                v4_err_set(&e2, V4_ERR_IO, "amqp publish", "cannot read a returned message");
                disconnect(s, &e2);
                return -1;
            }
            amqp_destroy_message(&msg);
            continue;
        }
        if (v4q_link_handle_method(&s->pub, &f, err)) {
            disconnect(s, err);
            return -1;
        }
    }
    v4_err_set(err, V4_ERR_IO, "amqp confirm", "no confirm within %ld ms", s->cfg.confirm_timeout_ms);
    disconnect(s, err);
    return -1;
}

static void run_request(v4q_service *s, request *q)
{
    q->rc = -1;
    if (q->kind == REQ_STOP) {
        pthread_mutex_lock(&s->mu);
        s->stopped = 1;
        v4q_delivery *left[MAILBOX];
        int n = s->box_n;
        memcpy(left, s->box, sizeof left[0] * (size_t)n);
        s->box_n = 0;
        pthread_mutex_unlock(&s->mu);
        if (s->connected && s->consumer_tag[0]) {
            amqp_basic_cancel(s->cons.conn, V4Q_CHANNEL, amqp_cstring_bytes(s->consumer_tag));
            v4q_reply_check(&s->cons, amqp_get_rpc_reply(s->cons.conn), "basic.cancel", &q->err);
        }
        for (int i = 0; i < n; i++) {
            send_nack(s, left[i], 1);
            v4q_delivery_free(left[i]);
        }
        logf_(s, 1, "amqp: consumer cancelled, %d unstarted deliveries requeued", n);
        q->rc = 0;
        return;
    }
    pthread_mutex_lock(&s->mu);
    int stale = q->d->generation != s->generation;
    pthread_mutex_unlock(&s->mu);
    if (!s->connected || stale) {
        v4_err_set(&q->err, V4_ERR_IO, "amqp", "the delivery belongs to a lost connection (the broker requeued it)");
        return;
    }
    if (q->kind == REQ_REQUEUE) {
        q->rc = send_nack(s, q->d, 1);
        return;
    }
    int pr = publish_confirmed(s, q->m, &q->err);
    if (pr == 1) {
        send_nack(s, q->d, 1);
        return;
    }
    if (pr < 0)
        return;
    if (amqp_basic_ack(s->cons.conn, V4Q_CHANNEL, q->d->tag, 0) != AMQP_STATUS_OK) {
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

static void *service_main(void *arg)
{
    v4q_service *s = arg;
    char masked[V4_CFG_STR];
    v4_mask_url(s->cfg.amqp_url, masked, sizeof masked);
    for (;;) {
        pthread_mutex_lock(&s->mu);
        int quit = s->quit;
        request *q = s->req;
        pthread_mutex_unlock(&s->mu);
        if (quit)
            break;
        if (!s->connected) {
            v4_error err = {0};
            if (connect_all(s, &err) == 0) {
                logf_(s, 1, "amqp: connected to %s (queue '%s', prefetch %d, heartbeat %d s)", masked,
                      s->cfg.task_queue, s->cfg.prefetch, s->cfg.heartbeat_s);
            } else {
                logf_(s, 0, "amqp: cannot connect to %s: %s: %s", masked, err.where, err.msg);
                if (q) {   /* the delivery is gone with the old connection: answer at once */
                    v4_err_set(&q->err, V4_ERR_IO, "amqp", "not connected");
                    q->rc = -1;
                    pthread_mutex_lock(&s->mu);
                    q->done = 1;
                    s->req = NULL;
                    pthread_cond_broadcast(&s->cv);
                    pthread_mutex_unlock(&s->mu);
                }
                backoff(s);
                continue;
            }
        }
        if (q) {
            run_request(s, q);
            pthread_mutex_lock(&s->mu);
            q->done = 1;
            s->req = NULL;
            pthread_cond_broadcast(&s->cv);
            pthread_mutex_unlock(&s->mu);
            continue;
        }
        wait_io(s, 100);   /* <= 100 ms between library calls: heartbeats keep flowing */
        poll_consumer(s, (struct timeval){0, 0});
        poll_publisher(s);
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
    if (pipe(s->wake)) {
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
        free(s);
        v4_err_set(err, V4_ERR_INTERNAL, "amqp", "cannot start the AMQP thread");
        return NULL;
    }
    return s;
}

int v4q_next(v4q_service *s, v4q_delivery **out, int timeout_ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long ns = ts.tv_nsec + (long long)timeout_ms * 1000000;
    ts.tv_sec += ns / 1000000000;
    ts.tv_nsec = ns % 1000000000;
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    while (!s->box_n && !s->stopped && !s->quit)
        if (pthread_cond_timedwait(&s->cv, &s->mu, &ts))
            break;
    if (s->box_n) {
        *out = s->box[0];
        memmove(s->box, s->box + 1, sizeof s->box[0] * (size_t)--s->box_n);
        rc = 1;
    } else if (s->stopped || s->quit) {
        rc = -1;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int submit(v4q_service *s, request *q)
{
    pthread_mutex_lock(&s->mu);
    while (s->req && !s->quit)
        pthread_cond_wait(&s->cv, &s->mu);
    if (s->quit) {
        pthread_mutex_unlock(&s->mu);
        return v4_err_set(&q->err, V4_ERR_IO, "amqp", "service stopped");
    }
    s->req = q;
    pthread_cond_broadcast(&s->cv);
    if (write(s->wake[1], "r", 1) < 0) {
        /* full pipe: a wake-up is already pending */
    }
    while (!q->done)
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    return q->rc;
}

int v4q_finish(v4q_service *s, const v4q_delivery *d, const v4q_message *m, v4_error *err)
{
    request q = {.kind = REQ_FINISH, .d = d, .m = m};
    int rc = submit(s, &q);
    if (rc && err)
        *err = q.err;
    return rc;
}

void v4q_requeue(v4q_service *s, const v4q_delivery *d)
{
    request q = {.kind = REQ_REQUEUE, .d = d};
    submit(s, &q);
}

void v4q_stop_consuming(v4q_service *s)
{
    request q = {.kind = REQ_STOP};
    if (submit(s, &q)) {   /* not connected: just stop taking deliveries */
        pthread_mutex_lock(&s->mu);
        s->stopped = 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
}

uint64_t v4q_generation(v4q_service *s)
{
    pthread_mutex_lock(&s->mu);
    uint64_t g = s->generation;
    pthread_mutex_unlock(&s->mu);
    return g;
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
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}
