/* plan/activations.c - the activation tables: what one in-flight
 * microbatch keeps, in bytes, for a chunk of nl layers.
 *
 * MTC: the buffers model/model.c (gpt_carve) carves per slot and once per
 * chunk, each rounded to 64 bytes as the carve does, fp32; the scratch is
 * the largest of the TP layers' *_scratch_floats (model/block.c,
 * tp/linear.c, tp/embedding.c, tp/mappings.h). The attention is the tiled
 * one (nn/flash_attention.c): per layer it keeps the (B, NH/tp, T) log-sum-exp,
 * not the (B, NH/tp, T, T) probabilities. When mtc's allocation changes
 * (bf16 activations, recomputation, context parallelism's T/cp), change the
 * matching row here; tests/plan/plan_vs_train.sh compares every term with
 * mtc train's own figures and fails on any difference.
 *
 * MEGATRON: Korthikanti et al. 2022 (arXiv 2205.05198) per layer, plus
 * Megatron's report_theoretical_memory terms outside the layers (token
 * ids and embedding dropout on the first stage, the fp32 logits of the
 * output layer and cross-entropy on the last; mtc has no such tensor: its
 * head runs in chunks, tp/head.c).
 *
 * Does not: model allocator fragmentation, the BLAS's own workspace, or
 * the CUDA caching allocator. */
#include <math.h>

#include "cp/cp.h"
#include "moe/moe.h"
#include "plan/plan.h"

/* ---- the MTC table ---- */

/* One carve row: `count` floats, rounded up to 64 bytes (gpt_carve's TAKE). */
static size_t take(size_t count) { return (count * sizeof(float) + 63) & ~(size_t)63; }

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* tp/mappings.h's permutation scratch (the last-dim one is never sized: mtc
 * uses gather_output 0 and input_is_parallel 1). */
static size_t seq_scr(size_t B, size_t T, size_t C, int p) {
    return p > 1 && B > 1 ? B * T * C : 0;
}

/* tp/linear.c: column-parallel (gather_output 0 everywhere mtc uses it). */
static size_t col_scr(int p, int sp, size_t B, size_t T, size_t IN, size_t OUT) {
    if (p == 1) return 0;
    size_t seq = seq_scr(B, T, IN, p);
    size_t fwd = sp ? seq : 0, bwd = sp ? B * T * IN + seq : 0;
    (void)OUT;
    return max_sz(fwd, bwd);
}

/* tp/linear.c: column-parallel with gather_output 1 (MTP's eh_proj):
 * forward [SP gather permutation] or [local out | last-dim permutation],
 * backward [split dout] [SP: full dgrad | reduce-scatter permutation]. */
static size_t col_gather_scr(int p, int sp, size_t B, size_t T, size_t IN, size_t OUT) {
    if (p == 1) return 0;
    size_t N = B * T, seq = seq_scr(B, T, IN, p), out = N * (OUT / (size_t)p);
    size_t fwd = max_sz(sp ? seq : 0, out + (N > 1 ? N * OUT : 0));
    return max_sz(fwd, out + (sp ? N * IN + seq : 0));
}

/* tp/linear.c: row-parallel with input_is_parallel. */
static size_t row_scr(int p, int sp, size_t B, size_t T, size_t IN, size_t OUT) {
    if (p == 1) return 0;
    (void)IN;
    return sp ? B * T * OUT + seq_scr(B, T, OUT, p) : 0;
}

typedef struct {
    size_t B, T, Tl, C, QKV_tp, QD_tp, NH_tp, F_tp, F1_tp, V_tp;
    int p, sp, head_chunk;
} shapes;

/* cp/attention.c's cp_attention_scratch_floats for each communication type:
 * p2p: max(two KV blocks + a partial output and lse, two KV blocks and three
 * dK|dV blocks: the running sums in flight and this step's); all_gather: local, gathered, reordered
 * KV and its gradient; a2a: the head-scattered q|k|v and output buffers. Rows = B x T/cp. */
static size_t cp_scr(const mtc_plan_layout *l, const shapes *s) {
    size_t P = (size_t)(l->cp > 1 ? l->cp : 1);
    if (P <= 1) return 0;
    const mtc_model_config *c = &l->model;
    size_t HS = (size_t)mtc_model_head_size(c), NG_tp = (size_t)mtc_model_groups(c) / (size_t)s->p;
    size_t rows = s->B * s->T, KD = NG_tp * HS;
    switch (l->cp_comm_type) {
    case CP_COMM_P2P: {
        size_t f = rows * 4 * KD + rows * s->QD_tp + s->B * s->NH_tp * s->T;
        return max_sz(f, rows * 10 * KD);
    }
    case CP_COMM_ALL_GATHER: return rows * 2 * KD * (1 + 3 * P);
    case CP_COMM_A2A: {
        size_t nh = s->NH_tp / P, ng = NG_tp / P, W = (nh + 2 * ng) * HS;
        size_t big = rows * P * W, obig = rows * P * nh * HS, per = s->B * nh * s->T;
        return 4 * big + 4 * obig + 2 * per * P;
    }
    }
    return 0;
}

static shapes shapes_of(const mtc_plan_layout *l) {
    const mtc_model_config *c = &l->model;
    shapes s;
    s.p = l->tp > 0 ? l->tp : 1;
    s.sp = l->sequence_parallel && s.p > 1;
    s.head_chunk = l->head_chunk;
    size_t tp = (size_t)s.p, HS = (size_t)mtc_model_head_size(c);
    int cp = l->cp > 1 ? l->cp : 1; /* a rank holds seq-length / cp positions */
    s.B = (size_t)l->micro_batch, s.T = (size_t)c->seq_length / (size_t)cp;
    s.Tl = s.sp ? s.T / tp : s.T;
    s.C = (size_t)c->hidden_size;
    s.NH_tp = (size_t)c->num_heads / tp;
    s.QD_tp = s.NH_tp * HS;
    s.QKV_tp = s.QD_tp + 2 * ((size_t)mtc_model_groups(c) / tp) * HS;
    s.F_tp = (size_t)c->ffn_hidden_size / tp;
    s.F1_tp = (c->swiglu ? 2 : 1) * s.F_tp;
    s.V_tp = (size_t)c->padded_vocab_size / tp;
    return s;
}

/* model/model.c mtc_model_moe_dims: the experts' shapes on a rank of the
 * layout (F: this ETP rank's columns), and the tokens a MoE layer routes
 * per microbatch (B x T_loc: T / cp, / tp under SP). */
static moe_dims moe_dims_of(const mtc_plan_layout *l) {
    const mtc_model_config *c = &l->model;
    int etp = l->etp > 0 ? l->etp : 1;
    moe_dims d = {.C = c->hidden_size,
                  .E = c->moe.num_experts,
                  .k = mtc_moe_topk(&c->moe),
                  .F = mtc_model_moe_ffn(c) / etp,
                  .swiglu = c->swiglu,
                  .bias = !c->disable_bias_linear,
                  .ep = l->ep > 1 ? l->ep : 1,
                  .etp = etp};
    return d;
}

static int moe_tokens(const shapes *s) { return (int)(s->B * s->Tl); }

/* gpt_carve's MoE rows of one slot: a->moe (moe_acts_floats per layer)
 * and a->sfch (the shared expert's fc1 output, (B, T, SF1/tp) per layer). */
static size_t arena_moe_bytes(const mtc_plan_layout *l, size_t nl) {
    const mtc_model_config *c = &l->model;
    if (c->moe.num_experts <= 0) return 0;
    shapes s = shapes_of(l);
    moe_dims d = moe_dims_of(l);
    size_t SF_tp = (size_t)c->moe.shared_ffn / (size_t)s.p, SF1_tp = (c->swiglu ? 2 : 1) * SF_tp;
    return take(nl * moe_acts_floats(&c->moe, &d, moe_tokens(&s))) + take(nl * s.B * s.T * SF1_tp);
}

/* gpt_scratch_floats's MoE terms: the MoE layer's scratch
 * (moe_scratch_floats) and the shared expert's MLP (model_mlp_scratch_floats
 * of width shared-ffn). */
static size_t arena_moe_scratch(const mtc_plan_layout *l, const shapes *s) {
    const mtc_model_config *c = &l->model;
    if (c->moe.num_experts <= 0) return 0;
    moe_dims md = moe_dims_of(l);
    size_t scr = moe_scratch_floats(&c->moe, &md, moe_tokens(s));
    size_t N = s->B * s->T, C = s->C, SF = (size_t)c->moe.shared_ffn, SF_tp = SF / s->p;
    size_t SF1 = (c->swiglu ? 2 : 1) * SF;
    if (SF > 0)
        scr = max_sz(scr, N * (c->swiglu ? SF_tp + SF1 / s->p : SF_tp) +
                              max_sz(col_scr(s->p, s->sp, s->B, s->T, C, SF1),
                                     row_scr(s->p, s->sp, s->B, s->T, SF, C)));
    return scr;
}

/* model.c gpt_head_rows: the fused head's chunk, at most every token. */
static size_t head_rows(const shapes *s) {
    size_t N = s->B * s->T, c = s->head_chunk > 0 ? (size_t)s->head_chunk : MTC_TRAIN_HEAD_CHUNK;
    return N < c ? N : c;
}

/* --multi-latent-attention (model/mla.h): one layer's kept activations,
 * and the layer's scratch with the TP linears' (CP's not counted). */
static size_t arena_mla_floats(const mtc_plan_layout *l, const shapes *s) {
    model_mla_opts o = {.cfg = &l->model.mla};
    return model_mla_acts_floats(&o, s->p, (int)s->B, (int)s->T, (int)s->Tl, l->model.num_heads);
}

static size_t arena_mla_scratch(const mtc_plan_layout *l, const shapes *s) {
    const mtc_mla_config *m = &l->model.mla;
    if (!m->enabled) return 0;
    model_mla_opts o = {.cfg = m};
    size_t NH = (size_t)l->model.num_heads, C = s->C, Dq = m->qk_head_dim + m->qk_pos_emb_head_dim;
    size_t up = m->q_lora_rank > 0 ? (size_t)m->q_lora_rank : C;
    size_t lin = max_sz(
        col_scr(s->p, s->sp, s->B, s->T, up, NH * Dq),
        col_scr(s->p, s->sp, s->B, s->T, m->kv_lora_rank, NH * (m->qk_head_dim + m->v_head_dim)));
    lin = max_sz(lin, row_scr(s->p, s->sp, s->B, s->T, NH * m->v_head_dim, C));
    lin = max_sz(lin, s->sp ? seq_scr(s->B, s->T, m->qk_pos_emb_head_dim, s->p) : 0);
    return model_mla_scratch_body(s->p, s->sp, (int)s->B, (int)s->T, (int)C, (int)NH, &o) + lin;
}

/* A chunk's MTP part, as model.c's init_chunk sets it. has_head: bit 0 the
 * loss, above it pp_layout_mtp_role (memory.c): 1 Megatron's standalone
 * MTP stage, 2 a stage after it. */
typedef struct {
    int head, sa, depths, losses, sin, sout;
} mtp_part;
static mtp_part mtp_part_of(const mtc_plan_layout *l, int has_head) {
    int D = l->model.mtp_num_layers, head = has_head & 1, sa = D > 0 ? has_head >> 1 : 0;
    mtp_part p = {head,
                  sa,
                  sa == 1 || (!sa && head) ? D : 0,
                  0,
                  sa == 2 ? 1 + D : 1,
                  sa && !head ? 1 + D : 1};
    p.losses = head && (sa == 2 || p.depths) ? D : 0;
    return p;
}

/* gpt_carve's per-slot rows. */
static size_t arena_slot_bytes(const mtc_plan_layout *l, size_t nl, int has_head) {
    shapes s = shapes_of(l);
    mtp_part mp = mtp_part_of(l, has_head);
    size_t N = s.B * s.T, Nl = s.B * s.Tl, C = s.C, b = 0;
    b += take((size_t)mp.sin * Nl * C); /* encoded: chunk input */
    b += 2 * take(nl * Nl);             /* ln1 mean, rstd (its output: ln_tmp) */
    if (l->model.mla.enabled)           /* MLA's own (model/mla.h model_mla_acts) */
        b += take(nl * arena_mla_floats(l, &s));
    else
        b += take(nl * N * s.QKV_tp) + take(nl * s.B * s.NH_tp * s.T) + take(nl * N * s.QD_tp);
    if (l->model.qk_layernorm) { /* qk_in, qk_stat (model/block.h model_qk_norm) */
        size_t NG_tp = (size_t)mtc_model_groups(&l->model) / s.p, KD_tp = (s.QKV_tp - s.QD_tp) / 2;
        b += take(nl * N * (s.QD_tp + KD_tp));
        b += take(nl * 2 * N * (s.NH_tp + NG_tp));
    }
    b += take(nl * Nl * C);                           /* res2 */
    b += 2 * take(nl * Nl);                           /* ln2 mean, rstd */
    b += take(nl * N * s.F1_tp);                      /* fch */
    b += take(nl * Nl * C);                           /* res3: layer outputs */
    b += take(Nl * C) + 2 * take(Nl);                 /* lnf, mean, rstd */
    b += take(N);                                     /* losses */
    b += take(mp.head || mp.depths ? (Nl * s.C) : 1); /* dlnf: the fused head's d(input) */
    /* a->mtp (model/mtp.c model_mtp_slot_floats): 6 C + 6 rows of Nl per MTP
     * depth on the chunk with them (their layers counted in nl); after a
     * standalone MTP stage each depth's d(h_k) */
    size_t D = (size_t)mp.depths;
    b += take(D ? D * Nl * (6 * C + 6) : mp.losses ? (size_t)mp.losses * Nl * C : 1);
    return b;
}

/* gpt_carve's shared rows and gpt_scratch_floats. */
static size_t arena_shared_bytes(const mtc_plan_layout *l, int has_head) {
    shapes s = shapes_of(l);
    mtp_part mp = mtp_part_of(l, has_head);
    const mtc_model_config *c = &l->model;
    size_t N = s.B * s.T, Nl = s.B * s.Tl, C = s.C;
    size_t QKV = (size_t)(c->num_heads + 2 * mtc_model_groups(c)) * mtc_model_head_size(c);
    size_t QD = (size_t)c->num_heads * mtc_model_head_size(c);
    size_t F = (size_t)c->ffn_hidden_size, F1 = (c->swiglu ? 2 : 1) * F;
    /* datty | dqkv | linear scratch, which the context-parallel attention
     * borrows between the two linears (the tiled attention needs none) */
    size_t lin = max_sz(col_scr(s.p, s.sp, s.B, s.T, C, QKV), row_scr(s.p, s.sp, s.B, s.T, QD, C));
    size_t att = N * s.QD_tp + N * s.QKV_tp + max_sz(lin, cp_scr(l, &s));
    if (c->qk_layernorm) att += 2 * N * s.QD_tp; /* the q/k norms' backward temporaries */
    if (c->mla.enabled) att = arena_mla_scratch(l, &s);
    /* one (N, F) buffer for GELU, [act | dfch (N, 2F)] for SwiGLU */
    size_t mlp = N * (c->swiglu ? s.F_tp + s.F1_tp : s.F_tp) +
                 max_sz(col_scr(s.p, s.sp, s.B, s.T, C, F1), row_scr(s.p, s.sp, s.B, s.T, F, C));
    size_t emb = s.p == 1 || !s.sp ? 0 : s.B * s.T * C + seq_scr(s.B, s.T, C, s.p);
    /* tp/head.c: [SP: dX (N, C)] then [permutation | the chunk's 3 x rows] */
    size_t head =
        (s.sp ? N * C : 0) + max_sz(s.sp ? seq_scr(s.B, s.T, C, s.p) : 0, 3 * head_rows(&s));
    size_t scratch =
        max_sz(max_sz(att, mlp), max_sz(emb, max_sz(col_scr(s.p, s.sp, s.B, s.T, C, 0), head)));
    scratch = max_sz(scratch, 3 * N);
    /* fwd_tmp, ln_tmp, dres, dtmp, dtmp2 */
    scratch = max_sz(scratch, arena_moe_scratch(l, &s)); /* and the MoE layers' scratch */
    size_t mtp = 0; /* model/mtp.c's shared buffers, on the chunk with the depths */
    if (mp.depths)  /* and gpt_scratch_floats's eh_proj terms */
        scratch = max_sz(scratch, max_sz(col_gather_scr(s.p, s.sp, s.B, s.T, 2 * C, C),
                                         seq_scr(s.B, s.T, C, s.p)));
    if (mp.depths || mp.losses) mtp = 3 * take(N); /* shifted tokens, labels, mask */
    if (mp.depths)
        mtp += take(N * C) + take(s.sp ? 2 * N * C : 1) + take(2 * Nl * C) + take(Nl * C);
    /* dres: d(output) or d(input) of 1 + D states next to a standalone MTP
     * stage; mtp_send: the MTP stage's [h_0 | h_1 .. h_D] */
    size_t st = (size_t)(mp.sin > mp.sout ? mp.sin : mp.sout);
    mtp += take(st * Nl * C) + take(mp.sa == 1 ? (size_t)mp.sout * Nl * C : 0);
    return 4 * take(Nl * C) + take(s.sp ? N * C : 1) + mtp + take(scratch);
}

/* ---- the MEGATRON table ---- */

double mtc_plan_korthikanti_layer_bytes(double s, double b, double h, double a, int t, int sp,
                                        mtc_plan_recompute rc) {
    if (t < 1) t = 1;
    double attn = rc == MTC_PLAN_RECOMPUTE_NONE ? 5.0 * a * s / h : 0.0;
    if (rc == MTC_PLAN_RECOMPUTE_FULL) return 2.0 * s * b * h / (sp ? t : 1);
    if (sp || t == 1) return s * b * h * (34.0 + attn * 1.0) / t;
    return s * b * h * (10.0 + 24.0 / t + attn / t);
}

/* Korthikanti's 34 assumes ffn = 4h; Megatron's report writes the layer as
 * sbh(18 + 4 ffn/h) (SP, selective): scale the MLP share to the real ffn
 * (and SwiGLU's two fc1 halves) the same way. */
static double megatron_layer(const mtc_plan_layout *l) {
    const mtc_model_config *c = &l->model;
    double s = (double)c->seq_length / (l->cp > 1 ? l->cp : 1), b = l->micro_batch;
    double h = c->hidden_size, a = c->num_heads;
    int t = l->tp > 0 ? l->tp : 1, sp = l->sequence_parallel && t > 1;
    /* with context parallelism a rank's s/cp queries score all s keys: the
     * 5as/h term keeps the whole sequence (a x cp heads of s/cp) */
    /* flash attention: the attention core's memory is selective
     * recomputation's (it recomputes the probabilities in backward), plus the
     * fp32 log-sum-exp of each (head, query) */
    int flash = l->flash_attention && l->recompute == MTC_PLAN_RECOMPUTE_NONE;
    double base =
        mtc_plan_korthikanti_layer_bytes(s, b, h, a * (l->cp > 1 ? l->cp : 1), t, sp,
                                         flash ? MTC_PLAN_RECOMPUTE_SELECTIVE : l->recompute);
    if (l->recompute == MTC_PLAN_RECOMPUTE_FULL) return base;
    if (l->flash_attention) base += 4.0 * a * s * b / t;
    double ffn_ratio = (double)c->ffn_hidden_size * (c->swiglu ? 1.5 : 1.0) / (4.0 * h);
    /* the ffn-sized rows of the 34: GELU input 8sbh/t and fc2 input 8sbh/t */
    double mlp = 16.0 * s * b * h / t;
    return base + mlp * (ffn_ratio - 1.0);
}

/* Megatron, one MoE layer beyond the dense layer it replaces: the dense
 * MLP's ffn-sized rows (16 sbh ffn_ratio / t) give way to the router's fp32
 * logits (4 E bytes per local token), the dispatched rows (2 bytes x (h +
 * F1/etp + F/etp) each: permuted input, fc1 output, activation output) and
 * the shared expert's ffn-sized rows. Rows per rank for balanced routing:
 * the local tokens s b / t (SP) x topk x etp (the ETP ranks all run every
 * row of the ETP x EP group's local experts) x the capacity factor when it
 * drops (below 1) or pads. */
static double megatron_moe_extra(const mtc_plan_layout *l) {
    const mtc_model_config *c = &l->model;
    const mtc_moe_config *m = &c->moe;
    if (m->num_experts <= 0) return 0;
    double s = (double)c->seq_length / (l->cp > 1 ? l->cp : 1), b = l->micro_batch;
    double h = c->hidden_size, t = l->tp > 0 ? l->tp : 1, etp = l->etp > 0 ? l->etp : 1;
    double act = c->swiglu ? 1.5 : 1.0;
    double dense = 16.0 * s * b * h / t * ((double)c->ffn_hidden_size * act / (4.0 * h));
    double shared = 16.0 * s * b * h / t * ((double)m->shared_ffn * act / (4.0 * h));
    double cf = m->capacity_factor > 0 ? m->capacity_factor : 1;
    double fill = m->pad_to_capacity ? cf : cf < 1 ? cf : 1;
    double rows = s * b / t * mtc_moe_topk(m) * etp * fill;
    double F = mtc_model_moe_ffn(c) / etp, F1 = (c->swiglu ? 2 : 1) * F;
    return 4.0 * s * b / t * m->num_experts + rows * 2.0 * (h + F1 + F) + shared - dense;
}

static size_t dense_slot_bytes(const mtc_plan_layout *l, int nl, int has_embedding, int has_head);

/* The MoE layers' bytes of a chunk's slot: MTC, the arena's MoE rows;
 * MEGATRON, beyond the dense layers the table counts (may be negative),
 * the chunk's share of the MoE layers (a chunk's own pattern is not known
 * here). */
static double moe_slot_bytes(const mtc_plan_layout *l, int nl, int has_head) {
    const mtc_model_config *c = &l->model;
    /* MTC: gpt_carve gives every layer of the chunk MoE rows, the MTP
     * depths' layers on the loss chunk included */
    size_t nx = (size_t)nl + (size_t)mtp_part_of(l, has_head).depths;
    if (c->moe.num_experts <= 0 || nx == 0) return 0;
    if (l->act_model == MTC_PLAN_ACT_MTC) return (double)arena_moe_bytes(l, nx);
    if (nl <= 0) return 0;
    if (l->recompute == MTC_PLAN_RECOMPUTE_FULL) return 0; /* the layer input only */
    double nm = (double)nl * mtc_moe_num_layers(&c->moe, c->num_layers) / c->num_layers;
    return nm * megatron_moe_extra(l);
}

size_t mtc_plan_act_moe_slot_bytes(const mtc_plan_layout *l, int nl, int has_head) {
    double x = moe_slot_bytes(l, nl, has_head);
    return x > 0 ? (size_t)llround(x) : 0;
}

size_t mtc_plan_act_slot_bytes(const mtc_plan_layout *l, int nl, int has_embedding, int has_head) {
    double x =
        (double)dense_slot_bytes(l, nl, has_embedding, has_head) + moe_slot_bytes(l, nl, has_head);
    return x > 0 ? (size_t)llround(x) : 0;
}

/* The dense table (MoE layers counted as dense ones: moe_slot_bytes adds
 * their difference). */
static size_t dense_slot_bytes(const mtc_plan_layout *l, int nl, int has_embedding, int has_head) {
    if (l->act_model == MTC_PLAN_ACT_MTC) /* the MTP depths' layers on the loss chunk */
        return arena_slot_bytes(l, (size_t)nl + (size_t)mtp_part_of(l, has_head).depths, has_head);
    const mtc_model_config *c = &l->model;
    double s = (double)c->seq_length / (l->cp > 1 ? l->cp : 1), b = l->micro_batch;
    double h = c->hidden_size, t = l->tp > 0 ? l->tp : 1;
    double bytes = nl * megatron_layer(l);
    if (has_embedding) bytes += (8.0 * s * b + s * b * h) / t; /* token ids, embedding dropout */
    if (has_head & 1)                                          /* fp32 logits */
        bytes += 4.0 * s * b * h * (1.0 + c->padded_vocab_size / h) / t;
    return (size_t)llround(bytes);
}

size_t mtc_plan_act_shared_bytes(const mtc_plan_layout *l, int nl, int has_head) {
    if (l->act_model == MTC_PLAN_ACT_MTC) { /* + the fused head's one chunk of logits */
        shapes s = shapes_of(l);
        return arena_shared_bytes(l, has_head) + take(has_head & 1 ? head_rows(&s) * s.V_tp : 1);
    }
    if (l->recompute != MTC_PLAN_RECOMPUTE_FULL || nl == 0) return 0;
    /* full recompute: one layer's activations exist again during its backward */
    mtc_plan_layout one = *l;
    one.recompute = MTC_PLAN_RECOMPUTE_SELECTIVE;
    return (size_t)llround(megatron_layer(&one));
}
