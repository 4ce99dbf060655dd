/* test_batch_cont.c - the continuous-batching executor (worker/serve/exec_cont.c) on a
 * synthetic tiny model: the same 13 jobs (prompts of 1 to 40 tokens, chat messages,
 * max_tokens 1 to 40, stop strings that fire, ignore_eos, seeded temperature / top-p
 * sampling, a wrong model that fails at admission, a deadline that expires mid-run, a
 * summarize task whose generations are stepped with the others) give byte-identical results through the serial
 * executor and the continuous one at N = 1, 3, 8: rc, error code, text, token ids,
 * finish_reason, prompt tokens, routing counts and experts figures.  Fairness: a job
 * submitted while a slot is free is carried by the very next forward step, and with
 * N = 8 the run takes fewer forward steps than positions (sequences really share
 * steps).  Paged experts (a host cache of half the experts) give the same outputs,
 * hits + misses + prefetched = activations per job, the jobs' loads add up to the
 * cache's, and a second run gives every job the same figures.  A corrupted expert pack fails the jobs of the failing
 * step with expert_corrupt (no crash) and the executor stays usable.  A job's own abort
 * poll (v4_job.abort_job, the worker's lost connection) stops that job alone (rc -2, a
 * summary too, in both executors) while the others finish as before. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/expert_block.h"
#include "cache/expert_provider.h"
#include "config/model_config.h"
#include "testutil.h"
#include "worker/serve/executor.h"
#include "worker/serve/generate.h"

#define NJ 13

typedef struct res {
    int rc, code;
    char *text;
    size_t text_len;
    int32_t *tokens;
    int n_tokens, prompt_tokens;
    const char *finish;
    uint32_t *counts;
    size_t n_counts;
    long long hits, misses, prefetched, bytes;
    long forwarded;
    long submit_step, first_step;
} res;

static char lines[NJ][512];
static int deadline_job = -1, summ_job = -1;
static int polls[NJ];   /* abort_soon: polls per job */

static void res_free(res *r)
{
    for (int i = 0; i < NJ; i++) {
        free(r[i].text);
        free(r[i].tokens);
        free(r[i].counts);
    }
    memset(r, 0, sizeof(res) * NJ);
}

static v4_job *make_job(int i)
{
    v4_job *j = calloc(1, sizeof *j);
    v4_task_error e = {0};
    if (v4_task_parse(lines[i], strlen(lines[i]), 1 << 20, &j->task, &e))
        fprintf(stderr, "line %d invalid: %s\n", i, e.message);
    j->ud = &lines[i];
    return j;
}

static void take(res *r, v4_job *j)
{
    int i = (int)((char(*)[512])j->ud - lines);
    res *o = &r[i];
    o->rc = j->rc;
    o->code = j->rc ? (int)j->err.code : 0;
    o->text = j->out.text;
    o->text_len = j->out.text_len;
    o->tokens = j->out.tokens;
    o->n_tokens = j->out.n_tokens;
    o->prompt_tokens = j->out.prompt_tokens;
    o->finish = j->out.finish_reason;
    o->counts = j->out.expert_counts;
    o->n_counts = (size_t)j->out.expert_layers * (size_t)j->out.expert_n;
    o->hits = j->out.expert_hits;
    o->misses = j->out.expert_misses;
    o->prefetched = j->out.expert_prefetched;
    o->bytes = j->out.expert_bytes_loaded;
    o->forwarded = j->out.forwarded;
    o->submit_step = j->submit_step;
    o->first_step = j->first_step;
    j->out.text = NULL;
    j->out.tokens = NULL;
    j->out.expert_counts = NULL;
    v4_job_free(j);
    free(j);
}

/* A job's own abort poll: stops it at its 4th poll (after a few forward steps). */
static int abort_soon(const v4_job *j)
{
    int i = (int)((char(*)[512])j->ud - lines);
    return ++polls[i] >= 4;
}

/* Jobs 0, 2, 8 and the summary at once; 8 and the summary abort themselves. */
static void run_abort(v4_exec *x, res *r, const char *what)
{
    const int ids[4] = {0, 2, 8, summ_job};
    v4_job *fin[NJ];
    memset(polls, 0, sizeof polls);
    for (int k = 0; k < 4; k++) {
        v4_job *j = make_job(ids[k]);
        j->abort_job = ids[k] == 8 || ids[k] == summ_job ? abort_soon : NULL;
        if (x->ops->submit(x, j)) {   /* the serial executor: run it first */
            while (x->ops->in_flight(x) > 0)
                for (int n = x->ops->step(x, fin, NJ), q = 0; q < n; q++)
                    take(r, fin[q]);
            CHECK(x->ops->submit(x, j) == 0, "%s: submit job %d", what, ids[k]);
        }
    }
    while (x->ops->in_flight(x) > 0)
        for (int n = x->ops->step(x, fin, NJ), q = 0; q < n; q++)
            take(r, fin[q]);
    CHECK(r[8].rc == -2 && r[summ_job].rc == -2, "%s: the jobs that abort themselves: rc %d and %d, want -2", what,
          r[8].rc, r[summ_job].rc);
    CHECK(polls[8] == 4 && polls[summ_job] == 4, "%s: polled until they aborted, no further (%d, %d polls)", what,
          polls[8], polls[summ_job]);
}

/* The driver's pattern (cmd_batch.c): submit while a slot is free, step until one
 * frees, drain.  Returns the forward steps run; *fair_bad counts jobs submitted into a
 * free slot that the next step did not carry. */
static long run_all(v4_exec *x, res *r, int *fair_bad, int *queued)
{
    v4_job *fin[NJ];
    *fair_bad = *queued = 0;
    for (int i = 0; i < NJ; i++) {
        v4_job *j = make_job(i);
        if (x->ops->submit(x, j)) {
            CHECK(0, "submit refused with a free slot (job %d)", i);
            v4_job_free(j);
            free(j);
            continue;
        }
        *queued += j->submit_step > 0;
        while (x->ops->in_flight(x) >= x->ops->capacity(x)) {
            int n = x->ops->step(x, fin, NJ);
            for (int k = 0; k < n; k++)
                take(r, fin[k]);
        }
    }
    while (x->ops->in_flight(x) > 0) {
        int n = x->ops->step(x, fin, NJ);
        for (int k = 0; k < n; k++)
            take(r, fin[k]);
    }
    for (int i = 0; i < NJ; i++)
        if (r[i].rc == 0 && r[i].first_step != r[i].submit_step)
            (*fair_bad)++;
    return v4_exec_steps(x);
}

static void compare(const char *what, const res *a, const res *b, int counts_too)
{
    for (int i = 0; i < NJ; i++) {
        CHECK(a[i].rc == b[i].rc && a[i].code == b[i].code, "%s job %d: rc %d/%d code %d/%d", what, i, a[i].rc,
              b[i].rc, a[i].code, b[i].code);
        if (i == deadline_job || a[i].rc || b[i].rc)
            continue;
        CHECK(a[i].text_len == b[i].text_len && !memcmp(a[i].text, b[i].text, a[i].text_len), "%s job %d: text '%s' vs '%s'",
              what, i, a[i].text, b[i].text);
        CHECK(a[i].n_tokens == b[i].n_tokens &&
                  !memcmp(a[i].tokens, b[i].tokens, sizeof(int32_t) * (size_t)a[i].n_tokens),
              "%s job %d: tokens (%d vs %d)", what, i, a[i].n_tokens, b[i].n_tokens);
        CHECK(!strcmp(a[i].finish, b[i].finish) && a[i].prompt_tokens == b[i].prompt_tokens,
              "%s job %d: finish %s/%s prompt %d/%d", what, i, a[i].finish, b[i].finish, a[i].prompt_tokens,
              b[i].prompt_tokens);
        CHECK(a[i].n_counts == b[i].n_counts && a[i].forwarded == b[i].forwarded &&
                  !memcmp(a[i].counts, b[i].counts, sizeof(uint32_t) * a[i].n_counts),
              "%s job %d: routing counts differ", what, i);
        if (counts_too)
            CHECK(a[i].hits == b[i].hits && a[i].misses == b[i].misses, "%s job %d: hits %lld/%lld misses %lld/%lld",
                  what, i, a[i].hits, b[i].hits, a[i].misses, b[i].misses);
    }
}

int main(void)
{
    char dir[4200];
    if (t_mkmodel_tiny("batch_cont_model", 11, dir, sizeof dir))
        return 1;
    v4_task_error e = {0};
    v4_runner_opts ro = {.threads = 2, .max_batch = 8};
    v4_runner *r = v4_runner_open(dir, "tiny", &ro, &e);
    CHECK(r != NULL, "runner: %s: %s", e.where, e.message);
    if (!r)
        TEST_DONE();
    const v4_config *c = v4_runner_config(r);
    long ctx = v4_runner_context(r);

    /* the jobs; two of them get stop strings cut from a first greedy run's text */
    char ids40[400] = "";
    for (int k = 0, at = 0; k < 40; k++)
        at += snprintf(ids40 + at, sizeof ids40 - (size_t)at, "%s%d", k ? "," : "", (k * 7 + 3) % 50);
    int n = 0;
    snprintf(lines[n++], 512, "{\"id\":\"g1\",\"input_ids\":[5],\"max_tokens\":24,\"temperature\":0}");
    snprintf(lines[n++], 512, "{\"id\":\"g40\",\"input_ids\":[%s],\"max_tokens\":12,\"temperature\":0}", ids40);
    snprintf(lines[n++], 512, "{\"id\":\"p1\",\"prompt\":\"Tell me about queues.\",\"max_tokens\":30,\"temperature\":0}");
    snprintf(lines[n++], 512, "{\"id\":\"s1\",\"prompt\":\"Tell me about queues.\",\"max_tokens\":30,\"temperature\":0,"
                              "\"stop\":[\"@@STOP1@@\"]}");
    snprintf(lines[n++], 512, "{\"id\":\"t1\",\"prompt\":\"Why batch?\",\"max_tokens\":20,\"temperature\":0.8,"
                              "\"top_p\":0.9,\"seed\":42}");
    snprintf(lines[n++], 512, "{\"id\":\"t2\",\"prompt\":\"Why batch?\",\"max_tokens\":20,\"temperature\":1.2,"
                              "\"top_k\":5,\"seed\":7}");
    snprintf(lines[n++], 512, "{\"id\":\"m1\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                              "{\"role\":\"user\",\"content\":\"Hello there, a longer question about workers?\"}],"
                              "\"max_tokens\":16,\"temperature\":0}");
    snprintf(lines[n++], 512, "{\"id\":\"z0\",\"input_ids\":[1,2,3],\"max_tokens\":1}");
    snprintf(lines[n++], 512, "{\"id\":\"x1\",\"input_ids\":[0,2,10,3,5],\"max_tokens\":40,\"temperature\":0,"
                              "\"ignore_eos\":true}");
    snprintf(lines[n++], 512, "{\"id\":\"bad\",\"model\":\"gpt-x\",\"prompt\":\"hi\"}");
    deadline_job = n;
    snprintf(lines[n++], 512, "{\"id\":\"dl\",\"input_ids\":[4,4,4],\"max_tokens\":%ld,\"deadline_ms\":1,"
                              "\"temperature\":0,\"ignore_eos\":true}", ctx - 3);
    summ_job = n;
    snprintf(lines[n++], 512, "{\"id\":\"k1\",\"type\":\"summarize\",\"document\":\"One short document. It has "
                              "two sentences.\",\"max_summary_tokens\":6,\"temperature\":0}");
    snprintf(lines[n++], 512, "{\"id\":\"s2\",\"input_ids\":[%s],\"max_tokens\":30,\"temperature\":0,"
                              "\"stop\":[\"@@STOP2@@\"]}", ids40);
    if (n != NJ) {
        fprintf(stderr, "%d jobs, want %d\n", n, NJ);
        return 1;
    }
    res serial[NJ] = {0}, cont[NJ] = {0};
    int fair_bad, queued;
    /* pass 0: fill the stop strings from the greedy texts of p1 and g40 (s2 = g40 with 30 tokens) */
    v4_exec *x = v4_exec_serial(r, NULL, NULL);
    run_all(x, serial, &fair_bad, &queued);
    x->ops->destroy(x);
    const int stop_src[2] = {2, 1}, stop_dst[2] = {3, 12};
    for (int s = 0; s < 2; s++) {
        const res *src = &serial[stop_src[s]];
        CHECK(src->rc == 0 && src->text_len >= 6, "job %d has text for a stop string (%zu bytes)", stop_src[s],
              src->text_len);
        if (src->rc || src->text_len < 6)
            TEST_DONE();
        char stop[64] = "", esc[256] = "";
        size_t from = src->text_len / 2, len = src->text_len - from < 3 ? src->text_len - from : 3;
        memcpy(stop, src->text + from, len);
        for (size_t k = 0, at = 0; k < len; k++)
            at += (size_t)snprintf(esc + at, sizeof esc - at, "\\u%04x", (unsigned char)stop[k]);
        char *p = strstr(lines[stop_dst[s]], s ? "@@STOP2@@" : "@@STOP1@@");
        char tail[512];
        snprintf(tail, sizeof tail, "%s", p + 9);
        snprintf(p, sizeof lines[0] - (size_t)(p - lines[stop_dst[s]]), "%s%s", esc, tail);
    }
    res_free(serial);

    x = v4_exec_serial(r, NULL, NULL);
    run_all(x, serial, &fair_bad, &queued);
    x->ops->destroy(x);
    CHECK(serial[3].rc == 0 && !strcmp(serial[3].finish, "stop") && serial[3].text_len < serial[2].text_len &&
              !memcmp(serial[3].text, serial[2].text, serial[3].text_len), "s1 stopped on its stop string: '%s'",
          serial[3].text);
    CHECK(serial[12].rc == 0 && !strcmp(serial[12].finish, "stop"), "s2 stopped on its stop string");
    CHECK(serial[9].rc == -1 && serial[9].code == V4_TASK_MODEL_NOT_AVAILABLE, "bad model fails");
    CHECK(serial[deadline_job].rc == -1 && serial[deadline_job].code == V4_TASK_DEADLINE_EXCEEDED,
          "deadline job: rc %d code %d", serial[deadline_job].rc, serial[deadline_job].code);
    CHECK(serial[7].rc == 0 && serial[7].n_tokens == 1, "max_tokens 1");
    CHECK(serial[8].n_tokens == 40 && !strcmp(serial[8].finish, "length"), "ignore_eos runs to max_tokens");
    CHECK(serial[4].n_tokens > 0 && serial[5].n_tokens > 0, "sampled jobs produced tokens");

    const int Ns[3] = {1, 3, 8};
    long steps8 = 0, positions8 = 0;
    for (int t = 0; t < 3; t++) {
        char err[256], what[32];
        x = v4_exec_continuous(r, Ns[t], NULL, NULL, err, sizeof err);
        CHECK(x != NULL, "continuous N=%d: %s", Ns[t], err);
        if (!x)
            continue;
        long steps = run_all(x, cont, &fair_bad, &queued), positions = 0;
        x->ops->destroy(x);
        for (int k = 0; k < NJ; k++)   /* positions the executor forwarded (the deadline and summarize jobs' too) */
            positions += cont[k].forwarded;
        snprintf(what, sizeof what, "N=%d", Ns[t]);
        compare(what, serial, cont, 1);
        CHECK(fair_bad == 0, "%s: %d jobs waited more than one step after a free slot", what, fair_bad);
        CHECK(queued > 0, "%s: some jobs were submitted after earlier steps (%d)", what, queued);
        CHECK(cont[summ_job].rc == 0 && cont[summ_job].forwarded > 0, "%s: the summarize job ran %ld positions",
              what, cont[summ_job].forwarded);
        if (Ns[t] == 1)   /* every position, the summary's too, is a row of an executor step; prompts
                           * go in chunks of up to V4_GEN_CHUNK rows, so there are fewer steps */
            CHECK(steps < positions && steps * V4_GEN_CHUNK >= positions,
                  "N=1: prefill chunks: %ld steps for %ld positions", steps, positions);
        if (Ns[t] == 8) {
            steps8 = steps;
            positions8 = positions;
        }
        res_free(cont);
    }
    CHECK(steps8 > 0 && steps8 < positions8 / 2, "N=8 shares steps: %ld steps for %ld positions", steps8, positions8);
    char err[256];
    CHECK(v4_exec_continuous(r, 9, NULL, NULL, err, sizeof err) == NULL && strstr(err, "1 to 8"),
          "N above the runner's max_batch refused: %s", err);

    /* another prefill chunk (40 positions per step instead of V4_GEN_CHUNK): the same
     * results through both executors */
    {
        v4_runner_opts wo = ro;
        wo.prefill_chunk = 40;
        v4_runner *rw = v4_runner_open(dir, "tiny", &wo, &e);
        CHECK(rw != NULL, "runner with a chunk of 40: %s", e.message);
        for (int t = 0; rw && t < 2; t++) {
            const char *what = t ? "chunk 40, continuous N=3" : "chunk 40, serial";
            x = t ? v4_exec_continuous(rw, 3, NULL, NULL, err, sizeof err) : v4_exec_serial(rw, NULL, NULL);
            CHECK(x != NULL, "%s: %s", what, err);
            if (!x)
                continue;
            run_all(x, cont, &fair_bad, &queued);
            x->ops->destroy(x);
            compare(what, serial, cont, 1);
            res_free(cont);
        }
        v4_runner_free(rw);
    }

    /* a job's own abort: that job alone stops, the others are unchanged */
    for (int t = 0; t < 2; t++) {
        const char *what = t ? "abort_job, continuous N=3" : "abort_job, serial";
        x = t ? v4_exec_continuous(r, 3, NULL, NULL, err, sizeof err) : v4_exec_serial(r, NULL, NULL);
        CHECK(x != NULL, "%s: %s", what, err);
        if (!x)
            continue;
        run_abort(x, cont, what);
        x->ops->destroy(x);
        for (int i = 0; i <= 2; i += 2) {   /* jobs 0 and 2 */
            CHECK(cont[i].rc == 0 && cont[i].n_tokens == serial[i].n_tokens && cont[i].text_len == serial[i].text_len &&
                      !memcmp(cont[i].text, serial[i].text, serial[i].text_len),
                  "%s: job %d unchanged by the others' abort (rc %d, %d tokens, want %d)", what, i, cont[i].rc,
                  cont[i].n_tokens, serial[i].n_tokens);
        }
        res_free(cont);
    }

    /* paged experts: same outputs; hits + misses = activations */
    v4_xblock_layout lo;
    v4_xblock_layout_of(c, &lo);
    long long all = (long long)c->n_layers * c->n_routed_experts * (long long)lo.bytes;
    v4_runner_opts po = {.host_cache_bytes = all / 2, .policy = "lru", .io_threads = 2, .threads = 2, .max_batch = 8};
    /* pass 0 as the others; passes 1 and 2 without the 1 ms deadline (whether it runs
     * at all depends on timing, and with it the steps the other jobs share) */
    long long figs1[NJ][3];
    char dl_line[512];
    memcpy(dl_line, lines[deadline_job], sizeof dl_line);
    for (int pass = 0; pass < 3; pass++) {
        if (pass == 1)
            snprintf(lines[deadline_job], sizeof lines[0], "{\"id\":\"dl\",\"input_ids\":[4,4,4],\"max_tokens\":20,"
                                                           "\"temperature\":0,\"ignore_eos\":true}");
        v4_runner *rp = v4_runner_open(dir, "tiny", &po, &e);
        CHECK(rp != NULL, "paged runner: %s", e.message);
        if (!rp)
            break;
        x = v4_exec_continuous(rp, 8, NULL, NULL, err, sizeof err);
        run_all(x, cont, &fair_bad, &queued);
        x->ops->destroy(x);
        if (pass == 0)
            compare("paged N=8", serial, cont, 0);
        long long miss = 0, pre = 0;
        for (int i = 0; i < NJ; i++) {
            long long act = (long long)cont[i].forwarded * c->n_layers * c->n_act_experts;
            CHECK(cont[i].hits + cont[i].misses + cont[i].prefetched == act &&
                      cont[i].bytes == (cont[i].misses + cont[i].prefetched) * (long long)lo.bytes,
                  "paged job %d: hits %lld + misses %lld + prefetched %lld = %lld activations, %lld bytes", i,
                  cont[i].hits, cont[i].misses, cont[i].prefetched, act, cont[i].bytes);
            miss += cont[i].misses;
            pre += cont[i].prefetched;
            long long f[3] = {cont[i].hits, cont[i].misses, cont[i].prefetched};
            if (pass == 2)
                CHECK(!memcmp(f, figs1[i], sizeof f), "paged job %d again: %lld/%lld/%lld, first %lld/%lld/%lld", i,
                      f[0], f[1], f[2], figs1[i][0], figs1[i][1], figs1[i][2]);
            memcpy(figs1[i], f, sizeof f);
        }
        v4_xcache_stats st;
        v4_xprov_stats(v4_runner_experts(rp), &st);
        CHECK(miss > 0 && pre > 0 && miss == (long long)st.misses && pre == (long long)st.prefetch_hits,
              "paged: the jobs were charged every load: misses %lld (cache %llu), prefetched %lld (cache %llu)", miss,
              (unsigned long long)st.misses, pre, (unsigned long long)st.prefetch_hits);
        res_free(cont);
        v4_runner_free(rp);
    }
    memcpy(lines[deadline_job], dl_line, sizeof dl_line);

    /* a corrupted pack: the failing steps fail their jobs with expert_corrupt */
    char pack[4300], cmd2[16000];
    snprintf(pack, sizeof pack, "%s/batch_cont_pack", t_env("V4_TMP", "/tmp"));
    snprintf(cmd2, sizeof cmd2, "rm -rf '%s' && '%s' pack --model '%s' --out '%s' >/dev/null 2>&1", pack,
             t_env("V4_BIN", "build/v4fleet"), dir, pack);
    CHECK(system(cmd2) == 0, "pack: %s", cmd2);
    snprintf(cmd2, sizeof cmd2, "%s/experts.bin", pack);
    FILE *pf = fopen(cmd2, "r+b");
    for (int k = 0; pf && k < c->n_routed_experts; k++) {
        long off = (long)((size_t)(c->n_routed_experts + k) * lo.bytes + 64);   /* layer 1, expert k */
        fseek(pf, off, SEEK_SET);
        int ch = fgetc(pf);
        fseek(pf, off, SEEK_SET);
        fputc(ch ^ 0x10, pf);
    }
    if (pf)
        fclose(pf);
    v4_runner_opts co = {.pack_dir = pack, .host_cache_bytes = all, .policy = "lru", .io_threads = 2, .threads = 2,
                         .max_batch = 8};
    v4_runner *rp = v4_runner_open(dir, "tiny", &co, &e);
    CHECK(rp != NULL, "runner on the corrupted pack: %s", e.message);
    if (rp) {
        x = v4_exec_continuous(rp, 4, NULL, NULL, err, sizeof err);
        run_all(x, cont, &fair_bad, &queued);
        x->ops->destroy(x);
        for (int i = 0; i < NJ; i++)
            if (i != 9 && i != deadline_job)
                CHECK(cont[i].rc == -1 && cont[i].code == V4_TASK_EXPERT_CORRUPT, "corrupt job %d: rc %d code %d", i,
                      cont[i].rc, cont[i].code);
        res_free(cont);
        v4_runner_free(rp);
    }
    res_free(serial);
    v4_runner_free(r);
    TEST_DONE();
}
