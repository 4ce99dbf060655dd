/* constraint_opts.c - see constraint_opts.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "constraint_opts.h"

char *v4_read_text_file(const char *path, size_t *len)
{
    FILE *f = !strcmp(path, "-") ? stdin : fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *s = malloc(cap);
    while (s) {
        if (cap - n < 2) {
            char *q = realloc(s, cap * 2);
            if (!q) {
                free(s);
                s = NULL;
                break;
            }
            s = q;
            cap *= 2;
        }
        size_t r = fread(s + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0)
            break;
    }
    int bad = ferror(f);
    if (f != stdin)
        fclose(f);
    if (s && bad) {
        free(s);
        errno = EIO;
        return NULL;
    }
    if (s) {
        s[n] = 0;
        *len = n;
    }
    return s;
}

const char *v4_constraint_opts_usage(void)
{
    return "         [--json-schema FILE | --json-object | --regex R | --choice FILE |\n"
           "          --grammar FILE.gbnf] [--compact]\n";
}

int v4_constraint_opts_take(v4_constraint_opts *o, int argc, char **argv, int *i, const char *cmd)
{
    const char *a = argv[*i];
    if (!strcmp(a, "--compact")) {
        o->compact = 1;
        return 1;
    }
    int kind, file = 0;
    if (!strcmp(a, "--json-schema"))
        kind = V4G_JSON_SCHEMA, file = 1;
    else if (!strcmp(a, "--json-object"))
        kind = V4G_JSON_OBJECT;
    else if (!strcmp(a, "--regex"))
        kind = V4G_REGEX;
    else if (!strcmp(a, "--choice"))
        kind = V4G_CHOICE, file = 1;
    else if (!strcmp(a, "--grammar"))
        kind = V4G_GRAMMAR, file = 1;
    else
        return 0;
    if (o->on) {
        fprintf(stderr, "v4fleet %s: %s and %s: give one output constraint\n", cmd, o->flag, a);
        return -1;
    }
    const char *v = "";
    if (kind != V4G_JSON_OBJECT) {
        if (*i + 1 >= argc) {
            fprintf(stderr, "v4fleet %s: %s needs a value\n", cmd, a);
            return -1;
        }
        v = argv[++*i];
    }
    size_t len = strlen(v);
    char *text = file ? v4_read_text_file(v, &len) : strdup(v);
    if (!text) {
        fprintf(stderr, "v4fleet %s: %s %s: %s\n", cmd, a, v, strerror(errno));
        return -1;
    }
    o->on = 1;
    o->kind = (v4g_kind)kind;
    o->text = text;
    o->len = len;
    o->flag = a;
    return 1;
}

void v4_constraint_opts_free(v4_constraint_opts *o)
{
    free(o->text);
    o->text = NULL;
    o->on = 0;
}
