#!/usr/bin/env python3
"""Reference parity: every task's reference against the best PyTorch implementation of the same
op on the same shapes, and against the roofline floor (bench/README.md).

Run on the GPU machine (PyTorch with CUDA) from the repository root, after `crucible eval` has
scored every task's own reference (so results.jsonl holds crucible's CUPTI times of the
reference per timing case):

    crucible eval refs.jsonl -o refs-eval       # refs.jsonl: bench/gpu/parity.py --references
    python3 bench/gpu/parity.py --crucible refs-eval/results.jsonl --json parity.json

Library times are kernel times from torch.profiler (the sum of the GPU kernels of one call, not
host time), median over calls, each call on its own copy of the inputs with a 2 x L2 read
between calls (the conditions crucible times its kernels under). PyTorch eager and
torch.compile (inductor, default mode) are both measured; the best of the two is the library
time. Paged decode attention is compared with PyTorch's FlashAttention-2 and memory-efficient
attention kernels over the same contexts gathered into their packed varlen layout (the gather is
not timed); linear with torch.mm (cuBLAS). The floor is crucible's roofline floor of the case
(bytes / bandwidth, FLOPs / peak).
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

TORCH_DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "f64": "float64",
                "fp8_e4m3": "float8_e4m3fn", "i32": "int32", "i64": "int64", "u8": "uint8",
                "i8": "int8", "i16": "int16", "bool": "bool"}


def crucible(*args):
    # crucible's own libraries (CRUCIBLE_LIBRARY_PATH) for it alone: PyTorch keeps the system's.
    env = dict(os.environ)
    if "CRUCIBLE_LIBRARY_PATH" in env:
        env["LD_LIBRARY_PATH"] = env["CRUCIBLE_LIBRARY_PATH"]
    return subprocess.check_output(["build/dev/bin/crucible", *args], text=True, env=env)


def crucible_json(*args):
    return json.loads(crucible(*args))


def task_ids():
    out = crucible("tasks", "list")
    rows = [line.split() for line in out.splitlines()[1:]]
    return [row[0] for row in rows if row and "/" in row[0]]


def write_references(path, only=None):
    with open(path, "w") as out:
        for task in task_ids():
            if only and task not in only:
                continue
            view = crucible_json("tasks", "show", task, "--json")
            out.write(json.dumps({"task": task, "sample_id": f"{task}#reference",
                                  "source": view["reference"]["source"]}) + "\n")


# ---- inputs -----------------------------------------------------------------------------------

def make_inputs(torch, view, case, device):
    symbols = case["symbols"]
    tensors = {}
    for spec in view["tensors"]:
        shape = [symbols[d] if d in symbols else int(d) for d in spec["shape"]]
        dtype = getattr(torch, TORCH_DTYPES[spec["dtype"]])
        values = case.get("values", {}).get(spec["name"])
        tensors[spec["name"]] = fill(torch, values, shape, dtype, device)
    return tensors


def fill(torch, values, shape, dtype, device):
    kind = (values or {}).get("generator", "zeros")
    numel = 1
    for d in shape:
        numel *= d
    if kind == "randn":
        t = torch.randn(shape, device=device) * values["std"] + values["mean"]
    elif kind == "uniform":
        t = torch.rand(shape, device=device) * (values["hi"] - values["lo"]) + values["lo"]
        if not dtype.is_floating_point:
            t = t.floor()
    elif kind == "constant":
        t = torch.full(shape, values["value"], device=device)
    elif kind == "ones":
        t = torch.ones(shape, device=device)
    elif kind == "positions":
        t = (torch.arange(numel, device=device) % values["max"]).reshape(shape)
    elif kind == "permutation":
        t = torch.randperm(values["max"], device=device)[:numel].reshape(shape)
        if values.get("pad", 0) > 0:
            t[torch.rand(shape, device=device) < values["pad"]] = -1
    elif kind == "list":
        values_list = torch.tensor(values["values"], dtype=torch.float64, device=device)
        t = values_list[torch.arange(numel, device=device) % len(values["values"])].reshape(shape)
    elif kind == "rope_cache":
        dim = values["dim"]
        inv = values.get("theta", 10000.0) ** (-torch.arange(0, dim, 2, device=device) / dim)
        angles = torch.arange(shape[0], device=device)[:, None] * inv[None, :]
        t = torch.cat([angles.cos(), angles.sin()], dim=-1)
    else:
        t = torch.zeros(shape, device=device)
    if dtype == torch.float8_e4m3fn:
        return t.to(torch.float32).clamp(-448, 448).to(dtype)
    return t.to(dtype)


# ---- the ops in PyTorch (vLLM semantics) ------------------------------------------------------

def op_rms_norm(torch, t, s, sym):
    x = t["input"].float()
    t["out"].copy_((x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + s["epsilon"])).to(
        t["input"].dtype) * t["weight"])


def op_fused_add_rms_norm(torch, t, s, sym):
    r = (t["input"].float() + t["residual"].float()).to(t["residual"].dtype)
    t["residual"].copy_(r)
    x = r.float()
    t["input"].copy_((x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + s["epsilon"])).to(
        r.dtype) * t["weight"])


def op_silu_and_mul(torch, t, s, sym):
    x = t["input"].reshape(t["input"].shape[0], 2, -1)  # [tokens, 2, d]: gate half, then up
    t["out"].copy_(torch.nn.functional.silu(x[:, 0].float()).to(x.dtype) * x[:, 1])


def op_fp8_quant(torch, t, s, sym):
    x = t["input"].float()
    scale = (x.abs().amax(-1, keepdim=True) / 448.0).clamp(min=1.0 / (448.0 * 512.0))
    t["scale"].copy_(scale)
    t["out"].copy_((x / scale).clamp(-448, 448).to(torch.float8_e4m3fn))


def op_rotary(torch, t, s, sym):
    pos = t["positions"]
    head = int(s.get("head_size", sym.get("head_size", 128)))
    cache = t["cos_sin_cache"].index_select(0, pos)
    cos, sin = cache.chunk(2, dim=-1)
    neox = int(s.get("is_neox", 1)) == 1
    for name in ("query", "key"):
        x = t[name]
        xs = x.view(x.shape[0], -1, head)
        if neox:
            x1, x2 = xs[..., : head // 2], xs[..., head // 2:]
            c, sn = cos[:, None, :], sin[:, None, :]
            out = torch.cat([x1 * c - x2 * sn, x2 * c + x1 * sn], dim=-1)
        else:
            x1, x2 = xs[..., 0::2], xs[..., 1::2]
            c, sn = cos[:, None, :], sin[:, None, :]
            out = torch.stack([x1 * c - x2 * sn, x2 * c + x1 * sn], dim=-1).flatten(-2)
        xs.copy_(out)


def op_reshape_and_cache_flash(torch, t, s, sym):
    slots = t["slot_mapping"]
    valid = slots >= 0
    kc, vc = t["key_cache"], t["value_cache"]
    flat_k = kc.view(-1, *kc.shape[2:])
    flat_v = vc.view(-1, *vc.shape[2:])
    idx = slots[valid]
    flat_k.index_copy_(0, idx, t["key"][valid])
    flat_v.index_copy_(0, idx, t["value"][valid])


def op_topk_softmax(torch, t, s, sym):
    k = t["topk_weights"].shape[-1]
    probs = torch.softmax(t["gating_output"].float(), dim=-1)
    w, i = probs.topk(k, dim=-1)
    t["topk_weights"].copy_(w)
    t["topk_indices"].copy_(i.to(t["topk_indices"].dtype))
    if "token_expert_indices" in t:
        n = probs.shape[0]
        ar = torch.arange(k, device=probs.device, dtype=torch.int32)[None, :] * n
        t["token_expert_indices"].copy_(ar + torch.arange(n, device=probs.device,
                                                          dtype=torch.int32)[:, None])


def op_grouped_topk(torch, t, s, sym):
    gating = t["gating_output"].float()
    scores = gating.sigmoid()
    choice = scores + t["e_score_correction_bias"].float()[None, :]
    n, e = choice.shape
    groups = int(sym.get("num_expert_group", s.get("num_expert_group", 8)))
    topk_group = int(sym.get("topk_group", s.get("topk_group", 4)))
    k = t["topk_weights"].shape[-1]
    group_scores = choice.view(n, groups, -1).topk(2, dim=-1)[0].sum(-1)
    keep = group_scores.topk(topk_group, dim=-1)[1]
    mask = torch.zeros_like(group_scores).scatter_(1, keep, 1)
    mask = mask[:, :, None].expand(n, groups, e // groups).reshape(n, e)
    ids = choice.masked_fill(mask == 0, float("-inf")).topk(k, dim=-1)[1]
    w = scores.gather(1, ids)
    w = w / w.sum(-1, keepdim=True) * float(s.get("routed_scaling_factor", 2.5))
    t["topk_weights"].copy_(w)
    name = "topk_ids" if "topk_ids" in t else "topk_indices"
    t[name].copy_(ids.to(t[name].dtype))


def op_linear(torch, t, s, sym):
    # F.linear without a bias is this matrix product; PyTorch hands it to cuBLAS(Lt).
    torch.mm(t["input"], t["weight"].t(), out=t["out"])


def prepare_paged_attention(torch, t, s, sym):
    """Gathers each sequence's context from the paged cache into the packed layout of
    FlashAttention's varlen call (untimed: the library gets contiguous keys and values, the
    reference reads them through the block table)."""
    block = t["key_cache"].shape[1]
    lens = t["seq_lens"].long().tolist()
    keys, values = [], []
    for s_i, n in enumerate(lens):
        blocks = t["block_tables"][s_i, : (n + block - 1) // block].long()
        keys.append(t["key_cache"][blocks].flatten(0, 1)[:n])
        values.append(t["value_cache"][blocks].flatten(0, 1)[:n])
    t["_k"] = torch.cat(keys).contiguous()
    t["_v"] = torch.cat(values).contiguous()
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n)
    t["_cu_k"] = torch.tensor(cu, dtype=torch.int32, device=t["query"].device)
    t["_cu_q"] = torch.arange(len(lens) + 1, dtype=torch.int32, device=t["query"].device)
    t["_max_k"] = max(lens)
    # The memory-efficient kernel has no grouped-query heads: it gets keys and values repeated
    # per query head (also untimed).
    group = t["query"].shape[1] // t["_k"].shape[1]
    t["_ke"] = t["_k"].repeat_interleave(group, dim=1)[None].contiguous()
    t["_ve"] = t["_v"].repeat_interleave(group, dim=1)[None].contiguous()


def attention_check(torch, t, s):
    """The exact attention of the prepared contexts in fp32: what a library kernel's output is
    checked against before it is timed (a mis-specified call must not yield a time)."""
    scale = float(s.get("scale", 1.0 / (t["query"].shape[-1] ** 0.5)))
    cu = t["_cu_k"].tolist()
    heads = t["query"].shape[1]
    outs = []
    for i in range(len(cu) - 1):
        k = t["_k"][cu[i]:cu[i + 1]].float()
        v = t["_v"][cu[i]:cu[i + 1]].float()
        group = heads // k.shape[1]
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        scores = torch.einsum("hd,nhd->hn", t["query"][i].float(), k) * scale
        outs.append(torch.einsum("hn,nhd->hd", torch.softmax(scores, dim=-1), v))
    return torch.stack(outs)


def op_paged_attention_flash(torch, t, s, sym):
    # FlashAttention-2 (PyTorch's own build) over the packed varlen layout, one query a sequence.
    # Only the attention kernel runs here: its output is the call's result (no copy timed).
    return torch.ops.aten._flash_attention_forward(
        t["query"], t["_k"], t["_v"], t["_cu_q"], t["_cu_k"], 1, t["_max_k"], 0.0, False, False,
        scale=float(s.get("scale", 1.0 / (t["query"].shape[-1] ** 0.5))))[0]


def op_paged_attention_efficient(torch, t, s, sym):
    # The memory-efficient (CUTLASS) attention kernel over the same packed layout. It has no
    # grouped-query heads, so it reads keys and values repeated per query head (G times the
    # bytes): not like for like, listed for completeness.
    q = t["query"][None]
    return torch.ops.aten._efficient_attention_forward(
        q, t["_ke"], t["_ve"], None, t["_cu_q"], t["_cu_k"], 1, t["_max_k"], 0.0, 0, False,
        scale=float(s.get("scale", 1.0 / (q.shape[-1] ** 0.5))))[0][0]


OPS = {
    "llm/rms_norm": op_rms_norm,
    "llm/fused_add_rms_norm": op_fused_add_rms_norm,
    "llm/silu_and_mul": op_silu_and_mul,
    "llm/dynamic_per_token_scaled_fp8_quant": op_fp8_quant,
    "llm/rotary_embedding": op_rotary,
    "llm/reshape_and_cache_flash": op_reshape_and_cache_flash,
    "llm/topk_softmax": op_topk_softmax,
    "llm/grouped_topk": op_grouped_topk,
    "llm/linear": op_linear,
}
# Tasks whose library is not a PyTorch composition: named kernels, each timed eagerly (there is
# nothing for torch.compile to fuse), the best kept. `prepare` runs once per input copy, untimed.
LIBRARY_KERNELS = {
    "llm/paged_decode_attention": {
        "prepare": prepare_paged_attention,
        "kernels": {"FlashAttention-2 varlen": op_paged_attention_flash,
                    "memory-efficient attention (kv heads repeated)":
                        op_paged_attention_efficient},
        "check": attention_check,
    },
}


# ---- timing -----------------------------------------------------------------------------------

def gpu_kernels(torch, prof):
    return sorted((e for e in prof.events() if e.device_type.name == "CUDA"),
                  key=lambda e: e.time_range.start)


def flush_kernel_names(torch, flush):
    """The names of the kernels the L2 flush launches, to split a profile into calls."""
    from torch.profiler import ProfilerActivity, profile
    flush()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        flush()
        torch.cuda.synchronize()
    return {e.name for e in gpu_kernels(torch, prof)}


def kernel_times_ns(torch, fn, inputs, calls, flush, flush_names):
    """Median over calls of the summed GPU kernel time of one call (torch.profiler): the
    kernels between one flush and the next belong to one call."""
    from torch.profiler import ProfilerActivity, profile
    for i in range(3):
        fn(inputs[i % len(inputs)])
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for i in range(calls):
            flush()
            fn(inputs[i % len(inputs)])
        flush()
        torch.cuda.synchronize()
    per_call, current, in_call = [], 0.0, False
    for event in gpu_kernels(torch, prof):
        if event.name in flush_names:
            if in_call:
                per_call.append(current)
            current, in_call = 0.0, False
            continue
        in_call = True
        current += event.time_range.elapsed_us()
    per_call = [c for c in per_call if c > 0]
    return 1000.0 * statistics.median(per_call) if per_call else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--references", help="write the JSONL of every task's reference here")
    parser.add_argument("--crucible", help="results.jsonl of `crucible eval` on the references")
    parser.add_argument("--json", help="write the table here")
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--tasks", nargs="*", help="only these task ids (default: all)")
    args = parser.parse_args()
    if args.references:
        write_references(args.references, args.tasks)
        return
    import torch
    device = "cuda"
    crucible = {}
    for line in pathlib.Path(args.crucible).read_text().splitlines():
        record = json.loads(line)
        timing = (record.get("result") or {}).get("timing") or {}
        for case in timing.get("cases", []):
            crucible[(record["task"], case["case"])] = case
        if record.get("status") != "ok":
            print(f"{record['task']}: reference scored {record.get('status')}: "
                  f"{record.get('message', '')[:160]}", file=sys.stderr)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush_buffer = torch.ones(2 * l2 // 4 + 1, dtype=torch.int32, device=device)

    def flush():
        flush_buffer.sum(dtype=torch.int64)

    flush_names = flush_kernel_names(torch, flush)
    torch._dynamo.config.recompile_limit = 64
    rows = []
    for task in task_ids():
        if args.tasks and task not in args.tasks:
            continue
        view = crucible_json("tasks", "show", task, "--json")
        op = OPS.get(task)
        torch._dynamo.reset()
        if op is None and task not in LIBRARY_KERNELS:
            print(f"{task}: no library implementation in this script", file=sys.stderr)
        for case in view["cases"]:
            key = (task, case["name"])
            row = {"task": task, "case": case["name"], "symbols": case["symbols"],
                   "weight": case["weight"], "floor_ns": case["roofline"]["h200_floor_ns"]}
            if key in crucible:
                row["reference_ns"] = crucible[key]["reference"]["median_ns"]
                row["floor_ns"] = crucible[key]["floor_ns"]
                # The reference source scored as the candidate: the reference against itself,
                # or, where a library is the reference, the agent's starting point.
                row["source_ns"] = crucible[key]["candidate"]["median_ns"]
                if "reference_library" in crucible[key]:
                    row["reference_library"] = crucible[key]["reference_library"]
            scalars = case.get("scalars", {})
            if op is not None:
                copies = [make_inputs(torch, view, case, device) for _ in range(4)]

                def eager(t):
                    op(torch, t, scalars, case["symbols"])

                try:
                    row["eager_ns"] = kernel_times_ns(torch, eager, copies, args.calls, flush,
                                                      flush_names)
                except Exception as error:  # report, do not hide
                    row["eager_error"] = str(error).splitlines()[0][:200]
                    print(f"{task} {case['name']}: eager failed: {row['eager_error']}",
                          file=sys.stderr)
                try:
                    compiled = torch.compile(lambda t: op(torch, t, scalars, case["symbols"]))
                    row["compile_ns"] = kernel_times_ns(torch, compiled, copies, args.calls,
                                                        flush, flush_names)
                except Exception as error:  # report, do not hide
                    row["compile_error"] = str(error).splitlines()[0][:200]
                library = [v for v in (row.get("eager_ns"), row.get("compile_ns")) if v]
                if library:
                    row["library_ns"] = min(library)
                    row["library"] = ("eager" if row["library_ns"] == row.get("eager_ns")
                                      else "torch.compile")
            elif task in LIBRARY_KERNELS:
                entry = LIBRARY_KERNELS[task]
                copies = [make_inputs(torch, view, case, device) for _ in range(4)]
                for t in copies:
                    entry["prepare"](torch, t, scalars, case["symbols"])
                row["kernels_ns"] = {}
                want = entry["check"](torch, copies[0], scalars)
                for name, kernel in entry["kernels"].items():
                    def run(t, kernel=kernel):
                        return kernel(torch, t, scalars, case["symbols"])
                    try:
                        got = run(copies[0]).float()
                        error = (got - want).abs().max().item()
                        row.setdefault("kernel_max_abs_error", {})[name] = error
                        if not error <= 2e-2:
                            raise RuntimeError(f"output differs from fp32 attention by {error}")
                        row["kernels_ns"][name] = kernel_times_ns(torch, run, copies, args.calls,
                                                                  flush, flush_names)
                    except Exception as error:  # report, do not hide
                        row.setdefault("kernel_errors", {})[name] = \
                            str(error).splitlines()[0][:200]
                        print(f"{task} {case['name']}: {name} failed: "
                              f"{row['kernel_errors'][name]}", file=sys.stderr)
                timed = {k: v for k, v in row["kernels_ns"].items() if v}
                if timed:
                    row["library"] = min(timed, key=timed.get)
                    row["library_ns"] = timed[row["library"]]
            if row.get("reference_ns") and row.get("library_ns"):
                row["reference_over_library"] = row["reference_ns"] / row["library_ns"]
            if row.get("reference_ns") and row.get("floor_ns"):
                row["reference_over_floor"] = row["reference_ns"] / row["floor_ns"]
            rows.append(row)
            print(f"{task:42s} {case['name']:16s} ref {row.get('reference_ns', 0):9.0f} ns  "
                  f"lib {row.get('library_ns') or 0:9.0f} ns ({row.get('library', '-'):13s})  "
                  f"ref/lib {row.get('reference_over_library', 0):5.2f}  "
                  f"ref/floor {row.get('reference_over_floor', 0):5.2f}", flush=True)
    if args.json:
        gpu = torch.cuda.get_device_name(0)
        pathlib.Path(args.json).write_text(json.dumps(
            {"benchmark": "reference parity", "gpu": gpu, "torch": torch.__version__,
             "command": "bench/gpu/device_run.sh parity", "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
