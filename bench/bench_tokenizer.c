/* bench_tokenizer.c - single-thread encoding throughput of the tokenizer.
 *
 *   bench_tokenizer [--tokenizer DIR] [--cases FILE] [--mb N] [--runs R]
 *
 * Builds >= N MB (default 12) of mixed text deterministically: the texts of the
 * golden cases (tests/data/tokenizer/cases.jsonl) interleaved with generated
 * English-like prose (a word list, capitalisation, punctuation, numbers), C-like code
 * and Chinese/Japanese passages, all from a fixed-seed xorshift generator.  Then it
 * encodes the whole text R times (default 5) with a fresh encoder each run (so the
 * piece cache starts cold every time), checks once that decoding gives the text back,
 * and prints a table row: machine (CPU model from /proc/cpuinfo), text size, MB/s
 * (median of the runs, MB = 10^6 bytes), tokens/s, and the load time of the tokenizer.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "worker/tokenizer/tokenizer.h"

#ifndef V4_TOKENIZER_DIR
#define V4_TOKENIZER_DIR "tests/data/tokenizer"
#endif

typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

static void put(buf *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        while (b->n + n + 1 > b->cap)
            b->cap = b->cap ? 2 * b->cap : 1 << 20;
        b->p = realloc(b->p, b->cap);
        if (!b->p) {
            fprintf(stderr, "bench_tokenizer: out of memory\n");
            abort();
        }
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void puts_(buf *b, const char *s) { put(b, s, strlen(s)); }

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static size_t below(uint64_t *s, size_t n) { return (size_t)(rng_next(s) % n); }

static const char *const WORDS[] = {
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
    "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
    "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
    "been", "if", "more", "when", "will", "would", "who", "so", "no", "model", "token", "memory",
    "bandwidth", "expert", "attention", "sequence", "compression", "throughput", "latency",
    "queue", "worker", "request", "response", "reliability", "inference", "language", "system",
    "history", "government", "university", "development", "information", "international",
    "performance", "understanding", "significantly", "approximately", "nevertheless", "it's",
    "don't", "they've", "I'm", "we'll", "naïve", "café", "résumé", "Zürich", "São", "Paulo",
};
static const char *const CJK[] = {
    "模型", "推理", "内存", "带宽", "专家", "注意力", "序列", "压缩", "吞吐量", "延迟", "队列",
    "请求", "可靠性", "语言", "系统", "历史", "政府", "大学", "发展", "信息", "国际", "性能",
    "理解", "我们", "他们", "这个", "那个", "因为", "所以", "但是", "如果", "已经", "可以",
    "トークン", "モデル", "メモリ", "推論", "日本語", "ひらがな", "カタカナ", "です", "ます",
};
static const char *const CJK_PUNCT[] = {"，", "。", "、", "：", "？", "！", "（", "）", "「", "」"};
static const char *const IDENT[] = {"n", "len", "buf", "tok", "ids", "count", "offset", "state",
                                    "next", "prev", "heap", "rank", "merge", "piece", "cache"};

static void prose(buf *b, uint64_t *s)
{
    int sentences = 3 + (int)below(s, 6);
    for (int k = 0; k < sentences; k++) {
        int words = 5 + (int)below(s, 15);
        for (int w = 0; w < words; w++) {
            const char *word = WORDS[below(s, sizeof WORDS / sizeof WORDS[0])];
            if (w == 0) {
                char cap[64];
                snprintf(cap, sizeof cap, "%s", word);
                if (cap[0] >= 'a' && cap[0] <= 'z')
                    cap[0] = (char)(cap[0] - 32);
                puts_(b, cap);
            } else {
                puts_(b, " ");
                puts_(b, word);
            }
            size_t r = below(s, 40);
            if (r == 0)
                puts_(b, ",");
            else if (r == 1) {
                char num[32];
                snprintf(num, sizeof num, " %zu", below(s, 100000));
                puts_(b, num);
            } else if (r == 2)
                puts_(b, " (see §3.2)");
        }
        puts_(b, below(s, 5) ? ". " : "? ");
    }
    puts_(b, "\n\n");
}

static void code(buf *b, uint64_t *s)
{
    char line[256];
    int lines = 4 + (int)below(s, 8);
    const char *f = IDENT[below(s, 15)], *a = IDENT[below(s, 15)], *c = IDENT[below(s, 15)];
    snprintf(line, sizeof line, "static int %s_%s(const int32_t *%s, size_t %s)\n{\n", f, a, c, a);
    puts_(b, line);
    for (int i = 0; i < lines; i++) {
        const char *x = IDENT[below(s, 15)], *y = IDENT[below(s, 15)];
        switch (below(s, 4)) {
        case 0: snprintf(line, sizeof line, "    for (size_t i = 0; i < %s; i++)\n        %s[i] += %zu;\n", x, y, below(s, 1000)); break;
        case 1: snprintf(line, sizeof line, "    if (%s->%s != %s) {\n        return -1;\n    }\n", x, y, x); break;
        case 2: snprintf(line, sizeof line, "    %s = (%s + 0x%zx) & mask; // %s\n", x, y, below(s, 65536), f); break;
        default: snprintf(line, sizeof line, "    printf(\"%%s: %%d\\n\", %s, %s[%zu]);\n", x, y, below(s, 64)); break;
        }
        puts_(b, line);
    }
    puts_(b, "}\n\n");
}

static void cjk(buf *b, uint64_t *s)
{
    int n = 20 + (int)below(s, 60);
    for (int i = 0; i < n; i++) {
        puts_(b, CJK[below(s, sizeof CJK / sizeof CJK[0])]);
        if (!below(s, 6))
            puts_(b, CJK_PUNCT[below(s, sizeof CJK_PUNCT / sizeof CJK_PUNCT[0])]);
        if (!below(s, 25)) {
            char num[32];
            snprintf(num, sizeof num, "%zu", below(s, 2030));
            puts_(b, num);
        }
    }
    puts_(b, "。\n");
}

/* Texts of the cases file (one per line). */
static char **load_cases(const char *path, size_t *n)
{
    FILE *f = fopen(path, "r");
    *n = 0;
    if (!f)
        return NULL;
    char **v = NULL, *line = NULL;
    size_t cap = 0;
    while (getline(&line, &cap, f) > 0) {
        json_error_t je;
        json_t *o = json_loads(line, 0, &je);
        const json_t *t = json_object_get(o, "text");
        if (json_is_string(t)) {
            v = realloc(v, (*n + 1) * sizeof *v);
            v[(*n)++] = strdup(json_string_value(t));
        }
        json_decref(o);
    }
    free(line);
    fclose(f);
    return v;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void cpu_model(char *out, size_t cap)
{
    snprintf(out, cap, "unknown CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10)) {
            char *p = strchr(line, ':');
            if (p) {
                p += 1 + strspn(p + 1, " \t");
                p[strcspn(p, "\n")] = 0;
                snprintf(out, cap, "%s", p);
            }
            break;
        }
    fclose(f);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const char *dir = V4_TOKENIZER_DIR, *cases = NULL;
    double mb = 12;
    int runs = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc)
            dir = argv[++i];
        else if (!strcmp(argv[i], "--cases") && i + 1 < argc)
            cases = argv[++i];
        else if (!strcmp(argv[i], "--mb") && i + 1 < argc)
            mb = atof(argv[++i]);
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
            runs = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_tokenizer [--tokenizer DIR] [--cases FILE] [--mb N] [--runs R]\n");
            return 2;
        }
    }
    if (runs < 1 || runs > 100 || !(mb > 0 && mb <= 4096)) {
        fprintf(stderr, "bench_tokenizer: --runs in [1, 100], --mb in (0, 4096]\n");
        return 2;
    }
    char cases_path[4200];
    snprintf(cases_path, sizeof cases_path, "%s/cases.jsonl", dir);
    if (!cases)
        cases = cases_path;

    v4_error err = {0};
    v4_tokenizer *t = NULL;
    double t0 = now();
    if (v4_tok_load(dir, &t, &err)) {
        fprintf(stderr, "bench_tokenizer: %s: %s\n", err.where, err.msg);
        return 1;
    }
    double load_s = now() - t0;

    size_t ncases;
    char **texts = load_cases(cases, &ncases);
    if (!ncases)
        fprintf(stderr, "bench_tokenizer: note: no cases in %s, generated text only\n", cases);
    buf b = {0};
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    size_t target = (size_t)(mb * 1e6), ci = 0;
    while (b.n < target) {
        if (ncases) {
            puts_(&b, texts[ci++ % ncases]);
            puts_(&b, "\n");
        }
        switch (below(&seed, 4)) {
        case 0: case 1: prose(&b, &seed); break;
        case 2: code(&b, &seed); break;
        default: cjk(&b, &seed); break;
        }
    }

    double *secs = calloc((size_t)runs, sizeof *secs);
    v4_ids ids = {0};
    for (int r = 0; r < runs; r++) {
        v4_tok_encoder *e = v4_tok_encoder_new(t, &err);
        ids.n = 0;
        double s0 = now();
        int rc = e ? v4_tok_encoder_run(e, b.p, b.n, &ids, &err) : -1;
        secs[r] = now() - s0;
        v4_tok_encoder_free(e);
        if (rc) {
            fprintf(stderr, "bench_tokenizer: encode failed: %s\n", err.msg);
            return 1;
        }
    }
    char *back;
    size_t blen;
    if (v4_tok_decode(t, ids.v, ids.n, 0, &back, &blen, &err) || blen != b.n || memcmp(back, b.p, b.n)) {
        fprintf(stderr, "bench_tokenizer: decode(encode(text)) != text\n");
        return 1;
    }
    free(back);
    qsort(secs, (size_t)runs, sizeof *secs, cmp_double);
    double med = runs % 2 ? secs[runs / 2] : 0.5 * (secs[runs / 2 - 1] + secs[runs / 2]);

    char cpu[256];
    cpu_model(cpu, sizeof cpu);
    printf("| machine | text | tokens | runs | MB/s (median) | tokens/s | bytes/token | load |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    printf("| %s | %.1f MB | %zu | %d | %.1f | %.0f | %.2f | %.2f s |\n", cpu, b.n / 1e6, ids.n, runs,
           b.n / 1e6 / med, ids.n / med, (double)b.n / (double)ids.n, load_s);

    v4_ids_free(&ids);
    for (size_t i = 0; i < ncases; i++)
        free(texts[i]);
    free(texts);
    free(secs);
    free(b.p);
    v4_tok_free(t);
    return 0;
}
