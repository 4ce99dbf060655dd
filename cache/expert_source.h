/* expert_source.h - where expert blocks come from: the interface between the expert
 * cache (expert_cache.h) and the stores (the expert pack, or the original safetensors
 * checkpoint).
 *
 * A source delivers whole blocks (expert_block.h layout, block_bytes each, the same for
 * every (layer, expert)) into caller buffers aligned to V4_XBLOCK_ALIGN.  read() is
 * blocking and may be called from several I/O threads at once.  A block that fails its
 * checksum is an error with code V4_ERR_CORRUPT whose message names the layer, the
 * expert, the file and the byte offset; the source remembers it (quarantine): later
 * reads of that block fail at once with the same error, other blocks are unaffected.
 *
 * Ownership: the source owns its files and state; close() frees it.  Thread: read() from
 * any number of threads concurrently; close() once, after all reads returned.
 */
#ifndef V4_EXPERT_SOURCE_H
#define V4_EXPERT_SOURCE_H

#include <stddef.h>
#include <stdint.h>

#include "../config/error.h"

typedef struct v4_xsource v4_xsource;

typedef struct v4_xsource_ops {
    /* Read block (layer, expert) into dst (block_bytes, V4_XBLOCK_ALIGN-aligned). */
    int (*read)(v4_xsource *s, int layer, int expert, void *dst, v4_error *err);
    void (*close)(v4_xsource *s);
} v4_xsource_ops;

struct v4_xsource {
    const v4_xsource_ops *ops;
    size_t block_bytes;
    int n_layers, n_experts;
    const char *kind;               /* "pack" | "safetensors" | ... (for logs) */
};

static inline int v4_xsource_read(v4_xsource *s, int layer, int expert, void *dst, v4_error *err)
{
    return s->ops->read(s, layer, expert, dst, err);
}

static inline void v4_xsource_close(v4_xsource *s)
{
    if (s)
        s->ops->close(s);
}

#endif
