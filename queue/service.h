/* service.h - the AMQP thread: consumes tasks, publishes results with confirms, acks.
 *
 * Design (spec queue-reliability.md §7): one dedicated thread owns two connections,
 * a consumer link (basic.qos prefetch, basic.consume with manual acks) and a publisher
 * link (confirm mode).  It never blocks longer than ~100 ms, so heartbeats, cancel
 * notifications and server closes are serviced while inference runs on other threads
 * (rabbitmq-c 0.11 only services heartbeats inside its own calls, spec §2.4), and the
 * publisher socket is polled right before each publish (rabbitmq-c #780 guard).
 *
 * Two lanes (docs/queue-worker.md "Urgent lane"): the consumer link consumes
 * cfg.task_queue and, unless off, cfg.urgent_queue (declared like the task queue; each
 * consumer has its own basic.qos prefetch, so urgent deliveries reach the mailbox even
 * while the normal lane's prefetch is used up by deliveries waiting there).  With fleet
 * affinity (cfg.affinity, docs/queue-worker.md "Fleet affinity") it also consumes this
 * worker's own queue cfg.affinity_queue (its deliveries are normal-lane ones, marked
 * affinity; queue/topology.h declares it).
 * Cancellation (docs/queue-worker.md "Cancellation"): unless off, the consumer link binds
 * an exclusive, auto-delete, server-named queue to the fanout exchange
 * cfg.cancel_exchange and consumes it without acks; each body {"cancel": "<task id>"}
 * puts the id into a bounded set (cfg.cancel_max ids, each for cfg.cancel_ttl_s;
 * cancel_set.h) that v4q_cancelled() answers from.  Malformed cancel messages are
 * logged and dropped.
 *
 * Inference threads talk to it through this API only:
 *   v4q_next()      takes the next delivery (a mailbox filled by the AMQP thread): the
 *                   oldest urgent one when the mailbox holds any, else the oldest;
 *   v4q_cancelled() whether a cancel message named a task id;
 *   v4q_finish()    publishes one message (persistent, mandatory, message_id,
 *                   correlation_id), waits for the broker's confirm, and only then acks
 *                   the delivery.  A nacked message, or a returned (unroutable) one not
 *                   marked divert_unroutable: the delivery is nacked with requeue
 *                   (counts towards x-delivery-limit).  A returned message marked
 *                   divert_unroutable (a result whose reply_to queue is gone) is
 *                   republished to cfg.unroutable_queue with headers saying why
 *                   (x-unroutable-reason, x-original-exchange, x-original-routing-key,
 *                   x-original-reply-to, x-original-correlation-id; same body,
 *                   message_id, correlation_id), confirmed, and the delivery acked: a
 *                   vanished reply queue is no reason to run the task again.
 *   v4q_finish_all() the same for n messages published (and confirmed) in order
 *                   before the one ack; *diverted gets bit i for each message i that
 *                   went to the unroutable queue.
 *                   No confirm in time, or a connection loss: the links are dropped and
 *                   the broker requeues the delivery.  While the broker blocks the
 *                   publisher (connection.blocked: memory/disk alarm) the confirm timeout
 *                   is suspended and the delivery stays unacked until it unblocks (a
 *                   requeue would re-run the task and count against x-delivery-limit).
 *                   Returns 0 only when acked.
 *   v4q_requeue()   nack(requeue) a delivery that will not be processed.
 *   v4q_reject()    nack without requeue: the queue dead-letters it (the task queue:
 *                   to cfg.dlx_exchange, i.e. the dead queue).
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
    int urgent;                                     /* 1: from cfg.urgent_queue */
    int affinity;                                   /* 1: from cfg.affinity_queue (this worker's own) */
    long long delivery_count;                       /* x-delivery-count, 0 if absent */
    long long timestamp_s;                          /* AMQP timestamp, 0 if absent */
    long long expiration_ms;                        /* AMQP expiration (per-message TTL), -1 if absent
                                                     * or not a decimal count; a dead-lettered message
                                                     * (the broker removes the property) gets the
                                                     * original-expiration of its x-death header */
    int dead_lettered;                              /* 1: it carries an x-death header (fleet affinity:
                                                     * it fell through from a worker's own queue) */
    int delivery_limit_spent;                       /* 1: an x-death entry says reason delivery_limit
                                                     * (its tries were spent in another queue) */
    long long deadline_at_ms;                       /* header x-deadline-at: Unix epoch milliseconds
                                                     * (an integer, or a string of digits); 0 if
                                                     * absent, -1 if present but not that */
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
    /* 1: when the broker returns it (no route), republish it to cfg.unroutable_queue
     * and ack the delivery (see v4q_finish); 0: a return requeues the delivery. */
    int divert_unroutable;
    const char *reply_to;           /* the task's reply_to when routing_key is it (the unroutable
                                     * record's reason and x-original-reply-to); may be NULL */
} v4q_message;

typedef struct v4q_service v4q_service;

/* log(ud, level, line): level 0 error, 1 info, 2 debug; called from the AMQP thread. */
typedef void (*v4q_log_fn)(void *ud, int level, const char *line);

v4q_service *v4q_service_start(const v4_worker_config *cfg, v4q_log_fn log, void *log_ud, v4_error *err);
/* 1: *out set; 0: timeout; -1: stopped and nothing left. */
int v4q_next(v4q_service *s, v4q_delivery **out, int timeout_ms);
int v4q_finish(v4q_service *s, const v4q_delivery *d, const v4q_message *m, v4_error *err);
/* n in 1..32; diverted may be NULL.  Returns 0 only when every message was confirmed
 * (to its destination or diverted) and the delivery acked. */
int v4q_finish_all(v4q_service *s, const v4q_delivery *d, const v4q_message *m, int n, unsigned *diverted,
                   v4_error *err);
void v4q_requeue(v4q_service *s, const v4q_delivery *d);
void v4q_reject(v4q_service *s, const v4q_delivery *d);
/* 1 when a cancel message named id (NUL-terminated) less than cfg.cancel_ttl_s ago (and
 * fewer than cfg.cancel_max other ids were named since), else 0.  seen: NULL, or the
 * caller's counter (0 before its first call): when no cancel message has arrived since
 * the caller's last call with it, the answer is 0 without a lookup (cheap enough to ask
 * before every forward step). */
int v4q_cancelled(v4q_service *s, const char *id, uint64_t *seen);
/* Cancel messages taken (well-formed ones) since the start; for metrics. */
uint64_t v4q_cancels_received(v4q_service *s);
/* basic.cancel of both task consumers (the cancel consumer stays) + requeue the
 * deliveries not yet taken. */
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
