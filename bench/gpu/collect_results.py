#!/usr/bin/env python3
"""Turns what bench/gpu/device_run.sh left in its results folder into the JSON files committed
under bench/results/ (GPU name, driver, date and command in each).

Usage: collect_results.py RESULTS_DIR [--out bench/results]
RESULTS_DIR is the unpacked results.tar.gz of a `device_run.sh` run; each file is written from
the parts that run produced (a part not run leaves its committed file as it was).
"""
import argparse
import copy
import glob
import json
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from parity_summary import newest_rows  # noqa: E402  (bench/gpu)

ROW = re.compile(r"^(\S+\.cu)\s+(\S+)\s+([\d.]+) s\s+reward ([-+][\d.]+)\s+(.*)$")
NEXT = re.compile(r"^\s+(\S+\.cu)\s+(\S+)\s+([\d.]+) s\s+\(next step after (\S+)\)$")
HACK = re.compile(r"^(\w+)\s+(\S+/\S+)\s+(\w+)\s+(\w+)\s+([-+][\d.]+)\s+(.*)$")
SERVED = re.compile(r"^(\S+/\S+)\s+(reference vs itself|example solution): (?:(\w+), )?"
                    r"speedup ([\d.]+)$")


def doctest_result(text):
    return [line for line in text.splitlines() if line.startswith("[doctest] ")
            and ("test cases" in line or "assertions" in line)]


def gpu_facts(folder):
    header, values = (folder / "gpu.txt").read_text().splitlines()[:2]
    fields = dict(zip([h.strip() for h in header.split(",")], [v.strip() for v in values.split(",")]))
    return {
        "gpu": fields.get("name", ""),
        "driver": fields.get("driver_version", ""),
        "date": (folder / "date.txt").read_text().strip(),
    }


def oracle_summary(folder):
    """Per task, the (source, case, output) comparisons test_kernels_gpu printed and the worst
    error it saw against the float64 oracle."""
    path = folder / "test_kernels_gpu.txt"
    if not path.exists():
        return {}
    tasks, total = {}, ""
    for line in path.read_text().splitlines():
        if line.startswith("checked "):
            total = line
        parts = line.split()
        if len(parts) >= 6 and "/" in parts[0][1:] and not parts[0].startswith("/") and parts[-2] == "|error|":
            entry = tasks.setdefault(parts[0], {"comparisons": 0, "max_abs_error": 0.0})
            entry["comparisons"] += 1
            entry["max_abs_error"] = max(entry["max_abs_error"], float(parts[-1]))
    return {"summary": total, "tasks": tasks}


def corpus(folder, facts):
    text = (folder / "test_gpu_corpus.txt").read_text()
    rows = []
    for line in text.splitlines():
        if match := ROW.match(line):
            kernel, status, seconds, reward, message = match.groups()
            rows.append({"kernel": kernel, "status": status, "seconds": float(seconds),
                         "reward": float(reward), "message": message.strip()})
        elif match := NEXT.match(line):
            kernel, status, seconds, after = match.groups()
            rows.append({"kernel": kernel, "status": status, "seconds": float(seconds),
                         "after": after, "recovery_step": True})
    served = {}
    for line in text.splitlines():
        if match := SERVED.match(line):
            task, what, status, speedup = match.groups()
            entry = served.setdefault(task, {})
            key = "reference_vs_itself" if what.startswith("reference") else "example_solution"
            entry[key] = {"status": status or "ok", "speedup": float(speedup)}
    suites = {}
    for name in ("test_kernels_gpu", "test_runner_device", "test_gpu_corpus", "test_hacks"):
        path = folder / f"{name}.txt"
        if path.exists():
            suites[name] = doctest_result(path.read_text())
    return {"suite": "GPU suites (CTest label gpu)", **facts,
            "command": "bench/gpu/device_run.sh tests (runs the .bundle/bin/ test binaries)",
            "results": suites,
            "expected_status": "first line of each tests/gpu/kernels/*.cu ('// expect: ...')",
            "rows": rows,
            "tasks_served_end_to_end": served,
            "tasks_check": tasks_check(folder),
            "references_against_oracles": oracle_summary(folder)}


def tasks_check(folder):
    """`crucible tasks check --all` on the GPU machine: per task, its check lines."""
    path = folder / "tasks_check.txt"
    if not path.exists():
        return None
    tasks, current = {}, None
    for line in path.read_text().splitlines():
        if re.match(r"^[a-z0-9_]+/[a-z0-9_]+$", line):
            current = tasks.setdefault(line, [])
        elif current is not None and line.startswith("  "):
            current.append(line.strip())
    summary = [line for line in path.read_text().splitlines()
               if "tasks passed" in line or line.startswith("tasks check exit")]
    return {"summary": summary, "tasks": tasks}


def hacks(folder, facts, eval_rows):
    rows = []
    for line in (folder / "test_hacks.txt").read_text().splitlines():
        match = HACK.match(line)
        if not match or match.group(1) == "hack":
            continue
        name, task, expected, status, reward, message = match.groups()
        rows.append({"hack": name, "task": task, "expected": expected, "status": status,
                     "reward": float(reward), "caught": status == expected and status != "ok"
                     and float(reward) <= 0, "message": message.strip()})
    # Legitimate kernels scored in the same session (the logged run): ok, with their speedups.
    legit = {}
    for row in eval_rows:
        name = row["sample_id"].split("#")[0]
        if row["meta"].get("expect") == "ok":
            entry = legit.setdefault(name, {"statuses": {}, "speedups": []})
            entry["statuses"][row["status"]] = entry["statuses"].get(row["status"], 0) + 1
            if row.get("speedup") is not None:
                entry["speedups"].append(round(row["speedup"], 4))
    return {"suite": "hack suite: examples/hacks/*.cu scored by a real server", **facts,
            "command": "bench/gpu/device_run.sh tests (runs .bundle/bin/test_hacks)",
            "result": doctest_result((folder / "test_hacks.txt").read_text()),
            "caught": sum(r["caught"] for r in rows), "hacks": len(rows), "rows": rows,
            "legitimate_kernels": legit}


def bench(folder, facts):
    runs, goals = {}, {}
    for path in sorted(folder.glob("gpu_bench_cap*.json")):
        data = json.loads(path.read_text())
        name = path.stem.removeprefix("gpu_bench_")
        runs[name] = data
        latency = data["step_latency_s"]
        recovery = max(r["next_step_over_typical_s"] for r in data["recovery"])
        goals[name] = {
            "step_latency_p50_s": {"new_source": latency["new_source"]["p50"],
                                   "episode_seed": latency["episode_seed"]["p50"],
                                   "goal": 0.3,
                                   "met": latency["episode_seed"]["p50"] <= 0.3},
            "speedup_cv": {"value": data["speedup_noise"]["cv"], "goal": 0.005,
                           "met": data["speedup_noise"]["cv"] <= 0.005},
            "recovery_over_typical_s": {"worst": recovery, "goal": 0.5, "met": recovery <= 0.5},
            "new_source_phases_ms_median": latency["new_source_phases_ms_median"],
        }
    return {"benchmark": "crucible-bench-gpu", **facts,
            "command": "bench/gpu/device_run.sh bench (crucible-bench-gpu --steps 10 "
                       "--time-cap-ms {1000,100,30})",
            "goals": goals, "runs": runs}


def replay(folder, facts, eval_rows):
    data = json.loads((folder / "replay.json").read_text())
    rescore = json.loads((folder / "rescore.json").read_text())
    examples = json.loads((folder / "eval_examples" / "summary.json").read_text())
    run = json.loads((folder / "eval_run" / "summary.json").read_text())
    return {"benchmark": "logged run, re-measured by crucible replay", **facts,
            "command": "bench/gpu/device_run.sh trajectory: crucible serve --time-cap-ms 250 "
                       "--log run.log; crucible eval samples.jsonl --server ... -j 1 (samples from "
                       "bench/gpu/trajectory_samples.py); crucible replay run.log --time-cap-ms 250 "
                       "-j 1; crucible replay run.log --rescore --reward '{\"preset\": \"kevin\"}'",
            "summary": data["summary"], "log": data["log"],
            "steps": data["steps"],
            "rescore_kevin_summary": rescore.get("summary"),
            "logged_run_eval": run.get("overall", run),
            "eval_of_examples": examples.get("overall", examples),
            "samples": [{"sample_id": r["sample_id"], "expect": r["meta"].get("expect"),
                         "status": r["status"], "speedup": r.get("speedup")} for r in eval_rows]}


def variants(evals, facts):
    """Design variants of references scored against the references themselves
    (bench/gpu/variants.py), from `evals`, (case seed, results.jsonl) pairs: per case, the
    variant's and the reference's CUPTI medians from the same interleaved run. Rows of an eval
    with another case seed (VARIANT_SEEDS) are keyed `<sample id>@seed<N>`, beside seed 1's."""
    rows = []
    for seed, path in evals:
        for line in path.read_text().splitlines():
            record = json.loads(line)
            timing = (record.get("result") or {}).get("timing") or {}
            key = record["sample_id"] + (f"@seed{seed}" if seed != 1 else "")
            rows.append({"sample_id": key, "seed": seed, "status": record.get("status"),
                         "cases": [{"case": c["case"], "variant_ns": c["candidate"]["median_ns"],
                                    "reference_ns": c["reference"]["median_ns"],
                                    "speedup": c["speedup"]} for c in timing.get("cases", [])]})
    return {"benchmark": "reference design variants, each scored against its task's reference",
            **facts, "command": "bench/gpu/device_run.sh variants "
                                "(bench/gpu/variants.py, then crucible eval)", "rows": rows}


def throughput(path, facts):
    """bench/gpu/throughput.py's figures (the training mix at 1, 8 and 64 in flight, and single
    correct rms_norm steps) with the goals of issue 19: >= 10 scored steps/s per GPU on the mix,
    a single step's p50 <= 0.3 s."""
    data = json.loads(path.read_text())
    rows = data.get("concurrency", [])
    best = max(rows, key=lambda r: r["scored_steps_per_s"], default=None)
    # The last server's single steps (the most runners per GPU when several were compared).
    single_step = (data.get("single_steps") or [data.get("single_step") or {}])[-1]
    single = single_step.get("latency")
    single_ok = bool(single) and single_step.get("statuses") == {"ok": single["count"]}
    goals = {
        "scored_steps_per_s": {"best": best and best["scored_steps_per_s"],
                               "at_in_flight": best and best["in_flight"], "goal": 10.0,
                               "met": bool(best) and best["scored_steps_per_s"] >= 10.0},
        "single_step_p50_s": {"value": single and round(single["p50_ms"] / 1000.0, 4),
                              "goal": 0.3,
                              "every_step_ok": single_ok,
                              "met": bool(single) and single_ok and single["p50_ms"] <= 300.0},
    }
    load = data.get("under_load")
    if load:
        alone = (load["alone"].get("speedup_spread") or {}).get("cv")
        loaded = (load["under_load"].get("speedup_spread") or {}).get("cv")
        goals["speedup_cv_under_load"] = {"alone": alone, "under_load": loaded, "goal": 0.005,
                                          "met": loaded is not None and loaded <= 0.005}
    return {**data, "benchmark": data.get("benchmark", "throughput"), **facts,
            "measured_at": data.get("date"), "gpu_seen_by_driver": data.get("gpu"),
            "command": "bench/gpu/device_run.sh throughput: " + data.get("command", ""),
            "goals": goals}


def multi_gpu(path, facts):
    """bench/gpu/multi_gpu.py's figures with the goals of issue 23: each two-GPU configuration at
    >= 1.9x the one-GPU steps/s, the same speedup on either GPU, and steady steps beside a hang
    or a crash on the other GPU as fast as alone."""
    data = json.loads(path.read_text())
    rows = (data.get("mix") or {}).get("configurations") or []
    goals = {"steps_per_s_over_one_gpu": {
        row["configuration"]: {"value": row.get("steps_per_s_over_one_gpu"), "goal": 1.9,
                               "met": (row.get("steps_per_s_over_one_gpu") or 0) >= 1.9}
        for row in rows[1:]}}
    rescore = data.get("rescore") or {}
    if "speedup_ratio_b_over_a" in rescore:
        goals["cross_gpu_speedup_ratio"] = {"value": rescore["speedup_ratio_b_over_a"],
                                            "cv_per_gpu": {
                                                gpu: (row.get("speedup_spread") or {}).get("cv")
                                                for gpu, row in rescore["per_gpu"].items()}}
    faults = data.get("faults")
    if isinstance(faults, dict):
        goals["steady_p50_over_alone"] = {name: faults[name].get("p50_over_alone")
                                          for name in ("beside_hang", "beside_crash")
                                          if name in faults}
    return {**data, **facts, "measured_at": data.get("date"),
            "gpu_seen_by_driver": data.get("gpu"),
            "command": "bench/gpu/device_run.sh multigpu: " + data.get("command", ""),
            "goals": goals}


def model_check(folder, facts):
    """`device_run.sh model`: per model, every sample's op status and speedup and what the model
    check measured (step times, step speedup and its interval, the op's share and in-place
    speedup, hidden states, tokens), from the eval records; plus test_model_gpu's result."""
    models = {}
    for path in sorted(folder.glob("model_*.jsonl")):
        name = path.stem[len("model_"):]
        rows = []
        for line in path.read_text().splitlines():
            record = json.loads(line)
            check = record.get("model") or {}
            row = {"sample": record["sample_id"], "status": record["status"],
                   "op_speedup_alone": record.get("speedup")}
            if "error" in check:
                row["model_check_error"] = check["error"]
            else:
                row.update({key: check.get(key) for key in (
                    "variables", "calls", "reference_step_ns", "candidate_step_ns",
                    "step_speedup", "step_speedup_ci95", "samples", "op_share", "op_speedup",
                    "hidden_state", "launches_per_step", "wall_ms")})
                row["sites"] = check.get("sites")
                tokens = check.get("tokens")
                if tokens:
                    row["tokens"] = {key: tokens.get(key) for key in (
                        "generated", "agreement", "first_divergence")}
                    row["tokens"]["prompts"] = len(tokens.get("prompts", []))
            rows.append(row)
        models[name] = rows
    out = {"benchmark": "model check: task references and candidates inside a model's decode or prefill "
                        "step (docs/models.md)", **facts,
           "command": "bench/gpu/device_run.sh model (crucible eval SAMPLES --model NAME -j 1 "
                      "--time-cap-ms 200 over each task's example solution and reference)",
           "models": models}
    gpu_test = folder / "test_model_gpu.txt"
    if gpu_test.exists():
        text = gpu_test.read_text()
        out["test_model_gpu"] = {"result": doctest_result(text),
                                 "messages": [line.strip() for line in text.splitlines()
                                              if "MESSAGE" in line or line.startswith("  ")
                                              and ("us, speedup" in line or "share" in line
                                                   or "tokens equal" in line)]}
    return out


def merge_keyed_rows(previous, rows, key, facts, keep=lambda row: True):
    """Rows of a run over part of a table (a filtered hack suite, some tasks' variants) merged
    into the committed rows: a row the run measured replaces the committed one with its key, the
    committed rows it did not measure stay (those `keep` accepts), and every row says the date
    of the run that measured it."""
    measured = {row[key] for row in rows}
    kept = [{"date": previous.get("date"), **row} for row in previous.get("rows", [])
            if row[key] not in measured and keep(row)]
    return kept + [{"date": facts["date"], **row} for row in rows]


def merge_run(previous, document, key, facts, keep=lambda row: True):
    """`document` (one run's table) with the rows of `previous` (the committed table) it did not
    measure, and `runs`: this run, then the earlier runs whose rows are still in the table."""
    merged = dict(document)
    merged["rows"] = merge_keyed_rows(previous, document["rows"], key, facts, keep)
    earlier = previous.get("runs") or [{"date": previous.get("date"),
                                        "command": previous.get("command")}]
    dates = {row["date"] for row in merged["rows"]}
    merged["runs"] = ([{"date": facts["date"], "command": document.get("command"),
                        key + "s": sorted({row[key] for row in document["rows"]})}]
                      + [run for run in earlier if run.get("date") in dates
                         and run.get("date") != facts["date"]])
    return merged


def merge_anchor_rows(previous, rows, facts):
    """Rows of a parity run over some anchors only (parity.py --anchors) merged into the committed
    rows of the same cases: those anchors' times, errors and kernel counts replace the earlier
    ones, the reference's times of that run go beside them (`anchor_runs`), and every library's
    ratio stays the one measured in its own run beside the reference (`reference_over`); the
    row's library is the one the reference is furthest behind."""
    earlier = {(row["task"], row["case"]): row for row in previous}
    merged = []
    for row in rows:
        old = earlier.get((row["task"], row["case"]))
        if "anchors_only" not in row or old is None:
            merged.append(row)
            continue
        new = copy.deepcopy(old)
        if "reference_over" not in new and new.get("reference_over_library"):
            new["reference_over"] = {new["library"]: new["reference_over_library"]}
        for field in ("kernels_ns", "kernel_max_abs_error", "kernel_errors", "kernels_per_call",
                      "reference_over", "spans_ns", "reference_over_span"):
            if row.get(field):
                new.setdefault(field, {}).update(row[field])
        for name in row.get("kernels_ns", {}):  # an anchor that runs now has no earlier error
            new.get("kernel_errors", {}).pop(name, None)
        if new.get("kernel_errors") == {}:
            del new["kernel_errors"]
        runs = [run for run in new.get("anchor_runs", [])
                if run["anchors"] != row["anchors_only"]]
        runs.append({"date": facts["date"], "anchors": row["anchors_only"],
                     **{k: row[k] for k in ("reference_ns", "harness_reference_ns",
                                            "harness_reference_over_library") if k in row}})
        new["anchor_runs"] = runs
        if new.get("reference_over"):
            worst = max(new["reference_over"], key=new["reference_over"].get)
            new["library"] = worst
            new["reference_over_library"] = new["reference_over"][worst]
            new["library_ns"] = (new.get("kernels_ns", {}).get(worst)
                                 or {"eager": new.get("eager_ns"),
                                     "torch.compile": new.get("compile_ns")}.get(worst))
        merged.append(new)
    return merged


def committed_parity_rows(out):
    """Every task's committed parity rows, each task's from the newest table that measured it
    (h200_parity*.json): a run over some anchors adds to a task's rows wherever they live."""
    chosen = newest_rows(sorted(glob.glob(str(out / "h200_parity*.json"))))
    return [row for _, _, rows in chosen.values() for row in rows]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=pathlib.Path)
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("bench/results"))
    args = parser.parse_args(argv)
    facts = gpu_facts(args.results)
    folder = args.results
    eval_path = folder / "eval_run" / "results.jsonl"
    eval_rows = ([json.loads(line) for line in eval_path.read_text().splitlines()]
                 if eval_path.exists() else [])
    outputs = {}

    def committed(name):
        path = args.out / name
        return json.loads(path.read_text()) if path.exists() else None

    if (folder / "test_gpu_corpus.txt").exists():
        outputs["h200_gpu_suite.json"] = corpus(folder, facts)
    elif (folder / "test_kernels_gpu.txt").exists() and committed("h200_gpu_suite.json"):
        # test_kernels_gpu alone (CRUCIBLE_GPU_TASKS narrows it to some tasks): its tasks'
        # oracle comparisons go into the committed suite's table, the rest stays.
        suite = committed("h200_gpu_suite.json")
        oracles = oracle_summary(folder)
        table = suite.get("references_against_oracles") or {}
        tasks = dict(table.get("tasks") or {})
        tasks.update({task: {**entry, "date": facts["date"]}
                      for task, entry in oracles.get("tasks", {}).items()})
        suite["references_against_oracles"] = {
            **table, "tasks": tasks,
            "runs": (table.get("runs") or []) + [{"date": facts["date"],
                                                  "summary": oracles.get("summary", ""),
                                                  "tasks": sorted(oracles.get("tasks", {}))}]}
        outputs["h200_gpu_suite.json"] = suite
    if (folder / "test_hacks.txt").exists():
        run = hacks(folder, facts, eval_rows)
        previous = committed("h200_hack_suite.json")
        if previous:
            # A run over some hacks (CRUCIBLE_HACKS) replaces their rows; a hack whose file is
            # gone leaves the table.
            hack_files = pathlib.Path(__file__).resolve().parents[2] / "examples" / "hacks"
            run = merge_run(previous, run, "hack", facts,
                            keep=lambda row: (hack_files / (row["hack"] + ".cu")).exists())
            run["caught"] = sum(row["caught"] for row in run["rows"])
            run["hacks"] = len(run["rows"])
            if not run["legitimate_kernels"]:
                run["legitimate_kernels"] = previous.get("legitimate_kernels", {})
        outputs["h200_hack_suite.json"] = run
    if list(folder.glob("gpu_bench_cap*.json")):
        outputs["h200_gpu_bench.json"] = bench(folder, facts)
    if (folder / "replay.json").exists():
        outputs["h200_replay.json"] = replay(folder, facts, eval_rows)
    seed_one = folder / "variants_eval" / "results.jsonl"
    variant_evals = [(1, seed_one)] if seed_one.exists() else []
    variant_evals += sorted((int(path.parent.name.removeprefix("variants_eval_seed")), path)
                            for path in folder.glob("variants_eval_seed*/results.jsonl"))
    if variant_evals:
        run = variants(variant_evals, facts)
        previous = committed("h200_reference_variants.json")
        # A run over some tasks' variants (VARIANT_TASKS) replaces their rows only.
        outputs["h200_reference_variants.json"] = (
            merge_run(previous, run, "sample_id", facts) if previous else run)
    if (folder / "seed_spread.json").exists():
        outputs["h200_seed_spread.json"] = {
            "benchmark": "every reference on several draws of its visible cases "
                         "(bench/gpu/seed_spread.py): its time's spread across seeds against "
                         "the two timings of one run, and its status per seed",
            **facts, "command": "bench/gpu/device_run.sh seeds",
            **json.loads((folder / "seed_spread.json").read_text())}
    if (folder / "sampling_steps.json").exists():
        outputs["h200_sampling_steps.json"] = {
            "benchmark": "llm/top_k_top_p_sampling_from_logits reference, time per step "
                         "(clock64 stamps in an instrumented copy, bench/gpu/sampling_steps.py)",
            **facts, "command": "bench/gpu/device_run.sh steps",
            **json.loads((folder / "sampling_steps.json").read_text())}
    if (folder / "sampling_state.json").exists():
        outputs["h200_sampling_state.json"] = {
            "benchmark": "llm/top_k_top_p_sampling_from_logits forms, each row's state after every "
                         "step on the GPU (bench/gpu/sampling_state.py --gpu-only; compare with "
                         "--compare bench/results/sampling_state_host.json)",
            **facts, "command": "bench/gpu/device_run.sh state",
            "runs": json.loads((folder / "sampling_state.json").read_text())}
    if (folder / "parity.json").exists():
        parity = {**json.loads((folder / "parity.json").read_text()), **facts}
        # A run over some tasks (or some of their cases) replaces those rows and keeps the others'.
        committed = args.out / "h200_parity.json"
        measured = {row["task"] for row in parity["rows"]}
        measured_cases = {(row["task"], row["case"]) for row in parity["rows"]}
        parity["runs"] = [{"date": facts["date"], "tasks": sorted(measured),
                           **{k: parity[k] for k in ("command", "libraries") if k in parity}}]
        if committed.exists():
            previous = json.loads(committed.read_text())
            anchors = next((row["anchors_only"] for row in parity["rows"]
                            if "anchors_only" in row), None)
            if anchors is not None:
                parity["rows"] = merge_anchor_rows(committed_parity_rows(args.out),
                                                   parity["rows"], facts)
            kept = [row for row in previous["rows"]
                    if (row["task"], row["case"]) not in measured_cases]
            partly = sorted({row["task"] for row in kept} & measured)
            if anchors is not None:
                # Only some anchors were timed: every row keeps its earlier run for the rest.
                parity["runs"][0]["anchors"] = anchors
                partly = sorted(measured)
            elif partly:
                parity["runs"][0]["only_cases"] = sorted(
                    case for task, case in measured_cases if task in partly)
            parity["rows"] = sorted(kept + parity["rows"], key=lambda r: r["task"])
            earlier = previous.get("runs") or [{"date": previous.get("date"),
                                                "tasks": sorted({r["task"] for r in
                                                                 previous["rows"]})}]
            for run in earlier:
                # A task measured here in part keeps its earlier run for its other cases.
                tasks = [t for t in run["tasks"] if t not in measured or t in partly]
                if tasks:
                    parity["runs"].insert(0, {**run, "tasks": tasks})
        outputs["h200_parity.json"] = parity
    if (folder / "throughput.json").exists():
        outputs["h200_throughput.json"] = throughput(folder / "throughput.json", facts)
    if (folder / "ncu_compare.json").exists():
        outputs["h200_cupti_vs_ncu.json"] = {
            **json.loads((folder / "ncu_compare.json").read_text()), **facts,
            "command": "bench/gpu/device_run.sh throughput ncu (THROUGHPUT_UNDER_LOAD=1): "
                       "crucible-kernel-timing --threads 128 --reps 200, the same under ncu "
                       "--clock-control none --metrics gpu__time_duration.sum, "
                       "bench/gpu/compare_ncu.py with the throughput run's single steps"}
    if (folder / "fault_latency.json").exists():
        outputs["h200_fault_latency.json"] = {
            **json.loads((folder / "fault_latency.json").read_text()), **facts,
            "command": "bench/gpu/device_run.sh faults (bench/gpu/fault_latency.py)"}
    if (folder / "multi_gpu.json").exists():
        figures = multi_gpu(folder / "multi_gpu.json", facts)
        name = "h200x2_multi_gpu.json" if len(figures.get("gpus", [])) == 2 else \
            "h200_multi_gpu_baseline.json"
        outputs[name] = figures
    if list(folder.glob("model_*.jsonl")):
        outputs["h200_model_check.json"] = model_check(folder, facts)
    if (folder / "export_op.json").exists():
        outputs["h200_export_op.json"] = {
            **json.loads((folder / "export_op.json").read_text()), **facts,
            "command": "bench/gpu/device_run.sh exportop (bench/gpu/export_op_check.py)"}
    for name, value in outputs.items():
        (args.out / name).write_text(json.dumps(value, indent=2) + "\n")
        print(f"wrote {args.out / name}")


if __name__ == "__main__":
    main()
