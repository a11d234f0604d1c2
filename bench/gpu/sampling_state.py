#!/usr/bin/env python3
"""Where a form of llm/top_k_top_p_sampling_from_logits's kernel goes wrong, step by step.

Instruments a form of the kernel (the reference, or a variant of variants.py, by name; a form
that splits rows over clusters runs its one-block instance, kCluster = 1, which large batches
take) to record each row's state after every step (sampling_state_main.cu says what), runs it
over rows like the task's visible cases on the GPU (nvcc, sm_90a) and on the CPU (the same
source and inputs under cuda_host_emulation.hpp), and prints, per row the GPU got wrong or where
the two differ, the first step at which they part:

    python3 bench/gpu/sampling_state.py [--variants reference pooled_lists ...]
        [--cases batch_8_qwen batch_32_llama] [--seed 1] [--host-only | --gpu-only]
        [--json FILE]
    python3 bench/gpu/sampling_state.py --compare HOST_JSON GPU_JSON

The host side is slow (below): run it where time is cheap (--host-only --json) and the GPU
side on the GPU machine (--gpu-only --json), then --compare the two reports.

The host emulation runs blocks one at a time, a thread per CUDA thread (about a second a row of
152k logits on two cores): it checks a form's logic, and where it agrees with float64 and the
GPU does not, the fault lies outside the programming model (the hardware's or the compiler's
behaviour, or undefined behaviour). Exit status 1 when some row is wrong on either side.
"""
import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from variants import VARIANTS, applied  # noqa: E402  (bench/gpu)

TASK = "llm/top_k_top_p_sampling_from_logits"
CASES = {  # name: (rows, vocab, std of the logits), as the task's visible cases
    "batch_1_llama": (1, 128256, 4.0),
    "batch_8_qwen": (8, 151936, 4.0),
    "batch_32_llama": (32, 128256, 4.0),
    "batch_64_deepseek": (64, 129280, 5.0),
    # Flatter rows (std 3.5): top-p 0.95 candidates of several hundred a warp, over the
    # reference's 256 (its global-memory path) and within 512.
    "flat_8_qwen": (8, 151936, 3.5),
}
# (anchor, probe): the probe goes right after every copy of the anchor (a form with two ways to
# a step has it twice), which must be in the source.
PROBES = [
    (("  const float z = z_row[0];\n",
      "  const auto& histogram_mass = kCluster > 1 ? cs.total_mass : s.histogram_mass;\n"),
     "CRUCIBLE_STATE_HISTOGRAM();"),
    ("\n  unsigned int threshold = 0u;\n", "CRUCIBLE_STATE_CUTOFF();"),
    (("    lists.shared = &s;\n", "    if (!overflow) lists.shared = &s;\n"),
     "CRUCIBLE_STATE_COLLECTION();"),
    ("    z_k = kept_mass(lists, threshold, m, s);\n", "CRUCIBLE_STATE_TOP_K();"),
    ("  // 5. The draw.\n", "CRUCIBLE_STATE_THRESHOLD();"),
]
# The fields in the order the kernel computes them: the first that differs names the step.
STEPS = [("m", "max pass"), ("z", "histogram pass (row mass)"),
         ("histogram", "histogram pass (counts)"), ("cutoff", "cutoff"),
         ("collected", "collection (list sizes)"), ("token_sum", "collection (token ids)"),
         ("at_max", "collection (the max's entries)"), ("k_threshold", "top-k threshold"),
         ("z_k", "top-k mass"), ("threshold", "top-p threshold"), ("path", "path"),
         ("token", "draw")]


def form_source(name):
    """The kernel named `name`: a sampler form of variants.py (the reference among them)."""
    for task, path, variant, substitutions in VARIANTS:
        if task == TASK and variant == name:
            return applied(path, substitutions, name)
    sys.exit(f"no sampler variant named {name}")


def instrumented(name, host):
    """The instrumented source of `name`, its kernel (a form that splits rows over clusters
    runs its one-block instance, kCluster = 1, the one large batches take), threads a block and
    dynamic shared memory."""
    source = form_source(name)
    for anchors, probe in PROBES:
        anchors = anchors if isinstance(anchors, tuple) else (anchors,)
        present = [anchor for anchor in anchors if anchor in source]
        if not present:
            sys.exit(f"{name}: the anchor of {probe} is not in the source")
        source = source.replace(present[0], present[0] + f"  {probe}\n")
    launch = re.search(r"// @launch (?:if \(batch_size > \d+\) )?"
                       r"(top_k_top_p_sampling_kernel(?:<1>)?)<<<batch_size, (\d+)(?:, (\d+))?>>>",
                       source)
    if launch is None:
        sys.exit(f"{name}: no launch line of one block a row")
    kernel, threads, smem = launch.group(1), int(launch.group(2)), int(launch.group(3) or 0)
    if host:  # dynamic shared memory as a static array of the launch's size
        source = re.sub(r"extern __shared__ (\w[\w ]*?) (\w+)\[\];",
                        lambda d: f"alignas(16) static {d.group(1)} {d.group(2)}"
                        f"[{smem} / sizeof({d.group(1)})];", source)
    return source, kernel, threads, smem


def build(name, host, work):
    source, kernel_name, threads, smem = instrumented(name, host)
    kernel = work / f"{name}{'_host' if host else ''}.cu"
    kernel.write_text(source)
    binary = work / f"{name}{'_host' if host else '_gpu'}"
    defines = [f"-DKERNEL=\"{kernel}\"", f"-DKERNEL_NAME={kernel_name}", f"-DTHREADS={threads}",
               f"-DDYNAMIC_SMEM={smem}"]
    main = HERE / "sampling_state_main.cu"
    if host:
        command = [os.environ.get("CXX", "g++"), "-std=c++20", "-O2", "-pthread",
                   "-DCRUCIBLE_HOST_EMULATION", f"-I{HERE}", *defines, "-x", "c++", str(main),
                   "-o", str(binary)]
    else:
        command = [os.environ.get("NVCC", "nvcc"), "-gencode", "arch=compute_90a,code=sm_90a",
                   "-std=c++17", "-O3", *defines, "-o", str(binary), str(main)]
    subprocess.run(command, check=True)
    return binary


def run(binary, case, seed):
    rows, vocab, std = CASES[case]
    out = subprocess.run([str(binary), str(rows), str(vocab), str(std), str(seed)], check=True,
                         capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


# Sums of exp: the GPU's exp2 is an approximation (2 ulp), the host's is not.
RELATIVE = {"z": 1e-5, "z_k": 1e-5}


def first_difference(a, b):
    for field, step in STEPS:
        x, y = a.get(field), b.get(field)
        if field in RELATIVE and x is not None and y is not None:
            if abs(x - y) <= RELATIVE[field] * max(abs(x), abs(y)):
                continue
        if x != y:
            return step, x, y
    return None


def summarise(name, case, states):
    """Prints a (variant, case)'s verdicts and where its sides part; returns its wrong rows."""
    bad = {side: [r["row"] for r in rows if not r["accepted"]] for side, rows in states.items()}
    print(f"{name} {case}: " + ", ".join(
        f"{side} {len(states[side]) - len(bad[side])}/{len(states[side])} accepted"
        for side in states))
    if len(states) == 2:
        for host_row, gpu_row in zip(states["host"], states["gpu"]):
            parted = first_difference(host_row, gpu_row)
            if parted is not None:
                step, host_value, gpu_value = parted
                print(f"  row {host_row['row']} (k {host_row['k']}, p {host_row['p']}): parts at "
                      f"{step}: host {host_value}, gpu {gpu_value}; accepted host "
                      f"{host_row['accepted']} gpu {gpu_row['accepted']}")
    else:
        for side, rows in bad.items():
            for row in rows:
                print(f"  {side} row {row} wrong: {states[side][row]}")
    return sum(len(rows) for rows in bad.values())


def runs_of(path):
    """A report's runs: this script's --json list, or a committed file's "runs"."""
    report = json.loads(pathlib.Path(path).read_text())
    return report["runs"] if isinstance(report, dict) else report


def compare(host_file, gpu_file):
    """Sets the states of two reports side by side (a --host-only and a --gpu-only run)."""
    host = {(r["variant"], r["case"], r["seed"]): r["states"]["host"]
            for r in runs_of(host_file)}
    wrong = 0
    for run in runs_of(gpu_file):
        if "gpu" not in run["states"]:
            sys.exit(f"{gpu_file}: not a --gpu-only report")
        key = (run["variant"], run["case"], run["seed"])
        states = {"gpu": run["states"]["gpu"]}
        if key in host:
            states = {"host": host[key], **states}
        wrong += summarise(run["variant"], run["case"], states)
    return wrong


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", nargs="+", default=["reference"])
    parser.add_argument("--cases", nargs="+", default=["batch_8_qwen", "batch_32_llama"],
                        choices=sorted(CASES))
    parser.add_argument("--seed", type=int, default=1)
    side = parser.add_mutually_exclusive_group()
    side.add_argument("--host-only", action="store_true")
    side.add_argument("--gpu-only", action="store_true")
    side.add_argument("--compare", nargs=2, metavar=("HOST_JSON", "GPU_JSON"),
                      help="set a --host-only run's states beside a --gpu-only run's")
    parser.add_argument("--json", help="write every row's state here too")
    args = parser.parse_args()
    if args.compare:
        sys.exit(1 if compare(*args.compare) else 0)
    report, wrong = [], 0
    with tempfile.TemporaryDirectory() as scratch:
        work = pathlib.Path(scratch)
        for name in args.variants:
            binaries = {}
            if not args.gpu_only:
                binaries["host"] = build(name, True, work)
            if not args.host_only:
                binaries["gpu"] = build(name, False, work)
            for case in args.cases:
                states = {side: run(binary, case, args.seed) for side, binary in binaries.items()}
                wrong += summarise(name, case, states)
                report.append({"variant": name, "case": case, "seed": args.seed,
                               "states": states})
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(report) + "\n")
    sys.exit(1 if wrong else 0)


if __name__ == "__main__":
    main()
