#!/usr/bin/env python3
"""Writes the samples of the logged run that `crucible replay` re-measures (bench/README.md).

An agent's run is mostly resubmissions of working kernels with some failures in between, so
the samples (110 by default) are correct kernels (at least 60, from four sources: the
reference itself, the simple example solution, the GPU corpus's correct and slow kernels),
every other kernel of the GPU corpus once (wrong, partial, faulting, hanging), every hack of
examples/hacks once, and the two broken examples (a compile error, no kernel), in an order
shuffled with a fixed seed.

Usage: trajectory_samples.py [--count N] > samples.jsonl   (run from the repository root)
"""
import argparse
import json
import pathlib
import random
import re
import sys

CORRECT = [
    ("reference", "kernels/llm/rms_norm.cu"),
    ("simple_solution", "tasks/llm/rms_norm/solution.cu"),
    ("corpus_correct", "tests/gpu/kernels/correct.cu"),
    ("corpus_slow", "tests/gpu/kernels/slow.cu"),
]


def expected_status(text):
    match = re.search(r"^// expect: (\w+)", text, re.MULTILINE)
    return match.group(1) if match else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=110, help="samples in all")
    parser.add_argument("--seed", type=int, default=2026, help="shuffle seed")
    args = parser.parse_args()
    root = pathlib.Path.cwd()
    others = []
    for folder in ("tests/gpu/kernels", "examples/hacks"):
        for path in sorted((root / folder).glob("*.cu")):
            text = path.read_text()
            status = expected_status(text)
            if status is None or status == "ok":
                continue
            others.append((f"{path.parent.name}/{path.stem}", text, status))
    for line in (root / "examples/trajectories/solutions.jsonl").read_text().splitlines():
        record = json.loads(line)
        status = {"missing_semicolon": "compile_error", "no_kernel": "invalid_action"}.get(
            record["sample_id"])
        if status:
            others.append((f"examples/{record['sample_id']}", record["source"], status))
    correct_count = args.count - len(others)
    if correct_count < 60:
        parser.error(f"--count must leave at least 60 correct samples beside {len(others)} others")
    samples = []
    for i in range(correct_count):
        name, path = CORRECT[i % len(CORRECT)]
        samples.append((f"{name}#{i // len(CORRECT)}", (root / path).read_text(), "ok"))
    samples.extend(others)
    random.Random(args.seed).shuffle(samples)
    for sample_id, source, status in samples:
        record = {
            "task": "llm/rms_norm",
            "sample_id": sample_id,
            "source": source,
            "meta": {"expect": status},
        }
        sys.stdout.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
