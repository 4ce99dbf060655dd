/* test_worker_config.c - worker settings from the environment: defaults, overrides,
 * validation naming the variable, and password masking of URLs. */
#include <stdlib.h>
#include <string.h>

#include "../config/worker_config.h"
#include "testutil.h"

int main(void)
{
    char out[256];
    v4_mask_url("amqp://user:s3cret@host:5672/vh", out, sizeof out);
    CHECK(!strcmp(out, "amqp://user:***@host:5672/vh") && !strstr(out, "s3cret"), "masked: %s", out);
    v4_mask_url("amqps://u:p@h", out, sizeof out);
    CHECK(!strcmp(out, "amqps://u:***@h"), "masked: %s", out);
    v4_mask_url("amqp://host:5672", out, sizeof out);
    CHECK(!strcmp(out, "amqp://host:5672"), "no credentials: %s", out);
    v4_mask_url("redis://:pw@h:6379/0", out, sizeof out);
    CHECK(!strcmp(out, "redis://:***@h:6379/0"), "redis: %s", out);

    v4_worker_config c;
    v4_error err = {0};
    unsetenv("V4_PREFETCH");
    CHECK(v4_worker_config_from_env(&c, &err) == 0, "defaults: %s", err.msg);
    CHECK(c.prefetch == 1 && !strcmp(c.task_queue, "tasks") && !strcmp(c.dead_queue, "tasks.dead") &&
              !strcmp(c.invalid_queue, "tasks.invalid") && c.delivery_limit == 5,
          "default values");
    setenv("V4_TASK_QUEUE", "jobs", 1);
    setenv("V4_PREFETCH", "4", 1);
    CHECK(v4_worker_config_from_env(&c, &err) == 0 && c.prefetch == 4 && !strcmp(c.task_queue, "jobs"), "override");
    setenv("V4_PREFETCH", "0", 1);
    CHECK(v4_worker_config_from_env(&c, &err) == -1 && !strcmp(err.where, "V4_PREFETCH"), "bad prefetch: %s", err.where);
    setenv("V4_PREFETCH", "2x", 1);
    CHECK(v4_worker_config_from_env(&c, &err) == -1 && !strcmp(err.where, "V4_PREFETCH"), "bad prefetch 2x");
    unsetenv("V4_PREFETCH");
    setenv("V4_AMQP_URL", "http://x", 1);
    CHECK(v4_worker_config_from_env(&c, &err) == -1 && !strcmp(err.where, "V4_AMQP_URL"), "bad url");
    setenv("V4_AMQP_URL", "amqp://u:topsecret@h", 1);
    setenv("V4_HEARTBEAT_S", "601", 1);
    CHECK(v4_worker_config_from_env(&c, &err) == -1 && !strcmp(err.where, "V4_HEARTBEAT_S") &&
              !strstr(err.msg, "topsecret"),
          "bad heartbeat");
    TEST_DONE();
}
