/* topology.c - exchange/queue/binding declarations (see topology.h).
 * Thread: the AMQP thread. */
#include "topology.h"

#include <stdio.h>

static int exchange(v4q_link *l, const char *name, const char *type, v4_error *err)
{
    amqp_exchange_declare(l->conn, V4Q_CHANNEL, amqp_cstring_bytes(name), amqp_cstring_bytes(type), 0, 1, 0, 0,
                          amqp_empty_table);
    return v4q_reply_check(l, amqp_get_rpc_reply(l->conn), name, err);
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
    return 0;
}
