/* pp/inflight.c - the most microbatches a pipeline rank holds between a
 * microbatch's forward and its backward, per model chunk, in the schedule's
 * order: the activation slots train allocates and the planner counts.
 * Relies on pp/schedule.c; does not communicate. */
#include <stdlib.h>

#include "pp/schedule.h"

mtc_result_t pp_schedule_peak_inflight(const pp_schedule_config *sc, int rank, int nchunks,
                                       int *peak) {
    for (int k = 0; k < nchunks; k++)
        peak[k] = 1;
    if (sc->pp <= 1) return MTC_OK;
    pp_op *ops = calloc((size_t)pp_schedule_max_ops(sc), sizeof *ops);
    int *live = calloc((size_t)nchunks, sizeof(int));
    mtc_result_t rc = ops && live ? MTC_OK : mtc_error(MTC_ERR_OUT_OF_MEMORY, "schedule of a rank");
    pp_schedule_counts n = {0};
    if (rc == MTC_OK) rc = pp_schedule_build(ops, &n, sc, rank);
    for (int i = 0; rc == MTC_OK && i < n.nops; i++) {
        int k = ops[i].chunk;
        live[k] += ops[i].kind == PP_OP_FORWARD ? 1 : -1;
        if (live[k] > peak[k]) peak[k] = live[k];
    }
    free(ops), free(live);
    return rc;
}
