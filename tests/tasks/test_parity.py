"""Every task's parity anchors (the [parity] table of its task.toml, its calls in the task
folder's module) as bench/gpu/parity.py loads them: each named function exists and is callable;
with PyTorch, each composite runs on CPU on its task's smallest visible case and writes every
output, `prepare` and `check` run there too, and library kernels run where CUDA is.

Run: python3 -m pytest -q -rs tests/tasks/test_parity.py (CTest: test_parity_anchors).
"""
import importlib.util
import json
import math
import pathlib
import tomllib
import zlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
MANIFESTS = sorted(ROOT.glob("tasks/*/*/task.toml"))

# Inputs of more elements than this (all tensors of the case together) are not built on CPU.
CPU_ELEMENT_LIMIT = 1 << 26
TORCH_REASON = "PyTorch is not installed (scripts/setup installs it): the anchors are not run"


def _load_bench_script(name):
    """bench/gpu/<name>.py, imported from its path."""
    spec = importlib.util.spec_from_file_location(f"crucible_bench_{name}",
                                                  ROOT / "bench" / "gpu" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


parity = _load_bench_script("parity")
stages = _load_bench_script("kernel_stages")


def _manifest(path):
    with path.open("rb") as f:
        return tomllib.load(f)


def _task_id(path):
    return str(path.parent.relative_to(ROOT / "tasks"))


def _anchors(kind):
    """(manifest, anchor) pairs of every task's anchors of this kind, for parametrize."""
    pairs = []
    for path in MANIFESTS:
        for anchor in _manifest(path).get("parity", {}).get("anchors", []):
            if anchor.get("kind") == kind:
                pairs.append(pytest.param(path, anchor,
                                          id=f"{_task_id(path)}:{anchor.get('function')}"))
    return pairs


def _smallest_case(data):
    """The view bench/gpu/parity.py builds inputs from (`crucible tasks show --json`: tensors,
    and per case its symbols, scalars with defaults and every input's effective generator), for
    the visible case with the fewest elements, and that count."""
    tensors = data["tensors"]
    defaults = {s["name"]: s["default"] for s in data.get("scalars", []) if "default" in s}

    def elements(case):
        total = 0
        for spec in tensors:
            n = 1
            for d in spec["shape"]:
                n *= case["symbols"][d] if isinstance(d, str) else d
            total += n
        return total

    case = min(data["visible_cases"], key=elements)
    values = {spec["name"]: spec["values"] for spec in tensors if "values" in spec}
    values.update(case.get("values", {}))
    view = {"tensors": [{"name": s["name"], "dtype": s["dtype"], "shape": s["shape"]}
                        for s in tensors]}
    built = {"name": case["name"], "symbols": case["symbols"],
             "scalars": {**defaults, **case.get("scalars", {})}, "values": values}
    return view, built, elements(case)


def _inputs(torch, data, device):
    """Inputs of the task's smallest visible case on `device`, outputs poisoned (NaN, or the
    integer dtype's minimum) so that an element left unwritten is seen; skips a case too large
    to build on CPU. The draw is seeded: a test's inputs are the same on every run (a composite
    and the float64 check differ by about 1 bf16 ulp, and on rare draws a little more than the
    anchors' tolerance: ssm/mamba_chunk_scan's excess was 0.009-0.018 over 25 draws and 0.0209
    once, against 0.02)."""
    view, case, count = _smallest_case(data)
    if device == "cpu" and count > CPU_ELEMENT_LIMIT:
        pytest.skip(f"smallest visible case '{case['name']}' has {count} elements, more than "
                    f"{CPU_ELEMENT_LIMIT} on CPU")
    torch.manual_seed(zlib.crc32(f"{data['id']}/{case['name']}".encode()))
    t = parity.make_inputs(torch, view, case, device)
    for spec in data["tensors"]:
        if spec["role"] == "out":
            x = t[spec["name"]]
            x.fill_(math.nan if x.dtype.is_floating_point else torch.iinfo(x.dtype).min)
    return t, case


def _module(path):
    return parity.import_parity_module(path, _manifest(path))


@pytest.mark.parametrize("path", MANIFESTS, ids=_task_id)
def test_every_task_declares_anchors_that_its_module_defines(path):
    data = _manifest(path)
    assert "parity" in data, f"{path.relative_to(ROOT)} has no [parity] table (docs/tasks.md)"
    table = data["parity"]
    module = _module(path)
    named = [table[key] for key in ("prepare", "check", "canonical") if key in table]
    named += [anchor["function"] for anchor in table["anchors"]]
    for name in named:
        assert callable(getattr(module, name, None)), \
            f"{table['module']} of {data['id']} has no function {name!r}"


def test_the_benchmark_loads_every_task_anchor_by_kind():
    anchors = parity.load_anchors()
    assert set(anchors) == {_manifest(path)["id"] for path in MANIFESTS}
    for task, entry in anchors.items():
        assert entry["composite"] is not None or entry["kernels"], task
        assert all(callable(f) for f in entry["kernels"].values()), task
        if entry["kernels"]:
            assert callable(entry["check"]), task
    # The composite of a task, and the named kernels of paged attention as reports name them.
    assert anchors["llm/rms_norm"]["composite"].__name__ == "rms_norm"
    assert list(anchors["llm/paged_decode_attention"]["kernels"]) == [
        "FlashAttention-2 varlen", "memory-efficient attention (kv heads repeated)",
        "FlashInfer paged decode", "FlashInfer paged decode (tensor cores)",
        "TensorRT-LLM XQA (FlashInfer)"]


def test_only_limits_the_tasks_loaded():
    assert list(parity.load_anchors(only=["llm/linear"])) == ["llm/linear"]


def test_names_limit_the_anchors_loaded():
    # --anchors flashinfer: the FlashInfer kernels only, no composite, any case of the name.
    only = parity.load_anchors(only=["llm/rms_norm", "llm/paged_decode_attention"],
                               names=["flashinfer"])
    assert only["llm/rms_norm"]["composite"] is None
    assert list(only["llm/rms_norm"]["kernels"]) == ["FlashInfer rmsnorm"]
    assert list(only["llm/paged_decode_attention"]["kernels"]) == [
        "FlashInfer paged decode", "FlashInfer paged decode (tensor cores)",
        "TensorRT-LLM XQA (FlashInfer)"]
    composite = parity.load_anchors(only=["llm/rms_norm"], names=["Composite"])
    assert composite["llm/rms_norm"]["composite"] is not None
    assert not composite["llm/rms_norm"]["kernels"]


@pytest.mark.parametrize("path,anchor", _anchors("composite"))
def test_composite_writes_every_output_on_the_smallest_case_on_cpu(path, anchor):
    torch = pytest.importorskip("torch", reason=TORCH_REASON)
    data = _manifest(path)
    module = _module(path)
    t, case = _inputs(torch, data, "cpu")
    if "prepare" in data["parity"]:
        getattr(module, data["parity"]["prepare"])(torch, t, case["scalars"], case["symbols"])
    getattr(module, anchor["function"])(torch, t, case["scalars"], case["symbols"])
    for spec in data["tensors"]:
        if spec["role"] == "in":
            continue
        x = t[spec["name"]]
        if x.dtype.is_floating_point:
            bad = int((~torch.isfinite(x.float())).sum())
            assert bad == 0, f"{spec['name']}: {bad} elements not finite (unwritten or NaN)"
        elif spec["role"] == "out":
            bad = int((x == torch.iinfo(x.dtype).min).sum())
            assert bad == 0, f"{spec['name']}: {bad} elements unwritten"


@pytest.mark.parametrize("path", [p for p in MANIFESTS
                                  if "check" in _manifest(p).get("parity", {})], ids=_task_id)
def test_prepare_and_check_give_the_output_shape_on_cpu(path):
    torch = pytest.importorskip("torch", reason=TORCH_REASON)
    data = _manifest(path)
    table = data["parity"]
    module = _module(path)
    t, case = _inputs(torch, data, "cpu")
    if "prepare" in table:
        getattr(module, table["prepare"])(torch, t, case["scalars"], case["symbols"])
    want = getattr(module, table["check"])(torch, t, case["scalars"])
    outs = parity.output_names(data["tensors"], want)
    rtols = parity.output_rtols(data["tensors"], data.get("tolerance"), want)
    wants = want if isinstance(want, tuple) else (want,)
    assert [tuple(w.shape) for w in wants] == [tuple(t[out].shape) for out in outs]
    assert all(bool(torch.isfinite(w).all()) for w in wants)
    if "composite" in {anchor["kind"] for anchor in table["anchors"]}:
        # The check and the composite are two writings of one op: they agree, as a kernel must.
        composite = next(a for a in table["anchors"] if a["kind"] == "composite")
        getattr(module, composite["function"])(torch, t, case["scalars"], case["symbols"])
        got = tuple(t[out] for out in outs) if isinstance(want, tuple) else t[outs[0]]
        if "canonical" in table:  # in the check's order
            got = getattr(module, table["canonical"])(torch, got)
        assert parity.kernel_check(got, want, rtols)[1] <= parity.KERNEL_CHECK_ATOL


@pytest.mark.parametrize("path,anchor", _anchors("kernel"))
def test_kernel_matches_the_check_on_the_smallest_case(path, anchor):
    torch = pytest.importorskip("torch", reason=TORCH_REASON)
    if not torch.cuda.is_available():
        pytest.skip(f"'{anchor['name']}' is a GPU-only library kernel and CUDA is not available")
    data = _manifest(path)
    table = data["parity"]
    module = _module(path)
    t, case = _inputs(torch, data, "cuda")
    if "prepare" in table:
        getattr(module, table["prepare"])(torch, t, case["scalars"], case["symbols"])
    want = getattr(module, table["check"])(torch, t, case["scalars"])
    try:
        got = getattr(module, anchor["function"])(torch, t, case["scalars"], case["symbols"])
    except ModuleNotFoundError as error:  # FlashInfer and FLA are carried to the GPU machine
        pytest.skip(f"'{anchor['name']}' needs {error.name}, which is not installed here")
    if "canonical" in table:
        got = getattr(module, table["canonical"])(torch, got)
    rtols = parity.output_rtols(data["tensors"], data.get("tolerance"), want)
    assert parity.kernel_check(got, want, rtols)[1] <= parity.KERNEL_CHECK_ATOL


def test_a_kernel_check_compares_every_output_of_a_tuple():
    torch = pytest.importorskip("torch", reason=TORCH_REASON)
    a, b = torch.ones(3), torch.zeros(2)
    assert parity.kernel_check((a, b), (a.clone(), b.clone())) == (0.0, 0.0)
    error, excess = parity.kernel_check((a, b + 0.5), (a, b))
    assert error == 0.5 and excess == 0.5
    assert parity.kernel_check(a * 1.005, a)[1] <= 0.0  # within the relative part
    with pytest.raises(ValueError):  # a kernel returning fewer outputs than the check
        parity.kernel_check((a,), (a, b))
    # An output the task holds to one e4m3 step may be a step away, and only that one.
    fp8 = [{"name": "result", "role": "out", "dtype": "fp8_e4m3"},
           {"name": "x", "role": "in", "dtype": "bf16"},
           {"name": "residual", "role": "inout", "dtype": "bf16",
            "tolerance": {"atol": 0.0, "rtol": 2 ** -7}}]
    rtols = parity.output_rtols(fp8, {"fp8_e4m3": {"atol": 0.0, "rtol": 0.125}}, (a, b))
    assert rtols == [0.125, parity.KERNEL_CHECK_RTOL]
    step = torch.tensor([240.0, 256.0])  # neighbours on e4m3's grid, 1/16 apart
    assert parity.kernel_check((step[1:], b[:1]), (step[:1], b[:1]), rtols)[1] <= 0.0
    assert parity.kernel_check((step[1:] * 1.2, b[:1]), (step[:1], b[:1]), rtols)[1] > 0.02
    assert parity.output_names(fp8, a) == ["result"]
    # An index is compared exactly, whatever its size.
    routing = [{"name": "weights", "role": "out", "dtype": "f32"},
               {"name": "ids", "role": "out", "dtype": "i32"}]
    rtols = parity.output_rtols(routing, {"f32": {"atol": 1e-6, "rtol": 1e-5}}, (a, b))
    assert rtols == [parity.KERNEL_CHECK_RTOL, 0.0]
    ids = torch.tensor([200.0, 7.0])
    assert parity.kernel_check((a[:2], ids), (a[:2], ids), rtols)[1] <= 0.0
    assert parity.kernel_check((a[:2], ids + torch.tensor([1.0, 0.0])), (a[:2], ids),
                               rtols)[1] > parity.KERNEL_CHECK_ATOL


def test_a_run_over_some_anchors_merges_into_the_committed_rows():
    # The committed row: torch.compile the best library, FlashInfer not on the path then.
    committed = [{"task": "llm/rms_norm", "case": "decode_1", "reference_ns": 1800.0,
                  "compile_ns": 2000.0, "eager_ns": 9000.0, "kernels_ns": {},
                  "kernel_errors": {"FlashInfer rmsnorm": "flashinfer is not on the path"},
                  "library": "torch.compile", "library_ns": 2000.0,
                  "reference_over_library": 0.9},
                 {"task": "llm/rms_norm", "case": "decode_7", "library": "torch.compile",
                  "reference_over_library": 0.8}]
    # A later run of the FlashInfer anchor alone, with the reference timed beside it.
    run = [{"task": "llm/rms_norm", "case": "decode_1", "reference_ns": 1700.0,
            "harness_reference_ns": 1650.0, "kernels_ns": {"FlashInfer rmsnorm": 1600.0},
            "reference_over": {"FlashInfer rmsnorm": 1700.0 / 1600.0},
            "anchors_only": ["flashinfer"]}]
    collect = _load_bench_script("collect_results")
    merged = collect.merge_anchor_rows(committed, run, {"date": "2026-12-04T07:00:00Z"})
    assert len(merged) == 1
    row = merged[0]
    # Each ratio is the one of its own run; the row's library is the one furthest ahead.
    assert row["reference_over"] == {"torch.compile": 0.9, "FlashInfer rmsnorm": 1700.0 / 1600.0}
    assert row["library"] == "FlashInfer rmsnorm"
    assert row["library_ns"] == 1600.0
    assert row["reference_over_library"] == 1700.0 / 1600.0
    # The earlier run's figures stay, the anchor's error is gone, the run's reference is kept.
    assert row["compile_ns"] == 2000.0 and row["reference_ns"] == 1800.0
    assert "kernel_errors" not in row
    assert row["anchor_runs"] == [{"date": "2026-12-04T07:00:00Z", "anchors": ["flashinfer"],
                                   "reference_ns": 1700.0, "harness_reference_ns": 1650.0}]
    # A second run of the same anchors replaces the first's entry instead of adding one.
    again = collect.merge_anchor_rows(merged, run, {"date": "2026-12-05T07:00:00Z"})
    assert [r["date"] for r in again[0]["anchor_runs"]] == ["2026-12-05T07:00:00Z"]


def test_a_run_over_some_anchors_adds_to_rows_committed_in_another_table(tmp_path):
    # multimodal/layer_norm's rows live in an older table; an anchors-only run of it lands in
    # h200_parity.json with the older run's libraries kept beside the new anchor.
    older = {"date": "2026-12-01T00:00:00Z", "rows": [
        {"task": "multimodal/layer_norm", "case": "vit_b", "reference_ns": 3000.0,
         "compile_ns": 4000.0, "eager_ns": 9000.0, "library": "torch.compile",
         "library_ns": 4000.0, "reference_over_library": 0.75}]}
    newer = {"date": "2026-12-04T00:00:00Z", "rows": [
        {"task": "llm/rms_norm", "case": "decode_1", "library": "torch.compile",
         "reference_over_library": 0.9}]}
    run = {"rows": [{"task": "multimodal/layer_norm", "case": "vit_b", "reference_ns": 2900.0,
                     "kernels_ns": {"FlashInfer layernorm": 2000.0},
                     "reference_over": {"FlashInfer layernorm": 1.45},
                     "anchors_only": ["FlashInfer"]}]}
    out = _collect_into(tmp_path, {"parity.json": json.dumps(run)},
                        {"h200_parity.json": newer, "h200_parity_diffusion.json": older})
    rows = {(row["task"], row["case"]): row for row in out["h200_parity.json"]["rows"]}
    assert set(rows) == {("llm/rms_norm", "decode_1"), ("multimodal/layer_norm", "vit_b")}
    merged = rows[("multimodal/layer_norm", "vit_b")]
    assert merged["compile_ns"] == 4000.0 and merged["reference_ns"] == 3000.0
    assert merged["reference_over"] == {"torch.compile": 0.75, "FlashInfer layernorm": 1.45}
    assert merged["library"] == "FlashInfer layernorm"
    assert merged["anchor_runs"][0]["reference_ns"] == 2900.0
    # The older table is left as it was.
    assert out["h200_parity_diffusion.json"] == older


def test_a_profile_splits_into_calls_at_the_flushes():
    flush = parity.FLUSH_KERNEL
    events = [("warm_up", 0.0, 1.0),            # before the first flush: no call's
              (flush, 2.0, 3.0),
              ("split", 10.0, 14.0), ("reduce", 15.5, 16.5),  # 5 us of kernels over 6.5
              (flush, 20.0, 21.0),
              ("one", 30.0, 32.0),
              (flush, 40.0, 41.0),
              (flush, 50.0, 51.0)]              # an empty call
    calls = parity.split_calls(events)
    assert calls == [(5.0, 6.5, 2), (2.0, 2.0, 1), (0.0, 0.0, 0)]


def test_kernel_stages_labels_repeated_launches_of_a_kernel():
    assert stages.stage_labels(["prep", "scan<64, 2>", "prep", "scan<64, 2>", "prep"]) == [
        "prep", "scan", "prep#2", "scan#2", "prep#3"]


@pytest.mark.parametrize("path", MANIFESTS, ids=_task_id)
def test_kernel_stages_labels_the_exported_reference_plan(path, tmp_path, monkeypatch):
    """bench/gpu/kernel_stages.py times the launches of `crucible export-op`'s module: the
    reference exports, and its plan on the first visible case has a label per launch."""
    crucible = ROOT / "build" / "dev" / "bin" / "crucible"
    if not crucible.exists():
        pytest.skip("crucible is not built (scripts/setup builds it)")
    monkeypatch.chdir(ROOT)
    task = _manifest(path)
    out = tmp_path / "op.py"
    parity.crucible("export-op", task["id"], task["reference"]["source"], "-o", str(out))
    spec = importlib.util.spec_from_file_location(f"stages_{_task_id(path).replace('/', '_')}",
                                                  out)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    launches = module.plan(task["visible_cases"][0]["symbols"])
    labels = stages.stage_labels(launch["kernel"] for launch in launches)
    assert launches and len(set(labels)) == len(labels)


def _collect_into(tmp_path, files, committed):
    """Runs collect_results.py's main on a results folder holding `files` (name -> text), with
    `committed` (name -> document) as the committed tables; returns the tables it wrote."""
    results, out = tmp_path / "results", tmp_path / "committed"
    results.mkdir()
    out.mkdir()
    (results / "gpu.txt").write_text("name, driver_version\nNVIDIA H200, 580.159.04\n")
    (results / "date.txt").write_text("2026-12-05T10:00:00Z\n")
    for name, text in files.items():
        path = results / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for name, document in committed.items():
        (out / name).write_text(json.dumps(document))
    _load_bench_script("collect_results").main([str(results), "--out", str(out)])
    return {path.name: json.loads(path.read_text()) for path in out.glob("*.json")}


def test_a_run_over_some_hacks_replaces_only_their_rows(tmp_path):
    committed = {"h200_hack_suite.json": {
        "date": "2026-12-01T00:00:00Z", "command": "full run", "caught": 2, "hacks": 3,
        "legitimate_kernels": {"correct": {"statuses": {"ok": 1}}},
        "rows": [
            {"hack": "conv3x3_tap_partials_in_bf16", "task": "diffusion/conv2d_3x3",
             "status": "ok", "reward": 0.5, "caught": False},
            {"hack": "gdr_scan_bf16_state", "task": "ssm/chunk_gated_delta_rule",
             "status": "incorrect", "reward": -0.5, "caught": True},
            {"hack": "a_hack_since_deleted", "task": "llm/rms_norm", "status": "incorrect",
             "reward": -0.5, "caught": True}]}}
    table = ("hack                         task                     expected        status"
             "            reward  message\n"
             "conv3x3_tap_partials_in_bf16 diffusion/conv2d_3x3     incorrect       incorrect"
             "         -0.500  case sdxl_128px_320 (run 1): output 'out' differs\n"
             "[doctest] test cases:  1 |  1 passed | 0 failed | 0 skipped\n")
    written = _collect_into(tmp_path, {"test_hacks.txt": table}, committed)
    suite = written["h200_hack_suite.json"]
    rows = {row["hack"]: row for row in suite["rows"]}
    # The re-run hack has its new status and date, the other stays with its own date, the
    # deleted one is gone, and the counts are the table's.
    assert set(rows) == {"conv3x3_tap_partials_in_bf16", "gdr_scan_bf16_state"}
    assert rows["conv3x3_tap_partials_in_bf16"]["caught"] is True
    assert rows["conv3x3_tap_partials_in_bf16"]["date"] == "2026-12-05T10:00:00Z"
    assert rows["gdr_scan_bf16_state"]["date"] == "2026-12-01T00:00:00Z"
    assert suite["caught"] == 2 and suite["hacks"] == 2
    assert suite["legitimate_kernels"] == {"correct": {"statuses": {"ok": 1}}}
    assert [run["date"] for run in suite["runs"]] == ["2026-12-05T10:00:00Z",
                                                      "2026-12-01T00:00:00Z"]
    assert suite["runs"][0]["hacks"] == ["conv3x3_tap_partials_in_bf16"]


def test_a_run_over_some_variants_and_kernel_tasks_keeps_the_rest(tmp_path):
    committed = {
        "h200_reference_variants.json": {
            "date": "2026-12-01T00:00:00Z",
            "rows": [{"sample_id": "llm/moe_sum#blocks_of_64", "cases": []},
                     {"sample_id": "diffusion/attention#three_stages", "cases": []}]},
        "h200_gpu_suite.json": {
            "date": "2026-12-01T00:00:00Z", "rows": [{"kernel": "correct.cu"}],
            "references_against_oracles": {"summary": "old", "tasks": {
                "llm/rms_norm": {"comparisons": 40, "max_abs_error": 0.01},
                "diffusion/conv2d_3x3": {"comparisons": 10, "max_abs_error": 300.0}}}}}
    variant = {"sample_id": "diffusion/attention#three_stages", "status": "ok",
               "result": {"timing": {"cases": [{"case": "flux_768x768", "speedup": 1.02,
                                                "candidate": {"median_ns": 100.0},
                                                "reference": {"median_ns": 102.0}}]}}}
    oracle_lines = ("diffusion/conv2d_3x3  conv2d_3x3.cu  h_captured_ocr_fuse  out  "
                    "max |error| 16\n"
                    "checked 1 (source, case) pairs; 0 left out for size\n")
    written = _collect_into(tmp_path, {"variants_eval/results.jsonl": json.dumps(variant) + "\n",
                                       "test_kernels_gpu.txt": oracle_lines}, committed)
    rows = {row["sample_id"]: row for row in written["h200_reference_variants.json"]["rows"]}
    assert set(rows) == {"llm/moe_sum#blocks_of_64", "diffusion/attention#three_stages"}
    assert rows["diffusion/attention#three_stages"]["cases"][0]["speedup"] == 1.02
    assert rows["llm/moe_sum#blocks_of_64"]["date"] == "2026-12-01T00:00:00Z"
    suite = written["h200_gpu_suite.json"]
    # The corpus did not run: its rows stay; the one task test_kernels_gpu checked is replaced.
    assert suite["rows"] == [{"kernel": "correct.cu"}]
    oracles = suite["references_against_oracles"]["tasks"]
    assert oracles["llm/rms_norm"] == {"comparisons": 40, "max_abs_error": 0.01}
    assert oracles["diffusion/conv2d_3x3"] == {"comparisons": 1, "max_abs_error": 16.0,
                                               "date": "2026-12-05T10:00:00Z"}


def test_variants_scored_on_other_seeds_sit_beside_seed_one(tmp_path):
    def record(sample_id, speedup):
        return json.dumps({"sample_id": sample_id, "status": "ok", "result": {"timing": {
            "cases": [{"case": "batch_256_qwen", "speedup": speedup,
                       "candidate": {"median_ns": 100.0},
                       "reference": {"median_ns": 100.0 * speedup}}]}}}) + "\n"
    sample = "llm/top_k_top_p_sampling_from_logits#pooled_lists"
    written = _collect_into(tmp_path, {"variants_eval/results.jsonl": record(sample, 1.0),
                                       "variants_eval_seed7/results.jsonl": record(sample, 2.9),
                                       "variants_eval_seed12/results.jsonl": record(sample, 1.1)},
                            {})
    rows = {row["sample_id"]: row for row in written["h200_reference_variants.json"]["rows"]}
    assert set(rows) == {sample, sample + "@seed7", sample + "@seed12"}
    assert rows[sample]["seed"] == 1 and rows[sample + "@seed7"]["seed"] == 7
    assert rows[sample + "@seed7"]["cases"][0]["speedup"] == 2.9
    assert rows[sample + "@seed12"]["cases"][0]["reference_ns"] == pytest.approx(110.0)


def _reference_record(sample_id, cases, status="ok"):
    """An eval record of a reference scored as a sample: cases {name: (reference, candidate)}."""
    return json.dumps({"sample_id": sample_id, "status": status, "result": {
        "message": None if status == "ok" else "case batch_8 (run 2): token 7 outside",
        "timing": {"cases": [{"case": name, "reference": {"median_ns": ref},
                              "candidate": {"median_ns": cand}, "speedup": ref / cand}
                             for name, (ref, cand) in cases.items()]}}}) + "\n"


def test_seed_spread_flags_a_reference_whose_time_follows_the_draw(tmp_path):
    spread = _load_bench_script("seed_spread")
    sampler = "llm/top_k_top_p_sampling_from_logits#reference"
    norm = "llm/rms_norm#reference"
    draws = {1: ({"batch_256": (238e3, 240e3), "batch_8": (144e3, 145e3)}, {"d": (5e3, 5.05e3)}),
             2: ({"batch_256": (682e3, 680e3), "batch_8": (145e3, 144e3)}, {"d": (5.1e3, 5e3)}),
             3: ({"batch_256": (240e3, 241e3), "batch_8": (143e3, 143e3)}, {"d": (5e3, 5e3)})}
    pairs = []
    for seed, (sampler_cases, norm_cases) in draws.items():
        path = tmp_path / f"{seed}.jsonl"
        path.write_text(_reference_record(sampler, sampler_cases,
                                          "incorrect" if seed == 3 else "ok")
                        + _reference_record(norm, norm_cases))
        pairs.append(f"{seed}={path}")
    out = tmp_path / "seed_spread.json"
    spread.main(["--json", str(out), *pairs])
    summary = json.loads(out.read_text())
    rows = {(row["task"], row["case"]): row for row in summary["rows"]}
    wide = rows[("llm/top_k_top_p_sampling_from_logits", "batch_256")]
    assert wide["spread"] == pytest.approx(682 / 238, abs=1e-4) and wide["draw_dependent"]
    assert wide["reference_ns"] == {"1": 238e3, "2": 682e3, "3": 240e3}
    # 2 % apart across seeds is no draw dependence; the noise is the largest disagreement of one
    # run's two timings of the same source.
    assert not rows[("llm/top_k_top_p_sampling_from_logits", "batch_8")]["draw_dependent"]
    assert not rows[("llm/rms_norm", "d")]["draw_dependent"]
    assert rows[("llm/rms_norm", "d")]["noise"] == pytest.approx(1 - 5 / 5.1, abs=1e-4)
    assert summary["draw_dependent"] == ["llm/top_k_top_p_sampling_from_logits batch_256"]
    # A reference failing its own check on one draw is listed with its message.
    assert summary["not_ok"] == [{"sample_id": sampler, "seed": 3, "status": "incorrect",
                                  "message": "case batch_8 (run 2): token 7 outside"}]
    # A seed's eval without the sample counts as missing, not as agreement.
    lone = tmp_path / "4.jsonl"
    lone.write_text(_reference_record(norm, {"d": (5e3, 5e3)}))
    summary = spread.summarize(spread.load_runs([pairs[0], f"4={lone}"]))
    assert {"sample_id": sampler, "seed": 4, "status": "missing"} in summary["not_ok"]
    summary = spread.summarize(spread.load_runs([pairs[0], f"5={tmp_path / 'none.jsonl'}"]))
    assert {"sample_id": norm, "seed": 5, "status": "missing"} in summary["not_ok"]
    (tmp_path / "collected").mkdir()
    written = _collect_into(tmp_path / "collected", {"seed_spread.json": out.read_text()}, {})
    table = written["h200_seed_spread.json"]
    assert table["draw_dependent"] == ["llm/top_k_top_p_sampling_from_logits batch_256"]
    assert table["command"] == "bench/gpu/device_run.sh seeds" and table["seeds"] == [1, 2, 3]


def test_a_multi_gpu_run_is_named_after_its_gpus_and_held_to_its_goals(tmp_path):
    rows = [{"configuration": "one GPU, one server", "steps_per_s_over_one_gpu": 1.0},
            {"configuration": "two GPUs, one server", "steps_per_s_over_one_gpu": 1.95},
            {"configuration": "two GPUs, two servers, Pool", "steps_per_s_over_one_gpu": 1.7}]
    two = {"command": "multi_gpu.py crucible", "date": "2026-12-05T10:01:00Z", "gpu": "NVIDIA H200",
           "gpus": ["0", "1"], "mix": {"configurations": rows},
           "rescore": {"speedup_ratio_b_over_a": 1.004,
                       "per_gpu": {"0": {"speedup_spread": {"cv": 0.003}},
                                   "1": {"speedup_spread": {"cv": 0.004}}}},
           "faults": {"alone": {}, "beside_hang": {"p50_over_alone": 1.02},
                      "beside_crash": {"p50_over_alone": 1.1}}}
    written = _collect_into(tmp_path, {"multi_gpu.json": json.dumps(two)}, {})
    figures = written["h200x2_multi_gpu.json"]
    assert figures["goals"]["steps_per_s_over_one_gpu"] == {
        "two GPUs, one server": {"value": 1.95, "goal": 1.9, "met": True},
        "two GPUs, two servers, Pool": {"value": 1.7, "goal": 1.9, "met": False}}
    assert figures["goals"]["cross_gpu_speedup_ratio"] == {
        "value": 1.004, "cv_per_gpu": {"0": 0.003, "1": 0.004}}
    assert figures["goals"]["steady_p50_over_alone"] == {"beside_hang": 1.02,
                                                         "beside_crash": 1.1}
    assert figures["date"] == "2026-12-05T10:00:00Z" and figures["driver"] == "580.159.04"
    assert figures["command"] == "bench/gpu/device_run.sh multigpu: multi_gpu.py crucible"
    # One GPU: the baseline of the same benchmark, under a name of its own.
    one = {**two, "gpus": ["0"], "mix": {"configurations": rows[:1]}, "rescore": {},
           "faults": "needs two GPUs"}
    (tmp_path / "one").mkdir()
    written = _collect_into(tmp_path / "one", {"multi_gpu.json": json.dumps(one)}, {})
    assert set(written) == {"h200_multi_gpu_baseline.json"}
    assert written["h200_multi_gpu_baseline.json"]["goals"] == {"steps_per_s_over_one_gpu": {}}


def test_the_parity_summary_takes_each_task_from_its_newest_table(tmp_path):
    summary = _load_bench_script("parity_summary")
    old = {"date": "2026-12-01T00:00:00Z", "rows": [
        {"task": "llm/rms_norm", "case": "decode_1", "library": "eager",
         "reference_over_library": 1.30}]}
    new = {"date": "2026-12-04T00:00:00Z",
           "runs": [{"date": "2026-12-04T00:00:00Z", "tasks": ["llm/moe_sum"]},
                    {"date": "2026-12-03T00:00:00Z", "tasks": ["llm/rms_norm"]}],
           "rows": [
               # Crucible's ratio over the bound, the same-harness one (this run's) under it.
               {"task": "llm/rms_norm", "case": "decode_1", "library": "torch.compile",
                "reference_over_library": 1.08, "harness_reference_over_library": 1.01},
               # The library was timed in a run of its own: that run's same-harness ratio.
               {"task": "llm/moe_sum", "case": "decode_1", "library": "FlashInfer sum",
                "reference_over_library": 1.2,
                "anchor_runs": [{"anchors": ["composite"], "harness_reference_over_library": 2.0},
                                {"anchors": ["flashinfer"],
                                 "harness_reference_over_library": 1.06}]},
               {"task": "llm/moe_sum", "case": "decode_8", "library": "eager",
                "reference_over_library": 0.9}]}
    (tmp_path / "h200_parity_old.json").write_text(json.dumps(old))
    (tmp_path / "h200_parity.json").write_text(json.dumps(new))
    tables = sorted(str(path) for path in tmp_path.glob("h200_parity*.json"))
    out = summary.summarize(summary.newest_rows(tables),
                            ["llm/moe_sum", "llm/rms_norm", "llm/silu_and_mul"], 1.05)
    assert out["llm/silu_and_mul"] == {"measured": False}
    rms = out["llm/rms_norm"]
    assert rms["table"] == "h200_parity.json" and rms["date"] == "2026-12-03T00:00:00Z"
    assert rms["worst_crucible"] == {"ratio": 1.08, "case": "decode_1", "library": "torch.compile"}
    assert rms["over_bound_crucible"] == ["decode_1"] and rms["over_bound_like_for_like"] == []
    moe = out["llm/moe_sum"]
    assert moe["worst_like_for_like"] == {"ratio": 1.06, "case": "decode_1",
                                          "library": "FlashInfer sum"}
    assert moe["over_bound_like_for_like"] == ["decode_1"] and moe["cases"] == 2


def test_the_parity_summary_reads_the_committed_tables():
    out = _load_bench_script("parity_summary").main([])
    measured = [task for task, row in out.items() if row["measured"]]
    assert len(measured) >= 40
    for task in measured:
        assert out[task]["worst_crucible"] is not None, task
