/* tp/xent.c - vocabulary-parallel cross-entropy (Megatron
 * tensor_parallel/cross_entropy.py:122-232) over logits whose columns are
 * split across the TP group; see layers.h.
 *
 *   forward   m   = all-reduce MAX( max_{local valid v} x_v )
 *             x  := exp(x − m) locally (padding 0)
 *             [pred | Σ] = all-reduce SUM( [x_t − m if t is local else 0 | Σ_local x] )
 *             loss = log Σ − pred ;  x := x / Σ  (this rank's probabilities)
 *   backward  dx = s_n (p − onehot(t)), the one-hot on the owning rank only;
 *             no communication. forward_backward fuses the last sweeps.
 * Columns from V up to the padded width are left out of the softmax (the
 * kernels' contract, as nn/ and llm.c); the GPT model passes V = the padded
 * vocabulary, so its softmax runs over every padded column, as Megatron's.
 * The local pieces (row max, target logit, exp-sum) are the exported
 * tp_xent_* kernels; rows are split over the pool by size only, each row
 * computed by one thread in a fixed order, so results do not depend on the
 * pool size. Limitations: no label smoothing (mtc has no flag for it). */
#include <math.h>

#include "tp/layers.h"
#include "tp/mappings.h"

typedef struct {
    float *out;       /* (N) rowmax or sumexp */
    float *x;         /* (N, V_tp) */
    const float *max; /* (N) */
    int v0, N, V_tp, nvalid, tiles;
} xent_job;

/* Valid (non-padding) columns of the shard starting at global column v0. */
static int valid_cols(int v0, int V_tp, int V) {
    int k = V - v0;
    return k < 0 ? 0 : (k > V_tp ? V_tp : k);
}

static void rows_of(const xent_job *j, int i, int *lo, int *hi) {
    *lo = (int)((long long)j->N * i / j->tiles);
    *hi = (int)((long long)j->N * (i + 1) / j->tiles);
}

static int tiles_for(int N, int V_tp) {
    long long t = ((long long)N * V_tp + 32767) / 32768;
    if (t > N) t = N;
    if (t > 4096) t = 4096;
    return t < 1 ? 1 : (int)t;
}

static void max_tile(int i, void *vp) {
    const xent_job *j = vp;
    int lo, hi;
    rows_of(j, i, &lo, &hi);
    for (int n = lo; n < hi; n++) {
        const float *x = j->x + (size_t)n * j->V_tp;
        j->out[n] = nn_vmax(x, j->nvalid);
    }
}

void tp_xent_local_max(nn_pool *pool, float *rowmax, const float *x, int v0, int N, int V_tp,
                       int V) {
    xent_job j = {rowmax, (float *)x, NULL, v0, N, V_tp, valid_cols(v0, V_tp, V), 0};
    j.tiles = tiles_for(N, V_tp);
    if (N > 0) nn_pool_run(pool, j.tiles, max_tile, &j);
}

void tp_xent_predicted(float *pred, const float *x, const int *targets, const float *rowmax, int v0,
                       int N, int V_tp, int V) {
    int nvalid = valid_cols(v0, V_tp, V);
    for (int n = 0; n < N; n++) {
        int t = targets[n] - v0;
        pred[n] = (t >= 0 && t < nvalid) ? x[(size_t)n * V_tp + t] - rowmax[n] : 0.0f;
    }
}

static void exp_tile(int i, void *vp) {
    const xent_job *j = vp;
    int lo, hi;
    rows_of(j, i, &lo, &hi);
    for (int n = lo; n < hi; n++) {
        float *x = j->x + (size_t)n * j->V_tp;
        float s = nn_vexp_sum(x, x, j->nvalid, j->max[n]); /* the serial nn exp */
        for (int v = j->nvalid; v < j->V_tp; v++)
            x[v] = 0.0f;
        j->out[n] = s;
    }
}

void tp_xent_exp_sum(nn_pool *pool, float *sumexp, float *x, const float *rowmax, int v0, int N,
                     int V_tp, int V) {
    xent_job j = {sumexp, x, rowmax, v0, N, V_tp, valid_cols(v0, V_tp, V), 0};
    j.tiles = tiles_for(N, V_tp);
    if (N > 0) nn_pool_run(pool, j.tiles, exp_tile, &j);
}

static mtc_result_t xent_check(int p, const int *targets, int N, int V, int Vp) {
    if (V < 1 || Vp < V)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "vocab-parallel cross-entropy: vocabulary %d must be in [1, padded %d]", V,
                         Vp);
    if (Vp % p)
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "padded vocabulary %d is not divisible by tensor-model-parallel-size=%d",
                         Vp, p);
    for (int n = 0; n < N; n++)
        if (targets[n] < 0 || targets[n] >= V)
            return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                             "target %d of token %d is outside the vocabulary [0, %d)", targets[n],
                             n, V);
    return MTC_OK;
}

/* The last sweep over the logits, after the all-reduces: normalise to
 * probabilities (FWD), turn probabilities into dlogits (BWD), or both in
 * one pass with the same roundings as the two passes (FWD | BWD). */
enum { FWD = 1, BWD = 2 };

typedef struct {
    float *x, *losses;
    const float *pred, *sum, *token_scale;
    const int *targets;
    float scale;
    int mode, v0, N, V_tp, nvalid, tiles;
} finish_job;

/* The finishing sweep over row n. */
static void finish_row(const finish_job *j, int n) {
    float *x = j->x + (size_t)n * j->V_tp;
    int t = j->targets[n] - j->v0, own = t >= 0 && t < j->nvalid;
    float s = j->token_scale ? j->scale * j->token_scale[n] : j->scale;
    if (j->mode & FWD) {
        j->losses[n] = logf(j->sum[n]) - j->pred[n];
        float inv = 1.0f / j->sum[n];
        if (j->mode & BWD) {
            /* the roundings of the two passes: volatile keeps a compiler
             * that contracts (gnu11's default; the build passes
             * -ffp-contract=off) from fusing x[t] * inv - 1 into one FMA */
            volatile float pt = own ? x[t] * inv : 0.0f;
            nn_vmul2(x, j->nvalid, inv, s);
            if (own) x[t] = (pt - 1.0f) * s;
        } else {
            nn_vmul2(x, j->nvalid, inv, 1.0f);
        }
    } else {
        if (own) x[t] -= 1.0f;
        nn_vmul2(x, j->nvalid, s, 1.0f);
    }
    for (int v = j->nvalid; v < j->V_tp; v++)
        x[v] = 0.0f;
}

static void finish_tile(int i, void *vp) {
    const finish_job *j = vp;
    int lo = (int)((long long)j->N * i / j->tiles),
        hi = (int)((long long)j->N * (i + 1) / j->tiles);
    for (int n = lo; n < hi; n++)
        finish_row(j, n);
}

/* Without tensor parallelism nothing is exchanged between the sweeps, so
 * each row goes through all of them while it sits in L2 (a 50K-column row
 * is 200 KB): one trip to memory instead of three. The same operations in
 * the same order as xent_reduce + finish_tile, so the same bits. Needs
 * FWD; j->pred, j->sum point at writable scratch ([max | pred | sum]). */
static void fused_tile(int i, void *vp) {
    const finish_job *j = vp;
    int lo = (int)((long long)j->N * i / j->tiles),
        hi = (int)((long long)j->N * (i + 1) / j->tiles);
    float *mx = (float *)j->pred - j->N, *pred = (float *)j->pred, *sum = (float *)j->sum;
    for (int n = lo; n < hi; n++) {
        float *x = j->x + (size_t)n * j->V_tp;
        mx[n] = nn_vmax(x, j->nvalid);
        int t = j->targets[n] - j->v0;
        pred[n] = (t >= 0 && t < j->nvalid) ? x[t] - mx[n] : 0.0f;
        sum[n] = nn_vexp_sum(x, x, j->nvalid, mx[n]);
        finish_row(j, n);
    }
}

static void finish_run(const tp_ctx *tp, finish_job *j) {
    j->tiles = tiles_for(j->N, j->V_tp);
    if (j->N > 0) nn_pool_run(tp->pool, j->tiles, finish_tile, j);
}

/* Forward up to and including the all-reduces; scratch = [max | pred | sum]. */
static mtc_result_t xent_reduce(const tp_ctx *tp, float *logits, const int *targets, float *scratch,
                                int N, int V, int Vp) {
    mtc_comm_t comm = tp->comm;
    int p = tp_size(comm);
    int V_tp = Vp / p, v0 = tp_rank(comm) * V_tp;
    float *mx = scratch, *pred = scratch + N, *sum = scratch + 2 * (size_t)N;
    tp_xent_local_max(tp->pool, mx, logits, v0, N, V_tp, V);
    if (p > 1) /* comm: all-reduce MAX(tp) */
        MTC_CHECK(mtc_all_reduce(mx, mx, (size_t)N, MTC_DTYPE_F32, MTC_OP_MAX, comm));
    tp_xent_predicted(pred, logits, targets, mx, v0, N, V_tp, V);
    tp_xent_exp_sum(tp->pool, sum, logits, mx, v0, N, V_tp, V);
    if (p > 1) /* comm: all-reduce SUM(tp) of [pred | sumexp] */
        MTC_CHECK(mtc_all_reduce(pred, pred, 2 * (size_t)N, MTC_DTYPE_F32, MTC_OP_SUM, comm));
    return MTC_OK;
}

static mtc_result_t xent_run(const tp_ctx *tp, int mode, float *losses, float *logits,
                             const int *targets, float scale, const float *token_scale,
                             float *scratch, int N, int V, int Vp) {
    int p = tp_size(tp->comm);
    MTC_CHECK(xent_check(p, targets, N, V, Vp));
    if (N <= 0) return MTC_OK;
    int V_tp = Vp / p, v0 = tp_rank(tp->comm) * V_tp;
    finish_job j = {logits, losses, NULL, NULL, token_scale, targets,
                    scale,  mode,   v0,   N,    V_tp,        valid_cols(v0, V_tp, V),
                    0};
    if (mode & FWD) j.pred = scratch + N, j.sum = scratch + 2 * (size_t)N;
    if ((mode & FWD) && p == 1) {
        j.tiles = tiles_for(N, V_tp);
        nn_pool_run(tp->pool, j.tiles, fused_tile, &j);
        return MTC_OK;
    }
    if (mode & FWD) MTC_CHECK(xent_reduce(tp, logits, targets, scratch, N, V, Vp));
    finish_run(tp, &j);
    return MTC_OK;
}

mtc_result_t tp_vocab_xent_forward(const tp_ctx *tp, float *losses, float *logits,
                                   const int *targets, float *scratch, int N, int V, int Vp) {
    return xent_run(tp, FWD, losses, logits, targets, 0.0f, NULL, scratch, N, V, Vp);
}

mtc_result_t tp_vocab_xent_backward(const tp_ctx *tp, float *probs, const int *targets, float scale,
                                    const float *token_scale, int N, int V, int Vp) {
    return xent_run(tp, BWD, NULL, probs, targets, scale, token_scale, NULL, N, V, Vp);
}

mtc_result_t tp_vocab_xent_forward_backward(const tp_ctx *tp, float *losses, float *logits,
                                            const int *targets, float scale,
                                            const float *token_scale, float *scratch, int N, int V,
                                            int Vp) {
    return xent_run(tp, FWD | BWD, losses, logits, targets, scale, token_scale, scratch, N, V, Vp);
}
