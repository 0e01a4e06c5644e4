/* pp/executor_sim.c - the timeline of the executor's plans on an ideal
 * machine: every rank's steps in order, forwards costing t_fwd, backwards
 * t_bwd, transfers free but blocking as the shm backend's are (a send and
 * its receive complete together, when the later of the two is posted; the
 * two halves of a phase are posted at once; each channel matches in order).
 *
 * Compared with pp_schedule_simulate (free, asynchronous transfers: an op
 * waits only for its data), this shows what the p2p pairing itself costs:
 * e.g. Megatron's interleaved steady state sends a forward's output only
 * after the backward that follows it (no overlap_p2p_comm).
 * Relies on pp/executor.h (the plans). Does not run anything. */
#include <stdlib.h>

#include "pp/executor.h"

typedef struct {
    int step, phase;    /* current step; phase of an exchange (0 act, 1 grad) */
    int posted;         /* the current phase's transfers are posted */
    int sent, recvd;    /* which halves completed */
    double clock, post; /* rank time; when the current phase was posted */
    double done;        /* latest completion among the phase's halves */
} esim_rank;

static const pp_xfer *esim_half(const pp_plan *p, const esim_rank *s, int send) {
    const pp_step *st = &p->steps[s->step];
    if (s->phase == 0) return send ? &st->send_next : &st->recv_prev;
    return send ? &st->send_prev : &st->recv_next;
}

/* Run compute steps and skip empty phases until rank r waits on a transfer
 * (or has finished). Returns 1 if it moved. */
static int esim_settle(const pp_plan *p, esim_rank *s, double t_fwd, double t_bwd) {
    int moved = 0;
    while (s->step < p->nsteps) {
        const pp_step *st = &p->steps[s->step];
        if (st->kind != PP_STEP_EXCHANGE) {
            s->clock += st->kind == PP_STEP_FORWARD ? t_fwd : t_bwd;
            s->step++, s->phase = 0, moved = 1;
            continue;
        }
        int need_s = esim_half(p, s, 1)->slot >= 0 && !s->sent;
        int need_r = esim_half(p, s, 0)->slot >= 0 && !s->recvd;
        if (need_s || need_r) {
            if (!s->posted) s->posted = 1, s->post = s->clock, s->done = s->clock;
            return moved;
        }
        if (s->posted && s->done > s->clock) s->clock = s->done;
        s->posted = s->sent = s->recvd = 0;
        if (s->phase == 0)
            s->phase = 1;
        else
            s->step++, s->phase = 0;
        moved = 1;
    }
    return moved;
}

mtc_result_t pp_plan_simulate(double *makespan, const pp_plan *plans, int pp, double t_fwd,
                              double t_bwd) {
    *makespan = 0;
    esim_rank *s = calloc((size_t)pp, sizeof *s);
    if (!s) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "executor simulation of %d ranks", pp);
    for (int r = 0; r < pp; r++)
        esim_settle(&plans[r], &s[r], t_fwd, t_bwd);
    mtc_result_t rc = MTC_OK;
    for (;;) {
        int progress = 0, done = 1;
        for (int r = 0; r < pp; r++) {
            if (s[r].step >= plans[r].nsteps) continue;
            done = 0;
            const pp_xfer *snd = esim_half(&plans[r], &s[r], 1);
            if (snd->slot < 0 || s[r].sent) continue;
            int peer = s[r].phase == 0 ? (r + 1) % pp : (r - 1 + pp) % pp;
            esim_rank *q = &s[peer];
            if (q->step >= plans[peer].nsteps || !q->posted || q->phase != s[r].phase) continue;
            if (esim_half(&plans[peer], q, 0)->slot < 0 || q->recvd) continue;
            double t = s[r].post > q->post ? s[r].post : q->post;
            s[r].sent = 1, q->recvd = 1;
            if (t > s[r].done) s[r].done = t;
            if (t > q->done) q->done = t;
            progress = 1;
        }
        for (int r = 0; r < pp; r++)
            progress |= esim_settle(&plans[r], &s[r], t_fwd, t_bwd);
        if (done) break;
        if (!progress) {
            rc = mtc_error(MTC_ERR_INVALID_USAGE,
                           "pipeline plans deadlock under blocking point-to-point");
            break;
        }
    }
    for (int r = 0; r < pp && rc == MTC_OK; r++)
        if (s[r].clock > *makespan) *makespan = s[r].clock;
    free(s);
    return rc;
}
