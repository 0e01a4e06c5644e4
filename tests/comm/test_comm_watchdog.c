/* tests/comm/test_comm_watchdog.c - deadlines and the watchdog on shm
 * rank-threads.
 *
 *   frozen    rank 1 of 3 sleeps 30 s outside the communication layer
 *             while ranks 0 and 2 wait for it in an all-reduce (timeout
 *             1 s), for the direct, ring and tree algorithms: the waiters
 *             time out at the deadline (or stop when the first does), sleeping (the process's CPU
 * time over their wait is far below wall time x 2 waiters), and mtc_launch returns MTC_ERR_TIMEOUT
 * within deadline + grace (3 s) + 3 s without waiting for rank 1, with a report naming rank 1 as
 * stuck and the group, call and sequence number the waiters waited in. hook      the same in a
 * child process with the launch's abort hook: the hook gets the report and ends the process (exit
 * 42). default   the launch's timeout_s is the deadline; the library reads no MTC_COMM_TIMEOUT (the
 * CLI's edge does).
 * CPU use is a correctness property here (a waiter that spins uses ~100%
 * of a core), not a speed threshold: the bound is a quarter of it. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "core/timer.h"
#include "test.h"

#define DEADLINE_S 1.0

static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

typedef struct {
    mtc_algo_t algo;
    double wait_s[3], cpu_s[3];
    mtc_result_t rc[3];
    char detail[3][1024];
} frozen_arg;

static mtc_result_t r_frozen(mtc_comm_t w, void *p) {
    frozen_arg *a = p;
    int r = mtc_comm_rank(w);
    if (a->algo != MTC_ALGO_AUTO) mtc_comm_set_algo(w, MTC_COLL_ALL_REDUCE, a->algo);
    MTC_CHECK(mtc_barrier(w)); /* seq 1, default timeout: thread start-up may be slow */
    mtc_comm_set_timeout(w, DEADLINE_S);
    if (r == 1) {
        struct timespec d = {30, 0}; /* frozen: far past the deadline */
        nanosleep(&d, NULL);
        return MTC_OK;
    }
    float x[64] = {0}, y[64];
    double t0 = mtc_time_s(), c0 = cpu_s();
    mtc_result_t rc = mtc_all_reduce(x, y, 64, MTC_DTYPE_F32, MTC_OP_SUM, w);
    a->wait_s[r] = mtc_time_s() - t0;
    a->cpu_s[r] = cpu_s() - c0;
    a->rc[r] = rc;
    snprintf(a->detail[r], sizeof a->detail[r], "%s", mtc_error_detail());
    return rc;
}

static void check_frozen(mtc_algo_t algo) {
    static frozen_arg a; /* rank 1 outlives the launch: its argument must stay valid */
    memset(&a, 0, sizeof a);
    a.algo = algo;
    mtc_launch_opts o = {.backend = MTC_BACKEND_SHM, .world_size = 3, .pin_threads = 0};
    double t0 = mtc_time_s();
    mtc_result_t rc = mtc_launch(&o, r_frozen, &a);
    double dt = mtc_time_s() - t0;
    const char *d = mtc_error_detail(), *name = mtc_algo_name(algo);
    T_CHECKF(rc == MTC_ERR_TIMEOUT, "%s: launch gave %s", name, mtc_result_name(rc));
    T_CHECKF(dt < DEADLINE_S + 3 + 3, "%s: launch returned after %.2f s", name, dt);
    T_CHECKF(strstr(d, "rank 1 is stuck") && strstr(d, "outside the communication layer") &&
                 strstr(d, "timeout in WORLD (seq 2)") &&
                 strstr(d, "all_reduce(count=64, f32, sum)"),
             "%s: launch detail: %s", name, d);
    for (int r = 0; r < 3; r += 2) {
        /* its own timeout, or the first waiter's, which stops it at once */
        T_CHECKF(a.rc[r] == MTC_ERR_TIMEOUT ||
                     (a.rc[r] == MTC_ERR_REMOTE && strstr(a.detail[r], "failed with TIMEOUT")),
                 "%s: rank %d got %s: %s", name, r, mtc_result_name(a.rc[r]), a.detail[r]);
        T_CHECKF(a.wait_s[r] > DEADLINE_S * 0.9 && a.wait_s[r] < DEADLINE_S + 2,
                 "%s: rank %d waited %.2f s", name, r, a.wait_s[r]);
        /* CPU of the whole process (both waiters) over this waiter's wait */
        T_CHECKF(a.cpu_s[r] < 0.25 * a.wait_s[r] * 2, "%s: rank %d: %.3f s CPU over %.2f s", name,
                 r, a.cpu_s[r], a.wait_s[r]);
        /* the cause is rank 1: named as not arrived, or at the end of the chain */
        T_CHECKF(strstr(a.detail[r], "rank 1 has not arrived") ||
                     strstr(a.detail[r], "ends at world rank 1, which is in no mtc call"),
                 "%s: rank %d detail: %s", name, r, a.detail[r]);
    }
}

static void hook_exit(mtc_result_t rc, const char *report, void *arg) {
    int fd = *(int *)arg;
    char line[1200];
    int n = snprintf(line, sizeof line, "%d %s", (int)rc, report);
    if (n > 0 && write(fd, line, (size_t)n) < 0) _exit(43);
    _exit(42);
}

static void check_hook(void) {
    int fds[2];
    T_CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        static int fd;
        fd = fds[1];
        static frozen_arg a;
        a.algo = MTC_ALGO_AUTO;
        mtc_launch_opts o = {.backend = MTC_BACKEND_SHM,
                             .world_size = 3,
                             .pin_threads = 0,
                             .abort_hook = hook_exit,
                             .abort_arg = &fd};
        mtc_launch(&o, r_frozen, &a);
        _exit(1); /* the hook did not end the process */
    }
    close(fds[1]);
    double t0 = mtc_time_s();
    int st = 0, done = 0;
    while (!done && mtc_time_s() - t0 < 20) {
        done = waitpid(pid, &st, WNOHANG) == pid;
        if (!done) usleep(20000);
    }
    if (!done) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
    char buf[1300] = "";
    ssize_t n = read(fds[0], buf, sizeof buf - 1);
    buf[n > 0 ? n : 0] = 0;
    close(fds[0]);
    double dt = mtc_time_s() - t0;
    T_CHECKF(done && WIFEXITED(st) && WEXITSTATUS(st) == 42, "hook: child status %d after %.1f s",
             st, dt);
    T_CHECKF(dt < DEADLINE_S + 3 + 3, "hook: the process ended after %.2f s", dt);
    T_CHECKF(atoi(buf) == (int)MTC_ERR_TIMEOUT && strstr(buf, "rank 1 is stuck"), "hook got: %s",
             buf);
}

static mtc_result_t r_timeout_of(mtc_comm_t w, void *p) {
    double *dt = p;
    MTC_CHECK(mtc_barrier(w));
    if (mtc_comm_rank(w) == 1) return MTC_OK; /* never arrives */
    double t0 = mtc_time_s();
    mtc_result_t rc = mtc_barrier(w);
    *dt = mtc_time_s() - t0;
    return rc == MTC_ERR_TIMEOUT ? MTC_OK : mtc_error(MTC_ERR_INTERNAL, "got %d", (int)rc);
}

static void check_default(void) {
    setenv("MTC_COMM_TIMEOUT", "0.05", 1); /* not the library's: the CLI reads it */
    double dt = 0;
    mtc_launch_opts o = {
        .backend = MTC_BACKEND_SHM, .world_size = 2, .pin_threads = 0, .timeout_s = 0.4};
    T_CHECK(mtc_launch(&o, r_timeout_of, &dt) == MTC_OK);
    T_CHECKF(dt > 0.3 && dt < 3, "opts 0.4 s under MTC_COMM_TIMEOUT=0.05: timed out after %.2f s",
             dt);
    o.timeout_s = 0.2;
    T_CHECK(mtc_launch(&o, r_timeout_of, &dt) == MTC_OK);
    T_CHECKF(dt > 0.15 && dt < 0.35, "opts 0.2 s: timed out after %.2f s", dt);
    unsetenv("MTC_COMM_TIMEOUT");
}

int main(void) {
    check_hook(); /* first: fork before this process has threads */
    check_default();
    check_frozen(MTC_ALGO_AUTO);
    check_frozen(MTC_ALGO_RING);
    check_frozen(MTC_ALGO_TREE);
    return T_DONE();
}
