/* tests/mpi/mpi_stall.c - a rank that stops (SIGSTOP) in the middle of a
 * stream of collectives; run by tests/mpi/stall.sh under mpirun, which
 * checks how and when the job ends.
 *
 * Every rank loops over barrier, all_reduce, all_gather, broadcast,
 * reduce_scatter, all_to_all and reduce (whatever MTC_COMM_ALGO forces, the
 * MPI library's own collectives included). The last rank starts a thread
 * that stops the whole process with SIGSTOP after a random 50-400 ms, so the
 * stop lands anywhere: between calls, in the entry check, inside MPI's own
 * non-blocking collective. Before stopping it prints
 *   mpi_stall: rank R stops at T ms   (CLOCK_REALTIME, for the script)
 * and writes its pid to $MTC_STALL_PIDFILE (so the script can kill exactly
 * that process if it outlives the job). A rank whose call fails prints
 *   mpi_stall: rank r waited W s using C s of CPU
 * (process CPU time over the failed call, getrusage) and returns the error,
 * so launch reports it and aborts the MPI job. The collective timeout is
 * 2 s (launch options). Nothing is checked here: the script does it. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "core/timer.h"

static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

static void *stopper(void *arg) {
    unsigned ms = *(unsigned *)arg;
    struct timespec d = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&d, NULL);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    fprintf(stderr, "mpi_stall: rank %s stops at %lld ms\n", getenv("OMPI_COMM_WORLD_RANK"),
            (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000);
    fflush(stderr);
    kill(getpid(), SIGSTOP);
    return NULL;
}

static mtc_result_t one(int step, float *a, float *b, int r, int p, mtc_comm_t w) {
    switch (step % 7) {
    case 0: return mtc_barrier(w);
    case 1: return mtc_all_reduce(a, b, 8, MTC_DTYPE_F32, MTC_OP_SUM, w);
    case 2: return mtc_all_gather(a, b, 4, MTC_DTYPE_F32, w);
    case 3: return mtc_broadcast(a, 16, MTC_DTYPE_F32, step % p, w);
    case 4: return mtc_reduce_scatter(a, b, 4, MTC_DTYPE_F32, MTC_OP_SUM, w);
    case 5: return mtc_all_to_all(a, b, 2, MTC_DTYPE_F32, w);
    default: return mtc_reduce(a, r == 0 ? b : NULL, 8, MTC_DTYPE_F32, MTC_OP_MAX, 0, w);
    }
}

static mtc_result_t rank_fn(mtc_comm_t w, void *arg) {
    (void)arg;
    int r = mtc_comm_rank(w), p = mtc_comm_size(w);
    float a[64] = {0}, b[64] = {0};
    MTC_CHECK(mtc_barrier(w));
    static unsigned ms;
    pthread_t th;
    if (r == p - 1) {
        const char *pf = getenv("MTC_STALL_PIDFILE");
        FILE *f = pf ? fopen(pf, "w") : NULL;
        if (f) fprintf(f, "%d\n", (int)getpid()), fclose(f);
        srand((unsigned)time(NULL) ^ (unsigned)getpid() * 2654435761u);
        ms = 50 + (unsigned)(rand() % 351);
        if (pthread_create(&th, NULL, stopper, &ms) != 0)
            return mtc_error(MTC_ERR_SYSTEM, "cannot start the stopper thread");
        pthread_detach(th);
    }
    double t_end = mtc_time_s() + 20;
    for (int step = 0; mtc_time_s() < t_end; step++) {
        double t0 = mtc_time_s(), c0 = cpu_s();
        mtc_result_t rc = one(step, a, b, r, p, w);
        if (rc != MTC_OK) {
            fprintf(stderr, "mpi_stall: rank %d waited %.2f s using %.3f s of CPU\n", r,
                    mtc_time_s() - t0, cpu_s() - c0);
            return rc;
        }
    }
    return mtc_error(MTC_ERR_INTERNAL, "rank %d: 20 s of collectives and no stall", r);
}

int main(void) {
    /* the algorithm stall.sh forces, read at this program's edge as the CLI does */
    mtc_launch_opts o = {
        .backend = MTC_BACKEND_AUTO, .timeout_s = 2, .algo_spec = getenv("MTC_COMM_ALGO")};
    mtc_result_t rc = mtc_launch(&o, rank_fn, NULL);
    if (rc != MTC_OK) {
        fprintf(stderr, "mpi_stall: %s: %s\n", mtc_result_name(rc), mtc_error_detail());
        return 1;
    }
    return 0;
}
