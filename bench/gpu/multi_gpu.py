#!/usr/bin/env python3
"""The training mix on two GPUs of one machine: one `crucible serve` driving both, and two servers
(one per GPU) behind `crucible_client.Pool`, each against one server on the first GPU alone,
measured in the same run (docs/scale-out.md, issue 23).

Four parts, in this order:
- `mix`: the training mix (bench/gpu/training_mix.py) scored at --in-flight requests through
  (1) one server on the first GPU (`--gpus A`), (2) one server on both (`--gpus A,B`) and (3) two
  servers, `--gpus A` and `--gpus B`, behind one Pool. Every configuration gets sources of its
  own (training_mix --tag), so none hits another's compile cache, and the same client: a Pool
  over its servers' endpoints, the request window kept full through `Pool.submit`. Per
  configuration: steps/s, p50/p95 latency per status (each request's round trip as the client
  saw it, queueing in the server included), and from each server's `stats` the jobs, busy
  seconds, timeouts and crashes per GPU; the ratio of steps/s to the one-GPU figure.
- `rescore`: one kernel (llm/rms_norm's example solution) scored --rescore times on each GPU,
  one step at a time, the GPUs taking turns (the two one-GPU servers of (3)): the speedup's
  mean and CV per GPU, the ratio of the means (GPU B over GPU A), and per timing case the ratio
  of the reference's CUPTI medians (is GPU B as fast as GPU A?).
- `faults`: on the server that drives both GPUs, correct rms_norm steps one at a time (a new
  source each, so each compiles) alone, then while a second client keeps a hanging kernel
  always in flight, then while it keeps a crashing kernel (a trap, a wild store) always in
  flight: the steps' p50/p95 under each against alone, which GPU timed each, and the fault
  steps' statuses; `stats` says on which GPU the timeouts and crashes happened.

Without a GPU (--no-gpu-selection: the servers start without --gpus) every sample that compiles
is answered infra_error at the GPU stage; the driver, the Pool and the figures still run, which
is the smoke test (bench/gpu/test_multi_gpu.py).

Usage: multi_gpu.py CRUCIBLE [--gpus 0,1] [--count 200] [--in-flight 64] [--rescore 20]
                     [--fault-steps 15] [--parts mix,rescore,faults] [--json FILE] [--work DIR]
(run from the repository root; needs the Python client's packages, pyzmq and msgpack.
CRUCIBLE_LIBRARY_PATH, when set, becomes LD_LIBRARY_PATH for the crucible processes alone.)
"""
import argparse
import collections
import contextlib
import datetime
import json
import pathlib
import random
import shlex
import signal
import statistics
import sys
import tempfile
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent / "clients" / "python" / "src"))
import throughput  # noqa: E402
import training_mix  # noqa: E402
from crucible_client import Client, Pool  # noqa: E402

STEADY_TASK = "llm/rms_norm"
PARTS = ("mix", "rescore", "faults")


def record_of(sample, reply, wall_ms, error=None):
    """One scored sample in the shape `crucible eval` writes its records (what
    throughput.summarize reads)."""
    result = (reply or {}).get("result") if isinstance(reply, dict) else None
    if not isinstance(result, dict):
        result = {"status": "client_error", "message": error or "no result in the reply"}
    record = {"task": sample["task"], "sample_id": sample.get("sample_id"),
              "meta": sample.get("meta") or {}, "status": result.get("status", "?"),
              "message": result.get("message", ""), "wall_ms": wall_ms, "result": result}
    if isinstance(result.get("speedup"), (int, float)):
        record["speedup"] = result["speedup"]
    return record


def timed_score(client, sample, source, seed):
    """One score request for `sample` through `client`, waited for: its record, timed."""
    sent = time.monotonic()
    reply = client.request("score", task=sample["task"], source=source, seed=seed)
    return record_of(sample, reply, (time.monotonic() - sent) * 1000.0)


def timed_device(record):
    """The CUDA ordinal of the GPU that timed a step (None when it was not timed)."""
    device = ((record.get("result") or {}).get("timing") or {}).get("device") or {}
    return device.get("index")


def score_window(endpoints, samples, in_flight, seed, timeout_s):
    """Scores every sample through one Pool over `endpoints`, `in_flight` requests outstanding
    at all times; returns (records in sample order, wall seconds). Each request's latency ends
    when its reply arrives, not when the loop gets to it."""
    records = [None] * len(samples)
    slots = threading.Semaphore(in_flight)
    with Pool(list(endpoints), timeout=timeout_s) as pool:
        for client in pool.clients:  # every socket connected before the clock starts
            client.request("hello", client="multi-gpu-bench")
        pending = []
        began = time.monotonic()
        for index, sample in enumerate(samples):
            slots.acquire()
            sent = time.monotonic()
            future = pool.submit("score", task=sample["task"], source=sample["source"],
                                 seed=seed + index)

            def settle(done, index=index, sample=sample, sent=sent):
                wall_ms = (time.monotonic() - sent) * 1000.0
                failure = done.exception()
                records[index] = record_of(sample, None if failure else done.result(), wall_ms,
                                           error=f"{type(failure).__name__}: {failure}"
                                           if failure else None)
                slots.release()

            future.add_done_callback(settle)
            pending.append(future)
        for future in pending:
            with contextlib.suppress(Exception):
                future.result()
        wall_s = time.monotonic() - began
    return records, wall_s


def server_stats(endpoint):
    """From a server's `stats`: the scores it has answered and, per CUDA ordinal, its runners'
    jobs, busy seconds, timeouts, crashes, lost contexts and restarts."""
    with Client(endpoint, timeout=30) as client:
        stats = client.request("stats")
    per_gpu = {}
    for runner in ((stats.get("pools") or {}).get("gpu") or {}).get("runners") or []:
        row = per_gpu.setdefault(str(runner.get("device")), {
            "runners": 0, "jobs": 0, "busy_s": 0.0, "timeouts": 0, "crashes": 0,
            "lost_contexts": 0, "restarts": 0})
        row["runners"] += 1
        for key in ("jobs", "timeouts", "crashes", "lost_contexts", "restarts"):
            row[key] += int(runner.get(key) or 0)
        row["busy_s"] = round(row["busy_s"] + float(runner.get("busy_s") or 0.0), 3)
    return {"scores": int(stats.get("scores") or 0), "gpus": per_gpu}


def stats_delta(before, after):
    """What a server did between two server_stats snapshots (the runner counts as they are)."""
    gpus = {}
    for device, row in after["gpus"].items():
        base = before["gpus"].get(device, {})
        gpus[device] = {key: (round(value - base.get(key, 0), 3) if isinstance(value, float)
                              else value - base.get(key, 0))
                        for key, value in row.items() if key != "runners"}
        gpus[device]["runners"] = row["runners"]
    return {"scores": after["scores"] - before["scores"], "gpus": gpus}


def mix_row(name, servers, samples, args):
    endpoints = [server.endpoint for server in servers]
    before = [server_stats(e) for e in endpoints]
    records, wall_s = score_window(endpoints, samples, args.in_flight, args.seed, args.timeout)
    row = throughput.summarize(records, wall_s, args.in_flight)
    row["configuration"] = name
    row["servers"] = [shlex.join(server.command) for server in servers]
    row["per_server"] = [stats_delta(b, server_stats(e)) for b, e in zip(before, endpoints)]
    statuses = {s: v["count"] for s, v in row["latency_by_status"].items()}
    print(f"{name:28s} {row['steps_per_s']:7.2f} steps/s ({row['scored_steps_per_s']:.2f} "
          f"scored), p50 {row['latency_all']['p50_ms']:.0f} ms, p95 "
          f"{row['latency_all']['p95_ms']:.0f} ms, {statuses}", flush=True)
    for status, figures in row["latency_by_status"].items():
        print(f"      {status:15s} {figures['count']:4d}  p50 {figures['p50_ms']:9.1f} ms  "
              f"p95 {figures['p95_ms']:9.1f} ms")
    return row


def steady_source(text, label):
    return text.rstrip("\n") + f"\n// steady step {label}\n"


def steady_steps(endpoint, text, count, label, seed, timeout_s):
    """Correct rms_norm steps one at a time, each a new source (so each compiles) and seed."""
    records = []
    with Client(endpoint, timeout=timeout_s) as client:
        for i in range(count):
            sample = {"task": STEADY_TASK, "sample_id": f"steady/{label}/{i}",
                      "meta": {"expect": "ok", "kind": "correct"}}
            records.append(timed_score(client, sample, steady_source(text, f"{label}-{i}"),
                                       seed + i))
    return records


def steady_summary(records):
    statuses = collections.Counter(record["status"] for record in records)
    devices = collections.Counter(str(timed_device(record)) for record in records)
    return {"steps": len(records), "statuses": dict(statuses), "timed_on_gpu": dict(devices),
            "latency": throughput.latency([r["wall_ms"] for r in records]),
            "speedup_spread": throughput.speedup_spread([r.get("speedup") for r in records])}


class FaultStream:
    """A second client that keeps one faulting kernel in flight until stopped: each reply is
    followed at once by the next request (a new source each, from `make(i)`)."""

    def __init__(self, endpoint, make, timeout_s):
        self.endpoint, self.make, self.timeout_s = endpoint, make, timeout_s
        self.records, self.error = [], None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        try:
            with Client(self.endpoint, timeout=self.timeout_s) as client:
                i = 0
                while not self.stop.is_set():
                    kind, source = self.make(i)
                    sample = {"task": STEADY_TASK, "sample_id": f"fault/{kind}/{i}",
                              "meta": {"kind": kind}}
                    self.records.append(timed_score(client, sample, source, i))
                    i += 1
        except Exception as error:  # noqa: BLE001 - reported in the figures, not raised
            self.error = f"{type(error).__name__}: {error}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(self.timeout_s)

    def summary(self):
        statuses = collections.Counter(f"{record['meta']['kind']}->{record['status']}"
                                       for record in self.records)
        return {"requests": len(self.records), "kind_to_status": dict(statuses),
                "latency": throughput.latency([r["wall_ms"] for r in self.records]),
                "error": self.error}


def ratio(numerator, denominator):
    if not isinstance(numerator, (int, float)) or not isinstance(denominator, (int, float)):
        return None
    return round(numerator / denominator, 4) if denominator else None


def rescore(servers, gpus, text, count, seed, timeout_s):
    """One kernel scored `count` times on each one-GPU server, the GPUs taking turns."""
    source = text.rstrip("\n") + "\n// rescored on every GPU\n"
    per_gpu = {gpu: [] for gpu in gpus}
    clients = [Client(server.endpoint, timeout=timeout_s) for server in servers]
    try:
        for i in range(count):
            for gpu, client in zip(gpus, clients):
                sample = {"task": STEADY_TASK, "sample_id": f"rescore/{gpu}/{i}",
                          "meta": {"expect": "ok", "kind": "rescore"}}
                per_gpu[gpu].append(timed_score(client, sample, source, seed))
    finally:
        for client in clients:
            client.close()
    out = {"task": STEADY_TASK, "source": f"tasks/{STEADY_TASK}/solution.cu, one source, one "
           "seed", "per_gpu": {}}
    for gpu, records in per_gpu.items():
        row = steady_summary(records)
        row["case_reference_median_ns"] = {
            case: statistics.median([v for v in values["reference"] if v is not None])
            for case, values in throughput.case_medians(records).items()
            if any(v is not None for v in values["reference"])}
        out["per_gpu"][gpu] = row
    if len(gpus) == 2:
        a, b = (out["per_gpu"][g] for g in gpus)
        mean = lambda row: (row["speedup_spread"] or {}).get("mean")  # noqa: E731
        out["speedup_ratio_b_over_a"] = ratio(mean(b), mean(a))
        out["reference_time_ratio_b_over_a"] = {
            case: ratio(b["case_reference_median_ns"].get(case), ns)
            for case, ns in a["case_reference_median_ns"].items()}
    for gpu, row in out["per_gpu"].items():
        print(f"rescore on GPU {gpu}: {row['statuses']}, speedup {row['speedup_spread']}",
              flush=True)
    if "speedup_ratio_b_over_a" in out:
        print(f"speedup ratio GPU {gpus[1]} / GPU {gpus[0]}: {out['speedup_ratio_b_over_a']}",
              flush=True)
    return out


def faults(server, text, count, seed, timeout_s):
    """Steady steps alone, beside a hang always in flight, beside a crash always in flight."""
    rng = random.Random(seed)
    crashes = [("trap", training_mix.trap), ("bad_address", training_mix.bad_address)]

    def hang(i):
        return "hang", steady_source(training_mix.spin(text, rng), f"hang-{seed}-{i}")

    def crash(i):
        kind, mutate = crashes[i % len(crashes)]
        return kind, steady_source(mutate(text, rng), f"crash-{seed}-{i}")

    out = {"server": shlex.join(server.command), "steady_task": STEADY_TASK}
    alone = steady_steps(server.endpoint, text, count, f"alone-{seed}", seed, timeout_s)
    out["alone"] = steady_summary(alone)
    for name, make in (("beside_hang", hang), ("beside_crash", crash)):
        before = server_stats(server.endpoint)
        with FaultStream(server.endpoint, make, timeout_s) as stream:
            time.sleep(1.0)  # the first fault on a GPU before the first step
            records = steady_steps(server.endpoint, text, count, f"{name}-{seed}", seed + 1000,
                                   timeout_s)
        row = steady_summary(records)
        row["faults"] = stream.summary()
        row["server_delta"] = stats_delta(before, server_stats(server.endpoint))
        for quantile in ("p50_ms", "p95_ms"):
            row[f"{quantile[:3]}_over_alone"] = ratio((row["latency"] or {}).get(quantile),
                                                      (out["alone"]["latency"] or {}).get(quantile))
        out[name] = row
    for name in ("alone", "beside_hang", "beside_crash"):
        row = out[name]
        lat = row["latency"] or {}
        extra = f", faults {row['faults']['kind_to_status']}" if "faults" in row else ""
        print(f"steady steps {name:13s}: p50 {lat.get('p50_ms')} ms, p95 {lat.get('p95_ms')} ms, "
              f"{row['statuses']}, timed on GPU {row['timed_on_gpu']}{extra}", flush=True)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("crucible", help="the crucible binary")
    parser.add_argument("--gpus", default="0,1", help="the two CUDA ordinals, A,B (one: only the "
                        "one-GPU baseline and its rescoring run)")
    parser.add_argument("--no-gpu-selection", action="store_true",
                        help="start every server without --gpus (a machine without GPUs: the "
                        "smoke test)")
    parser.add_argument("--count", type=int, default=200, help="mix samples per configuration")
    parser.add_argument("--seed", type=int, default=2026, help="mix seed (training_mix.py)")
    parser.add_argument("--tasks", default="", help="mix tasks (training_mix.py --tasks)")
    parser.add_argument("--in-flight", type=int, default=64, help="requests outstanding")
    parser.add_argument("--rescore", type=int, default=20, help="scores of one kernel per GPU")
    parser.add_argument("--fault-steps", type=int, default=15,
                        help="steady steps alone, beside a hang and beside a crash")
    parser.add_argument("--parts", default=",".join(PARTS), help="some of mix,rescore,faults")
    parser.add_argument("--serve-args", default="", help="more arguments for every server")
    parser.add_argument("--timeout", type=int, default=600, help="per-request timeout, s")
    parser.add_argument("--work", type=pathlib.Path, help="folder for the servers' logs and "
                        "caches (default: a temporary one, removed)")
    parser.add_argument("--json", type=pathlib.Path, help="write the figures here")
    args = parser.parse_args(argv)
    gpus = [g for g in args.gpus.split(",") if g]
    parts = [p for p in args.parts.split(",") if p]
    if not 1 <= len(gpus) <= 2 or len(set(gpus)) != len(gpus):
        parser.error("--gpus: one or two distinct CUDA ordinals")
    if set(parts) - set(PARTS):
        parser.error(f"--parts: some of {','.join(PARTS)}")
    if not 1 <= args.in_flight <= 256:
        parser.error("--in-flight: 1 to 256")
    tasks = [t for t in args.tasks.split(",") if t] or training_mix.DEFAULT_TASKS
    crucible = str(pathlib.Path(args.crucible).resolve())
    extra = shlex.split(args.serve_args)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    root = pathlib.Path.cwd()
    steady_text = (root / "tasks" / STEADY_TASK / "solution.cu").read_text()
    report = {
        "benchmark": "the training mix on two GPUs: one server on both, two servers behind a "
                     "Pool, against one GPU (bench/gpu/multi_gpu.py)",
        "gpu": throughput.gpu_name(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": shlex.join([sys.argv[0], *(sys.argv[1:] if argv is None else argv)]),
        "gpus": gpus, "gpu_selection": not args.no_gpu_selection,
        "mix": {"generator": "bench/gpu/training_mix.py", "count": args.count, "seed": args.seed,
                "tasks": tasks, "in_flight": args.in_flight,
                "class_counts": training_mix.class_counts(args.count, training_mix.MIX),
                "client": "crucible_client.Pool over the configuration's servers, "
                          "Pool.submit with the window kept full"},
        "complete": False,
    }

    def server(name, devices):
        selection = [] if args.no_gpu_selection else ["--gpus", ",".join(devices)]
        return throughput.Server(crucible, work / name, [*selection, *extra])

    with contextlib.ExitStack() as stack:
        if args.work:
            work = args.work.resolve()
            work.mkdir(parents=True, exist_ok=True)
        else:
            work = pathlib.Path(stack.enter_context(
                tempfile.TemporaryDirectory(prefix="crucible-multi-gpu-")))
        try:
            one = [stack.enter_context(server(f"gpu{gpus[0]}", gpus[:1]))]
            both = each = None
            if len(gpus) == 2:
                both = [stack.enter_context(server("both", gpus))]
                each = [one[0], stack.enter_context(server(f"gpu{gpus[1]}", gpus[1:]))]
            if "mix" in parts:
                configurations = [("one GPU, one server", one)]
                if both:
                    configurations += [("two GPUs, one server", both),
                                       ("two GPUs, two servers, Pool", each)]
                rows = []
                for index, (name, servers) in enumerate(configurations):
                    samples = training_mix.generate(root, args.count, args.seed, tasks,
                                                    tag=f"c{index}")
                    rows.append(mix_row(name, servers, samples, args))
                for row in rows:
                    row["steps_per_s_over_one_gpu"] = ratio(row["steps_per_s"],
                                                            rows[0]["steps_per_s"])
                    row["scored_steps_per_s_over_one_gpu"] = ratio(
                        row["scored_steps_per_s"], rows[0]["scored_steps_per_s"])
                report["mix"]["configurations"] = rows
                print("steps/s over one GPU: " + ", ".join(
                    f"{row['configuration']} {row['steps_per_s_over_one_gpu']}" for row in rows),
                    flush=True)
            if "rescore" in parts and args.rescore > 0:
                report["rescore"] = rescore(each or one, gpus, steady_text, args.rescore,
                                            args.seed, args.timeout)
            if "faults" in parts and args.fault_steps > 0:
                if both:
                    report["faults"] = faults(both[0], steady_text, args.fault_steps, args.seed,
                                              args.timeout)
                else:
                    report["faults"] = "needs two GPUs"
            report["complete"] = True
        finally:
            throughput.finish_report(report, work, args.json)
    return report


if __name__ == "__main__":
    main()
