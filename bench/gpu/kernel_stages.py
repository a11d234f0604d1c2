#!/usr/bin/env python3
"""Times a multi-kernel reference one kernel at a time, beside the production library's kernels,
on a task's visible cases: where the time of a call goes, which the runner's single figure per
call does not say.

    python3 bench/gpu/kernel_stages.py ssm/chunk_gated_delta_rule [--source FILE ...]
        [--cases NAME ...] [--library FUNCTION] [--reps N] [--json OUT]

Each source (default: the task's reference) is compiled with NVRTC through CuPy, with the
server's options (-arch, -std=c++17, the prelude's headers), and launched as its `@launch` and
`@workspace` directives say (docs/launch_plan.md; `if` conditions and `@cluster` are not
supported here). Inputs follow the task's generators (randn, uniform, list, zeros). Every kernel
is timed with CUDA events around its launch, median over --reps calls, and the whole call the
same way. --library names a function of the task's parity module (an anchor's, e.g. fla_chunk), which
runs the library once; it is profiled (torch.profiler) and its kernels' times are summed per
name, per call.
Each source's outputs are compared with the first source's, so a variant that computes
something else shows.
"""
import argparse
import importlib.util
import json
import pathlib
import re
import statistics
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]

DTYPE_BYTES = {  # every workspace type of docs/launch_plan.md
    "bf16": 2, "f16": 2, "f32": 4, "f64": 8, "fp8_e4m3": 1, "fp8_e5m2": 1, "i8": 1, "u8": 1,
    "i16": 2, "u16": 2, "i32": 4, "u32": 4, "i64": 8, "u64": 8, "bool": 1, "float": 4,
    "double": 8, "__nv_bfloat16": 2, "__half": 2, "half": 2, "__half2": 4, "__nv_bfloat162": 4,
    "int": 4, "unsigned int": 4, "unsigned": 4, "long long": 8, "unsigned long long": 8,
    "int8_t": 1, "uint8_t": 1, "int16_t": 2, "uint16_t": 2, "int32_t": 4, "uint32_t": 4,
    "int64_t": 8, "uint64_t": 8, "size_t": 8, "char": 1, "short": 2, "float2": 8, "float4": 16,
    "int2": 8, "int4": 16, "uint2": 8, "uint4": 16, "double2": 16}


def directives(text):
    """The `// @` directives of a source, each with the comment lines that continue it joined
    (docs/launch_plan.md: while a `(`, `[` or `<<<` is open, or a `@launch` has not reached its
    argument list)."""
    def open_(d):
        if d.count("(") > d.count(")") or d.count("[") > d.count("]"):
            return True
        if d.startswith("@launch"):
            return ">>>" not in d or "(" not in d.split(">>>", 1)[1]
        return d.count("<<<") > d.count(">>>")

    out, current = [], None
    for line in text.splitlines():
        m = re.match(r"\s*//\s?(.*)$", line)
        body = m.group(1).strip() if m else ""
        if m and body.startswith("@"):
            out.append(body)
            current = len(out) - 1
        elif m and current is not None and open_(out[current]):
            out[current] += " " + body
        else:
            current = None
    return out


def cdiv(a, b):
    return -(-a // b)


def evaluate(expr, sym):
    expr = expr.replace("&&", " and ").replace("||", " or ")
    value = eval(expr, {"cdiv": cdiv, "min": min, "max": max, "dim3": lambda *a: a}, dict(sym))
    return value


def plan(text):
    launches, workspaces = [], []
    for d in directives(text):
        if d.startswith("@workspace"):
            m = re.match(r"@workspace\s+(\w+)\s+([\w ]+?)\s*\[(.*)\]\s*$", d)
            workspaces.append((m.group(1), m.group(2), m.group(3)))
        elif d.startswith("@cluster") or re.match(r"@launch\s+if\b", d):
            raise SystemExit(f"not supported here: {d}")
        elif d.startswith("@launch"):
            m = re.match(r"@launch\s+([\w:]+(?:<.*?>)?)\s*<<<(.*)>>>\s*\((.*)\)\s*;?$", d)
            if not m:
                raise SystemExit(f"cannot read: {d}")
            args = [a.strip() for a in m.group(3).split(",") if a.strip()]
            launches.append((m.group(1), m.group(2), args))
    return launches, workspaces


def split_top(text):
    depth, parts, start = 0, [], 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def make_inputs(torch, task, case):
    sym = dict(case["symbols"])
    gen = torch.Generator(device="cuda").manual_seed(1)
    dtypes = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32,
              "i32": torch.int32, "i64": torch.int64}
    tensors = {}
    for t in task["tensors"]:
        shape = [evaluate(str(d), sym) for d in t["shape"]]
        dtype = dtypes[t["dtype"]]
        if t["role"] == "out":
            tensors[t["name"]] = torch.zeros(shape, dtype=dtype, device="cuda")
            continue
        values = case.get("values", {}).get(t["name"], t.get("values", {}))
        kind = values.get("generator")
        if kind == "randn":
            x = torch.randn(shape, generator=gen, device="cuda") * values["std"] + values["mean"]
        elif kind == "uniform":
            x = torch.rand(shape, generator=gen, device="cuda") * (values["hi"] - values["lo"])
            x = x + values["lo"]
        elif kind == "list":
            x = torch.tensor(values["values"], device="cuda")
        elif kind == "zeros":
            x = torch.zeros(shape, device="cuda")
        else:
            raise SystemExit(f"{t['name']}: generator {kind} is not supported here")
        tensors[t["name"]] = x.to(dtype).reshape(shape).contiguous()
    scalars = {s["name"]: (s["dtype"], s["default"]) for s in task.get("scalars", [])}
    return sym, tensors, scalars


def run_source(torch, cp, np, text, name, task, case, reps):
    sym, tensors, scalars = make_inputs(torch, task, case)
    launches, workspaces = plan(text)
    module = cp.RawModule(code=text, options=("-arch=sm_90a", "-std=c++17"),
                          name_expressions=[k for k, _, _ in launches])
    buffers = dict(tensors)
    for ws, dtype, count in workspaces:
        n = evaluate(count, sym) * DTYPE_BYTES[dtype]
        buffers[ws] = torch.empty(max(n, 1), dtype=torch.uint8, device="cuda")
    calls = []
    for kernel, config, args in launches:
        parts = split_top(config)
        grid = evaluate(parts[0], sym)
        block = evaluate(parts[1], sym)
        smem = evaluate(parts[2], sym) if len(parts) > 2 else 0
        grid = grid if isinstance(grid, tuple) else (grid,)
        block = block if isinstance(block, tuple) else (block,)
        fn = module.get_function(kernel)
        if smem > 48 * 1024:
            fn.max_dynamic_shared_size_bytes = smem
        values = []
        for a in args:
            if a in buffers:
                values.append(np.uint64(buffers[a].data_ptr()))
            elif a in scalars:
                values.append(np.float32(scalars[a][1]) if scalars[a][0] == "f32"
                              else np.int32(scalars[a][1]))
            else:
                values.append(np.int32(sym[a]))
        calls.append((kernel.split("<")[0], fn, grid, block, smem, tuple(values)))

    def launch(c):
        _, fn, grid, block, smem, values = c
        fn(grid, block, values, shared_mem=smem)

    for c in calls:  # warm-up and outputs
        launch(c)
    torch.cuda.synchronize()
    outputs = {t["name"]: buffers[t["name"]].clone() for t in task["tensors"]
               if t["role"] == "out"}
    times = {c[0]: [] for c in calls}
    totals = []
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(len(calls) + 1)]
    for _ in range(reps):
        ev[0].record()
        for i, c in enumerate(calls):
            launch(c)
            ev[i + 1].record()
        torch.cuda.synchronize()
        for i, c in enumerate(calls):
            times[c[0]].append(ev[i].elapsed_time(ev[i + 1]) * 1e6)
        totals.append(ev[0].elapsed_time(ev[-1]) * 1e6)
    return ({k: statistics.median(v) for k, v in times.items()}, statistics.median(totals),
            outputs, (sym, tensors, scalars))


def library_stages(torch, fn, t, s, sym, reps):
    for _ in range(3):
        fn(torch, t, s, sym)
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn(torch, t, s, sym)
        torch.cuda.synchronize()
    out = {}
    for e in prof.key_averages():
        if e.device_type.name == "CUDA" or getattr(e, "self_device_time_total", 0) > 0:
            total = getattr(e, "self_device_time_total", None) or e.self_cuda_time_total
            if total > 0:
                out[e.key[:90]] = total / reps * 1e3  # ns per call
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("task")
    ap.add_argument("--source", nargs="*")
    ap.add_argument("--cases", nargs="*")
    ap.add_argument("--library")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--json")
    a = ap.parse_args()
    import cupy as cp
    import numpy as np
    import torch
    folder = ROOT / "tasks" / a.task
    task = tomllib.loads((folder / "task.toml").read_text())
    sources = a.source or [str(ROOT / task["reference"]["source"])]
    parity = None
    if (folder / "parity.py").exists():
        spec = importlib.util.spec_from_file_location("parity_module", folder / "parity.py")
        parity = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(parity)
    report = []
    for case in task["visible_cases"]:
        if a.cases and case["name"] not in a.cases:
            continue
        row = {"case": case["name"], "sources": {}}
        first = None
        for src in sources:
            text = pathlib.Path(src).read_text()
            try:
                stages, total, outputs, inputs = run_source(torch, cp, np, text, src, task, case,
                                                            a.reps)
            except Exception as e:  # a variant that fails to build or run is reported
                row["sources"][src] = {"error": repr(e)[:400]}
                print(case["name"], src, "ERROR", repr(e)[:400], flush=True)
                continue
            entry = {"stages_ns": stages, "total_ns": total}
            if first is None:
                first = outputs
            else:
                entry["max_abs_diff"] = {k: float((outputs[k].float() - first[k].float()).abs()
                                                  .max()) for k in outputs}
            row["sources"][src] = entry
            print(case["name"], pathlib.Path(src).name, json.dumps(entry), flush=True)
        if a.library and first is not None:
            sym, tensors, scalars = inputs
            t = dict(tensors)
            s = {k: v[1] for k, v in scalars.items()}
            if hasattr(parity, "prepare"):
                parity.prepare(torch, t, s, sym)
            lib = library_stages(torch, getattr(parity, a.library), t, s, sym, a.reps)
            if lib:
                row["library_stages_ns"] = lib
                row["library_total_ns"] = sum(lib.values())
                print(case["name"], "library", round(sum(lib.values())),
                      json.dumps({k: round(v) for k, v in lib.items()}), flush=True)
        report.append(row)
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    sys.exit(main())
