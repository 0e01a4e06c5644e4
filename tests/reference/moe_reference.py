#!/usr/bin/python3
"""tests/reference/moe_reference.py - writes tests/reference/moe_tiny.fixture: one MoE layer
(Megatron-LM core_v0.18's router, losses, capacity and experts, written here with plain torch
operations in float64 on float32 weights) in several configurations, each with its forward
output and the gradients of

    objective = sum(out * dout) + g * (aux_loss + z_loss)

which is what mtc's moe_layer_backward computes with moe_pass.aux_scale = g.

Layer: hidden 16, 4 experts, top-k 2 (unless a case says otherwise), expert ffn 8, tokens
B 2 x T 6 = 12 in (B, T) order. Experts are the model's MLP: GELU (tanh) with biases, or SwiGLU
([gate | up] rows of fc1) without. The router's probability multiplies the expert output
including fc2's bias: p * (fc2(act(fc1 x)) + b2). A shared expert (case "shared") is a dense MLP
of its own width added to the routed sum.

Routing as Megatron's topk_routing_with_score_function; capacity as apply_router_token_dropping
with cap = ceil(N k / E * factor); probs policy keeps each expert's cap highest-probability
tokens, position its first cap (ties go to the lower index in every top-k here); padding to
capacity adds zero-probability rows, which change no value. Aux loss as
switch_load_balancing_loss_func with its own top-k over softmax (or normalised sigmoid) scores:
coeff * E / (k T^2) * sum_e P_e n_e; seq_aux_loss per sequence, divided by B. z-loss: coeff *
mean(logsumexp(logits)^2).

Format (as gpt2_reference.py): b"MTCFIX1\\n", int32 count, then records (int32 name length,
name, int32 ndim, int32 dims, float32 data). Case c's records are c/cfg (the numbers below),
c/x, c/dout, c/router, c/bias, c/e<i>.fc1w, .fc1b, .fc2w, .fc2b, c/s.fc1w ... (shared), and
results c/out, c/din, c/drouter, c/de<i>.* (gradients), c/aux, c/z, c/counts (rows per expert).
cfg = [E, k, F, swiglu, bias, score(0 softmax, 1 sigmoid), pre_softmax, scaling, num_groups,
group_topk, lb(0 aux, 1 seq, 3 none), aux_coeff, z_coeff, capacity, drop(0 probs, 1 position),
pad, shared_ffn, g, expert_bias_on].
"""
import math
import struct
import sys

import torch

torch.set_default_dtype(torch.float64)
C, B, T = 16, 2, 6
N = B * T


def gelu(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def act(h, swiglu, F):
    if swiglu:
        g, u = h[:, :F], h[:, F:]
        return g * torch.sigmoid(g) * u
    return gelu(h)


def topk_lower(v, k):
    # ties to the lower index: sort by (-value, index)
    idx = sorted(range(v.shape[0]), key=lambda e: (-float(v[e]), e))[:k]
    return idx


def group_topk_row(v, k, G, gk):
    E = v.shape[0]
    per = E // G
    gs = []
    for g in range(G):
        t = topk_lower(v[g * per:(g + 1) * per], k // gk)
        gs.append(sum(float(v[g * per + i]) for i in t))
    chosen = sorted(range(G), key=lambda g: (-gs[g], g))[:gk]
    masked = v.clone()
    for e in range(E):
        if e // per not in chosen:
            masked[e] = -float("inf")
    return topk_lower(masked, k)


def route(logits, c, bias):
    """sel (N, k) indices and probs (N, k) as torch tensors with autograd."""
    E, k = c["E"], c["k"]
    sels, probs = [], []
    for n in range(N):
        l = logits[n]
        pick = (lambda v: group_topk_row(v, k, c["groups"], c["gtopk"])) if c["gtopk"] else \
            (lambda v: topk_lower(v, k))
        if c["score"] == 0 and c["pre"]:
            s = torch.softmax(l, -1)
            idx = pick(s.detach())
            p = s[idx]
        elif c["score"] == 0:
            idx = pick(l.detach())
            p = torch.softmax(l[idx], -1)
        else:
            s = torch.sigmoid(l)
            idx = pick((s + (bias if bias is not None else 0)).detach())
            p = s[idx]
            if k > 1:
                p = p / (p.sum() + 1e-20)
        if c["scaling"]:
            p = p * c["scaling"]
        sels.append(idx)
        probs.append(p)
    return sels, torch.stack(probs)


def capacity_mask(sels, probs, c):
    E, k = c["E"], c["k"]
    kept = [[1] * k for _ in range(N)]
    if not c["cap"]:
        return kept
    cap = math.ceil((N * k / E) * c["cap"])
    if cap > N:
        return kept
    for e in range(E):
        items = [(n, j) for n in range(N) for j in range(k) if sels[n][j] == e]
        if len(items) <= cap:
            continue
        if c["drop"] == 0:
            items.sort(key=lambda t: (-float(probs[t[0], t[1]]), t[0] * k + t[1]))
        for (n, j) in items[cap:]:
            kept[n][j] = 0
    return kept


def aux_loss(logits, c):
    E, k = c["E"], c["k"]
    if c["score"] == 0:
        s = torch.softmax(logits, -1)
    else:
        q = torch.sigmoid(logits)
        s = q / (q.sum(-1, keepdim=True) + 1e-20)
    groups = B if c["lb"] == 1 else 1
    Tn = N // groups
    total = 0.0
    for g in range(groups):
        rows = s[g * Tn:(g + 1) * Tn]
        cnt = torch.zeros(E)
        for n in range(Tn):
            for e in topk_lower(rows[n].detach(), k):
                cnt[e] += 1
        total = total + (rows.sum(0) * cnt).sum() * (E * c["aux"] / (k * Tn * Tn))
    return total / groups


def mlp(x, w1, b1, w2, b2, swiglu, F):
    h = x @ w1.T + (b1 if b1 is not None else 0)
    return act(h, swiglu, F) @ w2.T + (b2 if b2 is not None else 0)


def run_case(name, c, gen, recs):
    E, k, F = c["E"], c["k"], c["F"]
    F1 = 2 * F if c["swiglu"] else F

    def rnd(*shape, std=1.0):
        return (torch.randn(*shape, generator=gen, dtype=torch.float32) * std).double()

    x = rnd(N, C).requires_grad_()
    dout = rnd(N, C, std=0.5)
    router = rnd(E, C, std=0.5).requires_grad_()
    bias = rnd(E, std=0.05) if c["ebias"] else None
    ew = []
    for e in range(E):
        w1 = rnd(F1, C, std=0.3).requires_grad_()
        b1 = rnd(F1, std=0.1).requires_grad_() if c["bias"] else None
        w2 = rnd(C, F, std=0.3).requires_grad_()
        b2 = rnd(C, std=0.1).requires_grad_() if c["bias"] else None
        ew.append((w1, b1, w2, b2))
    sw = None
    if c["shared"]:
        SF = c["shared"]
        SF1 = 2 * SF if c["swiglu"] else SF
        sw = (rnd(SF1, C, std=0.3).requires_grad_(),
              rnd(SF1, std=0.1).requires_grad_() if c["bias"] else None,
              rnd(C, SF, std=0.3).requires_grad_(),
              rnd(C, std=0.1).requires_grad_() if c["bias"] else None)
    logits = x @ router.T
    sels, probs = route(logits, c, bias)
    kept = capacity_mask(sels, probs.detach(), c)
    keep = torch.tensor(kept, dtype=torch.float64)
    probs = probs * keep
    out = torch.zeros(N, C)
    counts = [0] * E
    for e in range(E):
        w1, b1, w2, b2 = ew[e]
        y = mlp(x, w1, b1, w2, b2, c["swiglu"], F)
        pe = torch.zeros(N)
        for n in range(N):
            for j in range(k):
                if sels[n][j] == e and kept[n][j]:
                    pe = pe + torch.nn.functional.one_hot(torch.tensor(n), N).double() * probs[n, j]
                    counts[e] += 1
        out = out + pe[:, None] * y
    if c["pad"]:
        cap = math.ceil((N * k / E) * c["cap"])
        counts = [min(cap, N)] * E if cap <= N else [N] * E
    if sw is not None:
        out = out + mlp(x, sw[0], sw[1], sw[2], sw[3], c["swiglu"], c["shared"])
    aux = aux_loss(logits, c) if c["lb"] != 3 and c["aux"] > 0 else torch.tensor(0.0)
    z = c["z"] * (torch.logsumexp(logits, -1) ** 2).mean() if c["z"] > 0 else torch.tensor(0.0)
    obj = (out * dout).sum() + c["g"] * (aux + z)
    obj.backward()

    def put(n, t):
        recs.append((name + "/" + n, t.detach().to(torch.float32).contiguous()))

    cfg = [E, k, F, c["swiglu"], c["bias"], c["score"], c["pre"], c["scaling"], c["groups"],
           c["gtopk"], c["lb"], c["aux"], c["z"], c["cap"], c["drop"], c["pad"], c["shared"],
           c["g"], c["ebias"]]
    put("cfg", torch.tensor(cfg, dtype=torch.float64))
    put("x", x)
    put("dout", dout)
    put("router", router)
    if bias is not None:
        put("bias", bias)
    for e, (w1, b1, w2, b2) in enumerate(ew):
        put("e%d.fc1w" % e, w1)
        put("e%d.fc2w" % e, w2)
        put("de%d.fc1w" % e, w1.grad)
        put("de%d.fc2w" % e, w2.grad)
        if b1 is not None:
            put("e%d.fc1b" % e, b1)
            put("e%d.fc2b" % e, b2)
            put("de%d.fc1b" % e, b1.grad)
            put("de%d.fc2b" % e, b2.grad)
    if sw is not None:
        for nm, t in zip(("fc1w", "fc1b", "fc2w", "fc2b"), sw):
            if t is not None:
                put("s." + nm, t)
                put("ds." + nm, t.grad)
    put("out", out)
    put("din", x.grad)
    put("drouter", router.grad)
    put("aux", aux.reshape(1))
    put("z", z.reshape(1))
    put("counts", torch.tensor(counts, dtype=torch.float64))


BASE = dict(E=4, k=2, F=8, swiglu=0, bias=1, score=0, pre=0, scaling=0.0, groups=0, gtopk=0,
            lb=0, aux=0.01, z=0.001, cap=0.0, drop=0, pad=0, shared=0, g=0.5, ebias=0)
CASES = [
    ("top2", {}),
    ("presoftmax", dict(pre=1, lb=1, aux=0.05)),
    ("sigmoid_bias", dict(score=1, ebias=1, scaling=2.5, swiglu=1, bias=0, aux=0.0, lb=3)),
    ("sigmoid_aux", dict(score=1, swiglu=1, bias=0, k=3)),
    ("cap_probs", dict(cap=0.5, drop=0)),
    ("cap_position", dict(cap=0.5, drop=1)),
    ("cap_pad", dict(cap=1.5, pad=1)),
    ("group", dict(groups=2, gtopk=1, pre=1)),
    ("shared", dict(shared=12, swiglu=1, bias=0)),
    ("top1", dict(k=1, pre=1, cap=1.0, drop=1)),
]


def main():
    out_path = sys.argv[1] if len(sys.argv) > 1 else "tests/reference/moe_tiny.fixture"
    gen = torch.Generator().manual_seed(1234)
    recs = []
    for name, over in CASES:
        c = dict(BASE)
        c.update(over)
        run_case(name, c, gen, recs)
    with open(out_path, "wb") as f:
        f.write(b"MTCFIX1\n")
        f.write(struct.pack("<i", len(recs)))
        for n, t in recs:
            nb = n.encode()
            f.write(struct.pack("<i", len(nb)) + nb)
            dims = list(t.shape)
            f.write(struct.pack("<i", len(dims)) + struct.pack("<%di" % len(dims), *dims))
            f.write(t.numpy().astype("<f4").tobytes())
    print("wrote %d records to %s" % (len(recs), out_path))


if __name__ == "__main__":
    main()
