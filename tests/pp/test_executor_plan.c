/* tests/pp/test_executor_plan.c - the pipeline executor's plans, checked
 * without threads by a model of synchronous point-to-point.
 *
 * For every valid (pp, vpp, M, group size, forward_only) in a range, all
 * ranks' plans are replayed together the way the shm backend runs them: a
 * send completes only when the peer has posted the matching receive (MPI_Ssend
 * semantics), the two halves of a phase are posted at once (mtc_sendrecv), and
 * messages on one channel from one rank to another match in order. The test
 * fails if the ranks deadlock, if the k-th message on a channel carries a
 * different (microbatch, consuming stage) than the receiver expects, or if a
 * rank's compute order is not pp_schedule_build's. Invalid configurations
 * must be refused with Megatron's text. */
#include <stdlib.h>
#include <string.h>

#include "pp/executor.h"
#include "test.h"

typedef struct {
    int step, phase; /* current exchange step and phase (0 act, 1 grad) */
    int done_send, done_recv;
} sim_rank;

/* The transfers of rank r's current phase. */
static void phase_ops(const pp_plan *p, const sim_rank *s, const pp_xfer **snd,
                      const pp_xfer **rcv) {
    const pp_step *st = &p->steps[s->step];
    *snd = s->phase == 0 ? &st->send_next : &st->send_prev;
    *rcv = s->phase == 0 ? &st->recv_prev : &st->recv_next;
}

/* Move rank r to its next phase that has a transfer (or to the end). */
static void sim_settle(const pp_plan *p, sim_rank *s) {
    for (;;) {
        if (s->step >= p->nsteps) return;
        const pp_step *st = &p->steps[s->step];
        if (st->kind != PP_STEP_EXCHANGE) {
            s->step++, s->phase = 0;
            continue;
        }
        const pp_xfer *snd, *rcv;
        phase_ops(p, s, &snd, &rcv);
        int need_s = snd->slot >= 0 && !s->done_send, need_r = rcv->slot >= 0 && !s->done_recv;
        if (need_s || need_r) return;
        s->done_send = s->done_recv = 0;
        if (s->phase == 0)
            s->phase = 1;
        else
            s->step++, s->phase = 0;
    }
}

/* Replays all ranks; returns 0 on success, fills why on failure. */
static int sim_run(const pp_plan *plans, int pp, char *why, size_t len) {
    sim_rank *s = calloc((size_t)pp, sizeof *s);
    for (int r = 0; r < pp; r++)
        sim_settle(&plans[r], &s[r]);
    int result = 0;
    for (;;) {
        int progress = 0, all_done = 1;
        for (int r = 0; r < pp; r++) {
            if (s[r].step >= plans[r].nsteps) continue;
            all_done = 0;
            const pp_xfer *snd, *rcv;
            phase_ops(&plans[r], &s[r], &snd, &rcv);
            if (snd->slot < 0 || s[r].done_send) continue;
            /* phase 0 sends to next, phase 1 to prev; the peer must be in the
             * same phase (same channel) with its receive from us pending */
            int peer = s[r].phase == 0 ? (r + 1) % pp : (r - 1 + pp) % pp;
            if (s[peer].step >= plans[peer].nsteps || s[peer].phase != s[r].phase) continue;
            const pp_xfer *psnd, *prcv;
            phase_ops(&plans[peer], &s[peer], &psnd, &prcv);
            if (prcv->slot < 0 || s[peer].done_recv) continue;
            if (prcv->microbatch != snd->microbatch || prcv->stage != snd->stage) {
                snprintf(why, len,
                         "rank %d sends (mb %d, stage %d) on channel %d but rank %d expects "
                         "(mb %d, stage %d)",
                         r, snd->microbatch, snd->stage, s[r].phase, peer, prcv->microbatch,
                         prcv->stage);
                result = 1;
                goto out;
            }
            s[r].done_send = 1, s[peer].done_recv = 1;
            progress = 1;
        }
        for (int r = 0; r < pp; r++) {
            int before = s[r].step * 2 + s[r].phase;
            sim_settle(&plans[r], &s[r]);
            if (s[r].step * 2 + s[r].phase != before) progress = 1;
        }
        if (all_done) break;
        if (!progress) {
            int n = snprintf(why, len, "deadlock:");
            for (int r = 0; r < pp && n < (int)len; r++)
                n += snprintf(why + n, len - (size_t)n, " rank %d at step %d/%d phase %d (%s);", r,
                              s[r].step, plans[r].nsteps, s[r].phase,
                              s[r].step < plans[r].nsteps && plans[r].steps[s[r].step].call
                                  ? plans[r].steps[s[r].step].call
                                  : "-");
            result = 1;
            break;
        }
    }
out:
    free(s);
    return result;
}

/* Compute steps of a plan equal pp_schedule_build's ops. */
static int same_order(const pp_plan *p, const pp_schedule_config *cfg, int rank) {
    pp_op *ops = malloc((size_t)pp_schedule_max_ops(cfg) * sizeof *ops);
    pp_schedule_counts c;
    int ok = pp_schedule_build(ops, &c, cfg, rank) == MTC_OK, i = 0;
    for (int s = 0; ok && s < p->nsteps; s++) {
        const pp_step *st = &p->steps[s];
        if (st->kind == PP_STEP_EXCHANGE) continue;
        ok = i < c.nops && (int)ops[i].kind == (int)st->kind &&
             ops[i].microbatch == st->microbatch && ops[i].chunk == st->chunk;
        i++;
    }
    free(ops);
    return ok && i == c.nops;
}

/* Count of transfers by kind over all ranks: every send has one receive. */
static void count_xfers(const pp_plan *plans, int pp, int *sends, int *recvs) {
    *sends = *recvs = 0;
    for (int r = 0; r < pp; r++)
        for (int s = 0; s < plans[r].nsteps; s++) {
            const pp_step *st = &plans[r].steps[s];
            if (st->kind != PP_STEP_EXCHANGE) continue;
            *sends += (st->send_next.slot >= 0) + (st->send_prev.slot >= 0);
            *recvs += (st->recv_prev.slot >= 0) + (st->recv_next.slot >= 0);
        }
}

/* The executor's timeline under blocking p2p (pp_plan_simulate) against the
 * schedule's dependency simulation (free asynchronous transfers): it runs the
 * same orders under more constraints, so it can only be longer; Megatron's
 * warm-up lengths leave enough slack that it never is (for 1F1B every p2p
 * call waits only for data the next compute step needs anyway; interleaved
 * sends a forward's output after the following backward, but the consumer
 * runs that forward two steady iterations later, W shrinking by 2 per
 * rank). A plan change that costs time fails here. */
static void check_timeline(const pp_plan *plans, const pp_schedule_config *cfg) {
    int pp = cfg->pp, max_ops = pp_schedule_max_ops(cfg);
    pp_op *ops = calloc((size_t)pp * (size_t)max_ops, sizeof *ops);
    pp_sim_span *spans = calloc((size_t)pp * (size_t)max_ops, sizeof *spans);
    pp_schedule_counts *counts = calloc((size_t)pp, sizeof *counts);
    for (int r = 0; r < pp; r++)
        pp_schedule_build(ops + (size_t)r * max_ops, &counts[r], cfg, r);
    double sched = 0, exec = 0;
    T_CHECK(pp_schedule_simulate(spans, &sched, ops, counts, cfg, 1.0, 2.0) == MTC_OK);
    mtc_result_t rc = pp_plan_simulate(&exec, plans, pp, 1.0, 2.0);
    T_CHECKF(rc == MTC_OK, "pp=%d vpp=%d M=%d: %s", pp, cfg->vpp, cfg->num_microbatches,
             mtc_error_detail());
    T_CHECKF(exec == sched, "pp=%d vpp=%d M=%d N=%d fo=%d: executor %g vs schedule %g", pp,
             cfg->vpp, cfg->num_microbatches, cfg->group_size, cfg->forward_only, exec, sched);
    free(ops), free(spans), free(counts);
}

static void check_config(const pp_schedule_config *cfg, int *configs) {
    int pp = cfg->pp;
    pp_plan *plans = calloc((size_t)pp, sizeof *plans);
    int ok = 1;
    for (int r = 0; r < pp; r++) {
        mtc_result_t rc = pp_plan_build(&plans[r], cfg, r);
        T_CHECKF(rc == MTC_OK, "pp=%d vpp=%d M=%d N=%d fo=%d rank %d: %s", pp, cfg->vpp,
                 cfg->num_microbatches, cfg->group_size, cfg->forward_only, r, mtc_error_detail());
        if (rc != MTC_OK) ok = 0;
    }
    if (ok) {
        char why[1024];
        int bad = sim_run(plans, pp, why, sizeof why);
        T_CHECKF(!bad, "pp=%d vpp=%d M=%d N=%d fo=%d: %s", pp, cfg->vpp, cfg->num_microbatches,
                 cfg->group_size, cfg->forward_only, why);
        int all_same = 1;
        for (int r = 0; r < pp; r++)
            all_same &= same_order(&plans[r], cfg, r);
        T_CHECK(all_same);
        /* closed form: each of the pp*v-1 stage boundaries carries M
         * activations, and M gradients unless forward-only */
        int sends, recvs, v = pp_schedule_vpp(cfg), M = cfg->num_microbatches;
        count_xfers(plans, pp, &sends, &recvs);
        int expect = (pp * v - 1) * M * (cfg->forward_only ? 1 : 2);
        T_CHECKF(sends == expect && recvs == expect,
                 "pp=%d vpp=%d M=%d: %d sends %d recvs, want %d", pp, v, M, sends, recvs, expect);
        check_timeline(plans, cfg);
        /* 1F1B training with M >= pp keeps Megatron's pp-r in-flight inputs on
         * rank r > 0 (plus the output, the received gradient and the input
         * gradient around a backward); the first and last stage hold only 2
         * buffers (output + gradient, input + input gradient) */
        if (pp > 1 && v == 1 && M >= pp && !cfg->forward_only)
            for (int r = 0; r < pp; r++) {
                int want = (r == 0 || r == pp - 1) ? 2 : pp - r + 2;
                T_CHECKF(plans[r].nslots == want, "pp=%d M=%d rank %d: %d buffers, want %d", pp, M,
                         r, plans[r].nslots, want);
            }
        /* forward-only keeps no activation: at most the received input, the
         * output and the next received input */
        if (cfg->forward_only && v == 1)
            for (int r = 0; r < pp; r++)
                T_CHECK(plans[r].nslots <= 2);
        (*configs)++;
    }
    for (int r = 0; r < pp; r++)
        pp_plan_free(&plans[r]);
    free(plans);
}

static void check_all_valid(void) {
    int configs = 0;
    for (int pp = 1; pp <= 6; pp++)
        for (int v = 1; v <= (pp > 1 ? 4 : 1); v++)
            for (int M = 1; M <= 3 * pp + 3; M++)
                for (int N = 0; N <= (v > 1 ? M : 0); N++)
                    for (int fo = 0; fo <= 1; fo++) {
                        pp_schedule_config cfg = {pp, v, M, N, fo};
                        if (N > 0 && N < pp) continue;
                        if (pp_schedule_validate(&cfg) != MTC_OK) continue;
                        check_config(&cfg, &configs);
                    }
    printf("checked %d valid configurations\n", configs);
    T_CHECK(configs > 500);
}

/* The steps of one rank as text: "F0 send_forward F1 ...". */
static void plan_text(char *buf, size_t len, const pp_schedule_config *cfg, int rank) {
    pp_plan p;
    buf[0] = 0;
    if (pp_plan_build(&p, cfg, rank) != MTC_OK) return;
    size_t n = 0;
    for (int s = 0; s < p.nsteps && n < len; s++) {
        const pp_step *st = &p.steps[s];
        if (st->kind == PP_STEP_EXCHANGE)
            n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? " " : "", st->call);
        else
            n += (size_t)snprintf(buf + n, len - n, "%s%c%d", n ? " " : "",
                                  st->kind == PP_STEP_FORWARD ? 'F' : 'B', st->microbatch);
    }
    pp_plan_free(&p);
}

/* 1F1B, pp=2, M=3, spelled out from Megatron's loop (W = 1 on rank 0, 0 on
 * rank 1); calls that move nothing on a rank (rank 0's recv_forward and
 * send_backward, rank 1's send_forward and recv_backward) are dropped. */
static void check_1f1b_calls(void) {
    pp_schedule_config cfg = {2, 1, 3, 0, 0};
    char got[512];
    plan_text(got, sizeof got, &cfg, 0);
    const char *r0 = "F0 send_forward F1 send_forward_recv_backward B0 F2 "
                     "send_forward_recv_backward B1 recv_backward B2";
    T_CHECKF(strcmp(got, r0) == 0, "rank 0: %s", got);
    plan_text(got, sizeof got, &cfg, 1);
    const char *r1 = "recv_forward F0 B0 send_backward_recv_forward F1 B1 "
                     "send_backward_recv_forward F2 B2 send_backward";
    T_CHECKF(strcmp(got, r1) == 0, "rank 1: %s", got);
}

/* pp_plan_simulate on hand-made plans: a send waits for its receive.
 *   rank 0: F(1)  send_next  B(2)        rank 1: B(2)  recv_prev  F(1)
 * rank 0 posts its send at 1, rank 1 its receive at 2: both leave the
 * exchange at 2, so rank 0 ends at 4 (3 if sends did not block). */
static void check_blocking_model(void) {
    pp_step r0[3], r1[3];
    pp_xfer none = {-1, -1, -1}, x = {0, 0, 1};
    pp_step fwd = {.kind = PP_STEP_FORWARD,
                   .microbatch = 0,
                   .chunk = 0,
                   .in_slot = -1,
                   .out_slot = -1,
                   .send_next = none,
                   .recv_prev = none,
                   .send_prev = none,
                   .recv_next = none};
    pp_step bwd = fwd, xch = fwd;
    bwd.kind = PP_STEP_BACKWARD;
    xch.kind = PP_STEP_EXCHANGE;
    r0[0] = fwd, r0[1] = xch, r0[1].send_next = x, r0[2] = bwd;
    r1[0] = bwd, r1[1] = xch, r1[1].recv_prev = x, r1[2] = fwd;
    pp_plan plans[2] = {{r0, 3, 1, {0}}, {r1, 3, 1, {0}}};
    double t = 0;
    T_CHECK(pp_plan_simulate(&t, plans, 2, 1.0, 2.0) == MTC_OK);
    T_CHECKF(t == 4.0, "makespan %g, want 4", t);
    /* the receive never comes: deadlock is reported */
    plans[1].nsteps = 1;
    T_CHECK(pp_plan_simulate(&t, plans, 2, 1.0, 2.0) == MTC_ERR_INVALID_USAGE);
}

static void check_refusals(void) {
    pp_plan p;
    pp_schedule_config bad_n = {4, 2, 3, 0, 0}; /* N = pp = 4 > M = 3 */
    T_CHECK(pp_plan_build(&p, &bad_n, 0) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(strcmp(mtc_error_detail(),
                   "The number of contiguous micro-batches in a virtual pipeline stageshould "
                   "range in [PP=4 , M=3]") == 0);
    pp_schedule_config bad_rem = {4, 2, 6, 0, 0}; /* 6 % 4 = 2 < 4 */
    pp_executor_config ec = {bad_rem, 16, NULL};
    size_t bytes = 1;
    T_CHECK(pp_executor_buffer_bytes(&bytes, &ec, 0) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(bytes == 0);
    T_CHECK(strstr(mtc_error_detail(), "should be 0, or larger than or equal to the "
                                       "pipeline-parallel size, but it is 2.") != NULL);
    pp_schedule_config one = {1, 2, 4, 0, 0};
    T_CHECK(pp_plan_build(&p, &one, 0) == MTC_ERR_INVALID_ARGUMENT);
    T_CHECK(strstr(mtc_error_detail(), "greater than 1 with interleaved") != NULL);
    pp_schedule_config ok = {2, 1, 4, 0, 0};
    T_CHECK(pp_plan_build(&p, &ok, 2) == MTC_ERR_INVALID_ARGUMENT);
    pp_plan_free(NULL);
}

int main(void) {
    check_1f1b_calls();
    check_refusals();
    check_blocking_model();
    check_all_valid();
    return T_DONE();
}
