/* test_admit.c - the admission rule (worker/serve/admit.h): run when the sequence's
 * bytes fit what is available, wait when they do not but other sequences are active
 * (their memory will free), fail only when they do not fit with nothing else active. */
#include <stdint.h>
#include <string.h>

#include "testutil.h"
#include "worker/serve/admit.h"

int main(void)
{
    struct {
        size_t need, avail;
        int others;
        v4_admit_verdict want;
    } cases[] = {
        {0, 0, 0, V4_ADMIT_RUN},
        {100, 100, 0, V4_ADMIT_RUN},          /* exactly fits */
        {100, 100, 1, V4_ADMIT_RUN},
        {100, 99, 1, V4_ADMIT_WAIT},          /* one byte short, others will free */
        {100, 99, 0, V4_ADMIT_FAIL},          /* one byte short, alone: never fits */
        {100, 0, 3, V4_ADMIT_WAIT},
        {SIZE_MAX, SIZE_MAX - 1, 0, V4_ADMIT_FAIL},
        {SIZE_MAX, SIZE_MAX, 0, V4_ADMIT_RUN},
        {1, SIZE_MAX, 0, V4_ADMIT_RUN},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        v4_admit_verdict v = v4_admit_decide(cases[i].need, cases[i].avail, cases[i].others);
        CHECK(v == cases[i].want, "case %zu: need %zu avail %zu others %d: %s, want %s", i, cases[i].need,
              cases[i].avail, cases[i].others, v4_admit_verdict_name(v), v4_admit_verdict_name(cases[i].want));
    }
    CHECK(!strcmp(v4_admit_verdict_name(V4_ADMIT_RUN), "run") && !strcmp(v4_admit_verdict_name(V4_ADMIT_WAIT), "wait") &&
              !strcmp(v4_admit_verdict_name(V4_ADMIT_FAIL), "fail"),
          "verdict names");
    TEST_DONE();
}
