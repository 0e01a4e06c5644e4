#!/usr/bin/python3
"""tests/reference/nn_reference.py - writes the kernel fixture that
tests/nn/test_nn_fixture.c compares mtc's nn kernels with.

PyTorch (float64) results for: LayerNorm (eps 1e-5) forward and backward,
tanh GELU forward and backward, causal multi-head attention from a fused
[q | k | v] tensor forward and backward (with the row log-sum-exp), and
cross-entropy over a padded vocabulary (mean over tokens) with its logit
gradient. Inputs are rounded
to float32 first, because the C kernels read exactly those values.

Format (little-endian, as gpt2_reference.py): b"MTCFIX1\\n", int32 count,
then count records of int32 name_len, name, int32 ndim, int32 dims[ndim],
float32 data.

Run with Debian's python3-torch:  /usr/bin/python3 tests/reference/nn_reference.py
(writes tests/reference/nn_tiny.fixture; the C test does not need PyTorch).
"""
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "nn_tiny.fixture")
    g = torch.Generator().manual_seed(4321)

    def rnd(*shape, std=1.0, mean=0.0):
        return (mean + std * torch.randn(*shape, generator=g, dtype=torch.float64)).float().double().requires_grad_()

    recs = []

    def put(name, t):
        recs.append((name, t.detach().double()))

    # layernorm: (N, C)
    N, C = 5, 12
    x, w, b, dy = rnd(N, C, std=2.0, mean=0.3), rnd(C), rnd(C), rnd(N, C)
    y = F.layer_norm(x, (C,), w, b, eps=1e-5)
    y.backward(dy)
    for n, t in [("ln.x", x), ("ln.w", w), ("ln.b", b), ("ln.dy", dy), ("ln.y", y)]:
        put(n, t)
    for n, t in [("ln.dx", x), ("ln.dw", w), ("ln.db", b)]:
        put(n, t.grad)

    # gelu (tanh form)
    x, dy = rnd(97, std=3.0), rnd(97)
    y = F.gelu(x, approximate="tanh")
    y.backward(dy)
    put("gelu.x", x), put("gelu.dy", dy), put("gelu.y", y), put("gelu.dx", x.grad)

    # causal attention: qkv (B, T, 3*NH*HS) = [q | k | v], heads contiguous
    B, T, NH, HS = 2, 7, 3, 4
    Cm = NH * HS
    qkv, dy = rnd(B, T, 3 * Cm), rnd(B, T, Cm)
    q, k, v = qkv.split(Cm, dim=2)
    q, k, v = (z.view(B, T, NH, HS).transpose(1, 2) for z in (q, k, v))
    s = q @ k.transpose(-2, -1) / math.sqrt(HS)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    p = s.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    y = (p @ v).transpose(1, 2).reshape(B, T, Cm)
    y.backward(dy)
    put("att.dims", torch.tensor([B, T, NH, HS], dtype=torch.float64))
    put("att.qkv", qkv), put("att.dy", dy), put("att.y", y), put("att.p", p), put("att.dqkv", qkv.grad)
    # per-row log-sum-exp of the masked scaled scores (B, NH, T), what the tiled kernel saves
    put("att.lse", torch.logsumexp(s.masked_fill(~mask, float("-inf")), dim=-1))

    # cross-entropy, mean over tokens, vocabulary V padded to Vp
    N, V, Vp = 6, 11, 16
    logits = rnd(N, V, std=3.0)
    targets = torch.randint(0, V, (N,), generator=g)
    losses = F.cross_entropy(logits, targets, reduction="none")
    losses.mean().backward()
    put("xent.dims", torch.tensor([N, V, Vp], dtype=torch.float64))
    put("xent.logits", logits), put("xent.targets", targets.double())
    put("xent.losses", losses), put("xent.dlogits", logits.grad)

    with open(out, "wb") as f:
        f.write(b"MTCFIX1\n")
        f.write(struct.pack("<i", len(recs)))
        for name, t in recs:
            nb = name.encode()
            f.write(struct.pack("<i", len(nb)) + nb)
            f.write(struct.pack("<i", t.dim()) + struct.pack("<%di" % t.dim(), *t.shape))
            f.write(t.float().contiguous().numpy().tobytes())
    print("wrote %s (%d records)" % (out, len(recs)))


if __name__ == "__main__":
    main()
