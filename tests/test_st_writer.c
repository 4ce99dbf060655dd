/* test_st_writer.c - cache/st_writer: header bytes, data layout, atomic rename, and the
 * error paths (duplicate names, bad shapes, too many / too few bytes, abandoned
 * writers leave no file behind).  Writes into $V4_TMP. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/st_writer.h"
#include "testutil.h"

static int exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

static long read_all(const char *p, unsigned char *buf, long cap)
{
    FILE *f = fopen(p, "rb");
    if (!f)
        return -1;
    long n = (long)fread(buf, 1, (size_t)cap, f);
    fclose(f);
    return n;
}

static void test_roundtrip(const char *dir)
{
    char path[1024], tmp[1024];
    snprintf(path, sizeof path, "%s/stw_a.safetensors", dir);
    unlink(path);
    v4_error err = {0};
    v4_stw *w = v4_stw_new();
    int64_t s1[2] = {2, 3}, s2[1] = {4}, s3[1] = {0};
    CHECK(!v4_stw_add(w, "a.weight", V4_DT_BF16, 2, s1, &err), "%s", err.msg);
    CHECK(!v4_stw_add(w, "b", V4_DT_F8_E8M0, 1, s2, &err), "%s", err.msg);
    CHECK(!v4_stw_add(w, "empty", V4_DT_F32, 1, s3, &err), "%s", err.msg);
    CHECK(v4_stw_add(w, "b", V4_DT_F32, 1, s2, &err) < 0, "duplicate name accepted");
    int64_t neg[1] = {-1};
    CHECK(v4_stw_add(w, "neg", V4_DT_F32, 1, neg, &err) < 0, "negative dim accepted");
    CHECK(v4_stw_add(w, "bad", V4_DT_INVALID, 1, s2, &err) < 0, "invalid dtype accepted");
    CHECK(v4_stw_data_bytes(w) == 16, "data bytes %llu", (unsigned long long)v4_stw_data_bytes(w));
    uint64_t fb = 0;
    CHECK(!v4_stw_file_bytes(w, &fb, &err) && fb % 8 == 0, "file bytes %llu", (unsigned long long)fb);
    CHECK(v4_stw_add(w, "late", V4_DT_F32, 1, s2, &err) < 0, "tensor added after the header");
    v4_stw_set_sync(w, 0);
    CHECK(!v4_stw_begin(w, path, &err), "%s", err.msg);
    CHECK(!v4_stw_tmp_path(path, tmp, sizeof tmp) && exists(tmp) && !exists(path),
          "tmp file should exist and the final one not yet");
    const unsigned char data[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    CHECK(!v4_stw_write(w, data, 5, &err) && !v4_stw_write(w, data + 5, 11, &err), "%s", err.msg);
    CHECK(v4_stw_write(w, data, 1, &err) < 0, "write past the end accepted");
    CHECK(!v4_stw_finish(w, &err), "%s", err.msg);
    v4_stw_free(w);
    CHECK(exists(path) && !exists(tmp), "rename did not happen");

    unsigned char buf[4096];
    long n = read_all(path, buf, sizeof buf);
    CHECK(n == (long)fb, "file size %ld, expected %llu", n, (unsigned long long)fb);
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++)
        hl |= (uint64_t)buf[i] << (8 * i);
    const char *want = "{\"a.weight\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
                       "\"b\":{\"dtype\":\"F8_E8M0\",\"shape\":[4],\"data_offsets\":[12,16]},"
                       "\"empty\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[16,16]},"
                       "\"__metadata__\":{\"format\":\"pt\"}}";
    size_t wl = strlen(want);
    CHECK(hl % 8 == 0 && hl >= wl && hl < wl + 8, "header length %llu", (unsigned long long)hl);
    CHECK(n > 8 + (long)wl && !memcmp(buf + 8, want, wl), "header text: %.*s", (int)wl, buf + 8);
    for (uint64_t i = wl; i < hl; i++)
        CHECK(buf[8 + i] == ' ', "padding byte %llu is %d", (unsigned long long)i, buf[8 + i]);
    CHECK(n == (long)(8 + hl + 16) && !memcmp(buf + 8 + hl, data, 16), "data area");
    unlink(path);
}

static void test_abandon(const char *dir)
{
    char path[1024], tmp[1024];
    snprintf(path, sizeof path, "%s/stw_b.safetensors", dir);
    v4_stw_tmp_path(path, tmp, sizeof tmp);
    v4_error err = {0};
    v4_stw *w = v4_stw_new();
    int64_t s[1] = {1000};
    CHECK(!v4_stw_add(w, "x", V4_DT_F32, 1, s, &err), "%s", err.msg);
    CHECK(!v4_stw_begin(w, path, &err), "%s", err.msg);
    unsigned char z[100] = {0};
    CHECK(!v4_stw_write(w, z, sizeof z, &err), "%s", err.msg);
    CHECK(v4_stw_finish(w, &err) < 0, "finish with missing bytes accepted");
    v4_stw_free(w);
    CHECK(!exists(path) && !exists(tmp), "abandoned writer left a file");
}

static void test_atomic_file(const char *dir)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/stw_c.json", dir);
    v4_error err = {0};
    CHECK(!v4_write_file_atomic(path, "{}", 2, 0, &err), "%s", err.msg);
    unsigned char buf[8];
    CHECK(read_all(path, buf, sizeof buf) == 2 && !memcmp(buf, "{}", 2), "content");
    unlink(path);
    char tmp[64];
    CHECK(!v4_stw_tmp_path("a/b/c.json", tmp, sizeof tmp) && !strcmp(tmp, "a/b/.c.json.tmp"), "%s", tmp);
    CHECK(!v4_stw_tmp_path("c.json", tmp, sizeof tmp) && !strcmp(tmp, ".c.json.tmp"), "%s", tmp);
    CHECK(!strcmp(v4_stw_dtype_name(V4_DT_F8_E4M3), "F8_E4M3") && v4_stw_dtype_size(V4_DT_I64) == 8,
          "dtype table");
}

int main(void)
{
    const char *dir = t_env("V4_TMP", "/tmp");
    test_roundtrip(dir);
    test_abandon(dir);
    test_atomic_file(dir);
    TEST_DONE();
}
