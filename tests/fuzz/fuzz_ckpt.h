/* tests/fuzz/fuzz_ckpt.h - loads a checkpoint the way `mtc generate` and
 * `mtc export` do: the header (mtc_ckpt_read_info), a model of that shape,
 * the weights (mtc_ckpt_load), then the stored tokenizer's text form.
 * Shapes whose model would not fit a fuzzing budget are read but not
 * built (a real model that large is legitimate, just not here). Included
 * by fuzz_ckpt.c and fuzz_ckpt_dist.c. */
#ifndef MTC_TESTS_FUZZ_CKPT_H
#define MTC_TESTS_FUZZ_CKPT_H

#include <stdio.h>
#include <string.h>

#include "ckpt/checkpoint.h"
#include "data/tokenizer.h"

/* an upper bound of the floats a model of this shape allocates, or -1 */
static double fuzz_model_floats(const mtc_model_config *c) {
    double C = c->hidden_size, F = c->ffn_hidden_size, L = c->num_layers;
    double V = c->padded_vocab_size > c->vocab_size ? c->padded_vocab_size : c->vocab_size;
    double T =
        c->seq_length > c->max_position_embeddings ? c->seq_length : c->max_position_embeddings;
    double HS = c->kv_channels > 0 ? c->kv_channels : 64, NH = c->num_heads;
    if (C < 0 || F < 0 || L < 0 || V < 0 || T < 0 || NH < 0) return -1;
    double layer = 4 * C * (NH + 2) * HS + 3 * C * F + 16 * C + T * T * NH;
    return 4 * (V * C + T * C + L * layer + 16 * T * (C + F + V));
}

static void fuzz_load_ckpt(const char *path) {
    mtc_ckpt_info info;
    if (mtc_ckpt_read_info(path, &info) != MTC_OK) return;
    double floats = fuzz_model_floats(&info.cfg);
    mtc_model *m = NULL;
    if (floats >= 0 && floats < 4e6 && mtc_model_init(&info.cfg, 1, 1, NULL, &m) == MTC_OK) {
        mtc_ckpt_info again;
        (void)mtc_ckpt_load(m, path, &again);
        mtc_model_free(m);
    }
    /* a BPE tokenizer names its files: only the self-contained forms here */
    if (!strchr(info.tokenizer, '/')) {
        data_tok *tok = NULL;
        if (data_tok_deserialize(info.tokenizer, &tok) == MTC_OK) data_tok_free(tok);
    }
}

#endif
