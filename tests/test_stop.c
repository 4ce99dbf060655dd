/* test_stop.c - stop strings across chunk boundaries: the emitted text is exactly
 * the text before the first stop string, whatever the chunking. */
#include <string.h>

#include "testutil.h"
#include "worker/serve/stop.h"

typedef struct { char buf[1024]; size_t len; } sink;

static void emit(void *ud, const char *t, size_t n)
{
    sink *s = ud;
    memcpy(s->buf + s->len, t, n);
    s->len += n;
    s->buf[s->len] = 0;
}

/* Feed text in chunks of `step` bytes; returns the emitted text and whether it stopped. */
static int run(const char *const *stops, int n, const char *text, size_t step, sink *out)
{
    v4_error err = {0};
    v4_stop *s = v4_stop_create(stops, n, &err);
    out->len = 0;
    out->buf[0] = 0;
    int hit = 0;
    for (size_t i = 0; i < strlen(text) && !hit; i += step) {
        size_t c = strlen(text) - i < step ? strlen(text) - i : step;
        hit = v4_stop_feed(s, text + i, c, emit, out);
    }
    if (!hit)
        v4_stop_flush(s, emit, out);
    v4_stop_free(s);
    return hit;
}

int main(void)
{
    const char *stops[] = {"\n\nUser:", "END", "ENDLESS"};
    struct { const char *text, *want; int hit; } cases[] = {
        {"hello world", "hello world", 0},
        {"answer: 42\n\nUser: more", "answer: 42", 1},
        {"abc END def", "abc ", 1},
        {"partial EN at the end", "partial EN at the end", 0},
        {"ends with EN", "ends with EN", 0},
        {"\n\nUser", "\n\nUser", 0},
        {"xENDLESS", "x", 1},
        {"", "", 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (size_t step = 1; step <= 7; step++) {
            sink out;
            int hit = run(stops, 3, cases[c].text, step, &out);
            CHECK(hit == cases[c].hit && !strcmp(out.buf, cases[c].want),
                  "case %zu step %zu: got '%s' (hit %d)", c, step, out.buf, hit);
        }
    sink out;
    CHECK(run(NULL, 0, "no stops at all", 3, &out) == 0 && !strcmp(out.buf, "no stops at all"), "no stops");
    const char *empty[] = {""};
    v4_error err = {0};
    CHECK(v4_stop_create(empty, 1, &err) == NULL && strstr(err.msg, "empty"), "empty stop rejected");
    TEST_DONE();
}
