/* test_safetensors.c - safetensors header validation and the checkpoint loader.
 *
 * Covers: the golden tiny checkpoint (6 shards + index: tensor count, dtypes, shapes,
 * data pointers checked against pread of the file, sorted lookup, expect, advise);
 * header parsing from memory; and a set of bad checkpoints written programmatically
 * into a temp dir (V4_TMP or /tmp), each of which must fail with a message naming
 * the file and/or the tensor.  The temp dir is removed at the end.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/safetensors.h"
#include "testutil.h"

/* ---------------------------------------------------------------- file helpers */

static char g_tmp[1024];

static void path_in(char *buf, size_t cap, const char *dir, const char *name)
{
    snprintf(buf, cap, "%s/%s", dir, name);
}

static void write_bytes(const char *path, const void *a, size_t na, const void *b, size_t nb)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "cannot create %s", path);
    if (!f)
        return;
    if (na)
        fwrite(a, 1, na, f);
    if (nb)
        fwrite(b, 1, nb, f);
    fclose(f);
}

/* A safetensors file whose length prefix is hlen (normally strlen(json)), then the
 * JSON text, then data_len bytes of the pattern (i * 7 + 3) & 0xff. */
static void write_st_raw(const char *path, uint64_t hlen, const char *json, size_t data_len)
{
    size_t jl = strlen(json);
    size_t n = 8 + jl + data_len;
    uint8_t *buf = malloc(n ? n : 1);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)(hlen >> (8 * i));
    memcpy(buf + 8, json, jl);
    for (size_t i = 0; i < data_len; i++)
        buf[8 + jl + i] = (uint8_t)((i * 7 + 3) & 0xff);
    write_bytes(path, buf, n, NULL, 0);
    free(buf);
}

static void write_st(const char *dir, const char *fname, const char *json, size_t data_len)
{
    char p[2048];
    path_in(p, sizeof p, dir, fname);
    write_st_raw(p, strlen(json), json, data_len);
}

static void write_text(const char *dir, const char *fname, const char *text)
{
    char p[2048];
    path_in(p, sizeof p, dir, fname);
    write_bytes(p, text, strlen(text), NULL, 0);
}

/* A fresh sub-directory of the temp dir for one case. */
static const char *case_dir(const char *name)
{
    static char buf[2048];   /* test-local scratch, single-threaded test */
    snprintf(buf, sizeof buf, "%s/%s", g_tmp, name);
    CHECK(mkdir(buf, 0755) == 0, "mkdir %s", buf);
    return buf;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(path);
}

/* ---------------------------------------------------------------- expectations */

static void full_message(char *buf, size_t cap, const v4_error *e)
{
    snprintf(buf, cap, "%s: %s", e->where, e->msg);
}

/* Opening dir must fail with code, and the "where: msg" line must contain every
 * non-NULL needle. */
static void expect_open_fail(const char *dir, v4_errcode code, const char *n1, const char *n2)
{
    v4_ckpt *ck = (v4_ckpt *)1;
    v4_error err;
    v4_err_clear(&err);
    int rc = v4_ckpt_open(dir, &ck, &err);
    char line[1024];
    full_message(line, sizeof line, &err);
    if (getenv("V4_TEST_VERBOSE"))
        printf("  %s\n", line);
    CHECK(rc < 0, "%s: open should fail (expected '%s')", dir, n1 ? n1 : "");
    CHECK(ck == NULL, "%s: out must be NULL on failure", dir);
    CHECK(err.msg[0] != 0, "%s: empty error message", dir);
    CHECK(err.code == code, "%s: code %s, expected %s (%s)", dir, v4_errcode_name(err.code),
          v4_errcode_name(code), line);
    CHECK(!n1 || strstr(line, n1), "%s: message '%s' lacks '%s'", dir, line, n1);
    CHECK(!n2 || strstr(line, n2), "%s: message '%s' lacks '%s'", dir, line, n2);
    if (rc == 0)
        v4_ckpt_close(ck);
}

/* One bad single-file checkpoint: model.safetensors with json + data_len bytes. */
static void bad_single(const char *name, const char *json, size_t data_len, const char *n2)
{
    const char *d = case_dir(name);
    write_st(d, "model.safetensors", json, data_len);
    expect_open_fail(d, V4_ERR_FORMAT, "model.safetensors", n2);
}

/* ---------------------------------------------------------------- golden checkpoint */

static int same_bytes_as_file(const v4_ckpt *ck, const v4_tensor *t)
{
    const char *path = v4_ckpt_shard_path(ck, (size_t)t->shard);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return 0;
    uint8_t hl[8];
    int ok = pread(fd, hl, 8, 0) == 8;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = (hlen << 8) | hl[i];
    size_t n = t->nbytes < 4096 ? t->nbytes : 4096;
    uint8_t *buf = malloc(n ? n : 1);
    ok = ok && pread(fd, buf, n, (off_t)(8 + hlen + t->offset)) == (ssize_t)n &&
         memcmp(buf, t->data, n) == 0;
    free(buf);
    close(fd);
    return ok;
}

static void check_golden_shapes(const v4_ckpt *ck)
{
    struct { const char *name; v4_dtype dt; int ndim; int64_t shape[2]; } want[] = {
        {"layers.0.attn.wq_a.weight", V4_DT_F8_E4M3, 2, {128, 256}},
        {"layers.0.attn.wq_a.scale", V4_DT_F8_E8M0, 2, {1, 2}},
        {"layers.0.ffn.experts.0.w1.weight", V4_DT_I8, 2, {128, 128}},
        {"layers.0.ffn.experts.0.w1.scale", V4_DT_F8_E8M0, 2, {128, 8}},
        {"layers.0.ffn.experts.15.w2.weight", V4_DT_I8, 2, {256, 64}},
        {"layers.0.ffn.gate.tid2eid", V4_DT_I64, 2, {4096, 4}},
        {"embed.weight", V4_DT_BF16, 2, {4096, 256}},
        {"hc_head_base", V4_DT_F32, 1, {4, 0}},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        v4_error err;
        v4_err_clear(&err);
        const v4_tensor *t = v4_ckpt_expect(ck, want[i].name, want[i].dt, want[i].ndim,
                                            want[i].shape, &err);
        CHECK(t != NULL, "%s: %s: %s", want[i].name, err.where, err.msg);
        if (t)
            CHECK(same_bytes_as_file(ck, t), "%s: mapped bytes differ from the file",
                  want[i].name);
    }
}

static void check_golden_table(const v4_ckpt *ck)
{
    size_t n = v4_ckpt_count(ck);
    int sorted = 1, found = 1, inside = 1;
    for (size_t i = 0; i < n; i++) {
        const v4_tensor *t = v4_ckpt_tensor(ck, i);
        if (i && strcmp(v4_ckpt_tensor(ck, i - 1)->name, t->name) >= 0)
            sorted = 0;
        if (v4_ckpt_find(ck, t->name) != t)
            found = 0;
        if (t->shard < 0 || (size_t)t->shard >= v4_ckpt_n_shards(ck) || !t->data ||
            (int64_t)t->nbytes != v4_tensor_numel(t) * (int64_t)v4_dtype_size(t->dtype))
            inside = 0;
    }
    CHECK(sorted, "v4_ckpt_tensor order is not strictly ascending by name");
    CHECK(found, "v4_ckpt_find does not return every tensor");
    CHECK(inside, "a tensor has a bad shard index, data pointer or byte count");
    CHECK(v4_ckpt_tensor(ck, n) == NULL, "index past the end must give NULL");
    CHECK(v4_ckpt_find(ck, "layers.0.nope") == NULL, "absent name must give NULL");
    CHECK(v4_ckpt_find(ck, "") == NULL, "empty name must give NULL");
}

static void check_golden_expect_errors(const v4_ckpt *ck)
{
    v4_error err;
    char line[1024];
    int64_t s_ok[2] = {128, -1}, s_bad[2] = {128, 512};

    v4_err_clear(&err);
    CHECK(v4_ckpt_expect(ck, "layers.0.attn.wq_a.weight", V4_DT_F8_E4M3, 2, s_ok, &err),
          "wildcard dim should match: %s", err.msg);
    CHECK(v4_ckpt_expect(ck, "layers.0.attn.wq_a.weight", V4_DT_INVALID, -1, NULL, &err),
          "no dtype/shape check should match: %s", err.msg);

    v4_err_clear(&err);
    CHECK(!v4_ckpt_expect(ck, "layers.0.attn.wq_a.weight", V4_DT_BF16, 2, s_ok, &err),
          "wrong dtype must fail");
    full_message(line, sizeof line, &err);
    CHECK(err.code == V4_ERR_DTYPE && strstr(line, "layers.0.attn.wq_a.weight: dtype F8_E4M3, "
                                                   "expected BF16") &&
          strstr(line, "model-00002-of-00006.safetensors"), "dtype message: %s", line);

    v4_err_clear(&err);
    CHECK(!v4_ckpt_expect(ck, "layers.0.attn.wq_a.weight", V4_DT_F8_E4M3, 2, s_bad, &err),
          "wrong shape must fail");
    full_message(line, sizeof line, &err);
    CHECK(err.code == V4_ERR_SHAPE && strstr(line, "layers.0.attn.wq_a.weight: shape [128,256], "
                                                   "expected [128,512]"), "shape message: %s", line);

    v4_err_clear(&err);
    CHECK(!v4_ckpt_expect(ck, "layers.0.attn.wq_a.weight", V4_DT_F8_E4M3, 1, s_ok, &err),
          "wrong rank must fail");
    CHECK(err.code == V4_ERR_SHAPE && strstr(err.msg, "expected [128]"), "rank message: %s",
          err.msg);

    v4_err_clear(&err);
    CHECK(!v4_ckpt_expect(ck, "layers.9.attn.wq_a.weight", V4_DT_F8_E4M3, 2, s_ok, &err),
          "missing tensor must fail");
    CHECK(err.code == V4_ERR_MISSING && strstr(err.msg, "layers.9.attn.wq_a.weight"),
          "missing message: %s", err.msg);
}

static void check_golden_advise(const v4_ckpt *ck)
{
    const v4_tensor *t = v4_ckpt_find(ck, "embed.weight");
    v4_error err;
    v4_err_clear(&err);
    CHECK(t && v4_ckpt_advise(ck, t, V4_ADVISE_WILLNEED, &err) == 0, "willneed: %s", err.msg);
    CHECK(t && v4_ckpt_advise(ck, t, V4_ADVISE_DONTNEED, &err) == 0, "dontneed: %s", err.msg);
    CHECK(t && same_bytes_as_file(ck, t), "bytes must survive MADV_DONTNEED");
}

static void test_golden(void)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/golden/tiny/model", t_env("V4_TEST_DATA", "tests/data"));
    v4_ckpt *ck = NULL;
    v4_error err;
    v4_err_clear(&err);
    int rc = v4_ckpt_open(dir, &ck, &err);
    CHECK(rc == 0 && ck, "open %s: %s: %s", dir, err.where, err.msg);
    if (!ck)
        return;
    CHECK(v4_ckpt_count(ck) == 532, "tensor count %zu, expected 532", v4_ckpt_count(ck));
    CHECK(v4_ckpt_n_shards(ck) == 6, "shards %zu, expected 6", v4_ckpt_n_shards(ck));
    CHECK(!strcmp(v4_ckpt_dir(ck), dir), "dir %s", v4_ckpt_dir(ck));
    CHECK(v4_ckpt_shard_path(ck, 0) && strstr(v4_ckpt_shard_path(ck, 0),
                                              "/model-00001-of-00006.safetensors"),
          "shard 0 path %s", v4_ckpt_shard_path(ck, 0));
    CHECK(v4_ckpt_shard_path(ck, 6) == NULL, "shard path past the end must be NULL");
    const v4_tensor *e = v4_ckpt_find(ck, "embed.weight");
    CHECK(e && e->shard == 0, "embed.weight must be in shard 0");
    check_golden_shapes(ck);
    check_golden_table(ck);
    check_golden_expect_errors(ck);
    check_golden_advise(ck);
    v4_ckpt_close(ck);
}

/* ---------------------------------------------------------------- in-memory headers */

static int parse_mem(const char *json, size_t data_len, v4_st_header *h, v4_error *err)
{
    size_t jl = strlen(json), n = 8 + jl + data_len;
    uint8_t *buf = calloc(1, n);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)jl >> (8 * i));
    memcpy(buf + 8, json, jl);
    v4_err_clear(err);
    int rc = v4_st_parse_header(buf, n, "mem.safetensors", h, err);
    free(buf);
    return rc;
}

static void test_parse_memory(void)
{
    v4_st_header h;
    v4_error err;
    /* scalar, zero-sized tensor sharing an offset, metadata, trailing padding */
    const char *ok = "{\"__metadata__\":{\"format\":\"pt\"},"
                     "\"z\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
                     "\"e\":{\"dtype\":\"BF16\",\"shape\":[0,5],\"data_offsets\":[4,4]},"
                     "\"a\":{\"dtype\":\"I8\",\"shape\":[2,6],\"data_offsets\":[4,16]}}    ";
    CHECK(parse_mem(ok, 20, &h, &err) == 0, "valid header rejected: %s", err.msg);
    CHECK(h.n_tensors == 3, "n_tensors %zu", h.n_tensors);
    CHECK(h.header_len == strlen(ok) && h.data_len == 20, "lengths %llu %llu",
          (unsigned long long)h.header_len, (unsigned long long)h.data_len);
    if (h.n_tensors == 3) {
        CHECK(!strcmp(h.tensors[0].name, "a") && !strcmp(h.tensors[1].name, "e") &&
              !strcmp(h.tensors[2].name, "z"), "tensors not sorted by name");
        CHECK(h.tensors[0].dtype == V4_DT_I8 && h.tensors[0].nbytes == 12 &&
              h.tensors[0].offset == 4 && h.tensors[0].data == NULL, "tensor a fields");
        CHECK(h.tensors[2].ndim == 0 && v4_tensor_numel(&h.tensors[2]) == 1, "scalar");
        CHECK(v4_tensor_numel(&h.tensors[1]) == 0, "empty tensor numel");
    }
    v4_st_header_free(&h);
    CHECK(h.tensors == NULL && h.n_tensors == 0, "free must reset the header");

    CHECK(parse_mem("{}", 0, &h, &err) == 0 && h.n_tensors == 0, "empty header: %s", err.msg);
    v4_st_header_free(&h);

    /* The fuzzer's inputs: short buffers must be rejected without reading past them. */
    uint8_t small[7] = {1, 0, 0, 0, 0, 0, 0};
    v4_err_clear(&err);
    CHECK(v4_st_parse_header(small, sizeof small, "x.safetensors", &h, &err) < 0 &&
          strstr(err.msg, "shorter than") && !strcmp(err.where, "x.safetensors"),
          "7-byte buffer: %s", err.msg);
    CHECK(v4_st_parse_header(NULL, 0, "x.safetensors", &h, &err) < 0, "empty buffer");
}

static void test_dtypes(void)
{
    CHECK(v4_dtype_from_name("F8_E4M3") == V4_DT_F8_E4M3, "F8_E4M3");
    CHECK(v4_dtype_from_name("F8_E8M0") == V4_DT_F8_E8M0, "F8_E8M0");
    CHECK(v4_dtype_from_name("bf16") == V4_DT_INVALID, "names are case-sensitive");
    CHECK(v4_dtype_from_name(NULL) == V4_DT_INVALID, "NULL name");
    CHECK(v4_dtype_size(V4_DT_I8) == 1 && v4_dtype_size(V4_DT_BF16) == 2 &&
          v4_dtype_size(V4_DT_I64) == 8 && v4_dtype_size(V4_DT_INVALID) == 0, "sizes");
    for (int d = V4_DT_BF16; d <= V4_DT_F8_E8M0; d++)
        CHECK(v4_dtype_from_name(v4_dtype_name((v4_dtype)d)) == (v4_dtype)d, "round trip %d", d);
}

/* ---------------------------------------------------------------- good temp checkpoints */

#define T(name, dt, shape, b, e) \
    "\"" name "\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":[" #b "," #e "]}"

static void test_single_file_ok(void)
{
    const char *d = case_dir("single_ok");
    write_st(d, "model.safetensors",
             "{" T("b", "F32", "[2]", 8, 16) "," T("a", "I8", "[8]", 0, 8) "}", 16);
    v4_ckpt *ck = NULL;
    v4_error err;
    v4_err_clear(&err);
    CHECK(v4_ckpt_open(d, &ck, &err) == 0, "single file: %s: %s", err.where, err.msg);
    if (!ck)
        return;
    const v4_tensor *a = v4_ckpt_find(ck, "a"), *b = v4_ckpt_find(ck, "b");
    CHECK(v4_ckpt_count(ck) == 2 && v4_ckpt_n_shards(ck) == 1 && a && b, "single file table");
    if (a && b) {
        const uint8_t *pa = a->data, *pb = b->data;
        CHECK(pa[0] == 3 && pa[1] == 10 && pb[0] == (uint8_t)(8 * 7 + 3), "data pointers");
        CHECK(strstr(v4_ckpt_shard_path(ck, 0), "/model.safetensors") != NULL, "shard path");
    }
    v4_ckpt_close(ck);
}

static void test_index_extra_tensor(void)
{
    const char *d = case_dir("index_extra");
    write_st(d, "s1.safetensors", "{" T("a", "I8", "[4]", 0, 4) "," T("extra", "I8", "[4]", 4, 8) "}", 8);
    write_st(d, "s2.safetensors", "{" T("b", "I8", "[4]", 0, 4) "}", 4);
    write_text(d, "model.safetensors.index.json",
               "{\"metadata\":{\"total_size\":8},\"weight_map\":{\"a\":\"s1.safetensors\","
               "\"b\":\"s2.safetensors\"}}");
    v4_ckpt *ck = NULL;
    v4_error err;
    v4_err_clear(&err);
    CHECK(v4_ckpt_open(d, &ck, &err) == 0, "index_extra: %s: %s", err.where, err.msg);
    if (!ck)
        return;
    const v4_tensor *x = v4_ckpt_find(ck, "extra"), *b = v4_ckpt_find(ck, "b");
    CHECK(v4_ckpt_count(ck) == 3 && x && x->shard == 0 && b && b->shard == 1,
          "tensor absent from the index must stay accessible");
    v4_ckpt_close(ck);
}

/* V4-Flash has ~70k tensor names: build a 2-shard checkpoint of that size (1-byte
 * tensors, index order != name order) and look every name up. */
static void test_many_tensors(void)
{
    enum { N = 70000, PER = 24 };
    const char *d = case_dir("many");
    size_t cap = (size_t)N * 96 + 64, len[2] = {0, 0};
    char *hdr[2] = {malloc(cap), malloc(cap)}, *idx = malloc(cap);
    size_t il = (size_t)snprintf(idx, cap, "{\"weight_map\":{");
    size_t count[2] = {0, 0};
    for (int s = 0; s < 2; s++)
        len[s] = (size_t)snprintf(hdr[s], cap, "{");
    for (int i = N - 1; i >= 0; i--) {
        int s = i % 2;
        char name[64];
        snprintf(name, sizeof name, "layers.%d.ffn.experts.%d.w%d", i / (PER * 3), (i / 3) % PER,
                 i % 3 + 1);
        len[s] += (size_t)snprintf(hdr[s] + len[s], cap - len[s],
                                   "%s\"%s\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[%zu,%zu]}",
                                   count[s] ? "," : "", name, count[s], count[s] + 1);
        count[s]++;
        il += (size_t)snprintf(idx + il, cap - il, "%s\"%s\":\"many-%d.safetensors\"",
                               i == N - 1 ? "" : ",", name, s);
    }
    for (int s = 0; s < 2; s++) {
        snprintf(hdr[s] + len[s], cap - len[s], "}");
        char fname[64];
        snprintf(fname, sizeof fname, "many-%d.safetensors", s);
        write_st(d, fname, hdr[s], count[s]);
        free(hdr[s]);
    }
    snprintf(idx + il, cap - il, "}}");
    write_text(d, "model.safetensors.index.json", idx);
    free(idx);

    v4_ckpt *ck = NULL;
    v4_error err;
    v4_err_clear(&err);
    CHECK(v4_ckpt_open(d, &ck, &err) == 0, "many: %s: %s", err.where, err.msg);
    if (!ck)
        return;
    CHECK(v4_ckpt_count(ck) == N, "many: count %zu", v4_ckpt_count(ck));
    int all = 1;
    for (int i = 0; i < N; i++) {
        char name[64];
        snprintf(name, sizeof name, "layers.%d.ffn.experts.%d.w%d", i / (PER * 3), (i / 3) % PER,
                 i % 3 + 1);
        const v4_tensor *t = v4_ckpt_find(ck, name);
        if (!t || t->shard != i % 2 || strcmp(t->name, name))
            all = 0;
    }
    CHECK(all, "many: some names not found or in the wrong shard");
    v4_ckpt_close(ck);
}

/* ---------------------------------------------------------------- bad headers */

static void test_bad_headers(void)
{
    const char *d;
    char p[2048];

    d = case_dir("tiny_file");
    path_in(p, sizeof p, d, "model.safetensors");
    write_bytes(p, "\x05\0\0\0\0", 5, NULL, 0);
    expect_open_fail(d, V4_ERR_FORMAT, "model.safetensors", "shorter than");

    d = case_dir("empty_file");
    path_in(p, sizeof p, d, "model.safetensors");
    write_bytes(p, NULL, 0, NULL, 0);
    expect_open_fail(d, V4_ERR_FORMAT, "model.safetensors", "0 bytes");

    d = case_dir("hlen_zero");
    path_in(p, sizeof p, d, "model.safetensors");
    write_st_raw(p, 0, "{}", 0);
    expect_open_fail(d, V4_ERR_FORMAT, "model.safetensors", "header length is 0");

    d = case_dir("hlen_huge");
    path_in(p, sizeof p, d, "model.safetensors");
    write_st_raw(p, (uint64_t)V4_ST_MAX_HEADER + 1, "{}", 0);
    expect_open_fail(d, V4_ERR_FORMAT, "model.safetensors", "exceeds the limit");

    d = case_dir("hlen_beyond");
    path_in(p, sizeof p, d, "model.safetensors");
    write_st_raw(p, 1000, "{" T("a", "I8", "[4]", 0, 4) "}", 4);
    expect_open_fail(d, V4_ERR_FORMAT, "model.safetensors", "beyond the end of the file");

    d = case_dir("hlen_u64max");
    path_in(p, sizeof p, d, "model.safetensors");
    write_st_raw(p, UINT64_MAX, "{}", 0);
    expect_open_fail(d, V4_ERR_FORMAT, "model.safetensors", "exceeds the limit");

    bad_single("bad_json", "{\"a\": {\"dtype\": ", 0, "not valid JSON");
    bad_single("bad_json_trailing", "{} x", 0, "line 1");
    bad_single("not_object", "[1,2]", 0, "not a JSON object");
    bad_single("dup_key", "{" T("a", "I8", "[1]", 0, 1) "," T("a", "I8", "[1]", 1, 2) "}", 2,
               "duplicate");
    bad_single("entry_not_object", "{\"a\": 5}", 0, "tensor 'a': entry is not an object");
    bad_single("empty_name", "{" T("", "I8", "[1]", 0, 1) "}", 1, "empty tensor name");
    bad_single("unknown_key", "{\"a\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1],"
               "\"x\":1}}", 1, "tensor 'a': unknown key 'x'");
    bad_single("nul_in_name", "{" T("a\\u0000b", "I8", "[1]", 0, 1) "}", 1, "NUL byte");
    bad_single("meta_not_obj", "{\"__metadata__\": [1]}", 0, "__metadata__");
    bad_single("meta_not_str", "{\"__metadata__\": {\"format\": 1}}", 0, "'format'");
}

static void test_bad_entries(void)
{
    bad_single("wrong_dtype", "{" T("w", "F9", "[4]", 0, 4) "}", 4, "tensor 'w': unknown dtype 'F9'");
    bad_single("dtype_not_str", "{\"w\":{\"dtype\":5,\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
               "tensor 'w': dtype");
    bad_single("no_shape", "{\"w\":{\"dtype\":\"I8\",\"data_offsets\":[0,1]}}", 1,
               "tensor 'w': shape");
    bad_single("neg_dim", "{" T("w", "I8", "[-1]", 0, 1) "}", 1, "tensor 'w': shape[0]");
    bad_single("real_dim", "{" T("w", "I8", "[2.0]", 0, 2) "}", 2, "tensor 'w': shape[0]");
    bad_single("rank9", "{" T("w", "I8", "[1,1,1,1,1,1,1,1,1]", 0, 1) "}", 1,
               "tensor 'w': rank 9");
    bad_single("shape_mismatch", "{" T("w", "F32", "[2,3]", 0, 20) "}", 20,
               "tensor 'w': data_offsets span 20 bytes but shape x F32 needs 24");
    bad_single("i8_elem_size", "{" T("w", "I8", "[4,4]", 0, 32) "}", 32, "needs 16");
    bad_single("numel_overflow",
               "{" T("w", "I8", "[4294967296,4294967296,4294967296,0]", 0, 0) "}", 0,
               "tensor 'w': shape element count overflows");
    bad_single("bytes_overflow", "{" T("w", "I64", "[4611686018427387904]", 0, 8) "}", 8,
               "tensor 'w': shape byte count overflows");
    bad_single("offsets_oob", "{" T("w", "I8", "[100]", 0, 100) "}", 16,
               "tensor 'w': data_offsets end 100 is beyond the data area (16 bytes");
    bad_single("offsets_begin_gt_end", "{" T("w", "I8", "[0]", 8, 4) "}", 16,
               "tensor 'w': data_offsets [8, 4] has begin > end");
    bad_single("offsets_three", "{\"w\":{\"dtype\":\"I8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}",
               4, "tensor 'w': data_offsets is not");
    bad_single("offsets_neg", "{" T("w", "I8", "[1]", -1, 0) "}", 4,
               "tensor 'w': data_offsets are not");
    bad_single("overlap", "{" T("a", "I8", "[8]", 0, 8) "," T("b", "I8", "[8]", 4, 12) "}", 12,
               "tensors 'a' [0, 8) and 'b' [4, 12) overlap");
    bad_single("overlap_nested",
               "{" T("a", "I8", "[16]", 0, 16) "," T("b", "I8", "[2]", 2, 4) ","
               T("c", "I8", "[2]", 8, 10) "}", 16, "tensors 'a' [0, 16) and 'b' [2, 4) overlap");
    bad_single("overlap_same", "{" T("a", "I8", "[4]", 0, 4) "," T("b", "I8", "[4]", 0, 4) "}", 4,
               "overlap");

    /* A valid shard cut short: the data area no longer holds the last tensor. */
    const char *d = case_dir("truncated");
    write_st(d, "model-00001-of-00001.safetensors",
             "{" T("x.weight", "BF16", "[4,4]", 0, 32) "," T("y.weight", "BF16", "[4,4]", 32, 64) "}",
             40);
    write_text(d, "model.safetensors.index.json",
               "{\"weight_map\":{\"x.weight\":\"model-00001-of-00001.safetensors\","
               "\"y.weight\":\"model-00001-of-00001.safetensors\"}}");
    expect_open_fail(d, V4_ERR_FORMAT, "model-00001-of-00001.safetensors",
                     "tensor 'y.weight': data_offsets end 64 is beyond the data area (40 bytes");
}

/* ---------------------------------------------------------------- bad indexes */

static void bad_index(const char *name, const char *index, v4_errcode code, const char *n1,
                      const char *n2)
{
    const char *d = case_dir(name);
    write_st(d, "s1.safetensors", "{" T("a", "I8", "[4]", 0, 4) "}", 4);
    write_text(d, "model.safetensors.index.json", index);
    expect_open_fail(d, code, n1, n2);
}

static void test_bad_indexes(void)
{
    const char *idx = "model.safetensors.index.json";
    bad_index("missing_tensor",
              "{\"weight_map\":{\"a\":\"s1.safetensors\",\"layers.0.gone\":\"s1.safetensors\"}}",
              V4_ERR_MISSING, "s1.safetensors",
              "tensor 'layers.0.gone' listed in index but missing from shard s1.safetensors");
    bad_index("missing_shard",
              "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"model-00002-of-00002.safetensors\"}}",
              V4_ERR_IO, "model-00002-of-00002.safetensors", "cannot open shard");
    bad_index("shard_slash", "{\"weight_map\":{\"a\":\"sub/s1.safetensors\"}}", V4_ERR_FORMAT,
              idx, "tensor 'a': invalid shard file name 'sub/s1.safetensors'");
    bad_index("shard_dotdot", "{\"weight_map\":{\"a\":\"..s1.safetensors\"}}", V4_ERR_FORMAT,
              idx, "invalid shard file name");
    bad_index("shard_empty", "{\"weight_map\":{\"a\":\"\"}}", V4_ERR_FORMAT, idx,
              "invalid shard file name");
    bad_index("index_bad_json", "{\"weight_map\":{\"a\":", V4_ERR_FORMAT, idx, "invalid JSON");
    bad_index("index_dup", "{\"weight_map\":{\"a\":\"s1.safetensors\",\"a\":\"s1.safetensors\"}}",
              V4_ERR_FORMAT, idx, "duplicate");
    bad_index("index_not_obj", "[]", V4_ERR_FORMAT, idx, "not a JSON object");
    bad_index("index_no_map", "{\"metadata\":{}}", V4_ERR_FORMAT, idx, "weight_map");
    bad_index("index_empty_map", "{\"weight_map\":{}}", V4_ERR_FORMAT, idx, "weight_map is empty");
    bad_index("index_value", "{\"weight_map\":{\"a\":7}}", V4_ERR_FORMAT, idx,
              "weight_map entry 'a' is not a string");

    const char *d = case_dir("dup_across_shards");
    write_st(d, "s1.safetensors", "{" T("a", "I8", "[4]", 0, 4) "}", 4);
    write_st(d, "s2.safetensors", "{" T("a", "I8", "[4]", 0, 4) "," T("b", "I8", "[4]", 4, 8) "}", 8);
    write_text(d, idx, "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}");
    expect_open_fail(d, V4_ERR_FORMAT, "tensor 'a' appears in both s1.safetensors and s2.safetensors",
                     NULL);

    d = case_dir("bad_shard_header");
    write_st(d, "s1.safetensors", "{" T("a", "I8", "[4]", 0, 4) "}", 4);
    write_st(d, "s2.safetensors", "{" T("b", "U4", "[4]", 0, 4) "}", 4);
    write_text(d, idx, "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}");
    expect_open_fail(d, V4_ERR_FORMAT, "s2.safetensors", "tensor 'b': unknown dtype 'U4'");

    d = case_dir("no_files");
    expect_open_fail(d, V4_ERR_IO, "no_files", "no model.safetensors.index.json or model.safetensors");

    char p[2048];
    snprintf(p, sizeof p, "%s/does_not_exist", g_tmp);
    expect_open_fail(p, V4_ERR_IO, "does_not_exist", "cannot open checkpoint directory");
}

int main(void)
{
    snprintf(g_tmp, sizeof g_tmp, "%s/test_safetensors.XXXXXX", t_env("V4_TMP", "/tmp"));
    if (!mkdtemp(g_tmp)) {
        perror(g_tmp);
        return 1;
    }
    test_dtypes();
    test_parse_memory();
    test_golden();
    test_single_file_ok();
    test_index_extra_tensor();
    test_many_tensors();
    test_bad_headers();
    test_bad_entries();
    test_bad_indexes();
    if (!t_failures)
        nftw(g_tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    else
        fprintf(stderr, "bad checkpoints kept in %s\n", g_tmp);
    TEST_DONE();
}
