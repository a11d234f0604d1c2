#!/usr/bin/env python3
"""Where llm/top_k_top_p_sampling_from_logits's reference spends a row's time, step by step.

Writes a copy of kernels/llm/top_k_top_p_sampling_from_logits.cu in its one-block-a-row form
(variants.py's one_block_a_row: the reference splits a small batch's rows over clusters of
blocks, whose steps end on different blocks) with a clock64() stamp taken by thread 0 after
each of its steps (an anchor that is no longer in the source is an error),
compiles it with bench/gpu/sampling_steps_main.cu (nvcc, sm_90a) and runs it on rows like the
task's visible cases (randn logits of std 4 or 5, the task's per-row top_k/top_p mix), printing
per case the kernel's time (CUDA events) and the median cycles and microseconds of each step
over rows and calls:

    python3 bench/gpu/sampling_steps.py [--calls 200] [--json FILE]

Steps: start (after the row's inputs are read), max pass, histogram pass, cutoff choice,
candidate collection, top-k threshold and its mass, top-p threshold, draw. A row that takes
the global-memory path or needs no filter shows its time in the steps it runs.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from variants import SAMPLING, SAMPLING_ONE_BLOCK, applied  # noqa: E402  (bench/gpu)

KERNEL = ROOT / SAMPLING

# (anchor, step name): the step's stamp is taken right after the anchor's text.
ANCHORS = [
    ("  const float u = uniform_samples[blockIdx.x];\n", "start"),
    ("  m = block_max(m, s);\n", "max pass"),
    ("  block_sums(z_row, s);  // its barriers also publish the histograms\n", "histogram pass"),
    ("    }\n  }\n\n  unsigned int threshold = 0u;\n", "cutoff"),
    ("    lists.shared = &s;\n  }\n", "collection"),
    ("    z_k = kept_mass(lists, threshold, m, s);\n  }\n", "top-k threshold"),
    ("  if (p_active) threshold = smallest_key_below(lists, threshold, p * z_k, true, m, s);\n",
     "top-p threshold"),
    ("  const int token = draw(lists, threshold, m, u, s);\n", "draw"),
]


def instrumented() -> str:
    source = applied(SAMPLING, SAMPLING_ONE_BLOCK, "one_block_a_row")
    for index, (anchor, name) in enumerate(ANCHORS):
        if source.count(anchor) != 1:
            sys.exit(f"{KERNEL}: the anchor of step '{name}' is not in the source exactly once")
        source = source.replace(anchor, anchor + f"  CRUCIBLE_STAMP({index});\n")
    return source


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        kernel = pathlib.Path(work) / "kernel.cu"
        kernel.write_text(instrumented())
        binary = pathlib.Path(work) / "steps"
        nvcc = os.environ.get("NVCC", "nvcc")
        subprocess.run([nvcc, "-gencode", "arch=compute_90a,code=sm_90a", "-std=c++17", "-O3",
                        f"-DKERNEL=\"{kernel}\"", f"-DSTEPS={len(ANCHORS)}", "-o", str(binary),
                        str(ROOT / "bench/gpu/sampling_steps_main.cu")], check=True)
        out = subprocess.run([str(binary), str(args.calls)], check=True, capture_output=True,
                             text=True).stdout
    figures = json.loads(out)
    for case in figures["cases"]:
        print(f"{case['name']}: kernel {case['kernel_us']:.1f} us")
        for name, step in zip([n for _, n in ANCHORS][1:], case["steps"]):
            print(f"  {name:16s} {step['cycles']:9.0f} cycles {step['us']:8.2f} us")
    figures["steps"] = [n for _, n in ANCHORS][1:]
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
