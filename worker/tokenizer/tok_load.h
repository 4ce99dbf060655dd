/* tok_load.h - shared by the tokenizer loader's files (tok_load.c: files, JSON,
 * config, orchestration; tok_load_model.c: model + added tokens; tok_load_pipeline.c:
 * normalizer, pre-tokenizer, decoder; tok_json.c: the helpers they share).  Internal.
 * Thread: a loader is used by one thread, while loading. */
#ifndef V4_TOK_LOAD_H
#define V4_TOK_LOAD_H

#include <jansson.h>

#include "tok_internal.h"

typedef struct loader {
    v4_tokenizer *t;
    const char *where;
    v4_error *err;
    char *buf;          /* scratch for merge strings */
    size_t buf_cap;
} loader;

/* tok_json.c: set L->err (code, L->where, message) and return -1. */
int tok_fail(loader *L, v4_errcode code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Make L->buf at least n bytes. */
int tok_scratch(loader *L, size_t n);
/* Optional boolean member (absent/null = dflt); -1 if present with another type. */
int tok_get_bool(const json_t *o, const char *key, int dflt);
/* The "type" string of a component, or NULL. */
const char *tok_get_type(const json_t *o);

/* tok_load_model.c */
int tok_load_model(loader *L, const json_t *model);
int tok_load_added(loader *L, const json_t *added);
/* tok_load_pipeline.c */
int tok_check_normalizer(loader *L, const json_t *n);
int tok_load_pretok(loader *L, const json_t *p, const char *path, int depth);
int tok_check_decoder(loader *L, const json_t *d);

#endif
