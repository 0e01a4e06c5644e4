#!/usr/bin/python3
"""bench/train_step.py - one training step (forward + backward + AdamW) of a
GPT-2 or a Llama in PyTorch on CPU, timed as a careful user runs it; the
PyTorch half of bench/train_vs_pytorch.sh.

Same models as mtc train (src/model/family.c, src/model/block.c):
- gpt: pre-LN GPT-2, learned positions, biases, tanh GELU MLP (ffn 4C),
  tied embedding.
- llama (--family llama): pre-norm RMSNorm (eps 1e-5, weight only), RoPE
  (base 10000, every head channel, the two halves rotated as Hugging Face's
  rotate_half; cos/sin computed once), no position table, one fused qkv
  projection [q | k | v] with NG key/value heads (--groups; GQA repeats each
  group's k/v for its NH/NG query heads), SwiGLU MLP with one fused gate_up
  projection [gate | up] of 2F rows (--ffn F), silu(gate) * up, no biases,
  untied lm_head.
Both: vocabulary padded (the softmax covers the padded columns, as
Megatron's), init normal(0, 0.02) with the attention output and MLP output
projections scaled by 1/sqrt(2L), norms at 1 (and 0), no dropout, AdamW
(foreach) with weight decay on 2-D weights. Prints
  "params N" (the trainable parameter count),
  "pytorch ms_per_step ..." (best and median step),
  "times t1 t2 ..." (every timed step, ms, sorted).

With --bf16 the forward runs under torch.autocast("cpu", dtype=torch.bfloat16)
(fp32 weights and AdamW, bf16 matmuls and activations where autocast casts),
the PyTorch user's bf16 mixed precision on CPU.

usage: train_step.py LAYERS HIDDEN HEADS SEQ VOCAB PADDED_VOCAB MICRO_BATCH THREADS STEPS
                     [--family gpt|llama] [--groups NG] [--ffn F] [--bf16]
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def attention(q, k, v, mask):
    """causal softmax attention of (B, NH, T, HS) heads -> (B, T, NH*HS)"""
    B, NH, T, HS = q.shape
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(HS))
    att = att.masked_fill(mask[:T, :T] == 0, float("-inf")).softmax(dim=-1)
    return (att @ v).transpose(1, 2).contiguous().view(B, T, NH * HS)


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x, mask):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q = q.view(B, T, self.NH, C // self.NH).transpose(1, 2)
        k = k.view(B, T, self.NH, C // self.NH).transpose(1, 2)
        v = v.view(B, T, self.NH, C // self.NH).transpose(1, 2)
        x = x + self.c_proj(attention(q, k, v, mask))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, NH, T, Vp):
        super().__init__()
        self.wte = nn.Embedding(Vp, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList([Block(C, NH) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T)))
        init_weights(self, L, ("c_proj.weight", "mlp_proj.weight"))

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.h:
            x = b(x, self.mask)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


class RMSNorm(nn.Module):
    """Hugging Face's LlamaRMSNorm (torch 1.13 has no nn.RMSNorm)"""

    def __init__(self, C, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(C))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self, C, NH, NG, FF):
        super().__init__()
        self.NH, self.NG, self.HS, self.FF = NH, NG, C // NH, FF
        self.input_layernorm = RMSNorm(C)
        self.qkv_proj = nn.Linear(C, (NH + 2 * NG) * self.HS, bias=False)
        self.o_proj = nn.Linear(NH * self.HS, C, bias=False)
        self.post_attention_layernorm = RMSNorm(C)
        self.gate_up_proj = nn.Linear(C, 2 * FF, bias=False)
        self.down_proj = nn.Linear(FF, C, bias=False)

    def forward(self, x, mask, cos, sin):
        B, T, C = x.shape
        NH, NG, HS = self.NH, self.NG, self.HS
        q, k, v = self.qkv_proj(self.input_layernorm(x)).split([NH * HS, NG * HS, NG * HS], dim=2)
        q = q.view(B, T, NH, HS).transpose(1, 2)
        k = k.view(B, T, NG, HS).transpose(1, 2)
        v = v.view(B, T, NG, HS).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if NG < NH:  # Hugging Face's repeat_kv: query head h reads group h // (NH/NG)
            r = NH // NG
            k = k[:, :, None].expand(B, NG, r, T, HS).reshape(B, NH, T, HS)
            v = v[:, :, None].expand(B, NG, r, T, HS).reshape(B, NH, T, HS)
        x = x + self.o_proj(attention(q, k, v, mask))
        gate, up = self.gate_up_proj(self.post_attention_layernorm(x)).chunk(2, dim=-1)
        return x + self.down_proj(F.silu(gate) * up)


class Llama(nn.Module):
    def __init__(self, L, C, NH, NG, FF, T, Vp, base=10000.0):
        super().__init__()
        HS = C // NH
        self.embed_tokens = nn.Embedding(Vp, C)
        self.layers = nn.ModuleList([LlamaBlock(C, NH, NG, FF) for _ in range(L)])
        self.norm = RMSNorm(C)
        self.lm_head = nn.Linear(C, Vp, bias=False)
        self.register_buffer("mask", torch.tril(torch.ones(T, T)))
        inv_freq = 1.0 / (base ** (torch.arange(0, HS, 2, dtype=torch.int64).float() / HS))
        freqs = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq)  # (T, HS/2)
        self.register_buffer("cos", torch.cat((freqs.cos(), freqs.cos()), -1))  # (T, HS)
        self.register_buffer("sin", torch.cat((freqs.sin(), freqs.sin()), -1))
        init_weights(self, L, ("o_proj.weight", "down_proj.weight"))

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.embed_tokens(idx)
        cos, sin = self.cos[:T], self.sin[:T]
        for b in self.layers:
            x = b(x, self.mask, cos, sin)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def init_weights(model, L, out_proj):
    """normal(0, 0.02) for 2-D weights, 0.02/sqrt(2L) for the output projections, biases 0"""
    for n, p in model.named_parameters():
        if p.dim() == 2:
            std = 0.02 / math.sqrt(2 * L) if n.endswith(out_proj) else 0.02
            nn.init.normal_(p, 0.0, std)
        elif n.endswith("bias"):
            nn.init.zeros_(p)


def main():
    ap = argparse.ArgumentParser(description="one PyTorch training step, timed")
    for a in ("layers", "hidden", "heads", "seq", "vocab", "padded_vocab", "micro_batch", "threads", "steps"):
        ap.add_argument(a, type=int)
    ap.add_argument("--family", choices=("gpt", "llama"), default="gpt")
    ap.add_argument("--groups", type=int, default=0, help="key/value heads (llama; default: heads)")
    ap.add_argument("--ffn", type=int, default=0, help="SwiGLU hidden size (llama; default int(8h/3/64)*64)")
    ap.add_argument("--bf16", action="store_true", help="forward under torch.autocast(cpu, bfloat16)")
    a = ap.parse_args()
    L, C, NH, T, V, Vp, B = a.layers, a.hidden, a.heads, a.seq, a.vocab, a.padded_vocab, a.micro_batch
    torch.set_num_threads(a.threads)
    torch.manual_seed(1234)
    if a.family == "gpt":
        model = GPT(L, C, NH, T, Vp)
    else:
        NG = a.groups or NH
        FF = a.ffn or int(8 * C / 3 / 64) * 64
        if C % NH or NH % NG:
            ap.error("hidden %d must be divisible by heads %d, and heads by groups %d" % (C, NH, NG))
        model = Llama(L, C, NH, NG, FF, T, Vp)
    print("params %d" % sum(p.numel() for p in model.parameters()))
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}], lr=1e-4, foreach=True)
    idx = torch.randint(0, V, (B, T))
    tgt = torch.randint(0, V, (B, T))
    times = []
    for _ in range(a.steps + 2):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if a.bf16:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(idx, tgt)
        else:
            loss = model(idx, tgt)
        loss.backward()
        opt.step()
        times.append((time.perf_counter() - t0) * 1e3)
    times = sorted(times[2:])
    print("pytorch ms_per_step %.1f loss %.4f (best of %d; median %.1f)"
          % (times[0], loss.item(), len(times), times[len(times) // 2]))
    print("times " + " ".join("%.1f" % t for t in times))


if __name__ == "__main__":
    main()
