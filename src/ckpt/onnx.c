/* ckpt/onnx.c - the decoder graph of a serial model in ONNX; see onnx.h.
 *
 *   input_ids ─Gather(wte)─(+ Gather(wpe, position_ids))─> x (B, S, C)
 *   per layer:  h = norm1(x) ─MatMul(qkv^T)─Split─> q, k, v (─q/k norm per head)─RoPE(q, k)─>
 *               present = Concat(past, k | v) ─attention(mask)─> o_proj ─> x += ..
 *               h = norm2(x) ─MLP or MoE─> x += ..
 *   normf(x) ─MatMul(head^T)─> logits (B, S, V)
 *   mask (B, 1, S, T): key j <= past + query i, and attention_mask[b, j] = 1,
 *   added as 0 / -1e9 to the scores.
 * Linear weights are stored transposed, (in, out), as MatMul's right side.
 * Multi-latent attention (attention_mla) keeps (B, NH, T, HSa) caches of
 * heads padded with zeros to HSa = max(dqk + dpe, dv).
 * Limitations: MoE runs every expert on every token (the router's top-k
 * weights are zero for the others), so its cost is E / k times the
 * routed one; capacity dropping is refused, group-limited routing is
 * in the graph for the sigmoid router only. */
#include "ckpt/onnx.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/onnx_pb.h"
#include "model/family.h"

#define OPSET 17

typedef struct {
    ox_graph g;
    const mtc_model *m;
    int f16;
    const char *mask;      /* (B, 1, S, T) additive bias */
    const char *cos, *sin; /* (B, 1, S, HS) RoPE at position_ids */
    const char *shape_q;   /* [0, 0, NH, HS] */
    const char *shape_kv;  /* [0, 0, NG, HS] */
} ox_ctx;

static const ox_attr *ints(const char *name, const int64_t *v, int n, ox_attr *a) {
    *a = (ox_attr){name, 'I', 0, 0, v, n};
    return a;
}
static const ox_attr *aint(const char *name, int64_t v, ox_attr *a) {
    *a = (ox_attr){name, 'i', v, 0, NULL, 0};
    return a;
}
static const char *i64(ox_ctx *x, int64_t v) { return ox_const_i64(&x->g, &v, 1, 1); }
static const char *f32(ox_ctx *x, float v) { return ox_const_f32(&x->g, v); }

/* rows [0, rows) of a (rows_total, cols) matrix w, transposed to (cols, rows). */
static const char *weight_t(ox_ctx *x, const char *name, const float *w, int64_t rows,
                            int64_t cols) {
    float *t = malloc((size_t)(rows * cols) * sizeof *t);
    if (!t) {
        if (x->g.rc == MTC_OK) x->g.rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "ONNX weight %s", name);
        return "oom";
    }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            t[c * rows + r] = w[r * cols + c];
    int64_t d[2] = {cols, rows};
    const char *nm = ox_init_f32(&x->g, name, d, 2, t, x->f16);
    free(t);
    return nm;
}
static const char *vec(ox_ctx *x, const char *name, const float *w, int64_t n) {
    return ox_init_f32(&x->g, name, &n, 1, w, 0);
}
static const char *pname(const char *fmt, int l, const char *s, char *buf, size_t n) {
    snprintf(buf, n, fmt, l, s);
    return buf;
}

/* y = in @ w^T (+ b): w (rows, cols) as nn.Linear. */
static const char *linear(ox_ctx *x, const char *in, const char *name, const float *w,
                          const float *b, int64_t rows, int64_t cols) {
    char n[240];
    snprintf(n, sizeof n, "%s.weight_t", name);
    const char *y = ox_op2(&x->g, "MatMul", in, weight_t(x, n, w, rows, cols));
    if (!b) return y;
    snprintf(n, sizeof n, "%s.bias", name);
    return ox_op2(&x->g, "Add", y, vec(x, n, b, rows));
}

/* The model's norm over the last axis of size C (the hidden size, or a
 * head's for --qk-layernorm). */
static const char *norm_n(ox_ctx *x, const char *in, const char *name, const float *w,
                          const float *b, int64_t C) {
    const mtc_model_config *c = &x->m->cfg;
    char n[240];
    float eps = mtc_model_norm_eps(c);
    snprintf(n, sizeof n, "%s.weight", name);
    const char *wn = vec(x, n, w, C);
    ox_attr a[2];
    if (c->normalization == MTC_NORM_LAYERNORM) {
        float *zero = b ? NULL : calloc((size_t)C, sizeof *zero);
        snprintf(n, sizeof n, "%s.bias", name);
        const char *in3[3] = {in, wn, vec(x, n, b ? b : zero, C)};
        free(zero);
        a[0] = (ox_attr){"axis", 'i', -1, 0, NULL, 0};
        a[1] = (ox_attr){"epsilon", 'f', 0, eps, NULL, 0};
        return ox_node(&x->g, "LayerNormalization", 3, in3, 1, NULL, a, 2);
    }
    /* RMSNorm: (x * 1/sqrt(mean(x^2) + eps)) * w */
    static const int64_t last[1] = {-1};
    a[0] = (ox_attr){"axes", 'I', 0, 0, last, 1};
    a[1] = (ox_attr){"keepdims", 'i', 1, 0, NULL, 0};
    const char *ms = ox_op1a(&x->g, "ReduceMean", ox_op2(&x->g, "Mul", in, in), a, 2);
    const char *r = ox_op2(&x->g, "Div", f32(x, 1.0f),
                           ox_op1(&x->g, "Sqrt", ox_op2(&x->g, "Add", ms, f32(x, eps))));
    return ox_op2(&x->g, "Mul", ox_op2(&x->g, "Mul", in, r), wn);
}

static const char *norm(ox_ctx *x, const char *in, const char *name, const float *w,
                        const float *b) {
    return norm_n(x, in, name, w, b, x->m->cfg.hidden_size);
}

/* GELU, tanh form (Megatron's gelu, Hugging Face's gelu_new). */
static const char *gelu(ox_ctx *x, const char *v) {
    ox_graph *g = &x->g;
    const char *v3 = ox_op2(g, "Mul", ox_op2(g, "Mul", v, v), v);
    const char *in = ox_op2(g, "Add", v, ox_op2(g, "Mul", v3, f32(x, 0.044715f)));
    const char *t = ox_op1(g, "Tanh", ox_op2(g, "Mul", in, f32(x, 0.7978845608028654f)));
    return ox_op2(g, "Mul", ox_op2(g, "Mul", v, f32(x, 0.5f)), ox_op2(g, "Add", t, f32(x, 1.0f)));
}

/* [a | b] = split of the last axis at n; silu(a) * b. */
static const char *swiglu(ox_ctx *x, const char *v, int64_t n) {
    ox_graph *g = &x->g;
    int64_t sp[2] = {n, n};
    const char *in[2] = {v, ox_const_i64(g, sp, 2, 1)}, *out[2] = {NULL, NULL};
    ox_attr a;
    ox_node(g, "Split", 2, in, 2, out, aint("axis", -1, &a), 1);
    return ox_op2(g, "Mul", ox_op2(g, "Mul", out[0], ox_op1(g, "Sigmoid", out[0])), out[1]);
}

static const char *activation(ox_ctx *x, const char *v, int64_t F) {
    return x->m->cfg.swiglu ? swiglu(x, v, F) : gelu(x, v);
}

/* (B, S, heads*HS) -> (B, heads, S, HS) */
static const char *heads(ox_ctx *x, const char *v, const char *shape) {
    static const int64_t perm[4] = {0, 2, 1, 3};
    ox_attr a;
    return ox_op1a(&x->g, "Transpose", ox_op2(&x->g, "Reshape", v, shape),
                   ints("perm", perm, 4, &a), 1);
}

/* t * cos + rotate_half(t) * sin on (B, H, S, HS); MLA's rotary part
 * (HS = qk-pos-emb-head-dim) is de-interleaved first (nn/yarn.h). */
static const char *rope(ox_ctx *x, const char *t) {
    ox_graph *g = &x->g;
    const mtc_model_config *c = &x->m->cfg;
    int64_t HS = c->mla.enabled ? c->mla.qk_pos_emb_head_dim : mtc_model_head_size(c);
    int64_t sp[2] = {HS / 2, HS / 2};
    if (c->mla.enabled) { /* [x0 x2 .. | x1 x3 ..] */
        int64_t idx[1024];
        for (int64_t j = 0; j < HS; j++)
            idx[j] = j < HS / 2 ? 2 * j : 2 * (j - HS / 2) + 1;
        ox_attr ga;
        t = ox_op2a(g, "Gather", t, ox_const_i64(g, idx, (int)HS, 1), aint("axis", -1, &ga), 1);
    }
    const char *in[2] = {t, ox_const_i64(g, sp, 2, 1)}, *out[2] = {NULL, NULL};
    ox_attr a;
    ox_node(g, "Split", 2, in, 2, out, aint("axis", -1, &a), 1);
    const char *cat[2] = {ox_op1(g, "Neg", out[1]), out[0]};
    const char *rh = ox_node(g, "Concat", 2, cat, 1, NULL, aint("axis", -1, &a), 1);
    return ox_op2(g, "Add", ox_op2(g, "Mul", t, x->cos), ox_op2(g, "Mul", rh, x->sin));
}

static const char *attention(ox_ctx *x, int l, const char *h) {
    const mtc_model_config *c = &x->m->cfg;
    const mtc_model_layer *L = &x->m->layers[l];
    ox_graph *g = &x->g;
    int64_t C = c->hidden_size, HS = mtc_model_head_size(c), NH = c->num_heads;
    int64_t NG = mtc_model_groups(c), QD = NH * HS, KD = NG * HS;
    char n[200];
    const char *fmt = model_family_is_llama(c) ? "model.layers.%d.%s" : "transformer.h.%d.%s";
    const char *qkv = linear(x, h, pname(fmt, l, "qkv", n, sizeof n), L->w[MTC_ROLE_QKV_W],
                             L->w[MTC_ROLE_QKV_B], QD + 2 * KD, C);
    int64_t sp[3] = {QD, KD, KD};
    const char *in[2] = {qkv, ox_const_i64(g, sp, 3, 1)}, *o3[3] = {NULL, NULL, NULL};
    ox_attr a[2];
    ox_node(g, "Split", 2, in, 3, o3, aint("axis", -1, &a[0]), 1);
    const char *q = heads(x, o3[0], x->shape_q), *k = heads(x, o3[1], x->shape_kv);
    const char *v = heads(x, o3[2], x->shape_kv);
    if (c->qk_layernorm) { /* per head, before RoPE (Megatron's q/k_layernorm, Qwen3's q/k_norm) */
        q = norm_n(x, q, pname(fmt, l, "q_norm", n, sizeof n), L->w[MTC_ROLE_QNORM_W],
                   L->w[MTC_ROLE_QNORM_B], HS);
        k = norm_n(x, k, pname(fmt, l, "k_norm", n, sizeof n), L->w[MTC_ROLE_KNORM_W],
                   L->w[MTC_ROLE_KNORM_B], HS);
    }
    if (c->position_embedding == MTC_POS_ROPE) q = rope(x, q), k = rope(x, k);
    const char *kv[2] = {k, v};
    const char *present[2];
    for (int j = 0; j < 2; j++) {
        const char *cat[2] = {ox_name(g, "past_key_values.%d.%s", l, j ? "value" : "key"), kv[j]};
        present[j] = ox_name(g, "present.%d.%s", l, j ? "value" : "key");
        ox_node(g, "Concat", 2, cat, 1, &present[j], aint("axis", 2, &a[0]), 1);
        kv[j] = present[j];
        if (NG < NH) { /* (B, NG, T, HS) -> (B, NG, NH/NG, T, HS) -> (B, NH, T, HS) */
            static const int64_t ax2[1] = {2};
            int64_t rep[5] = {1, 1, NH / NG, 1, 1}, sh[4] = {0, NH, -1, HS};
            const char *uin[2] = {kv[j], ox_const_i64(g, ax2, 1, 1)};
            const char *u = ox_node(g, "Unsqueeze", 2, uin, 1, NULL, NULL, 0);
            u = ox_op2(g, "Expand", u, ox_const_i64(g, rep, 5, 1));
            kv[j] = ox_op2(g, "Reshape", u, ox_const_i64(g, sh, 4, 1));
        }
    }
    static const int64_t pt[4] = {0, 1, 3, 2}, back[4] = {0, 2, 1, 3};
    const char *kt = ox_op1a(g, "Transpose", kv[0], ints("perm", pt, 4, &a[0]), 1);
    const char *s = ox_op2(g, "Mul", ox_op2(g, "MatMul", q, kt), f32(x, 1.0f / sqrtf((float)HS)));
    const char *p = ox_op1a(g, "Softmax", ox_op2(g, "Add", s, x->mask), aint("axis", -1, &a[0]), 1);
    const char *ctx =
        ox_op1a(g, "Transpose", ox_op2(g, "MatMul", p, kv[1]), ints("perm", back, 4, &a[0]), 1);
    int64_t flat[3] = {0, 0, QD};
    ctx = ox_op2(g, "Reshape", ctx, ox_const_i64(g, flat, 3, 1));
    return linear(x, ctx, pname(fmt, l, "o_proj", n, sizeof n), L->w[MTC_ROLE_PROJ_W],
                  L->w[MTC_ROLE_PROJ_B], C, QD);
}

/* The last axis of t padded with zeros from n to N channels (N > n). */
static const char *pad_last(ox_ctx *x, const char *t, int64_t n, int64_t N) {
    (void)n;
    int64_t pads[8] = {0, 0, 0, 0, 0, 0, 0, N - n};
    const char *in[2] = {t, ox_const_i64(&x->g, pads, 8, 1)};
    return ox_node(&x->g, "Pad", 2, in, 1, NULL, NULL, 0);
}

/* Multi-latent attention (model/mla.h): heads padded with zeros to HSa =
 * max(dqk + dpe, dv) channels (the scores and outputs are unchanged), so
 * the cache is (B, NH, T, HSa) for keys and values alike, the shape
 * transformers.js allocates from config.json's head_dim. */
static const char *attention_mla(ox_ctx *x, int l, const char *h) {
    const mtc_model_config *c = &x->m->cfg;
    const mtc_mla_config *ml = &c->mla;
    const mtc_model_layer *L = &x->m->layers[l];
    ox_graph *g = &x->g;
    int64_t C = c->hidden_size, NH = c->num_heads, dn = ml->qk_head_dim;
    int64_t dr = ml->qk_pos_emb_head_dim, dv = ml->v_head_dim, Dq = dn + dr, KL = ml->kv_lora_rank;
    int64_t QL = ml->q_lora_rank, HSa = Dq > dv ? Dq : dv;
    char n[200];
    const char *fmt = "model.layers.%d.self_attn.%s";
    const char *q;
    if (QL > 0) {
        q = linear(x, h, pname(fmt, l, "q_a_proj", n, sizeof n), L->w[MTC_ROLE_MLA_QD_W], NULL, QL,
                   C);
        q = norm_n(x, q, pname(fmt, l, "q_a_layernorm", n, sizeof n), L->w[MTC_ROLE_MLA_QN_W],
                   L->w[MTC_ROLE_MLA_QN_B], QL);
        q = linear(x, q, pname(fmt, l, "q_b_proj", n, sizeof n), L->w[MTC_ROLE_MLA_QU_W], NULL,
                   NH * Dq, QL);
    } else {
        q = linear(x, h, pname(fmt, l, "q_proj", n, sizeof n), L->w[MTC_ROLE_MLA_Q_W], NULL,
                   NH * Dq, C);
    }
    int64_t shq[4] = {0, 0, NH, Dq}, shkv[4] = {0, 0, NH, dn + dv};
    q = heads(x, q, ox_const_i64(g, shq, 4, 1)); /* (B, NH, S, Dq) */
    ox_attr a[2];
    int64_t sp[2] = {dn, dr};
    const char *in[2] = {q, ox_const_i64(g, sp, 2, 1)}, *qs[2] = {NULL, NULL};
    ox_node(g, "Split", 2, in, 2, qs, aint("axis", -1, &a[0]), 1);
    const char *kva = linear(x, h, pname(fmt, l, "kv_a_proj_with_mqa", n, sizeof n),
                             L->w[MTC_ROLE_MLA_KVD_W], NULL, KL + dr, C);
    int64_t sp2[2] = {KL, dr};
    const char *in2[2] = {kva, ox_const_i64(g, sp2, 2, 1)}, *ks[2] = {NULL, NULL};
    ox_node(g, "Split", 2, in2, 2, ks, aint("axis", -1, &a[0]), 1);
    const char *lat = norm_n(x, ks[0], pname(fmt, l, "kv_a_layernorm", n, sizeof n),
                             L->w[MTC_ROLE_MLA_KVN_W], L->w[MTC_ROLE_MLA_KVN_B], KL);
    const char *kv = linear(x, lat, pname(fmt, l, "kv_b_proj", n, sizeof n),
                            L->w[MTC_ROLE_MLA_KVU_W], NULL, NH * (dn + dv), KL);
    kv = heads(x, kv, ox_const_i64(g, shkv, 4, 1)); /* (B, NH, S, dn + dv) */
    int64_t sp3[2] = {dn, dv};
    const char *in3[2] = {kv, ox_const_i64(g, sp3, 2, 1)}, *kvs[2] = {NULL, NULL};
    ox_node(g, "Split", 2, in3, 2, kvs, aint("axis", -1, &a[0]), 1);
    static const int64_t ax1[1] = {1};
    const char *uin[2] = {ks[1], ox_const_i64(g, ax1, 1, 1)};
    const char *kp = rope(x, ox_node(g, "Unsqueeze", 2, uin, 1, NULL, NULL, 0)); /* (B, 1, S, dr) */
    int64_t rep[4] = {1, NH, 1, 1};
    kp = ox_op2(g, "Expand", kp, ox_const_i64(g, rep, 4, 1)); /* shared by every head */
    const char *qc[2] = {qs[0], rope(x, qs[1])}, *kc[2] = {kvs[0], kp};
    q = ox_node(g, "Concat", 2, qc, 1, NULL, aint("axis", -1, &a[0]), 1);
    const char *k = ox_node(g, "Concat", 2, kc, 1, NULL, aint("axis", -1, &a[0]), 1);
    const char *v = kvs[1];
    if (HSa > Dq) q = pad_last(x, q, Dq, HSa), k = pad_last(x, k, Dq, HSa);
    if (HSa > dv) v = pad_last(x, v, dv, HSa);
    const char *kvp[2] = {k, v};
    for (int j = 0; j < 2; j++) {
        const char *cat[2] = {ox_name(g, "past_key_values.%d.%s", l, j ? "value" : "key"), kvp[j]};
        const char *pres = ox_name(g, "present.%d.%s", l, j ? "value" : "key");
        ox_node(g, "Concat", 2, cat, 1, &pres, aint("axis", 2, &a[0]), 1);
        kvp[j] = pres;
    }
    static const int64_t pt[4] = {0, 1, 3, 2}, back[4] = {0, 2, 1, 3};
    const char *kt = ox_op1a(g, "Transpose", kvp[0], ints("perm", pt, 4, &a[0]), 1);
    const char *sc =
        ox_op2(g, "Mul", ox_op2(g, "MatMul", q, kt), f32(x, model_mla_softmax_scale(ml)));
    const char *p =
        ox_op1a(g, "Softmax", ox_op2(g, "Add", sc, x->mask), aint("axis", -1, &a[0]), 1);
    const char *ctx = ox_op2(g, "MatMul", p, kvp[1]); /* (B, NH, S, HSa) */
    if (HSa > dv) {
        int64_t z = 0, e = dv, ax = -1;
        const char *sl[4] = {ctx, ox_const_i64(g, &z, 1, 1), ox_const_i64(g, &e, 1, 1),
                             ox_const_i64(g, &ax, 1, 1)};
        ctx = ox_node(g, "Slice", 4, sl, 1, NULL, NULL, 0);
    }
    ctx = ox_op1a(g, "Transpose", ctx, ints("perm", back, 4, &a[0]), 1);
    int64_t flat[3] = {0, 0, NH * dv};
    ctx = ox_op2(g, "Reshape", ctx, ox_const_i64(g, flat, 3, 1));
    return linear(x, ctx, pname(fmt, l, "o_proj", n, sizeof n), L->w[MTC_ROLE_PROJ_W],
                  L->w[MTC_ROLE_PROJ_B], C, NH * dv);
}

static const char *mlp(ox_ctx *x, const char *h, const char *name, const float *w1, const float *b1,
                       const float *w2, const float *b2, int64_t F) {
    int64_t C = x->m->cfg.hidden_size, F1 = x->m->cfg.swiglu ? 2 * F : F;
    char n[240];
    snprintf(n, sizeof n, "%s.fc1", name);
    const char *u = activation(x, linear(x, h, n, w1, b1, F1, C), F);
    snprintf(n, sizeof n, "%s.fc2", name);
    return linear(x, u, n, w2, b2, C, F);
}

/* The E experts stacked as (E, rows, cols) -> transposed (E, cols, rows). */
static const char *experts_t(ox_ctx *x, const char *name, float *const *w, int E, int64_t rows,
                             int64_t cols) {
    float *t = malloc((size_t)(E * rows * cols) * sizeof *t);
    if (!t) {
        if (x->g.rc == MTC_OK) x->g.rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "ONNX experts %s", name);
        return "oom";
    }
    for (int e = 0; e < E; e++)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++)
                t[(size_t)e * rows * cols + c * rows + r] = w[e][r * cols + c];
    int64_t d[3] = {E, cols, rows};
    const char *nm = ox_init_f32(&x->g, name, d, 3, t, x->f16);
    free(t);
    return nm;
}
static const char *experts_b(ox_ctx *x, const char *name, float *const *b, int E, int64_t n) {
    float *t = malloc((size_t)(E * n) * sizeof *t);
    if (!t) {
        if (x->g.rc == MTC_OK) x->g.rc = mtc_error(MTC_ERR_OUT_OF_MEMORY, "ONNX experts %s", name);
        return "oom";
    }
    for (int e = 0; e < E; e++)
        memcpy(t + (size_t)e * n, b[e], (size_t)n * sizeof *t);
    int64_t d[3] = {E, 1, n};
    const char *nm = ox_init_f32(&x->g, name, d, 3, t, 0);
    free(t);
    return nm;
}

/* Group-limited routing as Megatron's (moe/router.c): each of the G groups
 * ranked by the sum of its top topk / group_topk scores, the experts outside
 * the best group_topk groups set to -1e30 before the top-k. s (B, S, E). */
static const char *group_mask(ox_ctx *x, const char *s, const mtc_moe_config *mc, int E) {
    ox_graph *g = &x->g;
    int G = mc->num_groups, TG = mc->group_topk, kg = mtc_moe_topk(mc) / TG;
    ox_attr a;
    int64_t sh[4] = {0, 0, G, E / G};
    const char *r = ox_op2(g, "Reshape", s, ox_const_i64(g, sh, 4, 1)); /* (B, S, G, E/G) */
    const char *tin[2] = {r, i64(x, kg)}, *tk[2] = {NULL, NULL};
    ox_node(g, "TopK", 2, tin, 2, tk, aint("axis", -1, &a), 1);
    static const int64_t last[1] = {-1};
    const char *rin[2] = {tk[0], ox_const_i64(g, last, 1, 1)};
    const char *gs = ox_node(g, "ReduceSum", 2, rin, 1, NULL, aint("keepdims", 0, &a), 1);
    const char *gin[2] = {gs, i64(x, TG)}, *gt[2] = {NULL, NULL};
    ox_node(g, "TopK", 2, gin, 2, gt, aint("axis", -1, &a), 1); /* (B, S, TG) */
    const char *ones = ox_op2(g, "Add", ox_op2(g, "Mul", gt[0], f32(x, 0.0f)), f32(x, 1.0f));
    const char *sin3[3] = {ox_op2(g, "Mul", gs, f32(x, 0.0f)), gt[1], ones};
    const char *gm = ox_node(g, "ScatterElements", 3, sin3, 1, NULL, aint("axis", -1, &a), 1);
    const char *uin[2] = {gm, ox_const_i64(g, last, 1, 1)};
    gm = ox_node(g, "Unsqueeze", 2, uin, 1, NULL, NULL, 0); /* (B, S, G, 1) */
    gm = ox_op2(g, "Expand", gm, ox_op1(g, "Shape", r));
    gm = ox_op2(g, "Reshape", gm, ox_op1(g, "Shape", s));
    const char *w[3] = {ox_op1a(g, "Cast", gm, aint("to", OX_BOOL, &a), 1), s, f32(x, -1e30f)};
    return ox_node(g, "Where", 3, w, 1, NULL, NULL, 0);
}

/* Router top-k weights as a dense (B, S, E) matrix, then every expert on
 * every token: sum_e w[., e] * expert_e(h). */
static const char *moe(ox_ctx *x, int l, const char *h) {
    const mtc_model_config *c = &x->m->cfg;
    const mtc_moe_config *mc = &c->moe;
    const mtc_model_layer *L = &x->m->layers[l];
    ox_graph *g = &x->g;
    int E = mc->num_experts, k = mtc_moe_topk(mc);
    int64_t C = c->hidden_size, F = mtc_model_moe_ffn(c), F1 = c->swiglu ? 2 * F : F;
    char n[200];
    const char *fmt = model_family_is_llama(c) ? "model.layers.%d.%s" : "transformer.h.%d.%s";
    ox_attr a[2];
    const char *logits =
        linear(x, h, pname(fmt, l, "mlp.router", n, sizeof n), L->w[MTC_ROLE_ROUTER_W], NULL, E, C);
    const char *tin[2], *top[2] = {NULL, NULL}, *wts;
    if (mc->score == MOE_SCORE_SOFTMAX) {
        tin[0] =
            mc->pre_softmax ? ox_op1a(g, "Softmax", logits, aint("axis", -1, &a[0]), 1) : logits;
        tin[1] = i64(x, k);
        ox_node(g, "TopK", 2, tin, 2, top, aint("axis", -1, &a[0]), 1);
        wts = mc->pre_softmax ? top[0] : ox_op1a(g, "Softmax", top[0], aint("axis", -1, &a[0]), 1);
    } else {
        const char *sg = ox_op1(g, "Sigmoid", logits);
        tin[0] = sg;
        if (L->w[MTC_ROLE_EXPERT_BIAS])
            tin[0] = ox_op2(g, "Add", sg,
                            vec(x, pname(fmt, l, "mlp.router.expert_bias", n, sizeof n),
                                L->w[MTC_ROLE_EXPERT_BIAS], E));
        if (mc->num_groups > 0 && mc->group_topk > 0 && mc->group_topk < mc->num_groups)
            tin[0] = group_mask(x, tin[0], mc, E);
        tin[1] = i64(x, k);
        ox_node(g, "TopK", 2, tin, 2, top, aint("axis", -1, &a[0]), 1);
        wts = ox_op2a(g, "GatherElements", sg, top[1], aint("axis", -1, &a[0]), 1);
        if (k > 1) { /* ReduceSum takes its axes as an input from opset 13 */
            static const int64_t last[1] = {-1};
            const char *rin[2] = {wts, ox_const_i64(g, last, 1, 1)};
            const char *sum =
                ox_node(g, "ReduceSum", 2, rin, 1, NULL, aint("keepdims", 1, &a[0]), 1);
            wts = ox_op2(g, "Div", wts, ox_op2(g, "Add", sum, f32(x, 1e-20f)));
        }
    }
    if (mc->topk_scaling > 0) wts = ox_op2(g, "Mul", wts, f32(x, mc->topk_scaling));
    const char *zero = ox_op2(g, "Mul", logits, f32(x, 0.0f)); /* (B, S, E) zeros */
    const char *sin3[3] = {zero, top[1], wts};
    const char *dense = ox_node(g, "ScatterElements", 3, sin3, 1, NULL, aint("axis", -1, &a[0]), 1);
    /* (B, S, C) -> (1, N, C); experts (E, N, .) */
    int64_t flat[3] = {1, -1, C};
    const char *hx = ox_op2(g, "Reshape", h, ox_const_i64(g, flat, 3, 1));
    const char *u = ox_op2(
        g, "MatMul", hx,
        experts_t(x, pname(fmt, l, "mlp.experts.fc1_t", n, sizeof n), L->xw + 0 * E, E, F1, C));
    if (L->xw[1 * E])
        u = ox_op2(
            g, "Add", u,
            experts_b(x, pname(fmt, l, "mlp.experts.fc1_b", n, sizeof n), L->xw + 1 * E, E, F1));
    u = activation(x, u, F);
    const char *y = ox_op2(
        g, "MatMul", u,
        experts_t(x, pname(fmt, l, "mlp.experts.fc2_t", n, sizeof n), L->xw + 2 * E, E, C, F));
    if (L->xw[3 * E])
        y = ox_op2(
            g, "Add", y,
            experts_b(x, pname(fmt, l, "mlp.experts.fc2_b", n, sizeof n), L->xw + 3 * E, E, C));
    /* weights (B, S, E) -> (E, N, 1) */
    int64_t wsh[2] = {-1, E}, perm[2] = {1, 0}, ax[1] = {2};
    const char *wf = ox_op2(g, "Reshape", dense, ox_const_i64(g, wsh, 2, 1));
    wf = ox_op1a(g, "Transpose", wf, ints("perm", perm, 2, &a[0]), 1);
    const char *uin[2] = {wf, ox_const_i64(g, ax, 1, 1)};
    wf = ox_node(g, "Unsqueeze", 2, uin, 1, NULL, NULL, 0);
    static const int64_t ax0[1] = {0};
    const char *rin[2] = {ox_op2(g, "Mul", y, wf), ox_const_i64(g, ax0, 1, 1)};
    const char *out =
        ox_node(g, "ReduceSum", 2, rin, 1, NULL, aint("keepdims", 0, &a[0]), 1); /* (N, C) */
    out = ox_op2(g, "Reshape", out, ox_op1(g, "Shape", h));
    if (L->w[MTC_ROLE_SHARED_FC1_W]) {
        const char *sh =
            mlp(x, h, pname(fmt, l, "mlp.shared_expert", n, sizeof n), L->w[MTC_ROLE_SHARED_FC1_W],
                L->w[MTC_ROLE_SHARED_FC1_B], L->w[MTC_ROLE_SHARED_FC2_W],
                L->w[MTC_ROLE_SHARED_FC2_B], mc->shared_ffn);
        out = ox_op2(g, "Add", out, sh);
    }
    return out;
}

/* Scalars and the mask shared by the layers. */
static void prologue(ox_ctx *x) {
    const mtc_model_config *c = &x->m->cfg;
    ox_graph *g = &x->g;
    ox_attr a[2];
    a[0] = (ox_attr){"start", 'i', 1, 0, NULL, 0}, a[1] = (ox_attr){"end", 'i', 2, 0, NULL, 0};
    const char *S = ox_op1a(g, "Shape", "input_ids", a, 2);
    a[0].i = 2, a[1].i = 3;
    const char *P = ox_op1a(g, "Shape", "past_key_values.0.key", a, 2);
    static const int64_t z[1] = {0};
    const char *ax0 = ox_const_i64(g, z, 1, 1);
    const char *sq[2] = {P, ax0};
    const char *Ps = ox_node(g, "Squeeze", 2, sq, 1, NULL, NULL, 0);
    sq[0] = S;
    const char *Ss = ox_node(g, "Squeeze", 2, sq, 1, NULL, NULL, 0);
    const char *Ts = ox_op2(g, "Add", Ps, Ss);
    int64_t zero = 0, one = 1;
    const char *r1[3] = {ox_const_i64(g, &zero, 1, 0), Ts, ox_const_i64(g, &one, 1, 0)};
    const char *kidx = ox_node(g, "Range", 3, r1, 1, NULL, NULL, 0); /* (T) */
    const char *r2[3] = {Ps, Ts, r1[2]};
    const char *qidx = ox_node(g, "Range", 3, r2, 1, NULL, NULL, 0); /* (S) */
    static const int64_t ax1[1] = {1}, ax12[2] = {1, 2};
    const char *u1[2] = {qidx, ox_const_i64(g, ax1, 1, 1)};
    qidx = ox_node(g, "Unsqueeze", 2, u1, 1, NULL, NULL, 0);   /* (S, 1) */
    const char *causal = ox_op2(g, "LessOrEqual", kidx, qidx); /* (S, T) */
    const char *pad = ox_op1a(g, "Cast", "attention_mask", aint("to", OX_BOOL, &a[0]), 1);
    const char *u2[2] = {pad, ox_const_i64(g, ax12, 2, 1)};
    pad = ox_node(g, "Unsqueeze", 2, u2, 1, NULL, NULL, 0); /* (B, 1, 1, T) */
    const char *w[3] = {ox_op2(g, "And", causal, pad), f32(x, 0.0f), f32(x, -1e9f)};
    x->mask = ox_node(g, "Where", 3, w, 1, NULL, NULL, 0);
    int64_t HS = mtc_model_head_size(c);
    int64_t sq4[4] = {0, 0, c->num_heads, HS}, kv4[4] = {0, 0, mtc_model_groups(c), HS};
    if (!c->mla.enabled) /* MLA shapes its own heads (an unused constant makes ORT warn) */
        x->shape_q = ox_const_i64(g, sq4, 4, 1), x->shape_kv = ox_const_i64(g, kv4, 4, 1);
    if (c->position_embedding == MTC_POS_ROPE) {
        const nn_rope_table *t = &x->m->rope;
        const nn_yarn_table *y = &x->m->yarn; /* MLA's rotation, concentration included */
        int mla = c->mla.enabled;
        int64_t d[2] = {mla ? y->max_pos : t->max_pos, mla ? y->D / 2 : t->rot / 2};
        const char *tab[2] = {ox_init_f32(g, "rope.cos", d, 2, mla ? y->cos : t->cos, 0),
                              ox_init_f32(g, "rope.sin", d, 2, mla ? y->sin : t->sin, 0)};
        const char **dst[2] = {&x->cos, &x->sin};
        for (int j = 0; j < 2; j++) { /* (B, S, HS/2) -> (B, 1, S, HS) */
            const char *gt = ox_op2(g, "Gather", tab[j], "position_ids");
            const char *cat[2] = {gt, gt};
            gt = ox_node(g, "Concat", 2, cat, 1, NULL, aint("axis", -1, &a[0]), 1);
            const char *u[2] = {gt, ox_const_i64(g, ax1, 1, 1)};
            *dst[j] = ox_node(g, "Unsqueeze", 2, u, 1, NULL, NULL, 0);
        }
    }
}

static mtc_result_t check(const mtc_model_config *c) {
    const mtc_result_t U = MTC_ERR_UNSUPPORTED;
    if (c->mla.enabled && c->mla.qk_pos_emb_head_dim > 1024)
        return mtc_error(U, "qk-pos-emb-head-dim=%d: the ONNX graph's rotation holds 1024",
                         c->mla.qk_pos_emb_head_dim);
    if (c->position_embedding == MTC_POS_ROPE &&
        (c->rotary_interleaved || (c->rotary_percent > 0 && c->rotary_percent != 1.0f)))
        return mtc_error(U, "the ONNX export rotates whole heads by halves: this model has "
                            "--rotary-interleaved or --rotary-percent below 1");
    if (c->moe.num_experts > 0 && c->moe.capacity_factor > 0)
        return mtc_error(U,
                         "moe-expert-capacity-factor=%g drops tokens, which the ONNX graph "
                         "(dropless, every expert on every token) does not: export a dropless "
                         "model",
                         (double)c->moe.capacity_factor);
    if (c->moe.num_experts > 0 && c->moe.num_groups > 0 && c->moe.score != MOE_SCORE_SIGMOID)
        return mtc_error(U,
                         "moe-router-num-groups=%d with a softmax router (group-limited routing "
                         "is in the ONNX graph for the sigmoid router only)",
                         c->moe.num_groups);
    return MTC_OK;
}

mtc_result_t mtc_onnx_supported(const mtc_model *m) { return check(&m->cfg); }

int mtc_onnx_head_dim(const mtc_model_config *c) {
    if (!c->mla.enabled) return mtc_model_head_size(c);
    int dq = c->mla.qk_head_dim + c->mla.qk_pos_emb_head_dim;
    return dq > c->mla.v_head_dim ? dq : c->mla.v_head_dim;
}

int mtc_onnx_needs_external(const mtc_model *m, int f16, int64_t limit) {
    double bytes = (double)m->reg.total * (f16 ? 2 : 4);
    return bytes > (double)(limit > 0 ? limit : (int64_t)1900000000);
}

mtc_result_t mtc_onnx_export(const mtc_model *m, const char *path, const mtc_onnx_export_opts *o) {
    const mtc_model_config *c = &m->cfg;
    MTC_CHECK(check(c));
    ox_ctx x = {.m = m, .f16 = o && o->f16};
    ox_graph *g = &x.g;
    char ext_path[4200];
    const char *slash = strrchr(path, '/');
    snprintf(ext_path, sizeof ext_path, "%s_data", path);
    FILE *ext = NULL;
    if (o && o->external) {
        ext = fopen(ext_path, "wb");
        if (!ext) return mtc_error(MTC_ERR_IO, "cannot write %s: %s", ext_path, strerror(errno));
        ox_external(g, ext, slash ? ext_path + (slash - path) + 1 : ext_path);
    }
    int64_t C = c->hidden_size, V = c->vocab_size, HS = mtc_onnx_head_dim(c);
    int64_t KVH = c->mla.enabled ? c->num_heads : mtc_model_groups(c);
    int llama = model_family_is_llama(c);
    const mtc_registry *r = &m->reg;
    const char *sym[4] = {"batch_size", "sequence_length", "past_sequence_length", "head"};
    int64_t dyn2[2] = {-1, -1};
    const char *tot[2] = {"batch_size", "total_sequence_length"};
    ox_io(g, 0, "input_ids", OX_INT64, 2, dyn2, sym);
    ox_io(g, 0, "attention_mask", OX_INT64, 2, dyn2, tot);
    ox_io(g, 0, "position_ids", OX_INT64, 2, dyn2, sym);
    int64_t kvd[4] = {-1, KVH, -1, HS};
    const char *kvs[4] = {"batch_size", NULL, "past_sequence_length", NULL};
    const char *kvo[4] = {"batch_size", NULL, "total_sequence_length", NULL};
    for (int l = 0; l < c->num_layers; l++)
        for (int j = 0; j < 2; j++) {
            char nm[64];
            snprintf(nm, sizeof nm, "past_key_values.%d.%s", l, j ? "value" : "key");
            ox_io(g, 0, nm, OX_FLOAT, 4, kvd, kvs);
        }
    prologue(&x);
    const float *wte = m->params + r->params[m->pidx[MTC_ROLE_WTE]].offset;
    int64_t ed[2] = {V, C};
    const char *emb = ox_init_f32(g, llama ? "model.embed_tokens.weight" : "transformer.wte.weight",
                                  ed, 2, wte, x.f16);
    const char *h = ox_op2(g, "Gather", emb, "input_ids");
    if (m->pidx[MTC_ROLE_WPE] >= 0) {
        const mtc_param *p = &r->params[m->pidx[MTC_ROLE_WPE]];
        int64_t pd[2] = {p->shape[0], C};
        const char *wpe =
            ox_init_f32(g, "transformer.wpe.weight", pd, 2, m->params + p->offset, x.f16);
        h = ox_op2(g, "Add", h, ox_op2(g, "Gather", wpe, "position_ids"));
    }
    const char *fmt = llama ? "model.layers.%d.%s" : "transformer.h.%d.%s";
    for (int l = 0; l < c->num_layers && g->rc == MTC_OK; l++) {
        const mtc_model_layer *L = &m->layers[l];
        char n[200];
        const char *a = norm(&x, h, pname(fmt, l, "norm1", n, sizeof n), L->w[MTC_ROLE_NORM1_W],
                             L->w[MTC_ROLE_NORM1_B]);
        h = ox_op2(g, "Add", h, c->mla.enabled ? attention_mla(&x, l, a) : attention(&x, l, a));
        a = norm(&x, h, pname(fmt, l, "norm2", n, sizeof n), L->w[MTC_ROLE_NORM2_W],
                 L->w[MTC_ROLE_NORM2_B]);
        const char *y = L->xw ? moe(&x, l, a)
                              : mlp(&x, a, pname(fmt, l, "mlp", n, sizeof n), L->w[MTC_ROLE_FC1_W],
                                    L->w[MTC_ROLE_FC1_B], L->w[MTC_ROLE_FC2_W],
                                    L->w[MTC_ROLE_FC2_B], c->ffn_hidden_size);
        h = ox_op2(g, "Add", h, y);
    }
    const float *nb = m->pidx[MTC_ROLE_NORMF_B] >= 0
                          ? m->params + r->params[m->pidx[MTC_ROLE_NORMF_B]].offset
                          : NULL;
    h = norm(&x, h, "final_norm", m->params + r->params[m->pidx[MTC_ROLE_NORMF_W]].offset, nb);
    const char *head;
    ox_attr at;
    static const int64_t t2[2] = {1, 0};
    if (m->pidx[MTC_ROLE_HEAD] >= 0)
        head = weight_t(&x, "lm_head.weight_t",
                        m->params + r->params[m->pidx[MTC_ROLE_HEAD]].offset, V, C);
    else /* tied: the embedding transposed by the graph */
        head = ox_op1a(g, "Transpose", emb, ints("perm", t2, 2, &at), 1);
    const char *lo[1] = {"logits"};
    const char *mm[2] = {h, head};
    ox_node(g, "MatMul", 2, mm, 1, lo, NULL, 0);
    int64_t ld[3] = {-1, -1, V};
    ox_io(g, 1, "logits", OX_FLOAT, 3, ld, sym);
    for (int l = 0; l < c->num_layers; l++)
        for (int j = 0; j < 2; j++) {
            char nm[64];
            snprintf(nm, sizeof nm, "present.%d.%s", l, j ? "value" : "key");
            ox_io(g, 1, nm, OX_FLOAT, 4, kvd, kvo);
        }
    if (ext && fclose(ext) != 0 && g->rc == MTC_OK)
        g->rc = mtc_error(MTC_ERR_IO, "writing %s failed: %s", ext_path, strerror(errno));
    mtc_result_t rc = ox_write(g, path, OPSET, "mtc");
    ox_graph_free(g);
    return rc;
}
