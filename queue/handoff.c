/* handoff.c - the public calls of inference threads: take a delivery from the mailbox
 * (v4q_next: the oldest urgent one first), ask whether a task was cancelled
 * (v4q_cancelled) and hand one request at a time to the AMQP thread (v4q_finish,
 * v4q_requeue, v4q_reject, v4q_stop_consuming), waiting on the condition variable for its answer.
 *
 * A request lives on the caller's stack; the caller posts it under mu, writes one byte
 * to the wake-up pipe (so the AMQP thread leaves poll() at once) and waits until the
 * AMQP thread sets done.  Callers queue on mu while another request is pending.
 * Thread: any thread except the AMQP thread.
 */
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "service_internal.h"

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
    if (s->box_n) {   /* the urgent lane first: the oldest urgent delivery, else the oldest */
        int k = 0;
        while (k < s->box_n && !s->box[k]->urgent)
            k++;
        if (k == s->box_n)
            k = 0;
        *out = s->box[k];
        s->box_n--;
        memmove(s->box + k, s->box + k + 1, sizeof s->box[0] * (size_t)(s->box_n - k));
        rc = 1;
    } else if (s->stopped || s->quit) {
        rc = -1;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int submit(v4q_service *s, v4q_request *q)
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

int v4q_finish_all(v4q_service *s, const v4q_delivery *d, const v4q_message *m, int n, unsigned *diverted,
                   v4_error *err)
{
    if (diverted)
        *diverted = 0;
    if (n < 1 || n > 32)
        return v4_err_set(err, V4_ERR_INVALID, "amqp", "%d messages for one delivery (1..32)", n);
    v4q_request q = {.kind = V4Q_REQ_FINISH, .d = d, .m = m, .n = n};
    int rc = submit(s, &q);
    if (diverted)
        *diverted = q.diverted;
    if (rc && err)
        *err = q.err;
    return rc;
}

int v4q_finish(v4q_service *s, const v4q_delivery *d, const v4q_message *m, v4_error *err)
{
    return v4q_finish_all(s, d, m, 1, NULL, err);
}

void v4q_requeue(v4q_service *s, const v4q_delivery *d)
{
    v4q_request q = {.kind = V4Q_REQ_REQUEUE, .d = d};
    submit(s, &q);
}

void v4q_reject(v4q_service *s, const v4q_delivery *d)
{
    v4q_request q = {.kind = V4Q_REQ_REJECT, .d = d};
    submit(s, &q);
}

void v4q_stop_consuming(v4q_service *s)
{
    v4q_request q = {.kind = V4Q_REQ_STOP};
    if (submit(s, &q)) {   /* not connected: just stop taking deliveries */
        pthread_mutex_lock(&s->mu);
        s->stopped = 1;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
    }
}

int v4q_cancelled(v4q_service *s, const char *id, uint64_t *seen)
{
    if (!id)
        return 0;
    pthread_mutex_lock(&s->mu);
    int hit = 0;
    if (s->cancels && (!seen || *seen != s->cancel_epoch))
        hit = v4q_cancel_set_has(s->cancels, id, v4q_now_s());
    if (seen)
        *seen = s->cancel_epoch;
    pthread_mutex_unlock(&s->mu);
    return hit;
}

uint64_t v4q_cancels_received(v4q_service *s)
{
    pthread_mutex_lock(&s->mu);
    uint64_t n = s->cancel_epoch;
    pthread_mutex_unlock(&s->mu);
    return n;
}

uint64_t v4q_generation(v4q_service *s)
{
    pthread_mutex_lock(&s->mu);
    uint64_t g = s->generation;
    pthread_mutex_unlock(&s->mu);
    return g;
}

int v4q_connected(v4q_service *s, uint64_t *connects)
{
    pthread_mutex_lock(&s->mu);
    uint64_t g = s->generation;
    int quit = s->quit;
    pthread_mutex_unlock(&s->mu);
    if (connects)
        *connects = (g + 1) / 2;
    return !quit && (g & 1);
}
