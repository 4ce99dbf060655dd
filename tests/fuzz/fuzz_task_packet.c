/* fuzz_task_packet.c - libFuzzer harness for the task packet parser and the records
 * built from it (checklist R24): any body must parse or fail with a named code, and
 * building the error record / result must not crash or leak. */
#include <stdint.h>
#include <stdlib.h>

#include "worker/serve/result_packet.h"
#include "worker/serve/task_packet.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    v4_task t;
    v4_task_error e;
    if (v4_task_parse((const char *)data, size, 65536, &t, &e)) {
        if (!e.code || !e.where[0])
            abort();
        free(v4_invalid_record_json(&e, t.id, "fuzz", (const char *)data, size));
    } else {
        if (!t.id || t.has_messages + t.has_prompt + t.has_input_ids != 1)
            abort();
        v4_result_info ri = {.id = t.id, .model = t.model, .worker = "fuzz", .metadata = t.metadata,
                             .text = t.prompt, .text_len = 0, .token_ids = t.input_ids,
                             .n_tokens = t.n_input_ids, .finish_reason = "stop"};
        free(v4_result_json(&ri));
    }
    v4_task_free(&t);
    return 0;
}
