/* model/mtp.h - multi-token prediction (--mtp-num-layers D), as Megatron-LM
 * core_v0.18.0's multi_token_prediction.py and gpt_model.py wire it: after
 * the main model's final norm h_0 = norm_f(decoder(x)), depth k = 1..D
 *
 *   e_k  = embedding(tokens shifted left by k, 0 past the end) (+ dropout)
 *   x_k  = eh_proj([enorm_k(e_k) | hnorm_k(h_{k-1})])      (C, 2C), no bias
 *   h_k  = final_norm_k(transformer_layer_k(x_k))
 *   loss_k = mean over the positions with a label of xent(head(h_k), labels
 *            shifted left by k)
 *
 * with the shared embedding and output head (the main model's wte / output
 * layer). The objective adds mtp_loss_scaling_factor / D x sum_k loss_k,
 * each microbatch's loss_k a mean over its B (T - k) labelled tokens,
 * averaged over the microbatches and data-parallel ranks as the main loss
 * (Megatron's MTPLossAutoScaler with main_loss_backward_scale 1 /
 * num_microbatches). Depth k's transformer layer is model layer
 * num_layers + k - 1 (its parameters, activations, dropout keys and MoE
 * kind, the last decoder layer's, follow from that index).
 *
 * Tensor and sequence parallelism as Megatron's: the norms replicated
 * (their gradients partial under SP), eh_proj column-parallel with its
 * output gathered over TP and, under SP, scattered back to the rank's
 * positions. The depths run on the chunk with the loss, or on Megatron's
 * standalone MTP stage (mtc_model_chunk_opts.mtp_standalone), which sends
 * [h_0 | h_1 .. h_D] on to the loss's chunk for the heads; the embedding
 * copy there is in the embedding group (model/family.c, grid/).
 * --recompute-method uniform recomputes the depths' layers as Megatron's
 * _checkpointed_forward does (model.c's nrec covers them); block leaves
 * them alone, as Megatron's does.
 * Context parallelism as Megatron's CP roll_tensor: the shifted tokens
 * and labels of a rank's rows come from the microbatch's whole rows,
 * all-gathered over CP (model/mtp.c mtp_cp_rows).
 * Limitations: no inference use. */
#ifndef MTC_MODEL_MTP_H
#define MTC_MODEL_MTP_H

#include "model/model_internal.h"

/* Megatron's rules on the MTP flags (D >= 0, a factor >= 0, rope or no
 * position embedding, D below the sequence length). */
mtc_result_t model_mtp_validate(const mtc_model_config *c);
/* Floats of one slot's MTP activations. */
size_t model_mtp_slot_floats(const mtc_model *m);
/* The depths' forward from the slot's final-norm output (after the main
 * head): each depth's summed labelled token losses added to
 * m->mtp_loss_sum; with pass->loss_scale > 0 also the heads' gradients.
 * comm: the embedding's, eh_proj's, the layers' and the head's collectives
 * over TP. */
mtc_result_t model_mtp_forward(mtc_model *m, int slot, const int *tokens, const int *targets, int B,
                               int T, const mtc_model_pass *pass);
/* The depths' backward, last depth first; adds d(objective)/d(h_0) into
 * the slot's dlnf and the depths' parameter gradients (and wte's) into
 * m->grads. */
mtc_result_t model_mtp_backward(mtc_model *m, int slot, const int *tokens, const int *targets,
                                int B, int T, float loss_scale, const mtc_model_pass *pass);

/* The loss's chunk after Megatron's standalone MTP stage: its input holds
 * [h_0 | h_1 .. h_D]; the shared head on each h_k with the labels shifted
 * by k, the losses added to m->mtp_loss_sum (with pass->loss_scale > 0 the
 * heads' gradients kept for the backward), after the main head on h_0. */
mtc_result_t model_mtp_heads_forward(mtc_model *m, int slot, const int *tokens, const int *targets,
                                     int B, int T, const mtc_model_pass *pass);
/* Their backward: d(h_k) into states 1..D of the gradient buffer (the
 * chunk's input gradient; the caller puts d(h_0) in state 0). */
mtc_result_t model_mtp_heads_backward(mtc_model *m, int slot, const int *tokens, const int *targets,
                                      int B, int T, float loss_scale);

#endif
