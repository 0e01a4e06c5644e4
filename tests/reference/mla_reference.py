#!/usr/bin/python3
"""tests/reference/mla_reference.py - writes tests/reference/mla_tiny.fixture, a tiny
Llama-style model whose attention is Megatron core_v0.18.0's multi-latent attention, written
here with plain torch operations from megatron/core/transformer/multi_latent_attention.py
(MLASelfAttention.get_query_key_value_tensors, qkv_up_proj_and_rope_apply),
models/common/embeddings/yarn_rotary_pos_embedding.py and rope_utils.py
(_apply_rotary_pos_emb_bshd with multi_latent_attention=True). Megatron is not imported.

Model: vocab 64, hidden 32, 2 layers, 4 heads, q_lora_rank 12, kv_lora_rank 10,
qk_head_dim 6, qk_pos_emb_head_dim 4, v_head_dim 5, the latent norms of --qk-layernorm
(RMSNorm, as TELayerNormColumnParallelLinear fuses them into the up projections), SwiGLU FFN
48, RMSNorm eps 1e-5, untied head, no biases, no dropout, batch 2 x sequence 8.
YaRN: rotary_base 10000, scaling factor 4, mscale 1, mscale_all_dim 0.7,
original_max_position_embeddings 8, beta_fast 32, beta_slow 1 (so the frequency ramp, the
concentration factor on cos / sin and the softmax scale's mscale are all exercised).
Weights are normal(0, 0.2) float32 from torch.Generator().manual_seed(4321) (norm weights
around 1); the model runs in float64 except the rotary tables, made in float32 as Megatron's
(cos/sin of float32 angles times the factor, then cast to the activation dtype).

Names are mtc's (Hugging Face DeepSeek-V3's for the MLA parts, mtc's fused
mlp.gate_up_proj = [gate ; up]):
  model.embed_tokens.weight (V, C); per layer model.layers.N.:
  input_layernorm.weight (C); self_attn.q_a_proj.weight (QL, C) = linear_q_down_proj;
  self_attn.q_a_layernorm.weight (QL) = linear_q_up_proj.layer_norm_weight;
  self_attn.q_b_proj.weight (NH (dqk + dpe), QL) = linear_q_up_proj (per head [q_nope | q_pe]);
  self_attn.kv_a_proj_with_mqa.weight (KL + dpe, C) = linear_kv_down_proj ([kv latent | k_pe]);
  self_attn.kv_a_layernorm.weight (KL) = linear_kv_up_proj.layer_norm_weight;
  self_attn.kv_b_proj.weight (NH (dqk + dv), KL) = linear_kv_up_proj (per head [k_nope | v]);
  self_attn.o_proj.weight (C, NH dv) = linear_proj; post_attention_layernorm.weight (C);
  mlp.gate_up_proj.weight (2F, C); mlp.down_proj.weight (C, F);
  model.norm.weight (C); lm_head.weight (V, C).

Records: config [L, C, NH, QL, KL, dqk, dpe, dv, F, V, B, T], yarn [base, s, mscale,
mscale_all_dim, orig_max, beta_fast, beta_slow], norm_eps; tokens, targets (B, T), logits
(B, T, V), loss (1) (mean cross-entropy), every parameter and grad.<name> its gradient.
Format as llama_reference.py (b"MTCFIX1\\n", int32 count, records of int32 name_len, name,
int32 ndim, int32 dims, float32 data).

Run with Debian's python3-torch:  /usr/bin/python3 tests/reference/mla_reference.py
"""
import math
import os
import struct
import sys

import torch

L, C, NH, QL, KL, DQK, DPE, DV, F, V, B, T = 2, 32, 4, 12, 10, 6, 4, 5, 48, 64, 2, 8
BASE, S, MSCALE, MSCALE_ALL, ORIG, BFAST, BSLOW = 10000.0, 4.0, 1.0, 0.7, 8, 32.0, 1.0
EPS = 1e-5
DQ = DQK + DPE


def yarn_get_mscale(scale=1.0, mscale=1.0):
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def find_correction_dim(num_rotations, dim, base, max_pos):
    return (dim * math.log(max_pos / (num_rotations * 2 * math.pi))) / (2 * math.log(base))


def yarn_emb(seq_len):
    """YarnRotaryEmbedding.get_emb: (T, dim) angles in float32 and the concentration factor."""
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
    seq = torch.arange(seq_len, dtype=torch.float32)
    freqs = torch.outer(seq, inv)
    m = float(yarn_get_mscale(S, MSCALE) / yarn_get_mscale(S, MSCALE_ALL))
    return torch.cat((freqs, freqs), dim=-1), m


def rotate_half(x):
    x1, x2 = torch.chunk(x, 2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_mla_rope(t, emb, m):
    """rope_utils._apply_rotary_pos_emb_bshd(multi_latent_attention=True); t (B, T, H, DPE)."""
    x1 = t[..., 0::2]
    x2 = t[..., 1::2]
    t = torch.cat((x1, x2), dim=-1)
    cos_ = (torch.cos(emb) * m).to(t.dtype)[None, :, None, :]
    sin_ = (torch.sin(emb) * m).to(t.dtype)[None, :, None, :]
    return (t * cos_) + (rotate_half(t) * sin_)


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "mla_tiny.fixture")
    g = torch.Generator().manual_seed(4321)

    def randn(*shape, mean=0.0, std=0.2):
        return (torch.randn(*shape, generator=g, dtype=torch.float32) * std + mean).double()

    P = {"model.embed_tokens.weight": randn(V, C)}
    for l in range(L):
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
        P[p + "mlp.gate_up_proj.weight"] = randn(2 * F, C)
        P[p + "mlp.down_proj.weight"] = randn(C, F)
    P["model.norm.weight"] = randn(C, mean=1.0, std=0.1)
    P["lm_head.weight"] = randn(V, C)
    for t in P.values():
        t.requires_grad_(True)
    tokens = torch.randint(0, V, (B, T), generator=g)
    targets = torch.randint(0, V, (B, T), generator=g)

    emb, m = yarn_emb(T)
    scale = yarn_get_mscale(S, MSCALE_ALL) ** 2 / math.sqrt(DQ)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    x = P["model.embed_tokens.weight"][tokens]
    for l in range(L):
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
        query = torch.cat([q_nope, q_pe], dim=-1).transpose(1, 2)  # (B, NH, T, DQ)
        key = torch.cat([k_nope, k_pe.expand(-1, -1, NH, -1)], dim=-1).transpose(1, 2)
        att = (query @ key.transpose(-1, -2)) * scale
        att = att.masked_fill(~causal, float("-inf")).softmax(-1)
        y = (att @ v.transpose(1, 2)).transpose(1, 2).reshape(B, T, NH * DV)
        x = x + y @ P[p + "self_attn.o_proj.weight"].T
        h2 = rms_norm(x, P[p + "post_attention_layernorm.weight"])
        gu = h2 @ P[p + "mlp.gate_up_proj.weight"].T
        gate, up = torch.chunk(gu, 2, dim=-1)
        x = x + (torch.nn.functional.silu(gate) * up) @ P[p + "mlp.down_proj.weight"].T
    logits = rms_norm(x, P["model.norm.weight"]) @ P["lm_head.weight"].T
    loss = torch.nn.functional.cross_entropy(logits.view(-1, V), targets.view(-1))
    loss.backward()

    recs = [("config", torch.tensor([L, C, NH, QL, KL, DQK, DPE, DV, F, V, B, T], dtype=torch.float64)),
            ("yarn", torch.tensor([BASE, S, MSCALE, MSCALE_ALL, ORIG, BFAST, BSLOW], dtype=torch.float64)),
            ("norm_eps", torch.tensor([EPS])), ("tokens", tokens.double()), ("targets", targets.double()),
            ("logits", logits.detach()), ("loss", loss.detach().view(1))]
    recs += [(n, t.detach()) for n, t in P.items()]
    recs += [("grad." + n, t.grad) for n, t in P.items()]
    with open(out + ".tmp", "wb") as f:
        f.write(b"MTCFIX1\n")
        f.write(struct.pack("<i", len(recs)))
        for name, t in recs:
            nb = name.encode()
            f.write(struct.pack("<i", len(nb)) + nb)
            f.write(struct.pack("<i", t.dim()) + struct.pack("<%di" % t.dim(), *t.shape))
            f.write(t.detach().contiguous().float().numpy().astype("<f4").tobytes())
    os.replace(out + ".tmp", out)
    print(f"wrote {out}: {len(recs)} records, loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
