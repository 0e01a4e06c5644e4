/* moe/dispatch_a2a.c - Megatron's alltoall token dispatcher (MoEAlltoAll-
 * TokenDispatcher) over the EP group, then over the expert-TP group:
 *
 *   local rows, expert-major ──all-gather(EP), all-gather(ETP) of the rows per
 *   expert──> splits; [token | prob] rows ──all-to-all-v(EP)──> (source EP
 *   rank, local expert) chunks ──all-gather-v(ETP)──> (ETP rank, EP rank,
 *   local expert) chunks ──sort chunks──> (local expert, source) ──experts
 *   (fc1 column- / fc2 row-split over ETP)──> sort back ──reduce-scatter-v
 *   (ETP)──> this rank's received rows ──all-to-all-v(EP)──> its tokens'
 *   rows ──unpermute (sum of the k rows)──> out
 *
 * Backward runs the same path with d(out) out and [d(token) | d(prob)] back
 * (the ETP partial sums of both reduce-scattered). EP rank j owns experts
 * [j E/ep, (j+1) E/ep), so the local expert-major order is also
 * destination-rank order and each destination's rows are one block. The
 * ETP ranks of one EP rank hold the same experts, so the ETP collectives
 * need no routing. A rank that sends or receives nothing takes part with
 * zero counts (the v-collectives accept empty blocks): no hang on
 * imbalanced routing. With ep 1 the all-to-alls are copies; with etp 1 the
 * ETP collectives are skipped. Limitations: the probabilities travel as an
 * extra column of the token rows (C + 1 floats) rather than their own
 * collective. */
#include <string.h>

#include "core/log.h"
#include "moe/moe_internal.h"

typedef struct {
    size_t *sc, *sd, *rc, *rd;     /* EP: [token | prob] rows (width C + 1): counts, displs */
    size_t *scb, *sdb, *rcb, *rdb; /* EP: the outputs coming back (width C) */
    size_t *tw, *tc;               /* ETP: each ETP rank's received rows, widths C + 1 and C */
    size_t *twd, *tcd;             /* ETP: their displacements */
    int Mr;                        /* rows this rank received over EP */
    int Mg;                        /* rows its experts run (all its ETP ranks' received rows) */
} a2a_splits;

/* cnt (Pt, Pe, E): every (ETP rank, EP rank)'s rows per expert; this rank
 * is (t, r). */
static a2a_splits splits(void *tmp, const int *cnt, int Pt, int t, int Pe, int r, int E, int W,
                         int C) {
    a2a_splits s;
    size_t *p = tmp;
    s.sc = p, s.sd = p + Pe, s.rc = p + 2 * Pe, s.rd = p + 3 * Pe;
    s.scb = p + 4 * Pe, s.sdb = p + 5 * Pe, s.rcb = p + 6 * Pe, s.rdb = p + 7 * Pe;
    p += 8 * Pe;
    s.tw = p, s.tc = p + Pt, s.twd = p + 2 * Pt, s.tcd = p + 3 * Pt;
    int El = E / Pe, e0 = r * El;
    size_t so = 0, ro = 0;
    const int *mine = cnt + (size_t)(t * Pe + r) * E;
    for (int j = 0; j < Pe; j++) {
        size_t send = 0, recv = 0;
        for (int e = j * El; e < (j + 1) * El; e++)
            send += (size_t)mine[e];
        for (int e = e0; e < e0 + El; e++)
            recv += (size_t)cnt[(size_t)(t * Pe + j) * E + e];
        s.sc[j] = send * W, s.sd[j] = so * W, s.rc[j] = recv * W, s.rd[j] = ro * W;
        s.scb[j] = send * C, s.sdb[j] = so * C, s.rcb[j] = recv * C, s.rdb[j] = ro * C;
        so += send, ro += recv;
    }
    s.Mr = (int)ro;
    size_t go = 0;
    for (int u = 0; u < Pt; u++) {
        size_t n = 0;
        for (int j = 0; j < Pe; j++)
            for (int e = e0; e < e0 + El; e++)
                n += (size_t)cnt[(size_t)(u * Pe + j) * E + e];
        s.tw[u] = n * W, s.tc[u] = n * C, s.twd[u] = go * W, s.tcd[u] = go * C;
        go += n;
    }
    s.Mg = (int)go;
    return s;
}

/* Rows (width W) between (source, local expert) chunk order and (local
 * expert, source) order over the P = etp x ep sources; to_expert picks the
 * direction. */
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

/* The groups of a call: EP size / rank, ETP size / rank. */
typedef struct {
    int Pe, re, Pt, rt;
} a2a_where;

static a2a_where where_of(const moe_pass *pass) {
    a2a_where w = {1, 0, 1, 0};
    if (pass->ep) w.Pe = mtc_comm_size(pass->ep), w.re = mtc_comm_rank(pass->ep);
    if (pass->etp) w.Pt = mtc_comm_size(pass->etp), w.rt = mtc_comm_rank(pass->etp);
    return w;
}

/* comm: all-to-all-v(EP) (a copy with ep 1) */
static mtc_result_t a2a_v(const moe_pass *pass, const float *sb, const size_t *sc, const size_t *sd,
                          float *rb, const size_t *rc, const size_t *rd) {
    if (pass->ep) return mtc_all_to_all_v(sb, sc, sd, rb, rc, rd, MTC_DTYPE_F32, pass->ep);
    memcpy(rb + rd[0], sb + sd[0], sc[0] * sizeof(float));
    return MTC_OK;
}

/* comm: all-gather-v(ETP) of this rank's n received floats (a copy with etp 1) */
static mtc_result_t etp_gather(const moe_pass *pass, const float *sb, float *rb, const size_t *rc,
                               const size_t *rd, int rt) {
    if (pass->etp) return mtc_all_gather_v(sb, rc[rt], rb, rc, rd, MTC_DTYPE_F32, pass->etp);
    memcpy(rb, sb, rc[0] * sizeof(float));
    return MTC_OK;
}

/* comm: reduce-scatter-v(ETP): block u of sb summed over the ETP ranks into
 * rank u's rb (a copy with etp 1) */
static mtc_result_t etp_reduce(const moe_pass *pass, const float *sb, float *rb, const size_t *rc,
                               const size_t *rd, int rt) {
    if (pass->etp) return mtc_reduce_scatter_v(sb, rb, rc, MTC_DTYPE_F32, MTC_OP_SUM, pass->etp);
    memcpy(rb, sb + rd[rt], rc[rt] * sizeof(float));
    return MTC_OK;
}

mtc_result_t moe_a2a_forward(float *out, moe_acts *a, const float *in, const moe_weights *w,
                             const mtc_moe_config *m, const moe_dims *d, int N,
                             const moe_pass *pass, moe_scratch *s) {
    a2a_where g = where_of(pass);
    int E = d->E, C = d->C, W = C + 1, P = g.Pt * g.Pe;
    int El = E / g.Pe, e0 = g.re * El;
    /* this rank's routing is block `me` of the ETP x EP group's (layer.c) */
    int base = (pass->tpep ? mtc_comm_rank(pass->tpep) : g.re) * N;
    int *cnt_ep = (int *)((float *)s->tmp + MOE_A2A_TMP(P, 0));
    int *mine = cnt_ep + (size_t)g.re * E;
    int Ml = 0;
    for (int e = 0; e < E; e++) { /* this rank's rows, expert-major = destination-major */
        mine[e] = 0;
        Ml = moe_perm_segment(a, m, d, e, base, N, Ml, &mine[e]);
    }
    a->h->Ml = Ml;
    /* comm: all-gather(EP), then all-gather(ETP), of the rows per expert (the splits) */
    if (pass->ep) MTC_CHECK(mtc_all_gather(mine, cnt_ep, (size_t)E, MTC_DTYPE_I32, pass->ep));
    if (pass->etp)
        MTC_CHECK(mtc_all_gather(cnt_ep, a->cnt_all, (size_t)g.Pe * E, MTC_DTYPE_I32, pass->etp));
    else
        memcpy(a->cnt_all, cnt_ep, (size_t)g.Pe * E * sizeof(int));
    a2a_splits sp = splits(s->tmp, a->cnt_all, g.Pt, g.rt, g.Pe, g.re, E, W, C);
    for (int q = 0; q < Ml; q++) { /* [token | prob]: the probabilities travel with the tokens */
        memcpy(s->g1 + (size_t)q * W, in + (size_t)(a->perm_tok[q] - base) * C,
               (size_t)C * sizeof(float));
        s->g1[(size_t)q * W + C] = a->perm_sel[q] >= 0 ? a->probs[a->perm_sel[q]] : 0.0f;
    }
    /* comm: all-to-all-v(EP) of the rows to their experts' ranks */
    MTC_CHECK(a2a_v(pass, s->g1, sp.sc, sp.sd, s->g2, sp.rc, sp.rd));
    /* comm: all-gather-v(ETP) of the received rows: every ETP rank runs them all */
    MTC_CHECK(etp_gather(pass, s->g2, s->g1, sp.tw, sp.twd, g.rt));
    int Mg = a->h->M = sp.Mg;
    sort_chunks(s->g2, s->g1, a->cnt_all, P, E, e0, El, W, 1);
    for (int q = 0; q < Mg; q++) {
        memcpy(a->xg + (size_t)q * C, s->g2 + (size_t)q * W, (size_t)C * sizeof(float));
        a->rprob[q] = s->g2[(size_t)q * W + C];
    }
    for (int e = 0; e < El; e++) {
        a->counts[e] = 0;
        for (int i = 0; i < P; i++)
            a->counts[e] += a->cnt_all[i * E + e0 + e];
    }
    MTC_CHECK(moe_experts_forward(pass->pool, s->y, a->fch, a->fchg, s->z, s->stage, a->xg,
                                  a->rprob, a->counts, El, e0, w, d, Mg));
    sort_chunks(s->g2, s->y, a->cnt_all, P, E, e0, El, C, 0);
    /* comm: reduce-scatter-v(ETP) of the fc2 partial sums back to the rows' receiver */
    MTC_CHECK(etp_reduce(pass, s->g2, s->g1, sp.tc, sp.tcd, g.rt));
    /* comm: all-to-all-v(EP) of the outputs back to their tokens' ranks */
    MTC_CHECK(a2a_v(pass, s->g1, sp.rcb, sp.rdb, s->g2, sp.scb, sp.sdb));
    memset(out, 0, (size_t)N * C * sizeof(float));
    /* unpermute: a token's rows in expert order */
    moe_scatter_add(pass->pool, out, s->g2, C, a->perm_tok, base, Ml, C);
    return MTC_OK;
}

mtc_result_t moe_a2a_backward(float *din, float *dprobs, const moe_weights *dw, const float *dout,
                              const moe_acts *a, const moe_weights *w, const mtc_moe_config *m,
                              const moe_dims *d, const moe_pass *pass, moe_scratch *s) {
    a2a_where g = where_of(pass);
    int E = d->E, C = d->C, W = C + 1, P = g.Pt * g.Pe, k = d->k;
    int El = E / g.Pe, e0 = g.re * El, N = a->h->N, Ml = a->h->Ml, Mg = a->h->M;
    int base = (pass->tpep ? mtc_comm_rank(pass->tpep) : g.re) * N;
    a2a_splits sp = splits(s->tmp, a->cnt_all, g.Pt, g.rt, g.Pe, g.re, E, W, C);
    moe_gather_rows(pass->pool, s->g1, dout, a->perm_tok, base, Ml, C);
    /* comm: all-to-all-v(EP) of d(out) to the experts' ranks, all-gather-v(ETP) */
    MTC_CHECK(a2a_v(pass, s->g1, sp.scb, sp.sdb, s->g2, sp.rcb, sp.rdb));
    MTC_CHECK(etp_gather(pass, s->g2, s->g1, sp.tc, sp.tcd, g.rt));
    sort_chunks(s->y, s->g1, a->cnt_all, P, E, e0, El, C, 1);
    if (m->recompute_act) moe_experts_act(pass->pool, a->fchg, a->fch, Mg, d); /* moe_act */
    MTC_CHECK(moe_experts_backward(pass->pool, s->dx, s->dprow, s->y, a->xg, a->fch, a->fchg,
                                   a->rprob, a->counts, El, e0, w, dw, d, Mg, s->z, s->dz, s->dh,
                                   s->stage));
    for (int q = 0; q < Mg; q++) {
        memcpy(s->g1 + (size_t)q * W, s->dx + (size_t)q * C, (size_t)C * sizeof(float));
        s->g1[(size_t)q * W + C] = s->dprow[q];
    }
    sort_chunks(s->g2, s->g1, a->cnt_all, P, E, e0, El, W, 0);
    /* comm: reduce-scatter-v(ETP) of the partial [d(token) | d(prob)], all-to-all-v(EP) back */
    MTC_CHECK(etp_reduce(pass, s->g2, s->g1, sp.tw, sp.twd, g.rt));
    MTC_CHECK(a2a_v(pass, s->g1, sp.rc, sp.rd, s->g2, sp.sc, sp.sd));
    memset(din, 0, (size_t)N * C * sizeof(float));
    memset(dprobs, 0, (size_t)N * k * sizeof(float));
    moe_scatter_add(pass->pool, din, s->g2, W, a->perm_tok, base, Ml, C);
    for (int q = 0; q < Ml; q++)
        if (a->perm_sel[q] >= 0)
            dprobs[a->perm_sel[q] - (size_t)base * k] = s->g2[(size_t)q * W + C];
    return MTC_OK;
}
