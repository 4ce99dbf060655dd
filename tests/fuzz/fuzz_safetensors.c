/* fuzz_safetensors.c - libFuzzer harness for the safetensors header validator.
 *
 * Design: the fuzzer input is a whole file image; it goes straight to
 * v4_st_parse_header() (which must reject anything malformed without reading past
 * the buffer), and an accepted header is sanity-checked (sorted, inside the data
 * area, byte counts consistent) and freed.  Built only with -DV4_FUZZ=ON (clang,
 * -fsanitize=fuzzer,address,undefined); run it with scripts/fuzz.sh.
 * Ownership: the header is freed before returning; no global mutable state.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cache/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_header(const v4_st_header *h, size_t size)
{
    for (size_t i = 0; i < h->n_tensors; i++) {
        const v4_tensor *t = &h->tensors[i];
        if (i && strcmp(h->tensors[i - 1].name, t->name) >= 0)
            abort();   /* not sorted or duplicate */
        if (t->offset + t->nbytes > h->data_len || 8 + h->header_len + h->data_len != size)
            abort();   /* outside the data area */
        if ((uint64_t)v4_tensor_numel(t) * v4_dtype_size(t->dtype) != t->nbytes)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    v4_st_header h;
    v4_error err;
    v4_err_clear(&err);
    if (v4_st_parse_header(data, size, "fuzz", &h, &err) == 0) {
        check_header(&h, size);
        v4_st_header_free(&h);
    } else if (!err.msg[0]) {
        abort();       /* every rejection must say why */
    }
    return 0;
}
