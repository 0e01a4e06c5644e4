#!/usr/bin/python3
"""tests/reference/hf_reader.py - an independent reader of Hugging Face folders
written by `mtc export --format safetensors` (or any GPT-2 / Llama folder):
the safetensors container parsed by hand (8-byte little-endian header length,
JSON header, raw little-endian data; sharded folders through
model.safetensors.index.json), and GPT2LMHeadModel / LlamaForCausalLM written
in PyTorch on Hugging Face's conventions (Conv1D (in, out) weights and tanh
GELU for GPT-2; RMSNorm, RoPE rotating halves, grouped-query attention,
SwiGLU and an optional untied lm_head for Llama; for MixtralForCausalLM and
Qwen2MoeForCausalLM / Qwen3MoeForCausalLM the sparse MoE block: softmax
router, top-k, the top-k weights renormalised (Mixtral; the Qwens when
norm_topk_prob), dense mlp_only_layers, Qwen2-MoE's q/k/v biases and shared
expert scaled by sigmoid(shared_expert_gate); Qwen3ForCausalLM and
Qwen3-MoE's RMSNorm of each q and k head (q_norm, k_norm) before RoPE;
DeepseekV3ForCausalLM's multi-latent attention, YaRN and sigmoid router), in
float64. No `transformers` package is used.

    /usr/bin/python3 tests/reference/hf_reader.py DIR NAME TOKEN...

prints "NAME <count>" and the logits (tokens x vocab), the format of
tests/data/ckpt/hf_logits.txt. Regenerate that fixture with:
    d=$(mktemp -d); build/tests/test_ckpt_hf --export $d
    (for m in gpt2 llama mixtral qwen2moe qwen3 qwen3moe; do /usr/bin/python3 tests/reference/hf_reader.py $d/$m $m 3 17 42 5 60 11 0 33; done) > tests/data/ckpt/hf_logits.txt
"""
import json
import math
import os
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def read_safetensors(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b0, b1 = e["data_offsets"]
        buf = bytearray(data[base + b0 : base + b1])
        t = torch.frombuffer(buf, dtype=DTYPES[e["dtype"]]) if buf else torch.zeros(0)
        out[name] = t.reshape(e["shape"]).to(torch.float64)
    return out


def read_folder(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    tensors = {}
    files = (sorted(set(json.load(open(idx))["weight_map"].values()))
             if os.path.exists(idx) else ["model.safetensors"])
    for f in files:
        tensors.update(read_safetensors(os.path.join(d, f)))
    return json.load(open(os.path.join(d, "config.json"))), tensors


def causal_attention(q, k, v):  # (H, T, hd)
    T = q.shape[1]
    s = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
    s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def gpt2(cfg, w, ids):
    C, H = cfg["n_embd"], cfg["n_head"]
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    T = len(ids)
    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][:T]

    def ln(x, p):
        return torch.nn.functional.layer_norm(x, (C,), w[p + ".weight"], w[p + ".bias"], eps)

    def conv1d(x, p):  # Hugging Face Conv1D: x @ W + b, W stored (in, out)
        return x @ w[p + ".weight"] + w[p + ".bias"]

    def gelu_new(x):
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))

    for l in range(cfg["n_layer"]):
        p = "transformer.h.%d." % l
        qkv = conv1d(ln(x, p + "ln_1"), p + "attn.c_attn")
        q, k, v = (t.reshape(T, H, C // H).transpose(0, 1) for t in qkv.split(C, dim=-1))
        y = causal_attention(q, k, v).transpose(0, 1).reshape(T, C)
        x = x + conv1d(y, p + "attn.c_proj")
        x = x + conv1d(gelu_new(conv1d(ln(x, p + "ln_2"), p + "mlp.c_fc")), p + "mlp.c_proj")
    x = ln(x, "transformer.ln_f")
    return x @ w["transformer.wte.weight"].T  # tied head


def llama(cfg, w, ids):
    C, H = cfg["hidden_size"], cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads", H)
    hd = cfg.get("head_dim", C // H)
    eps, theta = cfg.get("rms_norm_eps", 1e-6), cfg.get("rope_theta", 10000.0)
    T = len(ids)
    x = w["model.embed_tokens.weight"][ids]

    def rms(x, p):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w[p + ".weight"]

    def lin(x, p):  # nn.Linear: x @ W.T (+ b), W stored (out, in)
        y = x @ w[p + ".weight"].T
        return y + w[p + ".bias"] if p + ".bias" in w else y

    def swiglu(h, p, names=("gate_proj", "up_proj", "down_proj")):
        return lin(torch.nn.functional.silu(lin(h, p + names[0])) * lin(h, p + names[1]), p + names[2])

    def mlp(h, l, p):
        mt = cfg["model_type"]
        sparse = mt == "mixtral" or (
            mt in ("qwen2_moe", "qwen3_moe") and l not in cfg.get("mlp_only_layers", []) and (l + 1) % cfg.get("decoder_sparse_step", 1) == 0)
        if not sparse:
            return swiglu(h, p + "mlp.")
        pre = p + ("block_sparse_moe." if mt == "mixtral" else "mlp.")
        k = cfg["num_experts_per_tok"]
        names = ("w1", "w3", "w2") if mt == "mixtral" else ("gate_proj", "up_proj", "down_proj")
        probs = torch.softmax(lin(h, pre + "gate"), -1)
        top, idx = probs.topk(k, -1)
        if mt == "mixtral" or cfg.get("norm_topk_prob"):
            top = top / top.sum(-1, keepdim=True)
        out = torch.zeros_like(h)
        for t in range(h.shape[0]):
            for j in range(k):
                out[t] += top[t, j] * swiglu(h[t], pre + "experts.%d." % int(idx[t, j]), names)
        if mt == "qwen2_moe":
            out = out + torch.sigmoid(lin(h, pre + "shared_expert_gate")) * swiglu(h, pre + "shared_expert.")
        return out

    mt = cfg["model_type"]
    inv = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()

    def rope(t):  # (heads, T, hd): rotate the two halves
        a, b = t[..., : hd // 2], t[..., hd // 2 :]
        return t * cos + torch.cat([-b, a], -1) * sin

    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        h = rms(x, p + "input_layernorm")
        q = lin(h, p + "self_attn.q_proj").reshape(T, H, hd)
        k = lin(h, p + "self_attn.k_proj").reshape(T, KV, hd)
        if mt in ("qwen3", "qwen3_moe"):  # RMSNorm over each head, before RoPE
            q, k = rms(q, p + "self_attn.q_norm"), rms(k, p + "self_attn.k_norm")
        q, k = q.transpose(0, 1), k.transpose(0, 1)
        v = lin(h, p + "self_attn.v_proj").reshape(T, KV, hd).transpose(0, 1)
        q, k = rope(q), rope(k)
        k, v = k.repeat_interleave(H // KV, 0), v.repeat_interleave(H // KV, 0)
        y = causal_attention(q, k, v).transpose(0, 1).reshape(T, H * hd)
        x = x + lin(y, p + "self_attn.o_proj")
        h = rms(x, p + "post_attention_layernorm")
        x = x + mlp(h, l, p)
    x = rms(x, "model.norm")
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    return x @ head.T


def yarn_inv_freq(cfg, dim):
    """HF's _compute_yarn_parameters (modeling_rope_utils.py): inv_freq and the
    factor cos / sin carry."""
    base = cfg.get("rope_theta", 10000.0)
    rs = cfg.get("rope_scaling") or {}
    pos = base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    if rs.get("rope_type", rs.get("type")) != "yarn":
        return (1.0 / pos).to(torch.float64), 1.0
    f = rs["factor"]
    P = rs["original_max_position_embeddings"]

    def get_mscale(scale, m=1.0):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    af = rs.get("attention_factor")
    if af is None:
        ms, msa = rs.get("mscale"), rs.get("mscale_all_dim")
        af = get_mscale(f, ms) / get_mscale(f, msa) if ms and msa else get_mscale(f)

    def corr_dim(rot):
        return (dim * math.log(P / (rot * 2 * math.pi))) / (2 * math.log(base))

    low = max(math.floor(corr_dim(rs.get("beta_fast") or 32)), 0)
    high = min(math.ceil(corr_dim(rs.get("beta_slow") or 1)), dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    extra = 1 - ramp
    inv = (1.0 / (f * pos)) * (1 - extra) + (1.0 / pos) * extra
    return inv.to(torch.float64), af


def deepseek_v3(cfg, w, ids):
    """DeepseekV3ForCausalLM (modeling_deepseek_v3.py): MLA with the
    interleaved RoPE (rope_interleave), YaRN, first_k_dense_replace dense
    layers, the sigmoid router with e_score_correction_bias for the choice,
    group-limited by each group's top-2 sum, norm_topk_prob,
    routed_scaling_factor, shared experts; layers past num_hidden_layers
    (MTP) ignored, as HF's loader does."""
    C, H = cfg["hidden_size"], cfg["num_attention_heads"]
    eps = cfg.get("rms_norm_eps", 1e-6)
    dn, dr, dv = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    KL = cfg["kv_lora_rank"]
    T = len(ids)
    x = w["model.embed_tokens.weight"][ids]

    def rms(x, p):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w[p + ".weight"]

    def lin(x, p):
        return x @ w[p + ".weight"].T

    def swiglu(h, p):
        return lin(torch.nn.functional.silu(lin(h, p + "gate_proj")) * lin(h, p + "up_proj"), p + "down_proj")

    inv, af = yarn_inv_freq(cfg, dr)
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    cos, sin = torch.cat([ang, ang], -1).cos() * af, torch.cat([ang, ang], -1).sin() * af

    def rope(t):  # apply_rotary_pos_emb_interleave: de-interleave, rotate halves
        t = t.reshape(*t.shape[:-1], dr // 2, 2).transpose(-1, -2).reshape(t.shape)
        a, b = t[..., : dr // 2], t[..., dr // 2 :]
        return t * cos + torch.cat([-b, a], -1) * sin

    scale = (dn + dr) ** -0.5
    rs = cfg.get("rope_scaling") or {}
    if rs.get("rope_type", rs.get("type", "default")) != "default" and rs.get("mscale_all_dim"):
        m = 0.1 * rs["mscale_all_dim"] * math.log(rs["factor"]) + 1.0 if rs["factor"] > 1 else 1.0
        scale = scale * m * m
    E, k = cfg["n_routed_experts"], cfg["num_experts_per_tok"]
    G, TG = cfg.get("n_group", 1), cfg.get("topk_group", 1)

    def moe(h, p):
        s = torch.sigmoid(lin(h, p + "gate"))
        choice = s + w[p + "gate.e_score_correction_bias"]
        gs = choice.view(T, G, E // G).topk(2, -1)[0].sum(-1)
        gmask = torch.zeros_like(gs).scatter_(1, gs.topk(TG, -1)[1], 1)
        emask = gmask.unsqueeze(-1).expand(T, G, E // G).reshape(T, E)
        idx = choice.masked_fill(emask == 0, 0.0).topk(k, -1)[1]
        top = s.gather(1, idx)
        if cfg.get("norm_topk_prob"):
            top = top / (top.sum(-1, keepdim=True) + 1e-20)
        top = top * cfg.get("routed_scaling_factor", 1.0)
        out = torch.zeros_like(h)
        for t in range(T):
            for j in range(k):
                out[t] += top[t, j] * swiglu(h[t], p + "experts.%d." % int(idx[t, j]))
        return out + swiglu(h, p + "shared_experts.")

    for l in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % l
        h = rms(x, p + "input_layernorm")
        if cfg.get("q_lora_rank"):
            q = lin(rms(lin(h, p + "self_attn.q_a_proj"), p + "self_attn.q_a_layernorm"), p + "self_attn.q_b_proj")
        else:
            q = lin(h, p + "self_attn.q_proj")
        q = q.reshape(T, H, dn + dr).transpose(0, 1)
        ckv = lin(h, p + "self_attn.kv_a_proj_with_mqa")
        kv = lin(rms(ckv[:, :KL], p + "self_attn.kv_a_layernorm"), p + "self_attn.kv_b_proj")
        kv = kv.reshape(T, H, dn + dv).transpose(0, 1)
        k_rot = rope(ckv[:, KL:].reshape(1, T, dr)).expand(H, T, dr)
        qs = torch.cat([q[..., :dn], rope(q[..., dn:])], -1)
        ks = torch.cat([kv[..., :dn], k_rot], -1)
        sc = qs @ ks.transpose(1, 2) * scale
        sc = sc.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
        y = (torch.softmax(sc, -1) @ kv[..., dn:]).transpose(0, 1).reshape(T, H * dv)
        x = x + lin(y, p + "self_attn.o_proj")
        h = rms(x, p + "post_attention_layernorm")
        x = x + (swiglu(h, p + "mlp.") if l < cfg["first_k_dense_replace"] else moe(h, p + "mlp."))
    x = rms(x, "model.norm")
    head = w["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else w["lm_head.weight"]
    return x @ head.T


def main():
    d, name, ids = sys.argv[1], sys.argv[2], [int(t) for t in sys.argv[3:]]
    cfg, w = read_folder(d)
    mt = cfg["model_type"]
    logits = gpt2(cfg, w, ids) if mt == "gpt2" else deepseek_v3(cfg, w, ids) if mt == "deepseek_v3" else llama(cfg, w, ids)
    flat = logits.flatten().tolist()
    print(name, len(flat))
    print(" ".join("%.9g" % v for v in flat))


if __name__ == "__main__":
    main()
