/* task_run_internal.h - the runner's insides, for the files of worker/ that build on
 * it (task_run.c, executors, summarization); not for other folders.
 *
 * Ownership: the runner owns every object below (task_run.h).  Thread: one thread
 * at a time per runner.
 */
#ifndef V4_TASK_RUN_INTERNAL_H
#define V4_TASK_RUN_INTERNAL_H

#include "../cache/expert_provider.h"
#include "../cache/model_files.h"
#include "../kernels/v4/model.h"
#include "task_run.h"
#include "tokenizer.h"

struct v4_runner {
    v4_model_files m;
    int m_open;
    v4_tokenizer *tok;
    v4_backend *be;
    v4_ctx *ctx;
    v4_xprov *xp;               /* paged experts; NULL = all resident */
    char name[128];             /* the served name (first of names) */
    char names[512];            /* "name[,alias...]" */
    long context;               /* prompt + max_tokens limit (v4_runner_context) */
    char served_list[640];      /* "\"a\"" or "\"a\" (also \"b\", \"c\")" for error messages */
};

#endif
