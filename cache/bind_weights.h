/* bind_weights.h - connect a checkpoint's tensors to the decode path's weight structs.
 *
 * v4_weights_bind() looks up every tensor the config implies (V4-Flash naming, spec
 * §3.2), checks its dtype and shape (and the shape of its E8M0 scale grid), and
 * fills a v4_weights whose matrices point into the checkpoint's mmap.  The first
 * problem is reported with the tensor name and what was expected.  Routing tables are
 * range-checked (every tid2eid entry must be a valid expert id).
 *
 * Ownership: w borrows ck's mapped bytes: close the checkpoint only after
 * v4_weights_free(w).  Thread: call from one thread; the result is read-only.
 */
#ifndef V4_BIND_WEIGHTS_H
#define V4_BIND_WEIGHTS_H

#include "../kernels/v4/weights.h"
#include "safetensors.h"

int v4_weights_bind(const v4_config *cfg, const v4_ckpt *ck, v4_weights *w, v4_error *err);

/* flags of v4_weights_bind_ex.  V4_BIND_NO_ROUTED: the routed experts are not looked up
 * (a model whose experts come from elsewhere, e.g. synthetic ones, expert_synth.h):
 * every layer's experts[] gets matrices with their type and shape but NULL weight and
 * scale pointers, so they can be counted and sized, never read - the decode path must
 * get them from an expert provider. */
enum { V4_BIND_NO_ROUTED = 1 };
int v4_weights_bind_ex(const v4_config *cfg, const v4_ckpt *ck, int flags, v4_weights *w, v4_error *err);

#endif
