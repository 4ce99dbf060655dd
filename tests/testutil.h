/* testutil.h - tiny assertion helpers shared by the C tests (header-only).
 * A failed CHECK prints file:line and the message, counts the failure, and the test
 * exits non-zero at the end (TEST_DONE).  Exit code 77 = skipped (ctest SKIP_RETURN_CODE). */
#ifndef V4_TESTUTIL_H
#define V4_TESTUTIL_H

#include <stdio.h>
#include <stdlib.h>

static int t_failures, t_checks;

#define CHECK(cond, ...) do { t_checks++; if (!(cond)) { t_failures++; \
    fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
    fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

#define TEST_DONE() do { printf("%d checks, %d failed\n", t_checks, t_failures); \
    return t_failures ? 1 : (t_checks ? 0 : 1); } while (0)

static inline const char *t_env(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v && *v ? v : dflt;
}

/* A tiny-preset model of `seed` written by `$V4_BIN mkmodel` into $V4_TMP/name (path in
 * dir[cap]).  0, or -1 after a line on stderr naming the command. */
static inline int t_mkmodel_tiny(const char *name, int seed, char *dir, size_t cap)
{
    char cmd[9000];
    snprintf(dir, cap, "%s/%s", t_env("V4_TMP", "/tmp"), name);
    snprintf(cmd, sizeof cmd, "'%s' mkmodel --out '%s' --preset tiny --seed %d --force --no-sync >/dev/null 2>&1",
             t_env("V4_BIN", "build/v4fleet"), dir, seed);
    if (system(cmd) != 0) {
        fprintf(stderr, "mkmodel failed: %s\n", cmd);
        return -1;
    }
    return 0;
}

#endif
