"""Runs a model like a serving engine and records the vLLM ops it calls.

Stage 1 generates, from BOS, one token stream per sequence (seeded sampling or greedy), with
nothing recorded. Stage 2 prefills every sequence's prompt (a prefix of its stream, of a given
length) in one flattened batch, then decodes a number of steps, one token per sequence per
step; the prefill and the chosen decode steps are recorded. Each (phase, step, op) becomes one
safetensors file plus a provenance JSON beside it (docs/capture.md).
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from . import ops
from .model import Batch, Model, Recorder, case_name
from .safetensors_io import (
    SAFETENSORS_TO_CRUCIBLE,
    TORCH_TO_SAFETENSORS,
    write_safetensors,
)

TOOL_VERSION = "1.0.0"
FORMAT = "crucible-capture/1"
OPS = (
    "rms_norm",
    "fused_add_rms_norm",
    "silu_and_mul",
    "rotary_embedding",
    "reshape_and_cache_flash",
    "paged_decode_attention",
    "top_k_top_p_sampling_from_logits",
    "dynamic_per_token_scaled_fp8_quant",
    "fp8_scaled_linear",
)
# Ops recorded at the --kv-layers only: the KV-cache ops and the FP8 linear ops, whose caches
# and weights make them the largest records.
KV_LAYER_OPS = ("reshape_and_cache_flash", "paged_decode_attention",
                "dynamic_per_token_scaled_fp8_quant", "fp8_scaled_linear")
SAMPLER = "top_k_top_p_sampling_from_logits"
# The sampler's per-row settings: llm/top_k_top_p_sampling_from_logits's serving mix (neither
# filter, top-k 50, top-p 0.95, both (20, 0.9), both (100, 0.95), top-p 0.8, top-k 1000, both
# (50, 0.9)); row b of the logits of step i (the prefill 0, decode step s s + 1) takes entry
# (i * num_seqs + b) % 8. Top-k 1000000 is off (any k >= vocab).
SAMPLER_TOP_K = (1000000, 50, 1000000, 20, 100, 1000000, 1000, 50)
SAMPLER_TOP_P = (1.0, 1.0, 0.95, 0.9, 0.95, 0.8, 1.0, 0.9)


@dataclass
class CaptureSettings:
    seed: int = 1234
    temperature: float = 1.0  # 0: greedy
    top_k: int = 0  # 0: the whole vocabulary
    prompt_lens: Sequence[int] = (3, 5, 8, 11)  # one per sequence
    decode_steps: int = 4
    capture_steps: Sequence[int] = (0, 3)  # decode steps recorded
    block_size: int = 16
    spare_blocks: int = 3  # blocks no sequence uses (their slots must stay untouched)
    ops: Sequence[str] = OPS
    layers: Optional[Sequence[int]] = None  # None: every layer (the final norm is always kept)
    kv_layers: Optional[Sequence[int]] = None  # layers recorded for KV ops; None: as `layers`
    decode_pad_to: int = 8  # decode rows of reshape_and_cache_flash padded to a multiple
    rope_rows: Optional[int] = None  # cos_sin_cache rows; None: min(max_position, 4096)


@dataclass
class CaseRecord:
    op: str
    name: str
    layer: Optional[int]
    point: str
    tensors: List[Tuple[str, str, torch.Tensor]]
    scalars: Dict[str, Any]


class CaptureRecorder(Recorder):
    """Keeps CPU copies of the op calls made while `label` is set, grouped by (label, op)."""

    def __init__(self, settings: CaptureSettings):
        self.settings = settings
        self.label: Optional[str] = None
        self.groups: Dict[Tuple[str, str], List[CaseRecord]] = {}

    def wants(self, op, layer):
        s = self.settings
        if self.label is None or op not in s.ops:
            return False
        layers = s.kv_layers if op in KV_LAYER_OPS and s.kv_layers is not None else s.layers
        return layer is None or layers is None or layer in layers

    def record(self, op, layer, point, tensors, scalars):
        if not self.wants(op, layer):
            return
        copies = [(arg, role, t.detach().to("cpu").clone()) for arg, role, t in tensors]
        self.groups.setdefault((self.label, op), []).append(
            CaseRecord(op, case_name(layer, point), layer, point, copies, dict(scalars))
        )


@dataclass
class Sequence_:
    tokens: List[int]
    blocks: List[int] = field(default_factory=list)
    cached: int = 0  # tokens whose keys and values are in the cache


class Engine:
    """A paged KV cache and the batches of one generation run."""

    def __init__(self, model: Model, num_blocks: int, block_size: int, rng: random.Random):
        self.model = model
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.free = list(range(num_blocks))
        rng.shuffle(self.free)  # blocks of a sequence are scattered, as in a running server
        self.kv = model.new_kv_cache(num_blocks, block_size)

    def _slot(self, seq: Sequence_, pos: int) -> int:
        while len(seq.blocks) <= pos // self.block_size:
            if not self.free:
                raise RuntimeError("KV cache out of blocks")
            seq.blocks.append(self.free.pop())
        return seq.blocks[pos // self.block_size] * self.block_size + pos % self.block_size

    def step(
        self, seqs: List[Sequence_], phase: str, rec: Optional[Recorder] = None, pad_to: int = 0
    ) -> torch.Tensor:
        """Feeds every uncached token of every sequence; returns logits [num_seqs, vocab]."""
        tokens, positions, slots, query_lens = [], [], [], []
        for seq in seqs:
            new = range(seq.cached, len(seq.tokens))
            if phase == "decode" and len(new) != 1:
                raise RuntimeError("a decode step feeds exactly one token per sequence")
            for pos in new:
                tokens.append(seq.tokens[pos])
                positions.append(pos)
                slots.append(self._slot(seq, pos))
            query_lens.append(len(new))
            seq.cached = len(seq.tokens)
        max_blocks = max(len(s.blocks) for s in seqs)
        # Unused table entries hold 0, a valid block, as vLLM leaves them: seq_lens bounds reads.
        tables = torch.zeros(len(seqs), max_blocks, dtype=torch.int32)
        for i, seq in enumerate(seqs):
            tables[i, : len(seq.blocks)] = torch.tensor(seq.blocks, dtype=torch.int32)
        n = len(tokens)
        batch = Batch(
            phase=phase,
            tokens=torch.tensor(tokens, dtype=torch.int64),
            positions=torch.tensor(positions, dtype=torch.int64),
            query_lens=query_lens,
            seq_lens=torch.tensor([s.cached for s in seqs], dtype=torch.int32),
            slot_mapping=torch.tensor(slots, dtype=torch.int64),
            block_tables=tables,
            kv_pad_rows=(-n % pad_to) if pad_to else 0,
        )
        return self.model.forward(batch, self.kv, rec)


def sample(logits: torch.Tensor, temperature: float, top_k: int, gen: torch.Generator) -> List[int]:
    """Next token of every row: argmax when temperature is 0, else a seeded draw."""
    logits = logits.to("cpu", torch.float64)
    if temperature == 0:
        return logits.argmax(dim=-1).tolist()
    logits = logits / temperature
    if top_k:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs, 1, generator=gen)[:, 0].tolist()


def record_sampler(rec: Recorder, logits: torch.Tensor, step: int, gen: torch.Generator) -> None:
    """The sampler a serving engine runs on a step's logits, recorded as the task defines it: the
    float32 logits of every sequence's last token, one uniform draw a row (from `gen`, drawn for
    every step, recorded or not) and the serving mix's top-k and top-p, and the token the
    inverse CDF of the filtered distribution gives. The run's own next tokens come from
    `sample` (its --temperature and --top-k), not from this draw."""
    rows = logits.shape[0]
    uniform = torch.rand(rows, generator=gen, dtype=torch.float32)
    entries = [(step * rows + b) % len(SAMPLER_TOP_K) for b in range(rows)]
    top_k = torch.tensor([SAMPLER_TOP_K[e] for e in entries], dtype=torch.int32)
    top_p = torch.tensor([SAMPLER_TOP_P[e] for e in entries], dtype=torch.float32)
    logits = logits.detach().to("cpu", torch.float32)
    samples = ops.top_k_top_p_sampling_from_logits(logits, uniform, top_k, top_p)
    rec.record(
        SAMPLER,
        None,
        "sampler",
        [
            ("samples", "out", samples),
            ("logits", "in", logits),
            ("uniform_samples", "in", uniform),
            ("top_k", "in", top_k),
            ("top_p", "in", top_p),
        ],
        {},
    )


def _blocks_needed(lengths: Sequence[int], block_size: int) -> int:
    return sum((n + block_size - 1) // block_size for n in lengths)


def generate(model: Model, settings: CaptureSettings) -> List[List[int]]:
    """Stage 1: one stream per sequence from BOS, long enough for its prompt and every decode
    step; nothing recorded. The decode steps of stage 2 re-sample their own tokens, so only
    the prompts are taken from here."""
    s = settings
    gen = torch.Generator().manual_seed(s.seed)
    seqs = [Sequence_([model.config.bos_token_id]) for _ in s.prompt_lens]
    longest = max(s.prompt_lens)
    blocks = _blocks_needed([longest] * len(seqs), s.block_size)
    engine = Engine(model, blocks, s.block_size, random.Random(s.seed))
    logits = engine.step(seqs, "prefill")
    while len(seqs[0].tokens) < longest:
        for seq, tok in zip(seqs, sample(logits, s.temperature, s.top_k, gen)):
            seq.tokens.append(tok)
        logits = engine.step(seqs, "decode")
    return [seq.tokens[:n] for seq, n in zip(seqs, s.prompt_lens)]


@dataclass
class CaptureRun:
    prompts: List[List[int]]
    generated: List[List[int]]  # tokens sampled after each prompt, one per decode step + 1
    step_tokens: Dict[str, List[int]]  # tokens fed at each recorded label
    num_blocks: int
    recorder: CaptureRecorder


def run_capture(model: Model, settings: CaptureSettings) -> CaptureRun:
    s = settings
    if any(n < 1 for n in s.prompt_lens):
        raise ValueError("every prompt holds at least BOS")
    rows = s.rope_rows or min(model.config.max_position, 4096)
    if max(s.prompt_lens) + s.decode_steps > rows:
        raise ValueError(f"prompts plus decode steps exceed the {rows} rotary positions")
    model.set_rope_rows(rows)
    prompts = generate(model, s)
    gen = torch.Generator().manual_seed(s.seed + 1)
    final_lens = [n + s.decode_steps for n in s.prompt_lens]
    num_blocks = _blocks_needed(final_lens, s.block_size) + s.spare_blocks
    engine = Engine(model, num_blocks, s.block_size, random.Random(s.seed + 1))
    rec = CaptureRecorder(s)
    seqs = [Sequence_(list(p)) for p in prompts]
    step_tokens: Dict[str, List[int]] = {}
    rec.label = "prefill"
    step_tokens["prefill"] = [t for p in prompts for t in p]
    logits = engine.step(seqs, "prefill", rec)
    sampler_gen = torch.Generator().manual_seed(s.seed + 2)
    record_sampler(rec, logits, 0, sampler_gen)
    generated: List[List[int]] = [[] for _ in seqs]
    for step in range(s.decode_steps + 1):
        for seq, out, tok in zip(seqs, generated, sample(logits, s.temperature, s.top_k, gen)):
            seq.tokens.append(tok)
            out.append(tok)
        if step == s.decode_steps:
            break
        label = f"decode_step{step}"
        rec.label = label if step in s.capture_steps else None
        if rec.label:
            step_tokens[label] = [seq.tokens[-1] for seq in seqs]
        logits = engine.step(seqs, "decode", rec, pad_to=s.decode_pad_to)
        record_sampler(rec, logits, step + 1, sampler_gen)
    rec.label = None
    return CaptureRun(prompts, generated, step_tokens, num_blocks, rec)


def _tensor_name(case: str, arg: str, role: str) -> str:
    return f"{case}/{arg}.after" if role == "after" else f"{case}/{arg}"


def write_run(
    model: Model, settings: CaptureSettings, run: CaptureRun, out_dir: str, command: str = ""
) -> List[str]:
    """Writes one <label>.<op>.safetensors and <label>.<op>.json per recorded group; returns the
    safetensors paths. `command` (the command line that made the run) goes into provenance."""
    os.makedirs(out_dir, exist_ok=True)
    s = settings
    generation = {
        "bos_token_id": model.config.bos_token_id,
        "seed": s.seed,
        "sampling": {"temperature": s.temperature, "top_k": s.top_k,
                     "mode": "greedy" if s.temperature == 0 else "sampled"},
        "num_seqs": len(s.prompt_lens),
        "prompt_lens": list(s.prompt_lens),
        "prompts": run.prompts,
        "decode_steps": s.decode_steps,
        "generated": run.generated,
        "block_size": s.block_size,
        "num_blocks": run.num_blocks,
        "decode_pad_to": s.decode_pad_to,
        "command": command,
    }
    written = []
    for (label, op), cases in sorted(run.recorder.groups.items()):
        stem = f"{label}.{op}"
        tensors: Dict[str, torch.Tensor] = {}
        case_docs = []
        for case in cases:
            docs = []
            for arg, role, t in case.tensors:
                name = _tensor_name(case.name, arg, role)
                if name in tensors:
                    raise RuntimeError(f"{stem}: tensor {name} recorded twice")
                tensors[name] = t
                docs.append({
                    "name": name,
                    "arg": arg,
                    "role": role,
                    "dtype": SAFETENSORS_TO_CRUCIBLE[TORCH_TO_SAFETENSORS[t.dtype]],
                    "shape": list(t.shape),
                })
            case_docs.append({
                "name": case.name,
                "layer": case.layer,
                "point": case.point,
                "scalars": case.scalars,
                "tensors": docs,
            })
        path = os.path.join(out_dir, stem + ".safetensors")
        # The writer serialises each tensor once and reports its stored bytes' count and hash.
        digests = write_safetensors(path, tensors, {"format": "pt", "crucible": FORMAT})
        for case_doc in case_docs:
            for doc in case_doc["tensors"]:
                doc["bytes"], doc["sha256"] = digests[doc["name"]]
        phase, step = ("prefill", None) if label == "prefill" else ("decode", int(label[11:]))
        provenance = {
            "format": FORMAT,
            "tool": {"name": "crucible tasks/capture", "version": TOOL_VERSION,
                     "torch": torch.__version__, "device": str(model.device)},
            "model": {"name": model.config.name, "architecture": model.config.architecture,
                      "config": model.config.to_json(), "weights": model.sources},
            "generation": generation,
            "phase": phase,
            "step": step,
            "step_tokens": run.step_tokens[label],
            "op": op,
            "file": stem + ".safetensors",
            "cases": case_docs,
        }
        with open(os.path.join(out_dir, stem + ".json"), "w") as f:
            json.dump(provenance, f, indent=1, sort_keys=False)
            f.write("\n")
        written.append(path)
    return written
