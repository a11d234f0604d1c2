"""Straightforward float64 forwards, independent of tasks/capture/model.py, used as oracles:
llama2.c's run.c semantics read straight from the .bin file, and Hugging Face's Llama / Qwen2 /
Mixtral semantics (rotate_half, repeat_kv, top-k softmax routing) from a weight dict."""

from __future__ import annotations

import struct
from typing import Dict, List

import torch

F64 = torch.float64


def _rms(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def _attend(q, k, v, n_heads, n_kv):
    # q [n, H, hs], k/v [n, KV, hs]: causal softmax attention, kv heads shared by H / KV heads.
    n, _, hs = q.shape
    k = k.repeat_interleave(n_heads // n_kv, dim=1)
    v = v.repeat_interleave(n_heads // n_kv, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) / hs**0.5
    scores = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.einsum("hqk,khd->qhd", torch.softmax(scores, -1), v).reshape(n, -1)


def llama2c_logits(path: str, tokens: List[int]) -> torch.Tensor:
    """Logits [len(tokens), vocab] of llama2.c's forward (GPT-J pairs as complex numbers)."""
    with open(path, "rb") as f:
        data = f.read()
    dim, hidden, layers, heads, kv, vocab, seq_len = struct.unpack("<7i", data[:28])
    vocab = abs(vocab)
    hs = dim // heads
    flat = torch.frombuffer(bytearray(data[28:]), dtype=torch.float32).to(F64)
    sizes = [("emb", (vocab, dim)), ("an", (layers, dim)), ("wq", (layers, dim, dim)),
             ("wk", (layers, kv * hs, dim)), ("wv", (layers, kv * hs, dim)),
             ("wo", (layers, dim, dim)), ("fn", (layers, dim)), ("w1", (layers, hidden, dim)),
             ("w2", (layers, dim, hidden)), ("w3", (layers, hidden, dim)), ("final", (dim,))]
    w: Dict[str, torch.Tensor] = {}
    at = 0
    for name, shape in sizes:
        count = 1
        for d in shape:
            count *= d
        w[name] = flat[at:at + count].reshape(shape)
        at += count
    n = len(tokens)
    pos = torch.arange(n, dtype=F64)
    freqs = 1.0 / 10000 ** (torch.arange(0, hs, 2, dtype=F64) / hs)
    rot = torch.polar(torch.ones(n, hs // 2, dtype=F64), torch.outer(pos, freqs))

    def rope(x, nh):
        xc = torch.view_as_complex(x.reshape(n, nh, hs // 2, 2).contiguous())
        return torch.view_as_real(xc * rot[:, None, :]).reshape(n, nh, hs)

    x = w["emb"][torch.tensor(tokens)]
    for i in range(layers):
        h = _rms(x, w["an"][i], 1e-5)
        q = rope(h @ w["wq"][i].T, heads)
        k = rope(h @ w["wk"][i].T, kv)
        v = (h @ w["wv"][i].T).reshape(n, kv, hs)
        x = x + _attend(q, k, v, heads, kv) @ w["wo"][i].T
        h = _rms(x, w["fn"][i], 1e-5)
        a, b = h @ w["w1"][i].T, h @ w["w3"][i].T
        x = x + (a * torch.sigmoid(a) * b) @ w["w2"][i].T
    return _rms(x, w["final"], 1e-5) @ w["emb"].T


def hf_logits(cfg: Dict, w: Dict[str, torch.Tensor], tokens: List[int]) -> torch.Tensor:
    """Logits of a Hugging Face Llama / Qwen2 / Mixtral config and weight dict, in float64."""
    w = {k: v.to(F64) for k, v in w.items()}
    dim, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads", heads)
    hs = cfg.get("head_dim", dim // heads)
    eps = cfg["rms_norm_eps"]
    n = len(tokens)
    freqs = 1.0 / cfg.get("rope_theta", 10000.0) ** (torch.arange(0, hs, 2, dtype=F64) / hs)
    ang = torch.outer(torch.arange(n, dtype=F64), freqs)
    cos = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :]
    sin = torch.cat([ang.sin(), ang.sin()], -1)[:, None, :]

    def rotate_half(x):
        return torch.cat([-x[..., hs // 2:], x[..., : hs // 2]], -1)

    def proj(x, name):
        y = x @ w[name + ".weight"].T
        return y + w[name + ".bias"] if name + ".bias" in w else y

    x = w["model.embed_tokens.weight"][torch.tensor(tokens)]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = _rms(x, w[p + "input_layernorm.weight"], eps)
        q = proj(h, p + "self_attn.q_proj").reshape(n, heads, hs)
        k = proj(h, p + "self_attn.k_proj").reshape(n, kv, hs)
        v = proj(h, p + "self_attn.v_proj").reshape(n, kv, hs)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        x = x + _attend(q, k, v, heads, kv) @ w[p + "self_attn.o_proj.weight"].T
        h = _rms(x, w[p + "post_attention_layernorm.weight"], eps)
        if "num_local_experts" in cfg:
            m = p + "block_sparse_moe."
            probs = torch.softmax(h @ w[m + "gate.weight"].T, -1)
            top_w, top_i = probs.topk(cfg["num_experts_per_tok"], -1)
            top_w = top_w / top_w.sum(-1, keepdim=True)
            out = torch.zeros_like(h)
            for t in range(n):
                for j in range(top_i.shape[1]):
                    e = f"{m}experts.{int(top_i[t, j])}."
                    a, b = h[t] @ w[e + "w1.weight"].T, h[t] @ w[e + "w3.weight"].T
                    out[t] += top_w[t, j] * ((a * torch.sigmoid(a) * b) @ w[e + "w2.weight"].T)
            x = x + out
        else:
            a, b = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
            x = x + (a * torch.sigmoid(a) * b) @ w[p + "mlp.down_proj.weight"].T
    head = "model.embed_tokens.weight" if cfg.get("tie_word_embeddings") else "lm_head.weight"
    return _rms(x, w["model.norm.weight"], eps) @ w[head].T
