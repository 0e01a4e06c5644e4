#!/usr/bin/python3
"""tests/reference/gpt2_reference.py - writes the GPT-2 fixture that
tests/model/test_gpt_fixture.c compares mtc's model with.

A tiny GPT-2 (pre-LN, tied embedding, vocabulary padded with rows that the
softmax covers as Megatron's does, tanh GELU, LayerNorm eps 1e-5, no dropout)
written with plain torch operations in float64, with every parameter random
(LayerNorm weights and biases too, so each gradient is exercised). The fixture holds the config,
the weights under mtc's registry names (linear weights as nn.Linear: (out,
in)), the tokens and targets, the logits, the mean loss and the gradient of
every parameter.

Format (little-endian): b"MTCFIX1\\n", int32 count, then count records of
int32 name_len, name, int32 ndim, int32 dims[ndim], float32 data.

Run with Debian's python3-torch:  /usr/bin/python3 tests/reference/gpt2_reference.py
(writes tests/reference/gpt2_tiny.fixture; the C tests do not need PyTorch).
"""
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

L, C, NH, FF, T, MAXPOS, V, VP, B = 2, 16, 2, 64, 8, 10, 50, 64, 2
HS = C // NH


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "gpt2_tiny.fixture")
    g = torch.Generator().manual_seed(1234)

    def rnd(*shape, std=0.1, mean=0.0):
        # rounded to float32 first: the C model computes with exactly these weights
        return (mean + std * torch.randn(*shape, generator=g, dtype=torch.float64)).float().double().requires_grad_()

    P = {"wte.weight": rnd(VP, C, std=0.3), "wpe.weight": rnd(MAXPOS, C, std=0.3)}
    for l in range(L):
        h = f"h.{l}."
        P[h + "ln_1.weight"] = rnd(C, mean=1.0)
        P[h + "ln_1.bias"] = rnd(C)
        P[h + "attn.c_attn.weight"] = rnd(3 * C, C, std=0.3)
        P[h + "attn.c_attn.bias"] = rnd(3 * C)
        P[h + "attn.c_proj.weight"] = rnd(C, C, std=0.3)
        P[h + "attn.c_proj.bias"] = rnd(C)
        P[h + "ln_2.weight"] = rnd(C, mean=1.0)
        P[h + "ln_2.bias"] = rnd(C)
        P[h + "mlp.c_fc.weight"] = rnd(FF, C, std=0.3)
        P[h + "mlp.c_fc.bias"] = rnd(FF)
        P[h + "mlp.c_proj.weight"] = rnd(C, FF, std=0.3)
        P[h + "mlp.c_proj.bias"] = rnd(C)
    P["ln_f.weight"] = rnd(C, mean=1.0)
    P["ln_f.bias"] = rnd(C)

    tokens = torch.randint(0, V, (B, T), generator=g)
    targets = torch.randint(0, V, (B, T), generator=g)

    x = P["wte.weight"][tokens] + P["wpe.weight"][:T].unsqueeze(0)
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        h = f"h.{l}."
        a = F.layer_norm(x, (C,), P[h + "ln_1.weight"], P[h + "ln_1.bias"], 1e-5)
        qkv = F.linear(a, P[h + "attn.c_attn.weight"], P[h + "attn.c_attn.bias"])
        q, k, v = qkv.split(C, dim=-1)
        q = q.view(B, T, NH, HS).transpose(1, 2)
        k = k.view(B, T, NH, HS).transpose(1, 2)
        v = v.view(B, T, NH, HS).transpose(1, 2)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(HS)
        s = s.masked_fill(~mask, float("-inf"))
        y = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, P[h + "attn.c_proj.weight"], P[h + "attn.c_proj.bias"])
        m = F.layer_norm(x, (C,), P[h + "ln_2.weight"], P[h + "ln_2.bias"], 1e-5)
        m = F.gelu(F.linear(m, P[h + "mlp.c_fc.weight"], P[h + "mlp.c_fc.bias"]), approximate="tanh")
        x = x + F.linear(m, P[h + "mlp.c_proj.weight"], P[h + "mlp.c_proj.bias"])
    x = F.layer_norm(x, (C,), P["ln_f.weight"], P["ln_f.bias"], 1e-5)
    logits = x @ P["wte.weight"].t()  # (B, T, VP); the softmax covers the padding, as Megatron's
    loss = F.cross_entropy(logits.reshape(-1, VP), targets.reshape(-1))
    loss.backward()

    recs = [("config", torch.tensor([L, C, NH, FF, T, MAXPOS, V, VP, B], dtype=torch.float64)),
            ("tokens", tokens.double()), ("targets", targets.double()),
            ("logits", logits.detach()), ("loss", loss.detach().reshape(1))]
    recs += [(n, p.detach()) for n, p in P.items()]
    recs += [("grad." + n, p.grad) for n, p in P.items()]
    with open(out + ".tmp", "wb") as f:
        f.write(b"MTCFIX1\n")
        f.write(struct.pack("<i", len(recs)))
        for name, t in recs:
            nb = name.encode()
            f.write(struct.pack("<i", len(nb)) + nb)
            f.write(struct.pack("<i", t.dim()) + struct.pack("<%di" % t.dim(), *t.shape))
            f.write(t.contiguous().float().numpy().astype("<f4").tobytes())
    os.replace(out + ".tmp", out)
    print(f"wrote {out}: loss {loss.item():.6f}")


if __name__ == "__main__":
    main()
