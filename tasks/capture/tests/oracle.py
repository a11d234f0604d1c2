"""Float64 recomputations of every captured op from its captured inputs, written independently
of tasks/capture/ops.py (explicit loops over pairs, heads and blocks), and the check that a
case group's recorded outputs agree with them."""

from __future__ import annotations

import hashlib
import json
import math
import os
from typing import Dict, List

import torch

from tasks.capture.safetensors_io import read_safetensors, tensor_bytes

F64 = torch.float64
# One bf16 ulp relative (2^-8) plus a small absolute floor scaled by the output's magnitude:
# the capture computes in float32 and rounds once, so it sits within half an ulp of the exact
# value, up to float32 error.
RTOL = 2.0**-8


def rms_norm(x, w, eps):
    x = x.to(F64)
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w.to(F64)


def silu_and_mul(x):
    x = x.to(F64)
    d = x.shape[-1] // 2
    g, u = x[:, :d], x[:, d:]
    return g / (1 + torch.exp(-g)) * u


def rotary(positions, x, head_size, cache, is_neox):
    x = x.to(F64).clone()
    cache = cache.to(F64)
    half = cache.shape[1] // 2
    out = x.clone()
    for t in range(x.shape[0]):
        pos = int(positions[t])
        for h in range(x.shape[1] // head_size):
            base = h * head_size
            for i in range(half):
                a, b = (base + i, base + half + i) if is_neox else (base + 2 * i, base + 2 * i + 1)
                c, s = cache[pos, i], cache[pos, half + i]
                out[t, a] = x[t, a] * c - x[t, b] * s
                out[t, b] = x[t, b] * c + x[t, a] * s
    return out


def reshape_and_cache(key, value, kc, vc, slots):
    kc, vc = kc.clone(), vc.clone()
    bs = kc.shape[1]
    for t in range(key.shape[0]):
        s = int(slots[t])
        if s >= 0:
            kc[s // bs, s % bs] = key[t]
            vc[s // bs, s % bs] = value[t]
    return kc, vc


def paged_attention(q, kc, vc, tables, seq_lens, scale):
    num_seqs, heads, hs = q.shape
    bs, kvh = kc.shape[1], kc.shape[2]
    out = torch.zeros(num_seqs, heads, hs, dtype=F64)
    for s in range(num_seqs):
        n = int(seq_lens[s])
        for h in range(heads):
            g = h // (heads // kvh)
            keys, vals = [], []
            for p in range(n):
                blk = int(tables[s, p // bs])
                keys.append(kc[blk, p % bs, g].to(F64))
                vals.append(vc[blk, p % bs, g].to(F64))
            scores = torch.stack(keys) @ q[s, h].to(F64) * scale
            w = torch.exp(scores - scores.max())
            out[s, h] = (w / w.sum()) @ torch.stack(vals)
    return out


def sampled_token(logits, u, k, p):
    """One row of top-k-then-top-p sampling at draw u, by the task's definition in plain Python
    floats: the kept set by counting larger logits and summing the mass strictly above each
    token, then the first token (vocabulary order) whose running kept mass passes u * Z_N."""
    row = [float(x) for x in logits]
    top = max(row)
    w = [math.exp(x - top) for x in row]
    vocab = len(row)
    if 0 < k < vocab:
        in_k = [sum(1 for y in row if y > x) < k for x in row]
    else:
        in_k = [True] * vocab
    if p < 1.0:
        z_k = sum(wi for wi, kept in zip(w, in_k) if kept)
        in_n = [kept and sum(wj for y, wj, kj in zip(row, w, in_k) if kj and y > x) < p * z_k
                for x, kept in zip(row, in_k)]
    else:
        in_n = in_k
    z_n = sum(wi for wi, kept in zip(w, in_n) if kept)
    running, last = 0.0, None
    for v in range(vocab):
        if in_n[v]:
            running += w[v]
            last = v
            if running > u * z_n:
                return v
    return last


def e4m3(v: float) -> float:
    """v rounded to the nearest float8 e4m3fn value, ties to even, saturating at 448: steps of
    2^(e - 3) in [2^e, 2^(e + 1)) for e >= -6, subnormal steps of 2^-9 below 2^-6."""
    m = min(abs(v), 448.0)
    if m == 0.0:
        return 0.0
    step = 2.0 ** (max(math.floor(math.log2(m)), -6) - 3)
    q = m / step
    n = math.floor(q)
    if q - n > 0.5 or (q - n == 0.5 and n % 2 == 1):
        n += 1
    return math.copysign(min(n * step, 448.0), v)


def per_token_fp8(x):
    """dynamic_per_token_scaled_fp8_quant by its definition, row by row: (out as floats, scale)
    with float32 arithmetic for the scale and the quotient."""
    f32 = torch.float32
    outs, scales = [], []
    for row in x.to(f32):
        amax = max(abs(float(v)) for v in row)
        scale = max(float(torch.tensor(amax, dtype=f32) / torch.tensor(448.0, dtype=f32)),
                    float(torch.tensor(1.0 / (448.0 * 512.0), dtype=f32)))
        outs.append([e4m3(float(torch.tensor(float(v), dtype=f32) / torch.tensor(scale, dtype=f32)))
                     for v in row])
        scales.append(scale)
    return torch.tensor(outs, dtype=F64), torch.tensor(scales, dtype=F64)[:, None]


def scaled_mm(a, b, a_scales, b_scales):
    """cutlass_scaled_mm in float64: out[t, n] = a_s[t] b_s[n] sum_k a[t, k] b[n, k]."""
    a, b = a.to(F64).tolist(), b.to(F64).tolist()
    out = torch.zeros(len(a), len(b), dtype=F64)
    for t, row in enumerate(a):
        for n, col in enumerate(b):
            out[t, n] = sum(x * y for x, y in zip(row, col)) * float(a_scales[t, 0]) * float(
                b_scales[n, 0])
    return out


def assert_close(name: str, got: torch.Tensor, ref: torch.Tensor, atol_scale: float = 1e-5):
    got = got.to(F64)
    assert got.shape == ref.shape, f"{name}: shape {tuple(got.shape)} != {tuple(ref.shape)}"
    atol = atol_scale * (1.0 + float(ref.abs().max()))
    err = (got - ref).abs() - (RTOL * ref.abs() + atol)
    worst = float(err.max())
    assert worst <= 0, f"{name}: off by {worst:.3g} beyond tolerance"


def check_group(path: str) -> Dict:
    """Loads <group>.safetensors and its .json, checks the provenance against the bytes and every
    case's outputs against the float64 recomputation; returns the provenance."""
    tensors, metadata = read_safetensors(path)
    with open(os.path.splitext(path)[0] + ".json") as f:
        prov = json.load(f)
    assert metadata.get("crucible") == prov["format"]
    assert prov["file"] == os.path.basename(path)
    listed = set()
    for case in prov["cases"]:
        t: Dict[str, torch.Tensor] = {}
        for doc in case["tensors"]:
            got = tensors[doc["name"]]
            raw = tensor_bytes(got)
            assert list(got.shape) == doc["shape"], doc["name"]
            assert hashlib.sha256(raw).hexdigest() == doc["sha256"], doc["name"]
            assert len(raw) == doc["bytes"], doc["name"]
            key = doc["arg"] + (".after" if doc["role"] == "after" else "")
            t[key] = got
            listed.add(doc["name"])
        check_case(prov["op"], f"{path}:{case['name']}", t, case["scalars"])
    assert listed == set(tensors), "tensors in the file and in the provenance differ"
    return prov


DTYPES = {
    "rms_norm": {"out": torch.bfloat16, "input": torch.bfloat16, "weight": torch.bfloat16},
    "silu_and_mul": {"out": torch.bfloat16, "input": torch.bfloat16},
    "rotary_embedding": {"positions": torch.int64, "query": torch.bfloat16,
                         "cos_sin_cache": torch.bfloat16},
    "reshape_and_cache_flash": {"slot_mapping": torch.int64, "key_cache": torch.bfloat16},
    "paged_decode_attention": {"block_tables": torch.int32, "seq_lens": torch.int32,
                               "query": torch.bfloat16, "out": torch.bfloat16},
    "fused_add_rms_norm": {"input": torch.bfloat16, "residual": torch.bfloat16},
    "top_k_top_p_sampling_from_logits": {"logits": torch.float32, "uniform_samples": torch.float32,
                                         "top_k": torch.int32, "top_p": torch.float32,
                                         "samples": torch.int32},
    "dynamic_per_token_scaled_fp8_quant": {"input": torch.bfloat16, "out": torch.float8_e4m3fn,
                                           "scale": torch.float32},
    "fp8_scaled_linear": {"a": torch.float8_e4m3fn, "b": torch.float8_e4m3fn,
                          "a_scales": torch.float32, "b_scales": torch.float32,
                          "out": torch.bfloat16},
}


def check_case(op: str, where: str, t: Dict[str, torch.Tensor], scalars: Dict) -> None:
    for arg, dtype in DTYPES[op].items():
        assert t[arg].dtype == dtype, f"{where}: {arg} is {t[arg].dtype}, not {dtype}"
    if op == "rms_norm":
        assert_close(where, t["out"], rms_norm(t["input"], t["weight"], scalars["epsilon"]))
    elif op == "fused_add_rms_norm":
        res = (t["input"].to(F64) + t["residual"].to(F64))
        assert_close(where + " residual", t["residual.after"], res)
        # The norm reads the residual as stored (rounded to bf16), as the kernel does.
        ref = rms_norm(t["residual.after"], t["weight"], scalars["epsilon"])
        assert_close(where + " input", t["input.after"], ref)
    elif op == "silu_and_mul":
        assert t["out"].shape[1] * 2 == t["input"].shape[1]
        assert_close(where, t["out"], silu_and_mul(t["input"]))
    elif op == "rotary_embedding":
        hs, neox = scalars["head_size"], scalars["is_neox"]
        assert t["cos_sin_cache"].shape[1] == hs
        for arg in ("query", "key"):
            ref = rotary(t["positions"], t[arg], hs, t["cos_sin_cache"], neox)
            assert_close(f"{where} {arg}", t[arg + ".after"], ref)
    elif op == "reshape_and_cache_flash":
        kc, vc = reshape_and_cache(
            t["key"], t["value"], t["key_cache"], t["value_cache"], t["slot_mapping"]
        )
        assert torch.equal(kc, t["key_cache.after"]), where
        assert torch.equal(vc, t["value_cache.after"]), where
    elif op == "paged_decode_attention":
        ref = paged_attention(t["query"], t["key_cache"], t["value_cache"], t["block_tables"],
                              t["seq_lens"], scalars["scale"])
        assert_close(where, t["out"], ref, atol_scale=1e-4)
        assert math.isclose(scalars["scale"], 1 / math.sqrt(t["query"].shape[2]))
    elif op == "top_k_top_p_sampling_from_logits":
        for b in range(t["logits"].shape[0]):
            want = sampled_token(t["logits"][b].tolist(), float(t["uniform_samples"][b]),
                                 int(t["top_k"][b]), float(t["top_p"][b]))
            assert int(t["samples"][b]) == want, f"{where}: row {b} token {int(t['samples'][b])}"
    elif op == "dynamic_per_token_scaled_fp8_quant":
        out, scale = per_token_fp8(t["input"])
        assert torch.equal(t["scale"].to(F64), scale), f"{where}: scale"
        assert torch.equal(t["out"].to(F64), out), f"{where}: out"
    elif op == "fp8_scaled_linear":
        assert t["a"].shape[1] == t["b"].shape[1] and t["b"].shape[0] % 16 == 0
        ref = scaled_mm(t["a"], t["b"], t["a_scales"], t["b_scales"])
        assert_close(where, t["out"], ref)
    else:
        raise AssertionError(f"{where}: unknown op {op}")


def group_paths(folder: str) -> List[str]:
    return sorted(
        os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".safetensors")
    )
