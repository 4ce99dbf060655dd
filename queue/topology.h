/* topology.h - declare the worker's exchanges and queues, idempotently.
 *
 * Declared (names from v4_worker_config): fanout exchange DLX -> durable queue DEAD;
 * quorum queue TASKS with x-delivery-limit and x-dead-letter-exchange = DLX; durable
 * queue INVALID (error records of malformed packets, published through the default
 * exchange); durable queue UNROUTABLE (results the broker returned because their
 * reply_to queue was gone, republished there with headers saying why); direct
 * exchange RESULTS and, when a results queue name is set, a durable queue bound to it
 * with the results routing key; unless off, quorum queue URGENT with the task queue's
 * arguments (the urgent lane) and fanout exchange CANCEL (cancel messages; each worker
 * binds a queue of its own to it on its consumer link, consumer.c); with fleet affinity
 * (cfg.affinity_queue set; docs/queue-worker.md "Fleet affinity") fanout exchange
 * AFFINITY.fallback bound to TASKS, x-consistent-hash exchange AFFINITY (alternate exchange
 * AFFINITY.fallback; needs the broker plugin rabbitmq_consistent_hash_exchange) and this
 * worker's quorum queue AFFINITY.<id> bound to it with the weight as key (x-message-ttl,
 * dead-lettered at least once to TASKS, TASKS's delivery limit).  Re-declaring with the same
 * arguments is a no-op for the broker; different arguments on an existing queue make
 * the broker close the channel (406), reported with the queue name.
 *
 * Thread: the AMQP thread (owner of the link).
 */
#ifndef V4_QUEUE_TOPOLOGY_H
#define V4_QUEUE_TOPOLOGY_H

#include "../config/worker_config.h"
#include "amqp_link.h"

int v4q_declare_topology(v4q_link *l, const v4_worker_config *c, v4_error *err);

#endif
