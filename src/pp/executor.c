/* pp/executor.c - runs a pp_plan (executor_plan.c) on this rank: calls the
 * model's forward/backward callbacks and moves activations and gradients
 * between pipeline stages.
 *
 * Each EXCHANGE step, in two phases (see executor.h for why two channels):
 *
 *   forward phase   act channel:  send_next -> (r+1)%pp   recv_prev <- (r-1)%pp
 *   backward phase  grad channel: send_prev -> (r-1)%pp   recv_next <- (r+1)%pp
 *
 * a phase with both halves is one mtc_sendrecv (a ring shift), with one half
 * one mtc_send / mtc_recv, with none nothing. Every rank issues the forward
 * phase first: with the gradient phase first, Megatron's interleaved calls
 * deadlock under synchronous sends (tests/pp/test_executor_plan.c models
 * both and checks every valid configuration up to pp=6, vpp=4). Relies on comm/comm.h and
 * core/mem.h. Does not decide anything at run time: the order, the buffers
 * and which transfers happen were fixed when the plan was built.
 * Limitations: blocking transfers only (no overlap of p2p with compute, as
 * Megatron without overlap_p2p_comm); messages are f32. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "nn/lowp.h"
#include "core/timer.h"
#include "pp/executor.h"

struct pp_executor {
    pp_executor_config cfg;
    int rank, pp;
    mtc_comm_t act, grad; /* the grid's pipeline channels, not owned (NULL when pp == 1) */
    pp_plan plan[2];      /* [0] training, [1] forward-only */
    char *buf;
    size_t stride, buf_bytes;
    int owns_buf;
    mtc_bf16 *wire;      /* set_activations_bf16: [send | recv] staging, count each */
    size_t *stage_count; /* cfg.stage_count copied (NULL: count everywhere) */
};

/* Floats of the message across the boundary after virtual stage b. */
static size_t boundary_count(const struct pp_executor *ex, int b) {
    int S = ex->cfg.schedule.pp * pp_schedule_vpp(&ex->cfg.schedule);
    return ex->stage_count && b >= 0 && b < S - 1 ? ex->stage_count[b] : ex->cfg.count;
}

static size_t slot_stride(size_t count) { return (count * sizeof(float) + 63) & ~(size_t)63; }

static mtc_result_t executor_validate(const pp_executor_config *cfg, int rank) {
    MTC_CHECK(pp_schedule_validate(&cfg->schedule));
    if (cfg->count == 0)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "pipeline message size 0: give the floats per microbatch "
                         "(micro-batch-size * seq-length/cp(/tp with SP) * hidden-size)");
    if (cfg->count > SIZE_MAX / sizeof(float) / 4)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "pipeline message size %zu floats is too large",
                         cfg->count);
    int S = cfg->schedule.pp * pp_schedule_vpp(&cfg->schedule);
    for (int b = 0; cfg->stage_count && b < S - 1; b++)
        if (cfg->stage_count[b] == 0 || cfg->stage_count[b] > cfg->count)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "pipeline message after virtual stage %d has %zu floats (give 1 .. "
                             "count=%zu)",
                             b, cfg->stage_count[b], cfg->count);
    if (rank < 0 || rank >= cfg->schedule.pp)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "pipeline rank %d is outside 0..%d", rank,
                         cfg->schedule.pp - 1);
    return MTC_OK;
}

/* Both plans (training and forward-only) of this rank. */
static mtc_result_t executor_plans(pp_plan plan[2], const pp_executor_config *cfg, int rank) {
    pp_schedule_config sc = cfg->schedule;
    sc.forward_only = 0;
    MTC_CHECK(pp_plan_build(&plan[0], &sc, rank));
    sc.forward_only = 1;
    mtc_result_t rc = pp_plan_build(&plan[1], &sc, rank);
    if (rc != MTC_OK) pp_plan_free(&plan[0]);
    return rc;
}

mtc_result_t pp_executor_buffer_bytes(size_t *bytes, const pp_executor_config *cfg, int rank) {
    *bytes = 0;
    MTC_CHECK(executor_validate(cfg, rank));
    pp_plan plan[2];
    MTC_CHECK(executor_plans(plan, cfg, rank));
    int n = plan[0].nslots > plan[1].nslots ? plan[0].nslots : plan[1].nslots;
    *bytes = (size_t)n * slot_stride(cfg->count);
    pp_plan_free(&plan[0]), pp_plan_free(&plan[1]);
    return MTC_OK;
}

void pp_channels_from_grid(pp_channels *ch, mtc_grid_t grid) {
    ch->act = grid ? mtc_grid_comm(grid, MTC_GROUP_PP_ACTIVATIONS, 0) : NULL;
    ch->grad = grid ? mtc_grid_comm(grid, MTC_GROUP_PP_GRADIENTS, 0) : NULL;
}

mtc_result_t pp_executor_init(pp_executor_t *out, const pp_executor_config *cfg,
                              const pp_channels *ch, void *buffer) {
    *out = NULL;
    int pp = cfg->schedule.pp;
    mtc_comm_t pipe = ch ? ch->act : NULL;
    if (pp > 1 && (!pipe || !ch->grad))
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "pipeline-model-parallel-size=%d needs the pipeline communicator", pp);
    int rank = pipe ? mtc_comm_rank(pipe) : 0;
    /* refuse before communicating: every rank has the same cfg */
    MTC_CHECK(executor_validate(cfg, rank));
    if (pipe && mtc_comm_size(pipe) != pp)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "pipeline channel '%s' has %d ranks but "
                         "pipeline-model-parallel-size is %d",
                         mtc_comm_name(pipe), mtc_comm_size(pipe), pp);
    if (buffer && ((uintptr_t)buffer & 63))
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "pipeline message buffer %p is not 64-byte aligned", buffer);
    struct pp_executor *ex = calloc(1, sizeof *ex);
    if (!ex) return mtc_error(MTC_ERR_OUT_OF_MEMORY, "no memory for the pipeline executor");
    ex->cfg = *cfg, ex->rank = rank, ex->pp = pp;
    ex->stride = slot_stride(cfg->count);
    mtc_result_t rc;
    MTC_CHECK_GOTO(executor_plans(ex->plan, cfg, rank), rc, fail);
    int n = ex->plan[0].nslots > ex->plan[1].nslots ? ex->plan[0].nslots : ex->plan[1].nslots;
    ex->buf_bytes = (size_t)n * ex->stride;
    if (buffer) {
        ex->buf = buffer;
    } else if (ex->buf_bytes) {
        MTC_CHECK_GOTO(mtc_mem_alloc_big(ex->buf_bytes, 0, (void **)&ex->buf), rc, fail);
        ex->owns_buf = 1;
    }
    if (pp > 1) ex->act = ch->act, ex->grad = ch->grad; /* the grid's */
    if (cfg->stage_count) {
        int S = pp * pp_schedule_vpp(&cfg->schedule);
        ex->stage_count = malloc((size_t)(S > 1 ? S - 1 : 1) * sizeof(size_t));
        if (!ex->stage_count) {
            rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "pipeline message sizes");
            goto fail;
        }
        memcpy(ex->stage_count, cfg->stage_count, (size_t)(S > 1 ? S - 1 : 0) * sizeof(size_t));
        ex->cfg.stage_count = ex->stage_count;
    }
    *out = ex;
    return MTC_OK;
fail:
    pp_executor_free(ex);
    return rc;
}

mtc_result_t pp_executor_set_activations_bf16(pp_executor_t ex) {
    if (ex->wire) return MTC_OK;
    ex->wire = malloc(2 * (ex->cfg.count ? ex->cfg.count : 1) * sizeof(mtc_bf16));
    return ex->wire ? MTC_OK
                    : mtc_error(MTC_ERR_OUT_OF_MEMORY, "no memory for the pipeline's bf16 staging");
}

static float *slot_ptr(pp_executor_t ex, int slot) {
    return slot < 0 ? NULL : (float *)(ex->buf + (size_t)slot * ex->stride);
}

static const char *const p2p_names[PP_P2P_KIND_COUNT] = {
    "forward-send",  "forward-recv",  "forward-send-forward-recv",
    "backward-send", "backward-recv", "backward-send-backward-recv"};

const char *pp_p2p_name(int kind) {
    return kind >= 0 && kind < PP_P2P_KIND_COUNT ? p2p_names[kind] : "?";
}

/* One phase: send `s` to dst and/or receive `r` from src on comm; `base` is
 * the phase's first pp_p2p_kind (forward or backward). */
static mtc_result_t executor_phase(pp_executor_t ex, const pp_callbacks *cb, int base,
                                   mtc_comm_t comm, pp_xfer s, int dst, pp_xfer r, int src) {
    if (s.slot < 0 && r.slot < 0) return MTC_OK;
    /* the sizes: an activation crosses the boundary before the stage that
     * consumes it, a gradient the one after it (labels: the consumer) */
    int fwd = base == PP_P2P_FORWARD_SEND;
    size_t ns = s.slot >= 0 ? boundary_count(ex, fwd ? s.stage - 1 : s.stage) : 0;
    size_t nr = r.slot >= 0 ? boundary_count(ex, fwd ? r.stage - 1 : r.stage) : 0;
    uint64_t t0 = cb->exchanged ? mtc_time_ns() : 0;
    mtc_result_t rc;
    int kind;
    if (ex->wire && base == PP_P2P_FORWARD_SEND) { /* activations as bf16 */
        mtc_bf16 *ws = ex->wire, *wr = ex->wire + ex->cfg.count;
        if (s.slot >= 0) nn_f32_to_bf16(ws, slot_ptr(ex, s.slot), ns);
        if (s.slot >= 0 && r.slot >= 0)
            kind = base + 2, rc = mtc_sendrecv(ws, ns, dst, wr, nr, src, MTC_DTYPE_BF16, comm);
        else if (s.slot >= 0)
            kind = base, rc = mtc_send(ws, ns, MTC_DTYPE_BF16, dst, comm);
        else
            kind = base + 1, rc = mtc_recv(wr, nr, MTC_DTYPE_BF16, src, comm);
        if (rc == MTC_OK && r.slot >= 0) nn_bf16_to_f32(slot_ptr(ex, r.slot), wr, nr);
    } else if (s.slot >= 0 && r.slot >= 0) {
        kind = base + 2;
        rc = mtc_sendrecv(slot_ptr(ex, s.slot), ns, dst, slot_ptr(ex, r.slot), nr, src,
                          MTC_DTYPE_F32, comm);
    } else if (s.slot >= 0) {
        kind = base;
        rc = mtc_send(slot_ptr(ex, s.slot), ns, MTC_DTYPE_F32, dst, comm);
    } else {
        kind = base + 1;
        rc = mtc_recv(slot_ptr(ex, r.slot), nr, MTC_DTYPE_F32, src, comm);
    }
    if (cb->exchanged && rc == MTC_OK) cb->exchanged(cb->ctx, kind, t0, mtc_time_ns());
    return rc;
}

mtc_result_t pp_executor_run(pp_executor_t ex, const pp_callbacks *cb, int forward_only,
                             pp_op *trace, int *ntrace) {
    if (ntrace) *ntrace = 0;
    if (!cb || !cb->forward || (!forward_only && !cb->backward))
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "pipeline executor needs a forward callback%s",
                         forward_only ? "" : " and a backward callback for training");
    const pp_plan *plan = &ex->plan[forward_only ? 1 : 0];
    int pp = ex->pp, next = (ex->rank + 1) % pp, prev = (ex->rank - 1 + pp) % pp, n = 0;
    for (int i = 0; i < plan->nsteps; i++) {
        const pp_step *s = &plan->steps[i];
        switch (s->kind) {
        case PP_STEP_FORWARD:
            MTC_CHECK(cb->forward(cb->ctx, s->microbatch, s->chunk, slot_ptr(ex, s->in_slot),
                                  slot_ptr(ex, s->out_slot)));
            break;
        case PP_STEP_BACKWARD:
            MTC_CHECK(cb->backward(cb->ctx, s->microbatch, s->chunk, slot_ptr(ex, s->in_slot),
                                   slot_ptr(ex, s->out_slot)));
            break;
        case PP_STEP_EXCHANGE:
            MTC_CHECK(executor_phase(ex, cb, PP_P2P_FORWARD_SEND, ex->act, s->send_next, next,
                                     s->recv_prev, prev));
            MTC_CHECK(executor_phase(ex, cb, PP_P2P_BACKWARD_SEND, ex->grad, s->send_prev, prev,
                                     s->recv_next, next));
            continue;
        }
        if (trace)
            trace[n] = (pp_op){.kind = s->kind == PP_STEP_FORWARD ? PP_OP_FORWARD : PP_OP_BACKWARD,
                               .microbatch = s->microbatch,
                               .chunk = s->chunk};
        n++;
        if (ntrace) *ntrace = n;
    }
    return MTC_OK;
}

const pp_plan *pp_executor_plan(pp_executor_t ex, int forward_only) {
    return &ex->plan[forward_only ? 1 : 0];
}

void pp_executor_free(pp_executor_t ex) {
    if (!ex) return;
    pp_plan_free(&ex->plan[0]);
    pp_plan_free(&ex->plan[1]);
    if (ex->owns_buf) mtc_mem_free_big(ex->buf, ex->buf_bytes);
    free(ex->wire);
    free(ex->stage_count);
    free(ex);
}
