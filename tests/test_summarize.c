/* test_summarize.c - the summarize task type (worker/serve/summarize.c) on a synthetic tiny
 * model with a 256-token context: the split helpers (break kinds, cuts at paragraph
 * and sentence breaks, overlap, no token lost, UTF-8 character boundaries, token
 * offsets), a short document (one pass: 1 chunk, 1 level), a document many times the
 * context (chunks > 1, levels >= 2, every generation fit: the task succeeds, the
 * usage and expert figures add up, the same greedy result twice), a deeper tree
 * (ignore_eos: full-length summaries force a third level), max_summary_tokens too
 * large for the context (context_length_exceeded), an unknown model, a deadline that
 * passes mid-tree and the abort hook (-2).  All through v4_task_execute, the dispatch
 * the worker and the batch executor use.  The model's weights are random: the
 * summaries are gibberish; structure is tested, not quality. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "worker/serve/summarize.h"
#include "worker/serve/task_exec.h"
#include "worker/serve/task_packet.h"
#include "worker/tokenizer/tokenizer.h"

static const char *const WORDS[] = {"river", "mountain", "engine", "quiet", "market", "signal", "winter",
                                    "garden", "copper", "lantern", "harbor", "ledger", "meadow", "orbit",
                                    "pilot", "canyon", "velvet", "timber", "beacon", "summit"};

/* Deterministic prose: sentences of 5..10 words, paragraphs of 3 sentences. */
static char *make_doc(int sentences)
{
    size_t cap = (size_t)sentences * 120 + 16, n = 0;
    char *d = malloc(cap);
    unsigned x = 12345;
    for (int s = 0; s < sentences; s++) {
        x = x * 1103515245u + 12345u;
        int words = 5 + (int)((x >> 16) % 6);
        for (int w = 0; w < words; w++) {
            x = x * 1103515245u + 12345u;
            const char *wd = WORDS[(x >> 16) % 20];
            n += (size_t)snprintf(d + n, cap - n, "%s%c%s", w ? " " : "", w ? wd[0] : (char)(wd[0] - 32), wd + 1);
        }
        n += (size_t)snprintf(d + n, cap - n, "%s", s % 3 == 2 ? ".\n\n" : s % 2 ? "! " : ". ");
    }
    return d;
}

static int run(v4_runner *r, const char *json, double deadline_ms, int (*abort_fn)(void *), v4_run_output *out,
               v4_task_error *e)
{
    v4_task t;
    memset(e, 0, sizeof *e);
    if (v4_task_parse(json, strlen(json), 1 << 24, &t, e)) {
        fprintf(stderr, "parse: %s\n", e->message);
        memset(out, 0, sizeof *out);
        return 99;
    }
    int rc = v4_task_execute(r, &t, deadline_ms, abort_fn, NULL, out, e);
    v4_task_free(&t);
    return rc;
}

static char *summarize_json(const char *id, const char *doc, const char *extra)
{
    json_t *o = json_pack("{s:s, s:s, s:s, s:f}", "id", id, "type", "summarize", "document", doc, "temperature", 0.0);
    if (extra) {
        json_t *x = json_loads(extra, 0, NULL);
        json_object_update(o, x);
        json_decref(x);
    }
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

static int abort_now(void *ud)
{
    (void)ud;
    return 1;
}

static void split_tests(const v4_tokenizer *tok)
{
    /* break kinds */
    const char *s1 = "One two. Three\n\nFour 3.14 five!\nSix";
    CHECK(v4_summ_break_kind(s1, strlen(s1), 9) == 1, "after '. ' = sentence");
    CHECK(v4_summ_break_kind(s1, strlen(s1), 8) == 1, "right after '.' before a space = sentence");
    CHECK(v4_summ_break_kind(s1, strlen(s1), 16) == 2, "after a blank line = paragraph");
    CHECK(v4_summ_break_kind(s1, strlen(s1), 4) == 0, "after 'One ' = none");
    CHECK(v4_summ_break_kind(s1, strlen(s1), 22) == 0, "inside 3.14 = none");
    CHECK(v4_summ_break_kind(s1, strlen(s1), 32) == 1, "after '!\\n' = sentence/line");
    CHECK(v4_summ_break_kind(s1, strlen(s1), 0) == 0, "start = none");

    /* a real document through the tokenizer */
    char *doc = make_doc(60);
    size_t len = strlen(doc), *offs = NULL;
    v4_ids ids = {0};
    v4_error err = {0};
    CHECK(v4_tok_encode(tok, doc, len, &ids, &err) == 0, "encode: %s", err.msg);
    CHECK(v4_summ_offsets(tok, doc, len, ids.v, ids.n, &offs, &err) == 0, "offsets: %s", err.msg);
    if (!offs)
        goto done;
    int offs_ok = offs[0] == 0 && offs[ids.n] == len;
    for (size_t i = 0; i < ids.n; i++) {
        size_t bl;
        const char *b = v4_tok_bytes(tok, ids.v[i], &bl);
        offs_ok &= offs[i + 1] == offs[i] + bl && !memcmp(doc + offs[i], b, bl);
    }
    CHECK(offs_ok, "token offsets spell the document");

    size_t budget = 100, overlap = 10, k = 0;
    v4_summ_span *sp = NULL;
    CHECK(v4_summ_split(doc, offs, ids.n, budget, overlap, &sp, &k) == 0 && k > 3, "split into %zu chunks", k);
    int cover = k && sp[0].begin == 0 && sp[k - 1].end == ids.n, sizes = 1, overl = 1, at_break = 1, paragraphs = 0;
    for (size_t i = 0; i < k; i++) {
        sizes &= sp[i].end > sp[i].begin && sp[i].end - sp[i].begin <= budget;
        if (i + 1 < k) {
            cover &= sp[i + 1].begin <= sp[i].end && sp[i + 1].begin > sp[i].begin;
            overl &= sp[i].end - sp[i + 1].begin >= overlap && sp[i].end - sp[i + 1].begin <= overlap + 3;
            int kind = v4_summ_break_kind(doc, len, offs[sp[i].end]);
            at_break &= kind >= 1;
            paragraphs += kind == 2;
        }
    }
    CHECK(cover, "chunks cover every token in order");
    CHECK(sizes, "every chunk has 1..budget tokens");
    CHECK(overl, "consecutive chunks overlap by ~%zu tokens", overlap);
    CHECK(at_break, "every cut is at a sentence or paragraph break");
    CHECK(paragraphs >= (int)(k - 1) / 2, "most cuts at paragraph breaks (%d of %zu)", paragraphs, k - 1);
    free(sp);

    /* the whole text fits: one chunk */
    CHECK(v4_summ_split(doc, offs, ids.n, ids.n, 5, &sp, &k) == 0 && k == 1 && sp[0].begin == 0 && sp[0].end == ids.n,
          "budget >= n: one chunk");
    free(sp);
    CHECK(v4_summ_split(doc, offs, ids.n, 1, 0, &sp, &k) == -1, "budget 1 refused");
    free(offs);
    offs = NULL;
    v4_ids_free(&ids);

    /* no breaks at all: cuts at the budget; multi-byte characters never cut */
    char nob[3000];
    size_t nl = 0;
    for (int i = 0; i < 900; i++)
        nl += (size_t)snprintf(nob + nl, sizeof nob - nl, "%s", i % 7 == 3 ? "\xc3\xa9" : i % 11 == 5 ? "\xe4\xb8\xad" : "q");
    CHECK(v4_tok_encode(tok, nob, nl, &ids, &err) == 0 && v4_summ_offsets(tok, nob, nl, ids.v, ids.n, &offs, &err) == 0,
          "encode/offsets without breaks: %s", err.msg);
    if (!offs)
        goto done;
    CHECK(v4_summ_split(nob, offs, ids.n, 40, 4, &sp, &k) == 0 && k > 3, "split without breaks: %zu", k);
    int utf8 = 1, full = 1;
    for (size_t i = 0; i < k; i++) {
        utf8 &= ((unsigned char)nob[offs[sp[i].begin]] & 0xC0) != 0x80;
        utf8 &= sp[i].end == ids.n || ((unsigned char)nob[offs[sp[i].end]] & 0xC0) != 0x80;
        if (i + 1 < k)
            full &= sp[i].end - sp[i].begin >= 37;   /* cut at the limit, less at most a character's tokens */
    }
    CHECK(utf8, "chunks start and end on UTF-8 character boundaries");
    CHECK(full, "without breaks the chunks are (nearly) full");
    free(sp);
done:
    free(offs);
    v4_ids_free(&ids);
    free(doc);
}

int main(void)
{
    char dir[4200];
    if (t_mkmodel_tiny("summarize_model", 11, dir, sizeof dir))
        return 1;
    v4_tokenizer *tok = NULL;
    v4_error err = {0};
    CHECK(v4_tok_load(dir, &tok, &err) == 0, "tokenizer: %s", err.msg);
    if (tok)
        split_tests(tok);

    v4_task_error e = {0};
    v4_runner_opts ro = {.threads = 1, .max_batch = 1, .max_context = 256};
    v4_runner *r = v4_runner_open(dir, "flash", &ro, &e);
    CHECK(r != NULL && v4_runner_context(r) == 256, "runner: %s", e.message);
    if (!r || !tok) {
        v4_tok_free(tok);
        v4_runner_free(r);
        TEST_DONE();
    }
    double far = 1e300;
    v4_run_output o, o2;

    /* short document: one pass */
    char *js = summarize_json("short", "The river met the sea. Boats came home.", "{\"max_summary_tokens\":8}");
    CHECK(run(r, js, far, NULL, &o, &e) == 0, "short: %s", e.message);
    CHECK(o.chunks == 1 && o.levels == 1, "short: chunks %d levels %d", o.chunks, o.levels);
    CHECK(o.text && o.n_tokens >= 1 && o.n_tokens <= 8, "short: %d tokens", o.n_tokens);
    CHECK(o.prompt_tokens > 10 && o.prompt_tokens + 8 <= 256, "short: prompt %d", o.prompt_tokens);
    v4_run_output_free(&o);
    free(js);

    /* long document: ~4x the context (kept small: this test also runs under ASan) */
    char *doc = make_doc(45);
    v4_ids ids = {0};
    v4_tok_encode(tok, doc, strlen(doc), &ids, &err);
    size_t doc_tokens = ids.n;
    v4_ids_free(&ids);
    CHECK(doc_tokens > 3 * 256, "long document: %zu tokens", doc_tokens);
    js = summarize_json("long", doc, "{\"max_summary_tokens\":12}");
    double t0 = v4_now_ms();
    CHECK(run(r, js, far, NULL, &o, &e) == 0, "long: %s: %s", e.where, e.message);
    double ms = v4_now_ms() - t0;
    CHECK(o.chunks > 1 && o.levels >= 2, "long: chunks %d levels %d", o.chunks, o.levels);
    CHECK(o.chunks >= (int)(doc_tokens / 256), "long: %d chunks for %zu tokens in a 256 context", o.chunks, doc_tokens);
    CHECK(o.text && o.n_tokens >= 1 && o.n_tokens <= 12, "long: final summary %d tokens", o.n_tokens);
    CHECK(o.prompt_tokens > (int)doc_tokens, "long: prompt tokens %d summed over generations > document %zu",
          o.prompt_tokens, doc_tokens);
    long long sum = 0;
    for (int i = 0; o.expert_counts && i < o.expert_layers * o.expert_n; i++)
        sum += o.expert_counts[i];
    CHECK(o.expert_counts && sum == o.expert_hits && o.expert_hits > 0, "long: counts %lld == hits %lld", sum,
          o.expert_hits);
    CHECK(o.forwarded > (long)doc_tokens, "long: forwarded %ld", o.forwarded);
    fprintf(stderr, "long: %zu tokens -> chunks %d levels %d, %d prompt tokens, %.0f ms\n", doc_tokens, o.chunks,
            o.levels, o.prompt_tokens, ms);
    CHECK(run(r, js, far, NULL, &o2, &e) == 0, "long again: %s", e.message);
    CHECK(o2.chunks == o.chunks && o2.levels == o.levels && o2.n_tokens == o.n_tokens && o2.text && o.text &&
              !strcmp(o2.text, o.text) && !memcmp(o2.tokens, o.tokens, sizeof(int32_t) * (size_t)o.n_tokens) &&
              o2.prompt_tokens == o.prompt_tokens,
          "long: deterministic (greedy)");
    v4_run_output_free(&o2);
    free(js);

    /* ignore_eos: every summary is full length, so the tree gets deeper */
    js = summarize_json("deep", doc, "{\"max_summary_tokens\":32, \"ignore_eos\":true, \"instructions\":\"Be brief.\"}");
    CHECK(run(r, js, far, NULL, &o2, &e) == 0, "deep: %s: %s", e.where, e.message);
    CHECK(o2.levels >= 3 && o2.chunks >= o.chunks && o2.n_tokens == 32, "deep: chunks %d levels %d tokens %d",
          o2.chunks, o2.levels, o2.n_tokens);
    fprintf(stderr, "deep: chunks %d levels %d\n", o2.chunks, o2.levels);
    v4_run_output_free(&o2);
    v4_run_output_free(&o);
    free(js);

    /* max_summary_tokens leaves no room for the document */
    js = summarize_json("big", doc, "{\"max_summary_tokens\":240}");
    CHECK(run(r, js, far, NULL, &o, &e) == -1 && e.code == V4_TASK_CONTEXT_LENGTH_EXCEEDED &&
              !strcmp(e.where, "max_summary_tokens"),
          "max_summary_tokens 240 of 256: %s (%s)", e.message, e.where);
    v4_run_output_free(&o);
    free(js);
    /* summaries as long as their chunks: no progress -> fails rather than looping */
    char *doc2 = make_doc(15);   /* ~2 contexts: the failing level is short */
    js = summarize_json("noshrink", doc2, "{\"max_summary_tokens\":110, \"ignore_eos\":true}");
    free(doc2);
    CHECK(run(r, js, far, NULL, &o, &e) == -1 && e.code == V4_TASK_CONTEXT_LENGTH_EXCEEDED &&
              strstr(e.message, "not shorter"),
          "non-shrinking level: %s", e.message);
    v4_run_output_free(&o);
    free(js);

    /* model, deadline, abort */
    js = summarize_json("m", doc, "{\"max_summary_tokens\":8, \"model\":\"other\"}");
    CHECK(run(r, js, far, NULL, &o, &e) == -1 && e.code == V4_TASK_MODEL_NOT_AVAILABLE, "unknown model");
    v4_run_output_free(&o);
    free(js);
    js = summarize_json("d", doc, "{\"max_summary_tokens\":12}");
    t0 = v4_now_ms();
    CHECK(run(r, js, t0 + ms / 3, NULL, &o, &e) == -1 && e.code == V4_TASK_DEADLINE_EXCEEDED,
          "deadline mid-tree: %s", e.message);
    CHECK(v4_now_ms() - t0 < ms / 3 + 2000, "stopped soon after the deadline");
    CHECK(o.text == NULL && o.expert_hits > 0, "deadline: no text, the work done is counted (%lld hits)",
          o.expert_hits);
    v4_run_output_free(&o);
    CHECK(run(r, js, far, abort_now, &o, &e) == -2 && o.text == NULL, "abort -> -2");
    v4_run_output_free(&o);
    free(js);

    free(doc);
    v4_runner_free(r);
    v4_tok_free(tok);
    TEST_DONE();
}
