/* tests/comm/test_comm_errors.c - diagnosis instead of hangs, on shm
 * rank-threads: mismatched collectives (direct, ring p2p, and direct vs
 * ring) give INVALID_USAGE on both ranks naming both calls, ranks and the
 * group; a rank that skips a collective makes the others time out with a
 * report naming it; a failing rank aborts the others with REMOTE and launch
 * returns its error; forcing an algorithm that cannot run is refused with
 * the valid choices; bad MTC_COMM_ALGO specs are refused; a mismatch that
 * only the call board shows is found in a group of 150. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "core/timer.h"
#include "test.h"

typedef struct {
    mtc_algo_t a0, a1; /* algorithm forced on rank 0 / rank 1 (AUTO: none) */
} mismatch_arg;

static mtc_result_t r_mismatch(mtc_comm_t w, void *p) {
    const mismatch_arg *m = p;
    int r = mtc_comm_rank(w);
    mtc_comm_t tp;
    MTC_CHECK(mtc_comm_split(w, 0, r, "TENSOR_MODEL_PARALLEL_GROUP", &tp));
    mtc_comm_set_timeout(tp, 30);
    mtc_algo_t a = r == 0 ? m->a0 : m->a1;
    if (a != MTC_ALGO_AUTO) {
        mtc_comm_set_algo(tp, MTC_COLL_ALL_REDUCE, a);
        mtc_comm_set_algo(tp, MTC_COLL_ALL_GATHER, a);
    }
    float *x = calloc(2048, sizeof *x), *y = calloc(2048, sizeof *y);
    MTC_CHECK(mtc_barrier(tp)); /* seq 1 on tp */
    mtc_result_t rc = r == 0 ? mtc_all_reduce(x, y, 1024, MTC_DTYPE_F32, MTC_OP_SUM, tp)
                             : mtc_all_gather(x, y, 512, MTC_DTYPE_F32, tp);
    const char *d = mtc_error_detail();
    T_CHECKF(rc == MTC_ERR_INVALID_USAGE, "rank %d got %s", r, mtc_result_name(rc));
    T_CHECKF(strstr(d, "TENSOR_MODEL_PARALLEL_GROUP (seq 2)") &&
                 strstr(d, "rank 0 called all_reduce(count=1024, f32, sum)") &&
                 strstr(d, "rank 1 called all_gather(count=512, f32)"),
             "rank %d detail: %s", r, d);
    /* the group stays failed: the next call reports the same error */
    T_CHECK(mtc_barrier(tp) == MTC_ERR_INVALID_USAGE);
    free(x), free(y);
    mtc_comm_free(tp);
    return MTC_OK;
}

static mtc_result_t r_timeout(mtc_comm_t w, void *p) {
    (void)p;
    int r = mtc_comm_rank(w);
    int32_t v = 1, s = 0;
    MTC_CHECK(mtc_barrier(w)); /* with the default timeout: thread start-up may be slow */
    mtc_comm_set_timeout(w, 0.3);
    if (r == 2) return MTC_OK; /* skips the all_reduce */
    double t0 = mtc_time_s();
    mtc_result_t rc = mtc_all_reduce(&v, &s, 1, MTC_DTYPE_I32, MTC_OP_SUM, w);
    double dt = mtc_time_s() - t0;
    const char *d = mtc_error_detail();
    T_CHECKF(rc == MTC_ERR_TIMEOUT, "rank %d got %s", r, mtc_result_name(rc));
    T_CHECKF(dt > 0.25 && dt < 10, "timeout after %.2f s", dt);
    T_CHECKF(strstr(d, "WORLD") && strstr(d, "all_reduce(count=1, i32, sum)") &&
                 strstr(d, "rank 2 has not arrived"),
             "rank %d detail: %s", r, d);
    return MTC_OK;
}

/* A timeout in a group whose ranks are not their world ranks names the
 * member both ways, unmistakably ("rank 1 (world 3)" read as a world of 3):
 * world ranks 1 and 3 form ODD; world rank 3 (ODD's rank 1) skips. */
static mtc_result_t r_group_timeout(mtc_comm_t w, void *p) {
    (void)p;
    int r = mtc_comm_rank(w);
    mtc_comm_t odd = NULL;
    MTC_CHECK(mtc_comm_split(w, r % 2 ? 0 : -1, r, "ODD", &odd));
    MTC_CHECK(mtc_barrier(w));
    if (r != 1) {
        MTC_CHECK(mtc_barrier(w)); /* rank 3 stays until rank 1 has reported */
        mtc_comm_free(odd);
        return MTC_OK;
    }
    mtc_comm_set_timeout(odd, 0.3);
    int32_t v = 1, s = 0;
    mtc_result_t rc = mtc_all_reduce(&v, &s, 1, MTC_DTYPE_I32, MTC_OP_SUM, odd);
    const char *d = mtc_error_detail();
    T_CHECKF(rc == MTC_ERR_TIMEOUT && strstr(d, "ODD") &&
                 strstr(d, "group rank 1 (world rank 3) has not arrived"),
             "detail: %s", d);
    mtc_comm_free(odd);
    return mtc_barrier(w);
}

static mtc_result_t r_abort(mtc_comm_t w, void *p) {
    double *elapsed = p;
    int r = mtc_comm_rank(w);
    MTC_CHECK(mtc_barrier(w));
    if (r == 1) {
        usleep(50000);
        return mtc_error(MTC_ERR_IO, "disk on fire");
    }
    double t0 = mtc_time_s();
    float x[100] = {0}, y[100];
    mtc_result_t rc = mtc_all_reduce(x, y, 100, MTC_DTYPE_F32, MTC_OP_SUM, w);
    elapsed[r] = mtc_time_s() - t0;
    T_CHECKF(rc == MTC_ERR_REMOTE && strstr(mtc_error_detail(), "rank 1") &&
                 strstr(mtc_error_detail(), "disk on fire"),
             "rank %d: %s %s", r, mtc_result_name(rc), mtc_error_detail());
    return rc;
}

static mtc_result_t r_select(mtc_comm_t w, void *p) {
    (void)p;
    int r = mtc_comm_rank(w);
    /* one node: hier cannot run; forced, it is refused with the valid ones */
    mtc_comm_set_algo(w, MTC_COLL_ALL_REDUCE, MTC_ALGO_HIER);
    float x = 1, y = 0;
    mtc_result_t rc = mtc_all_reduce(&x, &y, 1, MTC_DTYPE_F32, MTC_OP_SUM, w);
    T_CHECKF(rc == MTC_ERR_INVALID_ARGUMENT && strstr(mtc_error_detail(), "hier") &&
                 strstr(mtc_error_detail(), "valid here: auto") &&
                 strstr(mtc_error_detail(), "direct"),
             "rank %d: %s", r, mtc_error_detail());
    T_CHECK(mtc_comm_choose(w, MTC_COLL_ALL_REDUCE, 1, MTC_DTYPE_F32) != MTC_ALGO_HIER);
    /* every algorithm runs when forced, with the same closed-form result */
    for (int a = MTC_ALGO_RING; a < MTC_ALGO_COUNT; a++) {
        mtc_comm_set_algo(w, MTC_COLL_ALL_REDUCE, (mtc_algo_t)a);
        T_CHECK((int)mtc_comm_get_algo(w, MTC_COLL_ALL_REDUCE) == a);
        float in[37], out[37];
        for (int i = 0; i < 37; i++)
            in[i] = (float)(r * 37 + i);
        rc = mtc_all_reduce(in, out, 37, MTC_DTYPE_F32, MTC_OP_SUM, w);
        if (a == MTC_ALGO_HIER || a == MTC_ALGO_NATIVE || a == MTC_ALGO_PAIRWISE) {
            T_CHECKF(rc == MTC_ERR_INVALID_ARGUMENT, "%s: %s", mtc_algo_name((mtc_algo_t)a),
                     mtc_result_name(rc));
            continue;
        }
        int n = mtc_comm_size(w), bad = 0;
        for (int i = 0; i < 37; i++)
            bad += out[i] != (float)(37 * n * (n - 1) / 2 + n * i);
        T_CHECKF(rc == MTC_OK && !bad, "%s: %s, %d wrong", mtc_algo_name((mtc_algo_t)a),
                 mtc_result_name(rc), bad);
    }
    return MTC_OK;
}

static mtc_result_t r_env_algo(mtc_comm_t w, void *p) {
    (void)p;
    T_CHECK(mtc_comm_get_algo(w, MTC_COLL_ALL_REDUCE) == MTC_ALGO_RING);
    T_CHECK(mtc_comm_get_algo(w, MTC_COLL_ALL_GATHER) == MTC_ALGO_AUTO);
    mtc_comm_t c; /* sub-communicators inherit the setting */
    MTC_CHECK(mtc_comm_split(w, 0, 0, "SUB", &c));
    T_CHECK(mtc_comm_get_algo(c, MTC_COLL_ALL_REDUCE) == MTC_ALGO_RING);
    T_CHECK(mtc_comm_choose(c, MTC_COLL_ALL_REDUCE, 8, MTC_DTYPE_F32) == MTC_ALGO_RING);
    mtc_comm_free(c);
    return MTC_OK;
}

/* A group larger than the board scan window (64 members per wake-up) and
 * than the 64 members below which sleep slices do not back off: the last
 * rank enters a ring all-gather (point-to-point waits) while all others
 * wait in the direct all-reduce's phase sync, which that rank never
 * reaches. Only the call board can tell (whichever side reads it first),
 * and every rank must get the mismatch naming the last rank's call, not a
 * timeout. */
#define BIG_GROUP 150
static mtc_result_t r_big_mismatch(mtc_comm_t w, void *p) {
    (void)p;
    int r = mtc_comm_rank(w);
    MTC_CHECK(mtc_barrier(w)); /* thread start-up with the default timeout */
    mtc_comm_set_timeout(w, 60);
    float x[64] = {0}, *y = calloc(64 * BIG_GROUP, sizeof *y);
    mtc_result_t rc;
    if (r == BIG_GROUP - 1) {
        mtc_comm_set_algo(w, MTC_COLL_ALL_GATHER, MTC_ALGO_RING);
        rc = mtc_all_gather(x, y, 64, MTC_DTYPE_F32, w);
    } else {
        mtc_comm_set_algo(w, MTC_COLL_ALL_REDUCE, MTC_ALGO_DIRECT);
        rc = mtc_all_reduce(x, y, 64, MTC_DTYPE_F32, MTC_OP_SUM, w);
    }
    const char *d = mtc_error_detail();
    T_CHECKF(rc == MTC_ERR_INVALID_USAGE, "rank %d got %s: %s", r, mtc_result_name(rc), d);
    T_CHECKF(strstr(d, "rank 149 called all_gather(count=64, f32)"), "rank %d detail: %s", r, d);
    free(y);
    return MTC_OK;
}

static mtc_result_t r_nothing(mtc_comm_t w, void *p) {
    (void)w, (void)p;
    return MTC_OK;
}

int main(void) {
    mtc_launch_opts o = {.backend = MTC_BACKEND_SHM, .world_size = 2, .pin_threads = -1};
    mismatch_arg cases[] = {{MTC_ALGO_AUTO, MTC_ALGO_AUTO},
                            {MTC_ALGO_RING, MTC_ALGO_RING},
                            {MTC_ALGO_RING, MTC_ALGO_DIRECT}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        double t0 = mtc_time_s();
        T_CHECK(mtc_launch(&o, r_mismatch, &cases[k]) == MTC_OK);
        T_CHECKF(mtc_time_s() - t0 < 5, "mismatch %zu detected after %.2f s", k, mtc_time_s() - t0);
    }
    o.world_size = 3;
    T_CHECK(mtc_launch(&o, r_timeout, NULL) == MTC_OK);
    o.world_size = 4;
    T_CHECK(mtc_launch(&o, r_group_timeout, NULL) == MTC_OK);
    o.world_size = BIG_GROUP;
    T_CHECK(mtc_launch(&o, r_big_mismatch, NULL) == MTC_OK);
    o.world_size = 3; /* r_abort keeps one time per rank */

    double elapsed[3] = {0};
    o.timeout_s = 60;
    mtc_result_t rc = mtc_launch(&o, r_abort, elapsed);
    T_CHECKF(rc == MTC_ERR_IO && strstr(mtc_error_detail(), "rank 1: disk on fire"),
             "launch: %s %s", mtc_result_name(rc), mtc_error_detail());
    T_CHECKF(elapsed[0] < 5 && elapsed[2] < 5, "abort noticed after %.2f / %.2f s", elapsed[0],
             elapsed[2]);

    for (int n = 2; n <= 5; n += 3) {
        o.world_size = n;
        T_CHECK(mtc_launch(&o, r_select, NULL) == MTC_OK);
    }
    const char *bad_specs[] = {"all_to_all=ring", "ringg", "all_reduce=direkt", "allreduce=ring"};
    for (size_t k = 0; k < 4; k++) {
        o.algo_spec = bad_specs[k];
        rc = mtc_launch(&o, r_nothing, NULL);
        T_CHECKF(rc == MTC_ERR_INVALID_ARGUMENT && strstr(mtc_error_detail(), "valid"), "%s: %s",
                 bad_specs[k], mtc_error_detail());
    }
    o.algo_spec = "ring"; /* a preference: operations without a ring keep the selector */
    T_CHECK(mtc_launch(&o, r_nothing, NULL) == MTC_OK);
    o.algo_spec = "all_reduce=ring"; /* the CLI's MTC_COMM_ALGO (cli_launch_defaults) */
    T_CHECK(mtc_launch(&o, r_env_algo, NULL) == MTC_OK);
    setenv("MTC_COMM_ALGO", "ringg", 1); /* the CLI's edge reads it; the library never does */
    o.algo_spec = NULL;
    T_CHECK(mtc_launch(&o, r_nothing, NULL) == MTC_OK);
    unsetenv("MTC_COMM_ALGO");
    setenv("MTC_COMM_TIMEOUT", "soon",
           1); /* the CLI's edge refuses it; the library never reads it */
    o.algo_spec = NULL;
    o.timeout_s = 0;
    T_CHECK(mtc_launch(&o, r_nothing, NULL) == MTC_OK);
    unsetenv("MTC_COMM_TIMEOUT");
    return T_DONE();
}
