#!/usr/bin/python3
"""tests/reference/mtp_reference.py - writes tests/reference/mtp_tiny.fixture: a tiny
Llama-style GPT with Megatron-LM core_v0.18.0's multi-token prediction, in plain torch
(Megatron itself needs CUDA and Transformer Engine; its MTP code is transcribed here, function
for function, from megatron/core/transformer/multi_token_prediction.py and the MTP wiring of
megatron/core/models/gpt/gpt_model.py and pipeline_parallel/schedules.py).

Model: vocab 64, hidden 32, 2 decoder layers, 4 query heads in 2 key/value groups (head dim 8),
SwiGLU FFN 48, RMSNorm eps 1e-5, RoPE base 10000 (rotate halves), no biases, untied output
layer, no dropout; MTP depth D = 2, mtp_loss_scaling_factor 0.3; batch 2 x sequence 8.
Weights normal from torch.Generator().manual_seed(4321), rounded to float32; the model runs in
float64.

Megatron's MTP, as transcribed below:
- The decoder block ends with its final layernorm (with MTP it sits on the stage with the last
  decoder layer): h_0 = final_layernorm(decoder(embedding(tokens))).
- MultiTokenPredictionLayer k (k = 1..D), _get_embeddings: input_ids rolled left once more
  (roll_tensor: torch.roll(shifts=-1) with the vacated last position filled with 0), then the
  shared embedding of them; _concat_embeddings: torch.cat((enorm(decoder_input),
  hnorm(hidden_states)), -1) -> eh_proj (Linear 2C -> C, no bias); the transformer layer (the
  decoder block's last layer spec); _postprocess: the layer's own final_layernorm -> h_k.
- process_mtp_loss: labels and loss_mask rolled left once per depth (the same roll_tensor),
  logits = output_layer(h_k) (the shared head), mtp_loss_k = sum(loss_mask * xent) /
  num_tokens with num_tokens = loss_mask.sum(); the objective gets
  mtp_loss_scaling_factor / D * mtp_loss_k through MTPLossAutoScaler, whose backward scale is
  1 / num_microbatches (here 1), the same as the main loss's.
- The main loss: mean cross-entropy of output_layer(h_0) over the B*T tokens.

mtc names and layouts (what the C test loads by name, serial tp 1): Llama names with the
fused self_attn.qkv_proj = [q | k | v] rows and mlp.gate_up_proj = [gate | up] rows; MTP depth
k is model.layers.{L + k - 1} (Hugging Face DeepSeek-V3's numbering) holding enorm.weight,
hnorm.weight, eh_proj.weight (C, 2C), the layer's usual tensors and shared_head.norm.weight
(its final_layernorm).

Records: config [L, C, NH, NG, HS, F, V, B, T, D], mtp_factor, norm_eps, rope_base, tokens,
targets, loss (main), mtp_loss (D: each depth's mtp_loss_k), every parameter and grad.<name>
its gradient of the whole objective. Format (little-endian, as gpt2_reference.py):
b"MTCFIX1\\n", int32 count, then records of int32 name_len, name, int32 ndim, int32 dims[ndim],
float32 data.

Run with Debian's python3-torch:  /usr/bin/python3 tests/reference/mtp_reference.py
"""
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

L, C, NH, NG, HS, FF, V, B, T = 2, 32, 4, 2, 8, 48, 64, 2, 8
D, FACTOR = 2, 0.3
EPS, BASE = 1e-5, 10000.0


def rms_norm(x, w):
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)) * w


def rope_cos_sin(T, dim):
    inv_freq = 1.0 / (BASE ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    freqs = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq)
    return freqs.cos(), freqs.sin()


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x, cos, sin):
    c = torch.cat((cos, cos), -1).double()
    s = torch.cat((sin, sin), -1).double()
    return x * c + rotate_half(x) * s


def roll_tensor(tensor, shifts=-1, dims=-1):
    """multi_token_prediction.py roll_tensor without CP or packed sequences"""
    rolled_tensor = torch.roll(tensor, shifts=shifts, dims=dims)
    rolled_tensor.select(dims, shifts).fill_(0)
    return rolled_tensor, rolled_tensor.sum()


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "mtp_tiny.fixture")
    g = torch.Generator().manual_seed(4321)

    def rnd(*shape, std=0.2, mean=0.0):
        return (mean + std * torch.randn(*shape, generator=g, dtype=torch.float64)).float().double().requires_grad_()

    P = {"model.embed_tokens.weight": rnd(V, C, std=1.0)}

    def layer_params(l):
        h = f"model.layers.{l}."
        P[h + "input_layernorm.weight"] = rnd(C, std=0.1, mean=1.0)
        P[h + "self_attn.qkv_proj.weight"] = rnd((NH + 2 * NG) * HS, C)
        P[h + "self_attn.o_proj.weight"] = rnd(C, NH * HS)
        P[h + "post_attention_layernorm.weight"] = rnd(C, std=0.1, mean=1.0)
        P[h + "mlp.gate_up_proj.weight"] = rnd(2 * FF, C)
        P[h + "mlp.down_proj.weight"] = rnd(C, FF)

    for l in range(L):
        layer_params(l)
    P["model.norm.weight"] = rnd(C, std=0.1, mean=1.0)
    P["lm_head.weight"] = rnd(V, C)
    for k in range(D):
        h = f"model.layers.{L + k}."
        P[h + "enorm.weight"] = rnd(C, std=0.1, mean=1.0)
        P[h + "hnorm.weight"] = rnd(C, std=0.1, mean=1.0)
        P[h + "eh_proj.weight"] = rnd(C, 2 * C)
        layer_params(L + k)
        P[h + "shared_head.norm.weight"] = rnd(C, std=0.1, mean=1.0)

    tokens = torch.randint(0, V, (B, T), generator=g)
    targets = torch.randint(0, V, (B, T), generator=g)
    cos, sin = rope_cos_sin(T, HS)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    rep = NH // NG

    def transformer_layer(x, l):
        h = f"model.layers.{l}."
        a = rms_norm(x, P[h + "input_layernorm.weight"])
        q, k, v = F.linear(a, P[h + "self_attn.qkv_proj.weight"]).split([NH * HS, NG * HS, NG * HS], -1)
        q = apply_rope(q.view(B, T, NH, HS).transpose(1, 2), cos, sin)
        k = apply_rope(k.view(B, T, NG, HS).transpose(1, 2), cos, sin)
        kk = k.repeat_interleave(rep, dim=1)
        vv = v.view(B, T, NG, HS).transpose(1, 2).repeat_interleave(rep, dim=1)
        s = (q @ kk.transpose(-1, -2)) / math.sqrt(HS)
        s = s.masked_fill(~mask, float("-inf"))
        y = (s.softmax(-1) @ vv).transpose(1, 2).reshape(B, T, NH * HS)
        x = x + F.linear(y, P[h + "self_attn.o_proj.weight"])
        m = rms_norm(x, P[h + "post_attention_layernorm.weight"])
        gate, up = F.linear(m, P[h + "mlp.gate_up_proj.weight"]).chunk(2, dim=-1)
        return x + F.linear(F.silu(gate) * up, P[h + "mlp.down_proj.weight"])

    embedding = lambda ids: P["model.embed_tokens.weight"][ids]
    output_layer = lambda x: F.linear(x, P["lm_head.weight"])

    def xent(labels, logits):  # compute_language_model_loss: per token, (B, T)
        return F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), reduction="none").view(B, T)

    # the decoder, its final layernorm in the block
    x = embedding(tokens)
    for l in range(L):
        x = transformer_layer(x, l)
    hidden_states = rms_norm(x, P["model.norm.weight"])

    # MultiTokenPredictionBlock.forward: the depths in sequence
    input_ids, hs_list, h = tokens, [], hidden_states
    for k in range(D):
        p = f"model.layers.{L + k}."
        input_ids, _ = roll_tensor(input_ids, shifts=-1, dims=-1)
        decoder_input = embedding(input_ids)
        e = rms_norm(decoder_input, P[p + "enorm.weight"])
        hh = rms_norm(h, P[p + "hnorm.weight"])
        h = F.linear(torch.cat((e, hh), -1), P[p + "eh_proj.weight"])
        h = transformer_layer(h, L + k)
        h = rms_norm(h, P[p + "shared_head.norm.weight"])
        hs_list.append(h)

    # process_mtp_loss (training, not calculate_per_token_loss)
    mtp_labels, loss_mask = targets.clone(), torch.ones(B, T, dtype=torch.float64)
    objective_mtp, mtp_losses = 0, []
    for k in range(D):
        mtp_logits = output_layer(hs_list[k])
        mtp_labels, _ = roll_tensor(mtp_labels, shifts=-1, dims=-1)
        loss_mask, num_tokens = roll_tensor(loss_mask, shifts=-1, dims=-1)
        mtp_loss = loss_mask * xent(mtp_labels, mtp_logits)
        mtp_losses.append(torch.sum(mtp_loss) / num_tokens.clamp(min=1))
        mtp_loss_scale = FACTOR / D
        objective_mtp = objective_mtp + mtp_loss_scale * mtp_loss.sum() / num_tokens.clamp(min=1)

    loss = xent(targets, output_layer(hidden_states)).sum() / (B * T)  # the main loss
    (loss + objective_mtp).backward()

    recs = [("config", torch.tensor([L, C, NH, NG, HS, FF, V, B, T, D], dtype=torch.float64)),
            ("mtp_factor", torch.tensor([FACTOR])), ("norm_eps", torch.tensor([EPS])),
            ("rope_base", torch.tensor([BASE])), ("tokens", tokens.double()), ("targets", targets.double()),
            ("loss", loss.detach().reshape(1)), ("mtp_loss", torch.stack([t.detach() for t in mtp_losses]))]
    recs += [(n, p.detach()) for n, p in P.items()]
    recs += [("grad." + n, p.grad) for n, p in P.items()]
    with open(out + ".tmp", "wb") as f:
        f.write(b"MTCFIX1\n")
        f.write(struct.pack("<i", len(recs)))
        for name, t in recs:
            nb = name.encode()
            f.write(struct.pack("<i", len(nb)) + nb)
            f.write(struct.pack("<i", t.dim()) + struct.pack("<%di" % t.dim(), *t.shape))
            f.write(t.detach().contiguous().float().numpy().astype("<f4").tobytes())
    os.replace(out + ".tmp", out)
    print(f"wrote {out}: {len(recs)} records, loss {loss.item():.6f}, mtp {[round(t.item(), 6) for t in mtp_losses]}")


if __name__ == "__main__":
    main()
