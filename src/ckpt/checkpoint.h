/* ckpt/checkpoint.h - save and load a serial model's weights.
 *
 * Format (little-endian), one file:
 *   "MTCGPT1\n"
 *   text header, one "key value" per line: num_layers, hidden_size,
 *   num_heads, ffn_hidden_size, seq_length, max_position_embeddings,
 *   vocab_size, padded_vocab_size, iteration, tokenizer (data/
 *   serialization, "none" for token-id data), params COUNT TOTAL, then
 *   COUNT lines "param NAME DIM0 DIM1" in registry order, then "end\n";
 *   then TOTAL float32 values: each parameter's global tensor in registry
 *   (forward) order, row-major, linear weights as (out, in).
 * Written to PATH.tmp.<pid> and renamed, so a crash never leaves a
 * half-written file under the real name. Loading checks the magic, the
 * header, every name and shape against the registry and the exact file
 * size, and refuses mismatches with one line naming the difference.
 * Does not store optimizer state: the directory checkpoints of ckpt/dist.h
 * do (`mtc train --save DIR`). mtc_ckpt_read_info and mtc_ckpt_load also
 * accept such a directory (its latest iteration's weights). */
#ifndef MTC_CKPT_CHECKPOINT_H
#define MTC_CKPT_CHECKPOINT_H

#include <stdint.h>

#include "core/result.h"
#include "model/model.h"

#define MTC_CKPT_TOKENIZER_MAX 16384

typedef struct {
    mtc_model_config cfg; /* shapes only; dropout and init_std are not stored */
    int64_t iteration;
    char tokenizer[MTC_CKPT_TOKENIZER_MAX];
} mtc_ckpt_info;

mtc_result_t mtc_ckpt_save(const mtc_model *m, const char *path, int64_t iteration,
                           const char *tokenizer);
/* Reads only the header (to build a model of the right shape). */
mtc_result_t mtc_ckpt_read_info(const char *path, mtc_ckpt_info *info);
/* Loads the weights into m after checking the file matches m's registry. */
mtc_result_t mtc_ckpt_load(mtc_model *m, const char *path, mtc_ckpt_info *info);

#endif
