/* service_internal.h - the AMQP service's private state, shared by the files that
 * implement queue/service.h (not part of the public API; include only from queue/).
 *
 * Files: service.c (thread main loop, start/free, request dispatch), qlog.c (log line
 * and clock: a leaf every other file calls), handoff.c (the
 * mailbox and the request slot: the public calls made from inference threads),
 * delivery.c (envelope -> v4q_delivery copies), consumer.c (consume, deliveries,
 * nack, basic.cancel, cancel messages), cancel_set.c (the cancelled ids), publisher.c (publish + confirm wait), reconnect.c (connect,
 * topology, disconnect, backoff).
 *
 * Locking: mu guards the mailbox, the request slot, the flags and the generation.  The
 * AMQP thread never holds mu during network I/O; callers hold it only to post a
 * request or take a delivery, then wait on cv.  Fields under "AMQP-thread-only" are
 * touched by the AMQP thread alone.
 * Ownership: v4q_service owns its thread, links, wake-up pipe and the deliveries in box.
 */
#ifndef V4_QUEUE_SERVICE_INTERNAL_H
#define V4_QUEUE_SERVICE_INTERNAL_H

#include <amqp.h>
#include <pthread.h>
#include <sys/time.h>

#include "amqp_link.h"
#include "cancel_set.h"
#include "service.h"

#define V4Q_MAILBOX 192    /* three consumers (task, urgent, affinity queue) of up to 64 prefetched each */

enum v4q_req_kind { V4Q_REQ_FINISH, V4Q_REQ_REQUEUE, V4Q_REQ_REJECT, V4Q_REQ_STOP };

/* One call of an inference thread, run by the AMQP thread; lives on the caller's stack. */
typedef struct v4q_request {
    enum v4q_req_kind kind;
    const v4q_delivery *d;
    const v4q_message *m;
    int n;                          /* messages at m (FINISH) */
    unsigned diverted;              /* bit i: m[i] went to the unroutable queue */
    int done, rc;
    v4_error err;
} v4q_request;

struct v4q_service {
    v4_worker_config cfg;
    v4q_log_fn log;
    void *log_ud;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;              /* mailbox / request / done / quit changes */
    v4q_delivery *box[V4Q_MAILBOX];
    int box_n;
    v4q_request *req;               /* pending request, NULL if none */
    int quit, stopped;              /* quit: thread exits; stopped: no more consuming */
    uint64_t generation;
    v4q_cancel_set *cancels;        /* ids named by cancel messages (NULL: cancellation off) */
    uint64_t cancel_epoch;          /* cancel messages taken (bumped by each) */
    int wake[2];                    /* self-pipe: a request was posted (wakes poll()) */
    /* AMQP-thread-only state */
    v4q_link cons, pub;
    int connected, attempt;
    uint64_t pub_seq;
    unsigned rnd;
    char consumer_tag[160];         /* the task queue's consumer ("" when not consuming) */
    char urgent_tag[160];           /* the urgent queue's ("" when off or not consuming) */
    char affinity_tag[160];         /* this worker's affinity queue's ("" when off or not consuming) */
    char cancel_tag[160];           /* the cancel queue's ("" when off) */
    char cancel_queue[256];         /* its server-generated name */
    char last_return[160];          /* "312 NO_ROUTE": the broker's last basic.return */
};

/* qlog.c: one log line through the owner's callback (at or below cfg.log_level), and
 * the CLOCK_MONOTONIC clock in seconds. */
void v4q_logf(v4q_service *s, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
double v4q_now_s(void);

/* delivery.c: copy of a received envelope (NULL when out of memory). */
v4q_delivery *v4q_delivery_from(const amqp_envelope_t *env, uint64_t gen);

/* reconnect.c (AMQP thread) */
int v4q_connect_all(v4q_service *s, v4_error *err);
void v4q_disconnect(v4q_service *s, const v4_error *why);
void v4q_backoff(v4q_service *s);

/* consumer.c (AMQP thread) */
void v4q_poll_consumer(v4q_service *s, struct timeval tv);
int v4q_send_nack(v4q_service *s, const v4q_delivery *d, int requeue);
int v4q_send_ack(v4q_service *s, const v4q_delivery *d);
void v4q_cancel_consumer(v4q_service *s, v4q_request *q);

/* publisher.c (AMQP thread): 0 confirmed, 1 nacked, 2 returned (unroutable; the
 * broker's reply code and text in err->msg), -1 link failure.  v4q_publish_unroutable
 * republishes m to cfg.unroutable_queue with the headers of service.h (the reason from
 * last_return, the broker's last return); the same return values. */
void v4q_poll_publisher(v4q_service *s);
int v4q_publish_confirmed(v4q_service *s, const v4q_message *m, v4_error *err);
int v4q_publish_unroutable(v4q_service *s, const v4q_message *m, v4_error *err);

#endif
