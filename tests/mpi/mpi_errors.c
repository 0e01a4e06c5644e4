/* tests/mpi/mpi_errors.c - what an MPI job does when ranks disagree or go
 * away; run by tests/mpi/errors.sh under mpirun, which checks the exit
 * status and the report on stderr.
 *
 *   mismatch  rank 0 all-reduces 4 elements, the others 8: every rank must
 *             fail with "collective mismatch in WORLD" naming both calls,
 *             and the job must end (not hang).
 *   timeout   the last rank skips a collective: its peers must fail with
 *             "timeout in WORLD" naming the rank waited for (timeout 2 s).
 *   dies      the last rank exits in the middle of the job while the others
 *             wait in a collective: mpirun must end the job.
 *   gone      the last rank ends the job as a failing rank does (its
 *             farewell to the others) but stays silent for 5 s first, its
 *             watchdog stopped, as a rank whose process MPI_Abort already
 *             took: the others time out waiting for it and their reports
 *             must say it "has failed already", not blame it.
 *   ok        a few correct collectives (the control: exit status 0).
 * Relies on mtc_launch choosing the mpi backend under mpirun. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#ifdef MTC_HAVE_MPI        /* a build without MPI (TSan) still builds this, never runs it */
#include "comm/coll_mpi.h" /* the farewell and the watchdog, for "gone" */
#endif

static const char *mode;

static mtc_result_t rank_fn(mtc_comm_t world, void *arg) {
    (void)arg;
    int r = mtc_comm_rank(world), p = mtc_comm_size(world);
    float buf[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    MTC_CHECK(mtc_all_reduce(buf, buf, 8, MTC_DTYPE_F32, MTC_OP_SUM, world)); /* healthy start */
    if (!strcmp(mode, "mismatch"))
        return mtc_all_reduce(buf, buf, r == 0 ? 4 : 8, MTC_DTYPE_F32, MTC_OP_SUM, world);
    if (!strcmp(mode, "timeout")) {
        if (r == p - 1) return MTC_OK; /* never arrives */
        return mtc_all_reduce(buf, buf, 8, MTC_DTYPE_F32, MTC_OP_SUM, world);
    }
    if (!strcmp(mode, "dies")) {
        if (r == p - 1) {
            fprintf(stderr, "rank %d: exiting on purpose\n", r);
            exit(3);
        }
        return mtc_all_reduce(buf, buf, 8, MTC_DTYPE_F32, MTC_OP_SUM, world);
    }
    if (!strcmp(mode, "gone")) {
        if (r == p - 1) {
#ifdef MTC_HAVE_MPI
            comm_mpi_watch_farewell(MTC_ERR_INTERNAL);
            comm_mpi_watch_stop();
#endif
            nanosleep(&(struct timespec){5, 0}, NULL);
            return mtc_error(MTC_ERR_INTERNAL, "rank %d: failing on purpose", r);
        }
        return mtc_all_reduce(buf, buf, 8, MTC_DTYPE_F32, MTC_OP_SUM, world);
    }
    for (int i = 0; i < 8; i++)
        buf[i] = (float)(r + 1);
    MTC_CHECK(mtc_all_reduce(buf, buf, 8, MTC_DTYPE_F32, MTC_OP_SUM, world));
    for (int i = 0; i < 8; i++)
        if (buf[i] != (float)(p * (p + 1) / 2))
            return mtc_error(MTC_ERR_INTERNAL, "rank %d: all_reduce gave %g, want %d", r, buf[i],
                             p * (p + 1) / 2);
    return MTC_OK;
}

int main(int argc, char **argv) {
    mode = argc > 1 ? argv[1] : "ok";
    mtc_launch_opts o = {.backend = MTC_BACKEND_AUTO, .timeout_s = 2};
    mtc_result_t rc = mtc_launch(&o, rank_fn, NULL);
    if (rc != MTC_OK) {
        fprintf(stderr, "mpi_errors %s: %s: %s\n", mode, mtc_result_name(rc), mtc_error_detail());
        return 1;
    }
    printf("mpi_errors %s: ok\n", mode);
    return 0;
}
