/* cp/attention.c - the core attention over the context-parallel group (see
 * cp.h), built on the tiled kernel's explicit positions and lse merge.
 *
 * p2p ring, rank r of cp, step i holds the K, V that started on rank
 * src = (r - i) mod cp:
 *
 *   step 0:     out, lse = attn(Q_r, KV_r)                  (causal by position)
 *   step i > 0: KV <- rank r-1, KV -> rank r+1  (in flight during step i-1)
 *               out, lse = merge(out, lse, attn(Q_r, KV_src))
 *   backward:   K, V travel the same way; each step computes the dK, dV of
 *               the block it holds into a zeroed buffer while the block's
 *               running sum arrives from r-1, adds them and sends the sum to
 *               r+1; after step cp-1 one more hop brings each rank its own
 *               complete dK, dV.
 *
 * all_gather: KV_all = all-gather(KV_r) (rank-major, positions cp->all_pos),
 * out, lse = attn(Q_r, KV_all); backward reduce-scatters dKV_all.
 *
 * a2a (Ulysses): [q | k | v] of the local rows all-to-all'ed into the
 * rows of every rank for heads [j*NH/cp, (j+1)*NH/cp) (and key/value heads
 * likewise), one attention over the whole sequence (positions
 * cp->all_pos), the output all-to-all'ed back; backward mirrors it.
 *
 * a2a+p2p: the a2a over the inner group, then the ring across the outer
 * group on the a2a'ed rows (each outer rank's block = the rows of A
 * consecutive CP ranks), then the a2a back. Ring hops are non-blocking
 * (cp.h). */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "cp/cp.h"

int cp_comm_type_parse(const char *s) {
    if (!s) return -1;
    if (!strcmp(s, "p2p")) return CP_COMM_P2P;
    if (!strcmp(s, "all_gather")) return CP_COMM_ALL_GATHER;
    if (!strcmp(s, "a2a")) return CP_COMM_A2A;
    if (!strcmp(s, "a2a+p2p")) return CP_COMM_A2A_P2P;
    return -1;
}

const char *cp_comm_type_name(cp_comm_type t) {
    static const char *names[] = {"p2p", "all_gather", "a2a", "a2a+p2p"};
    return (unsigned)t < 4 ? names[t] : "?";
}

void cp_positions(int *pos, int T, int cp, int rank) {
    int Tc = T / (2 * cp);
    for (int t = 0; t < Tc; t++) {
        pos[t] = rank * Tc + t;
        pos[Tc + t] = (2 * cp - 1 - rank) * Tc + t;
    }
}

/* rows of dst (ld floats) [a (na) | b (nb)] from rows of a (lda), b (ldb) */
static void pack2(float *dst, int ld, const float *a, int lda, int na, const float *b, int ldb,
                  int nb, size_t rows) {
    for (size_t i = 0; i < rows; i++) {
        memcpy(dst + i * ld, a + i * lda, (size_t)na * sizeof(float));
        memcpy(dst + i * ld + na, b + i * ldb, (size_t)nb * sizeof(float));
    }
}

static void unpack2(float *a, int lda, int na, float *b, int ldb, int nb, const float *src, int ld,
                    size_t rows) {
    for (size_t i = 0; i < rows; i++) {
        memcpy(a + i * lda, src + i * ld, (size_t)na * sizeof(float));
        memcpy(b + i * ldb, src + i * ld + na, (size_t)nb * sizeof(float));
    }
}

/* The dropout spec of one call: queries at cp->pos, keys at kpos. */
static const nn_dropout_spec *cp_drop(nn_dropout_spec *d, const nn_dropout_spec *drop,
                                      const cp_ctx *cp, const int *qpos, const int *kpos) {
    if (!drop) return NULL;
    *d = *drop;
    d->Tg = cp->Tg, d->tpos = qpos, d->kpos = kpos;
    return d;
}

/* ---- p2p ring ------------------------------------------------------------------------- */

/* One ring: P ranks, this one at r; its queries at qpos, the T rows of
 * ring rank j's block at bpos + j*T. The plain p2p ring is the CP group
 * itself; a2a+p2p runs it across the outer group on the a2a'ed rows. */
typedef struct {
    mtc_comm_t comm;
    int P, r;
    const int *qpos, *bpos;
    size_t *counts; /* 4P: the two hops' send and receive counts (cp_ctx.hop_counts) */
} cp_ring;

/* A non-blocking hop: n floats to rank r+1, n from rank r-1, as an
 * all-to-all-v with counts only for the two neighbours (so the progress
 * thread carries it while this thread computes). */
typedef struct {
    size_t *sc, *rc;
    mtc_request_t req;
} ring_hop;

/* hop `which` (0 or 1) of the ring: its counts are that half of R->counts,
 * allocated once with the model (nothing is allocated per step) */
static void hop_init(ring_hop *h, const cp_ring *R, int which) {
    h->req = NULL;
    h->sc = R->counts + (size_t)which * 2 * R->P;
    h->rc = h->sc + R->P;
}

static mtc_result_t hop_start(const cp_ring *R, ring_hop *h, const float *send, float *recv,
                              size_t n) {
    memset(h->sc, 0, 2 * (size_t)R->P * sizeof(size_t));
    h->sc[(R->r + 1) % R->P] = n;
    h->rc[(R->r - 1 + R->P) % R->P] = n;
    /* comm: all-to-all-v(ring) started: n floats to r+1, n from r-1 */
    return mtc_all_to_all_v_start(send, h->sc, NULL, recv, h->rc, NULL, MTC_DTYPE_F32, R->comm,
                                  &h->req);
}

static void hop_end(ring_hop *h) {
    mtc_request_wait(&h->req); /* only after an error: nothing may stay in flight */
}

/* The dropout spec of one call: base (Tg and head offset set) with the
 * queries at qpos and the keys at kpos. */
static const nn_dropout_spec *ring_drop(nn_dropout_spec *d, const nn_dropout_spec *base,
                                        const int *qpos, const int *kpos) {
    if (!base) return NULL;
    *d = *base;
    d->tpos = qpos, d->kpos = kpos;
    return d;
}

static size_t ring_scratch_floats(const nn_attention_shape *s) {
    size_t rows = (size_t)s->B * s->T, n = rows * 2 * (size_t)s->NKV * s->HS;
    size_t f = 2 * n + rows * (size_t)s->ldo + (size_t)s->B * s->NH * s->T;
    return f > 5 * n ? f : 5 * n;
}

/* step 0 on the local block; step i the block of rank r-i, which arrived
 * while step i-1 computed. */
static mtc_result_t ring_forward(const cp_ring *R, nn_pool *pool, float *out, float *lse,
                                 const float *q, const float *k, const float *v,
                                 const nn_attention_shape *s, const nn_dropout_spec *drop,
                                 float *scratch) {
    int T = s->T, KD = s->NKV * s->HS, r = R->r, P = R->P;
    size_t rows = (size_t)s->B * T, n = rows * 2 * KD;
    float *cur = scratch, *nxt = cur + n, *opart = nxt + n;
    float *lpart = opart + rows * s->ldo;
    nn_attention_shape g = *s;
    g.qpos = R->qpos, g.kpos = R->qpos;
    nn_dropout_spec d;
    ring_hop kv;
    hop_init(&kv, R, 0);
    mtc_result_t rc = MTC_OK;
    pack2(cur, 2 * KD, k, s->ldk, KD, v, s->ldv, KD, rows);
    if (P > 1) MTC_CHECK_GOTO(hop_start(R, &kv, cur, nxt, n), rc, done);
    nn_attention_forward(pool, out, lse, q, k, v, &g, ring_drop(&d, drop, R->qpos, R->qpos));
    g.ldk = g.ldv = 2 * KD;
    for (int i = 1; i < P; i++) {
        MTC_CHECK_GOTO(mtc_request_wait(&kv.req), rc, done);
        float *t = cur;
        cur = nxt, nxt = t;
        if (i + 1 < P) MTC_CHECK_GOTO(hop_start(R, &kv, cur, nxt, n), rc, done);
        g.kpos = R->bpos + (size_t)((r - i + P) % P) * T;
        nn_attention_forward(pool, opart, lpart, q, cur, cur + KD, &g,
                             ring_drop(&d, drop, R->qpos, g.kpos));
        nn_attention_merge(pool, out, lse, opart, lpart, s->B, T, s->NH, s->HS, s->ldo);
    }
done:
    hop_end(&kv);
    return rc;
}

/* K, V travel as in the forward (one step ahead); each step's dK, dV of the
 * block it holds go to a zeroed buffer while the block's running sum
 * arrives from rank r-1, are added to it and sent on to r+1. After step
 * P-1 that last hop brings every rank its own block's complete dK, dV. */
static mtc_result_t ring_backward(const cp_ring *R, nn_pool *pool, float *dq, float *dk, float *dv,
                                  const float *dout, const float *q, const float *k, const float *v,
                                  const float *out, const float *lse, const nn_attention_shape *s,
                                  const nn_dropout_spec *drop, float *scratch) {
    int T = s->T, KD = s->NKV * s->HS, r = R->r, P = R->P, W = 2 * KD;
    size_t rows = (size_t)s->B * T, n = rows * W;
    float *kvc = scratch, *kvn = kvc + n;                   /* rows of [K | V] */
    float *acc = kvn + n, *accn = acc + n, *tmp = accn + n; /* rows of [dK | dV] */
    nn_attention_shape g = *s;
    g.qpos = R->qpos, g.kpos = R->qpos;
    g.ldk = g.ldv = W;
    g.accumulate = 0;
    nn_dropout_spec d;
    ring_hop kv, dkv;
    hop_init(&kv, R, 0);
    hop_init(&dkv, R, 1);
    mtc_result_t rc = MTC_OK;
    pack2(kvc, W, k, s->ldk, KD, v, s->ldv, KD, rows);
    if (P > 1) MTC_CHECK_GOTO(hop_start(R, &kv, kvc, kvn, n), rc, done);
    nn_attention_backward(pool, dq, acc, acc + KD, dout, q, kvc, kvc + KD, out, lse, &g,
                          ring_drop(&d, drop, R->qpos, R->qpos));
    if (P > 1) MTC_CHECK_GOTO(hop_start(R, &dkv, acc, accn, n), rc, done);
    g.accumulate = 1;
    for (int i = 1; i < P; i++) {
        MTC_CHECK_GOTO(mtc_request_wait(&kv.req), rc, done);
        float *t = kvc;
        kvc = kvn, kvn = t;
        if (i + 1 < P) MTC_CHECK_GOTO(hop_start(R, &kv, kvc, kvn, n), rc, done);
        g.kpos = R->bpos + (size_t)((r - i + P) % P) * T;
        memset(tmp, 0, n * sizeof(float));
        nn_attention_backward(pool, dq, tmp, tmp + KD, dout, q, kvc, kvc + KD, out, lse, &g,
                              ring_drop(&d, drop, R->qpos, g.kpos));
        MTC_CHECK_GOTO(mtc_request_wait(&dkv.req), rc, done);
        t = acc;
        acc = accn, accn = t; /* acc: the block's running sum from r-1 */
        for (size_t e = 0; e < n; e++)
            acc[e] += tmp[e];
        MTC_CHECK_GOTO(hop_start(R, &dkv, acc, accn, n), rc, done);
    }
    if (P > 1) {
        MTC_CHECK_GOTO(mtc_request_wait(&dkv.req), rc, done);
        acc = accn;
    }
    unpack2(dk, s->ldk, KD, dv, s->ldv, KD, acc, W, rows);
done:
    hop_end(&kv);
    hop_end(&dkv);
    return rc;
}

static cp_ring ring_of(const cp_ctx *cp) {
    return (cp_ring){cp->comm, cp->cp, cp->rank, cp->pos, cp->all_pos, cp->hop_counts};
}

static mtc_result_t p2p_forward(const cp_ctx *cp, nn_pool *pool, float *out, float *lse,
                                const float *q, const float *k, const float *v,
                                const nn_attention_shape *s, const nn_dropout_spec *drop,
                                float *scratch) {
    nn_dropout_spec base;
    cp_ring R = ring_of(cp);
    return ring_forward(&R, pool, out, lse, q, k, v, s, cp_drop(&base, drop, cp, NULL, NULL),
                        scratch);
}

static mtc_result_t p2p_backward(const cp_ctx *cp, nn_pool *pool, float *dq, float *dk, float *dv,
                                 const float *dout, const float *q, const float *k, const float *v,
                                 const float *out, const float *lse, const nn_attention_shape *s,
                                 const nn_dropout_spec *drop, float *scratch) {
    nn_dropout_spec base;
    cp_ring R = ring_of(cp);
    return ring_backward(&R, pool, dq, dk, dv, dout, q, k, v, out, lse, s,
                         cp_drop(&base, drop, cp, NULL, NULL), scratch);
}

/* ---- all-gather ------------------------------------------------------------------------ */

/* all (B, Tg, w): batch-major rows of every rank's block (rank-major inside
 * each batch row) from gathered (cp, B, T, w). */
static void ag_reorder(float *all, const float *gathered, int B, int T, int P, int w, int back) {
    for (int j = 0; j < P; j++)
        for (int b = 0; b < B; b++) {
            float *a = all + ((size_t)b * T * P + (size_t)j * T) * w;
            float *g = (float *)gathered + ((size_t)j * B + b) * T * w;
            if (back)
                memcpy(g, a, (size_t)T * w * sizeof(float));
            else
                memcpy(a, g, (size_t)T * w * sizeof(float));
        }
}

static mtc_result_t ag_gather(const cp_ctx *cp, float *all, float *gathered, float *loc,
                              const float *k, const float *v, const nn_attention_shape *s) {
    int KD = s->NKV * s->HS;
    size_t rows = (size_t)s->B * s->T;
    pack2(loc, 2 * KD, k, s->ldk, KD, v, s->ldv, KD, rows);
    /* comm: all-gather(cp) of K, V */
    MTC_CHECK(mtc_all_gather(loc, gathered, rows * 2 * KD, MTC_DTYPE_F32, cp->comm));
    ag_reorder(all, gathered, s->B, s->T, cp->cp, 2 * KD, 0);
    return MTC_OK;
}

static nn_attention_shape ag_shape(const cp_ctx *cp, const nn_attention_shape *s) {
    nn_attention_shape g = *s;
    g.Tk = cp->Tg;
    g.ldk = g.ldv = 2 * s->NKV * s->HS;
    g.qpos = cp->pos, g.kpos = cp->all_pos;
    return g;
}

static mtc_result_t ag_forward(const cp_ctx *cp, nn_pool *pool, float *out, float *lse,
                               const float *q, const float *k, const float *v,
                               const nn_attention_shape *s, const nn_dropout_spec *drop,
                               float *scratch) {
    size_t rows = (size_t)s->B * s->T, w = 2 * (size_t)s->NKV * s->HS;
    float *loc = scratch, *gathered = loc + rows * w, *all = gathered + rows * w * cp->cp;
    MTC_CHECK(ag_gather(cp, all, gathered, loc, k, v, s));
    nn_attention_shape g = ag_shape(cp, s);
    nn_dropout_spec d;
    int KD = s->NKV * s->HS;
    nn_attention_forward(pool, out, lse, q, all, all + KD, &g,
                         cp_drop(&d, drop, cp, cp->pos, cp->all_pos));
    return MTC_OK;
}

static mtc_result_t ag_backward(const cp_ctx *cp, nn_pool *pool, float *dq, float *dk, float *dv,
                                const float *dout, const float *q, const float *k, const float *v,
                                const float *out, const float *lse, const nn_attention_shape *s,
                                const nn_dropout_spec *drop, float *scratch) {
    size_t rows = (size_t)s->B * s->T, w = 2 * (size_t)s->NKV * s->HS;
    float *loc = scratch, *gathered = loc + rows * w, *all = gathered + rows * w * cp->cp;
    float *dall = all + rows * w * cp->cp;
    MTC_CHECK(ag_gather(cp, all, gathered, loc, k, v, s));
    nn_attention_shape g = ag_shape(cp, s);
    g.accumulate = 0;
    nn_dropout_spec d;
    int KD = s->NKV * s->HS;
    nn_attention_backward(pool, dq, dall, dall + KD, dout, q, all, all + KD, out, lse, &g,
                          cp_drop(&d, drop, cp, cp->pos, cp->all_pos));
    ag_reorder(dall, gathered, s->B, s->T, cp->cp, (int)w, 1);
    /* comm: reduce-scatter(cp) of dK, dV */
    MTC_CHECK(mtc_reduce_scatter(gathered, loc, rows * w, MTC_DTYPE_F32, MTC_OP_SUM, cp->comm));
    unpack2(dk, s->ldk, KD, dv, s->ldv, KD, loc, (int)w, rows);
    return MTC_OK;
}

/* ---- a2a (Ulysses) and a2a+p2p ---------------------------------------------------------- */

/* The all-to-all runs over `comm` (P ranks, this one share j): plain a2a
 * over the whole CP group; a2a+p2p over the inner group of A consecutive
 * CP ranks, whose rows are contiguous in cp->all_pos. After it a rank holds
 * the heads of share j for Tall = P*T rows at positions pos; plain a2a
 * attends over them, a2a+p2p runs the ring across the outer group with
 * those rows as its blocks. */
typedef struct {
    mtc_comm_t comm;
    int P, j;          /* ranks of the all-to-all, this rank's share */
    int nh, ng, HS, W; /* per-share heads, kv heads, head size, share row width */
    int Tall;          /* rows after the all-to-all */
    const int *pos;    /* their positions */
    int ring;          /* a2a+p2p: the ring over cp->outer follows */
} a2a_geom;

static a2a_geom a2a_of(const cp_ctx *cp, const nn_attention_shape *s) {
    int hier = cp->type == CP_COMM_A2A_P2P, A = hier ? cp->inner_size : cp->cp;
    int j = hier ? cp->rank % A : cp->rank;
    a2a_geom a = {.comm = hier ? cp->inner : cp->comm,
                  .P = A,
                  .j = j,
                  .nh = s->NH / A,
                  .ng = s->NKV / A,
                  .HS = s->HS,
                  .Tall = A * s->T,
                  .pos = cp->all_pos + (hier ? (size_t)(cp->rank / A) * A * s->T : 0),
                  .ring = hier};
    a.W = (a.nh + 2 * a.ng) * a.HS;
    return a;
}

/* the ring across the outer group over the a2a'ed rows */
static cp_ring a2a_ring(const cp_ctx *cp, const a2a_geom *a) {
    return (cp_ring){cp->outer, cp->cp / a->P, cp->rank / a->P,
                     a->pos,    cp->all_pos,   cp->hop_counts};
}

/* send (P, B, T, W): block j = this rank's rows of share j's [q | k | v]
 * heads; the all-to-all returns (P, B, T, W) = every rank's rows of this
 * rank's share. */
static void a2a_pack_qkv(float *send, const float *q, const float *k, const float *v,
                         const nn_attention_shape *s, const a2a_geom *a) {
    size_t rows = (size_t)s->B * s->T;
    size_t qw = (size_t)a->nh * a->HS, kw = (size_t)a->ng * a->HS;
    for (int j = 0; j < a->P; j++)
        for (size_t i = 0; i < rows; i++) {
            float *d = send + ((size_t)j * rows + i) * a->W;
            memcpy(d, q + i * s->ldq + j * qw, qw * sizeof(float));
            memcpy(d + qw, k + i * s->ldk + j * kw, kw * sizeof(float));
            memcpy(d + qw + kw, v + i * s->ldv + j * kw, kw * sizeof(float));
        }
}

/* The shape of the attention over the received rows (B, Tall, W) after
 * ag_reorder's batch-major reorder. */
static nn_attention_shape a2a_shape(const nn_attention_shape *s, const a2a_geom *a) {
    nn_attention_shape g = *s;
    g.T = g.Tk = a->Tall;
    g.NH = a->nh, g.NKV = a->ng;
    g.ldq = g.ldk = g.ldv = a->W;
    g.ldo = a->nh * a->HS;
    g.qpos = g.kpos = a->pos;
    return g;
}

/* lse (B, nh, Tall) of this share <-> (P, B, nh, T) blocks by source rank */
static void a2a_lse_blocks(float *blocks, float *l, const nn_attention_shape *s, const a2a_geom *a,
                           int back) {
    size_t per = (size_t)s->B * a->nh * s->T;
    for (int j = 0; j < a->P; j++)
        for (int b = 0; b < s->B; b++)
            for (int h = 0; h < a->nh; h++) {
                float *x = blocks + (size_t)j * per + ((size_t)b * a->nh + h) * s->T;
                float *y = l + ((size_t)b * a->nh + h) * a->Tall + (size_t)j * s->T;
                memcpy(back ? y : x, back ? x : y, (size_t)s->T * sizeof(float));
            }
}

/* lse (B, NH, T) of the local rows <-> (P, B, nh, T) blocks by head share */
static void a2a_lse_local(float *blocks, float *lse, const nn_attention_shape *s, const a2a_geom *a,
                          int back) {
    size_t per = (size_t)s->B * a->nh * s->T;
    for (int j = 0; j < a->P; j++)
        for (int b = 0; b < s->B; b++)
            for (int h = 0; h < a->nh; h++) {
                float *x = blocks + (size_t)j * per + ((size_t)b * a->nh + h) * s->T;
                float *y = lse + ((size_t)b * s->NH + j * a->nh + h) * s->T;
                memcpy(back ? y : x, back ? x : y, (size_t)s->T * sizeof(float));
            }
}

static const nn_dropout_spec *a2a_drop(nn_dropout_spec *d, const nn_dropout_spec *drop,
                                       const cp_ctx *cp, const a2a_geom *a) {
    if (!drop) return NULL;
    cp_drop(d, drop, cp, a->pos, a->pos);
    d->h0 += a->j * a->nh; /* this rank's share of the heads */
    return d;
}

static size_t a2a_scratch_floats(const cp_ctx *cp, const nn_attention_shape *s) {
    a2a_geom a = a2a_of(cp, s);
    size_t rows = (size_t)s->B * s->T, big = rows * a.P * a.W, obig = rows * a.P * a.nh * a.HS;
    size_t per = (size_t)s->B * a.nh * s->T, f = 4 * big + 4 * obig + 2 * per * a.P;
    if (a.ring) {
        nn_attention_shape g = a2a_shape(s, &a);
        f += ring_scratch_floats(&g);
    }
    return f;
}

static mtc_result_t a2a_forward(const cp_ctx *cp, nn_pool *pool, float *out, float *lse,
                                const float *q, const float *k, const float *v,
                                const nn_attention_shape *s, const nn_dropout_spec *drop,
                                float *scratch) {
    a2a_geom a = a2a_of(cp, s);
    int P = a.P;
    size_t rows = (size_t)s->B * s->T, big = rows * P * a.W, ow = (size_t)a.nh * a.HS;
    size_t kw = (size_t)a.ng * a.HS;
    float *send = scratch, *recv = send + big, *all = recv + big; /* (B, Tall, W) */
    float *o = all + big, *osend = o + rows * P * ow, *l = osend + big;
    float *rs = scratch + a2a_scratch_floats(cp, s);
    a2a_pack_qkv(send, q, k, v, s, &a);
    /* comm: all-to-all(cp or inner) of q, k, v heads */
    MTC_CHECK(mtc_all_to_all(send, recv, rows * a.W, MTC_DTYPE_F32, a.comm));
    ag_reorder(all, recv, s->B, s->T, P, a.W, 0);
    nn_attention_shape g = a2a_shape(s, &a);
    nn_dropout_spec d;
    const nn_dropout_spec *dd = a2a_drop(&d, drop, cp, &a);
    if (a.ring) { /* comm: the ring across the outer group */
        cp_ring R = a2a_ring(cp, &a);
        rs -= ring_scratch_floats(&g);
        MTC_CHECK(ring_forward(&R, pool, o, l, all, all + ow, all + ow + kw, &g, dd, rs));
    } else {
        nn_attention_forward(pool, o, l, all, all + ow, all + ow + kw, &g, dd);
    }
    /* back to (P, B, T, ow) rank-major, all-to-all, then rows of out */
    ag_reorder(o, osend, s->B, s->T, P, (int)ow, 1);
    /* comm: all-to-all(cp or inner) of the output heads */
    MTC_CHECK(mtc_all_to_all(osend, send, rows * ow, MTC_DTYPE_F32, a.comm));
    for (int j = 0; j < P; j++)
        for (size_t i = 0; i < rows; i++)
            memcpy(out + i * s->ldo + j * ow, send + ((size_t)j * rows + i) * ow,
                   ow * sizeof(float));
    /* lse (B, nh, Tall) of this share -> (B, NH, T) of the local rows, by the
     * same all-to-all: element (b, h, t) of rank j's rows travels in block j */
    size_t per = (size_t)s->B * a.nh * s->T;
    a2a_lse_blocks(osend, l, s, &a, 0);
    /* comm: all-to-all(cp or inner) of the lse */
    MTC_CHECK(mtc_all_to_all(osend, send, per, MTC_DTYPE_F32, a.comm));
    a2a_lse_local(send, lse, s, &a, 1);
    return MTC_OK;
}

static mtc_result_t a2a_backward(const cp_ctx *cp, nn_pool *pool, float *dq, float *dk, float *dv,
                                 const float *dout, const float *q, const float *k, const float *v,
                                 const float *out, const float *lse, const nn_attention_shape *s,
                                 const nn_dropout_spec *drop, float *scratch) {
    a2a_geom a = a2a_of(cp, s);
    int P = a.P;
    size_t rows = (size_t)s->B * s->T, big = rows * P * a.W, ow = (size_t)a.nh * a.HS;
    size_t obig = rows * P * ow, per = (size_t)s->B * a.nh * s->T, kw = (size_t)a.ng * a.HS;
    float *send = scratch, *recv = send + big, *all = recv + big, *dall = all + big;
    float *o = dall + big, *dO = o + obig, *t1 = dO + obig, *t2 = t1 + obig, *l = t2 + obig;
    float *lt = l + per * P;
    a2a_pack_qkv(send, q, k, v, s, &a);
    /* comm: all-to-all(cp or inner) of q, k, v heads (again, as the forward) */
    MTC_CHECK(mtc_all_to_all(send, recv, rows * a.W, MTC_DTYPE_F32, a.comm));
    ag_reorder(all, recv, s->B, s->T, P, a.W, 0);
    /* out and dout of this share's heads for every row: all-to-all as q */
    const float *pair[2] = {out, dout};
    float *dst[2] = {o, dO};
    for (int x = 0; x < 2; x++) {
        for (int j = 0; j < P; j++)
            for (size_t i = 0; i < rows; i++)
                memcpy(t1 + ((size_t)j * rows + i) * ow, pair[x] + i * s->ldo + j * ow,
                       ow * sizeof(float));
        /* comm: all-to-all(cp or inner) of out / dout heads */
        MTC_CHECK(mtc_all_to_all(t1, t2, rows * ow, MTC_DTYPE_F32, a.comm));
        ag_reorder(dst[x], t2, s->B, s->T, P, (int)ow, 0);
    }
    /* lse of this share for every row */
    a2a_lse_local(lt, (float *)lse, s, &a, 0);
    /* comm: all-to-all(cp or inner) of the lse */
    MTC_CHECK(mtc_all_to_all(lt, t1, per, MTC_DTYPE_F32, a.comm));
    a2a_lse_blocks(t1, l, s, &a, 1);
    nn_attention_shape g = a2a_shape(s, &a);
    g.accumulate = 0;
    nn_dropout_spec d;
    const nn_dropout_spec *dd = a2a_drop(&d, drop, cp, &a);
    if (a.ring) { /* comm: the ring across the outer group, dK, dV travelling back */
        cp_ring R = a2a_ring(cp, &a);
        float *rs = scratch + a2a_scratch_floats(cp, s) - ring_scratch_floats(&g);
        MTC_CHECK(ring_backward(&R, pool, dall, dall + ow, dall + ow + kw, dO, all, all + ow,
                                all + ow + kw, o, l, &g, dd, rs));
    } else {
        nn_attention_backward(pool, dall, dall + ow, dall + ow + kw, dO, all, all + ow,
                              all + ow + kw, o, l, &g, dd);
    }
    /* gradients back to the rows' owners */
    ag_reorder(dall, recv, s->B, s->T, P, a.W, 1);
    /* comm: all-to-all(cp or inner) of dq, dk, dv heads */
    MTC_CHECK(mtc_all_to_all(recv, send, rows * a.W, MTC_DTYPE_F32, a.comm));
    for (int j = 0; j < P; j++)
        for (size_t i = 0; i < rows; i++) {
            const float *x = send + ((size_t)j * rows + i) * a.W;
            memcpy(dq + i * s->ldq + j * ow, x, ow * sizeof(float));
            memcpy(dk + i * s->ldk + j * kw, x + ow, kw * sizeof(float));
            memcpy(dv + i * s->ldv + j * kw, x + ow + kw, kw * sizeof(float));
        }
    return MTC_OK;
}

/* ---- dispatch ----------------------------------------------------------------------------- */

size_t cp_attention_scratch_floats(const cp_ctx *cp, const nn_attention_shape *s) {
    if (!cp || cp->cp <= 1) return 0;
    size_t rows = (size_t)s->B * s->T, KD = (size_t)s->NKV * s->HS, P = (size_t)cp->cp;
    switch (cp->type) {
    case CP_COMM_P2P: return ring_scratch_floats(s);
    case CP_COMM_ALL_GATHER: /* local, gathered, reordered KV and its gradient */
        return rows * 2 * KD * (1 + 3 * P);
    case CP_COMM_A2A:
    case CP_COMM_A2A_P2P: return a2a_scratch_floats(cp, s);
    }
    return 0;
}

static mtc_result_t cp_check(const cp_ctx *cp, const nn_attention_shape *s) {
    int A = cp->type == CP_COMM_A2A_P2P ? cp->inner_size : cp->cp;
    if ((cp->type == CP_COMM_A2A || cp->type == CP_COMM_A2A_P2P) && (s->NH % A || s->NKV % A))
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "cp-comm-type %s needs the local query heads (%d) and key/value heads "
                         "(%d) divisible by its all-to-all size %d",
                         cp_comm_type_name(cp->type), s->NH, s->NKV, A);
    return MTC_OK;
}

mtc_result_t cp_attention_forward(const cp_ctx *cp, nn_pool *pool, float *out, float *lse,
                                  const float *q, const float *k, const float *v,
                                  const nn_attention_shape *s, const nn_dropout_spec *drop,
                                  float *scratch) {
    MTC_CHECK(cp_check(cp, s));
    switch (cp->type) {
    case CP_COMM_P2P: return p2p_forward(cp, pool, out, lse, q, k, v, s, drop, scratch);
    case CP_COMM_ALL_GATHER: return ag_forward(cp, pool, out, lse, q, k, v, s, drop, scratch);
    case CP_COMM_A2A:
    case CP_COMM_A2A_P2P: return a2a_forward(cp, pool, out, lse, q, k, v, s, drop, scratch);
    }
    return MTC_ERR_INTERNAL;
}

mtc_result_t cp_attention_backward(const cp_ctx *cp, nn_pool *pool, float *dq, float *dk, float *dv,
                                   const float *dout, const float *q, const float *k,
                                   const float *v, const float *out, const float *lse,
                                   const nn_attention_shape *s, const nn_dropout_spec *drop,
                                   float *scratch) {
    MTC_CHECK(cp_check(cp, s));
    switch (cp->type) {
    case CP_COMM_P2P:
        return p2p_backward(cp, pool, dq, dk, dv, dout, q, k, v, out, lse, s, drop, scratch);
    case CP_COMM_ALL_GATHER:
        return ag_backward(cp, pool, dq, dk, dv, dout, q, k, v, out, lse, s, drop, scratch);
    case CP_COMM_A2A:
    case CP_COMM_A2A_P2P:
        return a2a_backward(cp, pool, dq, dk, dv, dout, q, k, v, out, lse, s, drop, scratch);
    }
    return MTC_ERR_INTERNAL;
}
