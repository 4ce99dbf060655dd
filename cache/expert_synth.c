/* expert_synth.c - synthetic routed experts and the marker of a model without them
 * (see expert_synth.h).  Thread: any; no global state. */
#include "expert_synth.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t v4_synth_mix64(uint64_t a, uint64_t b)
{
    uint64_t x = a ^ (b * 0xd1b54a32d192ed03ull);
    return v4_splitmix64(&x);
}

uint64_t v4_synth_fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

uint64_t v4_synth_tensor_seed(uint64_t seed, const char *base)
{
    return v4_synth_mix64(seed, v4_synth_fnv1a(base));
}

void v4_synth_stream(v4_rng *r, uint64_t tseed, const char *name)
{
    v4_rng_seed(r, v4_synth_mix64(tseed, v4_synth_fnv1a(name)));
}

void v4_synth_fill_bytes(unsigned char *p, size_t n, v4_rng *r, const uint8_t *lut)
{
    size_t i = 0;
    while (i < n) {
        uint64_t x = v4_rng_next(r);
        for (int k = 0; k < 8 && i < n; k++, i++) {
            uint8_t byte = (uint8_t)(x >> (8 * k));
            p[i] = lut ? lut[byte] : byte;
        }
    }
}

uint8_t v4_synth_e8m0(int e)
{
    int b = 127 + e;
    return (uint8_t)(b < 0 ? 0 : b > 254 ? 254 : b);
}

/* log2(x) rounded to the nearest integer (in the log domain), exact. */
static int round_log2(double x)
{
    int k;
    double m = frexp(x, &k);
    return m >= 0.70710678118654752 ? k : k - 1;
}

/* Uniform codes have rms sqrt(68.5/8) = 2.926; the {-1,0,0,+1} jitter of the exponent
 * multiplies the rms by sqrt(mean(4^j)) = 1.25. */
static int fp4_exp(double std) { return round_log2(std / (2.926 * 1.25)); }

static int fp4_jitter(uint64_t seed, int64_t row, int64_t grp)
{
    static const int j[4] = {-1, 0, 0, 1};
    return j[v4_synth_mix64(seed, ((uint64_t)row << 32) ^ (uint64_t)grp) & 3];
}

void v4_synth_fp4_weight_rows(v4_rng *r, int64_t nr, int64_t row_bytes, unsigned char *dst)
{
    for (int64_t i = 0; i < nr; i++)
        v4_synth_fill_bytes(dst + i * row_bytes, (size_t)row_bytes, r, NULL);
}

void v4_synth_fp4_scale_rows(uint64_t tseed, double std, int64_t r0, int64_t nr, int64_t cols,
                             unsigned char *dst)
{
    const int e = fp4_exp(std);
    for (int64_t i = 0; i < nr; i++)
        for (int64_t j = 0; j < cols; j++)
            dst[i * cols + j] = v4_synth_e8m0(e + fp4_jitter(tseed, r0 + i, j));
}

int v4_synth_expert_base(char *out, size_t cap, int layer, int expert, int m)
{
    static const char *const mats[3] = {"w1", "w3", "w2"};
    if (m < 0 || m > 2)
        return -1;
    int n = snprintf(out, cap, "layers.%d.ffn.experts.%d.%s", layer, expert, mats[m]);
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

int v4_synth_expert_block(const v4_config *cfg, const v4_xblock_layout *lo, uint64_t seed, int layer, int expert,
                          void *block, v4_error *err)
{
    if (!cfg->expert_fp4)
        return v4_err_set(err, V4_ERR_CONFIG, "synthetic experts",
                          "the config's routed experts are FP8; synthetic experts are FP4 only (as mkmodel writes them)");
    if (layer < 0 || layer >= cfg->n_layers || expert < 0 || expert >= cfg->n_routed_experts)
        return v4_err_set(err, V4_ERR_RANGE, "synthetic experts", "layer %d expert %d: outside the model (%d layers x %d experts)",
                          layer, expert, cfg->n_layers, cfg->n_routed_experts);
    unsigned char *b = block;
    memset(b, 0, lo->bytes);
    /* w1, w3: [moe_inter][dim]; w2: [dim][moe_inter] (input width = the second). */
    const int64_t out[3] = {cfg->moe_inter, cfg->moe_inter, cfg->dim}, in[3] = {cfg->dim, cfg->dim, cfg->moe_inter};
    for (int m = 0; m < 3; m++) {
        char base[96], name[112];
        if (v4_synth_expert_base(base, sizeof base, layer, expert, m))
            return v4_err_set(err, V4_ERR_INTERNAL, "synthetic experts", "tensor name too long");
        snprintf(name, sizeof name, "%s.weight", base);
        const uint64_t tseed = v4_synth_tensor_seed(seed, base);
        v4_rng r;
        v4_synth_stream(&r, tseed, name);
        v4_synth_fp4_weight_rows(&r, out[m], in[m] / 2, b + lo->off[2 * m]);
        v4_synth_fp4_scale_rows(tseed, 1.0 / sqrt((double)in[m]), 0, out[m], in[m] / 32, b + lo->off[2 * m + 1]);
    }
    return 0;
}

char *v4_synth_marker_json(uint64_t seed)
{
    char s[32];
    snprintf(s, sizeof s, "%llu", (unsigned long long)seed);
    json_t *root = json_pack("{s:s, s:i, s:s}", "format", V4_SYNTH_FORMAT, "version", 1, "seed", s);
    if (!root)
        return NULL;
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(root);
    return text;
}

int v4_synth_marker_load(const char *dir, uint64_t *seed, v4_error *err)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, V4_SYNTH_MARKER) >= (int)sizeof path)
        return v4_err_set(err, V4_ERR_INVALID, dir, "path too long");
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT)
            return 0;
        return v4_err_set(err, V4_ERR_CONFIG, path, "cannot open: %s", strerror(errno));
    }
    json_error_t je;
    json_t *root = json_loadf(f, 0, &je);
    fclose(f);
    const char *fmt = NULL, *s = NULL;
    json_int_t ver = 0;
    int rc = -1;
    if (!root)
        v4_err_set(err, V4_ERR_CONFIG, path, "not JSON (line %d: %s)", je.line, je.text);
    else if (json_unpack(root, "{s:s, s:I, s:s}", "format", &fmt, "version", &ver, "seed", &s) ||
             strcmp(fmt, V4_SYNTH_FORMAT) || ver != 1)
        v4_err_set(err, V4_ERR_CONFIG, path, "want {\"format\": \"%s\", \"version\": 1, \"seed\": \"<unsigned decimal>\"}",
                   V4_SYNTH_FORMAT);
    else {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (!*s || *s == '-' || *s == '+' || *end || errno)
            v4_err_set(err, V4_ERR_CONFIG, path, "seed '%s' is not an unsigned 64-bit decimal", s);
        else {
            *seed = v;
            rc = 1;
        }
    }
    json_decref(root);
    return rc;
}
