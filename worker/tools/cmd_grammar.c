/* cmd_grammar.c - `v4fleet grammar-check`: does a text's token sequence pass a constraint,
 * and where is it refused.
 *
 *   v4fleet grammar-check --tokenizer DIR (--schema FILE | --json-object | --regex R |
 *                         --choice FILE | --grammar FILE) [--compact] [--time] [TEXT_FILE | -]
 *
 * The text (a file, or stdin) is tokenized as the model would write it (no special
 * tokens) and fed token by token through the engine (worker/grammar/grammar.h): before
 * each token the mask must allow it, and after the last one the end must be allowed.
 * Prints "accepted (N tokens)" or where it was refused (token index, byte offset, the
 * token's text, the text before it), and exits 0 accepted, 1 refused, 2 usage or a
 * constraint that does not compile (the message names the keyword and JSON pointer, or the
 * GBNF line and column).  --time adds a line with the compile time and the masks' times.
 * Also v4_json_text of grammar_cli.h (the vocabulary is worker/serve/constrain.h's
 * v4_grammar_vocab, the one serving uses).  docs/structured-outputs.md has examples.
 * Thread: main thread (a command).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_util.h"
#include "commands.h"
#include "config/strbuf.h"
#include "constraint_opts.h"
#include "grammar_cli.h"

/* ---------------------------------------------------------------- helpers -- */
/* a real as Python's repr writes it: the shortest digits that read back the same, in
 * positional notation for exponents -4..15 (50.0, 0.001) and scientific beyond (1e+16) */
static void real_text(double d, char *out, size_t n)
{
    char e[64];
    int p = 1;
    for (; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, d);
        if (strtod(e, NULL) == d)
            break;
    }
    const char *x = strchr(e, 'e');
    int ex = x ? atoi(x + 1) : 0;
    if (ex >= -4 && ex < 16) {
        int dec = p - 1 - ex;
        snprintf(out, n, "%.*f", dec < 1 ? 1 : dec, d);
    } else {
        snprintf(out, n, "%s", e);
    }
}

/* ------------------------------------------- keys in the schema's order -- */
/* The engine writes an object's properties in its schema's order (the named ones, then
 * extra keys); a document checked against it must come in that order too.  The schema
 * of a value is found as the compiler finds it: $ref target first, then the schema's own
 * properties, then allOf's branches; of anyOf/oneOf the branch naming most of the keys. */
#define ORDER_DEPTH 32

static const json_t *deref(const json_t *root, const json_t *s)
{
    const char *ref = json_string_value(json_object_get(s, "$ref"));
    if (!ref || ref[0] != '#')
        return NULL;
    const json_t *cur = root;
    const char *p = ref + 1;
    while (*p == '/' && cur) {
        p++;
        char tok[256];
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof tok) {
            if (p[0] == '~' && (p[1] == '0' || p[1] == '1')) {
                tok[n++] = p[1] == '0' ? '~' : '/';
                p += 2;
            } else {
                tok[n++] = *p++;
            }
        }
        tok[n] = 0;
        cur = json_is_array(cur) ? json_array_get(cur, (size_t)atol(tok)) : json_object_get(cur, tok);
    }
    return cur;
}

/* append the property schemas of s and of what it folds in ($ref, allOf) to props, in the
 * compiler's order; its anyOf/oneOf lists go to alts: the compiler merges everything first
 * and expands the alternatives last, so their properties come after */
static void collect_flat(const json_t *root, const json_t *s, json_t *props, json_t *reqs, json_t *alts, int depth)
{
    if (!json_is_object(s) || depth > ORDER_DEPTH)
        return;
    const json_t *t = deref(root, s);
    if (t)
        collect_flat(root, t, props, reqs, alts, depth + 1);
    const char *k;
    json_t *v;
    size_t i;
    json_object_foreach(json_object_get(s, "properties"), k, v) {
        if (!json_object_get(props, k))
            json_object_set(props, k, v);
    }
    json_array_foreach(json_object_get(s, "required"), i, v) {   /* required names, kept for the end */
        if (json_is_string(v))
            json_array_append(reqs, v);
    }
    json_array_foreach(json_object_get(s, "allOf"), i, v) collect_flat(root, v, props, reqs, alts, depth + 1);
    const json_t *a = json_object_get(s, "anyOf");
    if (!a)
        a = json_object_get(s, "oneOf");
    if (json_is_array(a))
        json_array_append(alts, (json_t *)a);
}

/* 1 when value x may have the JSON type schema s names (no "type": yes) and is one of
 * its listed values (const, enum) */
static int type_fits(const json_t *s, const json_t *x)
{
    const json_t *cn = json_is_object(s) ? json_object_get(s, "const") : NULL;
    const json_t *en = json_is_object(s) ? json_object_get(s, "enum") : NULL;
    if (cn && !json_equal(cn, x))
        return 0;
    if (json_is_array(en)) {   /* a listed value */
        size_t i;
        const json_t *e;
        int in = 0;
        json_array_foreach(en, i, e) in |= json_equal(e, x);
        if (!in)
            return 0;
    }
    const json_t *t = json_is_object(s) ? json_object_get(s, "type") : NULL;
    if (!t)
        return 1;
    const char *n = json_is_object(x) ? "object" : json_is_array(x) ? "array" : json_is_string(x) ? "string"
                    : json_is_integer(x) ? "integer" : json_is_real(x) ? "number" : json_is_boolean(x) ? "boolean"
                                                                                        : "null";
    size_t i;
    const json_t *e;
    if (json_is_string(t))
        return !strcmp(json_string_value(t), n) || (!strcmp(n, "integer") && !strcmp(json_string_value(t), "number"));
    json_array_foreach(t, i, e) {
        if (json_is_string(e) && (!strcmp(json_string_value(e), n) ||
                                  (!strcmp(n, "integer") && !strcmp(json_string_value(e), "number"))))
            return 1;
    }
    return 0;
}

/* collect_flat, then of each list of alternatives the branch data fits best: every
 * required key present, values of the types the branch names, most keys named */
static void collect(const json_t *root, const json_t *s, const json_t *data, json_t *props, json_t *reqs, int depth)
{
    json_t *alts = json_array();
    collect_flat(root, s, props, reqs, alts, depth);
    for (size_t n = 0; n < json_array_size(alts) && n < 64; n++) {
        const json_t *best = NULL;
        long best_n = -1;
        size_t i;
        json_t *v;
        json_array_foreach(json_array_get(alts, n), i, v) {
            json_t *p = json_object(), *r = json_array(), *a = json_array();
            collect_flat(root, v, p, r, a, depth + 1);
            long cnt = 0;
            json_t *x;
            const char *pk;
            json_object_foreach(p, pk, x) {
                const json_t *dv = json_object_get(data, pk);
                cnt += !dv ? 0 : type_fits(x, dv) ? 1 : -100;
            }
            size_t q;
            json_array_foreach(r, q, x) cnt -= json_object_get(data, json_string_value(x)) ? 0 : 1000;
            json_decref(p);
            json_decref(r);
            json_decref(a);
            if (cnt > best_n)
                best = v, best_n = cnt;
        }
        if (best)
            collect_flat(root, best, props, reqs, alts, depth + 1);
    }
    json_decref(alts);
}

/* the schema of an array's item i */
static const json_t *item_schema(const json_t *root, const json_t *s, size_t i, int depth)
{
    if (!json_is_object(s) || depth > ORDER_DEPTH)
        return NULL;
    const json_t *t = deref(root, s);
    if (t)
        return item_schema(root, t, i, depth + 1);
    const json_t *pre = json_object_get(s, "prefixItems"), *items = json_object_get(s, "items");
    if (json_is_array(items))
        pre = items, items = json_object_get(s, "additionalItems");
    if (json_is_array(pre) && i < json_array_size(pre))
        return json_array_get(pre, i);
    if (items)
        return items;
    size_t k;
    json_t *v;
    json_array_foreach(json_object_get(s, "allOf"), k, v) {
        const json_t *r = item_schema(root, v, i, depth + 1);
        if (r)
            return r;
    }
    const json_t *alts = json_object_get(s, "anyOf");
    if (!alts)
        alts = json_object_get(s, "oneOf");
    json_array_foreach(alts, k, v) {
        const json_t *r = item_schema(root, v, i, depth + 1);
        if (r)
            return r;
    }
    return NULL;
}

static void text_of(v4_strbuf *b, const json_t *v, int spaced, const json_t *root, const json_t *schema, int depth);

/* the schema of a key no property names: the first pattern of patternProperties it
 * matches, else additionalProperties (a schema), else none */
static const json_t *extra_schema(const char *k, const json_t *ap, const json_t *pp)
{
    const char *pk;
    json_t *pv;
    json_object_foreach((json_t *)pp, pk, pv) {
        v4_error e = {0};
        if (v4g_pattern_matches(pk, strlen(pk), k, strlen(k), &e) == 1)
            return pv;
    }
    return json_is_object(ap) ? ap : json_true();
}

static void member(v4_strbuf *b, const char *k, const json_t *x, int first, int spaced, const json_t *root,
                   const json_t *sub, int depth)
{
    if (!first)
        v4_sb_putn(b, spaced ? ", " : ",", spaced ? 2 : 1);
    json_t *ks = json_string(k);
    char *kd = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL;
    json_decref(ks);
    if (!kd) {
        b->oom = 1;
        return;
    }
    v4_sb_putn(b, kd, strlen(kd));
    free(kd);
    v4_sb_putn(b, spaced ? ": " : ":", spaced ? 2 : 1);
    text_of(b, x, spaced, root, sub, depth + 1);
}

static void text_of(v4_strbuf *b, const json_t *v, int spaced, const json_t *root, const json_t *schema, int depth)
{
    char tmp[64];
    size_t i;
    const char *k;
    json_t *x;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        json_t *props = json_object(), *reqs = json_array();
        if (schema && depth < ORDER_DEPTH)
            collect(root, schema, v, props, reqs, 0);
        const json_t *own = schema;   /* the schema itself, through its $refs */
        for (int k = 0; k < ORDER_DEPTH && own && deref(root, own); k++)
            own = deref(root, own);
        const json_t *ap = own ? json_object_get(own, "additionalProperties") : NULL;
        const json_t *pp = own ? json_object_get(own, "patternProperties") : NULL;
        json_array_foreach(reqs, i, x) {   /* required names the properties lack come after them */
            const char *rk = json_string_value(x);
            if (!json_object_get(props, rk))
                json_object_set(props, rk, (json_t *)extra_schema(rk, ap, pp));
        }
        json_decref(reqs);
        v4_sb_putn(b, "{", 1);
        int first = 1;
        json_object_foreach(props, k, x) {   /* the named properties, in order */
            json_t *dv = json_object_get(v, k);
            if (dv) {
                member(b, k, dv, first, spaced, root, x, depth);
                first = 0;
            }
        }
        json_object_foreach((json_t *)v, k, x) {   /* then the others, as they come */
            if (json_object_get(props, k))
                continue;
            member(b, k, x, first, spaced, root, extra_schema(k, ap, pp), depth);
            first = 0;
        }
        json_decref(props);
        v4_sb_putn(b, "}", 1);
        return;
    }
    case JSON_ARRAY:
        v4_sb_putn(b, "[", 1);
        json_array_foreach((json_t *)v, i, x) {
            if (i)
                v4_sb_putn(b, spaced ? ", " : ",", spaced ? 2 : 1);
            text_of(b, x, spaced, root, schema ? item_schema(root, schema, i, 0) : NULL, depth + 1);
        }
        v4_sb_putn(b, "]", 1);
        return;
    case JSON_REAL:
        real_text(json_real_value(v), tmp, sizeof tmp);
        v4_sb_putn(b, tmp, strlen(tmp));
        return;
    default: {
        if (json_is_string(v) && !strncmp(json_string_value(v), "\x01" "BIG:", 5)) {   /* a protected integer */
            v4_sb_putn(b, json_string_value(v) + 5, strlen(json_string_value(v) + 5));
            return;
        }
        char *d = json_dumps(v, JSON_ENCODE_ANY);
        if (!d) {
            b->oom = 1;
            return;
        }
        v4_sb_putn(b, d, strlen(d));
        free(d);
    }
    }
}

char *v4_json_protect_bigints(const char *t, size_t len)
{
    char *o = malloc(len * 2 + 16);
    if (!o)
        return NULL;
    size_t w = 0;
    int in_str = 0;
    for (size_t i = 0; i < len;) {
        char c = t[i];
        if (in_str) {
            o[w++] = c;
            if (c == '\\' && i + 1 < len)
                o[w++] = t[++i];
            else if (c == '"')
                in_str = 0;
            i++;
            continue;
        }
        if (c == '"') {
            in_str = 1;
            o[w++] = t[i++];
            continue;
        }
        if (c == '-' || (c >= '0' && c <= '9')) {   /* a number: copy it, or protect a long integer */
            size_t j = i + (c == '-'), d0 = j;
            while (j < len && t[j] >= '0' && t[j] <= '9')
                j++;
            int integer = j >= len || (t[j] != '.' && t[j] != 'e' && t[j] != 'E');
            if (integer && j - d0 > 18) {
                w += (size_t)sprintf(o + w, "\"\\u0001BIG:");
                memcpy(o + w, t + i, j - i);
                w += j - i;
                o[w++] = '"';
                i = j;
                continue;
            }
            while (i < j)
                o[w++] = t[i++];
            continue;
        }
        o[w++] = t[i++];
    }
    o[w] = 0;
    return o;
}

char *v4_json_text(const json_t *v, const json_t *schema, int spaced)
{
    v4_strbuf b = {0};
    text_of(&b, v, spaced, schema, schema, 0);
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p ? b.p : strdup("");
}

/* ----------------------------------------------------------- grammar-check -- */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: v4fleet grammar-check --tokenizer DIR (--schema FILE | --json-object | --regex R |\n"
               "                             --choice FILE | --grammar FILE) [--compact] [--time] [TEXT_FILE | -]\n\n"
               "Feed a text's tokens through a constraint; say whether it is accepted and where it is refused.\n"
               "  --tokenizer DIR  directory with tokenizer.json (+ tokenizer_config.json)\n"
               "  --schema FILE    a JSON Schema          --json-object  any JSON object\n"
               "  --regex R        a regex (ECMA-262) the whole text must match\n"
               "  --choice FILE    a JSON array of strings: the text is one of them\n"
               "  --grammar FILE   a GBNF grammar (llama.cpp's notation, starting at rule root)\n"
               "  --time           print the compile time and the mask times (mean, max) too\n"
               "  --compact        JSON without whitespace between tokens (default: bounded runs)\n"
               "Exit: 0 accepted, 1 refused, 2 usage error or a constraint that does not compile.\n");
}

int v4_cmd_grammar_check(int argc, char **argv)
{
    const char *tokdir = NULL, *schema = NULL, *regex = NULL, *choice = NULL, *gbnf = NULL, *textf = "-";
    int json_object = 0, compact = 0, timing = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--tokenizer") && i + 1 < argc) {
            tokdir = argv[++i];
        } else if (!strcmp(a, "--schema") && i + 1 < argc) {
            schema = argv[++i];
        } else if (!strcmp(a, "--regex") && i + 1 < argc) {
            regex = argv[++i];
        } else if (!strcmp(a, "--choice") && i + 1 < argc) {
            choice = argv[++i];
        } else if (!strcmp(a, "--grammar") && i + 1 < argc) {
            gbnf = argv[++i];
        } else if (!strcmp(a, "--time")) {
            timing = 1;
        } else if (!strcmp(a, "--json-object")) {
            json_object = 1;
        } else if (!strcmp(a, "--compact")) {
            compact = 1;
        } else if (a[0] != '-' || !strcmp(a, "-")) {
            textf = a;
        } else {
            fprintf(stderr, "v4fleet grammar-check: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (!tokdir || (!!schema + !!regex + !!choice + !!gbnf + json_object) != 1) {
        fprintf(stderr, "v4fleet grammar-check: need --tokenizer and exactly one of --schema, --json-object, "
                        "--regex, --choice, --grammar\n");
        usage(stderr);
        return 2;
    }
    v4_error err = {0};
    v4_tokenizer *t = NULL;
    if (v4_tok_load(tokdir, &t, &err)) {
        v4_print_error("grammar-check", &err);
        return 2;
    }
    size_t clen = 0, tlen = 0;
    char *ctext = NULL;
    v4g_kind kind = V4G_JSON_OBJECT;
    if (schema || choice || gbnf) {
        const char *cf = schema ? schema : choice ? choice : gbnf;
        ctext = v4_read_text_file(cf, &clen);
        if (!ctext) {
            fprintf(stderr, "v4fleet grammar-check: %s: cannot read\n", cf);
            v4_tok_free(t);
            return 2;
        }
        kind = schema ? V4G_JSON_SCHEMA : choice ? V4G_CHOICE : V4G_GRAMMAR;
    } else if (regex) {
        ctext = strdup(regex);
        clen = strlen(regex);
        kind = V4G_REGEX;
    }
    v4g_opts o = {.compact = compact};
    double t0 = now_s();
    v4g_constraint *c = v4g_compile(kind, ctext ? ctext : "", clen, &o, &err);
    double t_compile = now_s() - t0, t_mask = 0, t_max = 0;
    size_t n_masks = 0;
    free(ctext);
    char *text = c ? v4_read_text_file(textf, &tlen) : NULL;
    v4g_vocab *v = text ? v4_grammar_vocab(t, v4_tok_eos(t), &err) : NULL;
    v4g_matcher *m = v ? v4g_matcher_new(c, v, &err) : NULL;
    v4_ids ids = {0};
    int rc = 2;
    if (!c) {
        fprintf(stderr, "v4fleet grammar-check: the constraint does not compile: %s%s%s%s\n", err.msg,
                err.where[0] ? " [at " : "", err.where[0] ? err.where : "", err.where[0] ? "]" : "");
    } else if (!text) {
        fprintf(stderr, "v4fleet grammar-check: %s: cannot read the text\n", textf);
    } else if (!m || v4_tok_encode(t, text, tlen, &ids, &err)) {
        v4_print_error("grammar-check", &err);
    } else {
        uint32_t *bits = calloc(((size_t)v4g_vocab_size(v) + 31) / 32, sizeof *bits);
        size_t off = 0;
        rc = 0;
        for (size_t i = 0; bits && i <= ids.n; i++) {
            double m0 = now_s();
            int mr = v4g_matcher_mask(m, bits, &err);
            double dt = now_s() - m0;
            t_mask += dt;
            n_masks++;
            t_max = dt > t_max ? dt : t_max;
            if (mr) {
                v4_print_error("grammar-check", &err);
                rc = 2;
                break;
            }
            int32_t id = i < ids.n ? ids.v[i] : v4_tok_eos(t);
            int ok = id >= 0 && (bits[id >> 5] >> (id & 31)) & 1;
            size_t blen = 0;
            const char *b = id >= 0 && i < ids.n ? v4_tok_bytes(t, id, &blen) : NULL;
            if (!ok) {
                if (i == ids.n)
                    printf("refused: the text ends before the constraint is satisfied (%zu tokens, %zu bytes "
                           "taken)\n",
                           ids.n, tlen);
                else
                    printf("refused at token %zu (id %d, bytes %zu..%zu: \"%.*s\") after \"%.*s\"\n", i, id, off,
                           off + blen, (int)blen, b ? b : "", (int)(off > 60 ? 60 : off),
                           text + (off > 60 ? off - 60 : 0));
                rc = 1;
                break;
            }
            if (i < ids.n && v4g_matcher_commit(m, id, &err) != 0) {
                printf("refused at token %zu (commit)\n", i);
                rc = 1;
                break;
            }
            off += blen;
        }
        if (rc == 0)
            printf("accepted (%zu tokens, %zu bytes)\n", ids.n, tlen);
        if (timing)
            printf("time: compile %.0f us, masks mean %.0f us, max %.0f us (%zu masks)\n", t_compile * 1e6,
                   n_masks ? t_mask * 1e6 / (double)n_masks : 0.0, t_max * 1e6, n_masks);
        free(bits);
    }
    v4_ids_free(&ids);
    v4g_matcher_free(m);
    v4g_vocab_free(v);
    v4g_constraint_unref(c);
    free(text);
    v4_tok_free(t);
    return rc;
}
