/* moe/layer.c - one MoE layer on one rank's tokens: router, capacity,
 * losses, the permutation to expert-major order, the experts as grouped
 * GEMMs, and the unpermute; see moe.h.
 *
 * Grouped GEMM: one nn_pool_run per projection covers every local expert;
 * a task is (expert, block of 32 output rows) and calls single-threaded
 * cblas_sgemm on it, so each element is computed by one call of a shape
 * that depends only on the routing: the result does not depend on the
 * number of threads. An expert with no rows has no task (no empty GEMM).
 *
 * Scratch (moe_scratch_floats): [xp (M, C) | y (M, C) | dx (M, C) |
 * z (M, F) | dz (M, F) | dh (M, F1) | dlogits (N, E) | s (N, E) |
 * dprobs (N, k) | tmp (2 N k) | prow (M)].
 * With expert parallelism the allgather dispatcher gathers over the
 * ETP x EP group (Megatron's tp_ep group); the alltoall one is
 * dispatch_a2a.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "moe/moe_internal.h"
#include "nn/llama.h"

static int f1_of(const moe_dims *d) { return d->swiglu ? 2 * d->F : d->F; }

int moe_max_rows(const mtc_moe_config *m, int N, int E) {
    int nk = N * mtc_moe_topk(m);
    if (!m->pad_to_capacity) return nk;
    int cap = moe_capacity(m, N, E);
    int rows = E * (cap > N ? N : cap);
    return rows > nk ? rows : nk;
}

static size_t al(size_t n) { return (n + 15) & ~(size_t)15; }

static int ep_of(const moe_dims *d) { return d->ep > 1 ? d->ep : 1; }
/* Ranks whose tokens one rank's experts can see: its ETP x EP group. */
static int grp_of(const moe_dims *d) { return ep_of(d) * (d->etp > 1 ? d->etp : 1); }

/* Rows the local experts can get: every ETP x EP rank's tokens, each
 * rank's share bounded as the serial layer's. */
static size_t rows_max(const mtc_moe_config *m, const moe_dims *d, int N) {
    return (size_t)grp_of(d) * (size_t)moe_max_rows(m, N, d->E);
}

size_t moe_acts_floats(const mtc_moe_config *m, const moe_dims *d, int N) {
    size_t P = (size_t)grp_of(d), M = rows_max(m, d, N), NE = (size_t)N * d->E;
    size_t Nk = P * N * d->k, Ng = P * N, X = Ng > M ? Ng : M;
    return 16 + al(NE) + 3 * al(Nk) + al((size_t)d->E) + 2 * al(M) + al(M * f1_of(d)) +
           (m->recompute_act ? 0 : al(M * d->F)) + al(NE) + al(P * d->E) + al(M) +
           (P > 1 ? al(X * d->C) : 0);
}

size_t moe_act_floats(const mtc_moe_config *m, const moe_dims *d, int N) {
    return al(rows_max(m, d, N) * d->F);
}

void moe_acts_bind(moe_acts *a, float *base, const mtc_moe_config *m, const moe_dims *d, int N) {
    size_t P = (size_t)grp_of(d), M = rows_max(m, d, N), NE = (size_t)N * d->E;
    size_t Nk = P * N * d->k;
    float *p = base;
    a->h = (moe_acts_hdr *)p, p += 16;
    a->logits = p, p += al(NE);
    a->sel = (int *)p, p += al(Nk);
    a->probs = p, p += al(Nk);
    a->kept = (int *)p, p += al(Nk);
    a->counts = (int *)p, p += al((size_t)d->E);
    a->perm_tok = (int *)p, p += al(M);
    a->perm_sel = (int *)p, p += al(M);
    a->fch = p, p += al(M * f1_of(d));
    a->fchg = m->recompute_act ? NULL : p, p += m->recompute_act ? 0 : al(M * d->F);
    a->aux_cnt = p, p += al(NE);
    a->cnt_all = (int *)p, p += al(P * d->E);
    a->rprob = p, p += al(M);
    a->xg = P > 1 ? p : NULL;
}

size_t moe_scratch_floats(const mtc_moe_config *m, const moe_dims *d, int N) {
    size_t P = (size_t)grp_of(d), M = rows_max(m, d, N), NE = (size_t)N * d->E;
    size_t Nk = P * N * d->k, Ng = P * N;
    size_t G = Ng * d->C > M * (d->C + 1) ? Ng * d->C : M * (d->C + 1);
    /* as moe_carve: xp y dx | z dz | dh | dlogits s | dprobs | prow dprow | g1 g2 | stage | tmp */
    return 3 * al(M * d->C) + 2 * al(M * d->F) + al(M * f1_of(d)) + 2 * al(NE) + al(Nk) +
           2 * al(M) + 2 * al(G) + al(moe_stage_floats(d)) + al(2 * Nk) + MOE_A2A_TMP(P, d->E);
}

mtc_result_t moe_stats_init(moe_stats *s, int E) {
    memset(s, 0, sizeof *s);
    MTC_CHECK(mtc_mem_calloc((size_t)E, sizeof(double), (void **)&s->tokens));
    MTC_CHECK(mtc_mem_calloc((size_t)E, sizeof(float), (void **)&s->bias_counts));
    MTC_CHECK(mtc_mem_calloc((size_t)E, sizeof(double), (void **)&s->ga_counts));
    return MTC_OK;
}

void moe_stats_free(moe_stats *s) {
    if (!s) return;
    free(s->tokens);
    free(s->bias_counts);
    free(s->ga_counts);
    memset(s, 0, sizeof *s);
}

void moe_stats_reset(moe_stats *s, int E) {
    s->lb_loss = s->z_loss = s->dropped = s->assigned = 0;
    s->nmb = s->ga_steps = 0;
    memset(s->tokens, 0, (size_t)E * sizeof(double));
    memset(s->bias_counts, 0, (size_t)E * sizeof(float));
    memset(s->ga_counts, 0, (size_t)E * sizeof(double));
}

/* ---- forward ------------------------------------------------------------------------ */

moe_scratch moe_carve(float *base, const mtc_moe_config *m, const moe_dims *d, int N) {
    size_t P = (size_t)grp_of(d), M = rows_max(m, d, N), NE = (size_t)N * d->E;
    size_t Nk = P * N * d->k, Ng = P * N,
           G = Ng * d->C > M * (d->C + 1) ? Ng * d->C : M * (d->C + 1);
    moe_scratch s;
    float *p = base;
    s.xp = p, p += al(M * d->C);
    s.y = p, p += al(M * d->C);
    s.dx = p, p += al(M * d->C);
    s.z = p, p += al(M * d->F);
    s.dz = p, p += al(M * d->F);
    s.dh = p, p += al(M * f1_of(d));
    s.dlogits = p, p += al(NE);
    s.s = p, p += al(NE);
    s.dprobs = p, p += al(Nk);
    s.prow = p, p += al(M);
    s.dprow = p, p += al(M);
    s.g1 = p, p += al(G);
    s.g2 = p, p += al(G);
    s.stage = p, p += al(moe_stage_floats(d));
    s.tmp = p;
    return s;
}

int moe_perm_segment(moe_acts *a, const mtc_moe_config *m, const moe_dims *d, int e, int base,
                     int N, int M, int *count) {
    int k = d->k, cap = moe_capacity(m, N, d->E);
    int target = !m->pad_to_capacity ? -1 : cap > N ? N : cap;
    const int *sel = a->sel + (size_t)base * k, *kept = a->kept + (size_t)base * k;
    int routed = 0;
    for (int i = 0; i < N * k; i++)
        routed += sel[i] == e && kept[i];
    int pad = target >= 0 ? target - routed : 0;
    for (int n = 0; n < N; n++) {
        int slot = -1;
        for (int j = 0; j < k; j++)
            if (sel[n * k + j] == e && kept[n * k + j]) slot = (base + n) * k + j;
        if (slot < 0 && pad <= 0) continue;
        if (slot < 0) pad--;
        a->perm_tok[M] = base + n, a->perm_sel[M] = slot, M++, (*count)++;
    }
    return M;
}

/* Expert-major rows of the local experts [e0, e0 + El) over the P ranks'
 * gathered tokens (rank-major, N each): counts[e - e0]. */
static int build_perm(moe_acts *a, const mtc_moe_config *m, const moe_dims *d, int N, int P, int e0,
                      int El) {
    int M = 0;
    for (int e = e0; e < e0 + El; e++) {
        int c = 0;
        for (int r = 0; r < P; r++)
            M = moe_perm_segment(a, m, d, e, r * N, N, M, &c);
        a->counts[e - e0] = c;
    }
    return M;
}

/* Megatron's local_tokens_per_expert: the final routing map's tokens per
 * expert over this rank's N tokens (padding included). */
static void local_counts(float *cnt, moe_acts *a, const mtc_moe_config *m, const moe_dims *d,
                         int base, int N) {
    int cap = moe_capacity(m, N, d->E), target = !m->pad_to_capacity ? -1 : cap > N ? N : cap;
    const int *sel = a->sel + (size_t)base * d->k, *kept = a->kept + (size_t)base * d->k;
    for (int e = 0; e < d->E; e++) {
        int routed = 0;
        for (int i = 0; i < N * d->k; i++)
            routed += sel[i] == e && kept[i];
        cnt[e] += (float)(target > routed ? target : routed);
    }
}

/* Aux-loss counts for this microbatch (the group's all-reduce included)
 * and the token total T they are over; 0 when there is no aux loss. */
static mtc_result_t aux_prepare(moe_acts *a, moe_stats *st, float *s, const mtc_moe_config *m,
                                const moe_dims *d, int N, const moe_pass *pass) {
    a->h->aux_groups = 0;
    if (!pass->train || m->lb == MOE_LB_NONE || !(m->aux_coeff > 0)) return MTC_OK;
    int B = m->lb == MOE_LB_SEQ_AUX ? (pass->seq_B > 0 ? pass->seq_B : 1) : 0;
    moe_aux_scores(s, a->aux_cnt, a->logits, m, N, d->E, B);
    mtc_comm_t g = m->lb == MOE_LB_GLOBAL_AUX ? pass->tpdpcp : pass->tpcp;
    int gsize = g ? mtc_comm_size(g) : 1;
    size_t nc = (size_t)(B ? B : 1) * d->E;
    /* comm: all-reduce(TP x CP) of the counts (global_aux_loss: TP x DP x CP) */
    if (g) MTC_CHECK(mtc_all_reduce(a->aux_cnt, a->aux_cnt, nc, MTC_DTYPE_F32, MTC_OP_SUM, g));
    a->h->aux_groups = B ? B : 1;
    a->h->aux_total = (double)(B ? N / B : N) * gsize;
    if (m->lb == MOE_LB_GLOBAL_AUX && st) { /* counts averaged over the step's microbatches */
        if (pass->record) {
            for (int e = 0; e < d->E; e++)
                st->ga_counts[e] += a->aux_cnt[e];
            st->ga_steps++;
        }
        int steps = st->ga_steps > 0 ? st->ga_steps : 1;
        for (int e = 0; e < d->E; e++)
            a->aux_cnt[e] = (float)(st->ga_counts[e] / steps);
    }
    return MTC_OK;
}

/* Where a call runs: the allgather group (ETP x EP; EP when etp 1) and
 * this rank's place in it, and the local experts [e0, e0 + El) of its EP
 * rank. */
static mtc_comm_t ep_where(const moe_pass *pass, const moe_dims *d, int *P, int *r, int *El,
                           int *e0) {
    mtc_comm_t g = pass->tpep ? pass->tpep : pass->ep;
    *P = g ? mtc_comm_size(g) : 1;
    *r = g ? mtc_comm_rank(g) : 0;
    int ep = pass->ep ? mtc_comm_size(pass->ep) : 1;
    MTC_ASSERT(*P == grp_of(d) && ep == ep_of(d) && d->E % ep == 0);
    MTC_ASSERT((pass->etp ? mtc_comm_size(pass->etp) : 1) == (d->etp > 1 ? d->etp : 1));
    MTC_ASSERT(d->etp <= 1 || !d->bias); /* validated: each ETP rank would add fc2's bias */
    moe_local_expert_range(d->E, ep, pass->ep ? mtc_comm_rank(pass->ep) : 0, e0, El);
    return g;
}

/* --moe-router-dtype fp64: Megatron's router_gating_linear in float64,
 * logits (N, E) = in (N, C) W^T (E, C), each dot product summed in double
 * and rounded once (the logits stay fp32 here, as every activation). */
static void gating_fp64_forward(float *logits, const float *in, const float *w, int N, int C,
                                int E) {
    for (int n = 0; n < N; n++)
        for (int e = 0; e < E; e++) {
            double s = 0;
            const float *x = in + (size_t)n * C, *r = w + (size_t)e * C;
            for (int c = 0; c < C; c++)
                s += (double)x[c] * (double)r[c];
            logits[(size_t)n * E + e] = (float)s;
        }
}

/* Its backward, in double as RouterGatingLinearFunction.backward: din (N, C)
 * += dlogits W, dw (E, C) += dlogits^T in (dw NULL: none). */
static void gating_fp64_backward(float *din, float *dw, const float *dlogits, const float *in,
                                 const float *w, int N, int C, int E) {
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int e = 0; e < E; e++)
                s += (double)dlogits[(size_t)n * E + e] * (double)w[(size_t)e * C + c];
            din[(size_t)n * C + c] += (float)s;
        }
    for (int e = 0; dw && e < E; e++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int n = 0; n < N; n++)
                s += (double)dlogits[(size_t)n * E + e] * (double)in[(size_t)n * C + c];
            dw[(size_t)e * C + c] += (float)s;
        }
}

mtc_result_t moe_layer_forward(float *out, moe_acts *a, moe_stats *st, const float *in,
                               const moe_weights *w, const mtc_moe_config *m, const moe_dims *d,
                               int N, const moe_pass *pass, float *scratch) {
    int E = d->E, k = d->k, C = d->C, P, r, El, e0;
    mtc_comm_t g = ep_where(pass, d, &P, &r, &El, &e0);
    int Ng = P * N;
    moe_scratch s = moe_carve(scratch, m, d, N);
    nn_pool *pool = pass->pool;
    a->h->N = N;
    /* routing of this rank's tokens, into its block of the gathered arrays */
    int *sel = a->sel + (size_t)r * N * k, *kept = a->kept + (size_t)r * N * k;
    float *probs = a->probs + (size_t)r * N * k;
    if (m->router_fp64)
        gating_fp64_forward(a->logits, in, w->router, N, C, E);
    else
        nn_linear_forward(pool, a->logits, in, w->router, NULL, N, C, E);
    /* Megatron's RandomSTE: the routing sees random logits, and their
     * gradient reaches the gating GEMM unchanged (a straight-through) */
    if (m->force_balance && pass->random_logits)
        pass->random_logits(pass->random_ctx, a->logits, N, E);
    if (pass->train && m->z_coeff > 0 && pass->record && st)
        st->z_loss += moe_z_loss(a->logits, 1.0f, N, E);
    moe_router_topk(sel, probs, a->logits, w->expert_bias, m, N, E);
    moe_router_capacity(kept, probs, sel, m, N, E, s.tmp);
    MTC_CHECK(aux_prepare(a, st, s.s, m, d, N, pass));
    if (a->h->aux_groups && pass->record && st)
        st->lb_loss += moe_aux_loss(s.s, a->aux_cnt, a->h->aux_total, a->h->aux_groups, m, N, E) /
                       m->aux_coeff;
    if (pass->train && pass->record && st) {
        st->nmb++;
        local_counts(st->bias_counts, a, m, d, r * N, N);
        for (int i = 0; i < N * k; i++) {
            st->assigned += 1;
            if (kept[i])
                st->tokens[sel[i]] += 1;
            else
                st->dropped += 1;
        }
    }
    if (P > 1 && m->dispatcher == MOE_DISPATCH_ALLTOALL)
        return moe_a2a_forward(out, a, in, w, m, d, N, pass, &s);
    const float *x = in;
    if (P > 1) { /* comm: all-gather(ETP x EP) of the routing and the tokens (allgather) */
        MTC_CHECK(mtc_all_gather(sel, a->sel, (size_t)N * k, MTC_DTYPE_I32, g));
        MTC_CHECK(mtc_all_gather(kept, a->kept, (size_t)N * k, MTC_DTYPE_I32, g));
        MTC_CHECK(mtc_all_gather(probs, a->probs, (size_t)N * k, MTC_DTYPE_F32, g));
        MTC_CHECK(mtc_all_gather(in, a->xg, (size_t)N * C, MTC_DTYPE_F32, g));
        x = a->xg;
    }
    int M = a->h->M = build_perm(a, m, d, N, P, e0, El);
    for (int q = 0; q < M; q++)
        s.prow[q] = a->perm_sel[q] >= 0 ? a->probs[a->perm_sel[q]] : 0.0f;
    moe_gather_rows(pool, s.xp, x, a->perm_tok, 0, M, C);
    MTC_CHECK(moe_experts_forward(pool, s.y, a->fch, a->fchg, s.z, s.stage, s.xp, s.prow, a->counts,
                                  El, e0, w, d, M));
    float *yg = P > 1 ? s.g1 : out; /* unpermute: each token's outputs summed in expert order */
    memset(yg, 0, (size_t)Ng * C * sizeof(float));
    moe_scatter_add(pool, yg, s.y, C, a->perm_tok, 0, M, C);
    /* comm: reduce-scatter(ETP x EP): each rank's tokens summed over the ranks'
     * experts and, with etp > 1, over the row-parallel fc2's partial sums */
    if (P > 1) MTC_CHECK(mtc_reduce_scatter(yg, out, (size_t)N * C, MTC_DTYPE_F32, MTC_OP_SUM, g));
    return MTC_OK;
}

/* ---- backward ----------------------------------------------------------------------- */

mtc_result_t moe_layer_backward(float *din, const moe_weights *dw, const float *dout,
                                const moe_acts *a, const float *in, const moe_weights *w,
                                const mtc_moe_config *m, const moe_dims *d, const moe_pass *pass,
                                float *scratch) {
    int E = d->E, k = d->k, C = d->C, N = a->h->N, M = a->h->M, P, r, El, e0;
    mtc_comm_t g = ep_where(pass, d, &P, &r, &El, &e0);
    int Ng = P * N;
    moe_scratch s = moe_carve(scratch, m, d, N);
    nn_pool *pool = pass->pool;
    float *dprobs = s.dprobs + (size_t)r * N * k;
    if (P > 1 && m->dispatcher == MOE_DISPATCH_ALLTOALL) {
        MTC_CHECK(moe_a2a_backward(din, dprobs, dw, dout, a, w, m, d, pass, &s));
    } else {
        const float *dyg = dout, *x = P > 1 ? a->xg : in;
        /* comm: all-gather(ETP x EP) of d(out) (the reduce-scatter's backward) */
        if (P > 1) {
            MTC_CHECK(mtc_all_gather(dout, s.g1, (size_t)N * C, MTC_DTYPE_F32, g));
            dyg = s.g1;
        }
        for (int q = 0; q < M; q++)
            s.prow[q] = a->perm_sel[q] >= 0 ? a->probs[a->perm_sel[q]] : 0.0f;
        moe_gather_rows(pool, s.y, dyg, a->perm_tok, 0, M, C); /* dy of each permuted row */
        moe_gather_rows(pool, s.xp, x, a->perm_tok, 0, M, C);
        float *dprow = s.dprow;
        if (m->recompute_act) moe_experts_act(pool, a->fchg, a->fch, M, d); /* moe_act */
        MTC_CHECK(moe_experts_backward(pool, s.dx, dprow, s.y, s.xp, a->fch, a->fchg, s.prow,
                                       a->counts, El, e0, w, dw, d, M, s.z, s.dz, s.dh, s.stage));
        memset(s.dprobs, 0, (size_t)Ng * k * sizeof(float));
        for (int q = 0; q < M; q++)
            if (a->perm_sel[q] >= 0) s.dprobs[a->perm_sel[q]] = dprow[q];
        float *dxg = P > 1 ? s.g2 : din;
        memset(dxg, 0, (size_t)Ng * C * sizeof(float));
        moe_scatter_add(pool, dxg, s.dx, C, a->perm_tok, 0, M, C);
        if (P > 1) { /* comm: reduce-scatter(ETP x EP) of d(tokens) and d(probs) */
            MTC_CHECK(mtc_reduce_scatter(dxg, din, (size_t)N * C, MTC_DTYPE_F32, MTC_OP_SUM, g));
            MTC_CHECK(
                mtc_reduce_scatter(s.dprobs, dprobs, (size_t)N * k, MTC_DTYPE_F32, MTC_OP_SUM, g));
        }
    }
    /* router: d(logits) from the probabilities, the aux loss and the z-loss */
    const int *sel = a->sel + (size_t)r * N * k;
    memset(s.dlogits, 0, (size_t)N * E * sizeof(float));
    moe_router_topk_backward(s.dlogits, dprobs, sel, a->logits, m, N, E);
    if (pass->train && a->h->aux_groups) {
        int B = m->lb == MOE_LB_SEQ_AUX ? a->h->aux_groups : 0;
        moe_aux_scores(s.s, NULL, a->logits, m, N, E, B); /* the counts are forward's */
        moe_aux_loss_backward(s.dlogits, s.s, a->aux_cnt, a->h->aux_total, a->h->aux_groups,
                              a->logits, m, N, E, pass->aux_scale);
    }
    if (pass->train && m->z_coeff > 0) {
        int g = pass->tpcp ? mtc_comm_size(pass->tpcp) : 1;
        moe_z_loss_backward(s.dlogits, a->logits, m->z_coeff / g, N, E, pass->aux_scale);
    }
    /* din += dlogits W_r; dW_r += dlogits^T in */
    if (m->router_fp64) {
        gating_fp64_backward(din, dw->router, s.dlogits, in, w->router, N, C, E);
        return MTC_OK;
    }
    nn_sgemm(pool, 0, 0, N, C, E, 1.0f, s.dlogits, E, w->router, C, 1.0f, din, C);
    if (dw->router) nn_sgemm(pool, 1, 0, E, C, N, 1.0f, s.dlogits, E, in, C, 1.0f, dw->router, C);
    return MTC_OK;
}
