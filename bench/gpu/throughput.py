#!/usr/bin/env python3
"""Throughput of `crucible serve` on the training mix (bench/gpu/training_mix.py): steps/s and
latency per status at 1, 8 and 64 requests in flight, and the single-step latency of a correct
llm/rms_norm step (bench/README.md, issue 19).

For each --runners value (runner processes per GPU, `crucible serve --runners-per-gpu`) the
script starts one server (its own compile cache, so nothing is a hit from an earlier run) and
scores the mix through `crucible eval --server ENDPOINT -j N` once per concurrency, each time
with sources of its own (training_mix --tag), so no level hits another's compile cache.
Latency is each request's round trip as the client saw it (eval's `wall_ms`: queueing in the
server included); steps/s is samples over the wall time of the eval. Then the single-step
figure: one request in flight, each a new source of tasks/llm/rms_norm/solution.cu and a new
seed (a separate `crucible eval --seed` per step), p50 over --single-steps. With --under-load,
the single steps run twice more on the last server: alone, and with the mix scored at 8 in
flight beside them; the speedup's spread (CV over the steps) alone and under load says whether
other jobs reach into a timing window (they must not: each has the GPU to itself).

Without a GPU every sample that compiles is answered infra_error at the GPU stage; the driver,
the compile, launch-plan checks and the figures still run (a smoke test: --count 24
--concurrency 1,8 --single-steps 3).

Usage: throughput.py CRUCIBLE [--count N] [--concurrency 1,8,64] [--runners 1,4]
                     [--single-steps N] [--under-load] [--json FILE] [--work DIR]
                     [--serve-args '--time-cap-ms 100 ...']
(run from the repository root; CRUCIBLE is the crucible binary. CRUCIBLE_LIBRARY_PATH, when
set, becomes LD_LIBRARY_PATH for the crucible processes alone, as in bench/gpu/parity.py and
bench/gpu/device_run.sh: Python keeps the system's libraries.)
"""
import argparse
import datetime
import json
import os
import pathlib
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import training_mix  # noqa: E402

SINGLE_TASK = "llm/rms_norm"


def crucible_env():
    env = dict(os.environ)
    if "CRUCIBLE_LIBRARY_PATH" in env:
        env["LD_LIBRARY_PATH"] = env["CRUCIBLE_LIBRARY_PATH"]
    return env


def percentile(values, q):
    """Linear-interpolated percentile (q in [0, 100]) of a non-empty list."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def latency(values_ms):
    if not values_ms:
        return None
    return {"count": len(values_ms), "p50_ms": round(percentile(values_ms, 50), 2),
            "p95_ms": round(percentile(values_ms, 95), 2),
            "mean_ms": round(statistics.fmean(values_ms), 2),
            "max_ms": round(max(values_ms), 2)}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gpu_name():
    if not shutil.which("nvidia-smi"):
        return "none (no nvidia-smi)"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
        return out.splitlines()[0].strip() if out else "none"
    except (OSError, subprocess.SubprocessError):
        return "none (nvidia-smi failed)"


class Server:
    """A `crucible serve` child process on a loopback port."""

    def __init__(self, crucible, work, extra):
        self.endpoint = f"tcp://127.0.0.1:{free_port()}"
        work.mkdir(parents=True, exist_ok=True)
        self.log_path = work / "serve.txt"
        self.command = [crucible, "serve", "--bind", self.endpoint, "--log",
                        str(work / "run.log"), "--compile-cache", str(work / "compile-cache"),
                        *extra]
        self.process = None

    def __enter__(self):
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen(self.command, stdout=self.log, stderr=subprocess.STDOUT,
                                        env=crucible_env())
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"crucible serve exited with status {self.process.returncode}:"
                                   f"\n{self.log_path.read_text()[-2000:]}")
            if "listening on" in self.log_path.read_text():
                return self
            time.sleep(0.1)
        raise RuntimeError("crucible serve did not start listening within 60 s")

    def __exit__(self, *exc):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


def run_eval(crucible, samples_path, endpoint, jobs, out, seed, timeout_s):
    """Scores a JSONL file through the server; returns (records, wall seconds)."""
    command = [crucible, "eval", str(samples_path), "--server", endpoint, "-j", str(jobs),
               "-o", str(out), "--seed", str(seed), "--timeout", str(timeout_s)]
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=crucible_env())
    wall_s = time.monotonic() - start
    # 4: every sample was an infra_error (no GPU); the records still say so, per sample.
    if done.returncode not in (0, 4):
        raise RuntimeError(f"{shlex.join(command)} exited with status {done.returncode}:\n"
                           f"{done.stderr[-2000:]}")
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    return records, wall_s


def stage_medians(records):
    """Median milliseconds of each server stage over the records that report it."""
    stages = {}
    for record in records:
        for name, ms in ((record.get("result") or {}).get("stages") or {}).items():
            if isinstance(ms, (int, float)):
                stages.setdefault(name, []).append(ms)
    return {name: round(statistics.median(values), 2) for name, values in sorted(stages.items())}


def phase_sums(record):
    """One record's runner phases, per case summed into correctness, timing set-up and timing
    (None when the record was not timed)."""
    device = ((record.get("result") or {}).get("timing") or {}).get("device") or {}
    per_case = device.get("phases_ms") or {}
    if not per_case:
        return None
    sums = {}
    for name, ms in per_case.items():
        if not isinstance(ms, (int, float)):
            continue
        if name.startswith("timing setup "):
            key = "timing setup"
        elif name.startswith("timing "):
            key = "timing"
        elif name.startswith("correctness "):
            key = "correctness"
        else:
            key = name
        sums[key] = sums.get(key, 0.0) + ms
    if isinstance(device.get("gate_wait_s"), (int, float)):
        sums["gate wait (server)"] = device["gate_wait_s"] * 1000.0
    return sums


def runner_phases(records):
    """Median milliseconds of the runner's phases over the timed records, per case summed into
    correctness, timing set-up and timing, with the waits for the GPU gate (the server's, from
    taking the gate for the job to its last grant) beside them."""
    phases = {}
    for record in records:
        for key, ms in (phase_sums(record) or {}).items():
            phases.setdefault(key, []).append(ms)
    return {name: round(statistics.median(v), 2) for name, v in sorted(phases.items())}


def timed_by_task(records):
    """Per task, over its timed records: how many, the median and total milliseconds of
    correctness and timing (the total timing is what the GPU spent alone on the task), and over
    its timed cases the median number of timed calls and why the cases stopped."""
    rows = {}
    for record in records:
        sums = phase_sums(record)
        if sums is None:
            continue
        row = rows.setdefault(record.get("task", "?"),
                              {"timing": [], "correctness": [], "calls": [], "stopped": {}})
        row["timing"].append(sums.get("timing", 0.0) + sums.get("timing setup", 0.0))
        row["correctness"].append(sums.get("correctness", 0.0))
        for case in ((record.get("result") or {}).get("timing") or {}).get("cases") or []:
            if isinstance(case.get("calls"), int):
                row["calls"].append(case["calls"])
            reason = case.get("stopped", "?")
            row["stopped"][reason] = row["stopped"].get(reason, 0) + 1
    return {task: {"steps": len(v["timing"]),
                   "timing_ms_median": round(statistics.median(v["timing"]), 1),
                   "timing_ms_total": round(sum(v["timing"]), 1),
                   "correctness_ms_median": round(statistics.median(v["correctness"]), 1),
                   "calls_per_case_median": statistics.median(v["calls"]) if v["calls"] else None,
                   "cases_stopped": dict(sorted(v["stopped"].items()))}
            for task, v in sorted(rows.items())}


def summarize(records, wall_s, jobs):
    by_status, by_kind, confusion = {}, {}, {}
    for record in records:
        by_status.setdefault(record["status"], []).append(record["wall_ms"])
        meta = record.get("meta") or {}
        by_kind.setdefault(meta.get("kind", "?"), []).append(record["wall_ms"])
        key = f"{meta.get('expect', '?')}->{record['status']}"
        confusion[key] = confusion.get(key, 0) + 1
    scored = sum(1 for r in records if r["status"] != "infra_error")
    infra = {}
    for record in records:
        if record["status"] == "infra_error":
            reason = (record.get("message") or "")[:120]
            infra[reason] = infra.get(reason, 0) + 1
    return {
        "in_flight": jobs,
        "samples": len(records),
        "wall_s": round(wall_s, 3),
        "steps_per_s": round(len(records) / wall_s, 3),
        "scored_steps_per_s": round(scored / wall_s, 3),
        "latency_all": latency([r["wall_ms"] for r in records]),
        "latency_by_status": {s: latency(v) for s, v in sorted(by_status.items())},
        "latency_by_kind": {k: latency(v) for k, v in sorted(by_kind.items())},
        "expect_to_status": dict(sorted(confusion.items())),
        "infra_error_reasons": infra,
        "stage_ms_median": stage_medians(records),
        "runner_phase_ms_median": runner_phases(records),
        "timed_steps_by_task": timed_by_task(records),
    }


def speedup_spread(speedups):
    """Mean, CV and range of the steps' speedups (None where fewer than two)."""
    values = [s for s in speedups if isinstance(s, (int, float))]
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    return {"steps": len(values), "mean": round(mean, 5),
            "cv": round(statistics.stdev(values) / mean, 5) if mean > 0 else None,
            "min": round(min(values), 5), "max": round(max(values), 5)}


def case_medians(records):
    """Per timed case, each step's CUPTI median of the reference and of the candidate (ns): what
    compare_ncu.py holds against ncu's time of the same kernel, alone and under load."""
    out = {}
    for record in records:
        for case in ((record.get("result") or {}).get("timing") or {}).get("cases") or []:
            row = out.setdefault(case["case"], {"reference": [], "candidate": []})
            for side in ("reference", "candidate"):
                row[side].append((case.get(side) or {}).get("median_ns"))
    return out


def single_steps(crucible, endpoint, work, steps, seed, timeout_s):
    """One correct rms_norm step at a time, each a new source and a new seed."""
    work.mkdir(parents=True, exist_ok=True)
    root = pathlib.Path.cwd()
    text = (root / "tasks" / SINGLE_TASK / "solution.cu").read_text()
    records = []
    for i in range(steps):
        sample = {"task": SINGLE_TASK, "sample_id": f"single/{i}",
                  "source": text.rstrip("\n") + f"\n// single step {seed}-{i}\n",
                  "meta": {"expect": "ok", "kind": "correct",
                           "source_of_sample": f"tasks/{SINGLE_TASK}/solution.cu"}}
        path = work / f"single_{i}.jsonl"
        path.write_text(json.dumps(sample) + "\n")
        got, _ = run_eval(crucible, path, endpoint, 1, work / f"single_{i}", seed + 1 + i,
                          timeout_s)
        records.extend(got)
    statuses = {}
    for record in records:
        statuses[record["status"]] = statuses.get(record["status"], 0) + 1
    return {"task": SINGLE_TASK, "source": f"tasks/{SINGLE_TASK}/solution.cu, a new trailing "
            "comment each step", "steps": len(records), "statuses": statuses,
            "latency": latency([r["wall_ms"] for r in records]),
            "wall_ms": [round(r["wall_ms"], 2) for r in records],
            "speedups": [r.get("speedup") for r in records],
            "speedup_spread": speedup_spread([r.get("speedup") for r in records]),
            "case_medians_ns": case_medians(records),
            "stage_ms_median": stage_medians(records),
            "runner_phase_ms_median": runner_phases(records)}


def under_load(crucible, server, work, args, tasks):
    """The single steps alone, then again while the mix runs at 8 in flight beside them."""
    alone = single_steps(crucible, server.endpoint, work / "alone", args.single_steps, args.seed,
                         args.timeout)
    samples = training_mix.generate(pathlib.Path.cwd(), max(args.count, 200), args.seed, tasks,
                                    tag="load")
    path = work / "mix_load.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in samples))
    load = {}

    def background():
        try:
            load["records"], load["wall_s"] = run_eval(crucible, path, server.endpoint, 8,
                                                       work / "eval_load", 1, args.timeout)
        except RuntimeError as error:  # stopped once the steps are done, or failed
            load["error"] = str(error)[:300]

    thread = threading.Thread(target=background, daemon=True)
    thread.start()
    time.sleep(5)  # the load under way before the first step
    loaded = single_steps(crucible, server.endpoint, work / "loaded", args.single_steps,
                          args.seed + 1000, args.timeout)
    still_running = thread.is_alive()
    thread.join()
    row = {"alone": alone, "under_load": loaded,
           "load": {"in_flight": 8, "samples": len(samples),
                    "ran_throughout": still_running or "records" in load,
                    "steps_per_s": round(len(load["records"]) / load["wall_s"], 3)
                    if "records" in load else None, "error": load.get("error")}}
    return row


def finish_report(report, work, json_path):
    """Adds the servers' first warnings and errors (their serve.txt logs under `work`) to the
    report and writes it to `json_path`, when given: what was measured is kept even when a run
    stops early."""
    report["serve_warnings"] = [line for log in sorted(work.rglob("serve.txt"))
                                for line in log.read_text().splitlines()
                                if " warn " in line or " error " in line][:20]
    if json_path:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {json_path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("crucible", help="the crucible binary")
    parser.add_argument("--count", type=int, default=200, help="mix samples per concurrency")
    parser.add_argument("--seed", type=int, default=2026, help="mix seed (training_mix.py)")
    parser.add_argument("--tasks", default="", help="mix tasks (training_mix.py --tasks)")
    parser.add_argument("--concurrency", default="1,8,64", help="requests in flight, in turn")
    parser.add_argument("--single-steps", type=int, default=20,
                        help="single correct rms_norm steps (0: none)")
    parser.add_argument("--serve-args", default="", help="more arguments for crucible serve")
    parser.add_argument("--runners", default="",
                        help="runner processes per GPU to compare, one server each (e.g. 1,4; "
                        "default: the server's own choice)")
    parser.add_argument("--under-load", action="store_true",
                        help="the single steps alone and with the mix at 8 in flight beside them")
    parser.add_argument("--timeout", type=int, default=1800, help="eval's per-request timeout, s")
    parser.add_argument("--work", type=pathlib.Path, help="folder for samples, eval outputs and "
                        "the server's log (default: a temporary one, removed)")
    parser.add_argument("--json", type=pathlib.Path, help="write the figures here")
    args = parser.parse_args()
    levels = [int(x) for x in args.concurrency.split(",") if x]
    if not levels or min(levels) < 1 or max(levels) > 256:
        parser.error("--concurrency: whole numbers from 1 to 256")
    if args.tasks == "all":
        tasks = sorted(str(p.parent.relative_to(pathlib.Path("tasks")))
                       for p in pathlib.Path("tasks").glob("*/*/solution.cu"))
    else:
        tasks = [t for t in args.tasks.split(",") if t] or training_mix.DEFAULT_TASKS
    crucible = str(pathlib.Path(args.crucible).resolve())
    temporary = None
    if args.work:
        work = args.work.resolve()
        work.mkdir(parents=True, exist_ok=True)
    else:
        temporary = tempfile.TemporaryDirectory(prefix="crucible-throughput-")
        work = pathlib.Path(temporary.name)
    extra = shlex.split(args.serve_args)
    # A SIGTERM (the `timeout` of device_run.sh) unwinds like an error: the eval in flight and
    # the server are stopped and what was measured is still written.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    report = {
        "benchmark": "crucible serve throughput on the training mix (bench/gpu/throughput.py)",
        "gpu": gpu_name(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": shlex.join([sys.argv[0], *sys.argv[1:]]),
        "mix": {"generator": "bench/gpu/training_mix.py", "count": args.count,
                "seed": args.seed, "tasks": tasks,
                "shares": {k: share for k, (share, _) in training_mix.MIX.items()},
                "class_counts": training_mix.class_counts(args.count, training_mix.MIX),
                "sources": "distinct in every sample and across concurrency levels "
                           "(--tag j<N>)"},
        "concurrency": [],
        "complete": False,
    }
    runner_counts = [int(x) for x in args.runners.split(",") if x] or [None]
    try:
        for runners in runner_counts:
            server_work = work if runners is None else work / f"runners{runners}"
            server_extra = extra if runners is None else [*extra, "--runners-per-gpu",
                                                          str(runners)]
            with Server(crucible, server_work, server_extra) as server:
                report.setdefault("serve_commands", []).append(shlex.join(server.command))
                for jobs in levels:
                    samples = training_mix.generate(pathlib.Path.cwd(), args.count, args.seed,
                                                    tasks, tag=f"j{jobs}r{runners}")
                    path = server_work / f"mix_j{jobs}.jsonl"
                    path.write_text("".join(json.dumps(s) + "\n" for s in samples))
                    records, wall_s = run_eval(crucible, path, server.endpoint, jobs,
                                               server_work / f"eval_j{jobs}", 1, args.timeout)
                    row = summarize(records, wall_s, jobs)
                    row["runners_per_gpu"] = runners
                    report["concurrency"].append(row)
                    statuses = {s: v["count"] for s, v in row["latency_by_status"].items()}
                    print(f"runners {runners or 'default'}, {jobs:3d} in flight: "
                          f"{row['steps_per_s']:7.2f} steps/s "
                          f"({row['scored_steps_per_s']:.2f} scored), p50 "
                          f"{row['latency_all']['p50_ms']:.0f} ms, p95 "
                          f"{row['latency_all']['p95_ms']:.0f} ms, {statuses}", flush=True)
                    for status, figures in row["latency_by_status"].items():
                        print(f"      {status:15s} {figures['count']:4d}  p50 "
                              f"{figures['p50_ms']:9.1f} ms  p95 {figures['p95_ms']:9.1f} ms")
                if args.single_steps > 0:
                    single = single_steps(crucible, server.endpoint, server_work / "single",
                                          args.single_steps, args.seed, args.timeout)
                    single["runners_per_gpu"] = runners
                    report.setdefault("single_steps", []).append(single)
                    lat = single["latency"]
                    print(f"runners {runners or 'default'}: single {SINGLE_TASK} step (new "
                          f"source, new seed): p50 {lat['p50_ms']:.1f} ms, p95 "
                          f"{lat['p95_ms']:.1f} ms over {single['steps']} steps, "
                          f"{single['statuses']}; speedup spread {single['speedup_spread']}; "
                          f"stages (median ms) {single['stage_ms_median']}", flush=True)
                if args.under_load and args.single_steps > 1 and runners == runner_counts[-1]:
                    row = under_load(crucible, server, server_work / "load", args, tasks)
                    row["runners_per_gpu"] = runners
                    report["under_load"] = row
                    print(f"speedup spread alone {row['alone']['speedup_spread']}, under load "
                          f"{row['under_load']['speedup_spread']}; load {row['load']}",
                          flush=True)
        report["complete"] = True
    finally:
        finish_report(report, work, args.json)
        if temporary:
            temporary.cleanup()


if __name__ == "__main__":
    main()
