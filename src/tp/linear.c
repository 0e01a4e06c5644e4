/* tp/linear.c - ColumnParallelLinear and RowParallelLinear (Megatron's
 * tensor_parallel/layers.py) on nn_linear_*; see tp/layers.h.
 *
 *   column:  x ──[copy_to | SP: all-gather T]──> X ─ X·W_rᵀ+b_r ─> Y_r ──[gather_output]──> Y
 *            backward: [SP, input not kept: start all-gather T of x -> X]
 *                      dX = dY_r·W_r            (overlaps the all-gather)
 *                      [wait] start [all-reduce | SP: reduce-scatter T] of dX -> dx
 *                      dW_r += dY_rᵀ·X, db_r    (overlaps that collective) [wait]
 *            as Megatron's LinearWithGradAccumulationAndAsyncCommunication.
 *   row:     x_r ─ x_r·W_rᵀ ─> partial ──[all-reduce | SP: reduce-scatter T]──> + b ─> y
 *            backward: dy ──[identity | SP: all-gather T]──> dY; dx_r = dY·W_r; dW_r += dYᵀ·x_r
 *
 * Relies on nn/nn.h (GEMMs) and tp/mappings.h (collectives). Scratch use is
 * laid out from the start of the caller's buffer in the order the comments
 * say; *_scratch_floats returns the maximum over forward and backward.
 * Limitations: no expert (is_expert) shortcut, no skip_bias_add (the bias
 * is always added), no async all-gather overlap in forward. */
#include <string.h>

#include "core/log.h"
#include "nn/lowp.h"
#include "tp/fp8_linear.h"
#include "tp/layers.h"
#include "tp/mappings.h"

static mtc_result_t check_split(int n, int p, const char *what) {
    if (p > 1 && n % p)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "%s=%d is not divisible by tensor-model-parallel-size=%d", what, n, p);
    return MTC_OK;
}

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* out (N, OUT) += b (OUT) for every row */
static void add_bias(float *out, const float *b, size_t N, int OUT) {
    if (!b) return;
    for (size_t n = 0; n < N; n++) {
        float *o = out + n * OUT;
        for (int j = 0; j < OUT; j++)
            o[j] += b[j];
    }
}

/* ---- the local GEMMs, in the context's precision (layers.h, tp_lowp) ------------------- */

/* Conversions on the pool: tasks of at least LIN_CVT floats, cut by size
 * only (the bits do not depend on the cut). */
#define LIN_CVT (1 << 16)
typedef struct {
    void *out;
    const float *in;
    size_t n, per;
    int op; /* 0: fp32 -> bf16, 1: round to bf16, 2: round to fp16 (in place or into out) */
} lin_cvt_job;

static void lin_cvt_task(int i, void *arg) {
    lin_cvt_job *j = arg;
    size_t a = (size_t)i * j->per, n = j->n - a < j->per ? j->n - a : j->per;
    if (j->op == 0)
        nn_f32_to_bf16((mtc_bf16 *)j->out + a, j->in + a, n);
    else if (j->op == 1)
        nn_round_bf16_to((float *)j->out + a, j->in + a, n);
    else
        nn_round_f16_to((float *)j->out + a, j->in + a, n);
}

static void lin_cvt(const tp_ctx *tp, int op, void *out, const float *in, size_t n) {
    int tasks = nn_pool_size(tp->pool);
    size_t per = (n + (size_t)tasks - 1) / (size_t)tasks;
    if (per < LIN_CVT) per = LIN_CVT;
    lin_cvt_job j = {out, in, n, per, op};
    nn_pool_run(tp->pool, (int)((n + per - 1) / per), lin_cvt_task, &j);
}

static const mtc_bf16 *lin_w16(const tp_lowp *q, const float *w) {
    if (!w) return NULL;
    MTC_ASSERT(w >= q->w32 && w < q->w32 + q->nw);
    return q->w16 + (w - q->w32);
}

static void lin_round(const tp_ctx *tp, float *x, size_t n) {
    lin_cvt(tp, tp->lowp->prec == TP_PREC_BF16 ? 1 : 2, x, x, n);
}

/* The GEMM runs through oneDNN's bf16 matmul (else: nn_sgemm on rounded
 * fp32 operands, fp16 or bf16 with f32_gemm). */
static int lin_dnnl_bf16(const tp_lowp *q) { return q->prec == TP_PREC_BF16 && !q->f32_gemm; }

/* fp16, bf16 with f32_gemm: a rounded copy of x in buf (cap floats), one
 * pass over memory. */
static const float *lin_round_copy(const tp_ctx *tp, void *buf, const float *x, size_t n) {
    MTC_ASSERT(n <= tp->lowp->cap);
    lin_cvt(tp, tp->lowp->prec == TP_PREC_BF16 ? 1 : 2, buf, x, n);
    return buf;
}

/* out (N, OUT) = x (N, IN) · wᵀ + b, rounded to the context's type when
 * `round` (a partial sum that is still to be reduced stays fp32). */
static mtc_result_t lin_forward_r(const tp_ctx *tp, float *out, const float *x, const float *w,
                                  const float *b, int N, int IN, int OUT, int round) {
    const tp_lowp *q = tp->lowp;
    size_t nx = (size_t)N * IN;
    if (!q || q->prec == TP_PREC_F32) {
        nn_linear_forward(tp->pool, out, x, w, b, N, IN, OUT);
        return MTC_OK;
    }
    if (tp->fp8) { /* fp8: quantized operands, fp32 GEMM (tp/fp8_linear.c) */
        MTC_ASSERT(!lin_dnnl_bf16(q) && nx <= q->cap);
        MTC_CHECK(tp_fp8_forward(tp->fp8, tp->pool, out, q->xa, x, w, b, N, IN, OUT));
    } else if (lin_dnnl_bf16(q)) {
        MTC_ASSERT(nx <= 2 * q->cap);
        lin_cvt(tp, 0, q->xa, x, nx);
        MTC_CHECK(nn_linear_bf16_forward(tp->pool, q->lp, out, MTC_DTYPE_F32, q->xa, lin_w16(q, w),
                                         lin_w16(q, b), N, IN, OUT));
    } else {
        nn_linear_forward(tp->pool, out, lin_round_copy(tp, q->xa, x, nx), w, b, N, IN, OUT);
    }
    if (round) lin_round(tp, out, (size_t)N * OUT);
    return MTC_OK;
}

static mtc_result_t lin_forward(const tp_ctx *tp, float *out, const float *x, const float *w,
                                const float *b, int N, int IN, int OUT) {
    return lin_forward_r(tp, out, x, w, b, N, IN, OUT, 1);
}

/* --bf16: the forward's activations travel as bf16 (mappings.h). */
static int lin_wire_bf16(const tp_ctx *tp) { return tp->lowp && tp->lowp->prec == TP_PREC_BF16; }

/* After a reduction: the sum rounded as the bf16 / fp16 tensor it is. */
static void lin_round_out(const tp_ctx *tp, float *out, size_t n) {
    if (tp->lowp && tp->lowp->prec != TP_PREC_F32) lin_round(tp, out, n);
}

/* nn_linear_backward in the context's precision: the gradient dout and the
 * input x enter the GEMMs rounded, dinp comes out in fp32 and dw, db
 * accumulate in fp32. dout_ready: the previous call converted this same
 * dout already (the column-parallel wgrad after its dgrad). */
static mtc_result_t lin_backward(const tp_ctx *tp, float *dinp, float *dw, float *db,
                                 const float *dout, const float *x, const float *w, int N, int IN,
                                 int OUT, int dout_ready) {
    const tp_lowp *q = tp->lowp;
    size_t nd = (size_t)N * OUT, nx = (size_t)N * IN;
    if (!q || q->prec == TP_PREC_F32 || (!dinp && !dw)) { /* a bias alone: fp32 column sums */
        nn_linear_backward(tp->pool, dinp, dw, db, dout, x, w, N, IN, OUT);
        return MTC_OK;
    }
    if (tp->fp8) { /* fp8: the bias from the bf16 gradient, the GEMMs on quantized operands */
        MTC_ASSERT(!lin_dnnl_bf16(q) && nd <= q->cap && nx <= q->cap);
        if (db)
            nn_linear_backward(tp->pool, NULL, NULL, db, lin_round_copy(tp, q->xb, dout, nd), NULL,
                               NULL, N, IN, OUT);
        return tp_fp8_backward(tp->fp8, tp->pool, dinp, dw, q->xb, q->xa, dout, x, w, N, IN, OUT);
    }
    if (lin_dnnl_bf16(q)) {
        MTC_ASSERT(nd <= 2 * q->cap && (!dw || nx <= 2 * q->cap));
        if (!dout_ready) lin_cvt(tp, 0, q->xb, dout, nd);
        if (dw) lin_cvt(tp, 0, q->xa, x, nx);
        return nn_linear_bf16_backward(tp->pool, q->lp, dinp, MTC_DTYPE_F32, dw, db, q->xb,
                                       dw ? q->xa : NULL, lin_w16(q, w), N, IN, OUT);
    }
    const float *g = dout_ready ? q->xb : lin_round_copy(tp, q->xb, dout, nd);
    nn_linear_backward(tp->pool, dinp, dw, db, g, dw ? lin_round_copy(tp, q->xa, x, nx) : NULL, w,
                       N, IN, OUT);
    return MTC_OK;
}

mtc_result_t tp_linear_bf16_prepare(const tp_ctx *tp, int column, int B, int T, int IN, int OUT,
                                    int has_bias) {
    const tp_lowp *q = tp->lowp;
    if (!q || !lin_dnnl_bf16(q)) return MTC_OK;
    int p = tp_size(tp->comm), N = B * T;
    int in = column ? IN : IN / p, out = column ? OUT / p : OUT;
    int bias = has_bias && (column || p == 1); /* row-parallel adds its bias after the reduction */
    /* forward, dgrad, wgrad: the three GEMMs of lin_forward / lin_backward */
    MTC_CHECK(nn_lowp_gemm_prepare(q->lp, MTC_DTYPE_BF16, MTC_DTYPE_F32, 0, 1, N, out, in, 1.0f, in,
                                   in, bias, 0.0f, out));
    MTC_CHECK(nn_lowp_gemm_prepare(q->lp, MTC_DTYPE_BF16, MTC_DTYPE_F32, 0, 0, N, in, out, 1.0f,
                                   out, in, 0, 0.0f, in));
    return nn_lowp_gemm_prepare(q->lp, MTC_DTYPE_BF16, MTC_DTYPE_F32, 1, 0, out, in, N, 1.0f, out,
                                in, 0, 1.0f, in);
}

/* ---- column-parallel ------------------------------------------------------------------ */

size_t tp_column_linear_scratch_floats(const tp_ctx *tp, int gather_output, int B, int T, int IN,
                                       int OUT) {
    int p = tp_size(tp->comm);
    if (p == 1) return 0;
    size_t N = (size_t)B * T, OUT_tp = (size_t)(OUT / p);
    int sp = tp->sequence_parallel;
    size_t seq = tp_seq_scratch_floats(B, T, IN, p);
    /* forward: [SP gather permutation] then [local out | last-dim permutation] */
    size_t fwd = max_sz(sp ? seq : 0,
                        gather_output ? N * OUT_tp + tp_last_scratch_floats((int)N, OUT, p) : 0);
    /* backward: [split dout] [SP: full dgrad | reduce-scatter permutation] */
    size_t bwd = (gather_output ? N * OUT_tp : 0) + (sp ? N * IN + seq : 0);
    return max_sz(fwd, bwd);
}

mtc_result_t tp_column_linear_forward(const tp_ctx *tp, float *out, float *in_total,
                                      const float *in, const float *w, const float *b,
                                      float *scratch, int gather_output, int B, int T, int IN,
                                      int OUT) {
    mtc_comm_t comm = tp->comm;
    int p = tp_size(comm), sp = tp->sequence_parallel && p > 1;
    MTC_CHECK(check_split(OUT, p, "column-parallel output size"));
    if (sp) MTC_CHECK(check_split(T, p, "seq-length"));
    int OUT_tp = OUT / p;
    int N = B * T;
    const float *x = in; /* (B, T, IN), whole sequence */
    if (sp) {
        if (!in_total)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "column-parallel linear under sequence parallelism needs in_total");
        /* comm: all-gather(tp) along T (bf16 with --bf16) */
        if (lin_wire_bf16(tp))
            MTC_CHECK(
                tp_seq_all_gather_bf16(in_total, in, tp->lowp->xa, tp->lowp->xb, B, T, IN, comm));
        else
            MTC_CHECK(tp_gather_from_seq_forward(in_total, in, scratch, B, T, IN, comm));
        x = in_total;
    } /* else copy_to_region: identity in forward */
    if (!gather_output || p == 1) return lin_forward(tp, out, x, w, b, N, IN, OUT_tp);
    float *y = scratch; /* (N, OUT_tp) */
    MTC_CHECK(lin_forward(tp, y, x, w, b, N, IN, OUT_tp));
    /* comm: all-gather(tp) of the output columns */
    return tp_gather_from_region_forward(out, y, scratch + (size_t)N * OUT_tp, N, OUT, comm);
}

mtc_result_t tp_column_linear_backward(const tp_ctx *tp, float *din, float *dw, float *db,
                                       const float *dout, float *in_total, int in_total_saved,
                                       const float *in, const float *w, float *scratch,
                                       int gather_output, int B, int T, int IN, int OUT) {
    mtc_comm_t comm = tp->comm;
    int p = tp_size(comm), sp = tp->sequence_parallel && p > 1;
    MTC_CHECK(check_split(OUT, p, "column-parallel output size"));
    if (sp) MTC_CHECK(check_split(T, p, "seq-length"));
    int OUT_tp = OUT / p;
    int N = B * T;
    float *s = scratch;
    const float *g = dout; /* (N, OUT_tp) */
    if (gather_output && p > 1) {
        MTC_CHECK(tp_gather_from_region_backward(s, dout, N, OUT, comm)); /* split: no comm */
        g = s;
        s += (size_t)N * OUT_tp;
    }
    const float *x = in;
    mtc_request_t req = NULL;
    int regather = sp && !in_total_saved;
    if (sp) {
        if (!in_total)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "column-parallel linear under sequence parallelism needs in_total");
        x = in_total;
    }
    /* scratch after the split dout: [dfull (N, IN) | permutation (seq scratch)] */
    float *dfull = sp ? s : NULL, *perm = sp ? s + (size_t)N * IN : NULL;
    if (regather) /* comm: all-gather(tp) of the input along T, overlapping the dgrad GEMM */
        MTC_CHECK(tp_seq_all_gather_start(in_total, in, perm, B, T, IN, comm, &req));
    if (din) {
        /* dgrad (reads no input: the all-gather may still be writing it): no SP
         * straight into din, SP into the full-sequence buffer */
        MTC_CHECK(lin_backward(tp, sp ? dfull : din, NULL, NULL, g, NULL, w, N, IN, OUT_tp, 0));
    }
    if (regather) MTC_CHECK(tp_seq_all_gather_finish(in_total, perm, B, T, IN, comm, &req));
    if (din) {
        if (sp) /* comm: reduce-scatter(tp) along T, overlapping the wgrad GEMMs */
            MTC_CHECK(tp_seq_reduce_scatter_start(din, dfull, perm, B, T, IN, comm, &req));
        else if (p > 1) /* comm: all-reduce(tp) (copy_to_region backward), overlapping wgrad */
            MTC_CHECK(mtc_all_reduce_start(din, din, (size_t)N * IN, MTC_DTYPE_F32, MTC_OP_SUM,
                                           comm, &req));
    }
    /* the dgrad above converted g already (nothing between touches it) */
    mtc_result_t rc =
        dw || db ? lin_backward(tp, NULL, dw, db, g, x, w, N, IN, OUT_tp, din != NULL) : MTC_OK;
    mtc_result_t rw = mtc_request_wait(&req);
    return rc != MTC_OK ? rc : rw;
}

/* ---- row-parallel ------------------------------------------------------------------------ */

size_t tp_row_linear_scratch_floats(const tp_ctx *tp, int input_is_parallel, int B, int T, int IN,
                                    int OUT) {
    int p = tp_size(tp->comm);
    if (p == 1) return 0;
    size_t N = (size_t)B * T, IN_tp = (size_t)(IN / p);
    if (tp->sequence_parallel) /* [partial or gathered dout (N, OUT) | permutation] */
        return N * OUT + tp_seq_scratch_floats(B, T, OUT, p);
    if (!input_is_parallel) /* [x_r | dx_r | last-dim permutation] */
        return 2 * N * IN_tp + tp_last_scratch_floats((int)N, IN, p);
    return 0;
}

static mtc_result_t row_check(const tp_ctx *tp, int input_is_parallel, int T, int IN) {
    int p = tp_size(tp->comm);
    MTC_CHECK(check_split(IN, p, "row-parallel input size"));
    if (tp->sequence_parallel && p > 1) {
        MTC_CHECK(check_split(T, p, "seq-length"));
        if (!input_is_parallel)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "row-parallel linear: sequence parallelism needs input_is_parallel "
                             "(as in Megatron)");
    }
    return MTC_OK;
}

mtc_result_t tp_row_linear_forward(const tp_ctx *tp, float *out, const float *in, const float *w,
                                   const float *b, float *scratch, int input_is_parallel, int B,
                                   int T, int IN, int OUT) {
    mtc_comm_t comm = tp->comm;
    int p = tp_size(comm), sp = tp->sequence_parallel && p > 1;
    MTC_CHECK(row_check(tp, input_is_parallel, T, IN));
    int IN_tp = IN / p, N = B * T;
    if (p == 1) /* the serial layer: bias inside the GEMM, as nn does it */
        return lin_forward(tp, out, in, w, b, N, IN, OUT);
    float *s = scratch;
    const float *x = in; /* (N, IN_tp) */
    if (!input_is_parallel) {
        MTC_CHECK(tp_scatter_to_region_forward(s, in, N, IN, comm)); /* split: no comm */
        x = s;
        s += (size_t)N * IN_tp;
    }
    if (sp) {
        float *partial = s; /* (B, T, OUT) */
        MTC_CHECK(lin_forward_r(tp, partial, x, w, NULL, N, IN_tp, OUT, 0));
        /* comm: reduce-scatter(tp) along T (fp32 partial sums even with --bf16:
         * one rounding of the sum, as the serial GEMM's; Megatron's bf16
         * reduction rounds each partial too) */
        MTC_CHECK(
            tp_reduce_scatter_to_seq_forward(out, partial, s + (size_t)N * OUT, B, T, OUT, comm));
        add_bias(out, b, (size_t)B * (T / p), OUT);
        lin_round_out(tp, out, (size_t)B * (T / p) * OUT);
        return MTC_OK;
    }
    MTC_CHECK(lin_forward_r(tp, out, x, w, NULL, N, IN_tp, OUT, 0));
    /* comm: all-reduce(tp) (reduce_from_region; fp32 partial sums, as above) */
    MTC_CHECK(tp_reduce_from_region_forward(out, out, (size_t)N * OUT, comm));
    add_bias(out, b, (size_t)N, OUT);
    lin_round_out(tp, out, (size_t)N * OUT);
    return MTC_OK;
}

mtc_result_t tp_row_linear_backward(const tp_ctx *tp, float *din, float *dw, float *db,
                                    const float *dout, const float *in, const float *w,
                                    float *scratch, int input_is_parallel, int B, int T, int IN,
                                    int OUT) {
    mtc_comm_t comm = tp->comm;
    int p = tp_size(comm), sp = tp->sequence_parallel && p > 1;
    MTC_CHECK(row_check(tp, input_is_parallel, T, IN));
    int IN_tp = IN / p, N = B * T;
    int N_loc = sp ? B * (T / p) : N;
    /* bias: the sum over this rank's rows of dout (partial under SP, see layers.h) */
    if (db) nn_linear_backward(tp->pool, NULL, NULL, db, dout, NULL, NULL, N_loc, IN_tp, OUT);
    float *s = scratch;
    const float *g = dout; /* (N, OUT), whole sequence */
    if (sp) {
        /* comm: all-gather(tp) along T (reduce_scatter_to_seq backward) */
        MTC_CHECK(tp_reduce_scatter_to_seq_backward(s, dout, s + (size_t)N * OUT, B, T, OUT, comm));
        g = s;
        s += (size_t)N * OUT;
    }
    const float *x = in; /* (N, IN_tp) */
    float *dx = din;
    int scatter = !input_is_parallel && p > 1;
    if (scatter) {
        MTC_CHECK(tp_scatter_to_region_forward(s, in, N, IN, comm)); /* re-split: no comm */
        x = s;
        dx = din ? s + (size_t)N * IN_tp : NULL;
        s += 2 * (size_t)N * IN_tp;
    }
    MTC_CHECK(lin_backward(tp, dx, dw, NULL, g, x, w, N, IN_tp, OUT, 0));
    /* comm: all-gather(tp) of the input-gradient columns (scatter_to_region backward) */
    if (scatter && din) MTC_CHECK(tp_scatter_to_region_backward(din, dx, s, N, IN, comm));
    return MTC_OK;
}
