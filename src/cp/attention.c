/* cp/attention.c - the core attention over the context-parallel group (see
 * cp.h), built on the tiled kernel's explicit positions and lse merge.
 *
 * p2p ring, rank r of cp, step i holds the K, V that started on rank
 * src = (r - i) mod cp:
 *
 *   step 0:     out, lse = attn(Q_r, KV_r)                  (causal by position)
 *   step i > 0: KV <- rank r-1, KV -> rank r+1  (sendrecv)
 *               out, lse = merge(out, lse, attn(Q_r, KV_src))
 *   backward:   the same steps with [K | V | dK | dV] travelling; each step
 *               adds its dK, dV to the block it holds; after step cp-1 the
 *               block belongs to rank r+1 and one more hop brings each rank
 *               its own complete dK, dV.
 *
 * all_gather: KV_all = all-gather(KV_r) (rank-major, positions cp->all_pos),
 * out, lse = attn(Q_r, KV_all); backward reduce-scatters dKV_all.
 *
 * a2a (Ulysses): [q | k | v] of the local rows all-to-all'ed into the
 * rows of every rank for heads [j*NH/cp, (j+1)*NH/cp) (and key/value heads
 * likewise), one attention over the whole sequence (positions
 * cp->all_pos), the output all-to-all'ed back; backward mirrors it.
 *
 * Limitations: see cp.h (blocking exchanges, no a2a+p2p). */
#include <string.h>

#include "core/log.h"
#include "cp/cp.h"

int cp_comm_type_parse(const char *s) {
    if (!s) return -1;
    if (!strcmp(s, "p2p")) return CP_COMM_P2P;
    if (!strcmp(s, "all_gather")) return CP_COMM_ALL_GATHER;
    if (!strcmp(s, "a2a")) return CP_COMM_A2A;
    return -1;
}

const char *cp_comm_type_name(cp_comm_type t) {
    return t == CP_COMM_P2P ? "p2p" : t == CP_COMM_ALL_GATHER ? "all_gather" : "a2a";
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

static mtc_result_t ring_forward(const cp_ctx *cp, nn_pool *pool, float *out, float *lse,
                                 const float *q, const float *k, const float *v,
                                 const nn_attention_shape *s, const nn_dropout_spec *drop,
                                 float *scratch) {
    int T = s->T, KD = s->NKV * s->HS, r = cp->rank, P = cp->cp;
    size_t rows = (size_t)s->B * T;
    float *cur = scratch, *nxt = cur + rows * 2 * KD, *opart = nxt + rows * 2 * KD;
    float *lpart = opart + rows * s->ldo;
    nn_attention_shape g = *s;
    g.qpos = cp->pos, g.kpos = cp->pos;
    nn_dropout_spec d;
    nn_attention_forward(pool, out, lse, q, k, v, &g, cp_drop(&d, drop, cp, cp->pos, cp->pos));
    pack2(cur, 2 * KD, k, s->ldk, KD, v, s->ldv, KD, rows);
    g.ldk = g.ldv = 2 * KD;
    for (int i = 1; i < P; i++) {
        /* comm: sendrecv(cp) ring, K and V to r+1 from r-1 */
        MTC_CHECK(mtc_sendrecv(cur, rows * 2 * KD, (r + 1) % P, nxt, rows * 2 * KD, (r - 1 + P) % P,
                               MTC_DTYPE_F32, cp->comm));
        float *t = cur;
        cur = nxt, nxt = t;
        g.kpos = cp->all_pos + (size_t)((r - i + P) % P) * T;
        nn_attention_forward(pool, opart, lpart, q, cur, cur + KD, &g,
                             cp_drop(&d, drop, cp, cp->pos, g.kpos));
        nn_attention_merge(pool, out, lse, opart, lpart, s->B, T, s->NH, s->HS, s->ldo);
    }
    return MTC_OK;
}

static mtc_result_t ring_backward(const cp_ctx *cp, nn_pool *pool, float *dq, float *dk, float *dv,
                                  const float *dout, const float *q, const float *k, const float *v,
                                  const float *out, const float *lse, const nn_attention_shape *s,
                                  const nn_dropout_spec *drop, float *scratch) {
    int T = s->T, KD = s->NKV * s->HS, r = cp->rank, P = cp->cp, W = 4 * KD;
    size_t rows = (size_t)s->B * T;
    float *cur = scratch, *nxt = cur + rows * W; /* rows of [K | V | dK | dV] */
    nn_attention_shape g = *s;
    g.qpos = cp->pos, g.kpos = cp->pos;
    g.ldk = g.ldv = W;
    g.accumulate = 0;
    nn_dropout_spec d;
    pack2(cur, W, k, s->ldk, KD, v, s->ldv, KD, rows);
    nn_attention_backward(pool, dq, cur + 2 * KD, cur + 3 * KD, dout, q, cur, cur + KD, out, lse,
                          &g, cp_drop(&d, drop, cp, cp->pos, cp->pos));
    g.accumulate = 1;
    for (int i = 1; i <= P; i++) {
        /* comm: sendrecv(cp) ring, [K | V | dK | dV] to r+1 from r-1 */
        MTC_CHECK(mtc_sendrecv(cur, rows * W, (r + 1) % P, nxt, rows * W, (r - 1 + P) % P,
                               MTC_DTYPE_F32, cp->comm));
        float *t = cur;
        cur = nxt, nxt = t;
        if (i == P) break; /* the block is home: its dK, dV are complete */
        g.kpos = cp->all_pos + (size_t)((r - i + P) % P) * T;
        nn_attention_backward(pool, dq, cur + 2 * KD, cur + 3 * KD, dout, q, cur, cur + KD, out,
                              lse, &g, cp_drop(&d, drop, cp, cp->pos, g.kpos));
    }
    unpack2(dk, s->ldk, KD, dv, s->ldv, KD, cur + 2 * KD, W, rows);
    return MTC_OK;
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

/* ---- a2a (Ulysses) ---------------------------------------------------------------------- */

/* Heads of rank j's share: query heads [j*nh, (j+1)*nh), kv heads [j*ng, ...). */
typedef struct {
    int nh, ng, HS, W; /* per-share heads, kv heads, head size, share row width */
} a2a_geom;

static a2a_geom a2a_of(const cp_ctx *cp, const nn_attention_shape *s) {
    a2a_geom a = {s->NH / cp->cp, s->NKV / cp->cp, s->HS, 0};
    a.W = (a.nh + 2 * a.ng) * a.HS;
    return a;
}

/* send (cp, B, T, W): block j = this rank's rows of share j's [q | k | v]
 * heads; the all-to-all returns (cp, B, T, W) = every rank's rows of this
 * rank's share. */
static void a2a_pack_qkv(float *send, const float *q, const float *k, const float *v,
                         const nn_attention_shape *s, const a2a_geom *a, int P) {
    size_t rows = (size_t)s->B * s->T;
    size_t qw = (size_t)a->nh * a->HS, kw = (size_t)a->ng * a->HS;
    for (int j = 0; j < P; j++)
        for (size_t i = 0; i < rows; i++) {
            float *d = send + ((size_t)j * rows + i) * a->W;
            memcpy(d, q + i * s->ldq + j * qw, qw * sizeof(float));
            memcpy(d + qw, k + i * s->ldk + j * kw, kw * sizeof(float));
            memcpy(d + qw + kw, v + i * s->ldv + j * kw, kw * sizeof(float));
        }
}

/* The shape of the full-sequence attention over the received rows (B, Tg,
 * W) after ag_reorder's batch-major reorder. */
static nn_attention_shape a2a_shape(const cp_ctx *cp, const nn_attention_shape *s,
                                    const a2a_geom *a) {
    nn_attention_shape g = *s;
    g.T = g.Tk = cp->Tg;
    g.NH = a->nh, g.NKV = a->ng;
    g.ldq = g.ldk = g.ldv = a->W;
    g.ldo = a->nh * a->HS;
    g.qpos = g.kpos = cp->all_pos;
    return g;
}

static mtc_result_t a2a_forward(const cp_ctx *cp, nn_pool *pool, float *out, float *lse,
                                const float *q, const float *k, const float *v,
                                const nn_attention_shape *s, const nn_dropout_spec *drop,
                                float *scratch) {
    a2a_geom a = a2a_of(cp, s);
    int P = cp->cp;
    size_t rows = (size_t)s->B * s->T, big = rows * P * a.W;
    float *send = scratch, *recv = send + big, *all = recv + big; /* (B, Tg, W) */
    float *o = all + big, *osend = o + rows * P * a.nh * a.HS, *l = osend + big;
    a2a_pack_qkv(send, q, k, v, s, &a, P);
    /* comm: all-to-all(cp) of q, k, v heads */
    MTC_CHECK(mtc_all_to_all(send, recv, rows * a.W, MTC_DTYPE_F32, cp->comm));
    ag_reorder(all, recv, s->B, s->T, P, a.W, 0);
    nn_attention_shape g = a2a_shape(cp, s, &a);
    nn_dropout_spec d, *dd = NULL;
    if (drop) dd = (nn_dropout_spec *)cp_drop(&d, drop, cp, cp->all_pos, cp->all_pos);
    if (dd) dd->h0 += cp->rank * a.nh; /* this rank's share of the heads */
    size_t ow = (size_t)a.nh * a.HS;
    nn_attention_forward(pool, o, l, all, all + ow, all + ow + (size_t)a.ng * a.HS, &g, dd);
    /* back to (cp, B, T, ow) rank-major, all-to-all, then rows of out */
    ag_reorder(o, osend, s->B, s->T, P, (int)ow, 1);
    /* comm: all-to-all(cp) of the output heads */
    MTC_CHECK(mtc_all_to_all(osend, send, rows * ow, MTC_DTYPE_F32, cp->comm));
    for (int j = 0; j < P; j++)
        for (size_t i = 0; i < rows; i++)
            memcpy(out + i * s->ldo + j * ow, send + ((size_t)j * rows + i) * ow,
                   ow * sizeof(float));
    /* lse (B, nh, Tg) of this share -> (B, NH, T) of the local rows, by the
     * same all-to-all: element (b, h, t) of rank j's rows travels in block j */
    float *ls = osend, *lr = send;
    size_t per = (size_t)s->B * a.nh * s->T;
    for (int j = 0; j < P; j++)
        for (int b = 0; b < s->B; b++)
            for (int h = 0; h < a.nh; h++)
                memcpy(ls + (size_t)j * per + ((size_t)b * a.nh + h) * s->T,
                       l + ((size_t)b * a.nh + h) * cp->Tg + (size_t)j * s->T,
                       (size_t)s->T * sizeof(float));
    /* comm: all-to-all(cp) of the lse */
    MTC_CHECK(mtc_all_to_all(ls, lr, per, MTC_DTYPE_F32, cp->comm));
    for (int j = 0; j < P; j++)
        for (int b = 0; b < s->B; b++)
            for (int h = 0; h < a.nh; h++)
                memcpy(lse + ((size_t)b * s->NH + j * a.nh + h) * s->T,
                       lr + (size_t)j * per + ((size_t)b * a.nh + h) * s->T,
                       (size_t)s->T * sizeof(float));
    return MTC_OK;
}

static mtc_result_t a2a_backward(const cp_ctx *cp, nn_pool *pool, float *dq, float *dk, float *dv,
                                 const float *dout, const float *q, const float *k, const float *v,
                                 const float *out, const float *lse, const nn_attention_shape *s,
                                 const nn_dropout_spec *drop, float *scratch) {
    a2a_geom a = a2a_of(cp, s);
    int P = cp->cp;
    size_t rows = (size_t)s->B * s->T, big = rows * P * a.W, ow = (size_t)a.nh * a.HS;
    size_t obig = rows * P * ow, per = (size_t)s->B * a.nh * s->T;
    float *send = scratch, *recv = send + big, *all = recv + big, *dall = all + big;
    float *o = dall + big, *dO = o + obig, *t1 = dO + obig, *t2 = t1 + obig, *l = t2 + obig;
    float *lt = l + per * P;
    a2a_pack_qkv(send, q, k, v, s, &a, P);
    /* comm: all-to-all(cp) of q, k, v heads (again, as the forward) */
    MTC_CHECK(mtc_all_to_all(send, recv, rows * a.W, MTC_DTYPE_F32, cp->comm));
    ag_reorder(all, recv, s->B, s->T, P, a.W, 0);
    /* out and dout of this share's heads for every row: all-to-all as q */
    const float *pair[2] = {out, dout};
    float *dst[2] = {o, dO};
    for (int x = 0; x < 2; x++) {
        for (int j = 0; j < P; j++)
            for (size_t i = 0; i < rows; i++)
                memcpy(t1 + ((size_t)j * rows + i) * ow, pair[x] + i * s->ldo + j * ow,
                       ow * sizeof(float));
        /* comm: all-to-all(cp) of out / dout heads */
        MTC_CHECK(mtc_all_to_all(t1, t2, rows * ow, MTC_DTYPE_F32, cp->comm));
        ag_reorder(dst[x], t2, s->B, s->T, P, (int)ow, 0);
    }
    /* lse of this share for every row */
    for (int j = 0; j < P; j++)
        for (int b = 0; b < s->B; b++)
            for (int h = 0; h < a.nh; h++)
                memcpy(lt + (size_t)j * per + ((size_t)b * a.nh + h) * s->T,
                       lse + ((size_t)b * s->NH + j * a.nh + h) * s->T,
                       (size_t)s->T * sizeof(float));
    /* comm: all-to-all(cp) of the lse */
    MTC_CHECK(mtc_all_to_all(lt, t1, per, MTC_DTYPE_F32, cp->comm));
    for (int j = 0; j < P; j++)
        for (int b = 0; b < s->B; b++)
            for (int h = 0; h < a.nh; h++)
                memcpy(l + ((size_t)b * a.nh + h) * cp->Tg + (size_t)j * s->T,
                       t1 + (size_t)j * per + ((size_t)b * a.nh + h) * s->T,
                       (size_t)s->T * sizeof(float));
    nn_attention_shape g = a2a_shape(cp, s, &a);
    g.accumulate = 0;
    nn_dropout_spec d, *dd = NULL;
    if (drop) dd = (nn_dropout_spec *)cp_drop(&d, drop, cp, cp->all_pos, cp->all_pos);
    if (dd) dd->h0 += cp->rank * a.nh;
    size_t kw = (size_t)a.ng * a.HS;
    nn_attention_backward(pool, dall, dall + ow, dall + ow + kw, dO, all, all + ow, all + ow + kw,
                          o, l, &g, dd);
    /* gradients back to the rows' owners */
    ag_reorder(dall, recv, s->B, s->T, P, a.W, 1);
    /* comm: all-to-all(cp) of dq, dk, dv heads */
    MTC_CHECK(mtc_all_to_all(recv, send, rows * a.W, MTC_DTYPE_F32, cp->comm));
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
    case CP_COMM_P2P: /* fwd: 2 KV blocks + a partial out and lse; bwd: 2 [K|V|dK|dV] blocks */
    {
        size_t f = rows * 4 * KD + rows * (size_t)s->ldo + (size_t)s->B * s->NH * s->T;
        return f > rows * 8 * KD ? f : rows * 8 * KD;
    }
    case CP_COMM_ALL_GATHER: /* local, gathered, reordered KV and its gradient */
        return rows * 2 * KD * (1 + 3 * P);
    case CP_COMM_A2A: {
        a2a_geom a = a2a_of(cp, s);
        size_t big = rows * P * a.W, obig = rows * P * a.nh * a.HS;
        size_t per = (size_t)s->B * a.nh * s->T;
        return 4 * big + 4 * obig + 2 * per * P;
    }
    }
    return 0;
}

static mtc_result_t cp_check(const cp_ctx *cp, const nn_attention_shape *s) {
    if (cp->type == CP_COMM_A2A && (s->NH % cp->cp || s->NKV % cp->cp))
        return mtc_error(MTC_ERR_INVALID_ARGUMENT,
                         "cp-comm-type a2a needs the local query heads (%d) and key/value heads "
                         "(%d) divisible by context-parallel-size=%d",
                         s->NH, s->NKV, cp->cp);
    return MTC_OK;
}

mtc_result_t cp_attention_forward(const cp_ctx *cp, nn_pool *pool, float *out, float *lse,
                                  const float *q, const float *k, const float *v,
                                  const nn_attention_shape *s, const nn_dropout_spec *drop,
                                  float *scratch) {
    MTC_CHECK(cp_check(cp, s));
    switch (cp->type) {
    case CP_COMM_P2P: return ring_forward(cp, pool, out, lse, q, k, v, s, drop, scratch);
    case CP_COMM_ALL_GATHER: return ag_forward(cp, pool, out, lse, q, k, v, s, drop, scratch);
    case CP_COMM_A2A: return a2a_forward(cp, pool, out, lse, q, k, v, s, drop, scratch);
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
        return ring_backward(cp, pool, dq, dk, dv, dout, q, k, v, out, lse, s, drop, scratch);
    case CP_COMM_ALL_GATHER:
        return ag_backward(cp, pool, dq, dk, dv, dout, q, k, v, out, lse, s, drop, scratch);
    case CP_COMM_A2A:
        return a2a_backward(cp, pool, dq, dk, dv, dout, q, k, v, out, lse, s, drop, scratch);
    }
    return MTC_ERR_INTERNAL;
}
