"""The vLLM-style ops the model runs through, with vLLM's argument layouts and semantics.

Every op takes its tensors in the dtype a bf16 serving stack passes (bf16 activations and
weights, int64/int32 indices), computes in float32 and rounds each output once to its dtype.
The model (model.py) calls these at the points where vLLM calls the same kernels, so what a
capture records is exactly what the model consumed and produced.
"""

from __future__ import annotations

import math
from typing import Tuple

import torch

F32 = torch.float32


def rms_norm(input: torch.Tensor, weight: torch.Tensor, epsilon: float) -> torch.Tensor:
    """vLLM rms_norm: out[t, i] = input[t, i] * rsqrt(mean_j input[t, j]^2 + eps) * weight[i]."""
    x = input.to(F32)
    inv = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + epsilon)
    return (x * inv * weight.to(F32)).to(input.dtype)


def fused_add_rms_norm(
    input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, epsilon: float
) -> Tuple[torch.Tensor, torch.Tensor]:
    """vLLM fused_add_rms_norm, returned instead of written in place: (input_after,
    residual_after) with residual_after = input + residual (rounded to the dtype, as the kernel
    stores it) and input_after = rms_norm(residual_after, weight, epsilon)."""
    new_residual = (input.to(F32) + residual.to(F32)).to(residual.dtype)
    return rms_norm(new_residual, weight, epsilon), new_residual


def silu_and_mul(input: torch.Tensor) -> torch.Tensor:
    """vLLM silu_and_mul: input [T, 2d] = [gate | up]; out [T, d] = silu(gate) * up."""
    d = input.shape[-1] // 2
    x = input.to(F32)
    gate, up = x[..., :d], x[..., d:]
    return (gate * torch.sigmoid(gate) * up).to(input.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, is_neox: bool) -> torch.Tensor:
    # x [T, heads, head_size] float32, cos/sin [T, 1, rot_dim/2]. Only the first rot_dim
    # channels rotate; the rest pass through (partial rotary).
    rot_dim = cos.shape[-1] * 2
    rot, rest = x[..., :rot_dim], x[..., rot_dim:]
    if is_neox:
        a, b = rot[..., : rot_dim // 2], rot[..., rot_dim // 2 :]
        out = torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)
    else:
        a, b = rot[..., 0::2], rot[..., 1::2]
        out = torch.stack([a * cos - b * sin, b * cos + a * sin], dim=-1).flatten(-2)
    return torch.cat([out, rest], dim=-1)


def rotary_embedding(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """vLLM rotary_embedding, returned instead of in place: query [T, heads * head_size],
    key [T, kv_heads * head_size]; is_neox pairs channel i with i + rot_dim/2, otherwise
    (GPT-J) pairs 2i with 2i + 1."""
    half = cos_sin_cache.shape[-1] // 2
    row = cos_sin_cache[positions].to(F32)
    cos, sin = row[:, None, :half], row[:, None, half:]
    tokens = positions.shape[0]
    q = _rotate(query.to(F32).view(tokens, -1, head_size), cos, sin, is_neox)
    k = _rotate(key.to(F32).view(tokens, -1, head_size), cos, sin, is_neox)
    return q.reshape(query.shape).to(query.dtype), k.reshape(key.shape).to(key.dtype)


def reshape_and_cache_flash(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """vLLM reshape_and_cache_flash, returned as new caches: token t goes to block
    slot // block_size, offset slot % block_size of the [num_blocks, block_size, kv_heads,
    head_size] caches; slot -1 is padding and writes nothing."""
    block_size = key_cache.shape[1]
    key_cache, value_cache = key_cache.clone(), value_cache.clone()
    for t, slot in enumerate(slot_mapping.tolist()):
        if slot < 0:
            continue
        key_cache[slot // block_size, slot % block_size] = key[t]
        value_cache[slot // block_size, slot % block_size] = value[t]
    return key_cache, value_cache


def paged_decode_attention(
    query: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Decode attention over a paged flash-layout cache: query [num_seqs, heads, head_size],
    block_tables [num_seqs, max_blocks] int32, seq_lens [num_seqs] int32 (the current token
    included, already cached); grouped-query heads share kv head h // (heads / kv_heads)."""
    num_seqs, heads, head_size = query.shape
    block_size, kv_heads = key_cache.shape[1], key_cache.shape[2]
    group = heads // kv_heads
    out = torch.empty_like(query)
    for s in range(num_seqs):
        n = int(seq_lens[s])
        blocks = block_tables[s, : (n + block_size - 1) // block_size].long()
        k = key_cache[blocks].reshape(-1, kv_heads, head_size)[:n].to(F32)
        v = value_cache[blocks].reshape(-1, kv_heads, head_size)[:n].to(F32)
        k = k.repeat_interleave(group, dim=1)  # [n, heads, head_size]
        v = v.repeat_interleave(group, dim=1)
        q = query[s].to(F32)  # [heads, head_size]
        scores = torch.einsum("hd,nhd->hn", q, k) * scale
        probs = torch.softmax(scores, dim=-1)
        out[s] = torch.einsum("hn,nhd->hd", probs, v).to(query.dtype)
    return out


def causal_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
) -> torch.Tensor:
    """Prefill attention of one sequence: q [n, heads, hs], k/v [n, kv_heads, hs], causal."""
    n, heads, _ = q.shape
    group = heads // k.shape[1]
    qf = q.to(F32)
    kf = k.to(F32).repeat_interleave(group, dim=1)
    vf = v.to(F32).repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", qf, kf) * scale
    mask = torch.ones(n, n, dtype=torch.bool).triu(1)
    scores = scores.masked_fill(mask, -math.inf)
    probs = torch.softmax(scores, dim=-1)
    return torch.einsum("hqk,khd->qhd", probs, vf).to(q.dtype)


def top_k_top_p_sampling_from_logits(
    logits: torch.Tensor,
    uniform_samples: torch.Tensor,
    top_k: torch.Tensor,
    top_p: torch.Tensor,
) -> torch.Tensor:
    """FlashInfer's top_k_top_p_sampling_from_logits (filter order top_k_first) with the uniform
    draws given, as llm/top_k_top_p_sampling_from_logits defines it, in float64: per row the
    softmax restricted to the logits of the top-k (ties at the k-th largest kept; k <= 0 or
    k >= vocab keeps all), then to the smallest set of the most likely of those reaching p of
    their mass (ties kept together; p >= 1 keeps all), and the token the inverse CDF (vocabulary
    order) gives at u. logits [batch, vocab] float32; samples [batch] int32."""
    out = torch.empty(logits.shape[0], dtype=torch.int32)
    for b in range(logits.shape[0]):
        row = logits[b].to(torch.float64)
        vocab = row.shape[0]
        weight = torch.exp(row - row.max())
        k, p, u = int(top_k[b]), float(top_p[b]), float(uniform_samples[b])
        kept = torch.ones(vocab, dtype=torch.bool)
        if 0 < k < vocab:
            kept = row >= torch.sort(row, descending=True).values[k - 1]
        if p < 1.0:
            target = p * float(weight[kept].sum())
            levels = torch.unique(row[kept], sorted=True).flip(0)  # distinct logits, descending
            above = 0.0  # mass of the kept logits strictly above the level
            nucleus = torch.zeros(vocab, dtype=torch.bool)
            for level in levels.tolist():
                if above >= target:
                    break
                at = kept & (row == level)
                nucleus |= at
                above += float(weight[at].sum())
            kept = nucleus
        mass = torch.where(kept, weight, torch.zeros_like(weight))
        cumulative = torch.cumsum(mass, 0)
        crossed = torch.nonzero(kept & (cumulative > u * float(cumulative[-1])))
        out[b] = int(crossed[0]) if crossed.numel() else int(torch.nonzero(kept)[-1])
    return out


E4M3_MAX = 448.0  # the largest finite float8 e4m3fn


def dynamic_per_token_scaled_fp8_quant(input: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """vLLM dynamic_per_token_scaled_fp8_quant (no scale upper bound): per row scale =
    max(amax / 448, 1 / (448 * 512)) in float32, out = e4m3(clamp(input / scale, -448, 448))
    (float32 division, round to nearest even). Returns (out [T, d] float8_e4m3fn, scale [T, 1]
    float32)."""
    x = input.to(F32)
    amax = x.abs().amax(dim=-1, keepdim=True)
    floor = torch.tensor(1.0 / (E4M3_MAX * 512.0), dtype=F32)
    scale = torch.maximum(amax / E4M3_MAX, floor)
    out = (x / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return out, scale


def per_channel_fp8_weight(weight: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """A weight [out_features, in_features] quantized per output channel as an FP8 W8A8
    checkpoint stores it: scale[n] = amax of row n / 448 (1 for a zero row), b = e4m3(weight /
    scale). Returns (b float8_e4m3fn, scale [out_features, 1] float32)."""
    w = weight.to(F32)
    amax = w.abs().amax(dim=-1, keepdim=True)
    scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    return (w / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn), scale


def fp8_scaled_linear(
    a: torch.Tensor, b: torch.Tensor, a_scales: torch.Tensor, b_scales: torch.Tensor
) -> torch.Tensor:
    """vLLM cutlass_scaled_mm(a, b^T, a_scales, b_scales, bfloat16), no bias: the products of the
    e4m3 values summed exactly (float64), the sum rounded to float32, both scales applied in
    float32, one rounding to bf16. a [T, K], b [N, K]; out [T, N] bf16."""
    total = (a.to(torch.float64) @ b.to(torch.float64).t()).to(F32)
    return (total * a_scales.to(F32) * b_scales.to(F32).t()).to(torch.bfloat16)
