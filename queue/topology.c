/* topology.c - exchange/queue/binding declarations (see topology.h; fleet affinity:
 * docs/queue-worker.md "Fleet affinity").
 * Thread: the AMQP thread. */
#include "topology.h"

#include <stdio.h>
#include <string.h>

static int exchange_args(v4q_link *l, const char *name, const char *type, amqp_table_t args, v4_error *err)
{
    amqp_exchange_declare(l->conn, V4Q_CHANNEL, amqp_cstring_bytes(name), amqp_cstring_bytes(type), 0, 1, 0, 0, args);
    return v4q_reply_check(l, amqp_get_rpc_reply(l->conn), name, err);
}

static int exchange(v4q_link *l, const char *name, const char *type, v4_error *err)
{
    return exchange_args(l, name, type, amqp_empty_table, err);
}

static amqp_table_entry_t str_entry(const char *key, const char *value)
{
    amqp_table_entry_t e;
    e.key = amqp_cstring_bytes(key);
    e.value.kind = AMQP_FIELD_KIND_UTF8;
    e.value.value.bytes = amqp_cstring_bytes(value);
    return e;
}

static amqp_table_entry_t int_entry(const char *key, long long value)
{
    amqp_table_entry_t e;
    e.key = amqp_cstring_bytes(key);
    e.value.kind = AMQP_FIELD_KIND_I64;
    e.value.value.i64 = value;
    return e;
}

static int queue(v4q_link *l, const char *name, amqp_table_t args, v4_error *err)
{
    amqp_queue_declare(l->conn, V4Q_CHANNEL, amqp_cstring_bytes(name), 0, 1, 0, 0, args);
    return v4q_reply_check(l, amqp_get_rpc_reply(l->conn), name, err);
}

static int bind(v4q_link *l, const char *q, const char *ex, const char *key, v4_error *err)
{
    amqp_queue_bind(l->conn, V4Q_CHANNEL, amqp_cstring_bytes(q), amqp_cstring_bytes(ex), amqp_cstring_bytes(key),
                    amqp_empty_table);
    return v4q_reply_check(l, amqp_get_rpc_reply(l->conn), q, err);
}

/* Fleet affinity: the fanout FALLBACK bound to the task queue, the x-consistent-hash
 * exchange with FALLBACK as its alternate exchange (a key with no queue bound yet goes
 * to the task queue), this worker's quorum queue (x-message-ttl, dead-lettered at least
 * once to the task queue through the default exchange, the task queue's delivery limit)
 * and its binding, whose key is the weight on the hash ring. */
static int declare_affinity(v4q_link *l, const v4_worker_config *c, v4_error *err)
{
    amqp_table_entry_t ae = str_entry("alternate-exchange", c->affinity_fallback);
    amqp_table_t eargs = {1, &ae};
    if (exchange(l, c->affinity_fallback, "fanout", err) || bind(l, c->task_queue, c->affinity_fallback, "", err))
        return -1;
    if (exchange_args(l, c->affinity_exchange, "x-consistent-hash", eargs, err)) {
        size_t n = strlen(err->msg);
        snprintf(err->msg + n, sizeof err->msg - n,
                 " (V4_AFFINITY=1 needs the broker plugin rabbitmq_consistent_hash_exchange: rabbitmq-plugins "
                 "enable rabbitmq_consistent_hash_exchange; docs/operations.md \"Fleet affinity\")");
        return -1;
    }
    amqp_table_entry_t q[7] = {
        str_entry("x-queue-type", "quorum"),
        int_entry("x-message-ttl", c->affinity_ttl_ms),
        str_entry("x-dead-letter-exchange", ""),
        str_entry("x-dead-letter-routing-key", c->task_queue),
        str_entry("x-dead-letter-strategy", "at-least-once"),
        str_entry("x-overflow", "reject-publish"),   /* at-least-once dead-lettering needs it */
        int_entry("x-delivery-limit", c->delivery_limit),
    };
    amqp_table_t qargs = {7, q};
    char weight[16];
    snprintf(weight, sizeof weight, "%d", c->affinity_weight);
    return queue(l, c->affinity_queue, qargs, err) || bind(l, c->affinity_queue, c->affinity_exchange, weight, err)
               ? -1
               : 0;
}

int v4q_declare_topology(v4q_link *l, const v4_worker_config *c, v4_error *err)
{
    amqp_table_entry_t e[3];
    e[0].key = amqp_cstring_bytes("x-queue-type");
    e[0].value.kind = AMQP_FIELD_KIND_UTF8;
    e[0].value.value.bytes = amqp_cstring_bytes("quorum");
    e[1].key = amqp_cstring_bytes("x-delivery-limit");
    e[1].value.kind = AMQP_FIELD_KIND_I64;
    e[1].value.value.i64 = c->delivery_limit;
    e[2].key = amqp_cstring_bytes("x-dead-letter-exchange");
    e[2].value.kind = AMQP_FIELD_KIND_UTF8;
    e[2].value.value.bytes = amqp_cstring_bytes(c->dlx_exchange);
    amqp_table_t qargs = {3, e};
    if (exchange(l, c->dlx_exchange, "fanout", err) || queue(l, c->dead_queue, amqp_empty_table, err) ||
        bind(l, c->dead_queue, c->dlx_exchange, "", err) || queue(l, c->task_queue, qargs, err) ||
        queue(l, c->invalid_queue, amqp_empty_table, err) || queue(l, c->unroutable_queue, amqp_empty_table, err) ||
        exchange(l, c->results_exchange, "direct", err))
        return -1;
    if (c->urgent_queue[0] && queue(l, c->urgent_queue, qargs, err))
        return -1;
    if (c->cancel_exchange[0] && exchange(l, c->cancel_exchange, "fanout", err))
        return -1;
    if (c->results_queue[0] && (queue(l, c->results_queue, amqp_empty_table, err) ||
                                bind(l, c->results_queue, c->results_exchange, c->results_routing_key, err)))
        return -1;
    if (c->affinity_queue[0] && declare_affinity(l, c, err))
        return -1;
    return 0;
}
