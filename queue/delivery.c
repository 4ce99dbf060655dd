/* delivery.c - copy a received AMQP envelope into a v4q_delivery (body, reply_to,
 * correlation_id, message_id, timestamp, expiration, x-delivery-count and x-deadline-at
 * headers, and what the x-death header says), and free one.
 *
 * Dead-lettered messages (fleet affinity: a task that waited longer than
 * V4_AFFINITY_TTL_MS in a worker's own queue, or spent its tries there, falls through to
 * the task queue; docs/queue-worker.md "Fleet affinity"): the broker removes the
 * expiration property and records it as "original-expiration" in the x-death entry of
 * that dead-lettering, so the deadline keeps counting from the AMQP timestamp (which
 * the broker keeps); an entry with reason "delivery_limit" sets delivery_limit_spent.
 *
 * The copy owns malloc'd NUL-terminated strings so the envelope can be destroyed at
 * once and the delivery handed to an inference thread.
 * Ownership: v4q_delivery_from returns a delivery the caller owns (v4q_delivery_free).
 * Thread: v4q_delivery_from on the AMQP thread; v4q_delivery_free on any thread.
 */
#include <stdlib.h>
#include <string.h>

#include "service_internal.h"

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

/* A decimal count of at most 18 digits -> its value; -1 if b is not one. */
static long long decimal(amqp_bytes_t b)
{
    if (!b.len || b.len > 18)
        return -1;
    long long v = 0;
    for (size_t i = 0; i < b.len; i++) {
        char c = ((const char *)b.bytes)[i];
        if (c < '0' || c > '9')
            return -1;
        v = v * 10 + (c - '0');
    }
    return v;
}

/* The integer header key (any integer kind; strings of digits when digits is set):
 * its value, 0 if absent, bad if present but not an integer. */
static long long header_int(const amqp_basic_properties_t *p, const char *key, int digits, long long bad)
{
    if (!(p->_flags & AMQP_BASIC_HEADERS_FLAG))
        return 0;
    for (int i = 0; i < p->headers.num_entries; i++) {
        const amqp_table_entry_t *e = &p->headers.entries[i];
        if (e->key.len != strlen(key) || memcmp(e->key.bytes, key, e->key.len))
            continue;
        if (digits && (e->value.kind == AMQP_FIELD_KIND_UTF8 || e->value.kind == AMQP_FIELD_KIND_BYTES)) {
            long long v = decimal(e->value.value.bytes);
            return v < 0 ? bad : v;
        }
        switch (e->value.kind) {
        case AMQP_FIELD_KIND_I8: return e->value.value.i8;
        case AMQP_FIELD_KIND_U8: return e->value.value.u8;
        case AMQP_FIELD_KIND_I16: return e->value.value.i16;
        case AMQP_FIELD_KIND_U16: return e->value.value.u16;
        case AMQP_FIELD_KIND_I32: return e->value.value.i32;
        case AMQP_FIELD_KIND_U32: return e->value.value.u32;
        case AMQP_FIELD_KIND_I64: return e->value.value.i64;
        case AMQP_FIELD_KIND_U64: return (long long)e->value.value.u64;
        default: return bad;
        }
    }
    return 0;
}

static int bytes_eq(amqp_bytes_t b, const char *s)
{
    return b.len == strlen(s) && !memcmp(b.bytes, s, b.len);
}

/* The x-death header (an array of tables, newest first): d->dead_lettered, the
 * original-expiration of the entry that has one (-1 if none), delivery_limit_spent. */
static long long x_death(const amqp_basic_properties_t *p, v4q_delivery *d)
{
    long long orig = -1;
    if (!(p->_flags & AMQP_BASIC_HEADERS_FLAG))
        return orig;
    for (int i = 0; i < p->headers.num_entries; i++) {
        const amqp_table_entry_t *e = &p->headers.entries[i];
        if (!bytes_eq(e->key, "x-death") || e->value.kind != AMQP_FIELD_KIND_ARRAY)
            continue;
        d->dead_lettered = 1;
        const amqp_array_t *a = &e->value.value.array;
        for (int k = 0; k < a->num_entries; k++) {
            if (a->entries[k].kind != AMQP_FIELD_KIND_TABLE)
                continue;
            const amqp_table_t *t = &a->entries[k].value.table;
            for (int f = 0; f < t->num_entries; f++) {
                const amqp_table_entry_t *x = &t->entries[f];
                int str = x->value.kind == AMQP_FIELD_KIND_UTF8 || x->value.kind == AMQP_FIELD_KIND_BYTES;
                if (str && bytes_eq(x->key, "original-expiration") && orig < 0)
                    orig = decimal(x->value.value.bytes);
                else if (str && bytes_eq(x->key, "reason") && bytes_eq(x->value.value.bytes, "delivery_limit"))
                    d->delivery_limit_spent = 1;
            }
        }
    }
    return orig;
}

v4q_delivery *v4q_delivery_from(const amqp_envelope_t *env, uint64_t gen)
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
    d->delivery_count = header_int(p, "x-delivery-count", 0, 0);
    d->deadline_at_ms = header_int(p, "x-deadline-at", 1, -1);
    if (d->deadline_at_ms < 0)
        d->deadline_at_ms = -1;   /* a negative integer is no epoch time either */
    d->expiration_ms = (p->_flags & AMQP_BASIC_EXPIRATION_FLAG) ? decimal(p->expiration) : -1;
    long long orig = x_death(p, d);
    if (!(p->_flags & AMQP_BASIC_EXPIRATION_FLAG))
        d->expiration_ms = orig;
    if (!d->body || ((p->_flags & AMQP_BASIC_REPLY_TO_FLAG) && !d->reply_to) ||
        ((p->_flags & AMQP_BASIC_CORRELATION_ID_FLAG) && !d->correlation_id) ||
        ((p->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) && !d->message_id)) {
        v4q_delivery_free(d);
        return NULL;
    }
    return d;
}
