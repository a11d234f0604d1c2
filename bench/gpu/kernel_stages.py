#!/usr/bin/env python3
"""Times a multi-kernel reference one launch at a time, beside the production library's kernels,
on a task's visible cases: where the time of a call goes, which the runner's single figure per
call does not say.

    python3 bench/gpu/kernel_stages.py TASK [--source FILE ...] [--cases NAME ...]
        [--anchors NAME ...] [--reps N] [--json OUT]

Each source (default: the task's reference) is exported as a PyTorch op (`crucible export-op`,
through parity.py's export_reference: crucible's own launch-plan reader, NVRTC and the driver), and
every launch of its plan is timed with CUDA events around it, median over --reps calls, the whole
call the same way (the GPU kept busy while the host enqueues a call, so the events time the
kernels, not the launch latency between them). A kernel launched more than once in a call is
reported per launch (`name`, `name#2`, ...). Inputs are parity.py's for the case. The task's kernel
anchors (those --anchors names, as parity.py matches them; all by default) each run once per call
under torch.profiler, their kernels' times summed per kernel name, per call. Each source's outputs
are compared with the first source's, so a variant that computes something else shows.
"""
import argparse
import collections
import json
import pathlib
import statistics
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import parity  # noqa: E402  (bench/gpu)


INPUT_SEED = 1
SPIN_CYCLES = 20_000_000  # about 10 ms of GPU clock: longer than one call's enqueueing


def stage_labels(kernels):
    """Labels of a call's launches, in order: the kernel's name, `#n` added from its second
    launch in the call on."""
    seen = collections.Counter()
    labels = []
    for kernel in kernels:
        name = kernel.split("<")[0]
        seen[name] += 1
        labels.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return labels


def instrumented_export(torch, task, source, folder):
    """`source` exported and imported once, its launches wrapped in CUDA events: returns the
    module and the list each launch appends (kernel expression, start, end) to."""
    module, _ = parity.export_reference(task, folder, source)
    events = []
    launch = module._Kernels.launch

    def timed_launch(self, expression, *args):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        launch(self, expression, *args)
        end.record()
        events.append((expression, start, end))

    module._Kernels.launch = timed_launch
    return module, events


def time_source(torch, module, events, view, case, reps):
    """Per-launch and whole-call medians (ns) of one exported source on one case, and its
    outputs."""
    torch.manual_seed(INPUT_SEED)  # every source of a case gets the same inputs
    tensors = parity.make_inputs(torch, view, case, "cuda")
    scalars = {s["name"]: case.get("scalars", {}).get(s["name"], s["default"])
               for s in module.TASK["scalars"]}
    events.clear()
    module.run(tensors, scalars, case["symbols"])  # compiles once; the outputs compared below
    torch.cuda.synchronize()
    outputs = {t["name"]: tensors[t["name"]].clone() for t in module.TASK["tensors"]
               if t["role"] in ("out", "inout")}
    stages, totals = collections.defaultdict(list), []
    for _ in range(reps):
        events.clear()
        # The GPU spins while the host enqueues the call's events and launches, so that an event
        # pair times its kernel, not the host's launch latency between them.
        torch.cuda._sleep(SPIN_CYCLES)
        module.run(tensors, scalars, case["symbols"])
        torch.cuda.synchronize()
        for label, (_, start, end) in zip(stage_labels(e[0] for e in events), events):
            stages[label].append(start.elapsed_time(end) * 1e6)
        totals.append(events[0][1].elapsed_time(events[-1][2]) * 1e6)
    return ({k: statistics.median(v) for k, v in stages.items()}, statistics.median(totals),
            outputs)


def library_stages(torch, fn, t, s, sym, reps):
    """Kernel time per kernel name of one call of a library (ns), summed over its launches."""
    from torch.profiler import ProfilerActivity, profile
    for _ in range(3):
        fn(torch, t, s, sym)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn(torch, t, s, sym)
        torch.cuda.synchronize()
    out = collections.defaultdict(float)
    for event in parity.gpu_kernels(torch, prof):
        out[event.name[:90]] += event.time_range.elapsed_us() * 1e3 / reps
    return dict(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("task")
    ap.add_argument("--source", nargs="*")
    ap.add_argument("--cases", nargs="*")
    ap.add_argument("--anchors", nargs="*", help="kernel anchors to time (parity.py's matching)")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--json")
    a = ap.parse_args()
    import torch
    view = parity.crucible_json("tasks", "show", a.task, "--json")
    sources = a.source or [f"kernels/{a.task}.cu"]
    entry = parity.load_anchors(only=[a.task], names=a.anchors).get(a.task, {})
    folder = tempfile.TemporaryDirectory(prefix="kernel-stages-")
    exported = {}  # source -> (module, events): each source exported and compiled once
    report = []
    for case in view["cases"]:
        if a.cases and case["name"] not in a.cases:
            continue
        row = {"case": case["name"], "sources": {}}
        first = None
        for src in sources:
            try:
                if src not in exported:
                    exported[src] = instrumented_export(torch, a.task, src, folder.name)
                stages, total, outputs = time_source(torch, *exported[src], view, case, a.reps)
            except Exception as e:  # a variant that fails to build or run is reported
                row["sources"][src] = {"error": repr(e)[:400]}
                print(case["name"], src, "ERROR", repr(e)[:400], flush=True)
                continue
            entry_row = {"stages_ns": stages, "total_ns": total}
            if first is None:
                first = outputs
            else:
                entry_row["max_abs_diff"] = {
                    k: float((outputs[k].float() - first[k].float()).abs().max()) for k in outputs}
            row["sources"][src] = entry_row
            print(case["name"], pathlib.Path(src).name, json.dumps(entry_row), flush=True)
        if entry.get("kernels"):
            torch.manual_seed(INPUT_SEED)
            t = parity.make_inputs(torch, view, case, "cuda")
            s = case.get("scalars", {})
            if entry["prepare"] is not None:
                entry["prepare"](torch, t, s, case["symbols"])
            row["library_stages_ns"] = {}
            for name, fn in entry["kernels"].items():
                lib = library_stages(torch, fn, t, s, case["symbols"], a.reps)
                row["library_stages_ns"][name] = lib
                print(case["name"], name, round(sum(lib.values())),
                      json.dumps({k: round(v) for k, v in lib.items()}), flush=True)
        report.append(row)
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    sys.exit(main())
