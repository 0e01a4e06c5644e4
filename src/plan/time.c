/* plan/time.c - the step time of a layout on a machine.
 *
 *   per microbatch and model chunk (the slowest pipeline stage's):
 *     t_fwd = GEMM FLOPs / rate + element-wise bytes / bw + TP collectives + p2p
 *     t_bwd = 2 x GEMM FLOPs (+ the recomputed forward) / rate + ... + TP + p2p
 *   step = the schedule's makespan for (t_fwd, t_bwd)     (pp = 1: M (t_fwd + t_bwd))
 *        + optimizer pass + exposed gradient reduction (+ param all-gather)
 *
 * The schedule is simulated: on a CPU host with mtc's executor plans
 * (pp_plan_simulate: blocking transfers as the shm backend's), on a GPU
 * cluster with pp_schedule_simulate (Megatron's asynchronous p2p). The
 * rate is the machine's GEMM peak x its achieved fraction; on a CPU host a
 * rank gets min(threads, cores / ranks) cores, each at the rate bench-peak
 * measured at mtc's shapes, times the share of a core the load left. Collectives follow the
 * alpha-beta forms of mtc_plan_coll_time on the link mtc_plan_group_link
 * picks from where the group's ranks sit in tp-cp-ep-dp-pp order.
 * Overlap: with --overlap-grad-reduce the data-parallel reduction hides
 * under the last microbatch's backward (every chunk's), with
 * --overlap-param-gather the distributed optimizer's all-gather under the
 * first microbatch's forward; on GPU machines --tp-comm-overlap hides a
 * sequence-parallel layer's TP collectives under its GEMMs (Megatron's;
 * mtc's TP collectives and pipeline transfers block).
 * On a CPU host with measured kernels (bench-peak's kernels_ns) the GEMM
 * and element-wise terms are instead every pass mtc runs at its timed cost
 * (cpu_kernel_costs), ranks on shared cores run at a whole core and the
 * step is at least the world's work over the cores, and each collective
 * pays its wait for the peer (the link's sync).
 * Limitations: on GPU machines one rate for every GEMM shape; on a CPU
 * host one shape per kernel; TP ranks' larger share under load not
 * modelled, no congestion between groups sharing a link, no kernel-launch
 * costs on GPUs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/peak.h"
#include "cp/cp.h"
#include "dp/fsdp.h"
#include "plan/plan.h"
#include "pp/executor.h"
#include "pp/schedule.h"

double mtc_plan_coll_time(mtc_plan_coll op, double bytes, int n, const mtc_plan_link *k) {
    if (n <= 1 && op != MTC_PLAN_P2P) return 0;
    double bw = k->bw > 0 ? k->bw : 1e30;
    switch (op) {
    case MTC_PLAN_AR: return 2.0 * (n - 1) / n * bytes / bw + 2.0 * (n - 1) * k->lat + k->sync;
    case MTC_PLAN_RS:
    case MTC_PLAN_AG:
    case MTC_PLAN_A2A: return (double)(n - 1) / n * bytes / bw + (n - 1) * k->lat + k->sync;
    case MTC_PLAN_P2P: return bytes / bw + k->lat + k->sync;
    }
    return 0;
}

const mtc_plan_link *mtc_plan_group_link(const mtc_plan_machine *m, int stride, int size) {
    if (m->is_cpu || (long)stride * size <= m->devices_per_node) return &m->intra;
    return &m->inter;
}

/* Per token of one layer: multiply-adds of the QKV, scores and values,
 * projection and MLP GEMMs (mtc_model_flops's per_token_layer). */
static double layer_macs(const mtc_model_config *c) {
    double s = c->seq_length, h = c->hidden_size;
    double qd = (double)c->num_heads * mtc_model_head_size(c);
    double kd = (double)mtc_model_groups(c) * mtc_model_head_size(c);
    double ffn = (double)c->ffn_hidden_size * (c->swiglu ? 3.0 : 2.0);
    if (c->mla.enabled)
        return model_mla_token_macs(&c->mla, c->hidden_size, c->num_heads, (int)s) + h * ffn;
    return h * (qd + 2 * kd) + qd * s + qd * h + h * ffn;
}

/* The dense MLP's share of layer_macs, which an MoE layer replaces. */
static double mlp_macs(const mtc_model_config *c) {
    return (double)c->hidden_size * c->ffn_hidden_size * (c->swiglu ? 3.0 : 2.0);
}

/* Per token of one MoE layer's MLP, Megatron's count (core_v0.18.0
 * training.py): topk routed experts and the shared expert, each h x F x (3
 * SwiGLU, else 2); no router term (the step time prices the router's GEMM
 * apart). */
static double moe_macs(const mtc_model_config *c) {
    const mtc_moe_config *m = &c->moe;
    double act = c->swiglu ? 3.0 : 2.0, h = c->hidden_size;
    return h * act * ((double)mtc_moe_topk(m) * mtc_model_moe_ffn(c) + (double)m->shared_ffn);
}

/* Multiply-adds per token of layers [first, last): dense layers' and MoE
 * layers' (their MLP replaced by moe_macs). */
static double layers_macs(const mtc_model_config *c, int first, int last) {
    double n = last - first, nm = 0;
    for (int i = first; c->moe.num_experts > 0 && i < last; i++)
        nm += mtc_moe_is_layer(&c->moe, i);
    return n * layer_macs(c) + nm * (nm > 0 ? moe_macs(c) - mlp_macs(c) : 0);
}

/* The attention scores and values share of layer_macs (selective recompute). */
static double attn_core_macs(const mtc_model_config *c) {
    return (double)c->num_heads * mtc_model_head_size(c) * c->seq_length;
}

double mtc_plan_flops(const mtc_model_config *c, int64_t global_batch, mtc_plan_recompute rc) {
    double tokens = (double)global_batch * c->seq_length, L = c->num_layers;
    double layers = layers_macs(c, 0, c->num_layers),
           head = (double)c->hidden_size * c->padded_vocab_size;
    double f = 6.0 * tokens * (layers + head);
    if (rc == MTC_PLAN_RECOMPUTE_FULL) f += 2.0 * tokens * layers;
    if (rc == MTC_PLAN_RECOMPUTE_SELECTIVE) f += 2.0 * tokens * L * attn_core_macs(c);
    return f;
}

/* A link with the oversubscription penalty of a CPU host running more
 * rank-threads than cores (the wait for a peer between compute phases is
 * the link's sync, in mtc_plan_coll_time): per message step the measured
 * latency, per call `ovs` more (what bench-peak's oversubscribed probe
 * measured a call to add to the wall time, as a rank's share of it). */
static mtc_plan_link link_of(const mtc_plan_machine *m, int stride, int size, int oversub,
                             double ovs) {
    mtc_plan_link k = *mtc_plan_group_link(m, stride, size);
    if (oversub) k.lat += m->oversub_lat, k.sync += ovs;
    return k;
}

typedef struct {
    double gemm_f, gemm_b, elem_f, elem_b, tp_f, tp_b, cp_f, cp_b, p2p;
    double attn; /* CPU kernels: the tiled attention's share of elem_f + elem_b */
    /* MoE layers (parts of the above but moe_f / moe_b, the dispatcher's
     * collectives, which are apart): forward + backward */
    double moe_gemm, moe_elem, moe_f, moe_b, moe_rows, moe_flops;
} chunk_cost;

/* One MoE layer on one rank, per microbatch (docs/plan.md, "Mixture of
 * experts"): Nl local tokens (B T / cp, / tp under SP); the experts' rows
 * for balanced routing, rows = Nl x topk x etp (every ETP rank runs all
 * rows its ETP x EP group routes to its experts) x the capacity factor
 * when it drops (< 1) or pads; F_e = moe-ffn / etp. */
typedef struct {
    double Nl, rows, El, C, E, F1e, Fe, k;
} moe_shape;

static moe_shape moe_shape_of(const mtc_plan_layout *l) {
    const mtc_model_config *c = &l->model;
    const mtc_moe_config *m = &c->moe;
    moe_shape s;
    double t = l->tp, etp = l->etp > 0 ? l->etp : 1, ep = l->ep > 1 ? l->ep : 1;
    s.Nl = (double)l->micro_batch * c->seq_length / l->cp / (l->sequence_parallel ? t : 1);
    double cf = m->capacity_factor > 0 ? m->capacity_factor : 1;
    double fill = m->pad_to_capacity ? cf : cf < 1 ? cf : 1;
    s.k = mtc_moe_topk(m);
    s.rows = s.Nl * s.k * etp * fill;
    s.El = m->num_experts / ep, s.C = c->hidden_size, s.E = m->num_experts;
    s.Fe = mtc_model_moe_ffn(c) / etp, s.F1e = (c->swiglu ? 2 : 1) * s.Fe;
    return s;
}

/* The experts' GEMMs on a CPU host (moe/experts.c): per local expert its
 * rows in blocks of 256, the last padded to a multiple of 64, one call per
 * block and projection; forward fc1 + fc2 (backward: dX and dW of each).
 * An expert's rows vary with the routing (only padded-to-capacity inputs
 * are exact): the padding adds half a 64-row block on average, at least
 * the balanced count's own. */
static double moe_expert_gemm_s(const mtc_plan_kernels *k, const moe_shape *s, int exact) {
    double re = s->rows / (s->El > 0 ? s->El : 1), pad = ceil(re / 64.0) * 64.0;
    if (!exact && re > 0 && re + 32 > pad) pad = re + 32;
    double calls = ceil(pad / 256.0);
    return s->El * (2.0 * pad * s->C * (s->F1e + s->Fe) / k->gemm_rate + 2 * calls * k->gemm_call);
}

/* The dispatcher's collectives of one MoE layer, forward and backward
 * (moe/layer.c, moe/dispatch_a2a.c), fp32:
 *   allgather over ETP x EP (P ranks): forward all-gather of the tokens and
 *     of the routing (selection, kept, probabilities), reduce-scatter of the
 *     outputs; backward all-gather of d(out), reduce-scatter of d(tokens)
 *     and d(probs);
 *   alltoall: all-to-all(EP) of the rows (with their probability) to the
 *     experts' ranks, all-gather-v(ETP) of the received rows, reduce-scatter-
 *     v(ETP) of fc2's partial sums, all-to-all(EP) back; backward the same
 *     in reverse; the rows-per-expert counts all-gathered over EP and ETP. */
static void moe_dispatch_s(const mtc_plan_layout *l, const moe_shape *s, const mtc_plan_link *tpep,
                           const mtc_plan_link *epl, const mtc_plan_link *etpl, double *f,
                           double *b) {
    int ep = l->ep > 1 ? l->ep : 1, etp = l->etp > 0 ? l->etp : 1, P = ep * etp;
    *f = *b = 0;
    if (P <= 1) return;
    if (l->model.moe.dispatcher == MOE_DISPATCH_ALLGATHER) {
        double x = P * s->Nl * s->C * 4, r = P * s->Nl * s->k * 4;
        *f = mtc_plan_coll_time(MTC_PLAN_AG, x, P, tpep) +
             3 * mtc_plan_coll_time(MTC_PLAN_AG, r, P, tpep) +
             mtc_plan_coll_time(MTC_PLAN_RS, x, P, tpep);
        *b = mtc_plan_coll_time(MTC_PLAN_AG, x, P, tpep) +
             mtc_plan_coll_time(MTC_PLAN_RS, x, P, tpep) +
             mtc_plan_coll_time(MTC_PLAN_RS, r, P, tpep);
        return;
    }
    double sent = s->rows / etp; /* rows this rank routes (each to one expert's rank) */
    double counts = mtc_plan_coll_time(MTC_PLAN_AG, ep * s->E * 4, ep, epl) +
                    mtc_plan_coll_time(MTC_PLAN_AG, P * s->E * 4, etp, etpl);
    double a2a = mtc_plan_coll_time(MTC_PLAN_A2A, sent * (s->C + 1) * 4, ep, epl) +
                 mtc_plan_coll_time(MTC_PLAN_A2A, sent * s->C * 4, ep, epl);
    double etpx = mtc_plan_coll_time(MTC_PLAN_AG, s->rows * (s->C + 1) * 4, etp, etpl) +
                  mtc_plan_coll_time(MTC_PLAN_RS, s->rows * s->C * 4, etp, etpl);
    *f = counts + a2a + etpx;
    *b = a2a + etpx;
}

/* One linear layer's GEMMs on a CPU host: `calls` calls of the FLOPs of
 * (rows, in) x (in, out) each, at the fitted rate plus the per-call cost
 * (plan/kernels.c). */
static double lin_s(const mtc_plan_kernels *k, double rows, double in, double out, int calls) {
    return calls * (2.0 * rows * in * out / k->gemm_rate + k->gemm_call);
}

/* Causal 64 x 64 tiles the tiled attention computes for T queries against
 * T keys (nn/flash_attention.c: FA_BR = FA_BC = 64; a tile with a visible
 * key is computed whole). */
static double causal_tiles(double T) {
    double nb = ceil(T / 64.0);
    return nb * (nb + 1) / 2;
}

/* CPU seconds of one microbatch on a chunk of nl layers, from the kernels
 * mtc runs (model/model_pass.c, model/block.c) at the costs bench-peak
 * measured: GEMMs (linear layers; forward one call each, backward dX and
 * dW), the tiled attention (tiles computed, and attention dropout's masks
 * per visible score), and per layer: two norms (forward; backward rebuilds
 * each output and runs its backward), three hidden-dropout sites on the
 * embedding, attention and MLP outputs (masks drawn in forward, again in
 * backward), two residual adds each way, GELU forward, and backward
 * (recomputed: forward again, then the derivative); the embedding's
 * gather and scatter-add (priced as the residual's per-element pass), the
 * head's final norm, logits GEMM and fused cross-entropy. Under SP the
 * norms, dropout and residuals see T / tp positions, the GEMMs all T with
 * the rank's columns; with CP a rank holds T / cp queries of every key. */
static void cpu_kernel_costs(const mtc_plan_layout *l, const mtc_plan_kernels *k, int nl,
                             int has_emb, int has_head, double *gf, double *gb, double *ef,
                             double *eb, double *attn) {
    const mtc_model_config *c = &l->model;
    double t = l->tp, cp = l->cp > 1 ? l->cp : 1, B = l->micro_batch;
    double T = c->seq_length / cp, N = B * T, Nl = l->sequence_parallel ? N / t : N;
    double C = c->hidden_size, HS = mtc_model_head_size(c), NH_t = c->num_heads / t;
    double QD = NH_t * HS, QKV = QD + 2.0 * mtc_model_groups(c) / t * HS;
    double F = c->ffn_hidden_size / t, F1 = (c->swiglu ? 2 : 1) * F, Vp = c->padded_vocab_size / t;
    double hd = c->hidden_dropout > 0 ? k->dropout : 0;
    /* GEMMs of a layer: qkv, proj, fc1, fc2 */
    double g1 = lin_s(k, N, C, QKV, 1) + lin_s(k, N, QD, C, 1) + lin_s(k, N, C, F1, 1) +
                lin_s(k, N, F, C, 1);
    double head1 = has_head ? lin_s(k, N, C, Vp, 1) : 0;
    *gf = nl * g1 + head1, *gb = 2 * (nl * g1 + head1);
    /* attention: B x NH/tp (b, head) items of causal tiles over the whole
     * sequence, a CP rank's share 1 / cp of them */
    double tiles = B * NH_t * causal_tiles(c->seq_length) / cp;
    double scores = B * NH_t * (double)c->seq_length * (c->seq_length + 1) / 2 / cp;
    double af = tiles * (k->attn_fwd_tile + k->attn_fwd_hs * HS);
    double ab = tiles * (k->attn_bwd_tile + k->attn_bwd_hs * HS);
    double ad = c->attention_dropout > 0 ? scores * k->attn_drop : 0; /* forward + backward */
    double xc = Nl * C;
    double lf =
        2 * xc * k->norm_fwd + 2 * xc * hd + 2 * xc * k->resid + N * F * k->gelu_fwd + af + ad / 2;
    double lb = 2 * xc * (k->norm_fwd + k->norm_bwd) + 2 * xc * hd + 2 * xc * k->resid +
                N * F * (k->gelu_fwd + k->gelu_bwd) + ab + ad / 2;
    *ef = nl * lf, *eb = nl * lb, *attn = nl * (af + ab + ad);
    if (has_emb) *ef += xc * (k->resid + hd), *eb += xc * (k->resid + hd);
    if (has_head) *ef += xc * k->norm_fwd + N * Vp * k->xent, *eb += xc * k->norm_bwd;
}

/* What nm MoE layers change in cpu_kernel_costs' figures (differences
 * against their dense MLPs into gf, gb, ef, eb) and their own MoE GEMM and
 * kernel seconds (moe_g, moe_e), CPU seconds of one microbatch: an MoE
 * layer's MLP instead of fc1, GELU, fc2. */
static void cpu_moe_costs(const mtc_plan_layout *l, const mtc_plan_kernels *k, int nm, double *gf,
                          double *gb, double *ef, double *eb, double *moe_g, double *moe_e) {
    const mtc_model_config *c = &l->model;
    double t = l->tp, cp = l->cp > 1 ? l->cp : 1, B = l->micro_batch;
    double N = B * (c->seq_length / cp), C = c->hidden_size;
    double F = c->ffn_hidden_size / t, F1 = (c->swiglu ? 2 : 1) * F;
    moe_shape ms = moe_shape_of(l);
    const mtc_moe_config *m = &c->moe;
    double SF = m->shared_ffn / t, SF1 = (c->swiglu ? 2 : 1) * SF;
    double mg = lin_s(k, ms.Nl, C, ms.E, 1) + moe_expert_gemm_s(k, &ms, m->pad_to_capacity) +
                (SF > 0 ? lin_s(k, N, C, SF1, 1) + lin_s(k, N, SF, C, 1) : 0);
    double dense = lin_s(k, N, C, F1, 1) + lin_s(k, N, F, C, 1);
    /* the rest of the layer, timed by bench-peak on a serial MoE layer
     * (plan/kernels.c: what its forward and backward take beyond their
     * GEMMs): the routing, the permutation, the rows' gather, staging and
     * weighted sum, the experts' activation and probability loops, per
     * routed row and element of (C + F1 + F) (the F1 + F per expert rank
     * of an ETP group); alltoall adds the packing of the rows it sends
     * and receives (rows x C each way, a residual's pass per element);
     * the shared expert's GELU */
    double rows = ms.rows, rel = rows * (C + ms.F1e + ms.Fe);
    double pack = m->dispatcher == MOE_DISPATCH_ALLTOALL && (l->ep > 1 || l->etp > 1)
                      ? 2 * rows * C * k->resid
                      : 0;
    double me_f = rel * k->moe_row_fwd + pack + N * SF * k->gelu_fwd;
    double me_b = rel * k->moe_row_bwd + pack + N * SF * (k->gelu_fwd + k->gelu_bwd);
    *gf = nm * (mg - dense), *gb = 2 * nm * (mg - dense);
    *ef = nm * (me_f - N * F * k->gelu_fwd);
    *eb = nm * (me_b - N * F * (k->gelu_fwd + k->gelu_bwd));
    *moe_g = 3 * nm * mg, *moe_e = nm * (me_f + me_b);
}

/* Costs of one microbatch on one chunk of nl layers. */
static chunk_cost chunk_costs(const mtc_plan_layout *l, const mtc_plan_machine *m, double rate,
                              double cpu_slow, int first, int last, int has_emb, int has_head,
                              const mtc_plan_link *tpl, const mtc_plan_link *cpl,
                              const mtc_plan_link *ppl, const mtc_plan_link *moel) {
    int nl = last - first, nm = 0;
    for (int i = first; l->model.moe.num_experts > 0 && i < last; i++)
        nm += mtc_moe_is_layer(&l->model.moe, i);
    const mtc_model_config *c = &l->model;
    chunk_cost k;
    memset(&k, 0, sizeof k);
    int t = l->tp, sp = l->sequence_parallel;
    /* a rank's tokens: seq-length / cp of each sample; each still scores all
     * seq-length keys, so layer_macs per token is the serial one */
    double tok = (double)l->micro_batch * c->seq_length / l->cp, h = c->hidden_size;
    double fl = 2.0 * tok * nl * layer_macs(c) / t;
    double fh = has_head ? 2.0 * tok * h * c->padded_vocab_size / t : 0;
    double rec = l->recompute == MTC_PLAN_RECOMPUTE_FULL ? fl
                 : l->recompute == MTC_PLAN_RECOMPUTE_SELECTIVE
                     ? 2.0 * tok * nl * attn_core_macs(c) / t
                     : 0;
    if (nm > 0) { /* MoE layers: the rank's router, expert rows and shared expert */
        moe_shape ms = moe_shape_of(l);
        double mf = 2.0 * (ms.Nl * h * ms.E + ms.rows * h * (ms.F1e + ms.Fe) +
                           tok * h * c->moe.shared_ffn * (c->swiglu ? 3.0 : 2.0) / t);
        double dfl = nm * (mf - 2.0 * tok * mlp_macs(c) / t);
        fl += dfl;
        if (l->recompute == MTC_PLAN_RECOMPUTE_FULL) rec += dfl;
        k.moe_flops = 3 * nm * mf, k.moe_rows = ms.rows;
        k.moe_gemm = k.moe_flops / rate;
        moe_dispatch_s(l, &ms, &moel[0], &moel[1], &moel[2], &k.moe_f, &k.moe_b);
        k.moe_f *= nm, k.moe_b *= nm;
    }
    k.gemm_f = (fl + fh) / rate;
    k.gemm_b = (2.0 * (fl + fh) + rec) / rate;
    if (cpu_slow > 0) { /* a CPU host with measured kernels: mtc's own passes */
        double gf, gb, ef, eb, at;
        cpu_kernel_costs(l, &m->kern, nl, has_emb, has_head, &gf, &gb, &ef, &eb, &at);
        k.attn = at * cpu_slow * (rec > 0 ? 1.5 : 1); /* recompute: the forward's third again */
        k.gemm_f = gf * cpu_slow, k.gemm_b = (gb + (rec > 0 ? gf : 0)) * cpu_slow;
        k.elem_f = ef * cpu_slow, k.elem_b = (eb + (rec > 0 ? ef : 0)) * cpu_slow;
    }

    if (cpu_slow > 0 && nm > 0) { /* the MoE layers' passes (cpu_moe_costs) */
        double gf, gb, ef, eb, mg, me;
        cpu_moe_costs(l, &m->kern, nm, &gf, &gb, &ef, &eb, &mg, &me);
        k.moe_gemm = mg * cpu_slow, k.moe_elem = me * cpu_slow;
        k.gemm_f += gf * cpu_slow, k.gemm_b += (gb + (rec > 0 ? gf : 0)) * cpu_slow;
        k.elem_f += ef * cpu_slow, k.elem_b += (eb + (rec > 0 ? ef : 0)) * cpu_slow;
    }
    /* element-wise: the activations a forward touches (the table without
     * recomputation: what is kept is what was written) once in forward,
     * twice in backward (read, and the gradient written), once more for a
     * recomputed forward (the attention share of it under selective) */
    mtc_plan_layout nr = *l;
    nr.recompute = MTC_PLAN_RECOMPUTE_NONE;
    double touched = (double)mtc_plan_act_slot_bytes(&nr, nl, has_emb, has_head);
    double again = l->recompute == MTC_PLAN_RECOMPUTE_FULL ? 1.0 : 0.0;
    if (l->recompute == MTC_PLAN_RECOMPUTE_SELECTIVE) {
        double as_h = 5.0 * c->num_heads * c->seq_length / h;
        again = as_h / (34.0 + as_h);
    }
    if (m->mem_bw > 0 && !(cpu_slow > 0))
        k.elem_f = touched / m->mem_bw, k.elem_b = (2.0 + again) * touched / m->mem_bw;
    /* TP: per layer two all-reduces forward and two backward of (b, s, h);
     * under SP all-gather + reduce-scatter of the same volume, and the
     * backward re-gathers the two GEMM inputs */
    double ab = l->precision == MTC_PLAN_BF16 ? 2 : 4, x = tok * h * ab;
    if (t > 1) {
        double ar = sp ? mtc_plan_coll_time(MTC_PLAN_AG, x, t, tpl) +
                             mtc_plan_coll_time(MTC_PLAN_RS, x, t, tpl)
                       : mtc_plan_coll_time(MTC_PLAN_AR, x, t, tpl);
        double regather = sp ? 2 * mtc_plan_coll_time(MTC_PLAN_AG, x, t, tpl) : 0;
        double ends = (has_emb ? 1 : 0) + (has_head ? 1 : 0);
        double xent = has_head ? 3 * mtc_plan_coll_time(MTC_PLAN_AR, tok * 4, t, tpl) : 0;
        k.tp_f = (2.0 * nl + ends) * ar + xent;
        k.tp_b = (2.0 * nl + ends) * ar + nl * regather +
                 (l->recompute == MTC_PLAN_RECOMPUTE_FULL ? 2.0 * nl * ar : 0);
    }

    if (t > 1 && nm > 0 && c->moe.shared_ffn == 0) {
        /* an MoE layer's MLP has no TP pair of collectives: its dispatcher's
         * (moe_f, moe_b) move the tokens; a shared expert keeps the pair */
        double ar = sp ? mtc_plan_coll_time(MTC_PLAN_AG, x, t, tpl) +
                             mtc_plan_coll_time(MTC_PLAN_RS, x, t, tpl)
                       : mtc_plan_coll_time(MTC_PLAN_AR, x, t, tpl);
        double regather = sp ? 2 * mtc_plan_coll_time(MTC_PLAN_AG, x, t, tpl) : 0;
        k.tp_f -= nm * ar;
        k.tp_b -=
            nm * ar + nm / 2.0 * regather + (l->recompute == MTC_PLAN_RECOMPUTE_FULL ? nm * ar : 0);
    }
    /* CP, per layer: p2p passes KV blocks round the ring (cp - 1 steps
     * forward, twice the bytes backward with dK, dV), all_gather gathers KV
     * (forward and again backward) and reduce-scatters dKV, a2a moves q|k|v
     * and the output between sequence and head splits (twice as much
     * backward); blocking in mtc (Megatron overlaps the ring with compute,
     * not modelled) */
    if (l->cp > 1) {
        int P = l->cp;
        double kv = 2.0 * tok * mtc_model_groups(c) / t * mtc_model_head_size(c) * ab;
        double qkvo = tok * ((c->num_heads * 2.0 + 2.0 * mtc_model_groups(c)) / t) *
                      mtc_model_head_size(c) * ab;
        double f = 0, b2 = 0;
        if (l->cp_comm_type == CP_COMM_P2P)
            f = (P - 1) * mtc_plan_coll_time(MTC_PLAN_P2P, kv, 2, cpl),
            b2 = (P - 1) * mtc_plan_coll_time(MTC_PLAN_P2P, 2 * kv, 2, cpl);
        else if (l->cp_comm_type == CP_COMM_ALL_GATHER)
            f = mtc_plan_coll_time(MTC_PLAN_AG, kv * P, P, cpl),
            b2 = f + mtc_plan_coll_time(MTC_PLAN_RS, kv * P, P, cpl);
        else
            f = mtc_plan_coll_time(MTC_PLAN_AG, qkvo, P, cpl), b2 = 2 * f; /* all-to-all ~ */
        k.cp_f = nl * f, k.cp_b = nl * b2;
    }
    /* p2p: mtc sends (b, s/t, h) under SP, else the whole (b, s, h); Megatron
     * on GPUs sends 1/t from each TP rank and all-gathers it over NVLink
     * (the scatter-gather of Narayanan et al. 2021, section 4.1) */
    if (l->pp > 1 && (sp || m->is_cpu))
        k.p2p = mtc_plan_coll_time(MTC_PLAN_P2P, x / (sp ? t : 1), 2, ppl);
    else if (l->pp > 1)
        k.p2p = mtc_plan_coll_time(MTC_PLAN_P2P, x / t, 2, ppl) +
                mtc_plan_coll_time(MTC_PLAN_AG, x, t, tpl);
    /* --tp-comm-overlap (Megatron on GPUs, sequence parallelism): each
     * all-gather / reduce-scatter is split and pipelined with the GEMM that
     * consumes or produces it, so only what the GEMMs cannot cover shows */
    if (l->tp_comm_overlap && sp && t > 1 && !m->is_cpu) {
        k.tp_f = k.tp_f > k.gemm_f ? k.tp_f - k.gemm_f : 0;
        k.tp_b = k.tp_b > k.gemm_b ? k.tp_b - k.gemm_b : 0;
    }
    return k;
}

/* calls collectives `op` of `bytes` in all (alpha-beta per call) */
static double colls(mtc_plan_coll op, double bytes, double calls, int n, const mtc_plan_link *k) {
    if (!(calls > 0) || n <= 1) return 0;
    return mtc_plan_coll_time(op, bytes, n, k) + (calls - 1) * mtc_plan_coll_time(op, 0, n, k);
}

/* Megatron-FSDP's step collectives (mtc_plan_fsdp_comm) over P shard
 * ranks on `intra` (HSDP: nd instances on `inter`), and the page pool:
 * every gathered unit's pages outside the shard move in from the pool and
 * back out when released, every reduced unit's gradient pages the same,
 * and a backward clears the gradient pages it takes (at mem_bw);
 * page_s: seconds per 4 KiB page moved (0: not priced). */
static void fsdp_price(const mtc_plan_fsdp_comm *c, int P, int nd, const mtc_plan_link *intra,
                       const mtc_plan_link *inter, double page_s, double mem_bw,
                       mtc_plan_time *out) {
    out->fsdp_ag_fwd_s = colls(MTC_PLAN_AG, c->ag_fwd_bytes, c->ag_fwd_calls, P, intra);
    out->fsdp_ag_bwd_s = colls(MTC_PLAN_AG, c->ag_bwd_bytes, c->ag_bwd_calls, P, intra);
    out->fsdp_ag_step_s = colls(MTC_PLAN_AG, c->ag_step_bytes, c->ag_step_calls, P, intra);
    out->fsdp_rs_s = colls(MTC_PLAN_RS, c->rs_bytes, c->rs_calls, P, intra) +
                     colls(MTC_PLAN_AR, c->ar_bytes, c->ar_calls, nd, inter);
    out->fsdp_outer_s = colls(MTC_PLAN_RS, c->outer_rs_bytes, c->outer_rs_calls, nd, inter) +
                        colls(MTC_PLAN_AG, c->outer_ag_bytes, c->outer_ag_calls, nd, inter);
    double out_frac = (P - 1.0) / P; /* the part of a unit outside the shard */
    /* the pages moved are of fp32-sized units whatever the gathers carry */
    double wide = c->ag_width > 0 ? 4 / c->ag_width : 1;
    double params = (c->ag_fwd_bytes + c->ag_bwd_bytes) * wide * out_frac,
           grads = c->rs_bytes * out_frac;
    out->fsdp_page_s = 2 * (params + grads) / 4096 * page_s + (mem_bw > 0 ? grads / mem_bw : 0);
    if (!(page_s > 0)) out->fsdp_page_s = 0;
}

/* What stays exposed of fsdp_price's collectives: with the prefetch each
 * pass's gathers under its compute (cf, cb: every microbatch's forward and
 * backward) but the first of each of the mv microbatch passes, with the
 * gradient overlap the reduce-scatters under the backward but the last. */
static void fsdp_hide(mtc_plan_time *out, int gather, int reduce, double mv, double cf, double cb,
                      const mtc_plan_fsdp_comm *c) {
    double af = out->fsdp_ag_fwd_s, ab = out->fsdp_ag_bwd_s, rs = out->fsdp_rs_s;
    double uf = c->ag_fwd_calls > 0 ? af / c->ag_fwd_calls : 0;
    double ub = c->ag_bwd_calls > 0 ? ab / c->ag_bwd_calls : 0;
    double ur = c->rs_calls > 0 ? rs / c->rs_calls : 0;
    double fwd = gather ? fmax(fmin(mv * uf, af), af - cf) : af;
    double lhs = (gather ? ab : 0) + (reduce ? rs : 0), floor = 0;
    if (gather) floor += fmin(mv * ub, ab);
    if (reduce) floor += fmin(mv * ur, rs);
    double bwd = (gather ? 0 : ab) + (reduce ? 0 : rs) + fmax(floor, lhs - cb);
    out->fsdp_exposed_s = fwd + bwd;
}

mtc_result_t mtc_plan_time_step(const mtc_plan_layout *lin, const mtc_plan_machine *m,
                                int threads_per_rank, mtc_plan_time *out) {
    mtc_plan_layout lv = *lin;
    mtc_plan_layout *l = &lv;
    MTC_CHECK(mtc_plan_layout_check(l));
    memset(out, 0, sizeof *out);
    out->cpu_share = 1;
    int M = l->global_batch / (l->micro_batch * l->dp), v = l->vpp, S = l->pp * v;
    int L = l->model.num_layers;
    double peak = l->precision == MTC_PLAN_BF16 ? m->peak_flops : m->peak_flops_fp32;
    double ach = m->achieved > 0 ? m->achieved : 1.0;
    double devices = 1; /* compute units one rank uses */
    int oversub = 0;
    if (m->is_cpu) {
        double cores = m->devices_per_node > 0 ? m->devices_per_node : 1;
        double thr = threads_per_rank > 0 ? threads_per_rank : floor(cores / l->world);
        if (thr < 1) thr = 1;
        devices = fmin(thr, cores / l->world);
        oversub = l->world * thr > cores;
    }
    /* a CPU host's GEMMs run at the rate bench-peak measured at mtc-sized
     * shapes with every core busy (per second of CPU time), not at the
     * 512^3 burst, times the share of a core a compute-bound thread got
     * while bench-peak ran (other jobs' load; 1 on an idle host); the
     * element-wise passes get the same share */
    double gemm = peak, share = 1;
    if (m->is_cpu && l->precision != MTC_PLAN_BF16 && m->shape_flops_fp32 > 0) {
        gemm = m->shape_flops_fp32;
        if (m->cpu_share > 0) share = m->cpu_share;
    }
    double rate = gemm * ach * devices * share;
    if (!(rate > 0))
        return mtc_error(MTC_ERR_INVALID_ARGUMENT, "machine %s has no GEMM rate for %s", m->name,
                         l->precision == MTC_PLAN_BF16 ? "bf16" : "fp32");
    /* a CPU host whose kernels bench-peak timed: each kernel's CPU seconds
     * over the cores the rank gets and the share the load leaves */
    double cpu_slow = 0;
    /* with more rank-threads than cores a rank runs at a whole core while
     * it has one; the cores are shared below (cores_busy) */
    int shared_cores = m->is_cpu && devices < 1;
    if (m->is_cpu && l->precision != MTC_PLAN_BF16 && m->kern.measured && m->kern.gemm_rate > 0)
        cpu_slow = 1.0 / ((shared_cores ? 1.0 : devices) * share);
    /* ranks on shared cores between collectives: each call adds the
     * measured wall time (bench-peak's probe, a call of every rank at
     * once), a rank's share of it cores / world, and the compute grows by
     * the measured fraction (peers descheduled mid-phase, switches) */
    double ovs = 0;
    if (cpu_slow > 0 && shared_cores) { /* MPI processes: their own probe's, when it ran */
        int procs = l->ranks_per_process > 0 ? l->world / l->ranks_per_process : 1;
        int mpi = procs > 1 && (m->mpi_oversub_sync > 0 || m->mpi_oversub_frac > 0);
        cpu_slow *= 1 + (mpi ? m->mpi_oversub_frac : m->oversub_frac);
        ovs = (mpi ? m->mpi_oversub_sync : m->oversub_sync) * m->devices_per_node / l->world;
    }
    mtc_plan_machine mm = *m;
    if (m->is_cpu && devices < 1) mm.mem_bw = m->mem_bw * devices; /* shared memory bus */
    mm.mem_bw *= share;
    int pp_stride = l->tp * l->cp * l->dp;
    mtc_plan_link tpl = link_of(m, 1, l->tp, oversub, ovs);
    mtc_plan_link cpl = link_of(m, l->tp, l->cp, oversub, ovs);
    mtc_plan_link dpl = link_of(m, l->tp, l->dp * l->cp, oversub, ovs); /* the dp x cp group */
    mtc_plan_link ppl = link_of(m, pp_stride, l->pp, oversub, ovs);
    /* MoE groups in the expert generator's etp-ep-edp-pp order: ETP x EP
     * (allgather), EP (stride etp) and ETP (alltoall) */
    int etp = l->etp > 0 ? l->etp : 1, ep = l->ep > 1 ? l->ep : 1;
    mtc_plan_link moel[3] = {link_of(m, 1, etp * ep, oversub, ovs),
                             link_of(m, etp, ep, oversub, ovs), link_of(m, 1, etp, oversub, ovs)};
    /* the slowest stage's chunk (head and embedding on their stages) */
    double tf = 0, tb = 0, work = 0; /* work: one pipeline replica's busy seconds */
    chunk_cost worst;
    memset(&worst, 0, sizeof worst);
    for (int st = 0; st < S; st++) {
        pp_layout_stage ls; /* pp/layout.c */
        MTC_CHECK(pp_layout_stage_get(&ls, &l->split, L, l->pp, v, st));
        chunk_cost k =
            chunk_costs(l, &mm, rate, cpu_slow, ls.first_layer, ls.first_layer + ls.num_layers,
                        ls.has_embedding, ls.has_loss, &tpl, &cpl, &ppl, moel);
        /* around a standalone MTP stage the messages are 1 + D states:
         * priced as that many times one (approximate: latency included) */
        k.p2p *= ls.in_states > ls.out_states ? ls.in_states : ls.out_states;
        double f = k.gemm_f + k.elem_f + k.tp_f + k.cp_f + k.p2p + k.moe_f;
        double b = k.gemm_b + k.elem_b + k.tp_b + k.cp_b + k.p2p + k.moe_b;
        if (f + b > tf + tb) tf = f, tb = b, worst = k;
        work += M * (f + b);
    }
    double makespan = M * v * (tf + tb);
    if (l->pp > 1) {
        pp_schedule_config sc = {
            .pp = l->pp, .vpp = v > 1 ? v : 0, .num_microbatches = M, .group_size = l->mb_group};
        int max_ops = pp_schedule_max_ops(&sc);
        mtc_result_t rc = MTC_OK;
        if (m->is_cpu) {
            pp_plan *plans = calloc((size_t)l->pp, sizeof *plans);
            rc = plans ? MTC_OK : mtc_error(MTC_ERR_OUT_OF_MEMORY, "plan: pipeline plans");
            for (int r = 0; rc == MTC_OK && r < l->pp; r++)
                rc = pp_plan_build(&plans[r], &sc, r);
            if (rc == MTC_OK) rc = pp_plan_simulate(&makespan, plans, l->pp, tf, tb);
            for (int r = 0; plans && r < l->pp; r++)
                pp_plan_free(&plans[r]);
            free(plans);
        } else {
            pp_op *ops = calloc((size_t)l->pp * max_ops, sizeof *ops);
            pp_sim_span *spans = calloc((size_t)l->pp * max_ops, sizeof *spans);
            pp_schedule_counts *counts = calloc((size_t)l->pp, sizeof *counts);
            rc = ops && spans && counts ? MTC_OK
                                        : mtc_error(MTC_ERR_OUT_OF_MEMORY, "plan: schedule");
            for (int r = 0; rc == MTC_OK && r < l->pp; r++)
                rc = pp_schedule_build(ops + (size_t)r * max_ops, &counts[r], &sc, r);
            if (rc == MTC_OK) rc = pp_schedule_simulate(spans, &makespan, ops, counts, &sc, tf, tb);
            free(ops), free(spans), free(counts);
        }
        MTC_CHECK(rc);
    }
    /* CPU kernels on shared cores: a rank idle in the pipeline's bubble or
     * waiting for a peer leaves its core to another, so the step is the
     * schedule's makespan at a whole core per rank or the world's busy
     * seconds over the cores, whichever is longer */
    if (cpu_slow > 0 && shared_cores) {
        double cores = m->devices_per_node > 0 ? m->devices_per_node : 1;
        double all = work * ((double)l->world / l->pp) / cores;
        if (all > makespan) makespan = all;
    }
    double busy = M * v * (tf + tb);
    out->bubble_s = makespan - busy > 0 ? makespan - busy : 0;
    out->bubble_fraction = busy > 0 ? out->bubble_s / busy : 0;
    out->compute_s = M * v * (worst.gemm_f + worst.gemm_b);
    out->elementwise_s = M * v * (worst.elem_f + worst.elem_b);
    out->attention_s = M * v * worst.attn;
    out->tp_comm_s = M * v * (worst.tp_f + worst.tp_b);
    out->cp_comm_s = M * v * (worst.cp_f + worst.cp_b);
    out->pp_comm_s = M * v * 2 * worst.p2p;
    out->moe_gemm_s = M * v * worst.moe_gemm;
    out->moe_elem_s = M * v * worst.moe_elem;
    out->moe_comm_s = M * v * (worst.moe_f + worst.moe_b);
    out->moe_rows = worst.moe_rows;
    out->moe_flops_rank = M * v * worst.moe_flops;
    /* the optimizer step and the data-parallel reduction of the peak rank */
    mtc_plan_memory mem;
    MTC_CHECK(mtc_plan_memory_peak(l, &mem));
    double opt = 0;
    if (cpu_slow > 0) /* AdamW on the shard; the gradient norm and zeroing over the buffer */
        opt =
            ((double)mem.optim_numel * m->kern.adam + (double)mem.buffer_numel * m->kern.gradnorm) *
            cpu_slow;
    else if (mm.mem_bw > 0) /* read g, read+write p, m, v (and the master copy) */
        opt = (2.0 * mem.optim_bytes +
               mem.grad_bytes * (double)mem.optim_numel /
                   (double)(mem.buffer_numel ? mem.buffer_numel : 1) +
               2.0 * mem.param_bytes) /
              mm.mem_bw;
    out->elementwise_s += opt;
    out->optimizer_s = opt;
    out->kernels = cpu_slow > 0;
    /* the dense buffer here; the expert-parallel one (ep > 1) below */
    double dense_numel = (double)(mem.buffer_numel - mem.expert_buffer_numel);
    double gb = dense_numel * (l->precision == MTC_PLAN_BF16 ? 2 : 4);
    double pb = gb;
    int nd = l->distopt && l->distopt_instances > 1 ? l->distopt_instances : 1;
    double dpt = 0, ag = 0;
    int dpc = l->dp * l->cp; /* gradients reduce over dp x cp */
    if (dpc > 1 && !l->distopt) dpt = mtc_plan_coll_time(MTC_PLAN_AR, gb, dpc, &dpl);
    if (dpc > 1 && l->distopt) {
        mtc_plan_link intra = link_of(m, l->tp, dpc / nd, oversub, ovs);
        dpt = mtc_plan_coll_time(MTC_PLAN_RS, gb, dpc / nd, &intra);
        if (nd > 1) dpt += mtc_plan_coll_time(MTC_PLAN_AR, gb / (dpc / nd), nd, &dpl);
        ag = mtc_plan_coll_time(MTC_PLAN_AG, pb, dpc / nd, &intra);
    }
    int fsdp = l->fsdp_strategy >= MTC_FSDP_OPTIM_GRADS && dpc > 1;
    if (fsdp) { /* the dense buffer's unit collectives instead (fsdp_price) */
        mtc_plan_link intra = link_of(m, l->tp, dpc / nd, oversub, ovs);
        double page = 0;
        if (m->is_cpu && m->kern.page_move > 0) /* a rank's kernel work: over its cores */
            page = m->kern.page_move * (cpu_slow > 0 ? cpu_slow : 1.0 / (devices * share)) *
                   (shared_cores ? (double)l->world / m->devices_per_node : 1);
        fsdp_price(&mem.fsdp_comm, dpc / nd, nd, &intra, &dpl, page, mm.mem_bw, out);
        dpt = out->fsdp_rs_s + out->fsdp_outer_s;
        ag = out->fsdp_ag_fwd_s + out->fsdp_ag_bwd_s + out->fsdp_ag_step_s;
    }
    /* the expert buffer over expert-DP (etp-ep-edp order: stride etp x ep),
     * its own distributed-optimizer instance as the dense one's */
    double xb = (double)mem.expert_buffer_numel * (l->precision == MTC_PLAN_BF16 ? 2 : 4);
    int edp = l->edp;
    if (xb > 0 && edp > 1) {
        mtc_plan_link el = link_of(m, etp * ep, edp, oversub, ovs);
        double xt = 0, xa = 0;
        if (!l->distopt)
            xt = mtc_plan_coll_time(MTC_PLAN_AR, xb, edp, &el);
        else {
            mtc_plan_link intra = link_of(m, etp * ep, edp / nd, oversub, ovs);
            xt = mtc_plan_coll_time(MTC_PLAN_RS, xb, edp / nd, &intra);
            if (nd > 1) xt += mtc_plan_coll_time(MTC_PLAN_AR, xb / (edp / nd), nd, &el);
            xa = mtc_plan_coll_time(MTC_PLAN_AG, xb, edp / nd, &intra);
        }
        out->edp_comm_total_s = xt + xa;
        dpt += xt, ag += xa;
    }
    out->dp_comm_total_s = dpt + ag;
    double hidden = l->overlap_grad_reduce ? v * (worst.gemm_b + worst.elem_b) : 0;
    /* --overlap-param-gather: the all-gathers run under the first
     * microbatch's forward of every chunk */
    double ag_hidden =
        l->overlap_param_gather && l->distopt ? v * (worst.gemm_f + worst.elem_f) : 0;
    out->dp_comm_s = (dpt > hidden ? dpt - hidden : 0) + (ag > ag_hidden ? ag - ag_hidden : 0);
    if (fsdp) {
        /* what the overlap hides: on a CPU host whose ranks share cores
         * nothing (the shm collectives copy and wait on the cores the
         * compute needs: bench-peak's oversubscribed probe prices the
         * waits); else each pass's collectives under its compute, all but
         * each microbatch's first gather (forward, backward) and last
         * reduce-scatter; optim_grads' step all-gather as the distributed
         * optimizer's. The expert buffer (ep > 1) stays priced as the
         * distributed optimizer's. */
        double cf = M * v * (worst.gemm_f + worst.elem_f),
               cb = M * v * (worst.gemm_b + worst.elem_b);
        int can = !(m->is_cpu && shared_cores);
        fsdp_hide(out, l->overlap_param_gather && can, l->overlap_grad_reduce && can, M * v, cf, cb,
                  &mem.fsdp_comm);
        double xe = out->edp_comm_total_s, st = out->fsdp_ag_step_s;
        double xh = xe > hidden ? xe - hidden : 0;
        out->dp_comm_s =
            out->fsdp_exposed_s + (st > ag_hidden ? st - ag_hidden : 0) + xh + out->fsdp_outer_s;
    }
    out->step_s = makespan + opt + out->dp_comm_s + out->fsdp_page_s;
    out->gemm_rate = rate, out->devices = devices, out->cpu_share = share;
    out->model_flops = mtc_model_flops(&l->model, l->global_batch);
    out->flops_rank = mtc_plan_flops(&l->model, l->global_batch, l->recompute) / l->world;
    out->tflops_per_device = out->model_flops / (out->step_s * l->world) * 1e-12;
    out->hw_tflops_per_device = out->flops_rank / out->step_s * 1e-12;
    /* a rank's peak: the device's; on a host the machine's FMA peak over its
     * ranks, as mtc train (never below the GEMM rates the time used, so a
     * prediction stays under 100%) */
    double rank_peak = peak * devices;
    if (m->is_cpu) {
        double core = fmax(m->fma_flops_fp32, fmax(m->peak_flops_fp32, m->shape_flops_fp32));
        if (l->precision == MTC_PLAN_BF16) core = fmax(core, m->peak_flops);
        double cores = m->devices_per_node > 0 ? m->devices_per_node : 1;
        rank_peak = core * cores / l->world;
    }
    out->mfu = mtc_mfu(out->model_flops, out->step_s, l->world, rank_peak);
    return MTC_OK;
}
