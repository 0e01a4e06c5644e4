/* ckpt/state.h - what a directory checkpoint knows about a model: the
 * pieces of a registry parameter's TP shard (boxes of its global tensor),
 * the model configuration as JSON, and loading a whole serial model (for
 * `mtc generate` and `mtc export`).
 *
 * A parameter's local shard (registry.h) is, by split rule:
 *   none      one box, the whole tensor
 *   dim 1     (rows, cols/tp) at column r*cols/tp
 *   dim 0     one box per fused row block b: (rows_b/tp, cols) at row
 *             start_b + r*rows_b/tp, the boxes back to back in the shard
 * so any range of local elements is a few (box, flat range) pieces.
 * Tensor keys: the registry name for weights, "optimizer.exp_avg.NAME" and
 * "optimizer.exp_avg_sq.NAME" for AdamW's moments.
 * Relies on ckpt/dist.h and the registry; does not communicate. */
#ifndef MTC_CKPT_STATE_H
#define MTC_CKPT_STATE_H

#include <cjson/cJSON.h>

#include "ckpt/checkpoint.h"
#include "ckpt/dist.h"
#include "model/model.h"

/* Append the pieces of local elements [a, b) of p's shard on TP rank
 * tp_rank (of reg->tp); base points at local element a. The vocabulary
 * tensors may be read from a checkpoint padded differently. */
mtc_result_t mtc_ckpt_param_pieces(mtc_ckpt_pieces *l, const mtc_registry *reg, const mtc_param *p,
                                   int tp_rank, const char *key, float *base, size_t a, size_t b);
/* "optimizer.exp_avg." + name etc. into buf. which: 0 = weights, 1 = m, 2 = v. */
void mtc_ckpt_key(char *buf, size_t len, int which, const char *name);

/* The configuration as a JSON object (shapes and family knobs). */
cJSON *mtc_ckpt_config_json(const mtc_model_config *c);
/* Back (dropout / init_std zero); FORMAT naming `path` when a field lacks. */
mtc_result_t mtc_ckpt_config_parse(const cJSON *j, const char *path, mtc_model_config *c);
/* INVALID_ARGUMENT naming the first field where `run` differs from the
 * checkpoint's `saved` (the padded vocabulary may differ: TP pads it; the
 * sequence length is not a shape). */
mtc_result_t mtc_ckpt_config_check(const mtc_model_config *saved, const mtc_model_config *run,
                                   const char *path);

/* Info of the checkpoint in directory dir (the tracker's iteration); its
 * tokenizer form names the copies in the iteration folder (tok_files.h). */
mtc_result_t mtc_ckpt_dist_read_info(const char *dir, mtc_ckpt_info *info);
/* Loads the weights of a serial model (tp 1, one chunk) from dir. */
mtc_result_t mtc_ckpt_dist_load_model(mtc_model *m, const char *dir);
/* The same for iteration `step` (-1: the tracker's); a step with no
 * iteration folder is INVALID_ARGUMENT naming it. */
mtc_result_t mtc_ckpt_dist_read_info_at(const char *dir, int64_t step, mtc_ckpt_info *info);
mtc_result_t mtc_ckpt_dist_load_model_at(mtc_model *m, const char *dir, int64_t step);
/* Saves a serial model as DIR/iter_0000000 without optimizer state (what
 * `mtc import` makes: --load DIR then trains it in any layout). */
mtc_result_t mtc_ckpt_dist_save_model(const mtc_model *m, const char *dir, const char *tokenizer);

#endif
