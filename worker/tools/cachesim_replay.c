/* cachesim_replay.c - replay a v4_simtrace through an xpolicy, and Belady's offline
 * MIN, under the step-pinning rule of cachesim_lib.h.
 *
 * MIN design: next_use[i] = index of the next access of the same key (INT64_MAX if
 * none).  Resident keys sit in a max-heap of (next use, key) entries with lazy
 * deletion: a hit pushes a fresh entry, stale ones (key gone, or next use changed)
 * are skipped when popped; entries of keys of the current step (pinned: the whole
 * step, including keys it has not reached yet) are set aside
 * and pushed back after the victim is found.  O(log n) per access.
 * Ownership: scratch arrays are allocated and freed inside each call.
 * Thread: any.
 */
#include <stdlib.h>
#include <string.h>

#include "cachesim_lib.h"

static int too_small(const v4_simtrace *t, int slots, v4_error *err)
{
    if (slots >= t->max_step_keys)
        return 0;
    return v4_err_set(err, V4_ERR_RANGE, "--budget-bytes",
                      "budget too small: %d slots, but step %d (line %d) needs %d distinct experts at once",
                      slots, t->max_step, t->step_line[t->max_step], t->max_step_keys);
}

int v4_sim_policy(const v4_simtrace *t, v4_xpolicy_kind kind, const v4_xpolicy_params *pp, int slots,
                  v4_simresult *r, v4_error *err)
{
    memset(r, 0, sizeof *r);
    if (too_small(t, slots, err))
        return -1;
    int n_keys = t->n_layers * t->n_experts;
    if (slots > n_keys)
        slots = n_keys;
    v4_xpolicy *p = v4_xpolicy_create(kind, slots, n_keys, pp, err);
    if (!p)
        return -1;
    for (int s = 0; s < t->n_steps; s++) {
        int a = t->step_off[s], b = t->step_off[s + 1];
        for (int i = a; i < b; i++)         /* the step's resident keys: pinned first */
            if (v4_xpolicy_lookup(p, t->keys[i]) >= 0 && v4_xpolicy_pins(p, t->keys[i]) == 0)
                v4_xpolicy_pin(p, t->keys[i]);
        for (int i = a; i < b; i++) {
            int k = t->keys[i];
            if (v4_xpolicy_touch(p, k) >= 0) {
                r->hits++;
                continue;
            }
            int victim;
            if (v4_xpolicy_insert(p, k, &victim, err) < 0) {
                v4_xpolicy_free(p);
                return -1;
            }
            r->misses++;
            r->evictions += victim >= 0;
            v4_xpolicy_pin(p, k);
        }
        for (int i = a; i < b; i++)         /* unpin in access order (once per key) */
            if (v4_xpolicy_pins(p, t->keys[i]) > 0)
                v4_xpolicy_unpin(p, t->keys[i]);
    }
    v4_xpolicy_free(p);
    return 0;
}

typedef struct hent {
    int64_t next;
    int key;
} hent;

static void hpush(hent *h, int *n, hent e)
{
    int i = (*n)++;
    while (i > 0 && h[(i - 1) / 2].next < e.next) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = e;
}

static hent hpop(hent *h, int *n)
{
    hent top = h[0], last = h[--(*n)];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && h[c + 1].next > h[c].next)
            c++;
        if (h[c].next <= last.next)
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n)
        h[i] = last;
    return top;
}

int v4_sim_belady(const v4_simtrace *t, int slots, v4_simresult *r, v4_error *err)
{
    memset(r, 0, sizeof *r);
    if (too_small(t, slots, err))
        return -1;
    int n = t->n_access, n_keys = t->n_layers * t->n_experts;
    int64_t *next_use = malloc(sizeof(int64_t) * (size_t)n);
    int64_t *cur_next = malloc(sizeof(int64_t) * (size_t)n_keys);
    int *last_pos = malloc(sizeof(int) * (size_t)n_keys), *last_step = malloc(sizeof(int) * (size_t)n_keys);
    unsigned char *res = calloc((size_t)n_keys, 1);
    hent *heap = malloc(sizeof(hent) * (size_t)(n + 1)), *aside = malloc(sizeof(hent) * (size_t)(n + 1));
    int rc = -1;
    if (!next_use || !cur_next || !last_pos || !last_step || !res || !heap || !aside) {
        v4_err_set(err, V4_ERR_NOMEM, "cachesim", "out of memory");
        goto out;
    }
    for (int k = 0; k < n_keys; k++) {
        last_pos[k] = -1;
        last_step[k] = -1;
    }
    for (int i = n - 1; i >= 0; i--) {
        int k = t->keys[i];
        next_use[i] = last_pos[k] >= 0 ? last_pos[k] : INT64_MAX;
        last_pos[k] = i;
    }
    int hn = 0, resident = 0;
    for (int s = 0; s < t->n_steps; s++) {
        for (int i = t->step_off[s]; i < t->step_off[s + 1]; i++)
            last_step[t->keys[i]] = s;      /* the whole step is pinned */
        for (int i = t->step_off[s]; i < t->step_off[s + 1]; i++) {
            int k = t->keys[i];
            if (res[k]) {
                r->hits++;
            } else {
                r->misses++;
                if (resident == slots) {
                    int na = 0;
                    for (;;) {
                        hent e = hpop(heap, &hn);   /* never empty: slots >= step keys */
                        if (!res[e.key] || cur_next[e.key] != e.next)
                            continue;               /* stale */
                        if (last_step[e.key] == s) {
                            aside[na++] = e;        /* pinned by this step */
                            continue;
                        }
                        res[e.key] = 0;
                        resident--;
                        r->evictions++;
                        break;
                    }
                    while (na)
                        hpush(heap, &hn, aside[--na]);
                }
                res[k] = 1;
                resident++;
            }
            cur_next[k] = next_use[i];
            hpush(heap, &hn, (hent){next_use[i], k});
        }
    }
    rc = 0;
out:
    free(next_use); free(cur_next); free(last_pos); free(last_step); free(res); free(heap); free(aside);
    return rc;
}

static int cmp_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

int v4_sim_static(const v4_simtrace *t, int slots, v4_simresult *r, v4_error *err)
{
    memset(r, 0, sizeof *r);
    int n_keys = t->n_layers * t->n_experts;
    int64_t *cnt = calloc((size_t)n_keys, sizeof(int64_t));
    if (!cnt)
        return v4_err_set(err, V4_ERR_NOMEM, "cachesim", "out of memory");
    for (int i = 0; i < t->n_access; i++)
        cnt[t->keys[i]]++;
    qsort(cnt, (size_t)n_keys, sizeof *cnt, cmp_desc);
    int64_t total = t->n_access, kept = 0;
    int held = 0;
    for (int k = 0; k < n_keys && k < slots && cnt[k] > 0; k++, held++)
        kept += cnt[k];
    r->misses = held + (total - kept);     /* the held set's first loads + every other access */
    r->hits = total - r->misses;
    r->evictions = total - kept;
    free(cnt);
    return 0;
}
