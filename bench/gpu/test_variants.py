"""Tests of the reference design variants (bench/gpu/variants.py), no GPU needed: every
variant's substitutions still apply to today's sources, and every variant's launch plan is
accepted for its task and evaluates on every case of it, tensor maps included (through the
module `crucible export-op` writes, which evaluates plans as the server does).

Needs a crucible binary: set CRUCIBLE_BIN (ctest does); without it the plan test reports itself
skipped.
"""
import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import tomllib

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
