/* moe/dispatch_a2a.c - Megatron's alltoall token dispatcher (MoEAlltoAll-
 * TokenDispatcher) over the EP group, expert-TP 1:
 *
 *   local rows, expert-major ──all-gather(EP) of the rows per expert──> splits
 *   [token | prob] rows ──all-to-all-v(EP)──> (source rank, local expert) chunks
 *   ──sort chunks──> (local expert, source rank) ──experts──> sort back
 *   ──all-to-all-v(EP)──> this rank's rows ──unpermute (sum of the k rows)──> out
 *
 * Backward runs the same path with d(out) out and [d(token) | d(prob)] back.
 * EP rank j owns experts [j E/ep, (j+1) E/ep), so the local expert-major
 * order is also destination-rank order and each destination's rows are
 * one block. A rank that sends or receives nothing takes part with zero
 * counts (the v-collectives accept empty blocks): no hang on imbalanced
 * routing. Limitations: the probabilities travel as an extra column of the
 * token rows (C + 1 floats) rather than their own collective; no
 * expert-tensor parallelism. */
#include <string.h>

#include "core/log.h"
#include "moe/moe_internal.h"

typedef struct {
    size_t *sc, *sd, *rc, *rd;     /* [token | prob] rows (width C + 1): counts, displacements */
    size_t *scb, *sdb, *rcb, *rdb; /* the outputs coming back (width C) */
    int Mr;                        /* rows this rank's experts receive */
} a2a_splits;

static a2a_splits splits(void *tmp, const int *cnt, int P, int E, int r, int W, int C) {
    a2a_splits s;
    size_t *p = tmp;
    s.sc = p, s.sd = p + P, s.rc = p + 2 * P, s.rd = p + 3 * P;
    s.scb = p + 4 * P, s.sdb = p + 5 * P, s.rcb = p + 6 * P, s.rdb = p + 7 * P;
    int El = E / P, e0 = r * El;
    size_t so = 0, ro = 0;
    s.Mr = 0;
    for (int j = 0; j < P; j++) {
        size_t send = 0, recv = 0;
        for (int e = j * El; e < (j + 1) * El; e++)
            send += (size_t)cnt[r * E + e];
        for (int e = e0; e < e0 + El; e++)
            recv += (size_t)cnt[j * E + e];
        s.sc[j] = send * W, s.sd[j] = so * W, s.rc[j] = recv * W, s.rd[j] = ro * W;
        s.scb[j] = send * C, s.sdb[j] = so * C, s.rcb[j] = recv * C, s.rdb[j] = ro * C;
        so += send, ro += recv;
        s.Mr += (int)recv;
    }
    return s;
}

/* Rows (width W) between (source rank, local expert) chunk order and
 * (local expert, source rank) order; to_expert picks the direction. */
static void sort_chunks(float *dst, const float *src, const int *cnt, int P, int E, int e0, int El,
                        int W, int to_expert) {
    size_t em = 0; /* offset in expert-major order */
    for (int e = 0; e < El; e++)
        for (int i = 0; i < P; i++) {
            size_t rm = 0; /* offset of chunk (i, e) in rank-major order */
            for (int i2 = 0; i2 < i; i2++)
                for (int e2 = 0; e2 < El; e2++)
                    rm += (size_t)cnt[i2 * E + e0 + e2];
            for (int e2 = 0; e2 < e; e2++)
                rm += (size_t)cnt[i * E + e0 + e2];
            size_t n = (size_t)cnt[i * E + e0 + e] * W;
            if (to_expert)
                memcpy(dst + em * W, src + rm * W, n * sizeof(float));
            else
                memcpy(dst + rm * W, src + em * W, n * sizeof(float));
            em += (size_t)cnt[i * E + e0 + e];
        }
}

mtc_result_t moe_a2a_forward(float *out, moe_acts *a, const float *in, const moe_weights *w,
                             const mtc_moe_config *m, const moe_dims *d, int N,
                             const moe_pass *pass, moe_scratch *s) {
    int P = mtc_comm_size(pass->ep), r = mtc_comm_rank(pass->ep), E = d->E, C = d->C, W = C + 1;
    int El = E / P, e0 = r * El;
    int *mine = a->cnt_all + (size_t)r * E;
    int Ml = 0;
    for (int e = 0; e < E; e++) { /* this rank's rows, expert-major = destination-major */
        mine[e] = 0;
        Ml = moe_perm_segment(a, m, d, e, r * N, N, Ml, &mine[e]);
    }
    a->h->Ml = Ml;
    /* comm: all-gather(EP) of the rows per expert (the output splits) */
    MTC_CHECK(mtc_all_gather(mine, a->cnt_all, (size_t)E, MTC_DTYPE_I32, pass->ep));
    a2a_splits sp = splits(s->tmp, a->cnt_all, P, E, r, W, C);
    for (int q = 0; q < Ml; q++) { /* [token | prob]: the probabilities travel with the tokens */
        memcpy(s->g1 + (size_t)q * W, in + (size_t)(a->perm_tok[q] - r * N) * C,
               (size_t)C * sizeof(float));
        s->g1[(size_t)q * W + C] = a->perm_sel[q] >= 0 ? a->probs[a->perm_sel[q]] : 0.0f;
    }
    /* comm: all-to-all-v(EP) of the rows to their experts' ranks */
    MTC_CHECK(mtc_all_to_all_v(s->g1, sp.sc, sp.sd, s->g2, sp.rc, sp.rd, MTC_DTYPE_F32, pass->ep));
    int Mr = a->h->M = sp.Mr;
    sort_chunks(s->g1, s->g2, a->cnt_all, P, E, e0, El, W, 1);
    for (int q = 0; q < Mr; q++) {
        memcpy(a->xg + (size_t)q * C, s->g1 + (size_t)q * W, (size_t)C * sizeof(float));
        a->rprob[q] = s->g1[(size_t)q * W + C];
    }
    for (int e = 0; e < El; e++) {
        a->counts[e] = 0;
        for (int i = 0; i < P; i++)
            a->counts[e] += a->cnt_all[i * E + e0 + e];
    }
    MTC_CHECK(moe_experts_forward(pass->pool, s->y, a->fch, a->fchg, s->z, s->stage, a->xg,
                                  a->rprob, a->counts, El, e0, w, d, Mr));
    sort_chunks(s->g2, s->y, a->cnt_all, P, E, e0, El, C, 0);
    /* comm: all-to-all-v(EP) of the outputs back to their tokens' ranks */
    MTC_CHECK(
        mtc_all_to_all_v(s->g2, sp.rcb, sp.rdb, s->g1, sp.scb, sp.sdb, MTC_DTYPE_F32, pass->ep));
    memset(out, 0, (size_t)N * C * sizeof(float));
    for (int q = 0; q < Ml; q++) { /* unpermute: a token's rows in expert order */
        float *o = out + (size_t)(a->perm_tok[q] - r * N) * C;
        const float *y = s->g1 + (size_t)q * C;
        for (int c = 0; c < C; c++)
            o[c] += y[c];
    }
    return MTC_OK;
}

mtc_result_t moe_a2a_backward(float *din, float *dprobs, const moe_weights *dw, const float *dout,
                              const moe_acts *a, const moe_weights *w, const mtc_moe_config *m,
                              const moe_dims *d, const moe_pass *pass, moe_scratch *s) {
    int P = mtc_comm_size(pass->ep), r = mtc_comm_rank(pass->ep), E = d->E, C = d->C, W = C + 1;
    int El = E / P, e0 = r * El, N = a->h->N, Ml = a->h->Ml, Mr = a->h->M, k = d->k;
    (void)m;
    a2a_splits sp = splits(s->tmp, a->cnt_all, P, E, r, W, C);
    moe_gather_rows(s->g1, dout, a->perm_tok, r * N, Ml, C);
    /* comm: all-to-all-v(EP) of d(out) to the experts' ranks */
    MTC_CHECK(
        mtc_all_to_all_v(s->g1, sp.scb, sp.sdb, s->g2, sp.rcb, sp.rdb, MTC_DTYPE_F32, pass->ep));
    sort_chunks(s->y, s->g2, a->cnt_all, P, E, e0, El, C, 1);
    MTC_CHECK(moe_experts_backward(pass->pool, s->dx, s->dprow, s->y, a->xg, a->fch, a->fchg,
                                   a->rprob, a->counts, El, e0, w, dw, d, Mr, s->z, s->dz, s->dh,
                                   s->stage));
    for (int q = 0; q < Mr; q++) {
        memcpy(s->g1 + (size_t)q * W, s->dx + (size_t)q * C, (size_t)C * sizeof(float));
        s->g1[(size_t)q * W + C] = s->dprow[q];
    }
    sort_chunks(s->g2, s->g1, a->cnt_all, P, E, e0, El, W, 0);
    /* comm: all-to-all-v(EP) of [d(token) | d(prob)] back */
    MTC_CHECK(mtc_all_to_all_v(s->g2, sp.rc, sp.rd, s->g1, sp.sc, sp.sd, MTC_DTYPE_F32, pass->ep));
    memset(din, 0, (size_t)N * C * sizeof(float));
    memset(dprobs, 0, (size_t)N * k * sizeof(float));
    for (int q = 0; q < Ml; q++) {
        float *o = din + (size_t)(a->perm_tok[q] - r * N) * C;
        const float *g = s->g1 + (size_t)q * W;
        for (int c = 0; c < C; c++)
            o[c] += g[c];
        if (a->perm_sel[q] >= 0) dprobs[a->perm_sel[q] - (size_t)r * N * k] = g[C];
    }
    return MTC_OK;
}
