/* test_xpolicy.c - the exact eviction order of LRU, SLRU and LFRU (kernels/xpolicy.h) on
 * small hand traces; pinning (a pinned key is never a victim, unpin re-enters as most
 * recent), the all-pinned insert error, remove (quarantine), slot reuse, and a random
 * stress run checked against a brute-force LRU model.
 * Thread: main only. */
#include <string.h>

#include "../kernels/xpolicy.h"
#include "testutil.h"

static v4_xpolicy *mk(v4_xpolicy_kind k, int cap, int n_keys, int prot, int64_t age)
{
    v4_xpolicy_params pr = {prot, age, 0};
    v4_error err = {0};
    v4_xpolicy *p = v4_xpolicy_create(k, cap, n_keys, &pr, &err);
    CHECK(p, "create: %s", err.msg);
    if (!p)
        exit(1);
    return p;
}

/* insert key; return the victim (-2 on error) */
static int ins(v4_xpolicy *p, int key)
{
    int v;
    v4_error err = {0};
    return v4_xpolicy_insert(p, key, &v, &err) < 0 ? -2 : v;
}

static void test_lru(void)
{
    v4_xpolicy *p = mk(V4_XPOL_LRU, 3, 100, -1, 0);
    CHECK(ins(p, 1) == -1 && ins(p, 2) == -1 && ins(p, 3) == -1, "fills free slots");
    CHECK(v4_xpolicy_size(p) == 3, "size 3");
    CHECK(v4_xpolicy_touch(p, 1) >= 0, "hit 1");
    CHECK(v4_xpolicy_touch(p, 42) == -1, "miss 42");
    CHECK(v4_xpolicy_peek_victim(p) == 2, "peek %d", v4_xpolicy_peek_victim(p));
    int v;
    CHECK((v = ins(p, 4)) == 2, "LRU victim 2, got %d", v);
    CHECK((v = ins(p, 5)) == 3, "LRU victim 3, got %d", v);
    CHECK((v = ins(p, 6)) == 1, "LRU victim 1, got %d", v);
    /* order now 6 5 4 (MRU first) */
    CHECK(v4_xpolicy_pin(p, 4) == 1, "pin 4");
    CHECK(v4_xpolicy_pin(p, 4) == 2, "pin nests");
    CHECK((v = ins(p, 7)) == 5, "pinned 4 skipped, victim 5, got %d", v);
    CHECK(v4_xpolicy_unpin(p, 4) == 1, "unpin -> 1");
    CHECK((v = ins(p, 8)) == 6, "4 still pinned, victim 6, got %d", v);
    CHECK(v4_xpolicy_unpin(p, 4) == 0, "unpin -> 0");
    CHECK(v4_xpolicy_unpin(p, 4) == -1, "unpin of unpinned refused");
    /* 4 re-entered as most recent: order 4 8 7 */
    CHECK((v = ins(p, 9)) == 7, "victim 7 after unpin of 4, got %d", v);
    CHECK((v = ins(p, 10)) == 8, "victim 8, got %d", v);
    CHECK((v = ins(p, 11)) == 4, "victim 4, got %d", v);
    /* slot bookkeeping */
    for (int s = 0; s < 3; s++) {
        int k = v4_xpolicy_key_of(p, s);
        CHECK(k >= 9 && k <= 11 && v4_xpolicy_lookup(p, k) == s, "slot %d <-> key %d", s, k);
    }
    CHECK(ins(p, 10) == -2, "double insert refused");
    CHECK(ins(p, 100) == -2, "out-of-range key refused");
    v4_xpolicy_free(p);
}

static void test_all_pinned_and_remove(v4_xpolicy_kind kind)
{
    v4_xpolicy *p = mk(kind, 2, 10, -1, 0);
    ins(p, 1);
    ins(p, 2);
    v4_xpolicy_pin(p, 1);
    v4_xpolicy_pin(p, 2);
    CHECK(v4_xpolicy_pinned(p) == 2, "2 pinned");
    int v;
    v4_error err = {0};
    CHECK(v4_xpolicy_insert(p, 3, &v, &err) == -1 && err.code == V4_ERR_RANGE && strstr(err.msg, "pinned"),
          "%s: all pinned -> explicit error (%s)", v4_xpolicy_name(kind), err.msg);
    CHECK(v4_xpolicy_lookup(p, 3) == -1 && v4_xpolicy_size(p) == 2, "failed insert left no trace");
    CHECK(v4_xpolicy_peek_victim(p) == -1, "no victim while all pinned");
    CHECK(v4_xpolicy_remove(p, 1) == -1, "remove of a pinned key refused");
    v4_xpolicy_unpin(p, 1);
    int s1 = v4_xpolicy_lookup(p, 1);
    CHECK(v4_xpolicy_remove(p, 1) == s1, "remove frees slot %d", s1);
    CHECK(v4_xpolicy_lookup(p, 1) == -1 && v4_xpolicy_size(p) == 1, "removed");
    CHECK(v4_xpolicy_remove(p, 1) == -1, "remove twice refused");
    CHECK(v4_xpolicy_touch(p, 1) == -1, "removed key is a miss");
    int s3 = v4_xpolicy_insert(p, 3, &v, &err);
    CHECK(s3 == s1 && v == -1, "%s: insert reuses the freed slot without eviction", v4_xpolicy_name(kind));
    CHECK(v4_xpolicy_insert(p, 4, &v, &err) >= 0 && v == 3, "%s: 2 pinned, 3 evicted (got %d)",
          v4_xpolicy_name(kind), v);
    v4_xpolicy_unpin(p, 2);
    CHECK(v4_xpolicy_pins(p, 2) == 0 && v4_xpolicy_pinned(p) == 0, "unpinned");
    v4_xpolicy_free(p);
}

static void test_slru(void)
{
    /* capacity 4, protected 2 */
    v4_xpolicy *p = mk(V4_XPOL_SLRU, 4, 100, 2, 0);
    ins(p, 1); ins(p, 2); ins(p, 3); ins(p, 4);      /* probation 4 3 2 1 */
    v4_xpolicy_touch(p, 1);                          /* protected 1 */
    v4_xpolicy_touch(p, 2);                          /* protected 2 1 */
    v4_xpolicy_touch(p, 3);                          /* protected 3 2, 1 demoted: probation 1 4 */
    int v;
    CHECK((v = ins(p, 5)) == 4, "SLRU victim = probation tail 4, got %d", v);   /* prob 5 1 */
    CHECK((v = ins(p, 6)) == 1, "SLRU victim = demoted 1, got %d", v);         /* prob 6 5 */
    CHECK((v = ins(p, 7)) == 5, "scan evicts probation only: 5, got %d", v);   /* prob 7 6 */
    CHECK(v4_xpolicy_lookup(p, 2) >= 0 && v4_xpolicy_lookup(p, 3) >= 0, "protected survive the scan");
    v4_xpolicy_touch(p, 2);                          /* protected 2 3 */
    v4_xpolicy_pin(p, 7);
    v4_xpolicy_pin(p, 6);
    CHECK((v = ins(p, 8)) == 3, "probation all pinned -> protected tail 3, got %d", v);
    /* 8 is in probation now (8); 6, 7 pinned; protected: 2 */
    v4_xpolicy_unpin(p, 6);                          /* probation 6 8 */
    CHECK((v = ins(p, 9)) == 8, "unpinned 6 is most recent: victim 8, got %d", v);
    v4_xpolicy_free(p);

    /* default protected size: capacity - max(1, capacity/5); capacity 1 never promotes */
    p = mk(V4_XPOL_SLRU, 1, 10, -1, 0);
    ins(p, 1);
    v4_xpolicy_touch(p, 1);
    CHECK(ins(p, 2) == 1, "capacity 1 still evicts");
    v4_xpolicy_free(p);
}

static void test_lfru(void)
{
    v4_xpolicy *p = mk(V4_XPOL_LFRU, 3, 100, -1, 1000000);
    ins(p, 1); ins(p, 2); ins(p, 3);                 /* counts 1 1 1 */
    v4_xpolicy_touch(p, 1);
    v4_xpolicy_touch(p, 1);                          /* 1:3 */
    v4_xpolicy_touch(p, 2);                          /* 2:2 */
    int v;
    CHECK((v = ins(p, 4)) == 3, "LFRU lowest count 3, got %d", v);
    CHECK((v = ins(p, 5)) == 4, "LFRU new key with count 1 goes first: 4, got %d", v);
    v4_xpolicy_touch(p, 5); v4_xpolicy_touch(p, 5); v4_xpolicy_touch(p, 5);   /* 5:4 */
    CHECK((v = ins(p, 6)) == 2, "LFRU 2 (count 2) < 1 (3) < 5 (4), got %d", v);
    /* 3 comes back with its old count (history kept); 6 has the lowest count */
    CHECK((v = ins(p, 3)) == 6, "LFRU victim 6, got %d", v);
    /* pinned lowest is skipped */
    v4_xpolicy_pin(p, 3);
    CHECK((v = ins(p, 7)) == 1, "pinned 3 skipped; 1 (3) < 5 (4): got %d", v);
    v4_xpolicy_free(p);

    /* recency breaks ties */
    p = mk(V4_XPOL_LFRU, 2, 10, -1, 1000000);
    ins(p, 1); ins(p, 2);
    CHECK((v = ins(p, 3)) == 1, "tie: least recent 1, got %d", v);
    v4_xpolicy_touch(p, 2);
    v4_xpolicy_touch(p, 3);
    CHECK((v = ins(p, 4)) == 2, "tie 2:2 3:2 -> older 2, got %d", v);
    v4_xpolicy_free(p);

    /* aging: every 4 accesses all counts halve */
    p = mk(V4_XPOL_LFRU, 2, 10, -1, 4);
    ins(p, 1);                                       /* 1:1 (acc 1) */
    v4_xpolicy_touch(p, 1);                          /* 1:2 (2) */
    v4_xpolicy_touch(p, 1);                          /* 1:3 (3) */
    ins(p, 2);                                       /* 2:1 (4) -> halve: 1:1 2:0 */
    v4_xpolicy_touch(p, 2);                          /* 2:1 - tie, 1 older */
    CHECK((v = ins(p, 3)) == 1, "after aging 1 is no longer favoured: victim %d", v);
    v4_xpolicy_free(p);
    p = mk(V4_XPOL_LFRU, 2, 10, -1, 1000);
    ins(p, 1); v4_xpolicy_touch(p, 1); v4_xpolicy_touch(p, 1); ins(p, 2); v4_xpolicy_touch(p, 2);
    CHECK((v = ins(p, 3)) == 2, "without aging 1 (3) beats 2 (2): victim %d", v);
    v4_xpolicy_free(p);
}

/* random ops on LRU checked against a brute-force timestamp model */
static void test_lru_random(void)
{
    enum { CAP = 8, NK = 24, OPS = 20000 };
    v4_xpolicy *p = mk(V4_XPOL_LRU, CAP, NK, -1, 0);
    long stamp[NK] = {0}, now = 0;
    int res[NK] = {0}, pin[NK] = {0};
    unsigned x = 12345;
    int bad = 0;
    for (int i = 0; i < OPS && !bad; i++) {
        x = x * 1103515245u + 12345u;
        int k = (int)((x >> 8) % NK), op = (int)((x >> 20) % 4);
        if (op == 0 && res[k] && pin[k] < 3) {
            v4_xpolicy_pin(p, k);
            pin[k]++;
        } else if (op == 1 && pin[k]) {
            v4_xpolicy_unpin(p, k);
            if (--pin[k] == 0)
                stamp[k] = ++now;
        } else if (res[k]) {
            v4_xpolicy_touch(p, k);
            if (!pin[k])
                stamp[k] = ++now;
        } else {
            int n = 0, want = -1;
            for (int j = 0; j < NK; j++)
                if (res[j]) {
                    n++;
                    if (!pin[j] && (want < 0 || stamp[j] < stamp[want]))
                        want = j;
                }
            if (n < CAP)
                want = -1;
            int v;
            v4_error err = {0};
            int s = v4_xpolicy_insert(p, k, &v, &err);
            if (n == CAP && want < 0) {
                bad |= s != -1;
            } else {
                bad |= s < 0 || v != want;
                if (v >= 0)
                    res[v] = 0;
                res[k] = 1;
                stamp[k] = ++now;
            }
        }
    }
    CHECK(!bad, "LRU matches the brute-force model over %d random ops", OPS);
    v4_xpolicy_free(p);
}

/* NEXT on a hand trace (2 layers x 3 experts, 3 slots, nothing pinned): the victims
 * follow the expected-next-use rule of xpolicy.h, worked out below; and key counts
 * that are not a multiple of the layers are refused. */
static void test_next(void)
{
    v4_error err = {0};
    v4_xpolicy_params pr = {-1, 0, 2};
    v4_xpolicy *p = v4_xpolicy_create(V4_XPOL_NEXT, 3, 6, &pr, &err);
    CHECK(p != NULL, "next: create: %s", err.msg);
    if (!p)
        return;
    int v;
    v4_xpolicy_insert(p, 0, &v, &err);      /* layer 0 visit 1: 0, 1 */
    v4_xpolicy_insert(p, 1, &v, &err);
    v4_xpolicy_touch(p, 0);                 /* count 0 = 2, 1 = 1 */
    v4_xpolicy_insert(p, 3, &v, &err);      /* layer 1 visit 1: 3 */
    /* layer 0 visit 2 needs 2: layer 0 is 2 visits of 1 cycle away (d = 2 from layer 0's
     * view: cur = 0 after the note -> d(0) = L = 2, d(1) = 1); E(key 1) = 2 + 2 * (2/1 - 1)
     * = 4, E(key 0) = 2 + 2 * (2/2 - 1) = 2, E(key 3) = 1 + 2 * (1/1 - 1) = 1 -> key 1 */
    int s = v4_xpolicy_insert(p, 2, &v, &err);
    CHECK(s >= 0 && v == 1, "next: the rarely used key of the far layer goes (victim %d)", v);
    /* layer 1 visit 2 needs 4: cur = 1, d(0) = 1, d(1) = L = 2; layer 0's root is key 2
     * (count 1): E = 1 + 2 * (2/1 - 1) = 3; layer 1's key 3 (count 1, 2 visits):
     * E = 2 + 2 * (2/1 - 1) = 4 -> key 3, though layer 0's key 2 is as rare */
    s = v4_xpolicy_insert(p, 4, &v, &err);
    CHECK(s >= 0 && v == 3, "next: the key expected back last goes (victim %d)", v);
    v4_xpolicy_free(p);
    v4_xpolicy_params bad = {-1, 0, 4};
    CHECK(!v4_xpolicy_create(V4_XPOL_NEXT, 3, 6, &bad, &err) && err.code == V4_ERR_INVALID,
          "next: 6 keys over 4 layers refused (%s)", err.msg);
    v4_xpolicy_kind k;
    CHECK(!v4_xpolicy_parse("next", &k) && k == V4_XPOL_NEXT && !strcmp(v4_xpolicy_name(k), "next"), "parse next");
}

int main(void)
{
    test_lru();
    for (int k = 0; k < V4_XPOL_COUNT; k++)
        test_all_pinned_and_remove((v4_xpolicy_kind)k);
    test_slru();
    test_lfru();
    test_lru_random();
    test_next();
    v4_xpolicy_kind k;
    CHECK(!v4_xpolicy_parse("slru", &k) && k == V4_XPOL_SLRU && v4_xpolicy_parse("fifo", &k) == -1, "parse");
    TEST_DONE();
}
