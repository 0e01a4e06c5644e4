/* pp/layout_mtp.c - Megatron's standalone MTP stage in the pipeline split
 * (pp/layout.h): the stage with the 'm's before the loss's sends
 * [h_0 | h_1 .. h_D] on, so the messages from it to the loss's stage are
 * 1 + D hidden states (pp_layout_stage.out_states):
 *
 *   stages   ... | t t | m m | (empty) | L
 *   states        1     1+D    1+D
 *
 * the executor's per-boundary sizes, the MTP stage's pipeline rank (its wte
 * copy joins EMBEDDING_GROUP) and a line naming the messages, all read off
 * pp_layout_build. Relies on pp/layout.c. Does not communicate. */
#include <stdio.h>
#include <stdlib.h>

#include "pp/layout.h"

mtc_result_t pp_layout_message_counts(size_t **counts, size_t *max, size_t per_state,
                                      const pp_layout_args *a, int num_layers, int pp, int vpp) {
    *counts = NULL, *max = per_state;
    if (vpp < 1) vpp = 1;
    int S = pp * vpp;
    pp_layout_stage *st = calloc((size_t)S, sizeof *st);
    if (!st) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "pipeline split");
    mtc_result_t rc = pp_layout_build(st, a, num_layers, pp, vpp);
    int wide = 0;
    for (int s = 0; rc == MTC_OK && s < S - 1; s++)
        wide |= st[s].out_states > 1;
    if (rc == MTC_OK && wide) {
        *counts = malloc((size_t)(S - 1) * sizeof(size_t));
        if (!*counts) rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "pipeline message sizes");
        for (int s = 0; rc == MTC_OK && s < S - 1; s++) {
            (*counts)[s] = per_state * (size_t)st[s].out_states;
            if ((*counts)[s] > *max) *max = (*counts)[s];
        }
    }
    free(st);
    return rc;
}

int pp_layout_mtp_standalone_rank(const pp_layout_args *a, int num_layers, int pp, int vpp) {
    if (!a || !a->layout || a->mtp_num_layers <= 0 || pp < 1) return -1;
    if (vpp < 1) vpp = 1;
    int S = pp * vpp, r = -1;
    pp_layout_stage *st = calloc((size_t)S, sizeof *st);
    if (st && pp_layout_build(st, a, num_layers, pp, vpp) == MTC_OK)
        for (int s = 0; s < S - 1; s++)
            if (st[s].num_mtp) r = s % pp;
    free(st);
    return r;
}

void pp_layout_describe_messages(char *buf, size_t len, const pp_layout_args *a, int num_layers,
                                 int pp, int vpp) {
    if (len) buf[0] = 0;
    if (vpp < 1) vpp = 1;
    int S = pp * vpp, ms = -1;
    pp_layout_stage *st = calloc((size_t)S, sizeof *st);
    if (st && pp_layout_build(st, a, num_layers, pp, vpp) == MTC_OK)
        for (int s = 0; s < S - 1; s++)
            if (st[s].num_mtp) ms = s;
    char hs[48] = "[h_0 | h_1]";
    if (ms >= 0 && st[ms].num_mtp > 1)
        snprintf(hs, sizeof hs, "[h_0 | h_1 .. h_%d]", st[ms].num_mtp);
    if (ms >= 0 && len)
        snprintf(buf, len,
                 "messages: virtual stage %d (pp rank %d, Megatron's standalone MTP stage) on to "
                 "the loss's stage %d carry %s, %d hidden states each way (activations and "
                 "their gradients)",
                 ms, ms % pp, S - 1, hs, st[ms].out_states);
    free(st);
}
