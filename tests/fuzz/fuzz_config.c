/* tests/fuzz/fuzz_config.c - small JSON and text configurations read from
 * files: a machine description (`mtc plan --machine FILE`,
 * plan/machine.c), the model section of a checkpoint's metadata
 * (ckpt/state.c), and the tokenizer text forms stored with a model
 * (data/tok.c, data/tokenizer.c). Input = the text. */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "ckpt/state.h"
#include "data/data.h"
#include "data/tokenizer.h"
#include "fuzz.h"
#include "plan/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = 0;

    mtc_plan_machine m;
    (void)mtc_plan_machine_parse(text, "machine.json", &m);

    cJSON *j = cJSON_Parse(text);
    if (j) {
        mtc_model_config c;
        const cJSON *model = cJSON_GetObjectItem(j, "model");
        if (mtc_ckpt_config_parse(model ? model : j, "metadata.json", &c) == MTC_OK)
            (void)mtc_model_config_validate(&c);
        cJSON_Delete(j);
    }

    /* a BPE form names files: only the self-contained forms here */
    if (!strchr(text, '/')) {
        data_tok *tok = NULL;
        if (data_tok_deserialize(text, &tok) == MTC_OK) {
            data_tok_text s = {0};
            (void)data_tok_serialize(tok, &s);
            data_tok_text_free(&s);
            data_tok_free(tok);
        }
        data_tokenizer old;
        (void)data_tokenizer_deserialize(&old, text);
    }
    free(text);
    return 0;
}
