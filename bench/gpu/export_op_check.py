"""GPU check of `crucible export-op`: each task's reference kernel exported as a PyTorch op,
loaded in PyTorch and held to the task's PyTorch composite (its parity anchor) on every visible
case, output by output, within the task's tolerance.

    python3 bench/gpu/export_op_check.py [--tasks llm/rms_norm ...] [--json out.json]

Run from the repository root on the GPU machine with build/dev/bin/crucible (bench/README.md);
prints one line per case and a summary, and exits 1 when any case differs or fails.
"""

import argparse
import json
import pathlib
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from parity import (crucible_json, export_reference, exported_args, load_anchors,  # noqa: E402
                    make_inputs)

# Tasks whose outputs compare element by element (no checker) and whose composite writes them.
DEFAULT_TASKS = ["llm/rms_norm", "llm/fused_add_rms_norm", "llm/silu_and_mul",
                 "llm/rotary_embedding", "llm/linear", "llm/paged_decode_attention",
                 "multimodal/layer_norm", "multimodal/gelu_tanh_and_mul"]
DEFAULT_ATOL, DEFAULT_RTOL = 2e-2, 1e-2


def check_case(torch, module, op, view, case, composite, prepare):
    scalars = case.get("scalars", {})
    inputs = make_inputs(torch, view, case, "cuda")
    ours = {name: tensor.clone() for name, tensor in inputs.items()}
    # The composite runs in float32 and its outputs are rounded once to their dtype, as the
    # task's oracle rounds its float64 result: in bf16 arithmetic the composite itself rounds
    # after every operation and strays a bf16 unit or two from the exact value (rotary's
    # x * cos - y * sin), which the export would then be blamed for.
    theirs = {name: tensor.float() if tensor.is_floating_point() else tensor.clone()
              for name, tensor in inputs.items()}
    if prepare is not None:
        prepare(torch, theirs, scalars, case["symbols"])
    composite(torch, theirs, scalars, case["symbols"])
    op(*exported_args(module, ours, case))
    torch.cuda.synchronize()
    result = {}
    tolerances = {t["name"]: t.get("tolerance") or {} for t in view["tensors"]}
    for tensor in module.TASK["tensors"]:
        if tensor["role"] == "in":
            continue
        name = tensor["name"]
        got, want = ours[name].float(), theirs[name].to(ours[name].dtype).float()
        tol = tolerances.get(name, {})
        atol, rtol = tol.get("atol", DEFAULT_ATOL), tol.get("rtol", DEFAULT_RTOL)
        excess = ((got - want).abs() - rtol * want.abs() - atol).max().item()
        result[name] = {"max_abs_error": (got - want).abs().max().item(), "atol": atol,
                        "rtol": rtol, "within": excess <= 0}
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="*", default=DEFAULT_TASKS)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    import torch

    anchors = load_anchors(only=args.tasks)
    rows, failures = [], 0
    with tempfile.TemporaryDirectory() as folder:
        for task in args.tasks:
            view = crucible_json("tasks", "show", task, "--json")
            entry = anchors.get(task)
            if entry is None or entry["composite"] is None:
                print(f"{task}: no PyTorch composite to hold the op to; skipped", file=sys.stderr)
                continue
            started = time.time()
            try:
                module, op = export_reference(task, folder)
            except Exception as error:  # report, do not hide
                failures += 1
                rows.append({"task": task, "error": f"export or import failed: {error}"})
                print(f"{task}: export or import failed: {error}")
                continue
            for case in view["cases"]:
                row = {"task": task, "case": case["name"]}
                try:
                    row["outputs"] = check_case(torch, module, op, view, case,
                                                entry["composite"], entry["prepare"])
                    row["within"] = all(o["within"] for o in row["outputs"].values())
                except Exception as error:  # report, do not hide
                    row["error"] = str(error).splitlines()[0][:300]
                    row["within"] = False
                failures += 0 if row["within"] else 1
                rows.append(row)
                print(f"{task} {case['name']}: "
                      + ("ok" if row["within"] else f"DIFFERS {row.get('error', row.get('outputs'))}"))
            print(f"{task}: {time.time() - started:.1f} s (the first call compiles)")
    print(f"{len(rows) - failures} of {len(rows)} cases within tolerance")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({
            "benchmark": "crucible export-op: exported references against the PyTorch composites",
            "gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
