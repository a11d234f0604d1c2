"""Model loaders: a llama2.c checkpoint (.bin) and a Hugging Face checkpoint folder (config.json
and *.safetensors, optionally sharded with model.safetensors.index.json) of a Llama, Qwen2 or
Mixtral model. Both give a model.Model with bf16 weights under Hugging Face names.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from typing import Dict, List

import torch

from .model import BF16, Model, ModelConfig
from .safetensors_io import read_safetensors

HF_ARCHITECTURES = (
    "LlamaForCausalLM",
    "Qwen2ForCausalLM",
    "MistralForCausalLM",
    "MixtralForCausalLM",
)


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _source(path: str, root: str) -> Dict:
    return {
        "file": os.path.relpath(path, root),
        "sha256": file_sha256(path),
        "bytes": os.path.getsize(path),
    }


def load_llama2c(path: str, name: str = "") -> Model:
    """A llama2.c checkpoint (legacy version-0 format: 7 int32 then float32 tensors, see
    models/stories260K/README.md). RoPE stays GPT-J style (is_neox False), theta 10000."""
    with open(path, "rb") as f:
        data = f.read()
    dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len = struct.unpack("<7i", data[:28])
    shared = vocab > 0
    vocab = abs(vocab)
    head_size = dim // n_heads
    kv_dim = n_kv_heads * head_size
    floats = torch.frombuffer(bytearray(data[28:]), dtype=torch.float32)
    offset = 0

    def take(*shape: int) -> torch.Tensor:
        nonlocal offset
        count = 1
        for d in shape:
            count *= d
        if offset + count > floats.numel():
            raise ValueError(f"{path}: truncated checkpoint")
        t = floats[offset : offset + count].reshape(shape)
        offset += count
        return t

    embed = take(vocab, dim)
    att_norm = take(n_layers, dim)
    wq = take(n_layers, dim, dim)
    wk = take(n_layers, kv_dim, dim)
    wv = take(n_layers, kv_dim, dim)
    wo = take(n_layers, dim, dim)
    ffn_norm = take(n_layers, dim)
    w1 = take(n_layers, hidden, dim)
    w2 = take(n_layers, dim, hidden)
    w3 = take(n_layers, hidden, dim)
    final_norm = take(dim)
    take(seq_len, head_size // 2)  # legacy freq_cis_real, recomputed instead
    take(seq_len, head_size // 2)  # legacy freq_cis_imag
    weights = {"model.embed_tokens.weight": embed, "model.norm.weight": final_norm}
    if not shared:
        weights["lm_head.weight"] = take(vocab, dim)
    for i in range(n_layers):
        p = f"model.layers.{i}."
        weights[p + "input_layernorm.weight"] = att_norm[i]
        weights[p + "self_attn.q_proj.weight"] = wq[i]
        weights[p + "self_attn.k_proj.weight"] = wk[i]
        weights[p + "self_attn.v_proj.weight"] = wv[i]
        weights[p + "self_attn.o_proj.weight"] = wo[i]
        weights[p + "post_attention_layernorm.weight"] = ffn_norm[i]
        weights[p + "mlp.gate_proj.weight"] = w1[i]
        weights[p + "mlp.down_proj.weight"] = w2[i]
        weights[p + "mlp.up_proj.weight"] = w3[i]
    config = ModelConfig(
        name=name or os.path.splitext(os.path.basename(path))[0],
        architecture="llama2c",
        dim=dim,
        hidden_dim=hidden,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        head_size=head_size,
        vocab_size=vocab,
        max_position=seq_len,
        rope_theta=10000.0,
        norm_eps=1e-5,
        is_neox=False,
        tie_embeddings=shared,
        bos_token_id=1,
    )
    weights = {k: v.clone().to(BF16) for k, v in weights.items()}
    return Model(config, weights, [_source(path, os.path.dirname(path))])


def hf_config(folder: str, name: str = "") -> ModelConfig:
    with open(os.path.join(folder, "config.json")) as f:
        cfg = json.load(f)
    arch = (cfg.get("architectures") or [""])[0]
    if arch not in HF_ARCHITECTURES:
        raise ValueError(f"{folder}: architecture {arch!r} is not one of {HF_ARCHITECTURES}")
    dim = int(cfg["hidden_size"])
    n_heads = int(cfg["num_attention_heads"])
    moe = arch == "MixtralForCausalLM"
    bos = cfg.get("bos_token_id", 1)
    return ModelConfig(
        name=name or os.path.basename(os.path.normpath(folder)),
        architecture=arch,
        dim=dim,
        hidden_dim=int(cfg["intermediate_size"]),
        n_layers=int(cfg["num_hidden_layers"]),
        n_heads=n_heads,
        n_kv_heads=int(cfg.get("num_key_value_heads") or n_heads),
        head_size=int(cfg.get("head_dim") or dim // n_heads),
        vocab_size=int(cfg["vocab_size"]),
        max_position=int(cfg.get("max_position_embeddings", 2048)),
        rope_theta=float(cfg.get("rope_theta", 10000.0)),
        norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        is_neox=True,
        attention_bias=arch == "Qwen2ForCausalLM" or bool(cfg.get("attention_bias", False)),
        n_experts=int(cfg.get("num_local_experts", 0)) if moe else 0,
        experts_per_token=int(cfg.get("num_experts_per_tok", 2)) if moe else 0,
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        bos_token_id=int(bos if bos is not None else 1),
        rope_scaling=cfg.get("rope_scaling"),
    )


def _weight_files(folder: str) -> List[str]:
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            weight_map = json.load(f)["weight_map"]
        return sorted({os.path.join(folder, v) for v in weight_map.values()})
    files = sorted(
        os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".safetensors")
    )
    if not files:
        raise ValueError(f"{folder}: no *.safetensors weight files")
    return files


def load_hf(folder: str, name: str = "") -> Model:
    """A Hugging Face checkpoint folder. Every weight is converted to bf16; the checkpoint's
    rotary layout is the neox one (halves), as Hugging Face stores Llama-family models."""
    config = hf_config(folder, name)
    weights: Dict[str, torch.Tensor] = {}
    sources = []
    for path in _weight_files(folder):
        tensors, _ = read_safetensors(path)
        for key, value in tensors.items():
            weights[key] = value.to(BF16)
        sources.append(_source(path, folder))
    required = ["model.embed_tokens.weight", "model.norm.weight"]
    if not config.tie_embeddings:
        required.append("lm_head.weight")
    for i in range(config.n_layers):
        p = f"model.layers.{i}."
        required += [p + "input_layernorm.weight", p + "post_attention_layernorm.weight"]
        required += [p + f"self_attn.{n}_proj.weight" for n in "qkvo"]
        if config.attention_bias:
            required += [p + f"self_attn.{n}_proj.bias" for n in "qkv"]
        if config.n_experts:
            required.append(p + "block_sparse_moe.gate.weight")
            required += [
                f"{p}block_sparse_moe.experts.{e}.{w}.weight"
                for e in range(config.n_experts)
                for w in ("w1", "w2", "w3")
            ]
        else:
            required += [p + f"mlp.{n}_proj.weight" for n in ("gate", "up", "down")]
    missing = [k for k in required if k not in weights]
    if missing:
        raise ValueError(f"{folder}: {len(missing)} weights missing, first {missing[0]!r}")
    return Model(config, weights, sources)


def load(path: str, name: str = "") -> Model:
    """A llama2.c .bin file or a Hugging Face checkpoint folder."""
    if os.path.isdir(path):
        return load_hf(path, name)
    return load_llama2c(path, name)
