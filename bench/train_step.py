#!/usr/bin/python3
"""bench/train_step.py - one GPT-2 training step (forward + backward + AdamW)
in PyTorch on CPU, timed as a careful user runs it; the PyTorch half of
bench/train_vs_pytorch.sh.

Same model as mtc train: pre-LN GPT-2, tied embedding, vocabulary padded
(the softmax covers the padded columns, as Megatron's), tanh GELU, init normal(0, 0.02) with the
residual projections scaled by 1/sqrt(2L), no dropout, AdamW (foreach) with
weight decay on 2-D weights. Prints one line: "pytorch ms_per_step N ..." with the best step time.

usage: train_step.py LAYERS HIDDEN HEADS SEQ VOCAB PADDED_VOCAB MICRO_BATCH THREADS STEPS
"""
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


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
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(mask[:T, :T] == 0, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, NH, T, Vp):
        super().__init__()
        self.wte = nn.Embedding(Vp, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList([Block(C, NH) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T)))
        for n, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if n.endswith("c_proj.weight") or n.endswith("mlp_proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)
            elif n.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets, V):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.h:
            x = b(x, self.mask)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def main():
    L, C, NH, T, V, Vp, B, threads, steps = (int(a) for a in sys.argv[1:10])
    torch.set_num_threads(threads)
    torch.manual_seed(1234)
    model = GPT(L, C, NH, T, Vp)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}], lr=1e-4, foreach=True)
    idx = torch.randint(0, V, (B, T))
    tgt = torch.randint(0, V, (B, T))
    times = []
    for _ in range(steps + 2):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(idx, tgt, V)
        loss.backward()
        opt.step()
        times.append((time.perf_counter() - t0) * 1e3)
    times = sorted(times[2:])
    print("pytorch ms_per_step %.1f loss %.4f (best of %d; median %.1f)"
          % (times[0], loss.item(), len(times), times[len(times) // 2]))
    print("times " + " ".join("%.1f" % t for t in times))


if __name__ == "__main__":
    main()
