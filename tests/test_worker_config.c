/* test_worker_config.c - worker settings from the environment: defaults, overrides,
 * validation naming the variable, password masking of URLs, the config file
 * (V4_CONFIG_FILE: values, precedence of the environment, errors naming the line) and
 * NAME_FILE secrets. */
#include <stdio.h>
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
    /* a missing max_tokens' bound (task_run.h v4_runner_max_tokens): 4096, 0 = none */
    CHECK(v4_worker_config_from_env(&c, &err) == 0 && c.default_max_tokens == 4096, "V4_DEFAULT_MAX_TOKENS default");
    setenv("V4_DEFAULT_MAX_TOKENS", "0", 1);
    CHECK(v4_worker_config_from_env(&c, &err) == 0 && c.default_max_tokens == 0, "V4_DEFAULT_MAX_TOKENS=0: no bound");
    setenv("V4_DEFAULT_MAX_TOKENS", "1048577", 1);
    CHECK(v4_worker_config_from_env(&c, &err) == -1 && !strcmp(err.where, "V4_DEFAULT_MAX_TOKENS"),
          "V4_DEFAULT_MAX_TOKENS over 1048576: %s", err.where);
    unsetenv("V4_DEFAULT_MAX_TOKENS");
    setenv("V4_AMQP_URL", "http://x", 1);
    CHECK(v4_worker_config_from_env(&c, &err) == -1 && !strcmp(err.where, "V4_AMQP_URL"), "bad url");
    setenv("V4_AMQP_URL", "amqp://u:topsecret@h", 1);
    setenv("V4_HEARTBEAT_S", "601", 1);
    CHECK(v4_worker_config_from_env(&c, &err) == -1 && !strcmp(err.where, "V4_HEARTBEAT_S") &&
              !strstr(err.msg, "topsecret"),
          "bad heartbeat");
    unsetenv("V4_AMQP_URL");
    unsetenv("V4_HEARTBEAT_S");
    unsetenv("V4_TASK_QUEUE");

    /* config file */
    char path[4096], secret[4096];
    const char *tmp = t_env("V4_TMP", "/tmp");
    snprintf(path, sizeof path, "%s/worker_config_test.conf", tmp);
    snprintf(secret, sizeof secret, "%s/worker_config_test.secret", tmp);
    FILE *f = fopen(secret, "w");
    fputs("redis://:filepw@redis.example:6380/2\n", f);
    fclose(f);
    f = fopen(path, "w");
    fprintf(f, "# worker settings\n\nV4_TASK_QUEUE = from-file\nV4_PREFETCH=3\n  V4_MODEL_NAME = \"my-model,alias.2\"  \n"
               "V4_REDIS_URL_FILE=%s\nV4_REDIS_BACKLOG=77\n", secret);
    fclose(f);
    setenv("V4_CONFIG_FILE", path, 1);
    setenv("V4_PREFETCH", "5", 1);
    CHECK(v4_worker_config_from_env(&c, &err) == 0, "config file: %s: %s", err.where, err.msg);
    CHECK(!strcmp(c.task_queue, "from-file") && !strcmp(c.model_name, "my-model") && !strcmp(c.model_names, "my-model,alias.2") && c.redis_backlog == 77,
          "file values (%s, %s, %ld)", c.task_queue, c.model_name, c.redis_backlog);
    CHECK(c.prefetch == 5, "environment overrides the file (%d)", c.prefetch);
    CHECK(!strcmp(c.redis_url, "redis://:filepw@redis.example:6380/2"), "NAME_FILE in the file: %s", c.redis_url);
    CHECK(!strcmp(c.config_file, path), "config file recorded");
    unsetenv("V4_PREFETCH");
    setenv("V4_REDIS_URL", "redis://envhost:1/0", 1);
    CHECK(v4_worker_config_from_env(&c, &err) == 0 && !strcmp(c.redis_url, "redis://envhost:1/0"),
          "env beats NAME_FILE");
    unsetenv("V4_REDIS_URL");
    setenv("V4_AMQP_URL_FILE", secret, 1);   /* a redis URL: must be refused, naming the setting */
    CHECK(v4_worker_config_from_env(&c, &err) == -1 && !strcmp(err.where, "V4_AMQP_URL") &&
              !strstr(err.msg, "filepw"),
          "secret file validated without echoing it: %s: %s", err.where, err.msg);
    setenv("V4_AMQP_URL_FILE", "/nonexistent/secret", 1);
    CHECK(v4_worker_config_from_env(&c, &err) == -1 && !strcmp(err.where, "V4_AMQP_URL_FILE") &&
              strstr(err.msg, "/nonexistent/secret"),
          "unreadable secret file: %s: %s", err.where, err.msg);
    unsetenv("V4_AMQP_URL_FILE");

    static const char *const bad[][2] = {
        {"V4_PREFETCH=2\nV4_TASK_QUEUE\n", "config file line 2"},
        {"V4_PREFETCH=2\nV4_NOPE=1\n", "config file line 2"},
        {"\n\nV4_PREFETCH=2\nV4_PREFETCH=3\n", "config file line 4"},
        {"V4_PREFETCH=0\n", "V4_PREFETCH"},
        {"V4_REDIS_URL=http://x\n", "V4_REDIS_URL"},
        {"V4_MODEL_NAME=a,,b\n", "V4_MODEL_NAME"},
        {"V4_MODEL_NAME=my model\n", "V4_MODEL_NAME"},
        {"V4_MODEL_NAME=a,\n", "V4_MODEL_NAME"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        f = fopen(path, "w");
        fputs(bad[i][0], f);
        fclose(f);
        CHECK(v4_worker_config_from_env(&c, &err) == -1 && !strcmp(err.where, bad[i][1]),
              "bad file %zu: where '%s' (want '%s'): %s", i, err.where, bad[i][1], err.msg);
    }
    setenv("V4_CONFIG_FILE", "/nonexistent/v4.conf", 1);
    CHECK(v4_worker_config_from_env(&c, &err) == -1 && !strcmp(err.where, "V4_CONFIG_FILE"), "missing file");
    unsetenv("V4_CONFIG_FILE");
    /* expert cache settings */
    static const struct { const char *v; long long want; } sizes[] = {
        {"0", 0}, {"4096", 4096}, {"64M", 64ll << 20}, {"1.5G", 3ll << 29}, {"2TB", 2ll << 40}, {"10k", 10240}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        setenv("V4_HOST_CACHE_BYTES", sizes[i].v, 1);
        CHECK(v4_worker_config_from_env(&c, &err) == 0 && c.host_cache_bytes == sizes[i].want, "bytes %s -> %lld",
              sizes[i].v, c.host_cache_bytes);
    }
    static const char *const badsz[] = {"-1", "12X", "G", "1e30", "nan"};
    for (size_t i = 0; i < sizeof badsz / sizeof badsz[0]; i++) {
        setenv("V4_HOST_CACHE_BYTES", badsz[i], 1);
        CHECK(v4_worker_config_from_env(&c, &err) == -1 && !strcmp(err.where, "V4_HOST_CACHE_BYTES"), "bad bytes %s",
              badsz[i]);
    }
    unsetenv("V4_HOST_CACHE_BYTES");
    CHECK(v4_worker_config_from_env(&c, &err) == 0 && !strcmp(c.cache_policy, "next") && c.io_threads == 4 &&
              c.host_cache_bytes == 0 && !c.expert_pack[0], "cache defaults");
    setenv("V4_CACHE_POLICY", "fifo", 1);
    CHECK(v4_worker_config_from_env(&c, &err) == -1 && !strcmp(err.where, "V4_CACHE_POLICY"), "bad policy");
    unsetenv("V4_CACHE_POLICY");
    f = fopen(path, "w");
    fputs("V4_REDIS_URL=off\n", f);
    fclose(f);
    setenv("V4_CONFIG_FILE", path, 1);
    CHECK(v4_worker_config_from_env(&c, &err) == 0 && !strcmp(c.redis_url, "off"), "redis off");
    unsetenv("V4_CONFIG_FILE");
    remove(path);
    remove(secret);

    /* observability settings */
    CHECK(v4_worker_config_from_env(&c, &err) == 0 && c.http_port == 9090 && !strcmp(c.http_addr, "0.0.0.0") &&
              !strcmp(c.log_format, "auto") && !c.http_port_set,
          "http/log defaults (%d %s %s)", c.http_port, c.http_addr, c.log_format);
    setenv("V4_HTTP_PORT", "0", 1);
    setenv("V4_HTTP_ADDR", "::1", 1);
    setenv("V4_LOG_FORMAT", "json", 1);
    CHECK(v4_worker_config_from_env(&c, &err) == 0 && c.http_port == 0 && c.http_port_set && !strcmp(c.http_addr, "::1") &&
              !strcmp(c.log_format, "json"),
          "http off, ipv6 address, json logs");
    setenv("V4_LOG_FORMAT", "text", 1);
    CHECK(v4_worker_config_from_env(&c, &err) == 0 && !strcmp(c.log_format, "text"), "text logs");
    static const char *const badobs[][2] = {
        {"V4_HTTP_PORT", "65536"}, {"V4_HTTP_PORT", "-1"}, {"V4_HTTP_PORT", "80x"}, {"V4_LOG_FORMAT", "xml"},
        {"V4_LOG_FORMAT", "JSON"}, {"V4_LOG_FORMAT", "jsonlines"}};
    for (size_t i = 0; i < sizeof badobs / sizeof badobs[0]; i++) {
        setenv(badobs[i][0], badobs[i][1], 1);
        CHECK(v4_worker_config_from_env(&c, &err) == -1 && !strcmp(err.where, badobs[i][0]), "bad %s=%s: %s",
              badobs[i][0], badobs[i][1], err.where);
        setenv(badobs[i][0], !strcmp(badobs[i][0], "V4_HTTP_PORT") ? "9091" : "auto", 1);
    }
    f = fopen(path, "w");
    fputs("V4_HTTP_PORT=8123\nV4_LOG_FORMAT=text\n", f);
    fclose(f);
    unsetenv("V4_HTTP_PORT");
    unsetenv("V4_LOG_FORMAT");
    unsetenv("V4_HTTP_ADDR");
    setenv("V4_CONFIG_FILE", path, 1);
    CHECK(v4_worker_config_from_env(&c, &err) == 0 && c.http_port == 8123 && c.http_port_set &&
              !strcmp(c.log_format, "text"),
          "observability settings from the config file: %s", err.msg);
    unsetenv("V4_CONFIG_FILE");
    remove(path);

    /* GPU settings: defaults, good values (env and file), precise errors */
    CHECK(v4_worker_config_from_env(&c, &err) == 0 && !strcmp(c.device, "cpu") && !strcmp(c.cuda_mode, "auto") &&
              !c.gpu_expert_mem[0] && !strcmp(c.gpu_cache_policy, "next") && !c.gpu_weight_mem[0] &&
              !c.gpu_seq_mem[0],
          "gpu defaults: %s %s '%s' %s '%s'", c.device, c.cuda_mode, c.gpu_expert_mem, c.gpu_cache_policy,
          c.gpu_weight_mem);
    static const char *const goodpol[] = {"lru", "slru", "lfru", "next"};
    for (size_t i = 0; i < sizeof goodpol / sizeof goodpol[0]; i++) {
        setenv("V4_GPU_CACHE_POLICY", goodpol[i], 1);
        setenv("V4_GPU_WEIGHT_MEM", i % 2 ? "40G" : "90%", 1);
        setenv("V4_GPU_SEQ_MEM", i % 2 ? "10%" : "6G", 1);
        CHECK(v4_worker_config_from_env(&c, &err) == 0 && !strcmp(c.gpu_cache_policy, goodpol[i]) &&
                  !strcmp(c.gpu_weight_mem, i % 2 ? "40G" : "90%") && !strcmp(c.gpu_seq_mem, i % 2 ? "10%" : "6G"),
              "V4_GPU_CACHE_POLICY=%s: %s", goodpol[i], err.msg);
    }
    unsetenv("V4_GPU_CACHE_POLICY");
    unsetenv("V4_GPU_WEIGHT_MEM");
    unsetenv("V4_GPU_SEQ_MEM");
    static const char *const goodgpu[][3] = {{"cuda", "resident", "85%"}, {"cuda:3", "hybrid", "12G"},
                                             {"cpu", "auto", "100%"}, {"cuda:255", "auto", "512M"}};
    for (size_t i = 0; i < sizeof goodgpu / sizeof goodgpu[0]; i++) {
        setenv("V4_DEVICE", goodgpu[i][0], 1);
        setenv("V4_CUDA_MODE", goodgpu[i][1], 1);
        setenv("V4_GPU_EXPERT_MEM", goodgpu[i][2], 1);
        CHECK(v4_worker_config_from_env(&c, &err) == 0 && !strcmp(c.device, goodgpu[i][0]) &&
                  !strcmp(c.cuda_mode, goodgpu[i][1]) && !strcmp(c.gpu_expert_mem, goodgpu[i][2]),
              "gpu %s %s %s: %s", goodgpu[i][0], goodgpu[i][1], goodgpu[i][2], err.msg);
    }
    unsetenv("V4_DEVICE");
    unsetenv("V4_CUDA_MODE");
    unsetenv("V4_GPU_EXPERT_MEM");
    static const char *const badgpu[][2] = {
        {"V4_DEVICE", "gpu"},         {"V4_DEVICE", "cuda:"},      {"V4_DEVICE", "cuda:256"},
        {"V4_DEVICE", "cuda:1x"},     {"V4_DEVICE", "cuda:-1"},    {"V4_CUDA_MODE", "fastest"},
        {"V4_CUDA_MODE", "Resident"}, {"V4_GPU_EXPERT_MEM", "0%"}, {"V4_GPU_EXPERT_MEM", "101%"},
        {"V4_GPU_EXPERT_MEM", "12Q"}, {"V4_GPU_EXPERT_MEM", "0"},  {"V4_GPU_EXPERT_MEM", "x%"},
        {"V4_GPU_CACHE_POLICY", "fifo"}, {"V4_GPU_CACHE_POLICY", "LRU"}, {"V4_GPU_WEIGHT_MEM", "0"},
        {"V4_GPU_WEIGHT_MEM", "150%"}, {"V4_GPU_WEIGHT_MEM", "7Z"}, {"V4_GPU_SEQ_MEM", "0"},
        {"V4_GPU_SEQ_MEM", "0%"},     {"V4_GPU_SEQ_MEM", "12 G"}};
    for (size_t i = 0; i < sizeof badgpu / sizeof badgpu[0]; i++) {
        setenv(badgpu[i][0], badgpu[i][1], 1);
        CHECK(v4_worker_config_from_env(&c, &err) == -1 && !strcmp(err.where, badgpu[i][0]) &&
                  strstr(err.msg, badgpu[i][1]), "bad %s=%s: %s %s", badgpu[i][0], badgpu[i][1], err.where, err.msg);
        unsetenv(badgpu[i][0]);
    }
    f = fopen(path, "w");
    fputs("V4_DEVICE=cuda:1\nV4_CUDA_MODE=hybrid\nV4_GPU_EXPERT_MEM=85%\nV4_GPU_CACHE_POLICY=lfru\n", f);
    fclose(f);
    setenv("V4_CONFIG_FILE", path, 1);
    CHECK(v4_worker_config_from_env(&c, &err) == 0 && !strcmp(c.device, "cuda:1") && !strcmp(c.cuda_mode, "hybrid") &&
              !strcmp(c.gpu_expert_mem, "85%") && !strcmp(c.gpu_cache_policy, "lfru"),
          "gpu settings from the config file: %s", err.msg);
    unsetenv("V4_CONFIG_FILE");
    remove(path);

    /* numerics: default exact, exact|fast accepted (env and file), anything else named */
    CHECK(v4_worker_config_from_env(&c, &err) == 0 && !strcmp(c.numerics, "exact"), "numerics default: %s", c.numerics);
    setenv("V4_NUMERICS", "fast", 1);
    CHECK(v4_worker_config_from_env(&c, &err) == 0 && !strcmp(c.numerics, "fast"), "V4_NUMERICS=fast: %s", err.msg);
    static const char *const badnum[] = {"Fast", "fastest", "exact ", "x"};   /* "" = unset: the default */
    for (size_t i = 0; i < sizeof badnum / sizeof badnum[0]; i++) {
        setenv("V4_NUMERICS", badnum[i], 1);
        int rc = v4_worker_config_from_env(&c, &err);
        CHECK(rc == -1 && !strcmp(err.where, "V4_NUMERICS"), "V4_NUMERICS='%s': want an error naming it, got %d %s %s",
              badnum[i], rc, err.where, err.msg);
    }
    unsetenv("V4_NUMERICS");
    f = fopen(path, "w");
    fputs("V4_NUMERICS=fast\n", f);
    fclose(f);
    setenv("V4_CONFIG_FILE", path, 1);
    CHECK(v4_worker_config_from_env(&c, &err) == 0 && !strcmp(c.numerics, "fast"), "numerics from the config file: %s",
          err.msg);
    unsetenv("V4_CONFIG_FILE");
    remove(path);

    /* the router look-ahead of paged experts: default 1, 0 and 1 accepted (env, file, the
     * environment over the file), anything else an error naming V4_LOOKAHEAD and the value */
    unsetenv("V4_LOOKAHEAD");
    CHECK(v4_worker_config_from_env(&c, &err) == 0 && c.lookahead == 1, "look-ahead default: %d", c.lookahead);
    setenv("V4_LOOKAHEAD", "0", 1);
    CHECK(v4_worker_config_from_env(&c, &err) == 0 && c.lookahead == 0, "V4_LOOKAHEAD=0: %d %s", c.lookahead, err.msg);
    setenv("V4_LOOKAHEAD", "1", 1);
    CHECK(v4_worker_config_from_env(&c, &err) == 0 && c.lookahead == 1, "V4_LOOKAHEAD=1: %d %s", c.lookahead, err.msg);
    static const char *const badla[] = {"2", "-1", "yes", "on", "1x", "0.5"};
    for (size_t i = 0; i < sizeof badla / sizeof badla[0]; i++) {
        setenv("V4_LOOKAHEAD", badla[i], 1);
        c.lookahead = 7;
        int rc = v4_worker_config_from_env(&c, &err);
        CHECK(rc == -1 && !strcmp(err.where, "V4_LOOKAHEAD") && strstr(err.msg, badla[i]) && strstr(err.msg, "[0, 1]"),
              "V4_LOOKAHEAD='%s': want an error naming it and the range, got %d %s %s", badla[i], rc, err.where,
              err.msg);
    }
    unsetenv("V4_LOOKAHEAD");
    f = fopen(path, "w");
    fputs("V4_LOOKAHEAD=0\n", f);
    fclose(f);
    setenv("V4_CONFIG_FILE", path, 1);
    CHECK(v4_worker_config_from_env(&c, &err) == 0 && c.lookahead == 0, "look-ahead from the config file: %d %s",
          c.lookahead, err.msg);
    setenv("V4_LOOKAHEAD", "1", 1);
    CHECK(v4_worker_config_from_env(&c, &err) == 0 && c.lookahead == 1, "the environment over the file: %d",
          c.lookahead);
    unsetenv("V4_LOOKAHEAD");
    f = fopen(path, "w");
    fputs("V4_LOOKAHEAD=maybe\n", f);
    fclose(f);
    CHECK(v4_worker_config_from_env(&c, &err) == -1 && !strcmp(err.where, "V4_LOOKAHEAD"),
          "a bad look-ahead in the config file: %s %s", err.where, err.msg);
    unsetenv("V4_CONFIG_FILE");
    remove(path);

    /* the shipped example parses (its secret files are overridden by the environment) */
    char example[4200];
    snprintf(example, sizeof example, "%s/../../config/worker.conf.example", t_env("V4_TEST_DATA", "tests/data"));
    setenv("V4_CONFIG_FILE", example, 1);
    setenv("V4_AMQP_URL", "amqp://h/", 1);
    setenv("V4_REDIS_URL", "off", 1);
    CHECK(v4_worker_config_from_env(&c, &err) == 0 && !strcmp(c.model_name, "tiny"), "example config: %s: %s",
          err.where, err.msg);
    unsetenv("V4_CONFIG_FILE");
    unsetenv("V4_AMQP_URL");
    unsetenv("V4_REDIS_URL");
    TEST_DONE();
}
