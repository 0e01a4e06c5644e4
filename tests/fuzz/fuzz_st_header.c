/* tests/fuzz/fuzz_st_header.c - a safetensors header checked as a whole
 * (ckpt/hf_check.c), the rules HF import applies before reading any
 * tensor. Input = 8 bytes of little-endian data-section size, then the
 * header JSON. An accepted header must keep its promise: every tensor's
 * [b0, b1) inside the data section. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "ckpt/hf_check.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 8) return 0;
    uint64_t bytes = 0;
    for (int k = 0; k < 8; k++)
        bytes |= (uint64_t)data[k] << (8 * k);
    cJSON *h = cJSON_ParseWithLength((const char *)data + 8, size - 8);
    if (h && ckpt_st_header_check(h, (size_t)bytes, "model.safetensors") == MTC_OK) {
        const cJSON *e;
        cJSON_ArrayForEach(e, h) {
            if (!strcmp(e->string, "__metadata__")) continue;
            const cJSON *o = cJSON_GetObjectItem(e, "data_offsets");
            double b1 = cJSON_GetArrayItem(o, 1)->valuedouble;
            if (cJSON_GetArrayItem(o, 0)->valuedouble > b1 || b1 > (double)bytes) abort();
        }
    }
    cJSON_Delete(h);
    return 0;
}
