/* worker_config.c - environment variables (+ NAME_FILE secrets, + a config file)
 * -> v4_worker_config, with validation.
 * See worker_config.h.  Thread: any; reads getenv only. */
#include "worker_config.h"

#include "byte_suffix.h"
#include "config_file.h"
#include "device_setting.h"
#include "numerics_setting.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Where settings come from, in order: the environment variable NAME, the first line of
 * the file named by NAME_FILE (secrets, e.g. Docker/Kubernetes secret mounts), the
 * config file (V4_CONFIG_FILE), the default. */
typedef struct cfg_src {
    char **names, **values;     /* config file entries (owned) */
    int n;
    char file_value[V4_CFG_STR + 2];
} cfg_src;

static const char *lookup(cfg_src *src, const char *var, v4_error *err, int *failed)
{
    const char *v = getenv(var);
    if (v && *v)
        return v;
    char fvar[160];
    snprintf(fvar, sizeof fvar, "%s_FILE", var);
    const char *path = getenv(fvar);
    for (int i = 0; !(path && *path) && i < src->n; i++)
        if (!strcmp(src->names[i], var))
            return src->values[i];
    for (int i = 0; !(path && *path) && i < src->n; i++)
        if (!strcmp(src->names[i], fvar))
            path = src->values[i];
    if (!path || !*path)
        return NULL;
    FILE *f = fopen(path, "r");
    if (!f || !fgets(src->file_value, sizeof src->file_value, f)) {
        v4_err_set(err, V4_ERR_CONFIG, fvar, "cannot read '%s': %s", path, f ? "empty file" : strerror(errno));
        if (f)
            fclose(f);
        *failed = 1;
        return NULL;
    }
    fclose(f);
    src->file_value[strcspn(src->file_value, "\r\n")] = 0;
    return src->file_value;
}

static int get_str(cfg_src *src, const char *var, const char *dflt, char *out, size_t n, v4_error *err)
{
    int failed = 0;
    const char *v = lookup(src, var, err, &failed);
    if (failed)
        return -1;
    if (!v || !*v)
        v = dflt;
    if (strlen(v) >= n)
        return v4_err_set(err, V4_ERR_CONFIG, var, "value longer than %zu bytes", n - 1);
    memcpy(out, v, strlen(v) + 1);
    return 0;
}

static int get_long(cfg_src *src, const char *var, long dflt, long lo, long hi, long *out, v4_error *err)
{
    int failed = 0;
    const char *v = lookup(src, var, err, &failed);
    if (failed)
        return -1;
    if (!v || !*v) {
        *out = dflt;
        return 0;
    }
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || end == v || x < lo || x > hi)
        return v4_err_set(err, V4_ERR_CONFIG, var, "'%s' is not an integer in [%ld, %ld]", v, lo, hi);
    *out = x;
    return 0;
}

static int get_int(cfg_src *src, const char *var, long dflt, long lo, long hi, int *out, v4_error *err)
{
    long x;
    if (get_long(src, var, dflt, lo, hi, &x, err))
        return -1;
    *out = (int)x;
    return 0;
}

static int check_name(const char *var, const char *v, v4_error *err)
{
    if (!*v)
        return v4_err_set(err, V4_ERR_CONFIG, var, "must not be empty");
    return 0;
}

/* V4_DEVICE cpu | cuda | cuda:N (N 0..255); V4_CUDA_MODE auto | resident | hybrid;
 * V4_GPU_EXPERT_MEM, V4_GPU_WEIGHT_MEM and V4_GPU_SEQ_MEM "" | a byte count | P% (0 < P <= 100);
 * V4_GPU_CACHE_POLICY lru | slru | lfru | next.  The syntax only: whether
 * the device exists is known when the worker opens it. */
static int check_gpu(const v4_worker_config *c, v4_error *err)
{
    if (v4_parse_device(c->device, NULL))
        return v4_err_set(err, V4_ERR_CONFIG, "V4_DEVICE", "'%s' is not cpu, cuda or cuda:N", c->device);
    if (!v4_cuda_mode_ok(c->cuda_mode))
        return v4_err_set(err, V4_ERR_CONFIG, "V4_CUDA_MODE", "'%s': expected auto, resident or hybrid", c->cuda_mode);
    double bytes;   /* a percentage of 100 "bytes": > 0 exactly when the percentage is */
    if (c->gpu_expert_mem[0] && (v4_parse_budget(c->gpu_expert_mem, 100, &bytes) || !(bytes > 0)))
        return v4_err_set(err, V4_ERR_CONFIG, "V4_GPU_EXPERT_MEM",
                          "'%s' is not a byte count (12G, 512M) or a percentage of the routed experts in (0, 100] "
                          "(85%%)", c->gpu_expert_mem);
    if (c->gpu_weight_mem[0] && (v4_parse_budget(c->gpu_weight_mem, 100, &bytes) || !(bytes > 0)))
        return v4_err_set(err, V4_ERR_CONFIG, "V4_GPU_WEIGHT_MEM",
                          "'%s' is not a byte count (40G, 512M) or a percentage of the device's memory in (0, 100] "
                          "(90%%)", c->gpu_weight_mem);
    if (c->gpu_seq_mem[0] && (v4_parse_budget(c->gpu_seq_mem, 100, &bytes) || !(bytes > 0)))
        return v4_err_set(err, V4_ERR_CONFIG, "V4_GPU_SEQ_MEM",
                          "'%s' is not a byte count (8G, 512M) or a percentage of the device's memory in (0, 100] "
                          "(10%%)", c->gpu_seq_mem);
    if (strcmp(c->gpu_cache_policy, "lru") && strcmp(c->gpu_cache_policy, "slru") &&
        strcmp(c->gpu_cache_policy, "lfru") && strcmp(c->gpu_cache_policy, "next"))
        return v4_err_set(err, V4_ERR_CONFIG, "V4_GPU_CACHE_POLICY", "'%s' is not lru, slru, lfru or next",
                          c->gpu_cache_policy);
    return 0;
}

/* V4_MODEL_NAME: "name[,alias...]", each 1..127 bytes of [A-Za-z0-9._:/-]; the first
 * is the served name. */
static int check_model_names(v4_worker_config *c, v4_error *err)
{
    const char *p = c->model_names;
    for (int i = 0;; i++) {
        size_t n = strcspn(p, ",");
        if (n == 0 || n >= sizeof c->model_name)
            return v4_err_set(err, V4_ERR_CONFIG, "V4_MODEL_NAME", "name %d is %s", i + 1,
                              n ? "longer than 127 bytes" : "empty");
        for (size_t k = 0; k < n; k++)
            if (!isalnum((unsigned char)p[k]) && !strchr("._:/-", p[k]))
                return v4_err_set(err, V4_ERR_CONFIG, "V4_MODEL_NAME",
                                  "name %d has the character '%c' (allowed: letters, digits, . _ : / -)", i + 1, p[k]);
        if (i == 0)
            snprintf(c->model_name, sizeof c->model_name, "%.*s", (int)n, p);
        if (!p[n])
            return 0;
        p += n + 1;
    }
}

/* Every setting name (also accepted with the _FILE suffix), for config-file checking. */
static const char *const KNOWN[] = {
    "V4_AMQP_URL", "V4_AMQP_CACERT", "V4_AMQP_CERT", "V4_AMQP_KEY", "V4_REDIS_URL", "V4_MODEL_DIR", "V4_MODEL_NAME", "V4_TASK_QUEUE", "V4_DEAD_QUEUE",
    "V4_DLX_EXCHANGE", "V4_INVALID_QUEUE", "V4_UNROUTABLE_QUEUE", "V4_RESULTS_EXCHANGE", "V4_RESULTS_ROUTING_KEY", "V4_RESULTS_QUEUE",
    "V4_WORKER_ID", "V4_PREFETCH", "V4_HEARTBEAT_S", "V4_DELIVERY_LIMIT", "V4_DEADLINE_MS", "V4_MAX_CONTEXT", "V4_PREFILL_CHUNK", "V4_CONCURRENCY",
    "V4_WARMUP_TOKENS", "V4_WARMUP_EXPERTS", "V4_MODEL_WATCH_S",
    "V4_CONFIRM_TIMEOUT_MS", "V4_MAX_BODY_BYTES", "V4_GRACE_MS", "V4_LOG_LEVEL", "V4_REDIS_PREFIX",
    "V4_REDIS_BUCKET_S", "V4_REDIS_BUCKET_TTL_S", "V4_REDIS_DONE_TTL_S", "V4_REDIS_TIMEOUT_MS",
    "V4_REDIS_BACKLOG", "V4_FAULT_EXIT_BEFORE_ACK", "V4_EXPERT_PACK", "V4_HOST_CACHE_BYTES", "V4_CACHE_POLICY",
    "V4_IO_THREADS", "V4_LOOKAHEAD", "V4_HTTP_PORT", "V4_HTTP_ADDR", "V4_LOG_FORMAT", "V4_DEVICE", "V4_CUDA_MODE",
    "V4_GPU_EXPERT_MEM", "V4_GPU_CACHE_POLICY", "V4_GPU_WEIGHT_MEM", "V4_GPU_SEQ_MEM", "V4_NUMERICS", "V4_THREADS",
    "V4_GRAMMAR_CACHE_BYTES", "V4_GRAMMAR_COMPACT", "V4_MAX_N", "V4_DEFAULT_MAX_TOKENS", "V4_URGENT_QUEUE",
    "V4_CANCEL_EXCHANGE", "V4_CANCEL_TTL_S", "V4_CANCEL_MAX", "V4_AFFINITY", "V4_AFFINITY_EXCHANGE",
    "V4_AFFINITY_ID", "V4_AFFINITY_TTL_MS", "V4_AFFINITY_WEIGHT",
    "V4_PREFIX_CACHE", "V4_PREFIX_CACHE_BYTES", "V4_PREFIX_BLOCK", "V4_PREFIX_POLICY",
};

/* Fleet affinity (docs/queue-worker.md "Fleet affinity"): V4_AFFINITY 0 | 1;
 * V4_AFFINITY_EXCHANGE (default "<task queue>.affinity"); V4_AFFINITY_ID 1..100 bytes of
 * [A-Za-z0-9._:-] (default: V4_WORKER_ID when given, else the host name); the queue
 * "<exchange>.<id>" and the alternate exchange "<exchange>.fallback" follow from them.
 * Read (and checked) even when affinity is off, so that a bad value is reported at once. */
static int read_affinity(cfg_src *src, v4_worker_config *c, v4_error *err)
{
    char dflt[160], host[101] = "worker", id[128];
    snprintf(dflt, sizeof dflt, "%s.affinity", c->task_queue);
    int failed = 0;
    const char *given_wid = lookup(src, "V4_WORKER_ID", err, &failed);
    if (failed)
        return -1;
    if (given_wid && *given_wid)
        snprintf(host, sizeof host, "%s", given_wid);
    else if (gethostname(host, sizeof host - 1) || !host[0])
        snprintf(host, sizeof host, "worker");
    host[sizeof host - 1] = 0;
    if (get_int(src, "V4_AFFINITY", 0, 0, 1, &c->affinity, err) ||
        get_str(src, "V4_AFFINITY_EXCHANGE", dflt, c->affinity_exchange, sizeof c->affinity_exchange, err) ||
        get_str(src, "V4_AFFINITY_ID", host, id, sizeof id, err) ||
        get_long(src, "V4_AFFINITY_TTL_MS", 30000, 100, 86400000, &c->affinity_ttl_ms, err) ||
        get_int(src, "V4_AFFINITY_WEIGHT", 100, 1, 1000, &c->affinity_weight, err))
        return -1;
    size_t n = strlen(id);
    if (n > 100)
        return v4_err_set(err, V4_ERR_CONFIG, "V4_AFFINITY_ID", "'%.40s...' is %zu bytes long (at most 100)", id, n);
    for (size_t k = 0; k < n; k++)
        if (!isalnum((unsigned char)id[k]) && !strchr("._:-", id[k]))
            return v4_err_set(err, V4_ERR_CONFIG, "V4_AFFINITY_ID",
                              "'%s' has the character '%c' at byte %zu (allowed: letters, digits, . _ : -; set "
                              "V4_AFFINITY_ID when the host name or V4_WORKER_ID has others)", id, id[k], k + 1);
    if (!strcmp(c->affinity_exchange, c->task_queue) || !strncmp(c->affinity_exchange, "amq.", 4))
        return v4_err_set(err, V4_ERR_CONFIG, "V4_AFFINITY_EXCHANGE", "'%s' is %s", c->affinity_exchange,
                          strncmp(c->affinity_exchange, "amq.", 4) ? "the task queue's name (V4_TASK_QUEUE)"
                                                                   : "in the broker's reserved amq. namespace");
    if (check_name("V4_AFFINITY_EXCHANGE", c->affinity_exchange, err))
        return -1;
    snprintf(c->affinity_fallback, sizeof c->affinity_fallback, "%s.fallback", c->affinity_exchange);
    if (!c->affinity)
        c->affinity_queue[0] = 0;
    else if (!strcmp(id, "fallback"))
        return v4_err_set(err, V4_ERR_CONFIG, "V4_AFFINITY_ID",
                          "'fallback' would name the queue like the alternate exchange '%s'", c->affinity_fallback);
    else if (strlen(c->affinity_exchange) + 1 + n > 255)   /* AMQP names are short strings */
        return v4_err_set(err, V4_ERR_CONFIG, "V4_AFFINITY_ID",
                          "the queue name '%s.%s' would be %zu bytes long (at most 255)", c->affinity_exchange, id,
                          strlen(c->affinity_exchange) + 1 + n);
    else
        snprintf(c->affinity_queue, sizeof c->affinity_queue, "%s.%s", c->affinity_exchange, id);
    return 0;
}

int v4_parse_bytes(const char *v, long long *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    const int no_digits = end == v;
    const double mul = v4_byte_suffix(&end);
    if (errno || no_digits || *end || !(x >= 0) || x * mul > 9.0e18)
        return -1;
    *out = (long long)(x * mul);
    return 0;
}

static int get_bytes(cfg_src *src, const char *var, long long *out, v4_error *err)
{
    int failed = 0;
    const char *v = lookup(src, var, err, &failed);
    if (failed)
        return -1;
    *out = 0;
    if (v && *v && v4_parse_bytes(v, out))
        return v4_err_set(err, V4_ERR_CONFIG, var, "'%s' is not a byte count (e.g. 68719476736, 64G, 512M)", v);
    return 0;
}

static int read_all(cfg_src *src, v4_worker_config *c, v4_error *err)
{
    char host[64] = "worker";
    gethostname(host, sizeof host - 1);
    char wid[128];
    snprintf(wid, sizeof wid, "%s-%ld", host, (long)getpid());
    long lvl = 1;
    if (get_str(src, "V4_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/", c->amqp_url, sizeof c->amqp_url, err) ||
        get_str(src, "V4_AMQP_CACERT", "", c->amqp_cacert, sizeof c->amqp_cacert, err) ||
        get_str(src, "V4_AMQP_CERT", "", c->amqp_cert, sizeof c->amqp_cert, err) ||
        get_str(src, "V4_AMQP_KEY", "", c->amqp_key, sizeof c->amqp_key, err) ||
        get_str(src, "V4_REDIS_URL", "redis://127.0.0.1:6379/0", c->redis_url, sizeof c->redis_url, err) ||
        get_str(src, "V4_MODEL_DIR", "models/tiny", c->model_dir, sizeof c->model_dir, err) ||
        get_str(src, "V4_MODEL_NAME", "deepseek-v4", c->model_names, sizeof c->model_names, err) ||
        get_str(src, "V4_TASK_QUEUE", "tasks", c->task_queue, sizeof c->task_queue, err) ||
        get_str(src, "V4_DEAD_QUEUE", "tasks.dead", c->dead_queue, sizeof c->dead_queue, err) ||
        get_str(src, "V4_DLX_EXCHANGE", "tasks.dlx", c->dlx_exchange, sizeof c->dlx_exchange, err) ||
        get_str(src, "V4_INVALID_QUEUE", "tasks.invalid", c->invalid_queue, sizeof c->invalid_queue, err) ||
        get_str(src, "V4_UNROUTABLE_QUEUE", "results.unroutable", c->unroutable_queue, sizeof c->unroutable_queue,
                err) ||
        get_str(src, "V4_RESULTS_EXCHANGE", "results", c->results_exchange, sizeof c->results_exchange, err) ||
        get_str(src, "V4_RESULTS_ROUTING_KEY", "results", c->results_routing_key, sizeof c->results_routing_key,
                err) ||
        get_str(src, "V4_RESULTS_QUEUE", "results", c->results_queue, sizeof c->results_queue, err) ||
        get_str(src, "V4_WORKER_ID", wid, c->worker_id, sizeof c->worker_id, err) ||
        get_int(src, "V4_PREFETCH", 1, 1, 64, &c->prefetch, err) ||
        get_int(src, "V4_HEARTBEAT_S", 10, 0, 600, &c->heartbeat_s, err) ||
        get_int(src, "V4_DELIVERY_LIMIT", 5, 1, 1000, &c->delivery_limit, err) ||
        get_long(src, "V4_DEADLINE_MS", 600000, 1, 86400000, &c->deadline_ms, err) ||
        get_long(src, "V4_MAX_CONTEXT", 0, 0, 1L << 30, &c->max_context, err) ||
        get_int(src, "V4_PREFILL_CHUNK", 0, 0, 4096, &c->prefill_chunk, err) ||
        get_int(src, "V4_CONCURRENCY", 1, 1, 64, &c->concurrency, err) ||
        get_int(src, "V4_WARMUP_TOKENS", 4, 0, 1024, &c->warmup_tokens, err) ||
        get_int(src, "V4_WARMUP_EXPERTS", 1, 0, 1, &c->warmup_experts, err) ||
        get_long(src, "V4_MODEL_WATCH_S", 0, 0, 86400, &c->model_watch_s, err) ||
        get_long(src, "V4_CONFIRM_TIMEOUT_MS", 10000, 100, 600000, &c->confirm_timeout_ms, err) ||
        get_long(src, "V4_MAX_BODY_BYTES", 1 << 20, 64, 64L << 20, &c->max_body_bytes, err) ||
        get_long(src, "V4_GRACE_MS", 30000, 0, 86400000, &c->grace_ms, err) ||
        get_long(src, "V4_LOG_LEVEL", 1, 0, 2, &lvl, err) ||
        get_str(src, "V4_REDIS_PREFIX", "v4", c->redis_prefix, sizeof c->redis_prefix, err) ||
        get_long(src, "V4_REDIS_BUCKET_S", 3600, 60, 86400, &c->redis_bucket_s, err) ||
        get_long(src, "V4_REDIS_BUCKET_TTL_S", 172800, 60, 31536000, &c->redis_bucket_ttl_s, err) ||
        get_long(src, "V4_REDIS_DONE_TTL_S", 604800, 60, 31536000, &c->redis_done_ttl_s, err) ||
        get_long(src, "V4_REDIS_TIMEOUT_MS", 1000, 10, 60000, &c->redis_timeout_ms, err) ||
        get_long(src, "V4_REDIS_BACKLOG", 10000, 1, 10000000, &c->redis_backlog, err) ||
        get_int(src, "V4_FAULT_EXIT_BEFORE_ACK", 0, 0, 1, &c->fault_exit_before_ack, err) ||
        get_str(src, "V4_EXPERT_PACK", "", c->expert_pack, sizeof c->expert_pack, err) ||
        get_bytes(src, "V4_HOST_CACHE_BYTES", &c->host_cache_bytes, err) ||
        get_str(src, "V4_CACHE_POLICY", "next", c->cache_policy, sizeof c->cache_policy, err) ||
        get_int(src, "V4_IO_THREADS", 4, 1, 64, &c->io_threads, err) ||
        get_int(src, "V4_LOOKAHEAD", 1, 0, 1, &c->lookahead, err) ||
        get_int(src, "V4_THREADS", 0, 0, 1024, &c->threads, err) ||
        get_int(src, "V4_HTTP_PORT", 9090, 0, 65535, &c->http_port, err) ||
        get_str(src, "V4_HTTP_ADDR", "0.0.0.0", c->http_addr, sizeof c->http_addr, err) ||
        get_str(src, "V4_LOG_FORMAT", "auto", c->log_format, sizeof c->log_format, err) ||
        get_str(src, "V4_DEVICE", "cpu", c->device, sizeof c->device, err) ||
        get_str(src, "V4_CUDA_MODE", "auto", c->cuda_mode, sizeof c->cuda_mode, err) ||
        get_str(src, "V4_GPU_EXPERT_MEM", "", c->gpu_expert_mem, sizeof c->gpu_expert_mem, err) ||
        get_str(src, "V4_GPU_CACHE_POLICY", "next", c->gpu_cache_policy, sizeof c->gpu_cache_policy, err) ||
        get_str(src, "V4_GPU_WEIGHT_MEM", "", c->gpu_weight_mem, sizeof c->gpu_weight_mem, err) ||
        get_str(src, "V4_GPU_SEQ_MEM", "", c->gpu_seq_mem, sizeof c->gpu_seq_mem, err) ||
        get_str(src, "V4_NUMERICS", "exact", c->numerics, sizeof c->numerics, err) ||
        get_bytes(src, "V4_GRAMMAR_CACHE_BYTES", &c->grammar_cache_bytes, err) ||
        get_int(src, "V4_GRAMMAR_COMPACT", 0, 0, 1, &c->grammar_compact, err) ||
        get_int(src, "V4_MAX_N", 16, 1, 16, &c->max_n, err) ||   /* V4_TASK_MAX_N (worker/serve/task_packet.h) */
        /* V4_DEFAULT_MAX_TOKENS_DEFAULT (worker/serve/task_run.h) */
        get_long(src, "V4_DEFAULT_MAX_TOKENS", 4096, 0, 1L << 20, &c->default_max_tokens, err) ||
        get_long(src, "V4_CANCEL_TTL_S", 3600, 1, 604800, &c->cancel_ttl_s, err) ||
        get_int(src, "V4_CANCEL_MAX", 10000, 1, 1000000, &c->cancel_max, err) ||
        get_int(src, "V4_PREFIX_CACHE", 1, 0, 1, &c->prefix_cache, err) ||
        get_bytes(src, "V4_PREFIX_CACHE_BYTES", &c->prefix_cache_bytes, err) ||
        get_int(src, "V4_PREFIX_BLOCK", 256, 1, 65536, &c->prefix_block, err) ||
        get_str(src, "V4_PREFIX_POLICY", "slru", c->prefix_policy, sizeof c->prefix_policy, err) ||
        check_gpu(c, err))
        return -1;
    /* the urgent lane and the cancel fanout are named after the task queue unless given;
     * "off" turns either off */
    char dflt[160];
    snprintf(dflt, sizeof dflt, "%s.urgent", c->task_queue);
    if (get_str(src, "V4_URGENT_QUEUE", dflt, c->urgent_queue, sizeof c->urgent_queue, err))
        return -1;
    snprintf(dflt, sizeof dflt, "%s.cancel", c->task_queue);
    if (get_str(src, "V4_CANCEL_EXCHANGE", dflt, c->cancel_exchange, sizeof c->cancel_exchange, err))
        return -1;
    if (!strcmp(c->urgent_queue, "off"))
        c->urgent_queue[0] = 0;
    if (!strcmp(c->cancel_exchange, "off"))
        c->cancel_exchange[0] = 0;
    if (c->urgent_queue[0] && !strcmp(c->urgent_queue, c->task_queue))
        return v4_err_set(err, V4_ERR_CONFIG, "V4_URGENT_QUEUE", "'%s' is the task queue (V4_TASK_QUEUE) itself",
                          c->urgent_queue);
    if (strcmp(c->prefix_policy, "slru") && strcmp(c->prefix_policy, "lru") && strcmp(c->prefix_policy, "fifo"))
        return v4_err_set(err, V4_ERR_CONFIG, "V4_PREFIX_POLICY", "'%s' is not slru, lru or fifo", c->prefix_policy);
    if (read_affinity(src, c, err))
        return -1;
    if (v4_parse_numerics(c->numerics, NULL))
        return v4_err_set(err, V4_ERR_CONFIG, "V4_NUMERICS", "'%s' is not exact or fast", c->numerics);
    if (strcmp(c->cache_policy, "lru") && strcmp(c->cache_policy, "slru") && strcmp(c->cache_policy, "lfru") &&
        strcmp(c->cache_policy, "next"))
        return v4_err_set(err, V4_ERR_CONFIG, "V4_CACHE_POLICY", "'%s' is not lru, slru, lfru or next", c->cache_policy);
    if (c->prefetch < c->concurrency)   /* every slot needs a delivery at hand */
        c->prefetch = c->concurrency;
    int failed = 0;
    c->http_port_set = lookup(src, "V4_HTTP_PORT", err, &failed) != NULL;
    if (strcmp(c->log_format, "json") && strcmp(c->log_format, "text") && strcmp(c->log_format, "auto"))
        return v4_err_set(err, V4_ERR_CONFIG, "V4_LOG_FORMAT", "'%s' is not json, text or auto", c->log_format);
    if (check_name("V4_HTTP_ADDR", c->http_addr, err))
        return -1;
    c->log_level = (int)lvl;
    if (check_model_names(c, err))
        return -1;
    if (strncmp(c->amqp_url, "amqp://", 7) && strncmp(c->amqp_url, "amqps://", 8))
        return v4_err_set(err, V4_ERR_CONFIG, "V4_AMQP_URL", "must start with amqp:// or amqps://");
    if (strcmp(c->redis_url, "off") && strncmp(c->redis_url, "redis://", 8))
        return v4_err_set(err, V4_ERR_CONFIG, "V4_REDIS_URL", "must start with redis:// (or be \"off\")");
    if (check_name("V4_TASK_QUEUE", c->task_queue, err) || check_name("V4_DEAD_QUEUE", c->dead_queue, err) ||
        check_name("V4_DLX_EXCHANGE", c->dlx_exchange, err) ||
        check_name("V4_INVALID_QUEUE", c->invalid_queue, err) ||
        check_name("V4_UNROUTABLE_QUEUE", c->unroutable_queue, err) ||
        check_name("V4_RESULTS_EXCHANGE", c->results_exchange, err) ||
        check_name("V4_REDIS_PREFIX", c->redis_prefix, err))
        return -1;
    return 0;
}

int v4_worker_config_from_env(v4_worker_config *c, v4_error *err)
{
    memset(c, 0, sizeof *c);
    cfg_src src;
    memset(&src, 0, sizeof src);
    const char *path = getenv("V4_CONFIG_FILE");
    if (path && *path) {
        if (v4_cfgfile_load(path, KNOWN, (int)(sizeof KNOWN / sizeof KNOWN[0]), &src.names, &src.values, &src.n,
                            err))
            return -1;
        snprintf(c->config_file, sizeof c->config_file, "%s", path);
    }
    int rc = read_all(&src, c, err);
    v4_cfgfile_free(src.names, src.values, src.n);
    return rc;
}

void v4_mask_url(const char *url, char *out, size_t n)
{
    if (!n)
        return;
    const char *scheme = strstr(url, "://");
    const char *at = scheme ? strchr(scheme + 3, '@') : NULL;
    const char *colon = NULL;
    if (at)
        for (const char *p = scheme + 3; p < at; p++)
            if (*p == ':') {
                colon = p;
                break;
            }
    if (!colon) {
        snprintf(out, n, "%s", url);
        return;
    }
    snprintf(out, n, "%.*s***%s", (int)(colon + 1 - url), url, at);
}
