/* amqp_link.h - one AMQP connection with one open channel (librabbitmq-c 0.11).
 *
 * Design: v4q_link_open() parses an amqp:// or amqps:// URL, connects with a socket
 * timeout, logs in advertising consumer_cancel_notify and connection.blocked (0.11
 * advertises neither by default, spec §1.10), negotiates the heartbeat, sets an RPC
 * timeout (so declares and closes never hang, rabbitmq-c #380) and opens channel 1.
 * v4q_reply_check() turns an amqp_rpc_reply_t into a v4_error and, for a server
 * channel.close / connection.close, sends the close-ok the library does not send
 * (rabbitmq-c #479) and marks the link dead.  A dead link is only destroyed
 * (v4q_link_free), never reused: the owner reconnects.
 *
 * Ownership: the link owns its connection state.  Thread: one thread only (the AMQP
 * thread); rabbitmq-c connections must not be shared between threads.
 */
#ifndef V4_QUEUE_AMQP_LINK_H
#define V4_QUEUE_AMQP_LINK_H

#include <amqp.h>

#include "../config/error.h"

#define V4Q_CHANNEL 1

typedef struct v4q_link {
    amqp_connection_state_t conn;
    int dead;                   /* 1 after any connection-level failure */
    int blocked;                /* 1 between connection.blocked and .unblocked */
    char blocked_reason[96];    /* the broker's reason ("low on memory"), NUL-terminated */
} v4q_link;

/* tls: for amqps:// URLs - CA file (peer and host name verified; NULL/"" = the
 * library's default verification), client certificate + key (NULL/"" = none). */
typedef struct v4q_tls {
    const char *cacert, *cert, *key;
} v4q_tls;
int v4q_link_open(v4q_link *l, const char *url, const v4q_tls *tls, int heartbeat_s, const char *conn_name,
                  v4_error *err);
/* Graceful close when alive (each close RPC bounded by 1 s: a broker that does not
 * answer at once is frozen or not reading this socket), then destroy. */
void v4q_link_free(v4q_link *l);
/* Check the last RPC reply; what names the operation for the message. */
int v4q_reply_check(v4q_link *l, amqp_rpc_reply_t r, const char *what, v4_error *err);
/* Handle a method frame that arrived outside an RPC (close, cancel, blocked...):
 * returns 0 if it was harmless (connection.blocked/unblocked only update blocked and
 * blocked_reason), -1 if the link must be dropped (err says why). */
int v4q_link_handle_method(v4q_link *l, const amqp_frame_t *f, v4_error *err);

#endif
