/* pp/executor.h - runs one pipeline-parallel iteration on this rank: the
 * compute order of pp/schedule.h (no pipelining, 1F1B, interleaved; or
 * forward-only for evaluation) plus the stage-to-stage transfers of
 * activations and their gradients, laid out as Megatron-LM core_v0.18.0's
 * schedules.py issues them.
 *
 * Model-agnostic: the caller supplies forward/backward callbacks for one
 * (microbatch, model chunk); the executor owns only the message buffers and
 * the pipeline point-to-point traffic. Relies on pp/schedule.h and
 * comm/comm.h (mtc_send / mtc_recv / mtc_sendrecv). Does not touch model
 * parameters, reduce gradients (data parallel, tied embeddings) or compute
 * the loss: the callbacks and the train loop do (see "Use from the GPT
 * train loop" below).
 *
 * ---- Transfers -------------------------------------------------------------
 * Pipeline ring over PIPELINE_MODEL_PARALLEL_GROUP: next = (r+1) % pp,
 * prev = (r-1+pp) % pp. Chunk c of rank r is virtual stage s = c*pp + r;
 * stage s's output goes to stage s+1 (rank pp-1 chunk c -> rank 0 chunk c+1)
 * and its input gradient to stage s-1 (rank 0 chunk c -> rank pp-1 chunk
 * c-1). Every Megatron p2p call (recv_forward, send_forward,
 * send_forward_recv_backward, send_backward_recv_forward,
 * send_forward_recv_forward, send_backward_recv_backward,
 * send_forward_backward_recv_forward_backward, recv_backward, ...) becomes
 * one EXCHANGE step with up to four transfers, issued in two phases:
 *   forward phase  on the activation channel: send_next + recv_prev
 *   backward phase on the gradient channel:   send_prev + recv_next
 * Each phase is one mtc_sendrecv when both halves are present (a ring shift,
 * so every rank doing its half at once cannot deadlock), else one mtc_send or
 * mtc_recv; every rank runs the forward phase first. Activations and
 * gradients travel on two communicators split from the pipeline group at
 * init, so with pp == 2, where next == prev, the two kinds of message never
 * share one in-order channel (the case Megatron's training arguments avoid
 * by requiring pp > 2 without overlap_p2p_comm: "multiple p2p sends and
 * recvs between same 2 ranks per communication batch"); pp == 2 interleaved
 * therefore works here. tests/pp/test_executor_plan.c replays all ranks'
 * plans under synchronous sends for every valid configuration up to pp=6,
 * vpp=4: no deadlock, every message lands where it is expected.
 * Megatron's recv decisions (recv_tensor_from_previous_stage: the leading
 * stage receives nothing for its first pp-1 virtual microbatches and nothing
 * that the far end's last chunk would produce) decide when a receive is
 * posted; received tensors queue per chunk, in microbatch order, until their
 * forward (or backward) runs. The plan builder checks that every queue pops
 * exactly the microbatch the compute order asks for.
 *
 * ---- Buffers ---------------------------------------------------------------
 * All messages have `count` floats (B*T*C per microbatch; B*(T/cp/tp)*C with
 * context and sequence parallelism), or stage_count[s] between virtual
 * stages s and s+1 (slots keep `count`). Slots are assigned once, when the plan
 * is built, by replaying the schedule: a received activation lives until the
 * backward of its (microbatch, chunk) returns (forward-only: until its
 * forward returns), an output or input gradient until the exchange that
 * sends it, a received gradient until its backward returns. The number of
 * slots is the schedule's peak in-flight count; pp_executor_buffer_bytes
 * says how many bytes that is, so the caller can give the executor memory
 * from its activation arena.
 *
 * ---- Callbacks -------------------------------------------------------------
 *   forward(ctx, mb, chunk, input, output)
 *     input   (count)  activation from the previous stage; NULL on the first
 *                      virtual stage (rank 0, chunk 0: the model embeds its
 *                      tokens). Valid and unchanged until backward(mb, chunk)
 *                      returns, so the model may keep the pointer instead of
 *                      a copy (forward-only runs: until forward returns).
 *     output  (count)  to fill; NULL on the last virtual stage (rank pp-1,
 *                      chunk vpp-1: the model computes the loss instead).
 *   backward(ctx, mb, chunk, output_grad, input_grad)
 *     output_grad (count) dL/d(output); NULL on the last virtual stage (the
 *                      model starts from its loss).
 *     input_grad  (count) to fill with dL/d(input); NULL on the first
 *                      virtual stage.
 *   A callback error stops the run and is returned (under mtc_launch the
 *   peers then stop with MTC_ERR_REMOTE instead of waiting).
 *
 * ---- Use from the GPT train loop -------------------------------------------
 *   init:  cfg.count = micro-batch-size * seq-length/cp (/tp with sequence
 *          parallelism) * hidden-size; pp_executor_buffer_bytes(&bytes, &cfg,
 *          pp_rank) sizes the arena slice; pp_executor_init(&ex, &cfg,
 *          mtc_grid_comm(grid, MTC_GROUP_PP, ...), slice). Collective over the
 *          pipeline group. With pp > 1 and tied embeddings the last stage's
 *          copy of wte must start equal to the first stage's (Megatron zeroes
 *          it and all-reduces over EMBEDDING_GROUP once at set-up).
 *   step:  zero the gradient buffers, then pp_executor_run(ex, &cb, 0, ...).
 *          Only the first virtual stage reads token ids and only the last
 *          reads labels (of microbatch mb of this global batch).
 *          forward callback: first virtual stage: embed the tokens (wte +
 *          wpe, dropout) instead of reading input; then the chunk's layers;
 *          last virtual stage: final layer norm, logits with the (tied) wte,
 *          the loss divided by num_microbatches as Megatron's forward_step
 *          does, recorded per microbatch for the log line.
 *          backward callback: the chunk's backward, accumulating (+=) into
 *          the parameter gradients; the last stage seeds d(loss) =
 *          1/num_microbatches, the first ends in the wte/wpe gradients.
 *   after: pp_executor_run returns once this rank's last backward ran. Then
 *          Megatron's order: data-parallel gradient reduction (finish grad
 *          sync), the TP all-reduce of SP-tagged gradients, and the
 *          EMBEDDING_GROUP all-reduce of the wte gradient (first and last
 *          stage each hold a copy of the tied wte, so each copy gets the sum
 *          of both stages' contributions) and the POSITION_EMBEDDING_GROUP
 *          all-reduce of the wpe gradient (that group is [first stage]: a
 *          one-member no-op Megatron still issues); ranks outside a group
 *          (mtc_grid_comm gives NULL) skip it. Then clipping and the
 *          optimizer; the loss for the log is on the last stage only.
 *   eval:  pp_executor_run(ex, &cb, 1, ...) runs forwards only (backward
 *          may be NULL in its callbacks).
 *   end:   pp_executor_free(ex).
 */
#ifndef MTC_PP_EXECUTOR_H
#define MTC_PP_EXECUTOR_H

#include <stddef.h>

#include <stdint.h>

#include "comm/comm.h"
#include "grid/grid.h"
#include "core/result.h"
#include "pp/schedule.h"

/* ---- the plan: pure data, built without communicating ---- */

typedef enum {
    PP_STEP_FORWARD = 0,
    PP_STEP_BACKWARD = 1,
    PP_STEP_EXCHANGE = 2,
} pp_step_kind_t;

/* One transfer of an exchange; slot -1 = not done in this exchange. The
 * label says which tensor it is: the microbatch and the virtual stage that
 * will consume it (for a send: the peer's stage; for a receive: ours). */
typedef struct {
    int slot;
    int microbatch;
    int stage;
} pp_xfer;

typedef struct {
    pp_step_kind_t kind;
    /* FORWARD / BACKWARD */
    int microbatch, chunk;
    int in_slot;  /* FORWARD: activation in (-1: first virtual stage);
                     BACKWARD: output gradient in (-1: last virtual stage) */
    int out_slot; /* FORWARD: output (-1: last virtual stage);
                     BACKWARD: input gradient (-1: first virtual stage) */
    /* EXCHANGE */
    pp_xfer send_next, recv_prev; /* forward phase, activation channel */
    pp_xfer send_prev, recv_next; /* backward phase, gradient channel */
    const char *call;             /* Megatron's p2p function it stands for */
} pp_step;

typedef struct {
    pp_step *steps;
    int nsteps;
    int nslots;                /* peak number of live message buffers */
    pp_schedule_counts counts; /* as pp_schedule_build reports them */
} pp_plan;

/* The steps of pipeline rank `rank` for cfg (cfg->forward_only honoured).
 * Validates cfg first (Megatron's messages, INVALID_ARGUMENT). Checks its own
 * bookkeeping (every forward/backward finds its microbatch at the head of
 * its queue, compute order equals pp_schedule_build, no slot leaks) and
 * returns MTC_ERR_INTERNAL if not. pp_plan_free(NULL) / on a zeroed plan is
 * a no-op. */
mtc_result_t pp_plan_build(pp_plan *plan, const pp_schedule_config *cfg, int rank);
void pp_plan_free(pp_plan *plan);

/* Makespan of all ranks' plans (plans[r] for rank r) on an ideal machine
 * (pp/executor_sim.c): forwards cost t_fwd, backwards t_bwd, transfers are
 * free but blocking as in the shm backend (a send completes with its
 * receive; a phase's two halves are posted together; channels match in
 * order). INVALID_USAGE if the plans deadlock. Compare with
 * pp_schedule_simulate, whose transfers are free and asynchronous, to see
 * what the p2p pairing costs. */
mtc_result_t pp_plan_simulate(double *makespan, const pp_plan *plans, int pp, double t_fwd,
                              double t_bwd);

/* ---- the executor ---- */

typedef struct {
    pp_schedule_config schedule; /* pp, vpp, num_microbatches, group_size;
                                    forward_only is chosen per run */
    size_t count;                /* floats per message (per microbatch): the largest */
    /* floats of the messages between virtual stage s and s + 1 (stage s's
     * output and its gradient), s = 0 .. pp*vpp-2, each <= count (a
     * standalone MTP stage sends 1 + D hidden states, pp/layout.h); NULL:
     * count for every stage. init copies it. */
    const size_t *stage_count;
} pp_executor_config;

typedef struct {
    mtc_result_t (*forward)(void *ctx, int microbatch, int chunk, const float *input,
                            float *output);
    mtc_result_t (*backward)(void *ctx, int microbatch, int chunk, const float *output_grad,
                             float *input_grad); /* may be NULL for forward-only runs */
    void *ctx;
    /* Optional (NULL: not called): each transfer phase that moved data, by
     * Megatron's timer name of its p2p call (pp_p2p_name), with its start
     * and end (mtc_time_ns). For timers and traces. */
    void (*exchanged)(void *ctx, int p2p_kind, uint64_t t0_ns, uint64_t t1_ns);
} pp_callbacks;

/* The transfer phases, named as Megatron's p2p timers. */
typedef enum {
    PP_P2P_FORWARD_SEND = 0,   /* "forward-send": activation to the next stage */
    PP_P2P_FORWARD_RECV,       /* "forward-recv" */
    PP_P2P_FORWARD_SEND_RECV,  /* "forward-send-forward-recv" (one ring shift) */
    PP_P2P_BACKWARD_SEND,      /* "backward-send": gradient to the previous stage */
    PP_P2P_BACKWARD_RECV,      /* "backward-recv" */
    PP_P2P_BACKWARD_SEND_RECV, /* "backward-send-backward-recv" */
    PP_P2P_KIND_COUNT
} pp_p2p_kind;
const char *pp_p2p_name(int kind);

typedef struct pp_executor *pp_executor_t;

/* Bytes of message buffers pipeline rank `rank` needs for cfg: enough for a
 * training run and a forward-only run (slots are 64-byte aligned). Validates
 * cfg like pp_executor_init. */
mtc_result_t pp_executor_buffer_bytes(size_t *bytes, const pp_executor_config *cfg, int rank);

/* The two channels of a pipeline rank, each over the ranks of its
 * PIPELINE_MODEL_PARALLEL_GROUP in its order (size pp; both NULL when
 * pp == 1): activations forward, gradients backward. The grid makes them
 * (MTC_GROUP_PP_ACTIVATIONS, MTC_GROUP_PP_GRADIENTS); the executor only
 * uses them, and several executors may share them one run at a time. */
typedef struct {
    mtc_comm_t act, grad;
} pp_channels;

/* This rank's channels from its grid (NULL grid or pp == 1: both NULL). */
void pp_channels_from_grid(pp_channels *ch, mtc_grid_t grid);

/* Does not communicate. Invalid configurations are refused with Megatron's
 * message (every rank has the same cfg, so every rank refuses). `buffer`:
 * pp_executor_buffer_bytes bytes, 64-byte aligned, owned by the caller and
 * kept until pp_executor_free; NULL = the executor allocates it. */
mtc_result_t pp_executor_init(pp_executor_t *out, const pp_executor_config *cfg,
                              const pp_channels *ch, void *buffer);
/* --bf16: the forward messages (activations) hold bf16 values in fp32
 * storage and travel as bf16, half the bytes and exact; gradients stay
 * fp32. Call after init, before the first run, on every pipeline rank. */
mtc_result_t pp_executor_set_activations_bf16(pp_executor_t ex);

/* One iteration: every forward and backward of this rank in schedule order,
 * with the transfers between them. forward_only: evaluation (forwards only,
 * Megatron's forward_only=True orders). trace (optional, NULL = none):
 * receives the ops as they complete, pp_schedule_max_ops entries for the
 * run's mode; *ntrace (optional) their number.
 * comm: send/recv/sendrecv on the activation and gradient channels of
 * PIPELINE_MODEL_PARALLEL_GROUP. */
mtc_result_t pp_executor_run(pp_executor_t ex, const pp_callbacks *cb, int forward_only,
                             pp_op *trace, int *ntrace);

/* The plans init built (for reports and tests). */
const pp_plan *pp_executor_plan(pp_executor_t ex, int forward_only);

void pp_executor_free(pp_executor_t ex);

#endif
