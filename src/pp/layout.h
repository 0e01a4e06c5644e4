/* pp/layout.h - which decoder layers (and the embedding E, the loss L, the
 * MTP layers m) each pipeline stage builds: the one place every consumer
 * (train's model chunks, the banner, `mtc schedule`, `mtc plan`, checkpoints
 * through the chunks' layer ranges) asks.
 *
 * What: Megatron-LM core_v0.18.0's four ways of splitting num_layers over
 * the pp x vpp virtual stages (transformer_block.py get_num_layers_to_build,
 * transformer_layer.py get_transformer_layer_offset,
 * pipeline_parallel_layer_layout.py):
 *   even                     every stage num_layers / (pp * vpp) layers
 *   --decoder-first/last-pipeline-num-layers
 *                            the first (last) pp rank's layers given, the
 *                            rest spread evenly over the middle ranks,
 *                            every rank's share split evenly over its vpp
 *                            chunks
 *   --account-for-embedding/loss-in-pipeline-split
 *                            the embedding (loss) counted as one layer of
 *                            the first (last) stage's even share
 *   --pipeline-model-parallel-layout "Et*3|(tt|)*29,m|L"
 *                            stages written out (| separates stages in
 *                            virtual stage order, stage s = vp * pp + rank;
 *                            x*n and (...)*n repeat; commas are cosmetic;
 *                            empty stages allowed)
 * with Megatron's validation and its messages, plus one rule of mtc's own:
 * every layer is built exactly once (a split that would drop or duplicate a
 * layer is refused naming the stage and the count).
 *
 * Conventions: stage s holds decoder layers [first_layer, first_layer +
 * num_layers), in virtual stage order (layer ids increase with s). As in
 * Megatron, the embedding is built on stage 0 and the loss (final norm and
 * output layer) on stage pp*vpp-1, wherever empty stages put E and L in a
 * layout string. MTP ('m'): Megatron's rules (the count is mtp_num_layers,
 * all in one stage, after every decoder layer, on a rank's last virtual
 * stage, hence not on the first rank but for its last virtual stage). A
 * stage with the 'm's before the loss's is Megatron's standalone MTP stage
 * (validate_layer_layout's mtp_standalone): it runs the final norm and the
 * depths and sends [h_0 | h_1 .. h_D] on, through any empty stages, to the
 * loss's stage, which runs the shared head on each (in_states /
 * out_states). Without a layout string the MTP layers are on the last
 * stage, as Megatron's.
 * The standalone MTP stage's helpers are in pp/layout_mtp.c. Relies on
 * core/result.h. Does not communicate or print. */
#ifndef MTC_PP_LAYOUT_H
#define MTC_PP_LAYOUT_H

#include <stddef.h>

#include "core/result.h"

/* the pipeline split flags; zero-initialised = the even split */
typedef struct pp_layout_args {
    int first_num_layers;      /* --decoder-first-pipeline-num-layers, 0 = not given */
    int last_num_layers;       /* --decoder-last-pipeline-num-layers, 0 = not given */
    int account_for_embedding; /* --account-for-embedding-in-pipeline-split */
    int account_for_loss;      /* --account-for-loss-in-pipeline-split */
    const char *layout;        /* --pipeline-model-parallel-layout, NULL = not given */
    int mtp_num_layers;        /* --mtp-num-layers: a layout string's 'm' count must match */
} pp_layout_args;

typedef struct {
    int first_layer, num_layers; /* decoder layers [first_layer, first_layer + num_layers) */
    int has_embedding, has_loss; /* stage 0 / the last stage */
    int num_mtp;               /* MTP layers (model/mtp.h): the loss's stage or a standalone one */
    int in_states, out_states; /* (B, T, C) hidden states in the stage's input / output
                                  message: 1, or 1 + D between a standalone MTP stage and the
                                  loss */
} pp_layout_stage;

/* A stage's part around Megatron's standalone MTP stage, as
 * mtc_model_chunk_opts.mtp_standalone takes it: 1 the MTP stage (an 'm'
 * stage without the loss), 2 a stage after it (its input the 1 + D
 * states), 0 neither. */
static inline int pp_layout_mtp_role(const pp_layout_stage *s) {
    return s->num_mtp && !s->has_loss ? 1 : s->in_states > 1 ? 2 : 0;
}

/* Longest layout string once its repetitions are expanded. */
#define PP_LAYOUT_MAX_SYMBOLS 65536

/* 1 when any flag departs from the even split. */
int pp_layout_given(const pp_layout_args *a);

/* The number of stages (pp * vpp) a layout string writes out; refuses
 * characters other than E t m L | ( ) * digits and commas. */
mtc_result_t pp_layout_num_stages(int *nstages, const char *layout);

/* The decoder layers ('t') a layout string writes out. */
mtc_result_t pp_layout_num_layers(int *num_layers, const char *layout);

/* Megatron's validation of the split of num_layers over pp ranks x vpp
 * chunks (vpp <= 1: not interleaved; with a layout string vpp must be its
 * stage count / pp), then every layer exactly once. */
mtc_result_t pp_layout_validate(const pp_layout_args *a, int num_layers, int pp, int vpp);

/* All pp * vpp stages in virtual stage order (validates first). */
mtc_result_t pp_layout_build(pp_layout_stage *stages, const pp_layout_args *a, int num_layers,
                             int pp, int vpp);

/* Stage `stage` (= vp * pp + pp rank) alone. */
mtc_result_t pp_layout_stage_get(pp_layout_stage *out, const pp_layout_args *a, int num_layers,
                                 int pp, int vpp, int stage);

/* The pipeline executor's message sizes (pp/executor.h stage_count): with
 * a standalone MTP stage *counts (malloc'd, pp*vpp-1 entries, the caller
 * frees) gets per_state x each stage's out_states and *max the largest;
 * otherwise *counts = NULL and *max = per_state. */
mtc_result_t pp_layout_message_counts(size_t **counts, size_t *max, size_t per_state,
                                      const pp_layout_args *a, int num_layers, int pp, int vpp);

/* The pipeline rank of Megatron's standalone MTP stage (an 'm' stage
 * before the loss's), or -1 (none, or an invalid split). */
int pp_layout_mtp_standalone_rank(const pp_layout_args *a, int num_layers, int pp, int vpp);

/* A line on the messages of a standalone MTP stage ("" without one):
 * "messages: virtual stage 1 (pp rank 1) on to the loss's stage 2 carry
 * [h_0 | h_1 .. h_2], 3 hidden states each way (activations and their
 * gradients)"; truncated to len. */
void pp_layout_describe_messages(char *buf, size_t len, const pp_layout_args *a, int num_layers,
                                 int pp, int vpp);

/* Megatron's pretty_repr table of a validated split (rows "PP rank 0",
 * "PP rank 1-13", columns "VPP rank k" when vpp > 1; stages as
 * "embedding,decoder*3", "(empty stage)"), lines joined with '\n', no
 * trailing newline; truncated to len. */
mtc_result_t pp_layout_describe(char *buf, size_t len, const pp_layout_args *a, int num_layers,
                                int pp, int vpp);

/* A fix for num_layers that the even split of pp x vpp refuses, for a
 * refusal message: " (for an uneven split: e.g. --decoder-first-pipeline-
 * num-layers 9)" or "" when no uneven flags fit. */
void pp_layout_suggest(char *buf, size_t len, int num_layers, int pp, int vpp);

/* A 32-bit FNV-1a hash of a layout string (0 for NULL), for comparing the
 * flags MPI ranks parsed on their own. */
unsigned pp_layout_fingerprint(const char *layout);

/* One line naming the split: "even", "first 3, last 5", "account for
 * embedding+loss" or the layout string. */
void pp_layout_name(char *buf, size_t len, const pp_layout_args *a);

#endif
