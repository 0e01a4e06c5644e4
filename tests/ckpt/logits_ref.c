/* tests/ckpt/logits_ref.c - mtc's side of the ONNX export test
 * (onnx_cli.sh): the checkpoint's own forward, as `mtc generate` runs it.
 *   mtc_logits_ref CKPT logits "ID ID ..."   one line of V logits per position
 *   mtc_logits_ref CKPT ids TEXT             the saved tokenizer's ids of TEXT
 * Not a test by itself (the script compares its output with onnxruntime's
 * and transformers.js'). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/checkpoint.h"
#include "data/tokenizer.h"
#include "model/model.h"

int main(int argc, char **argv) {
    if (argc != 4 || (strcmp(argv[2], "logits") && strcmp(argv[2], "ids"))) {
        fprintf(stderr, "usage: %s CKPT logits \"ID ...\" | ids TEXT\n", argv[0]);
        return 2;
    }
    mtc_ckpt_info info;
    if (mtc_ckpt_read_info(argv[1], &info) != MTC_OK) {
        fprintf(stderr, "%s\n", mtc_error_detail());
        return 1;
    }
    if (!strcmp(argv[2], "ids")) {
        data_tok *tok = NULL;
        data_tok_ids ids = {0};
        if (data_tok_deserialize(info.tokenizer, &tok) != MTC_OK ||
            data_tok_encode(tok, NULL, argv[3], strlen(argv[3]), &ids, NULL) != MTC_OK) {
            fprintf(stderr, "%s\n", mtc_error_detail());
            return 1;
        }
        for (size_t k = 0; k < ids.n; k++)
            printf("%s%d", k ? " " : "", ids.ids[k]);
        printf("\n");
        data_tok_ids_free(&ids);
        data_tok_free(tok);
        return 0;
    }
    int ids[4096], T = 0;
    for (char *s = argv[3], *e; T < 4096; s = e) {
        long v = strtol(s, &e, 10);
        if (e == s) break;
        ids[T++] = (int)v;
    }
    info.cfg.hidden_dropout = info.cfg.attention_dropout = 0;
    mtc_model *m = NULL;
    if (T < 1 || T > info.cfg.seq_length || mtc_model_init(&info.cfg, 1, 1, NULL, &m) != MTC_OK ||
        mtc_ckpt_load(m, argv[1], &info) != MTC_OK) {
        fprintf(stderr, "%d ids (at most %d): %s\n", T, info.cfg.seq_length, mtc_error_detail());
        return 1;
    }
    mtc_model_pass pass = {0};
    mtc_model_forward(m, 0, ids, NULL, 1, T, &pass);
    const float *lo = mtc_model_logits(m);
    for (int t = 0; t < T; t++)
        for (int v = 0; v < info.cfg.vocab_size; v++)
            printf("%.9g%c", (double)lo[(size_t)t * info.cfg.padded_vocab_size + v],
                   v + 1 < info.cfg.vocab_size ? ' ' : '\n');
    mtc_model_free(m);
    return 0;
}
