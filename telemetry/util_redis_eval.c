/* util_redis_eval.c - one EVAL for a batch of utilization records: the Lua script
 * (done guards + aggregated HINCRBYs), the argument building (msgpack per record, the
 * batch aggregate) and the reply handling.  Called only from the util thread
 * (util_redis.c); see util_redis.h for the key schema and the failure policy. */
#include "util_redis_internal.h"

/* One EVAL for k records of one time bucket.
 * KEYS[1] total hash, KEYS[2] bucket hash, KEYS[2 + i] done guard of record i (1..k).
 * ARGV[1] done ttl, ARGV[2] bucket ttl, ARGV[3] shape "L,E,K", ARGV[4] tokens of all k
 * records; ARGV[4 + i] record i as ONE msgpack array {tokens, j, count, j, count, ...}
 * (j = 1-based index of the field in the aggregate); ARGV[5 + k ..] the aggregate of
 * all k records: field "<layer>:<expert>", summed count, ... (non-zero sums only).
 * Writes nothing unless both hashes are hashes (or absent): a WRONGTYPE is refused before
 * any guard is set.  Then SET NX EX per record.  The counts of the records whose guard
 * existed (duplicates) are summed in a Lua table and subtracted from the aggregate (only
 * then is a record's msgpack unpacked); ONE HINCRBY per distinct field and hash.
 * Returns an array of k integers: 1 applied, 0 duplicate. */
static const char LUA_SCRIPT[] =
    "local t, b = KEYS[1], KEYS[2]\n"
    "for _, h in ipairs({t, b}) do\n"
    "  local ty = redis.call('TYPE', h).ok\n"
    "  if ty ~= 'hash' and ty ~= 'none' then\n"
    "    return redis.error_reply('WRONGTYPE ' .. h .. ' holds a ' .. ty .. ', not a hash')\n"
    "  end\n"
    "end\n"
    "local k = #KEYS - 2\n"
    "local res, dup, dtok, sub = {}, 0, 0, nil\n"
    "for i = 1, k do\n"
    "  if redis.call('SET', KEYS[2 + i], '1', 'NX', 'EX', ARGV[1]) then\n"
    "    res[i] = 1\n"
    "  else\n"
    "    res[i] = 0\n"
    "    dup = dup + 1\n"
    "    sub = sub or {}\n"
    "    local c = cmsgpack.unpack(ARGV[4 + i])\n"
    "    dtok = dtok + c[1]\n"
    "    for j = 2, #c, 2 do\n"
    "      sub[c[j]] = (sub[c[j]] or 0) + c[j + 1]\n"
    "    end\n"
    "  end\n"
    "end\n"
    "if dup == k then return res end\n"
    "for _, h in ipairs({t, b}) do\n"
    "  redis.call('HINCRBY', h, '_tasks', k - dup)\n"
    "  redis.call('HINCRBY', h, '_tokens', ARGV[4] - dtok)\n"
    "  redis.call('HSET', h, '_shape', ARGV[3])\n"
    "end\n"
    "if not sub then\n"
    "  for i = 5 + k, #ARGV, 2 do\n"
    "    redis.call('HINCRBY', t, ARGV[i], ARGV[i + 1])\n"
    "    redis.call('HINCRBY', b, ARGV[i], ARGV[i + 1])\n"
    "  end\n"
    "else\n"
    "  local j = 0\n"
    "  for i = 5 + k, #ARGV, 2 do\n"
    "    j = j + 1\n"
    "    local n = ARGV[i + 1] - (sub[j] or 0)\n"
    "    if n ~= 0 then\n"
    "      redis.call('HINCRBY', t, ARGV[i], n)\n"
    "      redis.call('HINCRBY', b, ARGV[i], n)\n"
    "    end\n"
    "  end\n"
    "end\n"
    "redis.call('EXPIRE', b, ARGV[2])\n"
    "return res\n";


static int transient_error(const char *s)
{
    static const char *const pre[] = { "LOADING", "BUSY", "TRYAGAIN", "MASTERDOWN", "READONLY", "OOM",
                                       "CLUSTERDOWN", "NOREPLICAS" };
    for (size_t i = 0; i < sizeof pre / sizeof pre[0]; i++)
        if (strncmp(s, pre[i], strlen(pre[i])) == 0)
            return 1;
    return 0;
}

static int scratch_reserve(v4_util *u, size_t argc, size_t numbytes)
{
    if (argc > u->argcap) {
        size_t cap = argc + argc / 2;
        const char **a = realloc(u->argv, cap * sizeof *a);
        if (!a)
            return -1;
        u->argv = a;
        size_t *l = realloc(u->argl, cap * sizeof *l);
        if (!l)
            return -1;
        u->argl = l;
        u->argcap = cap;
    }
    if (numbytes > u->numcap) {
        char *p = realloc(u->num, numbytes + numbytes / 2);
        if (!p)
            return -1;
        u->num = p;
        u->numcap = numbytes + numbytes / 2;
    }
    return 0;
}

/* msgpack: one unsigned integer (positive fixint, uint 8/16/32/64). */
static unsigned char *mp_uint(unsigned char *p, uint64_t v)
{
    int bytes;
    if (v < 128) {
        *p++ = (unsigned char)v;
        return p;
    } else if (v < 256) {
        *p++ = 0xcc;
        bytes = 1;
    } else if (v < 65536) {
        *p++ = 0xcd;
        bytes = 2;
    } else if (v <= 0xffffffffu) {
        *p++ = 0xce;
        bytes = 4;
    } else {
        *p++ = 0xcf;
        bytes = 8;
    }
    for (int s = 8 * (bytes - 1); s >= 0; s -= 8)
        *p++ = (unsigned char)(v >> s);
    return p;
}

/* Upper bound of the EVAL argument bytes that record r adds: its guard key and its
 * msgpack array (header 5, tokens 9, per cell <= 2 x 5).  The aggregate adds at most
 * AGG_FIELD_BYTES per distinct cell of the batch. */
#define AGG_FIELD_BYTES 44   /* "<layer>:<expert>" and a sum, each <= 21 characters + NUL */
size_t v4u_rec_arg_bytes(const v4_util *u, const rec *r)
{
    return strlen(u->prefix) + strlen(r->id) + 8 + 14 + (size_t)r->n * 10;
}

/* Append the ONE EVAL of batch[0..n) (records of one bucket) to the context's output
 * buffer.  0 ok, -1 out of memory. */
static int append_eval(v4_util *u, rec *const *batch, int n)
{
    /* the aggregate: sum per cell in u->agg, fields in order of first appearance */
    if (!u->agg) {
        u->agg = calloc(u->n_cells, sizeof *u->agg);
        u->agg_pos = malloc(u->n_cells * sizeof *u->agg_pos);
        u->agg_cells = malloc(u->n_cells * sizeof *u->agg_cells);
        if (!u->agg || !u->agg_pos || !u->agg_cells)
            return -1;
    }
    uint32_t nf = 0;
    uint64_t tokens = 0;
    for (int i = 0; i < n; i++) {
        const rec *r = batch[i];
        tokens += (uint64_t)r->tokens;
        for (uint32_t c = 0; c < r->n; c++) {
            uint32_t x = r->idx[c];
            if (u->agg[x] == 0) {
                u->agg_pos[x] = nf;
                u->agg_cells[nf++] = x;
            }
            u->agg[x] += r->cnt[c];
        }
    }
    size_t argc = 9 + 2 * (size_t)n + 2 * (size_t)nf;   /* 5 + n keys + 4 + n records + fields */
    size_t plen = strlen(u->prefix), mlen = strlen(u->model);
    size_t need = 2 * (plen + mlen + 32) + 4 * 24 + (size_t)nf * AGG_FIELD_BYTES;
    for (int i = 0; i < n; i++)
        need += v4u_rec_arg_bytes(u, batch[i]);
    int rc = -1;
    if (scratch_reserve(u, argc, need) != 0)
        goto out;
    char *p = u->num, *end = u->num + u->numcap;
    size_t a = 0;
#define ARG_LIT(s) (u->argv[a] = (s), u->argl[a] = strlen(s), a++)
#define ARG_FMT(...) do { int w_ = snprintf(p, (size_t)(end - p), __VA_ARGS__); \
        u->argv[a] = p; u->argl[a] = (size_t)w_; a++; p += w_ + 1; } while (0)
    ARG_LIT("EVAL");
    u->argv[a] = LUA_SCRIPT;
    u->argl[a++] = sizeof LUA_SCRIPT - 1;
    ARG_FMT("%d", 2 + n);
    ARG_FMT("%s:util:%s:total", u->prefix, u->model);
    v4_util_key_bucket(u->prefix, u->model, batch[0]->unix_s, u->bucket_s, p, (size_t)(end - p));
    u->argv[a] = p;
    u->argl[a] = strlen(p);
    p += u->argl[a++] + 1;
    for (int i = 0; i < n; i++)
        ARG_FMT("%s:done:%s", u->prefix, batch[i]->id);
    ARG_FMT("%ld", u->done_ttl_s);
    ARG_FMT("%ld", u->bucket_ttl_s);
    ARG_LIT(u->shape);
    ARG_FMT("%llu", (unsigned long long)tokens);
    for (int i = 0; i < n; i++) {
        const rec *r = batch[i];
        unsigned char *q = (unsigned char *)p;
        uint32_t len = 1 + 2 * r->n;   /* array 32 header */
        *q++ = 0xdd;
        for (int s = 24; s >= 0; s -= 8)
            *q++ = (unsigned char)(len >> s);
        q = mp_uint(q, (uint64_t)r->tokens);
        for (uint32_t c = 0; c < r->n; c++) {
            q = mp_uint(q, (uint64_t)u->agg_pos[r->idx[c]] + 1);
            q = mp_uint(q, r->cnt[c]);
        }
        u->argv[a] = p;
        u->argl[a++] = (size_t)((char *)q - p);
        p = (char *)q;
    }
    unsigned ne = (unsigned)u->n_experts, nr = (unsigned)(u->n_cells - V4_UTIL_NFIGS);
    static const char *const fig_names[V4_UTIL_NFIGS] = {"_hits", "_misses", "_kib_loaded", "_prefetched"};
    for (uint32_t f = 0; f < nf; f++) {
        uint32_t x = u->agg_cells[f];
        if (x >= nr)
            ARG_FMT("%s", fig_names[x - nr]);
        else
            ARG_FMT("%u:%u", x / ne, x % ne);
        ARG_FMT("%llu", (unsigned long long)u->agg[x]);
    }
#undef ARG_LIT
#undef ARG_FMT
    rc = redisAppendCommandArgv(u->c, (int)a, u->argv, u->argl) == REDIS_OK ? 0 : -1;
out:
    for (uint32_t f = 0; f < nf; f++)
        u->agg[u->agg_cells[f]] = 0;
    return rc;
}

/* Index of the time bucket of a record made at unix_s (floor division). */
long long v4u_bucket_of(const v4_util *u, long long unix_s)
{
    long long q = unix_s / u->bucket_s;
    return (unix_s % u->bucket_s != 0 && unix_s < 0) ? q - 1 : q;
}

static void ctx_reason(const v4_util *u, char *out, size_t n)
{
    const redisContext *c = u->c;
    if (c->err == REDIS_ERR_IO && (strstr(c->errstr, "temporarily unavailable") || strstr(c->errstr, "timed out")))
        snprintf(out, n, "no answer within %ld ms", u->timeout_ms);
    else if (c->err == REDIS_ERR_EOF)
        snprintf(out, n, "server closed the connection");
    else
        snprintf(out, n, "%s", c->errstr[0] ? c->errstr : "unknown error");
}


/* Send batch[0..n) as one EVAL and read its reply into res[].  Returns 0 when the
 * connection is still good, -1 (reason filled) when it must be dropped.  A transient
 * error reply keeps every record; any other error (or a reply of the wrong shape)
 * rejects every record of the batch: the script refuses as a whole, before any write. */
int v4u_send_batch(v4_util *u, rec **batch, int n, int *res, char *reason, size_t rn, char *rej, size_t rjn)
{
    for (int i = 0; i < n; i++)
        res[i] = RES_KEEP;
    if (append_eval(u, batch, n) != 0) {
        snprintf(reason, rn, "out of memory building the EVAL of %d records", n);
        return -1;
    }
    void *rv = NULL;
    if (redisGetReply(u->c, &rv) != REDIS_OK || !rv) {
        ctx_reason(u, reason, rn);
        return -1;
    }
    redisReply *r = rv;
    int rc = 0, ok = r->type == REDIS_REPLY_ARRAY && r->elements == (size_t)n;
    for (int i = 0; ok && i < n; i++)
        ok = r->element[i]->type == REDIS_REPLY_INTEGER && (r->element[i]->integer == 0 || r->element[i]->integer == 1);
    if (ok) {
        for (int i = 0; i < n; i++)
            res[i] = r->element[i]->integer ? RES_SENT : RES_DUP;
    } else if (r->type == REDIS_REPLY_ERROR && transient_error(r->str)) {
        snprintf(reason, rn, "server busy: %.200s", r->str);
        rc = -1;   /* keep the records */
    } else {
        for (int i = 0; i < n; i++)
            res[i] = RES_REJECTED;
        if (r->type == REDIS_REPLY_ERROR)
            snprintf(rej, rjn, "%d record%s from task '%.64s': %.200s", n, n == 1 ? "" : "s", batch[0]->id, r->str);
        else
            snprintf(rej, rjn, "%d record%s from task '%.64s': unexpected reply (type %d, %zu elements)", n,
                     n == 1 ? "" : "s", batch[0]->id, r->type, r->elements);
    }
    freeReplyObject(r);
    return rc;
}
