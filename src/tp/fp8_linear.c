/* tp/fp8_linear.c - the fp8 linear GEMMs and their scale state; see
 * fp8_linear.h and docs/fp8.md.
 *
 *   quantize(operand, usage):  per tensor  scale from the history (delayed) or
 *                                          from amax(operand) reduced over TP x CP
 *                                          (tensorwise), one pass of nn_fp8_qdq
 *                              per block   nn_fp8_qdq_blocks with the block shape
 *                                          of the recipe, operand and usage
 *   usage row: blocks along the last dimension (x, w in fprop; dy in dgrad)
 *   usage col: along the first dimension (w in dgrad; dy, x in wgrad)
 *
 * The quantization passes run on the rank's pool, cut into row ranges that
 * are whole blocks, so the bits do not depend on the number of threads.
 * Limitations: one scale per tensor for a fused qkv / fc1 weight (as TE's
 * Linear), no fp8 output or attention (fp8_dpa), no fp8 expert GEMMs. */
#include "tp/fp8_linear.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"

static const char *RECIPES[TP_FP8_NRECIPES] = {"delayed", "tensorwise", "mxfp8", "blockwise"};

const char *tp_fp8_recipe_name(tp_fp8_recipe r) {
    return (unsigned)r < TP_FP8_NRECIPES ? RECIPES[r] : "?";
}

int tp_fp8_recipe_parse(const char *s) {
    for (int i = 0; s && i < TP_FP8_NRECIPES; i++)
        if (!strcmp(s, RECIPES[i])) return i;
    return -1;
}

int tp_fp8_layer_is_fp8(const tp_fp8_config *cfg, int num_layers, int l) {
    if (!cfg || !cfg->enabled) return 0;
    return l >= cfg->bf16_start && l < num_layers - cfg->bf16_end;
}

size_t tp_fp8_layer_floats(const tp_fp8_config *cfg) {
    return (size_t)TP_FP8_NLIN * TP_FP8_NOPS * (1 + (size_t)cfg->amax_history_len);
}

mtc_result_t tp_fp8_state_init(tp_fp8_state **out, const tp_fp8_config *cfg, mtc_grid_t grid,
                               int num_layers, int first, int last, size_t wmax) {
    *out = NULL;
    tp_fp8_state *st;
    MTC_CHECK(mtc_mem_calloc(1, sizeof *st, (void **)&st));
    st->cfg = *cfg;
    if (st->cfg.amax_history_len < 1) st->cfg.amax_history_len = 1;
    st->first_layer = first, st->last_layer = last;
    int nl = last - first > 0 ? last - first : 0;
    size_t H = (size_t)st->cfg.amax_history_len, nt = (size_t)nl * TP_FP8_NLIN * TP_FP8_NOPS;
    mtc_result_t rc =
        mtc_mem_calloc((size_t)nl * TP_FP8_NLIN + 1, sizeof(tp_fp8_gemm), (void **)&st->lin);
    if (rc == MTC_OK) rc = mtc_mem_calloc((size_t)nl + 1, 1, (void **)&st->is_fp8);
    if (rc == MTC_OK) rc = mtc_mem_calloc(nt * H + 1, sizeof(float), (void **)&st->hist);
    if (rc == MTC_OK) rc = mtc_mem_calloc(wmax + 1, sizeof(float), (void **)&st->wq);
    if (rc != MTC_OK) {
        tp_fp8_state_free(st);
        return rc;
    }
    st->wcap = wmax;
    for (int i = 0; i < nl; i++) {
        st->is_fp8[i] = (unsigned char)tp_fp8_layer_is_fp8(cfg, num_layers, first + i);
        for (int k = 0; k < TP_FP8_NLIN; k++) {
            tp_fp8_gemm *g = &st->lin[i * TP_FP8_NLIN + k];
            g->st = st;
            g->column = k == TP_FP8_QKV || k == TP_FP8_FC1;
            for (int o = 0; o < TP_FP8_NOPS; o++) {
                g->t[o].scale = 1.0f; /* TE's initial scale */
                g->t[o].hist = st->hist + (((size_t)i * TP_FP8_NLIN + k) * TP_FP8_NOPS + o) * H;
            }
        }
    }
    if (grid) {
        st->cur_comm = mtc_grid_comm(grid, MTC_GROUP_TP_CP, 0);
        st->amax_comm =
            mtc_grid_comm(grid, cfg->tp_only_amax_red ? MTC_GROUP_TP : MTC_GROUP_TP_DP_CP, 0);
        st->weight_comm = mtc_grid_comm(grid, MTC_GROUP_TP_DP_CP, 0);
        st->tp_rank = mtc_comm_rank(mtc_grid_comm(grid, MTC_GROUP_TP, 0));
    }
    tp_fp8_stats_reset(st);
    *out = st;
    return MTC_OK;
}

void tp_fp8_state_free(tp_fp8_state *st) {
    if (!st) return;
    free(st->lin);
    free(st->is_fp8);
    free(st->hist);
    free(st->wq);
    free(st);
}

tp_fp8_gemm *tp_fp8_layer(tp_fp8_state *st, int l) {
    if (!st || l < st->first_layer || l >= st->last_layer || !st->is_fp8[l - st->first_layer])
        return NULL;
    return &st->lin[(size_t)(l - st->first_layer) * TP_FP8_NLIN];
}

void tp_fp8_stats_reset(tp_fp8_state *st) {
    memset(st->stats.sat, 0, sizeof st->stats.sat);
    st->stats.sinv_min = INFINITY;
    st->stats.sinv_max = 0.0f;
}

/* ---- the quantization passes on the pool ------------------------------------------------ */

#define FP8_TASKS 64
typedef struct {
    nn_fp8_format f;
    int block; /* 0: per tensor */
    nn_fp8_block_kind kind;
    float *out;
    const float *x;
    int R, Cc, br, bc, rows; /* rows per task (a multiple of br) */
    float scale, inv;        /* per tensor */
    float amax[FP8_TASKS];   /* amax pass */
    size_t sat[FP8_TASKS];
    float smin[FP8_TASKS], smax[FP8_TASKS];
} fp8_job;

static void fp8_task(int i, void *arg) {
    fp8_job *j = arg;
    int r0 = i * j->rows, r1 = r0 + j->rows < j->R ? r0 + j->rows : j->R;
    size_t a = (size_t)r0 * j->Cc, n = (size_t)(r1 - r0) * j->Cc;
    j->smin[i] = INFINITY, j->smax[i] = 0.0f;
    if (!j->out) /* the amax pass */
        j->amax[i] = nn_fp8_amax(j->x + a, n);
    else if (!j->block)
        j->sat[i] = nn_fp8_qdq(j->f, j->out + a, j->x + a, n, j->scale, j->inv);
    else
        j->sat[i] = nn_fp8_qdq_blocks(j->f, j->kind, j->out, j->x, j->R, j->Cc, j->br, j->bc, r0,
                                      r1, &j->smin[i], &j->smax[i]);
}

/* Runs the job over rows in whole blocks of br; returns the task count. */
static int fp8_run(nn_pool *pool, fp8_job *j) {
    int tasks = nn_pool_size(pool);
    if (tasks > FP8_TASKS) tasks = FP8_TASKS;
    size_t per = ((size_t)j->R + (size_t)tasks - 1) / (size_t)tasks;
    /* at least 16k values per task; whole blocks */
    size_t min_rows = j->Cc > 0 ? (16384 + (size_t)j->Cc - 1) / (size_t)j->Cc : 1;
    if (per < min_rows) per = min_rows;
    per = (per + (size_t)j->br - 1) / (size_t)j->br * (size_t)j->br;
    j->rows = (int)per;
    int n = (int)(((size_t)j->R + per - 1) / per);
    if (n < 1) n = 1;
    if (n > FP8_TASKS) n = FP8_TASKS; /* cannot happen: per >= R / tasks */
    nn_pool_run(pool, n, fp8_task, j);
    return n;
}

static float fp8_amax_pool(nn_pool *pool, const float *x, int R, int Cc) {
    fp8_job j = {.x = x, .R = R, .Cc = Cc, .br = 1};
    int n = fp8_run(pool, &j);
    float m = 0.0f;
    for (int i = 0; i < n; i++)
        m = j.amax[i] > m ? j.amax[i] : m;
    return m;
}

typedef enum { USE_ROW = 0, USE_COL } fp8_usage;

static nn_fp8_format op_format(const tp_fp8_gemm *g, int op) {
    return op == TP_FP8_G && g->st->cfg.hybrid ? NN_FP8_E5M2 : NN_FP8_E4M3;
}

/* Quantize-dequantize operand op (R, Cc) into out. amax: the per-tensor
 * amax (tensorwise, already reduced). count: add the clipped values to the
 * stats. */
static void fp8_quant(tp_fp8_gemm *g, nn_pool *pool, int op, fp8_usage use, float *out,
                      const float *x, int R, int Cc, float amax, int count) {
    tp_fp8_state *st = g->st;
    fp8_job j = {.f = op_format(g, op), .out = out, .x = x, .R = R, .Cc = Cc, .br = 1, .bc = 1};
    switch (st->cfg.recipe) {
    case TP_FP8_DELAYED: j.scale = g->t[op].scale, j.inv = 1.0f / j.scale; break;
    case TP_FP8_TENSORWISE:
        j.scale = nn_fp8_scale_from_amax(amax, nn_fp8_max(j.f), 0, FLT_MAX);
        j.inv = 1.0f / j.scale;
        break;
    case TP_FP8_MXFP8: /* 1x32 along the GEMM's reduction dimension */
        j.block = 1, j.kind = NN_FP8_BLOCK_MX;
        if (use == USE_ROW)
            j.bc = 32;
        else
            j.br = 32;
        break;
    case TP_FP8_BLOCKWISE: /* 128x128 weights, 1x128 activations and gradients */
        j.block = 1, j.kind = NN_FP8_BLOCK_POW2;
        if (op == TP_FP8_W)
            j.br = j.bc = 128;
        else if (use == USE_ROW)
            j.bc = 128;
        else
            j.br = 128;
        break;
    }
    int n = fp8_run(pool, &j);
    size_t sat = 0;
    for (int i = 0; i < n; i++) {
        sat += j.sat[i];
        if (j.block) {
            if (j.smin[i] < st->stats.sinv_min) st->stats.sinv_min = j.smin[i];
            if (j.smax[i] > st->stats.sinv_max) st->stats.sinv_max = j.smax[i];
        }
    }
    if (!j.block) {
        if (j.inv < st->stats.sinv_min) st->stats.sinv_min = j.inv;
        if (j.inv > st->stats.sinv_max) st->stats.sinv_max = j.inv;
    }
    if (count) st->stats.sat[op] += (double)sat;
}

/* Per-tensor recipes: the amaxes of the listed operands (delayed: recorded
 * into each history's slot 0 in a training pass; tensorwise: reduced over
 * TP x CP in one message). */
static mtc_result_t fp8_amaxes(tp_fp8_gemm *g, nn_pool *pool, float amax[TP_FP8_NOPS],
                               const float *ops[TP_FP8_NOPS], const int R[TP_FP8_NOPS],
                               const int Cc[TP_FP8_NOPS]) {
    tp_fp8_state *st = g->st;
    int rec = st->cfg.recipe == TP_FP8_DELAYED && st->recording;
    if (st->cfg.recipe != TP_FP8_TENSORWISE && !rec) return MTC_OK;
    for (int o = 0; o < TP_FP8_NOPS; o++)
        amax[o] = ops[o] ? fp8_amax_pool(pool, ops[o], R[o], Cc[o]) : 0.0f;
    if (rec) {
        for (int o = 0; o < TP_FP8_NOPS; o++)
            if (ops[o] && amax[o] > g->t[o].hist[0]) g->t[o].hist[0] = amax[o];
        return MTC_OK;
    }
    /* comm: all-reduce MAX(TP x CP): a sharded or sequence-split operand's amax */
    if (st->cur_comm && mtc_comm_size(st->cur_comm) > 1)
        MTC_CHECK(mtc_all_reduce(amax, amax, TP_FP8_NOPS, MTC_DTYPE_F32, MTC_OP_MAX, st->cur_comm));
    return MTC_OK;
}

/* Which operands this rank counts: an operand replicated over TP (the
 * column-parallel input, the row-parallel output gradient) on TP rank 0
 * only, so the world's sum counts each value once. */
static int fp8_counts(const tp_fp8_gemm *g, int op) {
    if (op == TP_FP8_W) return 1;
    int replicated = (op == TP_FP8_X) == g->column;
    return !replicated || g->st->tp_rank == 0;
}

mtc_result_t tp_fp8_forward(tp_fp8_gemm *g, nn_pool *pool, float *out, float *xq, const float *x,
                            const float *w, const float *b, int N, int IN, int OUT) {
    tp_fp8_state *st = g->st;
    MTC_ASSERT((size_t)OUT * IN <= st->wcap);
    float amax[TP_FP8_NOPS] = {0};
    /* w_cast: w is the fp8 parameter itself (--fp8-param-gather), its amax taken at the cast */
    const float *ops[TP_FP8_NOPS] = {x, st->w_cast ? NULL : w, NULL};
    int R[TP_FP8_NOPS] = {N, OUT, 0}, Cc[TP_FP8_NOPS] = {IN, IN, 0};
    MTC_CHECK(fp8_amaxes(g, pool, amax, ops, R, Cc));
    fp8_quant(g, pool, TP_FP8_X, USE_ROW, xq, x, N, IN, amax[TP_FP8_X], fp8_counts(g, TP_FP8_X));
    if (!st->w_cast) fp8_quant(g, pool, TP_FP8_W, USE_ROW, st->wq, w, OUT, IN, amax[TP_FP8_W], 1);
    nn_linear_forward(pool, out, xq, st->w_cast ? w : st->wq, b, N, IN, OUT);
    return MTC_OK;
}

mtc_result_t tp_fp8_backward(tp_fp8_gemm *g, nn_pool *pool, float *dinp, float *dw, float *gq,
                             float *xq, const float *dout, const float *x, const float *w, int N,
                             int IN, int OUT) {
    tp_fp8_state *st = g->st;
    MTC_ASSERT((size_t)OUT * IN <= st->wcap);
    int wg8 = dw && st->cfg.wgrad;
    float amax[TP_FP8_NOPS] = {0};
    /* the weight's and input's amaxes are the forward's (delayed: recorded there) */
    int rec = st->cfg.recipe == TP_FP8_DELAYED;
    const float *ops[TP_FP8_NOPS] = {wg8 && !rec ? x : NULL, dinp && !rec && !st->w_cast ? w : NULL,
                                     dout};
    int R[TP_FP8_NOPS] = {N, OUT, N}, Cc[TP_FP8_NOPS] = {IN, IN, OUT};
    MTC_CHECK(fp8_amaxes(g, pool, amax, ops, R, Cc));
    /* wgrad first: dinp may be x's own buffer (the MLP's fc2 takes its input
     * gradient over its recomputed input) */
    if (dw && !wg8) /* --no-fp8-wgrad: the weight gradient from the unquantized operands */
        nn_linear_backward(pool, NULL, dw, NULL, dout, x, NULL, N, IN, OUT);
    if (wg8) {
        fp8_quant(g, pool, TP_FP8_G, USE_COL, gq, dout, N, OUT, amax[TP_FP8_G],
                  !dinp && fp8_counts(g, TP_FP8_G));
        fp8_quant(g, pool, TP_FP8_X, USE_COL, xq, x, N, IN, amax[TP_FP8_X], 0);
        nn_linear_backward(pool, NULL, dw, NULL, gq, xq, NULL, N, IN, OUT);
    }
    if (dinp) {
        fp8_quant(g, pool, TP_FP8_G, USE_ROW, gq, dout, N, OUT, amax[TP_FP8_G],
                  fp8_counts(g, TP_FP8_G));
        /* w_cast: per-tensor scales and 128x128 blocks quantize both usages alike */
        if (!st->w_cast)
            fp8_quant(g, pool, TP_FP8_W, USE_COL, st->wq, w, OUT, IN, amax[TP_FP8_W], 0);
        nn_linear_backward(pool, dinp, NULL, NULL, gq, NULL, st->w_cast ? w : st->wq, N, IN, OUT);
    }
    return MTC_OK;
}

/* ---- delayed scaling: the step's update --------------------------------------------------- */

void tp_fp8_delayed_update(float *scale, float *hist, int len, int amax_max, float scaled_max) {
    /* transformer_engine/common/recipe/delayed_scaling.cu: the history rolls
     * by one (slot 0, this step's amax, moves to the end; slot 0 restarts
     * at 0), the amax is the max over all len slots or the most recent one */
    float last = hist[0], amax = 0.0f;
    for (int i = 0; i < len; i++) {
        float a = i < len - 1 ? hist[i + 1] : last;
        amax = fmaxf(amax, a);
        hist[i] = i > 0 ? a : 0.0f;
    }
    if (!amax_max) amax = last;
    float s = isfinite(amax) && amax > 0 ? scaled_max / amax : *scale;
    if (isinf(s)) s = FLT_MAX;
    *scale = s;
}

mtc_result_t tp_fp8_step_end(tp_fp8_state *st) {
    if (!st || st->cfg.recipe != TP_FP8_DELAYED) return MTC_OK;
    int nl = st->last_layer - st->first_layer, H = st->cfg.amax_history_len;
    size_t nt = (size_t)nl * TP_FP8_NLIN * TP_FP8_NOPS;
    if (!nt) return MTC_OK;
    float *cur = NULL;
    MTC_CHECK(mtc_mem_calloc(nt, sizeof(float), (void **)&cur));
    for (size_t t = 0; t < nt; t++)
        cur[t] = st->hist[t * (size_t)H];
    /* comm: all-reduce MAX(TP x DP x CP, or TP) of every tensor's step amax */
    mtc_result_t rc = MTC_OK;
    if (st->amax_comm && mtc_comm_size(st->amax_comm) > 1)
        rc = mtc_all_reduce(cur, cur, nt, MTC_DTYPE_F32, MTC_OP_MAX, st->amax_comm);
    for (int i = 0; rc == MTC_OK && i < nl; i++)
        for (int k = 0; k < TP_FP8_NLIN; k++)
            for (int o = 0; o < TP_FP8_NOPS; o++) {
                tp_fp8_gemm *g = &st->lin[i * TP_FP8_NLIN + k];
                size_t t = ((size_t)i * TP_FP8_NLIN + k) * TP_FP8_NOPS + (size_t)o;
                g->t[o].hist[0] = cur[t];
                float fmax = nn_fp8_max(op_format(g, o));
                tp_fp8_delayed_update(&g->t[o].scale, g->t[o].hist, H, st->cfg.amax_max,
                                      ldexpf(fmax, -st->cfg.margin));
            }
    free(cur);
    return rc;
}

/* ---- checkpoint --------------------------------------------------------------------------- */

int tp_fp8_layer_get(const tp_fp8_state *st, int l, float *dst) {
    if (!st || l < st->first_layer || l >= st->last_layer) return 0;
    int H = st->cfg.amax_history_len;
    const tp_fp8_gemm *g = &st->lin[(size_t)(l - st->first_layer) * TP_FP8_NLIN];
    for (int k = 0; k < TP_FP8_NLIN; k++)
        for (int o = 0; o < TP_FP8_NOPS; o++) {
            *dst++ = g[k].t[o].scale;
            memcpy(dst, g[k].t[o].hist, (size_t)H * sizeof(float));
            dst += H;
        }
    return 1;
}

int tp_fp8_layer_set(tp_fp8_state *st, int l, const float *src) {
    if (!st || l < st->first_layer || l >= st->last_layer) return 0;
    int H = st->cfg.amax_history_len;
    tp_fp8_gemm *g = &st->lin[(size_t)(l - st->first_layer) * TP_FP8_NLIN];
    for (int k = 0; k < TP_FP8_NLIN; k++)
        for (int o = 0; o < TP_FP8_NOPS; o++) {
            g[k].t[o].scale = *src++;
            memcpy(g[k].t[o].hist, src, (size_t)H * sizeof(float));
            src += H;
        }
    return 1;
}
