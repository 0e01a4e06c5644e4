/* tests/fuzz/fuzz_text.c - text sources (data/text.c) with the byte and
 * char tokenizers, and the char tokenizer of the newer handle
 * (data/tok.c) round-tripping the text. Input = the text file. */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "data/tokenizer.h"
#include "fuzz.h"
#include "fuzz_source.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[4096];
    fuzz_write("corpus.txt", data, size, path, sizeof path);
    fuzz_read_source(path, "char", 4);
    fuzz_read_source(path, "byte", 4);
    fuzz_clean();

    data_tok *tok = NULL;
    if (data_tok_init_char((const char *)data, size, &tok) != MTC_OK) return 0;
    data_tok_ids ids = {0};
    data_tok_text back = {0};
    size_t unknown = 0;
    if (data_tok_encode(tok, NULL, (const char *)data, size, &ids, &unknown) == MTC_OK &&
        data_tok_decode(tok, ids.ids, ids.n, &back, &unknown) == MTC_OK)
        /* any bytes round-trip through the char tokenizer of their corpus */
        MTC_ASSERT(back.n == size && (size == 0 || !memcmp(back.s, data, size)));
    data_tok_text ser = {0};
    if (data_tok_serialize(tok, &ser) == MTC_OK) {
        data_tok *again = NULL;
        MTC_ASSERT(data_tok_deserialize(ser.s, &again) == MTC_OK);
        MTC_ASSERT(data_tok_vocab_size(again) == data_tok_vocab_size(tok));
        data_tok_free(again);
    }
    data_tok_text_free(&ser);
    data_tok_text_free(&back);
    data_tok_ids_free(&ids);
    data_tok_free(tok);
    return 0;
}
