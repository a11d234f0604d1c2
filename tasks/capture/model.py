"""A Llama-architecture decoder in PyTorch (Llama, Qwen2, Mixtral, llama2.c), run the way a bf16
serving engine runs it: flattened variable-length batches, a paged flash-layout KV cache, and the
vLLM ops of ops.py at the points where vLLM calls them. Every op call goes through a Recorder,
which the capture tool (capture.py) uses to save the op's inputs and outputs.

Weights are held under Hugging Face names (model.layers.N.self_attn.q_proj.weight, ...) in
bf16; the llama2.c loader (loaders.py) renames into the same scheme.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Dict, List, Optional, Sequence

import torch

from . import ops

BF16 = torch.bfloat16
F32 = torch.float32


@dataclass
class ModelConfig:
    name: str
    architecture: str  # "llama2c", "LlamaForCausalLM", "Qwen2ForCausalLM", "MixtralForCausalLM"
    dim: int
    hidden_dim: int  # FFN width (per expert for Mixtral)
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_size: int
    vocab_size: int
    max_position: int  # rows of the cos_sin_cache
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    is_neox: bool = True  # rotate halves (HF); False: interleaved pairs (GPT-J, llama2.c)
    attention_bias: bool = False  # q/k/v projections carry a bias (Qwen2)
    n_experts: int = 0  # 0: dense SwiGLU FFN
    experts_per_token: int = 0
    tie_embeddings: bool = False
    bos_token_id: int = 1
    rope_scaling: Optional[Dict[str, Any]] = None

    def to_json(self) -> Dict[str, Any]:
        return asdict(self)


def rope_inv_freq(config: ModelConfig) -> torch.Tensor:
    """RoPE frequencies [head_size / 2] float32, with the config's rope_scaling applied (none,
    "linear" or "llama3" as in the Hugging Face and vLLM implementations)."""
    rot_dim = config.head_size
    inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, rot_dim, 2, dtype=F32) / rot_dim))
    scaling = config.rope_scaling
    if not scaling:
        return inv_freq
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "linear":
        return inv_freq / float(scaling["factor"])
    if kind == "llama3":
        factor = float(scaling["factor"])
        low = float(scaling.get("low_freq_factor", 1.0))
        high = float(scaling.get("high_freq_factor", 4.0))
        old_len = float(scaling["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv_freq
        smooth = (old_len / wavelen - low) / (high - low)
        scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
        mid = (1 - smooth) * inv_freq / factor + smooth * inv_freq
        is_mid = (wavelen <= old_len / low) & (wavelen >= old_len / high)
        return torch.where(is_mid, mid, scaled)
    raise NotImplementedError(f"rope_scaling type {kind!r} is not supported")


def cos_sin_cache(
    config: ModelConfig, max_position: Optional[int] = None, dtype: torch.dtype = BF16
) -> torch.Tensor:
    """vLLM's cos_sin_cache for `config`: [max_position, head_size], cos half then sin, computed
    in float32 and stored in the activation dtype (vLLM converts it to the query's dtype)."""
    rows = config.max_position if max_position is None else max_position
    freqs = torch.outer(torch.arange(rows, dtype=F32), rope_inv_freq(config))
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1).to(dtype)


@dataclass
class Batch:
    """One engine step: new tokens of every running sequence, flattened in sequence order.

    tokens, positions, slot_mapping: [T] int64; query_lens[s]: new tokens of sequence s;
    seq_lens: [num_seqs] int32, tokens in the cache after this step; block_tables:
    [num_seqs, max_blocks] int32. In decode every query_len is 1.
    """

    phase: str  # "prefill" (every sequence starts at position 0) or "decode"
    tokens: torch.Tensor
    positions: torch.Tensor
    query_lens: List[int]
    seq_lens: torch.Tensor
    slot_mapping: torch.Tensor
    block_tables: torch.Tensor
    # Extra rows reshape_and_cache_flash sees with slot -1, as a CUDA-graph batch padded to its
    # captured size passes them (their keys and values are written nowhere).
    kv_pad_rows: int = 0


def case_name(layer: Optional[int], point: str) -> str:
    """The name of an op call's case: "layer3.ffn_norm", or the bare point ("final_norm") for a
    call outside the layers."""
    return point if layer is None else f"layer{layer}.{point}"


class Recorder:
    """Receives every op call. The base class records nothing; capture.CaptureRecorder saves."""

    def record(
        self,
        op: str,
        layer: Optional[int],
        point: str,
        tensors: Sequence[tuple],
        scalars: Dict[str, Any],
    ) -> None:
        """One call of `op` at `point` of `layer` (None outside the layers); its case is named
        case_name(layer, point). tensors: (arg name, role, tensor) with role "in", "out",
        "inout" (the value before the call) or "after" (an inout argument's value after the
        call)."""

    def wants(self, op: str, layer: Optional[int]) -> bool:
        """Whether a call of `op` at `layer` now would be recorded: for records the model
        computes only to record them."""
        return False


class Model:
    def __init__(self, config: ModelConfig, weights: Dict[str, torch.Tensor], sources: List[Dict]):
        self.config = config
        self.weights = weights
        self.sources = sources  # [{"file", "sha256", "bytes"}] of the loaded weight files
        self.device = next(iter(weights.values())).device
        # Activations take the weights' dtype: bf16 as loaded; float32 for exactness tests.
        self.dtype = weights["model.embed_tokens.weight"].dtype
        self.rope_cache = cos_sin_cache(config, None, self.dtype).to(self.device)

    def set_rope_rows(self, rows: int) -> None:
        """Keeps `rows` positions in the cos_sin_cache the rotary op is given (and a capture
        stores); a model with a 128k context would otherwise store 128k rows per capture."""
        self.rope_cache = cos_sin_cache(self.config, rows, self.dtype).to(self.device)

    def to(self, device: str) -> "Model":
        self.weights = {k: v.to(device) for k, v in self.weights.items()}
        self.rope_cache = self.rope_cache.to(device)
        self.device = torch.device(device)
        return self

    def w(self, name: str) -> torch.Tensor:
        return self.weights[name]

    def new_kv_cache(self, num_blocks: int, block_size: int) -> List[List[torch.Tensor]]:
        """Zeroed [key_cache, value_cache] per layer, each [num_blocks, block_size, kv_heads,
        head_size] in the activation dtype."""
        c = self.config
        shape = (num_blocks, block_size, c.n_kv_heads, c.head_size)
        return [
            [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in range(2)]
            for _ in range(c.n_layers)
        ]

    def _linear(self, x: torch.Tensor, name: str) -> torch.Tensor:
        # bf16 GEMM with float32 accumulation, rounded once (as cuBLAS does for bf16).
        y = x.to(F32) @ self.w(name + ".weight").to(F32).t()
        bias = self.weights.get(name + ".bias")
        if bias is not None:
            y = y + bias.to(F32)
        return y.to(x.dtype)

    def _record_fp8_linear(
        self, rec: Recorder, layer: int, point: str, x: torch.Tensor, names: Sequence[str]
    ) -> None:
        """What the FP8 W8A8 build of this model runs at a linear layer, recorded beside the bf16
        linear the model itself runs (nothing here feeds the model): vLLM quantizes the
        activation per token (dynamic_per_token_scaled_fp8_quant) and multiplies it by the
        weight quantized per output channel (cutlass_scaled_mm, no bias). `names` are the
        weights the layer merges (q, k and v into one qkv projection). Skipped where vLLM's
        kernel cannot run: a dimension not a multiple of 16."""
        quant, linear = "dynamic_per_token_scaled_fp8_quant", "fp8_scaled_linear"
        if not (rec.wants(quant, layer) or rec.wants(linear, layer)):
            return
        weight = torch.cat([self.w(name + ".weight") for name in names], dim=0)
        if weight.shape[0] % 16 or weight.shape[1] % 16:
            return
        a, a_scales = ops.dynamic_per_token_scaled_fp8_quant(x)
        rec.record(quant, layer, point,
                   [("out", "out", a), ("scale", "out", a_scales), ("input", "in", x)], {})
        b, b_scales = ops.per_channel_fp8_weight(weight)
        out = ops.fp8_scaled_linear(a, b, a_scales, b_scales)
        rec.record(linear, layer, point,
                   [("out", "out", out), ("a", "in", a), ("b", "in", b),
                    ("a_scales", "in", a_scales), ("b_scales", "in", b_scales)], {})

    def _norm(
        self,
        rec: Recorder,
        layer: Optional[int],
        point: str,
        x: torch.Tensor,
        residual: Optional[torch.Tensor],
        weight_name: str,
    ):
        eps = self.config.norm_eps
        weight = self.w(weight_name)
        if residual is None:
            out = ops.rms_norm(x, weight, eps)
            rec.record(
                "rms_norm",
                layer,
                point,
                [("out", "out", out), ("input", "in", x), ("weight", "in", weight)],
                {"epsilon": eps},
            )
            return out, x
        out, new_residual = ops.fused_add_rms_norm(x, residual, weight, eps)
        rec.record(
            "fused_add_rms_norm",
            layer,
            point,
            [
                ("input", "inout", x),
                ("residual", "inout", residual),
                ("weight", "in", weight),
                ("input", "after", out),
                ("residual", "after", new_residual),
            ],
            {"epsilon": eps},
        )
        # The plain rms_norm the same norm would be with the residual already added.
        rec.record(
            "rms_norm",
            layer,
            point,
            [("out", "out", out), ("input", "in", new_residual), ("weight", "in", weight)],
            {"epsilon": eps},
        )
        return out, new_residual

    def forward(
        self,
        batch: Batch,
        kv_cache: List[List[torch.Tensor]],
        rec: Optional[Recorder] = None,
    ) -> torch.Tensor:
        """Runs one step, writing the new tokens' keys and values into `kv_cache` (replaced
        per layer). Returns float32 logits [num_seqs, vocab] of each sequence's last token."""
        rec = rec or Recorder()
        c = self.config
        tokens = batch.tokens.to(self.device)
        positions = batch.positions.to(self.device)
        slot_mapping = batch.slot_mapping.to(self.device)
        n_tokens = tokens.shape[0]
        scale = 1.0 / math.sqrt(c.head_size)
        x = self.w("model.embed_tokens.weight")[tokens]
        residual = None
        for i in range(c.n_layers):
            p = f"model.layers.{i}."
            h, residual = self._norm(rec, i, "attn_norm", x, residual, p + "input_layernorm.weight")
            self._record_fp8_linear(rec, i, "qkv_proj", h, [p + "self_attn.q_proj",
                                                            p + "self_attn.k_proj",
                                                            p + "self_attn.v_proj"])
            q = self._linear(h, p + "self_attn.q_proj")
            k = self._linear(h, p + "self_attn.k_proj")
            v = self._linear(h, p + "self_attn.v_proj")
            q_rot, k_rot = ops.rotary_embedding(
                positions, q, k, c.head_size, self.rope_cache, c.is_neox
            )
            rec.record(
                "rotary_embedding",
                i,
                "rope",
                [
                    ("positions", "in", positions),
                    ("query", "inout", q),
                    ("key", "inout", k),
                    ("cos_sin_cache", "in", self.rope_cache),
                    ("query", "after", q_rot),
                    ("key", "after", k_rot),
                ],
                {"head_size": c.head_size, "is_neox": c.is_neox},
            )
            k3 = k_rot.view(n_tokens, c.n_kv_heads, c.head_size)
            v3 = v.view(n_tokens, c.n_kv_heads, c.head_size)
            key_cache, value_cache = kv_cache[i]
            kv_key, kv_value, kv_slots = k3, v3, slot_mapping
            if batch.kv_pad_rows:
                # Padding rows hold stale values (here: negated real rows), never zeros, so a
                # kernel that writes them somewhere shows up.
                rows = torch.arange(batch.kv_pad_rows, device=self.device) % n_tokens
                kv_key = torch.cat([k3, -k3[rows]])
                kv_value = torch.cat([v3, -v3[rows]])
                pad = torch.full((batch.kv_pad_rows,), -1, dtype=torch.int64, device=self.device)
                kv_slots = torch.cat([slot_mapping, pad])
            new_kc, new_vc = ops.reshape_and_cache_flash(
                kv_key, kv_value, key_cache, value_cache, kv_slots
            )
            rec.record(
                "reshape_and_cache_flash",
                i,
                "kv_cache",
                [
                    ("key", "in", kv_key),
                    ("value", "in", kv_value),
                    ("key_cache", "inout", key_cache),
                    ("value_cache", "inout", value_cache),
                    ("slot_mapping", "in", kv_slots),
                    ("key_cache", "after", new_kc),
                    ("value_cache", "after", new_vc),
                ],
                {},
            )
            kv_cache[i] = [new_kc, new_vc]
            q3 = q_rot.view(n_tokens, c.n_heads, c.head_size)
            if batch.phase == "decode":
                block_tables = batch.block_tables.to(self.device)
                seq_lens = batch.seq_lens.to(self.device)
                attn = ops.paged_decode_attention(
                    q3, new_kc, new_vc, block_tables, seq_lens, scale
                )
                rec.record(
                    "paged_decode_attention",
                    i,
                    "attention",
                    [
                        ("out", "out", attn),
                        ("query", "in", q3),
                        ("key_cache", "in", new_kc),
                        ("value_cache", "in", new_vc),
                        ("block_tables", "in", block_tables),
                        ("seq_lens", "in", seq_lens),
                    ],
                    {"scale": scale},
                )
            else:
                parts = []
                start = 0
                for n in batch.query_lens:
                    sl = slice(start, start + n)
                    parts.append(ops.causal_attention(q3[sl], k3[sl], v3[sl], scale))
                    start += n
                attn = torch.cat(parts, dim=0)
            attn = attn.reshape(n_tokens, c.n_heads * c.head_size)
            self._record_fp8_linear(rec, i, "o_proj", attn, [p + "self_attn.o_proj"])
            x = self._linear(attn, p + "self_attn.o_proj")
            h, residual = self._norm(
                rec, i, "ffn_norm", x, residual, p + "post_attention_layernorm.weight"
            )
            x = self._moe(rec, i, h) if c.n_experts else self._mlp(rec, i, h)
        h, _ = self._norm(rec, None, "final_norm", x, residual, "model.norm.weight")
        last = torch.tensor(batch.query_lens, device=self.device).cumsum(0) - 1
        head = "model.embed_tokens.weight" if c.tie_embeddings else "lm_head.weight"
        return h[last].to(F32) @ self.w(head).to(F32).t()

    def _mlp(self, rec: Recorder, i: int, h: torch.Tensor) -> torch.Tensor:
        p = f"model.layers.{i}.mlp."
        # vLLM's merged gate_up projection: [gate | up] on the last dim.
        gate_up = torch.cat([self._linear(h, p + "gate_proj"), self._linear(h, p + "up_proj")], -1)
        act = ops.silu_and_mul(gate_up)
        rec.record(
            "silu_and_mul",
            i,
            "mlp",
            [("out", "out", act), ("input", "in", gate_up)],
            {},
        )
        return self._linear(act, p + "down_proj")

    def _moe(self, rec: Recorder, i: int, h: torch.Tensor) -> torch.Tensor:
        # Mixtral: softmax over every expert's router logit, keep the top k, renormalise; each
        # (token, chosen expert) row goes through that expert's SwiGLU, as in vLLM's fused_moe
        # whose intermediate [T * k, 2 * hidden] is what silu_and_mul sees.
        c = self.config
        p = f"model.layers.{i}.block_sparse_moe."
        logits = self._linear(h, p + "gate").to(F32)
        probs = torch.softmax(logits, dim=-1)
        topw, topi = probs.topk(c.experts_per_token, dim=-1)
        topw = topw / topw.sum(dim=-1, keepdim=True)
        rows = []
        for t in range(h.shape[0]):
            for j in range(c.experts_per_token):
                e = int(topi[t, j])
                x = h[t : t + 1]
                rows.append(
                    torch.cat(
                        [
                            self._linear(x, f"{p}experts.{e}.w1"),
                            self._linear(x, f"{p}experts.{e}.w3"),
                        ],
                        -1,
                    )
                )
        gate_up = torch.cat(rows, dim=0)
        act = ops.silu_and_mul(gate_up)
        rec.record(
            "silu_and_mul",
            i,
            "moe",
            [("out", "out", act), ("input", "in", gate_up)],
            {"experts": topi.flatten().tolist()},
        )
        out = torch.zeros(h.shape[0], c.dim, dtype=F32, device=h.device)
        for r in range(act.shape[0]):
            t, j = divmod(r, c.experts_per_token)
            e = int(topi[t, j])
            down = self._linear(act[r : r + 1], f"{p}experts.{e}.w2")
            out[t] += topw[t, j] * down[0].to(F32)
        return out.to(h.dtype)
