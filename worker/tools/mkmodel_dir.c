/* mkmodel_dir.c - the output directory of `v4fleet mkmodel` (see mkmodel.h).
 *
 * A new directory is created (with its parents); an existing one must be empty unless
 * --force, which first deletes config.json and the index (so that the directory
 * stops looking like a complete checkpoint) and then every other file mkmodel may
 * have written, and nothing else.  Small text files (config, index, tokenizer) are
 * written atomically (".NAME.tmp" + fsync + rename).
 *
 * Owner: the mkmodel work package.  Thread: the command's thread.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/expert_synth.h"
#include "cache/st_writer.h"
#include "mkmodel.h"

int v4mk_join_path(char *out, size_t cap, const char *dir, const char *name)
{
    int n = snprintf(out, cap, "%s/%s", dir, name);
    return (n < 0 || (size_t)n >= cap) ? -1 : 0;
}

/* Write text (owned, freed here; NULL = the builder failed and set err, or OOM). */
int v4mk_write_text(const char *dir, const char *name, char *text, int sync, v4_error *err)
{
    char path[4096];
    int rc;
    if (!text)
        rc = err->code ? -1 : v4_err_set(err, V4_ERR_NOMEM, name, "cannot build JSON");
    else if (v4mk_join_path(path, sizeof path, dir, name))
        rc = v4_err_set(err, V4_ERR_INVALID, dir, "output path too long");
    else
        rc = v4_write_file_atomic(path, text, strlen(text), sync, err);
    free(text);
    return rc;
}

/* Names mkmodel may create (and, with --force, delete): model-*.safetensors,
 * model.safetensors.index.json, config.json, tokenizer.json,
 * tokenizer_config.json, synthetic_experts.json (--no-experts) and their ".NAME.tmp"
 * files. */
static int is_ours(const char *name)
{
    const char *n = name;
    size_t len = strlen(n);
    if (n[0] == '.' && len > 5 && !strcmp(n + len - 4, ".tmp"))
        n++, len -= 5;
    if ((len == 11 && !strncmp(n, "config.json", 11)) ||
        (len == 28 && !strncmp(n, "model.safetensors.index.json", 28)) ||
        (len == 14 && !strncmp(n, "tokenizer.json", 14)) ||
        (len == 21 && !strncmp(n, "tokenizer_config.json", 21)) ||
        (len == strlen(V4_SYNTH_MARKER) && !strncmp(n, V4_SYNTH_MARKER, len)))
        return 1;
    return len > 18 && !strncmp(n, "model-", 6) && !strncmp(n + len - 12, ".safetensors", 12);
}

static int mkdir_p(const char *dir, v4_error *err)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s", dir) >= (int)sizeof tmp)
        return v4_err_set(err, V4_ERR_INVALID, dir, "path too long");
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0755) && errno != EEXIST)
                return v4_err_set(err, V4_ERR_IO, tmp, "mkdir failed: %s", strerror(errno));
            *p = '/';
        }
    if (mkdir(tmp, 0755) && errno != EEXIST)
        return v4_err_set(err, V4_ERR_IO, dir, "mkdir failed: %s", strerror(errno));
    return 0;
}

/* Unlink DIR/name if it exists. */
static int remove_if_there(const char *dir, const char *name, v4_error *err)
{
    char path[4096];
    if (!v4mk_join_path(path, sizeof path, dir, name) && unlink(path) && errno != ENOENT)
        return v4_err_set(err, V4_ERR_IO, path, "cannot remove: %s", strerror(errno));
    return 0;
}

/* Count entries (other than . and ..); with del, unlink ours, the config.json, the
 * index and the synthetic-experts marker first (so that the directory stops looking
 * like a checkpoint, and a full one written next is not taken for a trunk). */
static int scan_dir(const char *dir, int del, int *count, v4_error *err)
{
    char path[4096];
    if (del && (remove_if_there(dir, "config.json", err) ||
                remove_if_there(dir, "model.safetensors.index.json", err) ||
                remove_if_there(dir, V4_SYNTH_MARKER, err)))
        return -1;
    DIR *d = opendir(dir);
    if (!d)
        return v4_err_set(err, V4_ERR_IO, dir, "cannot open directory: %s", strerror(errno));
    struct dirent *e;
    *count = 0;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        (*count)++;
        if (del && is_ours(e->d_name) && !v4mk_join_path(path, sizeof path, dir, e->d_name) &&
            unlink(path) && errno != ENOENT) {
            closedir(d);
            return v4_err_set(err, V4_ERR_IO, path, "cannot remove: %s", strerror(errno));
        }
    }
    closedir(d);
    return 0;
}

int v4mk_prepare_dir(const char *dir, int force, v4_error *err)
{
    struct stat st;
    if (stat(dir, &st)) {
        if (errno != ENOENT)
            return v4_err_set(err, V4_ERR_IO, dir, "cannot stat: %s", strerror(errno));
        return mkdir_p(dir, err);
    }
    if (!S_ISDIR(st.st_mode))
        return v4_err_set(err, V4_ERR_INVALID, dir, "exists and is not a directory");
    int n;
    if (scan_dir(dir, 0, &n, err))
        return -1;
    if (n && !force)
        return v4_err_set(err, V4_ERR_INVALID, dir,
                          "directory is not empty; use --force to overwrite a checkpoint");
    return n ? scan_dir(dir, 1, &n, err) : 0;
}

