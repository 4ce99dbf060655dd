/* test_affinity_config.c - fleet affinity without a broker (docs/queue-worker.md "Fleet
 * affinity"): its settings in config/worker_config.c (defaults, the queue name, off by
 * default, bad values rejected naming the setting) and what queue/delivery.c reads from
 * a dead-lettered delivery (the x-death header: original-expiration as the expiration,
 * reason delivery_limit).  The broker side is tests/test_queue_affinity.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../config/worker_config.h"
#include "../queue/service_internal.h"
#include "testutil.h"

static const char *const VARS[] = {"V4_TASK_QUEUE", "V4_WORKER_ID", "V4_AFFINITY", "V4_AFFINITY_EXCHANGE",
                                   "V4_AFFINITY_ID", "V4_AFFINITY_TTL_MS", "V4_AFFINITY_WEIGHT", "V4_CONFIG_FILE"};

static void clear_env(void)
{
    for (size_t i = 0; i < sizeof VARS / sizeof VARS[0]; i++)
        unsetenv(VARS[i]);
}

static void config_cases(void)
{
    v4_worker_config c;
    v4_error err = {0};
    clear_env();
    CHECK(v4_worker_config_from_env(&c, &err) == 0, "defaults: %s", err.msg);
    CHECK(!c.affinity && !c.affinity_queue[0], "affinity is off by default (queue '%s')", c.affinity_queue);
    CHECK(!strcmp(c.affinity_exchange, "tasks.affinity") && !strcmp(c.affinity_fallback, "tasks.affinity.fallback") &&
              c.affinity_ttl_ms == 30000 && c.affinity_weight == 100,
          "defaults: '%s' '%s' %ld %d", c.affinity_exchange, c.affinity_fallback, c.affinity_ttl_ms, c.affinity_weight);

    /* on: the queue is named after the exchange and the host name (no pid: stable over restarts) */
    char host[101] = "";
    gethostname(host, sizeof host - 1);
    setenv("V4_AFFINITY", "1", 1);
    setenv("V4_TASK_QUEUE", "jobs", 1);
    char want[300];
    snprintf(want, sizeof want, "jobs.affinity.%s", host);
    CHECK(v4_worker_config_from_env(&c, &err) == 0 && c.affinity && !strcmp(c.affinity_queue, want),
          "host-name queue: '%s' want '%s' (%s)", c.affinity_queue, want, err.msg);
    setenv("V4_WORKER_ID", "w-7", 1);
    CHECK(v4_worker_config_from_env(&c, &err) == 0 && !strcmp(c.affinity_queue, "jobs.affinity.w-7") &&
              !strcmp(c.worker_id, "w-7"),
          "V4_WORKER_ID names it: '%s'", c.affinity_queue);
    setenv("V4_AFFINITY_ID", "gpu-a:0", 1);
    setenv("V4_AFFINITY_EXCHANGE", "prefix", 1);
    setenv("V4_AFFINITY_TTL_MS", "500", 1);
    setenv("V4_AFFINITY_WEIGHT", "7", 1);
    CHECK(v4_worker_config_from_env(&c, &err) == 0 && !strcmp(c.affinity_queue, "prefix.gpu-a:0") &&
              !strcmp(c.affinity_fallback, "prefix.fallback") && c.affinity_ttl_ms == 500 && c.affinity_weight == 7,
          "explicit: '%s' '%s' %ld %d (%s)", c.affinity_queue, c.affinity_fallback, c.affinity_ttl_ms,
          c.affinity_weight, err.msg);

    /* bad values: an error naming the setting, with the value */
    static const char *const bad[][3] = {
        {"V4_AFFINITY", "2", "[0, 1]"},
        {"V4_AFFINITY", "yes", "yes"},
        {"V4_AFFINITY_TTL_MS", "99", "[100, 86400000]"},
        {"V4_AFFINITY_TTL_MS", "1h", "1h"},
        {"V4_AFFINITY_WEIGHT", "0", "[1, 1000]"},
        {"V4_AFFINITY_WEIGHT", "1001", "1001"},
        {"V4_AFFINITY_ID", "a b", "' '"},
        {"V4_AFFINITY_ID", "w/1", "'/'"},
        {"V4_AFFINITY_ID", "fallback", "alternate exchange"},
        {"V4_AFFINITY_ID", "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
         "at most 100"},
        {"V4_AFFINITY_EXCHANGE", "jobs", "task queue"},
        {"V4_AFFINITY_EXCHANGE", "amq.x", "reserved"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char keep[256] = "";
        const char *old = getenv(bad[i][0]);
        if (old)
            snprintf(keep, sizeof keep, "%s", old);
        setenv(bad[i][0], bad[i][1], 1);
        memset(&err, 0, sizeof err);
        int rc = v4_worker_config_from_env(&c, &err);
        CHECK(rc == -1 && !strcmp(err.where, bad[i][0]) && strstr(err.msg, bad[i][2]),
              "%s=%s: want an error naming it with '%s', got %d %s: %s", bad[i][0], bad[i][1], bad[i][2], rc,
              err.where, err.msg);
        if (old)
            setenv(bad[i][0], keep, 1);
        else
            unsetenv(bad[i][0]);
    }
    /* a queue name over AMQP's 255 bytes */
    char longx[160];
    memset(longx, 'e', sizeof longx - 1);
    longx[sizeof longx - 1] = 0;
    setenv("V4_AFFINITY_EXCHANGE", longx, 1);
    char longid[101];   /* 159 + 1 + 100 bytes */
    memset(longid, 'i', sizeof longid - 1);
    longid[sizeof longid - 1] = 0;
    setenv("V4_AFFINITY_ID", longid, 1);
    memset(&err, 0, sizeof err);
    CHECK(v4_worker_config_from_env(&c, &err) == -1 && !strcmp(err.where, "V4_AFFINITY_ID") &&
              strstr(err.msg, "at most 255"),
          "long queue name: %s: %s", err.where, err.msg);
    /* checked even when off, but no queue then */
    setenv("V4_AFFINITY", "0", 1);
    setenv("V4_AFFINITY_EXCHANGE", "prefix", 1);
    CHECK(v4_worker_config_from_env(&c, &err) == 0 && !c.affinity_queue[0], "off: no queue '%s' (%s)",
          c.affinity_queue, err.msg);
    setenv("V4_AFFINITY_TTL_MS", "5", 1);
    CHECK(v4_worker_config_from_env(&c, &err) == -1 && !strcmp(err.where, "V4_AFFINITY_TTL_MS"),
          "a bad value is reported even when off: %s", err.where);
    clear_env();
}

/* An envelope with the given properties -> a delivery (checked and freed by the caller). */
static v4q_delivery *deliver(amqp_basic_properties_t *p)
{
    amqp_envelope_t env;
    memset(&env, 0, sizeof env);
    env.delivery_tag = 9;
    env.message.body = amqp_cstring_bytes("{}");
    env.message.properties = *p;
    return v4q_delivery_from(&env, 1);
}

static void delivery_cases(void)
{
    /* x-death as the broker writes it after a queue TTL: no expiration property any more */
    amqp_table_entry_t death[3] = {
        {.key = amqp_cstring_bytes("reason"), .value = {.kind = AMQP_FIELD_KIND_UTF8,
                                                        .value.bytes = amqp_cstring_bytes("expired")}},
        {.key = amqp_cstring_bytes("queue"), .value = {.kind = AMQP_FIELD_KIND_UTF8,
                                                       .value.bytes = amqp_cstring_bytes("tasks.affinity.w1")}},
        {.key = amqp_cstring_bytes("original-expiration"), .value = {.kind = AMQP_FIELD_KIND_UTF8,
                                                                     .value.bytes = amqp_cstring_bytes("60000")}},
    };
    amqp_field_value_t entry = {.kind = AMQP_FIELD_KIND_TABLE, .value.table = {3, death}};
    amqp_table_entry_t hdr[2] = {
        {.key = amqp_cstring_bytes("x-death"), .value = {.kind = AMQP_FIELD_KIND_ARRAY, .value.array = {1, &entry}}},
        {.key = amqp_cstring_bytes("x-delivery-count"), .value = {.kind = AMQP_FIELD_KIND_I64, .value.i64 = 0}},
    };
    amqp_basic_properties_t p;
    memset(&p, 0, sizeof p);
    p._flags = AMQP_BASIC_HEADERS_FLAG | AMQP_BASIC_TIMESTAMP_FLAG;
    p.headers = (amqp_table_t){2, hdr};
    p.timestamp = 1700000000;
    v4q_delivery *d = deliver(&p);
    CHECK(d && d->dead_lettered && d->expiration_ms == 60000 && !d->delivery_limit_spent && d->timestamp_s == 1700000000,
          "expired in a worker's queue: dead %d expiration %lld limit %d", d ? d->dead_lettered : -1,
          d ? d->expiration_ms : -2, d ? d->delivery_limit_spent : -1);
    v4q_delivery_free(d);

    /* an expiration property present wins over x-death's */
    p._flags |= AMQP_BASIC_EXPIRATION_FLAG;
    p.expiration = amqp_cstring_bytes("1234");
    d = deliver(&p);
    CHECK(d && d->expiration_ms == 1234, "own expiration: %lld", d ? d->expiration_ms : -2);
    v4q_delivery_free(d);
    p._flags &= ~AMQP_BASIC_EXPIRATION_FLAG;

    /* no per-message TTL originally (queue TTL only): no expiration */
    death[2].key = amqp_cstring_bytes("count");
    death[2].value.kind = AMQP_FIELD_KIND_I64;
    death[2].value.value.i64 = 1;
    d = deliver(&p);
    CHECK(d && d->dead_lettered && d->expiration_ms == -1, "queue TTL only: dead %d expiration %lld",
          d ? d->dead_lettered : -1, d ? d->expiration_ms : -2);
    v4q_delivery_free(d);

    /* its tries spent there */
    death[0].value.value.bytes = amqp_cstring_bytes("delivery_limit");
    d = deliver(&p);
    CHECK(d && d->delivery_limit_spent, "reason delivery_limit: %d", d ? d->delivery_limit_spent : -1);
    v4q_delivery_free(d);

    /* no x-death: nothing dead-lettered */
    p.headers = (amqp_table_t){1, &hdr[1]};
    d = deliver(&p);
    CHECK(d && !d->dead_lettered && !d->delivery_limit_spent && d->expiration_ms == -1, "plain delivery");
    v4q_delivery_free(d);
    /* an x-death of the wrong kind is ignored, not a crash */
    amqp_table_entry_t odd = {.key = amqp_cstring_bytes("x-death"),
                              .value = {.kind = AMQP_FIELD_KIND_UTF8, .value.bytes = amqp_cstring_bytes("?")}};
    p.headers = (amqp_table_t){1, &odd};
    d = deliver(&p);
    CHECK(d && !d->dead_lettered && d->expiration_ms == -1, "x-death not an array");
    v4q_delivery_free(d);
}

int main(void)
{
    config_cases();
    delivery_cases();
    TEST_DONE();
}
