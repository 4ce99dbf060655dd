/* config_file.c - NAME=value settings files (see config_file.h).  Thread: any. */
#include "config_file.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void v4_cfgfile_free(char **names, char **values, int n)
{
    for (int i = 0; i < n; i++) {
        free(names[i]);
        free(values[i]);
    }
    free(names);
    free(values);
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = 0;
    return s;
}

static int is_known(const char *name, const char *const *known, int n_known)
{
    size_t len = strlen(name);
    for (int i = 0; i < n_known; i++) {
        size_t k = strlen(known[i]);
        if (!strcmp(name, known[i]) || (len == k + 5 && !strncmp(name, known[i], k) && !strcmp(name + k, "_FILE")))
            return 1;
    }
    return 0;
}

int v4_cfgfile_load(const char *path, const char *const *known, int n_known, char ***names, char ***values,
                    int *n, v4_error *err)
{
    *names = *values = NULL;
    *n = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return v4_err_set(err, V4_ERR_CONFIG, "V4_CONFIG_FILE", "cannot open '%s': %s", path, strerror(errno));
    char line[4098];
    int lineno = 0, cap = 0, rc = 0;
    char where[96];
    while (!rc && fgets(line, sizeof line, f)) {
        lineno++;
        snprintf(where, sizeof where, "config file line %d", lineno);
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n') {
            rc = v4_err_set(err, V4_ERR_CONFIG, where, "in %s: line longer than 4 KiB", path);
            break;
        }
        char *s = trim(line);
        if (!*s || *s == '#')
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            rc = v4_err_set(err, V4_ERR_CONFIG, where, "in %s: expected NAME=value", path);
            break;
        }
        *eq = 0;
        char *name = trim(s), *val = trim(eq + 1);
        size_t vl = strlen(val);
        if (vl >= 2 && val[0] == '"' && val[vl - 1] == '"') {
            val[vl - 1] = 0;
            val++;
        }
        if (!is_known(name, known, n_known)) {
            rc = v4_err_set(err, V4_ERR_CONFIG, where, "in %s: unknown setting '%.64s'", path, name);
            break;
        }
        for (int i = 0; i < *n; i++)
            if (!strcmp((*names)[i], name)) {
                rc = v4_err_set(err, V4_ERR_CONFIG, where, "in %s: '%s' is set twice", path, name);
                break;
            }
        if (rc)
            break;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            char **nn = realloc(*names, sizeof(char *) * cap), **nv = nn ? realloc(*values, sizeof(char *) * cap) : NULL;
            if (nn)
                *names = nn;
            if (nv)
                *values = nv;
            if (!nn || !nv) {
                rc = v4_err_set(err, V4_ERR_NOMEM, where, "out of memory");
                break;
            }
        }
        char *dn = strdup(name), *dv = strdup(val);
        if (!dn || !dv) {
            free(dn);
            free(dv);
            rc = v4_err_set(err, V4_ERR_NOMEM, where, "out of memory");
            break;
        }
        (*names)[*n] = dn;
        (*values)[*n] = dv;
        (*n)++;
    }
    if (!rc && ferror(f))
        rc = v4_err_set(err, V4_ERR_CONFIG, "V4_CONFIG_FILE", "cannot read '%s'", path);
    fclose(f);
    if (rc) {
        v4_cfgfile_free(*names, *values, *n);
        *names = *values = NULL;
        *n = 0;
    }
    return rc;
}
