#!/usr/bin/env python3
"""Reference parity: every task's reference against the best PyTorch implementation of the same
op on the same shapes, and against the roofline floor (bench/README.md).

Run on the GPU machine (PyTorch with CUDA) from the repository root, after `crucible eval` has
scored every task's own reference (so results.jsonl holds crucible's CUPTI times of the
reference per timing case):

    crucible eval refs.jsonl -o refs-eval       # refs.jsonl: bench/gpu/parity.py --references
    python3 bench/gpu/parity.py --crucible refs-eval/results.jsonl --json parity.json

Library times are kernel times from torch.profiler (the sum of the GPU kernels of one call, not
host time; a call's kernels are those between two flushes, whoever launched them), median over
calls, each call on its own copy of the inputs with a 2 x L2 read between calls (the conditions
crucible times its kernels under). Each call's span, its first kernel's start to its last one's
end, is kept too: crucible times a call by its span, so `reference_over_span` is the like-for-like
ratio against a library of several kernels. PyTorch eager and
torch.compile (inductor, default mode) are both measured; the best of the two is the library
time. What each task is measured against is the task's own: the [parity] table of its task.toml
(docs/tasks.md) names the library calls, which live in a Python module of the task folder
(tasks/<category>/<name>/parity.py), imported from there. A "composite" anchor (a PyTorch
composition of the op) is timed eagerly and under torch.compile; "kernel" anchors are named
library kernels, each timed eagerly after its output is held to the task's check (paged decode
attention: PyTorch's FlashAttention-2 and memory-efficient attention kernels over the same
contexts gathered into their packed varlen layout by the task's untimed `prepare`; linear:
torch.mm, cuBLAS). The floor is crucible's roofline floor of the case (bytes / bandwidth,
FLOPs / peak).
"""
import argparse
import importlib.util
import json
import math
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]

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


def surface_points(torch, n, objects, device):
    """n points of the surface_points model (docs/tasks.md): a third on the floor z = 0, the rest
    on `objects` spheres resting on it. The scene depends on `objects` only (its own fixed draw),
    the points on the call, so the tensors of a case sample the same surfaces."""
    g = torch.Generator(device="cpu").manual_seed(1234 + objects)
    radius = 0.05 + 0.1 * torch.rand(objects, generator=g)
    centre = torch.stack([0.15 + 0.7 * torch.rand(objects, generator=g),
                          0.15 + 0.7 * torch.rand(objects, generator=g), radius], dim=-1)
    radius, centre = radius.to(device), centre.to(device)
    direction = torch.randn(n, 3, device=device)
    direction = direction / direction.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    which = torch.randint(objects, (n,), device=device)
    on_sphere = centre[which] + radius[which, None] * direction
    floor = torch.rand(n, 3, device=device)
    floor[:, 2] = 0.0
    pick = torch.rand(n, device=device) < 1.0 / 3.0
    return torch.where(pick[:, None], floor, on_sphere)


def routing(torch, tokens, values, device):
    """[tokens, topk] expert ids of the routing model (docs/tasks.md): Zipf popularities
    (1 + rank)^-skew over a random order of the experts, each token's topk experts drawn without
    replacement from them by Gumbel-top-k."""
    experts, topk = values["experts"], values["topk"]
    rank = torch.randperm(experts, device=device).double()
    log_weight = -values.get("skew", 0.0) * torch.log1p(rank)
    uniform = torch.rand(tokens, experts, device=device, dtype=torch.float64)
    gumbel = -torch.log(-torch.log(uniform.clamp_min(1e-300)))
    return (log_weight + gumbel).topk(topk, dim=-1).indices


def zipf(torch, numel, values, device):
    """numel ids of the zipf model (docs/tasks.md), the same distribution, not the same draws:
    rank floor(x) solving C(x) = u C(max) for C(x) = int_0^x (1 + t)^-skew dt, u uniform, in
    float64; the id is that rank's element of a random permutation of [0, max)."""
    rows, skew = values["max"], values.get("skew", 1.0)
    u = torch.rand(numel, device=device, dtype=torch.float64)
    if skew == 0.0:
        x = u * rows
    elif skew == 1.0:
        x = torch.exp(u * math.log1p(rows)) - 1.0
    else:
        whole_scaled = (1.0 + rows) ** (1.0 - skew) - 1.0  # C(max) * (1 - skew)
        x = (1.0 + u * whole_scaled) ** (1.0 / (1.0 - skew)) - 1.0
    rank = x.floor().clamp(0, rows - 1).long()
    return torch.randperm(rows, device=device)[rank]


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
    elif kind == "zipf":
        t = zipf(torch, numel, values, device).reshape(shape)
    elif kind == "routing":
        t = routing(torch, numel // values["topk"], values, device).reshape(shape)
    elif kind == "surface_points":
        t = surface_points(torch, numel // 3, values["objects"], device).reshape(shape)
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


# ---- the anchors: each task's library calls, in its folder -----------------------------------

def import_parity_module(manifest, data):
    """The module a task's [parity] table names, imported from the task folder (`manifest` is the
    task.toml's path, `data` its parsed text)."""
    path = pathlib.Path(manifest).parent / data["parity"]["module"]
    spec = importlib.util.spec_from_file_location(
        "crucible_parity_" + data["id"].replace("/", "__"), path)
    module = importlib.util.module_from_spec(spec)
    # Registered by name: torch.compile re-imports the module of a function it traces.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def wanted_anchor(name, names):
    """Whether an anchor named `name` is measured when only `names` are asked for (substrings,
    any case; None: every anchor)."""
    return names is None or any(n.lower() in name.lower() for n in names)


def load_anchors(root=ROOT, only=None, names=None):
    """The [parity] table of every task (tasks/*/*/task.toml), with its module imported from the
    task folder: {task id: {"composite": fn or None, "kernels": {name: fn}, "prepare": fn or
    None, "check": fn or None, "canonical": fn or None, "table": the [parity] table}}, keeping
    only the anchors `names`
    asks for (wanted_anchor). Tasks without [parity] are left out (the registry's tests require
    one of every task)."""
    anchors = {}
    for manifest in sorted(pathlib.Path(root).glob("tasks/*/*/task.toml")):
        with manifest.open("rb") as f:
            data = tomllib.load(f)
        table = data.get("parity")
        task = data.get("id")
        if table is None or (only and task not in only):
            continue
        module = import_parity_module(manifest, data)
        entry = {"composite": None, "kernels": {}, "table": table,
                 "prepare": getattr(module, table["prepare"]) if "prepare" in table else None,
                 "check": getattr(module, table["check"]) if "check" in table else None,
                 "canonical": (getattr(module, table["canonical"]) if "canonical" in table
                               else None)}
        for anchor in table["anchors"]:
            if not wanted_anchor(anchor["name"], names):
                continue
            function = getattr(module, anchor["function"])
            if anchor["kind"] == "composite":
                entry["composite"] = function
            else:
                entry["kernels"][anchor["name"]] = function
        anchors[task] = entry
    return anchors


# A kernel anchor's output may differ from the task's check by at most this much (absolute) plus
# this share of the check's magnitude (one bf16 ulp, for outputs of tens) before it is timed: a
# mis-specified call must not yield a time.
KERNEL_CHECK_ATOL = 2e-2
KERNEL_CHECK_RTOL = 1e-2


def output_names(tensors, want):
    """The task tensors a check's result stands for: its first "out" tensor (its first "inout"
    one where the op works in place), or, for a check returning a tuple, every out and inout
    tensor in manifest order. `tensors`: the manifest's or the view's tensor tables."""
    outputs = [spec for spec in tensors if spec["role"] in ("out", "inout")]
    if isinstance(want, tuple):
        return [spec["name"] for spec in outputs]
    first = next((spec for spec in outputs if spec["role"] == "out"), outputs[0])
    return [first["name"]]


INTEGER_DTYPES = {"i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "bool"}


def output_rtols(tensors, dtype_tolerance, want):
    """The relative part of each checked output's allowed distance: KERNEL_CHECK_RTOL, or the
    task's own rtol for that tensor where it is larger (an fp8 output's one e4m3 step: a kernel
    rounding on the other side of an e4m3 boundary is not mis-specified); 0 for an integer
    output (an index is right or wrong: expert 201 is not expert 200 within 1 %). The tensor's
    own tolerance, else the task's [tolerance] entry for its dtype (the view's
    tolerance_defaults)."""
    by_name = {spec["name"]: spec for spec in tensors}
    rtols = []
    for name in output_names(tensors, want):
        spec = by_name[name]
        if spec["dtype"] in INTEGER_DTYPES:
            rtols.append(0.0)
            continue
        tolerance = spec.get("tolerance") or (dtype_tolerance or {}).get(spec["dtype"]) or {}
        rtols.append(max(KERNEL_CHECK_RTOL, float(tolerance.get("rtol", 0.0))))
    return rtols


def kernel_check(got, want, rtols=None):
    """(largest |error|, largest error beyond the relative part, rtols[i] or KERNEL_CHECK_RTOL,
    of the expected value) of a library kernel's output against the task's check. An op with
    several outputs (a cache pair) has a check returning a tuple, in the order of the task's out
    and inout tensors, and a kernel returning one of the same length: every pair is compared."""
    pairs = list(zip(got, want, strict=True)) if isinstance(want, tuple) else [(got, want)]
    rtols = rtols or [KERNEL_CHECK_RTOL] * len(pairs)
    error = max((g.float() - w).abs().max().item() for g, w in pairs)
    excess = max(((g.float() - w).abs() - rtol * w.abs()).max().item()
                 for (g, w), rtol in zip(pairs, rtols, strict=True))
    return error, excess


# ---- timing -----------------------------------------------------------------------------------

def gpu_kernels(torch, prof):
    return sorted((e for e in prof.events() if e.device_type.name == "CUDA"),
                  key=lambda e: e.time_range.start)


# The flush's kernel (bench/gpu/l2_flush.py): a profile splits into calls at it.
FLUSH_KERNEL = "crucible_parity_l2_flush"


def split_calls(events):
    """The calls of a profile: `events` are (name, start_us, end_us) of its GPU kernels in start
    order, a flush kernel (FLUSH_KERNEL) before every call and after the last. Per call, in
    order: (summed kernel time, span from its first kernel's start to its last one's end, both
    in microseconds, and its kernel count). The span is what crucible times a call by (the first
    launch's start to the last one's end, gaps between dependent kernels included), the sum
    what the kernels themselves take."""
    calls, current, started = [], None, False
    for name, start, end in events:
        if name.startswith(FLUSH_KERNEL):
            if started:
                calls.append(current)
            current, started = [0.0, None, None, 0], True
            continue
        if current is None:  # kernels before the first flush belong to no call
            continue
        current[0] += end - start
        current[1] = start if current[1] is None else current[1]
        current[2] = end if current[2] is None else max(current[2], end)
        current[3] += 1
    return [(total, (last - first) if first is not None else 0.0, count)
            for total, first, last, count in calls]


def kernel_times_ns(torch, fn, inputs, calls, flush, stats=None):
    """Median over calls of the summed GPU kernel time of one call (torch.profiler): the
    kernels between one flush and the next belong to one call, whoever launched them (ATen,
    torch.compile's or a library's own Triton launches, cuDNN). `stats`, if given, gets the
    kernels a call launched and its span, first kernel start to last kernel end (split_calls;
    medians over calls)."""
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
    per_call = split_calls([(e.name, e.time_range.start, e.time_range.end)
                            for e in gpu_kernels(torch, prof)])
    if len(per_call) != calls:
        raise RuntimeError(f"the profile splits into {len(per_call)} calls, not {calls}")
    measured = [call for call in per_call if call[0] > 0]
    if stats is not None:
        stats["kernels_per_call"] = statistics.median(call[2] for call in per_call)
        if measured:
            stats["span_ns"] = 1000.0 * statistics.median(call[1] for call in measured)
    return 1000.0 * statistics.median(call[0] for call in measured) if measured else None


# ---- the reference in this harness ------------------------------------------------------------

def export_reference(task, folder, source=None):
    """The task's reference (or `source`) as a PyTorch op: `crucible export-op`'s module, imported;
    returns (module, op)."""
    name = task.split("/")[1]
    path = pathlib.Path(folder) / f"{name}.py"
    crucible("export-op", task, source or f"kernels/{task}.cu", "-o", str(path))
    spec = importlib.util.spec_from_file_location(f"exported_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    import torch
    return module, getattr(torch.ops.crucible, name)


def exported_args(module, tensors, case):
    """An exported op's arguments for a case: the task's tensors in its order, the plan's symbols
    no shape gives, then the task's scalars (their defaults where the case sets none)."""
    scalars = case.get("scalars", {})
    args = [tensors[t["name"]] for t in module.TASK["tensors"]]
    shaped = {d for t in module.TASK["tensors"] for d in t["shape"]}
    args += [case["symbols"][s] for s in module.PLAN["symbols"] if s not in shaped]
    for scalar in module.TASK["scalars"]:
        value = scalars.get(scalar["name"], scalar["default"])
        args.append(int(value) if scalar["dtype"].startswith("i") else float(value))
    return args


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--references", help="write the JSONL of every task's reference here")
    parser.add_argument("--crucible", help="results.jsonl of `crucible eval` on the references")
    parser.add_argument("--json", help="write the table here")
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--tasks", nargs="*", help="only these task ids (default: all)")
    parser.add_argument("--cases", nargs="*", help="only these case names (default: all)")
    parser.add_argument("--anchors", nargs="*",
                        help="only the anchors whose names contain one of these (any case; "
                             "\"composite\" for the PyTorch composites): the rows then carry "
                             "these libraries' times beside the reference's from the same run, "
                             "for collect_results.py to merge into the committed table")
    parser.add_argument("--no-harness-reference", action="store_true",
                        help="do not also time the reference here, exported as a PyTorch op")
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
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    from l2_flush import make_flush  # Triton: imported on the GPU machine only
    flush = make_flush(torch, device)
    torch._dynamo.config.recompile_limit = 64
    anchors = load_anchors(only=args.tasks, names=args.anchors)
    rows = []
    export_folder = tempfile.TemporaryDirectory(prefix="parity-export-")  # gone at exit
    for task in task_ids():
        if args.tasks and task not in args.tasks:
            continue
        view = crucible_json("tasks", "show", task, "--json")
        entry = anchors.get(task, {"composite": None, "kernels": {}, "prepare": None,
                                   "check": None, "canonical": None})
        op = entry["composite"]
        torch._dynamo.reset()
        # The reference timed by this harness too (crucible export-op, launched on PyTorch's
        # stream, its kernels summed between flushes like every library's): its ratio to the
        # libraries is then one method's, whatever CUPTI set-up crucible's own timing differs by.
        exported, export_error = None, None
        library = view.get("reference", {}).get("library")
        if library:
            # The timed reference is a library call the server makes (cuBLASLt); the task's
            # source is the agent's starting point, not the reference, and is not timed here.
            export_error = (f"the reference is the library call {library}; its source is the "
                            "starting point, not what crucible times")
        elif not args.no_harness_reference:
            try:
                exported = export_reference(task, export_folder.name)
            except Exception as error:  # report, do not hide
                export_error = str(error).strip().splitlines()[-1][:200] if str(error) else repr(error)
                print(f"{task}: the reference could not be exported: {export_error}",
                      file=sys.stderr)
        if op is None and not entry["kernels"]:
            print(f"{task}: no [parity] table in its task.toml: no library to measure against",
                  file=sys.stderr)
        for case in view["cases"]:
            if args.cases and case["name"] not in args.cases:
                continue
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
            if op is not None or entry["kernels"] or exported is not None:
                copies = [make_inputs(torch, view, case, device) for _ in range(4)]
                if entry["prepare"] is not None:  # once per input copy, untimed
                    try:
                        for t in copies:
                            entry["prepare"](torch, t, scalars, case["symbols"])
                    except Exception as error:  # report, do not hide; the next case goes on
                        row["prepare_error"] = str(error).strip().splitlines()[-1][:200]
                        print(f"{task} {case['name']}: prepare failed: {row['prepare_error']}",
                              file=sys.stderr)
                        rows.append(row)
                        continue
            # Library times by name: the composite's "eager" and "torch.compile", each kernel's.
            timed = {}
            # Kernels a call of each library launched (the median over calls), to read its time by.
            launched = {}
            if op is not None:
                def eager(t):
                    op(torch, t, scalars, case["symbols"])

                try:
                    row["eager_ns"] = kernel_times_ns(torch, eager, copies, args.calls, flush,
                                                      launched.setdefault("eager", {}))
                except Exception as error:  # report, do not hide
                    row["eager_error"] = str(error).splitlines()[0][:200]
                    print(f"{task} {case['name']}: eager failed: {row['eager_error']}",
                          file=sys.stderr)
                try:
                    compiled = torch.compile(lambda t: op(torch, t, scalars, case["symbols"]))
                    row["compile_ns"] = kernel_times_ns(torch, compiled, copies, args.calls,
                                                        flush,
                                                        launched.setdefault("torch.compile", {}))
                except Exception as error:  # report, do not hide
                    row["compile_error"] = str(error).splitlines()[0][:200]
                for name, field in (("eager", "eager_ns"), ("torch.compile", "compile_ns")):
                    if row.get(field):
                        timed[name] = row[field]
            if entry["kernels"]:
                # Named library kernels, each timed eagerly (nothing for torch.compile to fuse),
                # each output first held to the task's check.
                row["kernels_ns"] = {}
                for name, kernel in entry["kernels"].items():
                    def run(t, kernel=kernel):
                        return kernel(torch, t, scalars, case["symbols"])
                    try:
                        # The check of the inputs as they are now: a kernel updating a state in
                        # place (selective_state_update) leaves it a few steps on for the next.
                        want = entry["check"](torch, copies[0], scalars)
                        got = run(copies[0])
                        if entry["canonical"] is not None:  # outputs in any order: untimed
                            got = entry["canonical"](torch, got)
                        error, excess = kernel_check(got, want, output_rtols(
                            view["tensors"], view.get("tolerance_defaults"), want))
                        row.setdefault("kernel_max_abs_error", {})[name] = error
                        if not excess <= KERNEL_CHECK_ATOL:
                            raise RuntimeError(f"output differs from the task's check by {error}")
                        row["kernels_ns"][name] = kernel_times_ns(torch, run, copies, args.calls,
                                                                  flush,
                                                                  launched.setdefault(name, {}))
                    except ModuleNotFoundError as error:  # a library not carried here
                        row.setdefault("kernel_errors", {})[name] = (
                            f"{error.name} is not on the path (carry it: "
                            "../shared/data/gpu-libraries.md): this anchor cannot run")
                        print(f"{task} {case['name']}: {name}: {error.name} is not on the path",
                              file=sys.stderr)
                    except Exception as error:  # report, do not hide
                        row.setdefault("kernel_errors", {})[name] = \
                            str(error).splitlines()[0][:200]
                        print(f"{task} {case['name']}: {name} failed: "
                              f"{row['kernel_errors'][name]}", file=sys.stderr)
                timed.update({k: v for k, v in row["kernels_ns"].items() if v})
            if exported is not None:
                module, reference_op = exported
                arguments = {id(t): exported_args(module, t, case) for t in copies}

                def reference(t, reference_op=reference_op, arguments=arguments):
                    reference_op(*arguments[id(t)])

                try:
                    row["harness_reference_ns"] = kernel_times_ns(
                        torch, reference, copies, args.calls, flush,
                        launched.setdefault("reference (exported)", {}))
                except Exception as error:  # report, do not hide
                    row["harness_reference_error"] = str(error).splitlines()[0][:200]
            elif export_error is not None:
                row["harness_reference_error"] = export_error
            row["kernels_per_call"] = {name: stats["kernels_per_call"]
                                       for name, stats in launched.items() if stats}
            # Each call's span, first kernel start to last kernel end: crucible's measure of a
            # call, so that a reference timed by crucible is compared like for like with a
            # library of several kernels (the gaps between them are part of its call).
            row["spans_ns"] = {name: stats["span_ns"]
                               for name, stats in launched.items() if "span_ns" in stats}
            if row.get("reference_ns"):
                row["reference_over_span"] = {
                    name: row["reference_ns"] / span for name, span in row["spans_ns"].items()
                    if name != "reference (exported)" and span > 0}
            if timed:
                # The best library; a tie goes to the first measured (eager before compile).
                row["library"] = min(timed, key=timed.get)
                row["library_ns"] = timed[row["library"]]
            if row.get("reference_ns") and row.get("library_ns"):
                row["reference_over_library"] = row["reference_ns"] / row["library_ns"]
                # Every library's ratio, each measured in this run beside the reference: a later
                # run over some anchors (--anchors) adds its own (collect_results.py).
                row["reference_over"] = {name: row["reference_ns"] / ns
                                         for name, ns in timed.items()}
            if args.anchors is not None:
                row["anchors_only"] = args.anchors
            if row.get("harness_reference_ns") and row.get("library_ns"):
                row["harness_reference_over_library"] = (row["harness_reference_ns"]
                                                         / row["library_ns"])
            if row.get("reference_ns") and row.get("floor_ns"):
                row["reference_over_floor"] = row["reference_ns"] / row["floor_ns"]
            rows.append(row)
            print(f"{task:42s} {case['name']:16s} ref {row.get('reference_ns', 0):9.0f} ns  "
                  f"lib {row.get('library_ns') or 0:9.0f} ns ({row.get('library', '-'):13s})  "
                  f"ref/lib {row.get('reference_over_library', 0):5.2f}  "
                  f"ref/floor {row.get('reference_over_floor', 0):5.2f}  "
                  f"here {row.get('harness_reference_ns') or 0:9.0f} ns "
                  f"({row.get('harness_reference_over_library') or 0:5.2f})", flush=True)
    if args.json:
        gpu = torch.cuda.get_device_name(0)
        command = "bench/gpu/device_run.sh parity" + "".join(
            f" {flag} {' '.join(values)}" for flag, values in (
                ("--tasks", args.tasks), ("--cases", args.cases), ("--anchors", args.anchors))
            if values)
        libraries = {"torch": torch.__version__}
        if "flashinfer" in sys.modules:  # carried and imported by an anchor
            libraries["flashinfer"] = sys.modules["flashinfer"].__version__
        pathlib.Path(args.json).write_text(json.dumps(
            {"benchmark": "reference parity", "gpu": gpu, "torch": torch.__version__,
             "libraries": libraries, "command": command, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
