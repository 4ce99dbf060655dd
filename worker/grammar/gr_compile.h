/* gr_compile.h - the constraint compilers of worker/grammar/ (internal): each emits its
 * constraint into a gr_builder (gr_internal.h) with the start symbol set.
 *   gr_schema_emit: JSON Schema and json_object (gr_schema.c, gr_schema_types.c)
 * Ownership: the builder is the caller's; nothing else is kept.  Thread: any (no state).
 */
#ifndef V4_GR_COMPILE_H
#define V4_GR_COMPILE_H

#include <jansson.h>

#include "worker/grammar/gr_internal.h"
#include "worker/grammar/grammar.h"

/* schema NULL: any JSON object (json_object).  Errors: err->where = the JSON pointer. */
int gr_schema_emit(gr_builder *b, json_t *schema, v4_error *err);
/* The grammar inside a constraint (for the matcher). */
gr_grammar *gr_constraint_grammar(v4g_constraint *c);

#endif
