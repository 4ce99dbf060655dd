/* model_files.c - see model_files.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bind_weights.h"
#include "expert_synth.h"
#include "model_files.h"

int v4_model_open(const char *dir, v4_model_files *m, v4_error *err)
{
    return v4_model_open_paged(dir, m, 0, err);
}

int v4_model_open_paged(const char *dir, v4_model_files *m, int paged, v4_error *err)
{
    const char *np = getenv("V4_NO_PREPARE");
    int skip = np && *np && strcmp(np, "0") != 0;
    return v4_model_open_ex(dir, m, (skip ? V4_OPEN_NO_PREPARE : 0) | (paged ? V4_OPEN_EXPERTS_PAGED : 0), err);
}

int v4_model_open_ex(const char *dir, v4_model_files *m, int flags, v4_error *err)
{
    memset(m, 0, sizeof *m);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (v4_config_load(path, &m->cfg, err))
        return -1;
    uint64_t seed;
    const int synth = v4_synth_marker_load(dir, &seed, err);
    if (synth < 0)
        return -1;
    if (synth && !(flags & V4_OPEN_EXPERTS_PAGED))
        return v4_err_set(err, V4_ERR_CONFIG, dir,
                          "the routed experts are synthetic (" V4_SYNTH_MARKER ", seed %llu; mkmodel --no-experts "
                          "wrote no expert tensors): run with --host-cache-bytes B (or V4_HOST_CACHE_BYTES) to page "
                          "them from the synthetic expert source",
                          (unsigned long long)seed);
    m->experts_synthetic = synth;
    if (v4_ckpt_open(dir, &m->ck, err))
        return -1;
    if (v4_weights_bind_ex(&m->cfg, m->ck, synth ? V4_BIND_NO_ROUTED : 0, &m->w, err)) {
        v4_ckpt_close(m->ck);
        m->ck = NULL;
        return -1;
    }
    if (!(flags & V4_OPEN_NO_PREPARE) && v4_weights_prepare(&m->w, err)) {
        v4_model_close(m);
        return -1;
    }
    return 0;
}

void v4_model_close(v4_model_files *m)
{
    if (!m)
        return;
    v4_weights_free(&m->w);
    if (m->ck)
        v4_ckpt_close(m->ck);
    m->ck = NULL;
}
