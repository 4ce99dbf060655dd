/* device_setting.h - the syntax of the device settings: V4_DEVICE / --device (cpu |
 * cuda | cuda:N) and V4_CUDA_MODE (auto | resident | hybrid).  Shared by the worker
 * settings (config/worker_config.c, checked at start), the engine commands' flags
 * (worker/tools/cli_util.c) and the engine assembly (worker/serve/engine.c: V4_DEVICE,
 * the mode choice).  Whether the device exists is known only when it is opened.  Header-only.  Thread: any (pure).
 */
#ifndef V4_DEVICE_SETTING_H
#define V4_DEVICE_SETTING_H

#include <stdlib.h>
#include <string.h>

/* "cpu" -> 0 with *cuda_index = -1; "cuda" / "cuda:N" (N 0..255) -> 0 with *cuda_index
 * = 0 / N; anything else -1.  cuda_index may be NULL. */
static inline int v4_parse_device(const char *s, int *cuda_index)
{
    if (!s)
        return -1;
    if (!strcmp(s, "cpu")) {
        if (cuda_index)
            *cuda_index = -1;
        return 0;
    }
    if (strncmp(s, "cuda", 4))
        return -1;
    long idx = 0;
    if (s[4] == ':') {
        char *end;
        idx = strtol(s + 5, &end, 10);
        if (end == s + 5 || *end || idx < 0 || idx > 255)
            return -1;
    } else if (s[4]) {
        return -1;
    }
    if (cuda_index)
        *cuda_index = (int)idx;
    return 0;
}

/* 1 when m is a CUDA mode: auto, resident, hybrid, or "" (= auto). */
static inline int v4_cuda_mode_ok(const char *m)
{
    return !*m || !strcmp(m, "auto") || !strcmp(m, "resident") || !strcmp(m, "hybrid");
}

#endif
