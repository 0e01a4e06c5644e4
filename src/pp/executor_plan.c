/* pp/executor_plan.c - the per-rank step list of one pipeline iteration:
 * compute steps in pp_schedule_build's order with the EXCHANGE steps that
 * Megatron-LM core_v0.18.0's schedules.py issues between them, and the
 * message-buffer slot of every tensor.
 *
 * 1F1B (forward_backward_pipelining_without_interleaving; pp == 1 is the
 * same with every transfer switched off, i.e. no pipelining):
 *   warm-up   recv_forward  F  send_forward              (W times)
 *             recv_forward                               (if S > 0)
 *   steady    F  send_forward_recv_backward  B  send_backward_recv_forward
 *             (last: send_backward)                      (S times)
 *   forward-only steady: F  send_forward  recv_forward (not on the last)
 *   cool-down recv_backward  B  send_backward            (W times)
 * Interleaved (forward_backward_pipelining_with_interleaving, no p2p overlap):
 *   recv_forward (chunk 0, not on rank 0)
 *   warm-up   F(k)  send_forward_recv_forward; the last warm-up exchange is
 *             send_forward_backward_recv_forward_backward (training, not
 *             all-warm-up) to receive the first output gradient
 *   steady    F(W+k)  B(k)  send_forward_backward_recv_forward_backward
 *   cool-down [recv_backward if all warm-up]  B(k)  send_backward_recv_backward
 * with recv_prev / recv_next from recv_tensor_from_previous_stage and the
 * "no receive after the last virtual microbatch" rules.
 * Relies on pp/schedule.h. Does not communicate: executor.c runs the plan. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pp/executor.h"

typedef struct {
    int mb, slot;
} plan_entry;

typedef struct {
    pp_plan *plan;
    int cap;
    int pp, v, rank, M, T, forward_only;
    int *tab_mb, *tab_chunk;   /* Megatron's schedule table, T entries */
    plan_entry *in_q, *grad_q; /* per chunk FIFOs of M entries */
    int *in_head, *in_tail, *grad_head, *grad_tail;
    int *act_slot;       /* (chunk, mb) -> slot of its received input */
    unsigned char *used; /* slot in use */
    int slot_cap;
    mtc_result_t rc;
} planner;

static int stage_of(const planner *P, int c) { return pp_virtual_stage(P->pp, P->rank, c); }
static int first_vs(const planner *P, int c) { return stage_of(P, c) == 0; }
static int last_vs(const planner *P, int c) { return stage_of(P, c) == P->pp * P->v - 1; }
static const pp_xfer NO_XFER = {-1, -1, -1};

static int slot_alloc(planner *P) {
    for (int s = 0; s < P->slot_cap; s++)
        if (!P->used[s]) {
            P->used[s] = 1;
            if (s + 1 > P->plan->nslots) P->plan->nslots = s + 1;
            return s;
        }
    if (P->rc == MTC_OK)
        P->rc = mtc_error(MTC_ERR_INTERNAL, "pp plan: rank %d needs more than %d buffers", P->rank,
                          P->slot_cap);
    return -1;
}

static void slot_free(planner *P, int s) {
    if (s >= 0) P->used[s] = 0;
}

static pp_step *step_add(planner *P, pp_step_kind_t kind) {
    if (P->plan->nsteps >= P->cap) {
        if (P->rc == MTC_OK)
            P->rc = mtc_error(MTC_ERR_INTERNAL, "pp plan: rank %d has more than %d steps", P->rank,
                              P->cap);
        return NULL;
    }
    pp_step *s = &P->plan->steps[P->plan->nsteps++];
    *s = (pp_step){.kind = kind,
                   .microbatch = -1,
                   .chunk = -1,
                   .in_slot = -1,
                   .out_slot = -1,
                   .send_next = NO_XFER,
                   .recv_prev = NO_XFER,
                   .send_prev = NO_XFER,
                   .recv_next = NO_XFER,
                   .call = NULL};
    return s;
}

/* Pop the head of chunk c's queue, which must hold microbatch mb. */
static int queue_pop(planner *P, plan_entry *q, int *head, int *tail, int c, int mb,
                     const char *what) {
    if (head[c] == tail[c] || q[c * P->M + head[c]].mb != mb) {
        char found[32] = "nothing";
        if (head[c] != tail[c])
            snprintf(found, sizeof found, "microbatch %d", q[c * P->M + head[c]].mb);
        if (P->rc == MTC_OK)
            P->rc = mtc_error(MTC_ERR_INTERNAL,
                              "pp plan: rank %d %s of microbatch %d chunk %d finds %s in its queue",
                              P->rank, what, mb, c, found);
        return -1;
    }
    return q[c * P->M + head[c]++].slot;
}

/* Receive into a fresh slot: the next microbatch of chunk c's queue (each
 * chunk receives its tensors in microbatch order). */
static pp_xfer queue_push(planner *P, plan_entry *q, int *tail, int c) {
    if (c < 0 || c >= P->v || tail[c] >= P->M) {
        if (P->rc == MTC_OK)
            P->rc = mtc_error(MTC_ERR_INTERNAL, "pp plan: rank %d receives too much for chunk %d",
                              P->rank, c);
        return NO_XFER;
    }
    pp_xfer x = {slot_alloc(P), tail[c], stage_of(P, c)};
    q[c * P->M + tail[c]++] = (plan_entry){x.microbatch, x.slot};
    return x;
}

static pp_xfer plan_forward(planner *P, int mb, int c) {
    pp_step *s = step_add(P, PP_STEP_FORWARD);
    if (!s) return NO_XFER;
    s->microbatch = mb, s->chunk = c;
    if (!first_vs(P, c)) {
        s->in_slot = queue_pop(P, P->in_q, P->in_head, P->in_tail, c, mb, "forward");
        P->act_slot[c * P->M + mb] = s->in_slot;
    }
    pp_xfer out = NO_XFER;
    if (!last_vs(P, c)) out = (pp_xfer){slot_alloc(P), mb, stage_of(P, c) + 1};
    s->out_slot = out.slot;
    if (P->forward_only) slot_free(P, s->in_slot); /* released after forward */
    return out;
}

static pp_xfer plan_backward(planner *P, int mb, int c) {
    pp_step *s = step_add(P, PP_STEP_BACKWARD);
    if (!s) return NO_XFER;
    s->microbatch = mb, s->chunk = c;
    if (!last_vs(P, c))
        s->in_slot = queue_pop(P, P->grad_q, P->grad_head, P->grad_tail, c, mb, "backward");
    pp_xfer grad = NO_XFER;
    if (!first_vs(P, c)) grad = (pp_xfer){slot_alloc(P), mb, stage_of(P, c) - 1};
    s->out_slot = grad.slot;
    slot_free(P, s->in_slot);
    if (!first_vs(P, c)) {
        slot_free(P, P->act_slot[c * P->M + mb]);
        P->act_slot[c * P->M + mb] = -1;
    }
    return grad;
}

/* One Megatron p2p call. recv_prev_chunk / recv_next_chunk: the chunk whose
 * queue the received tensor joins, -1 = no receive. Sent slots are free
 * once the call returns. */
static void plan_exchange(planner *P, const char *call, pp_xfer send_next, int recv_prev_chunk,
                          pp_xfer send_prev, int recv_next_chunk) {
    pp_xfer rp = NO_XFER, rn = NO_XFER;
    if (recv_prev_chunk >= 0) rp = queue_push(P, P->in_q, P->in_tail, recv_prev_chunk);
    if (recv_next_chunk >= 0) rn = queue_push(P, P->grad_q, P->grad_tail, recv_next_chunk);
    if (send_next.slot >= 0 || send_prev.slot >= 0 || rp.slot >= 0 || rn.slot >= 0) {
        pp_step *s = step_add(P, PP_STEP_EXCHANGE);
        if (s) {
            s->send_next = send_next, s->recv_prev = rp;
            s->send_prev = send_prev, s->recv_next = rn;
            s->call = call;
        }
    }
    slot_free(P, send_next.slot);
    slot_free(P, send_prev.slot);
}

/* ---- 1F1B and no pipelining ---- */

static void plan_1f1b(planner *P, const pp_schedule_counts *c) {
    int first = P->rank == 0, last = P->rank == P->pp - 1;
    int W = c->num_warmup, S = c->num_steady;
    int rp = first ? -1 : 0, rn = last ? -1 : 0; /* receive into chunk 0, or not */
    for (int i = 0; i < W; i++) {
        plan_exchange(P, "recv_forward", NO_XFER, rp, NO_XFER, -1);
        pp_xfer out = plan_forward(P, i, 0);
        plan_exchange(P, "send_forward", out, -1, NO_XFER, -1);
    }
    if (S > 0) plan_exchange(P, "recv_forward", NO_XFER, rp, NO_XFER, -1);
    for (int i = 0; i < S; i++) {
        int last_iter = i == S - 1;
        pp_xfer out = plan_forward(P, W + i, 0);
        if (P->forward_only) {
            plan_exchange(P, "send_forward", out, -1, NO_XFER, -1);
            if (!last_iter) plan_exchange(P, "recv_forward", NO_XFER, rp, NO_XFER, -1);
            continue;
        }
        plan_exchange(P, "send_forward_recv_backward", out, -1, NO_XFER, rn);
        pp_xfer grad = plan_backward(P, i, 0);
        if (last_iter)
            plan_exchange(P, "send_backward", NO_XFER, -1, grad, -1);
        else
            plan_exchange(P, "send_backward_recv_forward", NO_XFER, rp, grad, -1);
    }
    if (P->forward_only) return;
    for (int i = 0; i < W; i++) {
        plan_exchange(P, "recv_backward", NO_XFER, -1, NO_XFER, rn);
        pp_xfer grad = plan_backward(P, S + i, 0);
        plan_exchange(P, "send_backward", NO_XFER, -1, grad, -1);
    }
}

/* ---- interleaved ---- */

static int chunk_id(const planner *P, int k, int forward) {
    int c = P->tab_chunk[k % P->T];
    return forward ? c : P->v - 1 - c;
}

/* Megatron's recv_tensor_from_previous_stage(k, forward): whether the
 * exchange after virtual microbatch k receives, and into which chunk. */
static int recv_decision(const planner *P, int k, int forward, int *next_chunk) {
    int leading = forward ? P->rank == 0 : P->rank == P->pp - 1;
    int recv = 1, next;
    if (!leading) {
        *next_chunk = chunk_id(P, k + 1, forward);
        return 1;
    }
    if (k < P->pp - 1) {
        recv = 0; /* the far end has produced nothing yet */
        next = chunk_id(P, k + 1, forward);
    } else {
        next = chunk_id(P, k - (P->pp - 1), forward);
    }
    if (next == (forward ? P->v - 1 : 0)) recv = 0; /* its last chunk sends nothing */
    *next_chunk = forward ? next + 1 : next - 1;
    return recv;
}

static void plan_interleaved(planner *P, const pp_schedule_counts *c) {
    int T = P->T, W = c->num_warmup, S = c->num_steady, nc;
    int all_warmup = W >= T, last = P->rank == P->pp - 1;
    plan_exchange(P, "recv_forward", NO_XFER, P->rank == 0 ? -1 : 0, NO_XFER, -1);
    for (int k = 0; k < W; k++) {
        pp_xfer out = plan_forward(P, P->tab_mb[k], chunk_id(P, k, 1));
        int rp = recv_decision(P, k, 1, &nc);
        if (k == T - 1) rp = 0;
        if (k == W - 1 && !P->forward_only && !all_warmup)
            plan_exchange(P, "send_forward_backward_recv_forward_backward", out, rp ? nc : -1,
                          NO_XFER, last ? -1 : P->v - 1);
        else
            plan_exchange(P, "send_forward_recv_forward", out, rp ? nc : -1, NO_XFER, -1);
    }
    for (int k = 0; k < S; k++) {
        int fk = W + k, nbc;
        pp_xfer out = plan_forward(P, P->tab_mb[fk], chunk_id(P, fk, 1));
        pp_xfer grad = plan_backward(P, P->tab_mb[k], chunk_id(P, k, 0));
        int rp = recv_decision(P, fk, 1, &nc);
        int rn = recv_decision(P, k, 0, &nbc);
        if (k == S - 1) rp = 0;
        plan_exchange(P, "send_forward_backward_recv_forward_backward", out, rp ? nc : -1, grad,
                      rn ? nbc : -1);
    }
    if (P->forward_only) return;
    if (all_warmup) plan_exchange(P, "recv_backward", NO_XFER, -1, NO_XFER, last ? -1 : P->v - 1);
    for (int k = S; k < T; k++) {
        pp_xfer grad = plan_backward(P, P->tab_mb[k], chunk_id(P, k, 0));
        int rn = recv_decision(P, k, 0, &nc);
        if (k == T - 1) rn = 0;
        plan_exchange(P, "send_backward_recv_backward", NO_XFER, -1, grad, rn ? nc : -1);
    }
}

/* The compute steps must be pp_schedule_build's ops, queues empty, slots free. */
static void plan_check(planner *P, const pp_op *ops, const pp_schedule_counts *c) {
    int i = 0;
    for (int s = 0; s < P->plan->nsteps && P->rc == MTC_OK; s++) {
        const pp_step *st = &P->plan->steps[s];
        if (st->kind == PP_STEP_EXCHANGE) continue;
        if (i >= c->nops || (int)ops[i].kind != (int)st->kind ||
            ops[i].microbatch != st->microbatch || ops[i].chunk != st->chunk)
            P->rc =
                mtc_error(MTC_ERR_INTERNAL,
                          "pp plan: rank %d compute step %d differs from the schedule", P->rank, i);
        i++;
    }
    if (P->rc == MTC_OK && i != c->nops)
        P->rc = mtc_error(MTC_ERR_INTERNAL, "pp plan: rank %d has %d compute steps, schedule %d",
                          P->rank, i, c->nops);
    for (int ch = 0; ch < P->v && P->rc == MTC_OK; ch++)
        if (P->in_head[ch] != P->in_tail[ch] || P->grad_head[ch] != P->grad_tail[ch])
            P->rc =
                mtc_error(MTC_ERR_INTERNAL,
                          "pp plan: rank %d chunk %d keeps received tensors unused", P->rank, ch);
    for (int s = 0; s < P->slot_cap && P->rc == MTC_OK; s++)
        if (P->used[s])
            P->rc = mtc_error(MTC_ERR_INTERNAL, "pp plan: rank %d leaks buffer %d", P->rank, s);
}

mtc_result_t pp_plan_build(pp_plan *plan, const pp_schedule_config *cfg, int rank) {
    memset(plan, 0, sizeof *plan);
    MTC_CHECK(pp_schedule_validate(cfg));
    if (rank < 0 || rank >= cfg->pp)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "pipeline rank %d is outside 0..%d", rank,
                         cfg->pp - 1);
    planner P = {.plan = plan,
                 .pp = cfg->pp,
                 .v = pp_schedule_vpp(cfg),
                 .rank = rank,
                 .M = cfg->num_microbatches,
                 .forward_only = cfg->forward_only};
    P.T = P.M * P.v;
    P.cap = 6 * P.T + 8; /* 1F1B: 2M computes, up to 4M+1 exchanges */
    P.slot_cap = 2 * P.T + 4;
    int nops = pp_schedule_max_ops(cfg);
    size_t vm = (size_t)P.v * (size_t)P.M;
    pp_op *ops = malloc((size_t)nops * sizeof *ops);
    plan->steps = malloc((size_t)P.cap * sizeof *plan->steps);
    P.tab_mb = malloc(2 * (size_t)P.T * sizeof(int));
    P.in_q = malloc(2 * vm * sizeof(plan_entry));
    P.in_head = calloc(4 * (size_t)P.v, sizeof(int));
    P.act_slot = malloc(vm * sizeof(int));
    P.used = calloc((size_t)P.slot_cap, 1);
    mtc_result_t rc = MTC_OK;
    if (!ops || !plan->steps || !P.tab_mb || !P.in_q || !P.in_head || !P.act_slot || !P.used) {
        rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "no memory for the pipeline plan (%d steps)", P.cap);
        goto out;
    }
    P.tab_chunk = P.tab_mb + P.T;
    P.grad_q = P.in_q + vm;
    P.in_tail = P.in_head + P.v, P.grad_head = P.in_head + 2 * P.v;
    P.grad_tail = P.in_head + 3 * P.v;
    for (size_t i = 0; i < vm; i++)
        P.act_slot[i] = -1;
    pp_schedule_table(P.tab_mb, P.tab_chunk, P.M, P.v, pp_schedule_group_size(cfg));
    MTC_CHECK_GOTO(pp_schedule_build(ops, &plan->counts, cfg, rank), rc, out);
    if (pp_schedule_kind(cfg) == PP_SCHEDULE_INTERLEAVED)
        plan_interleaved(&P, &plan->counts);
    else
        plan_1f1b(&P, &plan->counts);
    if (P.rc == MTC_OK) plan_check(&P, ops, &plan->counts);
    rc = P.rc;
out:
    free(ops), free(P.tab_mb), free(P.in_q), free(P.in_head), free(P.act_slot), free(P.used);
    if (rc != MTC_OK) pp_plan_free(plan);
    return rc;
}

void pp_plan_free(pp_plan *plan) {
    if (!plan) return;
    free(plan->steps);
    memset(plan, 0, sizeof *plan);
}
