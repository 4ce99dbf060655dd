/* service.h - the AMQP thread: consumes tasks, publishes results with confirms, acks.
 *
 * Design (spec queue-reliability.md §7): one dedicated thread owns two connections,
 * a consumer link (basic.qos prefetch, basic.consume with manual acks) and a publisher
 * link (confirm mode).  It never blocks longer than ~100 ms, so heartbeats, cancel
 * notifications and server closes are serviced while inference runs on other threads
 * (rabbitmq-c 0.11 only services heartbeats inside its own calls, spec §2.4), and the
 * publisher socket is polled right before each publish (rabbitmq-c #780 guard).
 *
 * Inference threads talk to it through this API only:
 *   v4q_next()      takes the next delivery (a mailbox filled by the AMQP thread);
 *   v4q_finish()    publishes one message (persistent, mandatory, message_id,
 *                   correlation_id), waits for the broker's confirm, and only then acks
 *                   the delivery.  A returned (unroutable) or nacked message: the
 *                   delivery is nacked with requeue (counts towards x-delivery-limit).
 *                   No confirm in time, or a connection loss: the links are dropped and
 *                   the broker requeues the delivery.  While the broker blocks the
 *                   publisher (connection.blocked: memory/disk alarm) the confirm timeout
 *                   is suspended and the delivery stays unacked until it unblocks (a
 *                   requeue would re-run the task and count against x-delivery-limit).
 *                   Returns 0 only when acked.
 *   v4q_requeue()   nack(requeue) a delivery that will not be processed.
 *   v4q_stop_consuming()  basic.cancel + requeue the deliveries not yet taken.
 * Every (re)connection increments a generation; deliveries remember theirs, and an
 * ack/nack for an older generation is never sent (delivery tags are per channel).
 * Reconnects use exponential backoff (200 ms .. 10 s) with jitter, sleeping on a
 * condition variable (no busy loop while the broker is down); the service starts even
 * when the broker is not up yet.
 *
 * Ownership: v4q_service owns its thread, links and mailbox; a v4q_delivery returned
 * by v4q_next belongs to the caller until v4q_delivery_free.
 * Thread: the functions below may be called from any thread (one request is handled
 * at a time; callers queue on a mutex); v4q_service_free from the thread that started it.
 */
#ifndef V4_QUEUE_SERVICE_H
#define V4_QUEUE_SERVICE_H

#include <stddef.h>
#include <stdint.h>

#include "../config/error.h"
#include "../config/worker_config.h"

typedef struct v4q_delivery {
    uint64_t tag, generation;
    char *body;
    size_t len;
    char *reply_to, *correlation_id, *message_id;   /* NUL-terminated, or NULL */
    int redelivered;
    long long delivery_count;                       /* x-delivery-count, 0 if absent */
    long long timestamp_s;                          /* AMQP timestamp, 0 if absent */
} v4q_delivery;

typedef struct v4q_message {
    const char *exchange, *routing_key;
    const char *body;
    size_t len;
    const char *message_id, *correlation_id;        /* may be NULL */
    /* TEST HOOK (checklist R13, duplicate results): when non-zero, the AMQP thread
     * calls _exit(86) right after the broker confirmed this message and BEFORE the
     * delivery is acked, so the task is redelivered and its result published twice
     * with the same message_id.  Never set it in production; 0 = normal. */
    int fault_exit_before_ack;
} v4q_message;

typedef struct v4q_service v4q_service;

/* log(ud, level, line): level 0 error, 1 info, 2 debug; called from the AMQP thread. */
typedef void (*v4q_log_fn)(void *ud, int level, const char *line);

v4q_service *v4q_service_start(const v4_worker_config *cfg, v4q_log_fn log, void *log_ud, v4_error *err);
/* 1: *out set; 0: timeout; -1: stopped and nothing left. */
int v4q_next(v4q_service *s, v4q_delivery **out, int timeout_ms);
int v4q_finish(v4q_service *s, const v4q_delivery *d, const v4q_message *m, v4_error *err);
void v4q_requeue(v4q_service *s, const v4q_delivery *d);
void v4q_stop_consuming(v4q_service *s);
/* Generation of the current connection (0 before the first); for tests and logs. */
uint64_t v4q_generation(v4q_service *s);
/* For health checks and metrics, from any thread: 1 while connected to the broker (both
 * links up and, unless v4q_stop_consuming was called, consuming), else 0; *connects
 * (may be NULL) = successful connections so far, the first included.  Derived from the
 * generation (each connect and each disconnect bumps it once: odd = connected). */
int v4q_connected(v4q_service *s, uint64_t *connects);
void v4q_service_free(v4q_service *s);
void v4q_delivery_free(v4q_delivery *d);

#endif
