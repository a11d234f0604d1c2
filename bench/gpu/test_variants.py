"""Tests of the reference design variants (bench/gpu/variants.py), no GPU needed: every
variant's substitutions still apply to today's sources, every variant's launch plan is
accepted for its task and evaluates on every case of it, tensor maps included (through the
module `crucible export-op` writes, which evaluates plans as the server does), and every variant
compiles with NVRTC in its reference's place (`crucible tasks check`); the sampler's and
grouped_topk's forms run on the CPU under host emulation (cuda_host_emulation.hpp) and are held
to float64.

Needs a crucible binary: set CRUCIBLE_BIN (ctest does); without it the plan and NVRTC tests
report themselves skipped.
"""
import importlib.util
import json
import math
import os
import pathlib
import random
import shutil
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


def _capacity_model():
    spec = importlib.util.spec_from_file_location("sampling_capacity",
                                                  HERE / "sampling_capacity.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_capacity_model_has_the_kernels_capacities():
    model = _capacity_model()
    reference = (ROOT / "kernels/llm/top_k_top_p_sampling_from_logits.cu").read_text()
    assert f"constexpr int kWarpCapacity = {model.WARP_CAPACITY};" in reference
    assert f"constexpr int kBuckets = {model.BUCKETS};" in reference
    assert f"constexpr float kBucketsPerNat = {model.BUCKETS_PER_NAT:.1f}f;" in reference
    pooled = next(sample["source"] for sample in variants()
                  if sample["sample_id"].endswith("#pooled_lists"))
    assert f"constexpr int kCapacity = {model.POOL_CAPACITY};" in pooled
    # The pool's bytes (a logit and a token id an entry) are the launch's dynamic shared memory.
    assert f"512, {model.POOL_CAPACITY * 8}>>>" in pooled
    wide = next(sample["source"] for sample in variants()
                if sample["sample_id"].endswith("#wide_lists"))
    assert f"constexpr int kWarpCapacity = {model.WIDE_CAPACITY};" in wide
    assert f"512, {16 * model.WIDE_CAPACITY * 8}>>>" in wide


def test_one_full_warp_overflows_the_reference_but_not_the_pool_or_wide_lists():
    model = _capacity_model()
    vocab = 16 * 1024
    segment = model.segment(vocab)
    # Every logit far below the max but 300 within the top half nat, all in warp 3's sixteenth.
    row = [-100.0] * vocab
    for i in range(300):
        row[3 * segment + i] = 10.0
    hist = model.histogram(row)
    top_k = model.cutoff(hist, 300, 1.0)
    assert top_k == {"bucket": 0, "total": 300, "warp_max": 300}
    assert model.overflows(top_k) == {"per_warp": True, "pooled": False, "wide": False}
    # The same 300 spread over the warps fit both.
    row = [-100.0] * vocab
    for i in range(300):
        row[(i % 16) * segment + i // 16] = 10.0
    assert model.overflows(model.cutoff(model.histogram(row), 300, 1.0)) == {
        "per_warp": False, "pooled": False, "wide": False}
    # 600 in one warp's sixteenth: past the wide lists too, within the pool.
    row = [-100.0] * vocab
    for i in range(600):
        row[3 * segment + i] = 10.0
    assert model.overflows(model.cutoff(model.histogram(row), 600, 1.0)) == {
        "per_warp": True, "pooled": False, "wide": True}
    # Top-p over a flat row: the nucleus is most of it, more than any pool.
    flat = model.cutoff(model.histogram([0.0] * vocab), 0, 0.95)
    assert flat["total"] == vocab and model.overflows(flat)["pooled"]


def test_the_pool_holds_the_largest_visible_nuclei():
    # batch_256_qwen's top-p 0.95 rows (152k logits, std 4) need the most candidates of the
    # visible cases; sampling_capacity.py's full run draws hundreds of rows, this a dozen.
    model = _capacity_model()
    case = next(c for c in model.visible_cases(tomllib.loads(model.TASK.read_text()))
                if c["case"] == "batch_256_qwen")
    rng = random.Random(3)
    totals = [model.cutoff(model.histogram(model.gaussian_row(rng, case["vocab"], case["mean"],
                                                              case["std"])), 0, 0.95)["total"]
              for _ in range(12)]
    assert 1000 < max(totals) < 0.85 * model.POOL_CAPACITY


def test_sampler_forms_hold_under_host_emulation(tmp_path):
    # The sampler's reference (its one-block instance, large batches' kernel) and the variants
    # that widen its lists, run on the CPU (cuda_host_emulation.hpp) over rows like batch_8_qwen
    # and flatter ones, every row's token accepted by the float64 check: their logic, apart
    # from the GPU (about 10 s a form and case). On the flat rows' seed, row 2's candidates
    # overflow the reference's 256 a warp (the global-memory path) and fit the wider lists.
    if shutil.which(os.environ.get("CXX", "g++")) is None:
        pytest.skip("no C++ compiler")
    report = tmp_path / "state.json"
    done = subprocess.run(
        [sys.executable, str(HERE / "sampling_state.py"), "--host-only", "--seed", "5",
         "--cases", "batch_8_qwen", "flat_8_qwen", "--variants", "reference", "wide_lists",
         "reference_pooled", "--json", str(report)],
        cwd=ROOT, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    runs = json.loads(report.read_text())
    assert len(runs) == 6
    for run in runs:
        rows = run["states"]["host"]
        assert len(rows) == 8 and all(row["accepted"] for row in rows), run["variant"]
    paths = {(run["variant"], run["case"]): run["states"]["host"][2]["path"] for run in runs}
    assert paths[("reference", "flat_8_qwen")] == "global"
    assert paths[("wide_lists", "flat_8_qwen")] == "shared"
    assert paths[("reference_pooled", "flat_8_qwen")] == "shared"


def _sampling_state():
    spec = importlib.util.spec_from_file_location("sampling_state", HERE / "sampling_state.py")
    state = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(state)
    return state


def test_sampling_state_probes_every_one_block_form():
    # Every sampler form of variants.py holds the probes' anchors and a launch of one block a
    # row.
    state = _sampling_state()
    names = ["reference"] + [name for task, _, name, _ in state.VARIANTS if task == state.TASK]
    assert len(names) >= 8
    for name in names:
        source, _, threads, smem = state.instrumented(name, host=True)
        assert threads == 512 and smem >= 0
        for _, probe in state.PROBES:
            assert probe in source, (name, probe)
        assert "extern __shared__" not in source, name


def test_grouped_topk_forms_route_as_float64_under_host_emulation(tmp_path):
    # llm/grouped_topk's reference and variants, their DeepSeek-V3 kernel run on the CPU
    # (cuda_host_emulation.hpp) against float64 routing: DeepSeek-V3's grouping, other groupings
    # of 256 experts, exact ties everywhere and saturated sigmoids (a few seconds a form).
    compiler = os.environ.get("CXX", "g++")
    if shutil.which(compiler) is None:
        pytest.skip("no C++ compiler")
    settings = [("64", "8", "4", "8", "2.0", "1"), ("64", "8", "4", "8", "2.0", "2", "1"),
                ("32", "4", "2", "6", "1.0", "3"), ("32", "16", "3", "8", "30.0", "4"),
                ("32", "1", "1", "8", "1.0", "5"), ("32", "32", "5", "8", "1.0", "6")]
    forms = [s for s in variants() if s["task"] == "llm/grouped_topk"]
    assert len(forms) >= 3
    for form in forms:
        name = form["sample_id"].split("#")[1]
        kernel = tmp_path / f"{name}.cu"
        kernel.write_text(form["source"].replace('extern "C" ', ""))
        binary = tmp_path / name
        subprocess.run([compiler, "-std=c++20", "-O2", "-pthread", f"-I{HERE}",
                        f"-DKERNEL=\"{kernel}\"", "-x", "c++",
                        str(HERE / "grouped_topk_host_main.cpp"), "-o", str(binary)], check=True)
        for setting in settings:
            done = subprocess.run([str(binary), *setting], capture_output=True, text=True,
                                  timeout=120)
            assert done.returncode == 0, (name, setting, done.stdout, done.stderr)
            assert " 0 expert sets differ, 0 weights outside tolerance" in done.stdout, done.stdout


def test_sampling_state_compare_names_the_first_step_that_differs(tmp_path, capsys):
    # A GPU report made from the committed host states with one row's collected lists changed:
    # --compare names the collection as where that row parts, and nothing else.
    state = _sampling_state()
    host = ROOT / "bench/results/sampling_state_host.json"
    runs = state.runs_of(host)
    gpu = []
    for run in runs:
        rows = [dict(row) for row in run["states"]["host"]]
        if run["variant"] == "pooled_lists" and run["case"] == "batch_8_qwen":
            rows[2]["collected"] = [n + (w == 9) for w, n in enumerate(rows[2]["collected"])]
            rows[2]["accepted"] = False
        gpu.append({**run, "states": {"gpu": rows}})
    report = tmp_path / "gpu.json"
    report.write_text(json.dumps(gpu))
    assert state.compare(host, report) == 1
    out = capsys.readouterr().out
    assert out.count("parts at") == 1
    assert "row 2 (k 1000000, p 0.95): parts at collection (list sizes)" in out


@pytest.mark.skipif(not os.environ.get("CRUCIBLE_BIN"), reason="CRUCIBLE_BIN is not set")
def test_every_variant_compiles_with_nvrtc(tmp_path):
    # Each variant in place of its task's reference in a copy of the kernels, held to
    # `crucible tasks check` (its plans and NVRTC, as the server compiles it): a variant that does
    # not compile is found here, not in a GPU call (a few seconds a variant).
    home = tmp_path / "home"
    home.mkdir()
    (home / "tasks").symlink_to(ROOT / "tasks")
    shutil.copytree(ROOT / "kernels", home / "kernels")
    for sample in variants():
        if sample["sample_id"].endswith("#reference"):
            continue  # tasks check --all holds the references themselves
        manifest = tomllib.loads((ROOT / "tasks" / sample["task"] / "task.toml").read_text())
        reference = home / manifest["reference"]["source"]
        original = reference.read_text()
        reference.write_text(sample["source"])
        try:
            done = subprocess.run([os.environ["CRUCIBLE_BIN"], "--home", str(home), "tasks",
                                   "check", sample["task"]], capture_output=True, text=True,
                                  timeout=300)
        finally:
            reference.write_text(original)
        assert done.returncode == 0, f"{sample['sample_id']}: {done.stdout}{done.stderr}"
        assert "ok    reference compiles with NVRTC" in done.stdout, (sample["sample_id"],
                                                                      done.stdout)
