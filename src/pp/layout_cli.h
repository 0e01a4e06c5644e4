/* pp/layout_cli.h - the pipeline split flags for a command's argument
 * table (core/args.h): PP_LAYOUT_CLI_ARGS(f) rows writing into a
 * pp_layout_cli, and their resolution into pp_layout_args (pp/layout.h)
 * with Megatron's one-line refusals of values that are not counts. The
 * rules that need num-layers, pp and vpp are pp_layout_validate's. */
#ifndef MTC_PP_LAYOUT_CLI_H
#define MTC_PP_LAYOUT_CLI_H

#include "core/args.h"
#include "pp/layout.h"

typedef struct {
    int first, last; /* -1 = not given */
    int account_embedding, account_loss;
    const char *layout;
} pp_layout_cli;

#define PP_LAYOUT_CLI_DEFAULTS                                                                     \
    { -1, -1, 0, 0, NULL }

#define PP_LAYOUT_CLI_ARGS(f)                                                                      \
    {"decoder-first-pipeline-num-layers",                                                          \
     NULL,                                                                                         \
     MTC_ARG_INT,                                                                                  \
     &(f).first,                                                                                   \
     "N",                                                                                          \
     "uneven pipeline: N layers on the first pp rank, the rest spread over the others",            \
     0},                                                                                           \
        {"decoder-last-pipeline-num-layers",                                                       \
         NULL,                                                                                     \
         MTC_ARG_INT,                                                                              \
         &(f).last,                                                                                \
         "N",                                                                                      \
         "uneven pipeline: N layers on the last pp rank",                                          \
         0},                                                                                       \
        {"account-for-embedding-in-pipeline-split",                                                \
         NULL,                                                                                     \
         MTC_ARG_FLAG,                                                                             \
         &(f).account_embedding,                                                                   \
         NULL,                                                                                     \
         "count the embedding as one layer of the first stage's even share",                       \
         0},                                                                                       \
        {"account-for-loss-in-pipeline-split",                                                     \
         NULL,                                                                                     \
         MTC_ARG_FLAG,                                                                             \
         &(f).account_loss,                                                                        \
         NULL,                                                                                     \
         "count the loss as one layer of the last stage's even share",                             \
         0},                                                                                       \
    {                                                                                              \
        "pipeline-model-parallel-layout", NULL, MTC_ARG_STRING, &(f).layout, "S",                  \
            "stages written out, e.g. \"Et*3|(tt|)*29,m|L\": E embedding, t layer, m MTP layer, "  \
            "L loss, | between stages in virtual stage order (vpp = stages / pp), x*n and (..)*n " \
            "repeat",                                                                              \
            0                                                                                      \
    }

/* Refuses --decoder-first/last-pipeline-num-layers <= 0 with Megatron's
 * message (the value -1 means "not given" only when the flag is absent). */
static inline mtc_result_t pp_layout_cli_resolve(const pp_layout_cli *f, int first_seen,
                                                 int last_seen, pp_layout_args *out) {
    if (first_seen && f->first <= 0)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "num_layers_in_first_pipeline_stage must be larger than 0 "
                         "(--decoder-first-pipeline-num-layers %d)",
                         f->first);
    if (last_seen && f->last <= 0)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "num_layers_in_last_pipeline_stage must be larger than 0 "
                         "(--decoder-last-pipeline-num-layers %d)",
                         f->last);
    *out = (pp_layout_args){.first_num_layers = first_seen ? f->first : 0,
                            .last_num_layers = last_seen ? f->last : 0,
                            .account_for_embedding = f->account_embedding,
                            .account_for_loss = f->account_loss,
                            .layout = f->layout};
    return MTC_OK;
}

#endif
