#!/usr/bin/python3
"""tests/reference/llama_reference.py - writes tests/reference/llama_tiny.fixture, a tiny
Llama (Hugging Face LlamaForCausalLM conventions, written here by hand with plain torch
operations; transformers is not imported) that mtc's Llama kernels and model are compared with.

Model: vocab 64 (a multiple of 8: no padding question), hidden 32, 2 layers, 4 query heads in
2 key/value groups (GQA, head dim 8), SwiGLU FFN hidden 48, RMSNorm eps 1e-5 (pre-norm), RoPE
base 10000 on every head channel, non-interleaved (rotate halves), no biases, no dropout,
untied lm_head, batch 2 x sequence 8, positions 0..7. Weights are normal(mean, std) from
torch.Generator().manual_seed(1234), rounded to float32; the model then runs in float64 (the
C side computes with exactly these float32 weights). RMSNorm weights are random around 1 so
their gradients are exercised.

Conventions (Hugging Face, and how Megatron differs):
- Linear weights are nn.Linear (out, in): y = x @ W.T. Names and shapes:
    model.embed_tokens.weight                  (64, 32)
    model.layers.N.input_layernorm.weight      (32)
    model.layers.N.self_attn.q_proj.weight     (NH*HS = 32, 32)
    model.layers.N.self_attn.k_proj.weight     (NG*HS = 16, 32)
    model.layers.N.self_attn.v_proj.weight     (NG*HS = 16, 32)
    model.layers.N.self_attn.o_proj.weight     (32, NH*HS = 32)
    model.layers.N.post_attention_layernorm.weight (32)
    model.layers.N.mlp.gate_proj.weight        (48, 32)
    model.layers.N.mlp.up_proj.weight          (48, 32)
    model.layers.N.mlp.down_proj.weight        (32, 48)
    model.norm.weight                          (32)
    lm_head.weight                             (64, 32)
- q/k/v projections are separate. q head h (channels h*HS .. h*HS+HS-1 of q_proj's output)
  attends with key/value head g = h // (NH/NG) (HF's repeat_kv).
- Megatron fuses them as self_attention.linear_qkv.weight ((NH + 2 NG) * HS, C), grouped per
  query group: for g in 0..NG-1 the rows are [the NH/NG q heads of group g | k head g | v head g],
  each head HS rows. From this file's weights:
      r = NH // NG
      qkv = torch.cat([torch.cat([q.view(NG, r * HS, C)[g], k.view(NG, HS, C)[g],
                                  v.view(NG, HS, C)[g]]) for g in range(NG)])
  Under tensor parallelism rank i holds groups [i NG/tp, (i+1) NG/tp) of that, whole.
- Megatron's mlp.linear_fc1.weight (2F, C) is [gate_proj ; up_proj] (--swiglu chunks the output
  in two, silu(first) * second); under TP rank i holds [gate rows of shard i ; up rows of shard
  i], i.e. each rank's fc1 shard is its own [gate_r ; up_r], not a slice of the global [gate ; up].
  linear_proj = o_proj, linear_fc2 = down_proj, embedding.word_embeddings = embed_tokens,
  output_layer = lm_head, decoder.final_layernorm = model.norm; the layer norms are
  input_layernorm / pre_mlp_layernorm (fused into linear_qkv / linear_fc1 as layer_norm_weight
  in Transformer Engine's layer spec).
- RoPE: inv_freq[i] = 1 / 10000^(2i/HS) in float32, angle = float32(pos) * inv_freq (float32),
  cos/sin of it in float32, applied as x * cos + rotate_half(x) * sin with rotate_half(x) =
  [-x2, x1] (x1, x2 the two halves of the head). Megatron's default (not --rotary-interleaved)
  is the same, so no q/k permutation is needed between the two.
- The loss is the mean cross-entropy over the B*T tokens.

Records (the gradients are of that mean loss):
  config      [L, C, NH, NG, HS, F, V, B, T]     float
  norm_eps, rope_base
  tokens, targets (B, T)          logits (B, T, V)          loss (1)
  every parameter under its HF name, and grad.<name> its gradient
  layer 0's intermediates, activations in (B, T, channels) row layout:
    l0.x            layer input (the embedding)
    l0.attn_norm    input_layernorm(l0.x);  l0.attn_norm.dy = dloss/d l0.attn_norm;
                    l0.attn_norm.dx = that gradient taken back through the norm alone
    l0.q, l0.k      q_proj / k_proj outputs (B, T, NH*HS) / (B, T, NG*HS), before RoPE
    l0.q_rot, l0.k_rot  after RoPE; l0.q_rot.dy, l0.k_rot.dy their gradients and
                    l0.q.dx, l0.k.dx the gradients of l0.q, l0.k (through RoPE alone)
    l0.mlp_in       the residual stream entering post_attention_layernorm; l0.mlp_norm its
                    output, with l0.mlp_norm.dy and l0.mlp_norm.dx as for the first norm
    l0.gate_up      (B, T, 2F) = [gate_proj(h) | up_proj(h)], Megatron's fc1 output layout
    l0.mlp_act      (B, T, F) = silu(gate) * up; l0.mlp_act.dy its gradient and
                    l0.gate_up.dx the gradient of l0.gate_up
  rope tables as torch computes them, for the kernel's table test: rope.pos (P) positions
  0, 1, 7, 100, 1000, 4095, 32767, 65535; rope.hs8.cos / .sin (P, 4) for head dim 8 and
  rope.hs128.cos / .sin (P, 64) for head dim 128 (base 10000).

Format (little-endian, as gpt2_reference.py): b"MTCFIX1\\n", int32 count, then count records
of int32 name_len, name, int32 ndim, int32 dims[ndim], float32 data.

Run with Debian's python3-torch:  /usr/bin/python3 tests/reference/llama_reference.py
(writes tests/reference/llama_tiny.fixture; the C tests do not need PyTorch).
"""
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

L, C, NH, NG, HS, FF, V, B, T = 2, 32, 4, 2, 8, 48, 64, 2, 8
EPS, BASE = 1e-5, 10000.0
ROPE_POS = [0, 1, 7, 100, 1000, 4095, 32767, 65535]


def rms_norm(x, w):
    # LlamaRMSNorm: x * rsqrt(mean(x^2) + eps), then * weight
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)) * w


def rope_cos_sin(pos, dim):
    # LlamaRotaryEmbedding (default rope type): everything in float32
    inv_freq = 1.0 / (BASE ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    freqs = torch.outer(torch.tensor(pos, dtype=torch.float32), inv_freq)  # (P, dim/2)
    return freqs.cos(), freqs.sin()


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x, cos, sin):
    # x (B, heads, T, HS); cos, sin (T, HS/2) -> the HF (T, HS) halves layout
    c = torch.cat((cos, cos), -1).double()
    s = torch.cat((sin, sin), -1).double()
    return x * c + rotate_half(x) * s


def vjp(fn, inputs, dy):
    """gradients of sum(fn(*inputs) * dy) with respect to inputs[0], the op alone"""
    xs = [t.detach().clone().requires_grad_(k == 0) for k, t in enumerate(inputs)]
    fn(*xs).backward(dy)
    return xs[0].grad


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "llama_tiny.fixture")
    g = torch.Generator().manual_seed(1234)

    def rnd(*shape, std=0.2, mean=0.0):
        return (mean + std * torch.randn(*shape, generator=g, dtype=torch.float64)).float().double().requires_grad_()

    P = {"model.embed_tokens.weight": rnd(V, C, std=1.0)}
    for l in range(L):
        h = f"model.layers.{l}."
        P[h + "input_layernorm.weight"] = rnd(C, std=0.1, mean=1.0)
        P[h + "self_attn.q_proj.weight"] = rnd(NH * HS, C)
        P[h + "self_attn.k_proj.weight"] = rnd(NG * HS, C)
        P[h + "self_attn.v_proj.weight"] = rnd(NG * HS, C)
        P[h + "self_attn.o_proj.weight"] = rnd(C, NH * HS)
        P[h + "post_attention_layernorm.weight"] = rnd(C, std=0.1, mean=1.0)
        P[h + "mlp.gate_proj.weight"] = rnd(FF, C)
        P[h + "mlp.up_proj.weight"] = rnd(FF, C)
        P[h + "mlp.down_proj.weight"] = rnd(C, FF)
    P["model.norm.weight"] = rnd(C, std=0.1, mean=1.0)
    P["lm_head.weight"] = rnd(V, C)

    tokens = torch.randint(0, V, (B, T), generator=g)
    targets = torch.randint(0, V, (B, T), generator=g)
    cos, sin = rope_cos_sin(list(range(T)), HS)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    rep = NH // NG

    keep = {}  # layer-0 intermediates whose gradients are recorded

    def hold(name, t):
        if t.requires_grad:
            t.retain_grad()
        keep[name] = t
        return t

    x = P["model.embed_tokens.weight"][tokens]
    for l in range(L):
        h = f"model.layers.{l}."
        first = l == 0
        if first:
            hold("l0.x", x)
        a = rms_norm(x, P[h + "input_layernorm.weight"])
        q = F.linear(a, P[h + "self_attn.q_proj.weight"])  # (B, T, NH*HS)
        k = F.linear(a, P[h + "self_attn.k_proj.weight"])  # (B, T, NG*HS)
        v = F.linear(a, P[h + "self_attn.v_proj.weight"])
        if first:
            hold("l0.attn_norm", a), hold("l0.q", q), hold("l0.k", k)
        q = apply_rope(q.view(B, T, NH, HS).transpose(1, 2), cos, sin)
        k = apply_rope(k.view(B, T, NG, HS).transpose(1, 2), cos, sin)
        if first:
            hold("l0.q_rot", q), hold("l0.k_rot", k)
        kk = k.repeat_interleave(rep, dim=1)  # q head h uses kv head h // rep
        vv = v.view(B, T, NG, HS).transpose(1, 2).repeat_interleave(rep, dim=1)
        s = (q @ kk.transpose(-1, -2)) / math.sqrt(HS)
        s = s.masked_fill(~mask, float("-inf"))
        y = (s.softmax(-1) @ vv).transpose(1, 2).reshape(B, T, NH * HS)
        x = x + F.linear(y, P[h + "self_attn.o_proj.weight"])
        m = rms_norm(x, P[h + "post_attention_layernorm.weight"])
        gu = torch.cat((F.linear(m, P[h + "mlp.gate_proj.weight"]), F.linear(m, P[h + "mlp.up_proj.weight"])), -1)
        gate, up = gu.chunk(2, dim=-1)
        act = F.silu(gate) * up
        if first:
            hold("l0.mlp_in", x), hold("l0.mlp_norm", m), hold("l0.gate_up", gu), hold("l0.mlp_act", act)
        x = x + F.linear(act, P[h + "mlp.down_proj.weight"])
    x = rms_norm(x, P["model.norm.weight"])
    logits = F.linear(x, P["lm_head.weight"])
    loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
    loss.backward()

    def rows(t):  # (B, heads, T, HS) -> (B, T, heads*HS)
        return t.transpose(1, 2).reshape(B, T, -1)

    w0 = lambda n: P["model.layers.0." + n]
    recs = [("config", torch.tensor([L, C, NH, NG, HS, FF, V, B, T], dtype=torch.float64)),
            ("norm_eps", torch.tensor([EPS])), ("rope_base", torch.tensor([BASE])),
            ("tokens", tokens.double()), ("targets", targets.double()),
            ("logits", logits.detach()), ("loss", loss.detach().reshape(1))]
    recs += [(n, p.detach()) for n, p in P.items()]
    recs += [("grad." + n, p.grad) for n, p in P.items()]
    # layer 0's pieces
    for name in ("l0.x", "l0.attn_norm", "l0.q", "l0.k", "l0.mlp_in", "l0.mlp_norm", "l0.gate_up", "l0.mlp_act"):
        recs.append((name, keep[name].detach()))
    recs += [("l0.q_rot", rows(keep["l0.q_rot"].detach())), ("l0.k_rot", rows(keep["l0.k_rot"].detach()))]
    for norm, inp, wname in (("l0.attn_norm", "l0.x", "input_layernorm.weight"),
                             ("l0.mlp_norm", "l0.mlp_in", "post_attention_layernorm.weight")):
        dy = keep[norm].grad
        recs += [(norm + ".dy", dy), (norm + ".dx", vjp(rms_norm, [keep[inp], w0(wname)], dy))]
    for part, heads in (("q", NH), ("k", NG)):
        dy = keep[f"l0.{part}_rot"].grad  # (B, heads, T, HS)
        recs += [(f"l0.{part}_rot.dy", rows(dy)), (f"l0.{part}.dx", keep[f"l0.{part}"].grad)]
        # the gradient of the pre-RoPE projection flows through RoPE alone
        alone = vjp(lambda t: apply_rope(t.view(B, T, heads, HS).transpose(1, 2), cos, sin), [keep[f"l0.{part}"]], dy)
        assert torch.allclose(alone, keep[f"l0.{part}"].grad, rtol=1e-12, atol=1e-14)
    dy = keep["l0.mlp_act"].grad
    recs += [("l0.mlp_act.dy", dy), ("l0.gate_up.dx", keep["l0.gate_up"].grad)]
    # rope tables as torch computes them (float32 through and through)
    recs.append(("rope.pos", torch.tensor(ROPE_POS, dtype=torch.float64)))
    for hs in (8, 128):
        c, s = rope_cos_sin(ROPE_POS, hs)
        recs += [(f"rope.hs{hs}.cos", c), (f"rope.hs{hs}.sin", s)]

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
