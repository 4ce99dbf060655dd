/* admit.c - the admission rule (see admit.h). */
#include "admit.h"

v4_admit_verdict v4_admit_decide(size_t need, size_t avail, int others_active)
{
    if (need <= avail)
        return V4_ADMIT_RUN;
    return others_active ? V4_ADMIT_WAIT : V4_ADMIT_FAIL;
}

const char *v4_admit_verdict_name(v4_admit_verdict v)
{
    switch (v) {
    case V4_ADMIT_RUN:
        return "run";
    case V4_ADMIT_WAIT:
        return "wait";
    case V4_ADMIT_FAIL:
        return "fail";
    }
    return "?";
}
