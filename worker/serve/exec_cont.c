/* exec_cont.c - the continuous-batching executor (see executor.h).
 *
 * Design: n slots.  A slot is free, waiting (a prepared generation job not yet admitted),
 * active (an admitted one: v4_run_job with its generation state), sync (a task of a kind without a state machine, run whole
 * inside the next step; none today) or done (waiting to be handed back).  A summarize
 * task holds one slot for its whole tree: its state machine (summarize.h) hands out one
 * generation at a time, which is stepped like any other active job; when it retires,
 * its output goes back to the summarizer and the next generation (next chunk, next
 * level, final pass) is prepared in the same slot at once, so the other tasks never
 * wait for a summary.  A task with n > 1 answers (choices.h) holds its slot the same way:
 * choice 0 runs as the task, its sequence and last prompt logits are kept (the fork's
 * snapshot) just before the row that ends its prompt is accepted, and each later choice
 * is prepared in the slot when the previous one retires (forked: no prefill rows).  step(): run the sync jobs; poll every
 * waiting and active job's cancel hook (deadline, abort); admit waiting jobs by the
 * step implementation's memory figures (v4_ctx_admit, admit.h: run, wait for another
 * step - never failed while others' memory will free - or fail when it cannot fit
 * even alone, error context_length_exceeded naming the bytes); gather one input row per active job
 * (prompt position or last sample), and for jobs still in their prompt a chunk of
 * prompt positions while the step has spare rows (prefill chunks: one weight pass for
 * many prompt tokens), into one v4_step.  Admission's figures can be wrong
 * (fragmentation, other processes on the device): when the step fails because one new
 * sequence got no memory (v4_ctx_step_fault: the step implementation names its row;
 * nothing ran), that job alone leaves the step, its sequence released - it waits again
 * while others are active (counted in figs.oom_retries), or fails as admission's "cannot
 * fit even alone" when none is - and the step runs again at once without it, so the
 * others' results are as if it had never been there; any other step failure fails every
 * job of the step.  Accept each row's logits in its
 * own generation state (sampling, stop strings, detokenization: the code the serial
 * path runs; under an output constraint the job's matcher, v4_run_job.cons - this
 * executor's per-row state, kept in the slot - masks the row's logits there, after the
 * step's forward pass and before sampling: constrain.h; the mask itself is computed on
 * a thread of its own while the forward pass runs, mask_ahead.h); retire finished jobs.  A slot freed by a step is free for the driver's
 * next submit, so the next step already carries the new job.  A retiring job's sequence
 * is released to the step implementation first (v4_ctx_release_seq: the CUDA engine
 * frees its device state at once, so a waiting job can be admitted at the next step).
 *
 * Ownership: jobs are lent by submit() until step() hands them back; the executor owns
 * its scratch (logits [n][vocab], row arrays) and borrows the runner.
 * Thread: the driver's thread (the runner's thread).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admit.h"
#include "choices.h"
#include "executor.h"
#include "mask_ahead.h"
#include "summarize.h"
#include "task_run_internal.h"

enum { SLOT_FREE = 0, SLOT_WAIT, SLOT_ACTIVE, SLOT_SYNC, SLOT_DONE };

typedef struct cslot {
    int state;
    long stall_mark;            /* steps + 1 of the step it sits out (its memory waits); 0: none */
    v4_job *job;
    v4_run_job rj;
    v4_summ *summ;              /* a summarize task: its tree; rj runs its current generation */
    v4_choices *ch;             /* a task with n > 1 (choices.h): rj runs its current choice */
    v4_run_output sub;          /* that generation's (choice's, after choice 0) output */
} cslot;

typedef struct cont_exec {
    v4_exec base;
    v4_runner *r;
    int n;
    int (*abort_fn)(void *);
    void *abort_ud;
    cslot *slots;
    long steps;
    v4_exec_figs figs;
    double trunk_bytes, expert_bytes, trunk_macs, expert_macs;
    unsigned char *seen;        /* [n_routed_experts]: union of one layer's experts */
    int cap_rows;               /* rows a step may carry (the context's): n + prefill chunks */
    float *logits;              /* [cap_rows][vocab] */
    v4_seq **seqs;              /* [cap_rows] per row: ... */
    int32_t *toks;
    v4_trace **trs;
    int *row_slot, *row_want, *row_k;   /* its slot, whether it needs logits, its index in the slot's rows */
    v4_gen_state **row_gen;     /* the generation it belongs to */
    v4_constrain **mstates;     /* [cap_rows] the constraints whose masks the step computes ahead */
    v4_mask_ahead ma;
} cont_exec;

static int cont_capacity(v4_exec *x)
{
    return ((cont_exec *)x)->n;
}

static int cont_in_flight(v4_exec *x)
{
    cont_exec *c = (cont_exec *)x;
    int k = 0;
    for (int i = 0; i < c->n; i++)
        k += c->slots[i].state != SLOT_FREE;
    return k;
}

static void cont_figs(v4_exec *x, v4_exec_figs *f)
{
    *f = ((cont_exec *)x)->figs;
}

/* Weight bytes of the step just run: the trunk and, per layer, the distinct routed
 * experts of its rows (from their traces). */
static void count_step(cont_exec *c, int rows)
{
    const v4_config *cfg = &c->r->m.cfg;
    const int K = cfg->n_act_experts, E = cfg->n_routed_experts;
    long distinct = 0, uses = 0;
    for (int l = 0; l < cfg->n_layers; l++) {
        memset(c->seen, 0, (size_t)E);
        for (int k = 0; k < rows; k++) {
            const v4_trace *t = c->trs[k];
            for (int i = 0; t && i < K; i++) {
                int32_t id = t->route_ids[l * K + i];
                if (id < 0 || id >= E)
                    continue;
                uses++;
                if (!c->seen[id]) {
                    c->seen[id] = 1;
                    distinct++;
                }
            }
        }
    }
    c->figs.steps++;
    c->figs.rows += rows;
    c->figs.weight_bytes += c->trunk_bytes + (double)distinct * c->expert_bytes;
    c->figs.macs += c->trunk_macs * rows + (double)uses * c->expert_macs;
    c->figs.expert_bytes += (double)distinct * c->expert_bytes;
    c->figs.expert_macs += (double)uses * c->expert_macs;
}

/* A summarize slot: prepare its next generation (active), or, when the tree is
 * finished, hand the task back (done). */
static void summ_feed(cont_exec *c, cslot *s)
{
    v4_job *job = s->job;
    const v4_task *g;
    while (v4_summ_next(s->summ, &g)) {
        if (!v4_runner_prepare(c->r, g, job->deadline_ms, v4_job_abort_poll, job, &s->rj, &s->sub, &job->err)) {
            s->state = SLOT_WAIT;
            return;
        }
        v4_summ_accept(s->summ, -1, &s->sub);
    }
    job->rc = v4_summ_end(s->summ);
    s->summ = NULL;
    s->state = SLOT_DONE;
}

/* A slot of a task with n > 1 whose choice just finished with rc: prepare the next
 * choice (waiting for admission like any new sequence; one whose first token already
 * ended it is finished at once), or, after the last or a failure, hand the task back. */
static void choice_feed(cslot *s, int rc)
{
    v4_job *job = s->job;
    int k = 0;
    while (!rc && (k = v4_choices_next(s->ch, job->deadline_ms, v4_job_abort_poll, job, &s->rj, &s->sub,
                                       &job->err)) == 1) {
        if (!v4_gen_done(s->rj.gen)) {
            s->state = SLOT_WAIT;
            return;
        }
        rc = v4_choices_accept(s->ch, v4_runner_finish(&s->rj, 0, NULL, &s->sub, &job->err), &s->sub, &job->out,
                               &job->err);
    }
    if (k < 0)
        v4_run_output_free(&s->sub);
    job->rc = v4_choices_end(s->ch, k < 0 ? -1 : rc, &job->out);
    s->ch = NULL;
    s->state = SLOT_DONE;
}

static int cont_submit(v4_exec *x, v4_job *job)
{
    cont_exec *c = (cont_exec *)x;
    cslot *s = NULL;
    for (int i = 0; i < c->n && !s; i++)
        if (c->slots[i].state == SLOT_FREE)
            s = &c->slots[i];
    if (!s)
        return -1;
    s->job = job;
    job->start_ms = v4_now_ms();
    job->submit_step = c->steps;
    job->first_step = -1;
    if (!job->deadline_ms) {
        long ms = job->task.deadline_ms ? job->task.deadline_ms : job->deadline_default_ms;
        job->deadline_ms = ms ? job->start_ms + (double)ms : 1e300;
    }
    memset(&job->err, 0, sizeof job->err);
    job->x_abort = c->abort_fn;
    job->x_abort_ud = c->abort_ud;
    if (job->task.kind == V4_TASK_KIND_SUMMARIZE) {
        if (v4_summ_begin(c->r, &job->task, &job->out, &job->err, &s->summ)) {
            job->rc = -1;
            s->state = SLOT_DONE;
        } else {
            summ_feed(c, s);
        }
        return 0;
    }
    if (job->task.kind != V4_TASK_KIND_GENERATE) {
        s->state = SLOT_SYNC;
        return 0;
    }
    if (job->task.n > 1 && !(s->ch = v4_choices_new(c->r, &job->task, &job->err))) {
        job->rc = -1;
        s->state = SLOT_DONE;
        return 0;
    }
    if (v4_runner_prepare(c->r, &job->task, job->deadline_ms, v4_job_abort_poll, job, &s->rj, &job->out,
                          &job->err)) {
        job->rc = s->ch ? v4_choices_end(s->ch, -1, &job->out) : -1;
        s->ch = NULL;
        s->state = SLOT_DONE;
    } else {
        s->state = SLOT_WAIT;
    }
    return 0;
}

static void retire(cont_exec *c, cslot *s, int failed, const v4_error *err)
{
    v4_ctx_release_seq(c->r->ctx, s->rj.seq);   /* before the job frees it */
    if (s->summ) {
        int rc = v4_runner_finish(&s->rj, failed, err, &s->sub, &s->job->err);
        v4_summ_accept(s->summ, rc, &s->sub);
        summ_feed(c, s);
        return;
    }
    if (s->ch) {   /* choice 0 answers into the task's output, later ones into sub */
        v4_run_output *o = v4_choices_current(s->ch) ? &s->sub : &s->job->out;
        const int rc = v4_runner_finish(&s->rj, failed, err, o, &s->job->err);
        choice_feed(s, v4_choices_accept(s->ch, rc, o, &s->job->out, &s->job->err));
        return;
    }
    s->job->rc = v4_runner_finish(&s->rj, failed, err, &s->job->out, &s->job->err);
    s->state = SLOT_DONE;
}

/* Admission of the waiting slots, in slot order, before the rows are gathered.  The
 * figures are taken per job; `pending` is what the jobs admitted in this round will
 * allocate at this step (not yet in the free figure).  The first job that must wait
 * stops the round (later, smaller jobs do not overtake it: no starvation).  A job that
 * cannot fit even with no other sequence active fails (the others keep running). */
static void admit_waiting(cont_exec *c)
{
    v4_ctx *ctx = c->r->ctx;
    size_t pending = 0;
    int active = 0;
    for (int i = 0; i < c->n; i++)
        active += c->slots[i].state == SLOT_ACTIVE;
    for (int i = 0; i < c->n; i++) {
        cslot *s = &c->slots[i];
        if (s->state != SLOT_WAIT)
            continue;
        size_t need, avail;
        if (v4_ctx_admit(ctx, s->rj.seq, &need, &avail)) {   /* no figures: admit */
            s->state = SLOT_ACTIVE;
            active++;
            continue;
        }
        const size_t left = avail > pending ? avail - pending : 0;
        const v4_admit_verdict v = v4_admit_decide(need, left, active > 0);
        if (v == V4_ADMIT_RUN) {
            s->state = SLOT_ACTIVE;
            pending += need;
            active++;
        } else if (v == V4_ADMIT_WAIT) {
            c->figs.admit_waits++;
            return;
        } else {
            v4_error err = {0};
            v4_err_set(&err, V4_ERR_NOMEM, "device_memory",
                       "a sequence of %d positions needs %zu bytes of device memory, %zu available with no other "
                       "sequence active (a shorter prompt + max_tokens, or more V4_GPU_SEQ_MEM on a GPU)",
                       v4_seq_capacity(s->rj.seq), need, left);
            retire(c, s, 1, &err);   /* a summary may move on to its next generation: WAIT again */
            if (s->state == SLOT_WAIT)
                i--;
        }
    }
}

/* The rows of a step over the active slots: one row each, and a prefill chunk (several
 * rows) for slots still in their prompt while the step has room: every active slot
 * keeps its row, the spare rows (cap_rows - active slots) go to prompts in slot order.
 * Returns the rows; *any_logits: whether a row wants logits. */
static int gather(cont_exec *c, int *any_logits)
{
    const int per_seq = v4_ctx_rows_per_seq(c->r->ctx);
    int rows = 0, active = 0;
    *any_logits = 0;
    for (int i = 0; i < c->n; i++)
        active += c->slots[i].state == SLOT_ACTIVE && c->slots[i].stall_mark != c->steps + 1;
    int spare = c->cap_rows - active;
    for (int i = 0; i < c->n; i++) {
        cslot *s = &c->slots[i];
        if (s->state != SLOT_ACTIVE || s->stall_mark == c->steps + 1)
            continue;
        int lim = 1 + spare < per_seq ? 1 + spare : per_seq;
        int k = v4_gen_rows(s->rj.gen, lim, c->toks + rows, c->trs + rows, c->row_want + rows);
        spare -= k - 1;
        for (int j = 0; j < k; j++, rows++) {
            c->seqs[rows] = s->rj.seq;
            c->row_slot[rows] = i;
            c->row_k[rows] = j;
            c->row_gen[rows] = s->rj.gen;
            *any_logits |= c->row_want[rows];
        }
    }
    return rows;
}

/* The step failed with a fault of the new sequence at row f->row (v4_ctx_step_fault:
 * nothing ran, no sequence changed).  Its job leaves the step, its sequence released
 * (any device state it got is freed: it starts afresh at position 0): out of memory
 * (retryable) while another job is active, it waits (SLOT_WAIT: admitted again at a
 * later step, as admit.h's rule waits, not charged, first_step untouched); out of memory
 * alone, it fails as admission's "cannot fit even alone" does (device_memory); a
 * sequence that cannot run fails with the step's error.  A stall (its memory must
 * wait; any sequence, its state kept): it sits out this step (figs.mem_stalls) while
 * another job runs in it, else (nothing else can free memory) it fails (device_memory).
 * The caller steps the others again at once. */
static void drop_faulted(cont_exec *c, const v4_step_fault *f, const v4_error *err)
{
    cslot *s = &c->slots[c->row_slot[f->row]];
    int others = 0;
    for (int i = 0; i < c->n; i++)
        others += &c->slots[i] != s && c->slots[i].state == SLOT_ACTIVE && c->slots[i].stall_mark != c->steps + 1;
    if (f->stall && f->retryable) {
        if (others) {
            s->stall_mark = c->steps + 1;
            c->figs.mem_stalls++;
            return;
        }
        v4_error e = *err;
        v4_err_set(&e, V4_ERR_NOMEM, "device_memory",
                   "a sequence of %d positions could not grow at position %d with no other sequence running (%s: "
                   "%s)",
                   v4_seq_capacity(s->rj.seq), v4_seq_pos(s->rj.seq), err->where, err->msg);
        retire(c, s, 1, &e);
        return;
    }
    v4_ctx_release_seq(c->r->ctx, s->rj.seq);
    if (f->retryable && others) {
        s->state = SLOT_WAIT;
        c->figs.oom_retries++;
        return;
    }
    v4_error e = *err;
    if (f->retryable)
        v4_err_set(&e, V4_ERR_NOMEM, "device_memory",
                   "a sequence of %d positions got no device memory with no other sequence active (%s: %s)",
                   v4_seq_capacity(s->rj.seq), err->where, err->msg);
    retire(c, s, 1, &e);
}

/* One forward step over the active slots (gather).  A step that fails with a fault of
 * one new sequence (drop_faulted) is run again at once without it (each try drops one
 * slot: at most n tries), so the other rows get exactly the results they would have
 * had without it.  Returns the rows stepped. */
static int forward(cont_exec *c)
{
    v4_runner *r = c->r;
    const int V = r->m.cfg.vocab_size;
    for (int i = 0; i < c->n; i++) {
        cslot *s = &c->slots[i];
        if (s->state != SLOT_ACTIVE && s->state != SLOT_WAIT)
            continue;
        v4_error err = {0};
        if (v4_gen_poll_cancel(s->rj.gen, &err))
            retire(c, s, 1, &err);
    }
    admit_waiting(c);
    int rows, any_logits, rc;
    v4_error err;
    for (;;) {   /* after the retirements (a summary may have moved on) */
        rows = gather(c, &any_logits);
        if (!rows)
            return 0;
        if (r->xp)
            v4_xprov_outcomes_reset(r->xp);
        memset(&err, 0, sizeof err);
        /* the rows that sample after this step: their next masks are computed on the
         * mask thread while the forward pass runs (joined before anything else runs) */
        int nm = 0;
        for (int k = 0; k < rows; k++) {
            v4_constrain *cs = c->row_want[k] ? v4_gen_constraint(c->row_gen[k]) : NULL;
            if (cs)
                c->mstates[nm++] = cs;
        }
        v4_mask_ahead_start(&c->ma, c->mstates, nm);
        rc = v4_step_rows(r->ctx, c->seqs, c->toks, rows, any_logits ? c->logits : NULL, c->row_want, c->trs, &err);
        v4_mask_ahead_join(&c->ma);
        v4_step_fault f;
        if (!rc || v4_ctx_step_fault(r->ctx, &f) || f.row >= rows)
            break;
        drop_faulted(c, &f, &err);
    }
    long step = c->steps++;
    if (!rc)
        count_step(c, rows);
    unsigned char *outcomes = r->xp && !rc ? v4_xprov_outcomes(r->xp) : NULL;
    for (int k = 0; k < rows; k++) {
        cslot *s = &c->slots[c->row_slot[k]];
        /* a generation retired at an earlier row of this step (its slot may already run
         * the next generation of a summary): its remaining rows are dropped */
        if (s->state != SLOT_ACTIVE || s->rj.gen != c->row_gen[k])
            continue;
        if (s->job->first_step < 0)
            s->job->first_step = step;
        if (rc) {   /* the whole step failed: every row's sequence is unusable */
            retire(c, s, 1, &err);
            continue;
        }
        if (outcomes) {   /* each load of the step is charged to the first row that needed it */
            long long miss, pre;
            v4_runner_charge_row(r, outcomes, c->trs[k], &miss, &pre);
            v4_runner_job_charge(&s->rj, miss, pre);
        }
        v4_error aerr = {0};
        if (c->row_want[k] && v4_choices_wants(s->ch, &s->rj))   /* n > 1: the prompt's end, before sampling */
            v4_choices_capture(s->ch, &s->rj, c->logits + (size_t)k * V);
        if (v4_gen_accept_row(s->rj.gen, c->row_k[k], c->row_want[k] ? c->logits + (size_t)k * V : NULL, &aerr))
            retire(c, s, 1, &aerr);
        else if (v4_gen_done(s->rj.gen))
            retire(c, s, 0, NULL);
    }
    return rows;
}

static int cont_step(v4_exec *x, v4_job **done, int max)
{
    cont_exec *c = (cont_exec *)x;
    for (int i = 0; i < c->n; i++) {   /* kinds without a state machine: whole, here */
        cslot *s = &c->slots[i];
        if (s->state != SLOT_SYNC)
            continue;
        s->job->first_step = c->steps;
        s->job->rc = v4_task_execute(c->r, &s->job->task, s->job->deadline_ms, v4_job_abort_poll, s->job,
                                     &s->job->out, &s->job->err);
        s->state = SLOT_DONE;
    }
    forward(c);
    int k = 0;
    for (int i = 0; i < c->n && k < max; i++) {
        cslot *s = &c->slots[i];
        if (s->state != SLOT_DONE)
            continue;
        s->job->end_ms = v4_now_ms();
        done[k++] = s->job;
        s->job = NULL;
        s->state = SLOT_FREE;
    }
    return k;
}

static void cont_destroy(v4_exec *x)
{
    cont_exec *c = (cont_exec *)x;
    if (!c)
        return;
    for (int i = 0; c->slots && i < c->n; i++) {
        cslot *s = &c->slots[i];
        if (s->state == SLOT_FREE)
            continue;
        if (s->state == SLOT_ACTIVE || s->state == SLOT_WAIT) {
            v4_error err = {0};
            v4_err_set(&err, V4_ERR_INVALID, "batch", "executor closed");
            retire(c, s, 1, &err);
        }
        v4_job_release(s->job);
    }
    free(c->slots);
    free(c->seen);
    free(c->logits);
    free(c->seqs);
    free(c->toks);
    free(c->trs);
    free(c->row_slot);
    free(c->row_want);
    free(c->row_k);
    free(c->row_gen);
    free(c->mstates);
    free(c);
}

static const v4_exec_ops cont_ops = {cont_capacity, cont_submit, cont_step, cont_in_flight, cont_destroy,
                                           cont_figs};

v4_exec *v4_exec_continuous(v4_runner *r, int n, int (*abort_fn)(void *), void *abort_ud, char *err,
                                        size_t err_cap)
{
    if (n < 1 || n > r->max_batch) {
        snprintf(err, err_cap, "concurrency %d: the runner's forward context takes 1 to %d sequences per step", n,
                 r->max_batch);
        return NULL;
    }
    cont_exec *c = calloc(1, sizeof *c);
    if (c) {
        c->base.ops = &cont_ops;
        c->r = r;
        c->n = n;
        c->abort_fn = abort_fn;
        c->abort_ud = abort_ud;
        c->slots = calloc((size_t)n, sizeof *c->slots);
        /* one row per slot, plus one prefill chunk's spare rows when the context has them */
        c->cap_rows = r->step_rows;
        if (c->cap_rows > n + r->chunk - 1)
            c->cap_rows = n + r->chunk - 1;
        if (c->cap_rows < n)
            c->cap_rows = n;
        const size_t R = (size_t)c->cap_rows;
        c->logits = malloc(sizeof(float) * R * (size_t)r->m.cfg.vocab_size);
        c->seqs = calloc(R, sizeof *c->seqs);
        c->toks = calloc(R, sizeof *c->toks);
        c->trs = calloc(R, sizeof *c->trs);
        c->row_slot = calloc(R, sizeof *c->row_slot);
        c->row_want = calloc(R, sizeof *c->row_want);
        c->row_k = calloc(R, sizeof *c->row_k);
        c->row_gen = calloc(R, sizeof *c->row_gen);
        c->mstates = calloc(R, sizeof *c->mstates);
        c->seen = malloc((size_t)r->m.cfg.n_routed_experts + 1);
        c->trunk_bytes = (double)v4_step_trunk_bytes(&r->m.w);
        c->expert_bytes = r->m.cfg.n_routed_experts > 0 ? (double)v4_expert_bytes(&r->m.w.layers[0].experts[0]) : 0;
        c->trunk_macs = (double)v4_step_trunk_macs(&r->m.w);
        c->expert_macs = r->m.cfg.n_routed_experts > 0 ? (double)v4_expert_macs(&r->m.w.layers[0].experts[0]) : 0;
    }
    if (!c || !c->seen || !c->slots || !c->logits || !c->seqs || !c->toks || !c->trs || !c->row_slot || !c->row_want ||
        !c->row_k || !c->row_gen || !c->mstates) {
        snprintf(err, err_cap, "out of memory");
        cont_destroy(c ? &c->base : NULL);
        return NULL;
    }
    return &c->base;
}
