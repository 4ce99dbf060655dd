/* constraint_opts.h - the output-constraint flags the command-line tools share
 * (`v4fleet generate`; docs/structured-outputs.md "From the command line"):
 *   --json-schema FILE   a JSON Schema (FILE "-" = stdin)
 *   --json-object        any JSON object
 *   --regex R            an ECMA-262 regex the whole answer matches
 *   --choice FILE        a JSON array of strings: the answer is one of them
 *   --grammar FILE       a context-free grammar in GBNF (docs/grammar.md "GBNF")
 *   --compact            JSON without whitespace between tokens
 * At most one constraint; the text is read when the flag is taken, so a missing or
 * unreadable file is a usage error naming it.
 *
 * Ownership: v4_constraint_opts owns the text it read (v4_constraint_opts_free).
 * Thread: the calling thread.
 */
#ifndef V4_CONSTRAINT_OPTS_H
#define V4_CONSTRAINT_OPTS_H

#include <stddef.h>

#include "worker/grammar/grammar.h"

typedef struct v4_constraint_opts {
    int on;
    v4g_kind kind;
    char *text;                 /* malloc'd, NUL-terminated */
    size_t len;
    int compact;
    const char *flag;           /* the flag it came from (messages name it) */
} v4_constraint_opts;

/* argv[*i] one of the flags above: 1 taken (*i advanced past its value), 0 not ours,
 * -1 usage error (printed to stderr as "v4fleet CMD: ..."). */
int v4_constraint_opts_take(v4_constraint_opts *o, int argc, char **argv, int *i, const char *cmd);
/* The usage lines of the flags (for a command's --help). */
const char *v4_constraint_opts_usage(void);
void v4_constraint_opts_free(v4_constraint_opts *o);
/* The whole of a file (path "-": stdin) as a NUL-terminated malloc'd string; NULL when it
 * cannot be opened or read, or memory runs out (errno says). */
char *v4_read_text_file(const char *path, size_t *len);

#endif
