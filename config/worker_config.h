/* worker_config.h - the queue worker's settings, from the environment and/or a file.
 *
 * Design: v4_worker_config_from_env() fills every field with its default and
 * overrides it, per setting, from (highest first) the environment variable NAME, the
 * first line of the file named by NAME_FILE (for secrets mounted as files), the
 * config file named by V4_CONFIG_FILE (NAME=value lines, config/config_file.h; the
 * same NAME and NAME_FILE keys), then validates the result; the error names the
 * setting (or the config file line).  Names: V4_AMQP_URL, V4_AMQP_CACERT,
 * V4_AMQP_CERT, V4_AMQP_KEY (amqps:// CA file, client certificate and key), V4_REDIS_URL ("off" = no
 * counters), V4_MODEL_DIR, V4_MODEL_NAME (comma-separated: the name, then aliases
 * tasks may also use), V4_TASK_QUEUE, V4_DEAD_QUEUE,
 * V4_DLX_EXCHANGE, V4_INVALID_QUEUE, V4_UNROUTABLE_QUEUE, V4_RESULTS_EXCHANGE, V4_RESULTS_ROUTING_KEY,
 * V4_RESULTS_QUEUE, V4_URGENT_QUEUE (the urgent lane, default "<V4_TASK_QUEUE>.urgent", "off" =
 * none), V4_CANCEL_EXCHANGE (fanout of cancel messages, default "<V4_TASK_QUEUE>.cancel", "off" =
 * none), V4_CANCEL_TTL_S and V4_CANCEL_MAX (how long and how many cancelled ids are
 * remembered), V4_AFFINITY (0 | 1, default 0: fleet affinity, docs/queue-worker.md
 * "Fleet affinity"), V4_AFFINITY_EXCHANGE (default "<V4_TASK_QUEUE>.affinity"),
 * V4_AFFINITY_ID (this worker's queue is "<exchange>.<id>"; default V4_WORKER_ID when
 * given, else the host name), V4_AFFINITY_TTL_MS and V4_AFFINITY_WEIGHT, V4_PREFETCH, V4_HEARTBEAT_S, V4_DELIVERY_LIMIT, V4_DEADLINE_MS,
 * V4_CONFIRM_TIMEOUT_MS, V4_MAX_BODY_BYTES, V4_GRACE_MS, V4_WORKER_ID, V4_LOG_LEVEL,
 * V4_REDIS_PREFIX, V4_REDIS_BUCKET_S, V4_REDIS_BUCKET_TTL_S, V4_REDIS_DONE_TTL_S,
 * V4_REDIS_TIMEOUT_MS, V4_REDIS_BACKLOG, V4_EXPERT_PACK, V4_HOST_CACHE_BYTES (a byte
 * count, suffixes K/M/G/T = powers of 1024), V4_CACHE_POLICY, V4_IO_THREADS, V4_LOOKAHEAD
 * (0 | 1, default 1: the router look-ahead of paged experts, host cache and GPU slots),
 * V4_HTTP_PORT (health/metrics endpoint, default 9090, 0 = off; http_port_set tells
 * whether it was given: the worker treats a busy default port as a warning, a busy
 * explicit one as an error), V4_HTTP_ADDR (its
 * listen address, default 0.0.0.0), V4_LOG_FORMAT (json | text | auto = JSON unless
 * stderr is a terminal), V4_DEVICE (cpu | cuda | cuda:N), V4_CUDA_MODE (auto | resident |
 * hybrid), V4_GPU_EXPERT_MEM (GPU budget of routed experts: bytes or P%),
 * V4_GPU_CACHE_POLICY (the GPU expert slots' eviction: lru | slru | lfru | next, default
 * next), V4_GPU_WEIGHT_MEM (the hybrid mode's GPU weight-copy budget: bytes or P% of the
 * device's memory; unset: its free memory less 1 GiB), V4_NUMERICS
 * (exact | fast, default exact; docs/numerics.md), V4_GRAMMAR_CACHE_BYTES (the output
 * constraints' compile cache, a byte count, 0 = 64 MiB) and V4_GRAMMAR_COMPACT (0 | 1:
 * JSON constraints without whitespace; docs/structured-outputs.md), V4_PREFIX_CACHE,
 * V4_PREFIX_CACHE_BYTES, V4_PREFIX_BLOCK, V4_PREFIX_POLICY (the prefix cache: on, 1 GiB,
 * 256, slru; docs/prefix-cache.md), and the test
 * hook V4_FAULT_EXIT_BEFORE_ACK.
 * Credentials: v4_mask_url() replaces the password of a URL by "***"; only masked
 * URLs may be logged.
 *
 * Ownership: the struct holds copies (fixed buffers), nothing to free.
 * Thread: any (reads the environment: call before starting threads).
 */
#ifndef V4_WORKER_CONFIG_H
#define V4_WORKER_CONFIG_H

#include <stddef.h>

#include "error.h"

#define V4_CFG_STR 512

typedef struct v4_worker_config {
    char amqp_url[V4_CFG_STR];
    char amqp_cacert[V4_CFG_STR], amqp_cert[V4_CFG_STR], amqp_key[V4_CFG_STR];   /* TLS files, "" = none */
    char redis_url[V4_CFG_STR];
    char model_dir[V4_CFG_STR];
    char model_name[128];           /* the model name this worker serves (results, Redis keys) */
    char model_names[V4_CFG_STR];   /* V4_MODEL_NAME as given: "name[,alias...]" - tasks may use any */
    char task_queue[128], dead_queue[128], dlx_exchange[128], invalid_queue[128];
    char unroutable_queue[128];     /* results the broker returned (reply_to queue gone), with why */
    char results_exchange[128], results_routing_key[128], results_queue[128];
    char urgent_queue[160];         /* V4_URGENT_QUEUE: taken before the task queue; "" = none ("off") */
    char cancel_exchange[160];      /* V4_CANCEL_EXCHANGE: fanout of {"cancel": id}; "" = none ("off") */
    long cancel_ttl_s;              /* V4_CANCEL_TTL_S: a cancelled id is remembered this long (1..604800) */
    int cancel_max;                 /* V4_CANCEL_MAX: at most this many ids remembered (1..1000000) */
    char worker_id[128];
    /* fleet affinity (docs/queue-worker.md "Fleet affinity"; queue/topology.h) */
    int affinity;                   /* V4_AFFINITY: 1 = consume a queue of its own on the affinity exchange */
    char affinity_exchange[160];    /* V4_AFFINITY_EXCHANGE: the x-consistent-hash exchange */
    char affinity_queue[300];       /* "<affinity_exchange>.<V4_AFFINITY_ID>" ("" when affinity is off) */
    char affinity_fallback[176];    /* "<affinity_exchange>.fallback": its alternate exchange (fanout -> task queue) */
    long affinity_ttl_ms;           /* V4_AFFINITY_TTL_MS: x-message-ttl of the own queue (100..86400000) */
    int affinity_weight;            /* V4_AFFINITY_WEIGHT: the binding's points on the hash ring (1..1000) */
    int prefetch;                   /* unacked deliveries = task slots (1..64) */
    int heartbeat_s;                /* AMQP heartbeat (0 = off, 1..600) */
    int delivery_limit;             /* x-delivery-limit of the task queue (1..1000) */
    long deadline_ms;               /* default per-task deadline (1..86400000) */
    int concurrency;                /* V4_CONCURRENCY: tasks decoded together (continuous batching) */
    long max_context;               /* V4_MAX_CONTEXT: prompt + max_tokens per task (0 = the model's) */
    int prefill_chunk;              /* V4_PREFILL_CHUNK: prompt positions per step (0 = the backend's default) */
    int warmup_tokens;              /* V4_WARMUP_TOKENS: warm-up generation before ready (0 = none) */
    int warmup_experts;             /* V4_WARMUP_EXPERTS: pre-load the fleet's hottest experts (0/1) */
    long model_watch_s;             /* V4_MODEL_WATCH_S: reload when V4_MODEL_DIR resolves anew (0 = off) */
    long confirm_timeout_ms;        /* wait for a publisher confirm (100..600000) */
    long max_body_bytes;            /* largest task body accepted (64..64 MiB) */
    long grace_ms;                  /* SIGTERM grace period for the running task */
    int log_level;                  /* 0 error, 1 info, 2 debug */
    /* Redis expert-utilization counters (telemetry/util_redis.h) */
    char redis_prefix[64];          /* key prefix */
    long redis_bucket_s;            /* time-bucket width */
    long redis_bucket_ttl_s;        /* expiry of a bucket hash */
    long redis_done_ttl_s;          /* expiry of a done:{task id} guard */
    long redis_timeout_ms;          /* connect / command timeout */
    long redis_backlog;             /* task records kept while Redis is unreachable */
    /* routed experts: resident (mapped checkpoint) or paged through the host cache */
    char expert_pack[V4_CFG_STR];   /* V4_EXPERT_PACK: pack dir ("" = page from the safetensors) */
    long long host_cache_bytes;     /* V4_HOST_CACHE_BYTES: 0 = all experts resident (no cache) */
    char cache_policy[16];          /* V4_CACHE_POLICY: lru | slru | lfru | next */
    int io_threads;                 /* V4_IO_THREADS: concurrent expert reads */
    int lookahead;                  /* V4_LOOKAHEAD: router look-ahead of paged experts (0/1, default 1) */
    int threads;                    /* V4_THREADS: CPU engine threads (0: the CPUs the
                                     * process may use: affinity, cgroup quota) */
    /* observability (worker/fleet/http_server.h, worker/fleet/log.h) */
    int http_port;                  /* V4_HTTP_PORT: 0 = no endpoint */
    int http_port_set;              /* V4_HTTP_PORT was given (env, _FILE or file), not the default */
    char http_addr[64];             /* V4_HTTP_ADDR: IPv4/IPv6 literal to listen on */
    char log_format[8];             /* V4_LOG_FORMAT: json | text | auto */
    /* the device (docs/cuda.md); the worker's engine takes them from here */
    char device[16];                /* V4_DEVICE: cpu | cuda | cuda:N */
    char cuda_mode[16];             /* V4_CUDA_MODE: auto | resident | hybrid */
    char gpu_expert_mem[32];        /* V4_GPU_EXPERT_MEM: "" (all resident) | bytes | P% */
    char gpu_cache_policy[8];       /* V4_GPU_CACHE_POLICY: lru | slru | lfru | next */
    char gpu_weight_mem[32];        /* V4_GPU_WEIGHT_MEM: "" (free memory - 1 GiB) | bytes | P% */
    char gpu_seq_mem[32];           /* V4_GPU_SEQ_MEM: "" (from the tasks' claims) | bytes | P% of the device */
    char numerics[8];               /* V4_NUMERICS: exact | fast (config/numerics_setting.h) */
    /* output constraints (docs/structured-outputs.md) */
    long long grammar_cache_bytes;  /* V4_GRAMMAR_CACHE_BYTES: compiled constraints kept (0 = 64 MiB) */
    int grammar_compact;            /* V4_GRAMMAR_COMPACT: 1 = JSON without whitespace between tokens */
    int max_n;                      /* V4_MAX_N: most answers per task (a task's n), 1..16 (16) */
    long default_max_tokens;        /* V4_DEFAULT_MAX_TOKENS: a task without max_tokens gets the rest of the
                                     * context up to this, 0..1048576 (4096; 0 = no bound) */
    /* the prefix cache (docs/prefix-cache.md) */
    int prefix_cache;               /* V4_PREFIX_CACHE: 1 on (default), 0 off */
    long long prefix_cache_bytes;   /* V4_PREFIX_CACHE_BYTES: its host budget (0 = 1 GiB) */
    int prefix_block;               /* V4_PREFIX_BLOCK: positions per block (256; rounded up to the model's ratios) */
    char prefix_policy[8];          /* V4_PREFIX_POLICY: slru | lru | fifo */
    int fault_exit_before_ack;      /* TEST HOOK (checklist R13): exit after the result's confirm, before the ack */
    char config_file[V4_CFG_STR];   /* the V4_CONFIG_FILE read, "" if none */
} v4_worker_config;

int v4_worker_config_from_env(v4_worker_config *c, v4_error *err);

/* "68719476736", "64G", "1.5G", "512M", "10k" (K/M/G/T = powers of 1024, optional
 * trailing B) -> bytes.  0 or -1 (not a non-negative byte count). */
int v4_parse_bytes(const char *s, long long *out);

/* Copy url into out (size n) with the password of scheme://user:PASS@host replaced by ***. */
void v4_mask_url(const char *url, char *out, size_t n);

#endif
