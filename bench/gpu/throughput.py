#!/usr/bin/env python3
"""Throughput of `crucible serve` on the training mix (bench/gpu/training_mix.py): steps/s and
latency per status at 1, 8 and 64 requests in flight, and the single-step latency of a correct
llm/rms_norm step (bench/README.md, issue 19).

The script starts one server (its own compile cache, so nothing is a hit from an earlier run)
and scores the mix through `crucible eval --server ENDPOINT -j N` once per concurrency, each
time with sources of its own (training_mix --tag), so no level hits another's compile cache.
Latency is each request's round trip as the client saw it (eval's `wall_ms`: queueing in the
server included); steps/s is samples over the wall time of the eval. Then the single-step
figure: one request in flight, each a new source of tasks/llm/rms_norm/solution.cu and a new
seed (a separate `crucible eval --seed` per step), p50 over --single-steps.

Without a GPU every sample that compiles is answered infra_error at the GPU stage; the driver,
the compile, launch-plan checks and the figures still run (a smoke test: --count 24
--concurrency 1,8 --single-steps 3).

Usage: throughput.py CRUCIBLE [--count N] [--concurrency 1,8,64] [--single-steps N]
                     [--json FILE] [--work DIR] [--serve-args '--time-cap-ms 100 ...']
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
    }


def single_steps(crucible, endpoint, work, steps, seed, timeout_s):
    """One correct rms_norm step at a time, each a new source and a new seed."""
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
            "stage_ms_median": stage_medians(records)}


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
    try:
        with Server(crucible, work, extra) as server:
            report["serve_command"] = shlex.join(server.command)
            for jobs in levels:
                samples = training_mix.generate(pathlib.Path.cwd(), args.count, args.seed, tasks,
                                                tag=f"j{jobs}")
                path = work / f"mix_j{jobs}.jsonl"
                path.write_text("".join(json.dumps(s) + "\n" for s in samples))
                records, wall_s = run_eval(crucible, path, server.endpoint, jobs,
                                           work / f"eval_j{jobs}", 1, args.timeout)
                row = summarize(records, wall_s, jobs)
                report["concurrency"].append(row)
                statuses = {s: v["count"] for s, v in row["latency_by_status"].items()}
                print(f"{jobs:3d} in flight: {row['steps_per_s']:7.2f} steps/s "
                      f"({row['scored_steps_per_s']:.2f} scored), p50 "
                      f"{row['latency_all']['p50_ms']:.0f} ms, p95 "
                      f"{row['latency_all']['p95_ms']:.0f} ms, {statuses}", flush=True)
                for status, figures in row["latency_by_status"].items():
                    print(f"      {status:15s} {figures['count']:4d}  p50 "
                          f"{figures['p50_ms']:9.1f} ms  p95 {figures['p95_ms']:9.1f} ms")
            if args.single_steps > 0:
                single = single_steps(crucible, server.endpoint, work, args.single_steps,
                                      args.seed, args.timeout)
                report["single_step"] = single
                lat = single["latency"]
                print(f"single {SINGLE_TASK} step (new source, new seed): p50 "
                      f"{lat['p50_ms']:.1f} ms, p95 {lat['p95_ms']:.1f} ms over {single['steps']}"
                      f" steps, {single['statuses']}; stages (median ms) "
                      f"{single['stage_ms_median']}")
        report["complete"] = True
    finally:
        if (work / "serve.txt").exists():
            report["serve_warnings"] = [line for line in
                                        (work / "serve.txt").read_text().splitlines()
                                        if " warn " in line or " error " in line][:20]
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(report, indent=2) + "\n")
            print(f"wrote {args.json}")
        if temporary:
            temporary.cleanup()


if __name__ == "__main__":
    main()
