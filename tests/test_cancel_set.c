/* test_cancel_set.c - unit cases for queue/cancel_set.c (the bounded, expiring set of
 * cancelled task ids: add, refresh, TTL, the oldest pushed out when full) and for the
 * lane and cancel settings of config/worker_config.c (V4_URGENT_QUEUE and
 * V4_CANCEL_EXCHANGE named after V4_TASK_QUEUE, "off", the ranges).  Needs no broker:
 * the broker-level checks are tests/test_queue_cancel.sh and tests/test_queue_urgent.sh. */
#include <stdlib.h>
#include <string.h>

#include "config/worker_config.h"
#include "queue/cancel_set.h"
#include "testutil.h"

static void set_cases(void)
{
    v4q_cancel_set *c = v4q_cancel_set_new(3, 10.0);
    CHECK(c != NULL, "new");
    if (!c)
        return;
    CHECK(!v4q_cancel_set_has(c, "a", 0), "empty set has nothing");
    CHECK(v4q_cancel_set_add(c, "a", 1, 0) == 1, "a added");
    CHECK(v4q_cancel_set_add(c, "bXX", 1, 1) == 1, "b added (len bytes only)");
    CHECK(v4q_cancel_set_has(c, "a", 1) && v4q_cancel_set_has(c, "b", 1), "a and b remembered");
    CHECK(!v4q_cancel_set_has(c, "bXX", 1) && !v4q_cancel_set_has(c, "", 1), "only the len bytes are the id");
    CHECK(v4q_cancel_set_add(c, "a", 1, 5) == 0, "a again: refreshed, not added");
    CHECK(v4q_cancel_set_count(c, 5) == 2, "two ids, not three: %d", v4q_cancel_set_count(c, 5));
    /* b (t=1) expires at 11, a (refreshed at 5) at 15 */
    CHECK(!v4q_cancel_set_has(c, "b", 11) && v4q_cancel_set_has(c, "a", 11), "b expired, a refreshed");
    CHECK(!v4q_cancel_set_has(c, "a", 15.5) && v4q_cancel_set_count(c, 15.5) == 0, "a expired too");
    /* full: the oldest goes first */
    const char *ids[] = {"t1", "t2", "t3", "t4"};
    for (int i = 0; i < 4; i++)
        CHECK(v4q_cancel_set_add(c, ids[i], 2, 20 + i) == 1, "%s added", ids[i]);
    CHECK(!v4q_cancel_set_has(c, "t1", 24) && v4q_cancel_set_has(c, "t2", 24) && v4q_cancel_set_has(c, "t4", 24),
          "cap 3: t1 pushed out, t2..t4 kept");
    CHECK(v4q_cancel_set_count(c, 24) == 3, "count %d", v4q_cancel_set_count(c, 24));
    /* a refresh moves the id to the young end: t2 survives the next push, t3 does not */
    CHECK(v4q_cancel_set_add(c, "t2", 2, 25) == 0 && v4q_cancel_set_add(c, "t5", 2, 26) == 1, "refresh + add");
    CHECK(v4q_cancel_set_has(c, "t2", 26) && !v4q_cancel_set_has(c, "t3", 26) && v4q_cancel_set_has(c, "t5", 26),
          "refreshed t2 kept, t3 pushed out");
    v4q_cancel_set_free(c);
    CHECK(v4q_cancel_set_new(0, 1.0) == NULL, "cap 0 refused");
    /* many ids through a small ring: never more than cap, the last ones there */
    c = v4q_cancel_set_new(64, 1e9);
    char id[32];
    for (int i = 0; c && i < 1000; i++) {
        snprintf(id, sizeof id, "task-%d", i);
        v4q_cancel_set_add(c, id, strlen(id), i);
    }
    CHECK(c && v4q_cancel_set_count(c, 1000) == 64, "ring of 64");
    CHECK(c && v4q_cancel_set_has(c, "task-999", 1000) && v4q_cancel_set_has(c, "task-936", 1000) &&
              !v4q_cancel_set_has(c, "task-935", 1000), "the 64 newest kept");
    v4q_cancel_set_free(c);
}

static void config_cases(void)
{
    v4_worker_config c;
    v4_error err = {0};
    static const char *const vars[] = {"V4_TASK_QUEUE", "V4_URGENT_QUEUE", "V4_CANCEL_EXCHANGE", "V4_CANCEL_TTL_S",
                                       "V4_CANCEL_MAX", "V4_CONFIG_FILE"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
    CHECK(v4_worker_config_from_env(&c, &err) == 0, "defaults: %s", err.msg);
    CHECK(!strcmp(c.urgent_queue, "tasks.urgent") && !strcmp(c.cancel_exchange, "tasks.cancel"), "defaults '%s' '%s'",
          c.urgent_queue, c.cancel_exchange);
    CHECK(c.cancel_ttl_s == 3600 && c.cancel_max == 10000, "ttl %ld max %d", c.cancel_ttl_s, c.cancel_max);
    setenv("V4_TASK_QUEUE", "jobs", 1);
    CHECK(v4_worker_config_from_env(&c, &err) == 0 && !strcmp(c.urgent_queue, "jobs.urgent") &&
              !strcmp(c.cancel_exchange, "jobs.cancel"), "named after the task queue: '%s' '%s'", c.urgent_queue,
          c.cancel_exchange);
    setenv("V4_URGENT_QUEUE", "off", 1);
    setenv("V4_CANCEL_EXCHANGE", "off", 1);
    CHECK(v4_worker_config_from_env(&c, &err) == 0 && !c.urgent_queue[0] && !c.cancel_exchange[0], "off: '%s' '%s'",
          c.urgent_queue, c.cancel_exchange);
    setenv("V4_URGENT_QUEUE", "jobs", 1);
    CHECK(v4_worker_config_from_env(&c, &err) == -1 && !strcmp(err.where, "V4_URGENT_QUEUE"),
          "the task queue as the urgent one: %s: %s", err.where, err.msg);
    unsetenv("V4_URGENT_QUEUE");
    static const char *const bad[][2] = {{"V4_CANCEL_TTL_S", "0"}, {"V4_CANCEL_TTL_S", "x"}, {"V4_CANCEL_MAX", "0"},
                                         {"V4_CANCEL_MAX", "2000000"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv(bad[i][0], bad[i][1], 1);
        CHECK(v4_worker_config_from_env(&c, &err) == -1 && !strcmp(err.where, bad[i][0]), "%s=%s: %s: %s", bad[i][0],
              bad[i][1], err.where, err.msg);
        unsetenv(bad[i][0]);
    }
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
}

int main(void)
{
    set_cases();
    config_cases();
    TEST_DONE();
}
