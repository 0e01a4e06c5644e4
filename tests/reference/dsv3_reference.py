#!/usr/bin/python3
"""tests/reference/dsv3_reference.py - writes tests/reference/dsv3_tiny.fixture: a tiny
DeepSeek-V3-shaped GPT in plain torch, transcribed from Megatron-LM core_v0.18.0 (Megatron
itself needs CUDA and Transformer Engine):
- attention: MLASelfAttention (multi_latent_attention.py) with q compression, the latent
  RMSNorms of --qk-layernorm and YaRN RoPE (yarn_rotary_pos_embedding.py, rope_utils.py
  _apply_rotary_pos_emb_bshd with multi_latent_attention=True), as mla_reference.py;
- MLP: layer 0 dense (--moe-layer-freq [0]*1+[1]*2, Megatron's first-k-dense), layers 1 and 2
  MoE (moe/router.py, moe_utils.py): sigmoid scores, the expert bias added for the top-k only
  (topk_routing_with_score_function), group-limited top-k (group_limited_topk: groups ranked
  by the sum of their top k/group_topk biased scores), probabilities normalised over the k
  chosen and scaled by the top-k scaling factor, SwiGLU experts, one shared expert added;
  seq_aux_loss (sequence_load_balancing_loss_func on compute_routing_scores_for_aux_loss's
  normalised sigmoid scores and plain top-k);
- MTP depth 1 (multi_token_prediction.py) as mtp_reference.py: the depth's layer is of the
  last decoder layer's kind (MLA + MoE), its router's aux loss joins the objective.
Objective (one microbatch, MoEAuxLossAutoScaler and MTPLossAutoScaler scale 1):
  main loss (mean xent) + sum over MoE layers of seq_aux_loss + factor / D * mtp loss.

Model: vocab 64, hidden 32, 3 layers, 4 heads, q_lora_rank 12, kv_lora_rank 10, qk_head_dim
6, qk_pos_emb_head_dim 4, v_head_dim 5, dense FFN 48, 8 experts of FFN 16 in 4 groups
(group_topk 2, topk 2, scaling 2.5), shared expert FFN 24, aux coeff 0.01, RMSNorm eps 1e-5,
untied head, no biases, no dropout, MTP factor 0.3; batch 2 x sequence 8; YaRN base 10000,
factor 4, mscale 1, mscale_all_dim 0.7, original length 8, betas 32 / 1. Weights normal from
torch.Generator().manual_seed(4321) rounded to float32 (the expert bias too, so the biased
top-k differs from the unbiased one); the model runs in float64.

Names are mtc's (Hugging Face DeepSeek-V3's for MLA and MTP, mtc's fused gate_up_proj rows
[gate | up], mtc's MoE names mlp.router.weight (E, C), mlp.router.expert_bias (E),
mlp.experts.e.gate_up_proj.weight (2F, C), .down_proj.weight (C, F), mlp.shared_expert.*).
The MTP depth is model.layers.3 (enorm, hnorm, eh_proj, shared_head.norm and the layer's own).

Records: config [L, C, NH, QL, KL, dqk, dpe, dv, F, V, B, T, E, MF, SF, G, GK, K, D],
yarn [base, s, mscale, mscale_all_dim, orig_max, beta_fast, beta_slow], moe [scaling,
aux_coeff], mtp_factor, norm_eps; tokens, targets (B, T), logits (B, T, V) of the main head,
loss (main), mtp_loss (D), aux (per MoE layer 1, 2 and the MTP layer 3: seq_aux_loss with its
coefficient), every parameter and grad.<name> its gradient of the objective (the expert bias
gets none: zeros). Format as llama_reference.py (b"MTCFIX1\\n", int32 count, records of int32
name_len, name, int32 ndim, int32 dims, float32 data).

Run with Debian's python3-torch:  /usr/bin/python3 tests/reference/dsv3_reference.py
"""
import math
import os
import struct
import sys

import torch
import torch.nn.functional as Fn

L, C, NH, QL, KL, DQK, DPE, DV, FF, V, B, T = 3, 32, 4, 12, 10, 6, 4, 5, 48, 64, 2, 8
E, MF, SF, G, GK, K, SCALE, AUX = 8, 16, 24, 4, 2, 2, 2.5, 0.01
D, FACTOR = 1, 0.3
BASE, S, MSCALE, MSCALE_ALL, ORIG, BFAST, BSLOW = 10000.0, 4.0, 1.0, 0.7, 8, 32.0, 1.0
EPS = 1e-5
DQ = DQK + DPE
MOE_LAYERS = [1, 2, 3]  # [0]*1+[1]*2, and the MTP layer of the last layer's kind


def yarn_get_mscale(scale=1.0, mscale=1.0):
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def find_correction_dim(num_rotations, dim, base, max_pos):
    return (dim * math.log(max_pos / (num_rotations * 2 * math.pi))) / (2 * math.log(base))


def yarn_emb(seq_len):
    dim = DPE
    ar = torch.arange(0, dim, 2, dtype=torch.float32) / dim
    inv_extra = 1.0 / (BASE ** ar)
    inv_inter = 1.0 / (S * BASE ** ar)
    low = math.floor(find_correction_dim(BFAST, dim, BASE, ORIG))
    high = math.ceil(find_correction_dim(BSLOW, dim, BASE, ORIG))
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    mask = 1.0 - ramp
    inv = inv_inter * (1 - mask) + inv_extra * mask
    freqs = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv)
    m = float(yarn_get_mscale(S, MSCALE) / yarn_get_mscale(S, MSCALE_ALL))
    return torch.cat((freqs, freqs), dim=-1), m


def rotate_half(x):
    x1, x2 = torch.chunk(x, 2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_mla_rope(t, emb, m):
    t = torch.cat((t[..., 0::2], t[..., 1::2]), dim=-1)
    cos_ = (torch.cos(emb) * m).to(t.dtype)[None, :, None, :]
    sin_ = (torch.sin(emb) * m).to(t.dtype)[None, :, None, :]
    return (t * cos_) + (rotate_half(t) * sin_)


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def topk_lower(v, k):
    """torch.topk's choice with ties to the lower index (v: 1-D, detached)"""
    return sorted(range(v.shape[0]), key=lambda e: (-float(v[e]), e))[:k]


def group_limited_topk(v):
    """moe_utils.group_limited_topk on one token's biased scores"""
    per = E // G
    gs = [sum(float(v[g * per + i]) for i in topk_lower(v[g * per:(g + 1) * per], K // GK))
          for g in range(G)]
    chosen = topk_lower(torch.tensor(gs), GK)
    masked = v.clone()
    for e in range(E):
        if e // per not in chosen:
            masked[e] = -float("inf")
    return topk_lower(masked, K)


def moe_mlp(x, p, bias):
    """MoELayer on x (B, T, C): routed experts (SwiGLU) + the shared expert; and its
    seq_aux_loss."""
    xs = x.reshape(B * T, C)
    logits = xs @ P[p + "mlp.router.weight"].T  # router_gating_linear
    scores = torch.sigmoid(logits)
    out = torch.zeros_like(xs)
    for n in range(B * T):
        idx = group_limited_topk((scores[n] + bias).detach())
        sc = scores[n][idx]
        probs = sc / (sc.sum() + 1e-20) * SCALE
        for j, e in enumerate(idx):
            q = f"{p}mlp.experts.{e}."
            gate, up = (xs[n] @ P[q + "gate_up_proj.weight"].T).chunk(2, dim=-1)
            out[n] = out[n] + probs[j] * ((Fn.silu(gate) * up) @ P[q + "down_proj.weight"].T)
    gate, up = (xs @ P[p + "mlp.shared_expert.gate_up_proj.weight"].T).chunk(2, dim=-1)
    out = out + (Fn.silu(gate) * up) @ P[p + "mlp.shared_expert.down_proj.weight"].T
    # compute_routing_scores_for_aux_loss (sigmoid: normalised scores, plain top-k) and
    # sequence_load_balancing_loss_func: per sequence E / (k T) * sum_e count_e * mean_t s_te
    s = scores / (scores.sum(-1, keepdim=True) + 1e-20)
    aux = 0.0
    for b in range(B):
        rows = s[b * T:(b + 1) * T]
        cnt = torch.zeros(E, dtype=torch.float64)
        for n in range(T):
            for e in topk_lower(rows[n].detach(), K):
                cnt[e] += 1
        aux = aux + (rows.sum(0) * cnt).sum() * (E * AUX / (K * T * T))
    return out.view(B, T, C), aux / B


P = {}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "dsv3_tiny.fixture")
    g = torch.Generator().manual_seed(4321)

    def randn(*shape, mean=0.0, std=0.2):
        return (torch.randn(*shape, generator=g, dtype=torch.float32) * std + mean).double()

    P["model.embed_tokens.weight"] = randn(V, C, std=1.0)
    biases = {}

    def layer_params(l):
        p = f"model.layers.{l}."
        P[p + "input_layernorm.weight"] = randn(C, mean=1.0, std=0.1)
        P[p + "self_attn.q_a_proj.weight"] = randn(QL, C)
        P[p + "self_attn.q_a_layernorm.weight"] = randn(QL, mean=1.0, std=0.1)
        P[p + "self_attn.q_b_proj.weight"] = randn(NH * DQ, QL)
        P[p + "self_attn.kv_a_proj_with_mqa.weight"] = randn(KL + DPE, C)
        P[p + "self_attn.kv_a_layernorm.weight"] = randn(KL, mean=1.0, std=0.1)
        P[p + "self_attn.kv_b_proj.weight"] = randn(NH * (DQK + DV), KL)
        P[p + "self_attn.o_proj.weight"] = randn(C, NH * DV)
        P[p + "post_attention_layernorm.weight"] = randn(C, mean=1.0, std=0.1)
        if l in MOE_LAYERS:
            P[p + "mlp.router.weight"] = randn(E, C, std=0.5)
            biases[l] = randn(E, std=0.1)
            for e in range(E):
                P[p + f"mlp.experts.{e}.gate_up_proj.weight"] = randn(2 * MF, C, std=0.3)
                P[p + f"mlp.experts.{e}.down_proj.weight"] = randn(C, MF, std=0.3)
            P[p + "mlp.shared_expert.gate_up_proj.weight"] = randn(2 * SF, C)
            P[p + "mlp.shared_expert.down_proj.weight"] = randn(C, SF)
        else:
            P[p + "mlp.gate_up_proj.weight"] = randn(2 * FF, C)
            P[p + "mlp.down_proj.weight"] = randn(C, FF)

    for l in range(L):
        layer_params(l)
    P["model.norm.weight"] = randn(C, mean=1.0, std=0.1)
    P["lm_head.weight"] = randn(V, C)
    for k in range(D):
        h = f"model.layers.{L + k}."
        P[h + "enorm.weight"] = randn(C, mean=1.0, std=0.1)
        P[h + "hnorm.weight"] = randn(C, mean=1.0, std=0.1)
        P[h + "eh_proj.weight"] = randn(C, 2 * C)
        layer_params(L + k)
        P[h + "shared_head.norm.weight"] = randn(C, mean=1.0, std=0.1)
    for t in P.values():
        t.requires_grad_(True)
    tokens = torch.randint(0, V, (B, T), generator=g)
    targets = torch.randint(0, V, (B, T), generator=g)

    emb, m = yarn_emb(T)
    scale = yarn_get_mscale(S, MSCALE_ALL) ** 2 / math.sqrt(DQ)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    auxes = {}

    def transformer_layer(x, l):
        p = f"model.layers.{l}."
        h = rms_norm(x, P[p + "input_layernorm.weight"])
        qc = rms_norm(h @ P[p + "self_attn.q_a_proj.weight"].T, P[p + "self_attn.q_a_layernorm.weight"])
        q = (qc @ P[p + "self_attn.q_b_proj.weight"].T).view(B, T, NH, DQ)
        kvc, k_pe = torch.split(h @ P[p + "self_attn.kv_a_proj_with_mqa.weight"].T, [KL, DPE], dim=-1)
        kvc = rms_norm(kvc, P[p + "self_attn.kv_a_layernorm.weight"])
        kv = (kvc @ P[p + "self_attn.kv_b_proj.weight"].T).view(B, T, NH, DQK + DV)
        q_nope, q_pe = torch.split(q, [DQK, DPE], dim=-1)
        k_nope, v = torch.split(kv, [DQK, DV], dim=-1)
        q_pe = apply_mla_rope(q_pe, emb, m)
        k_pe = apply_mla_rope(k_pe.unsqueeze(-2), emb, m)
        query = torch.cat([q_nope, q_pe], dim=-1).transpose(1, 2)
        key = torch.cat([k_nope, k_pe.expand(-1, -1, NH, -1)], dim=-1).transpose(1, 2)
        att = ((query @ key.transpose(-1, -2)) * scale).masked_fill(~causal, float("-inf")).softmax(-1)
        y = (att @ v.transpose(1, 2)).transpose(1, 2).reshape(B, T, NH * DV)
        x = x + y @ P[p + "self_attn.o_proj.weight"].T
        h2 = rms_norm(x, P[p + "post_attention_layernorm.weight"])
        if l in MOE_LAYERS:
            mo, auxes[l] = moe_mlp(h2, p, biases[l])
            return x + mo
        gate, up = (h2 @ P[p + "mlp.gate_up_proj.weight"].T).chunk(2, dim=-1)
        return x + (Fn.silu(gate) * up) @ P[p + "mlp.down_proj.weight"].T

    embedding = lambda ids: P["model.embed_tokens.weight"][ids]
    output_layer = lambda x: x @ P["lm_head.weight"].T

    def xent(labels, logits):
        return Fn.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), reduction="none").view(B, T)

    def roll_tensor(t):  # multi_token_prediction.py roll_tensor without CP
        r = torch.roll(t, shifts=-1, dims=-1)
        r.select(-1, -1).fill_(0)
        return r, r.sum()

    x = embedding(tokens)
    for l in range(L):
        x = transformer_layer(x, l)
    hidden = rms_norm(x, P["model.norm.weight"])
    logits = output_layer(hidden)
    loss = xent(targets, logits).sum() / (B * T)

    input_ids, h, labels = tokens, hidden, targets.clone()
    mask = torch.ones(B, T, dtype=torch.float64)
    objective_mtp, mtp_losses = 0, []
    for k in range(D):
        p = f"model.layers.{L + k}."
        input_ids, _ = roll_tensor(input_ids)
        e = rms_norm(embedding(input_ids), P[p + "enorm.weight"])
        hh = rms_norm(h, P[p + "hnorm.weight"])
        h = torch.cat((e, hh), -1) @ P[p + "eh_proj.weight"].T
        h = rms_norm(transformer_layer(h, L + k), P[p + "shared_head.norm.weight"])
        labels, _ = roll_tensor(labels)
        mask, num = roll_tensor(mask)
        ml = (mask * xent(labels, output_layer(h))).sum() / num
        mtp_losses.append(ml)
        objective_mtp = objective_mtp + FACTOR / D * ml
    (loss + objective_mtp + sum(auxes.values())).backward()

    cfg = [L, C, NH, QL, KL, DQK, DPE, DV, FF, V, B, T, E, MF, SF, G, GK, K, D]
    recs = [("config", torch.tensor(cfg, dtype=torch.float64)),
            ("yarn", torch.tensor([BASE, S, MSCALE, MSCALE_ALL, ORIG, BFAST, BSLOW], dtype=torch.float64)),
            ("moe", torch.tensor([SCALE, AUX], dtype=torch.float64)),
            ("mtp_factor", torch.tensor([FACTOR])), ("norm_eps", torch.tensor([EPS])),
            ("tokens", tokens.double()), ("targets", targets.double()), ("logits", logits.detach()),
            ("loss", loss.detach().view(1)), ("mtp_loss", torch.stack([t.detach() for t in mtp_losses])),
            ("aux", torch.stack([auxes[l].detach() for l in MOE_LAYERS]))]
    for l in MOE_LAYERS:
        n = f"model.layers.{l}.mlp.router.expert_bias"
        recs += [(n, biases[l]), ("grad." + n, torch.zeros(E, dtype=torch.float64))]
    recs += [(n, t.detach()) for n, t in P.items()]
    # an expert no token chose has no gradient: zeros
    recs += [("grad." + n, t.grad if t.grad is not None else torch.zeros_like(t)) for n, t in P.items()]
    with open(out + ".tmp", "wb") as f:
        f.write(b"MTCFIX1\n")
        f.write(struct.pack("<i", len(recs)))
        for name, t in recs:
            nb = name.encode()
            f.write(struct.pack("<i", len(nb)) + nb)
            f.write(struct.pack("<i", t.dim()) + struct.pack("<%di" % t.dim(), *t.shape))
            f.write(t.detach().contiguous().float().numpy().astype("<f4").tobytes())
    os.replace(out + ".tmp", out)
    print(f"wrote {out}: {len(recs)} records, loss {loss.item():.6f}, "
          f"mtp {[round(t.item(), 6) for t in mtp_losses]}, aux {[round(auxes[l].item(), 6) for l in MOE_LAYERS]}")


if __name__ == "__main__":
    main()
