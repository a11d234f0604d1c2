"""Tests of the reference design variants (bench/gpu/variants.py), no GPU needed: every
variant's substitutions still apply to today's sources, and every variant's launch plan is
accepted for its task and evaluates on every case of it, tensor maps included (through the
module `crucible export-op` writes, which evaluates plans as the server does).

Needs a crucible binary: set CRUCIBLE_BIN (ctest does); without it the plan test reports itself
skipped.
"""
import importlib.util
import json
import math
import os
import pathlib
import random
import struct
import subprocess
import sys
import tomllib
from fractions import Fraction

import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def variants():
    done = subprocess.run([sys.executable, str(HERE / "variants.py")], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_every_variant_applies_and_differs_from_its_reference():
    samples = variants()
    assert samples
    references = {s["task"]: s["source"] for s in samples if s["sample_id"].endswith("#reference")}
    for sample in samples:
        assert sample["task"] in references, sample["sample_id"]
        if not sample["sample_id"].endswith("#reference"):
            assert sample["source"] != references[sample["task"]], sample["sample_id"]


@pytest.mark.skipif(not os.environ.get("CRUCIBLE_BIN"), reason="CRUCIBLE_BIN is not set")
def test_every_variant_plan_evaluates_on_every_case(tmp_path):
    for number, sample in enumerate(variants()):
        source = tmp_path / f"{number}.cu"
        source.write_text(sample["source"])
        module = tmp_path / f"variant_{number}.py"
        done = subprocess.run([os.environ["CRUCIBLE_BIN"], "--home", str(ROOT), "export-op",
                               sample["task"], str(source), "-o", str(module)],
                              capture_output=True, text=True)
        assert done.returncode == 0, f"{sample['sample_id']}: {done.stdout}{done.stderr}"
        spec = importlib.util.spec_from_file_location(module.stem, module)
        op = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(op)
        manifest = tomllib.loads((ROOT / "tasks" / sample["task"] / "task.toml").read_text())
        for case in manifest["visible_cases"] + manifest.get("hidden_cases", []):
            symbols = case["symbols"]
            shapes = {t["name"]: [symbols[d] if d in symbols else int(d) for d in t["shape"]]
                      for t in op.TASK["tensors"]}
            assert op.plan(symbols), f"{sample['sample_id']} runs nothing on {case['name']}"
            op.tensor_map_figures(symbols, shapes)


# --- the sampler's sorted thresholds, as a host model --------------------------------------
# sorted_thresholds replaces the reference's key-space searches by a rule over the sorted keys;
# in exact arithmetic both must pick the same key for every row, target and base (ties included).

def _key_of(x):
    bits = 0 if x == 0.0 else struct.unpack("<I", struct.pack("<f", x))[0]
    return (~bits & 0xFFFFFFFF) if bits & 0x80000000 else bits | 0x80000000


def _searched_key(keys, weight, base, target):
    """smallest_key_below: an 8-ary search over [0, 2^32) (the reference's)."""
    lo, hi = 0, 0xFFFFFFFF
    while lo < hi:
        pivots = [lo + (hi - lo) * (i + 1) // 8 for i in range(7)]
        sums = [sum((weight[k] for k in keys if k >= base and k > p), Fraction(0))
                for p in pivots]
        new_lo, new_hi = pivots[6] + 1, hi
        for i in range(6, -1, -1):
            if sums[i] < target:
                new_hi, new_lo = pivots[i], pivots[i - 1] + 1 if i > 0 else lo
        lo, hi = new_lo, new_hi
    return lo


def _sorted_key(keys, weight, base, target):
    """top_p_key: the key of the last entry whose exclusive prefix is below target (the
    variant's)."""
    ordered = sorted(keys, reverse=True)
    total = sum((weight[k] for k in ordered if k >= base), Fraction(0))
    before, last = Fraction(0), -1
    for i, key in enumerate(ordered):
        if key < base:
            break
        if before < target:
            last = i
        before += weight[key]
    if not target > 0:
        return 0xFFFFFFFF
    return 0 if total < target else ordered[last]


def test_sorted_thresholds_pick_the_searched_keys():
    rng = random.Random(7)
    for _ in range(150):
        digits = rng.choice([0, 1, 2])  # rounding makes ties
        row = [struct.unpack("<f", struct.pack("<f", round(rng.gauss(0, 3), digits)))[0]
               for _ in range(rng.randint(1, 40))]
        keys = [_key_of(x) for x in row]
        top = max(row)
        weight = {key: Fraction(math.exp(x - top)) for key, x in zip(keys, row)}
        k = rng.randint(1, len(keys))
        top_k_key = _searched_key(keys, {key: Fraction(1) for key in keys}, 0, k)
        assert top_k_key == sorted(keys, reverse=True)[k - 1]
        for base in (0, top_k_key):
            kept = sum((weight[key] for key in keys if key >= base), Fraction(0))
            for p in (Fraction(0), Fraction(3, 10), Fraction(9, 10), Fraction(999, 1000),
                      Fraction(1), Fraction(3, 2)):
                assert _searched_key(keys, weight, base, p * kept) == \
                    _sorted_key(keys, weight, base, p * kept)
