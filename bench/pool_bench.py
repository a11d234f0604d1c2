#!/usr/bin/env python3
"""Steps/s through crucible_client.Pool over 1, 2 and 4 local `crucible serve` processes.

Each score sends a distinct source (llm/rms_norm's solution with one extra constant), so the
compile cache never hits and every request compiles for real; without a GPU the GPU stage then
answers infra_error, so on a machine without one this measures the pool and the compile
workers, not kernels. A fixed number of requests is kept N in flight through `Pool.submit`.
The pool's own cost per request is measured apart: sequential `hello` round trips through a
Pool and through a plain Client on the same single server.

    python3 bench/pool_bench.py [--requests 240] [--inflight 8] [--servers 1,2,4]
                                [--hellos 2000] [--json PATH]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Dict, List, Sequence

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "clients" / "python" / "src"))

from crucible_client import Client, CrucibleError, Pool  # noqa: E402

TASK = "llm/rms_norm"
SOLUTION = REPO / "tasks" / "llm" / "rms_norm" / "solution.cu"
ANCHOR = "constexpr int kThreads = 256;"


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_server(binary: Path, workdir: Path, index: int) -> "tuple[str, subprocess.Popen]":
    endpoint = f"tcp://127.0.0.1:{free_loopback_port()}"
    home = workdir / f"server{index}"
    home.mkdir()
    with open(home / "stderr.txt", "wb") as err, open(home / "stdout.txt", "wb") as out:
        process = subprocess.Popen(
            [str(binary), "serve", "--bind", endpoint, "--log", str(home / "traj.log"),
             "--compile-workers", "1", "--compile-cache", str(home / "compile-cache")],
            stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=str(home))
    deadline = time.monotonic() + 60
    with Client(endpoint, timeout=0.5) as probe:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"server {index} exited with {process.returncode}; see {home}")
            try:
                probe.request("hello", client="pool-bench-startup")
                return endpoint, process
            except CrucibleError:
                if time.monotonic() > deadline:
                    raise
    raise AssertionError("unreachable")


def stop_servers(processes: Sequence[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def sources(base: str, salt: str, count: int) -> List[str]:
    # One extra constant per request: a new compile-cache key, the same kernel.
    return [base.replace(ANCHOR, f"{ANCHOR}\nconstexpr int kBenchSalt = {i}; // {salt}", 1)
            for i in range(count)]


def run_scores(endpoints: Sequence[str], texts: Sequence[str], inflight: int) -> Dict[str, Any]:
    latencies: List[float] = []
    statuses: "collections.Counter[str]" = collections.Counter()
    errors: "collections.Counter[str]" = collections.Counter()
    with Pool(list(endpoints), timeout=300) as pool:
        pool.request("hello", client="pool-bench")  # connect every socket before timing
        for client in pool.clients:
            client.request("hello", client="pool-bench")
        sent_before = [c.request("stats").get("scores") for c in pool.clients]
        window: "collections.deque[tuple[float, Future[Dict[str, Any]]]]" = collections.deque()

        def settle_first() -> None:
            started, future = window.popleft()
            failure = future.exception()
            latencies.append(time.monotonic() - started)
            if failure is not None:
                errors[getattr(failure, "code", type(failure).__name__)] += 1
            else:
                result = future.result().get("result", {})
                statuses[str(result.get("status") if isinstance(result, dict) else result)] += 1

        began = time.monotonic()
        for text in texts:
            while len(window) >= inflight:
                settle_first()
            window.append((time.monotonic(), pool.submit("score", task=TASK, source=text)))
        while window:
            settle_first()
        seconds = time.monotonic() - began
        sent_after = [c.request("stats").get("scores") for c in pool.clients]
        servers = pool.servers()
    spread = {}
    for server, before, after in zip(servers, sent_before, sent_after):
        # Scores the server counted during the run.
        spread[server["endpoint"]] = (after - before
                                      if isinstance(after, int) and isinstance(before, int)
                                      else None)
    return {
        "servers": len(endpoints),
        "requests": len(texts),
        "inflight": inflight,
        "seconds": round(seconds, 3),
        "steps_per_s": round(len(texts) / seconds, 2),
        "latency_p50_ms": round(percentile(latencies, 0.50) * 1e3, 1),
        "latency_p95_ms": round(percentile(latencies, 0.95) * 1e3, 1),
        "requests_per_server": spread,
        "result_status": dict(statuses),
        "errors": dict(errors),
    }


def hello_round_trips(endpoint: str, count: int) -> Dict[str, Any]:
    def timed(requester: Any) -> List[float]:
        for _ in range(50):  # warm up the socket and the server's thread
            requester.request("hello", client="pool-bench")
        out = []
        for _ in range(count):
            started = time.perf_counter()
            requester.request("hello", client="pool-bench")
            out.append(time.perf_counter() - started)
        return out

    # Alternate the two, twice, so neither profits alone from a quieter moment.
    client_times: List[float] = []
    pool_times: List[float] = []
    with Client(endpoint, timeout=30) as client, Pool([endpoint], timeout=30) as pool:
        for _ in range(2):
            client_times += timed(client)
            pool_times += timed(pool)
    client_p50 = percentile(client_times, 0.5) * 1e6
    pool_p50 = percentile(pool_times, 0.5) * 1e6
    return {
        "op": "hello",
        "round_trips_each": len(client_times),
        "client_p50_us": round(client_p50, 1),
        "client_p95_us": round(percentile(client_times, 0.95) * 1e6, 1),
        "pool_p50_us": round(pool_p50, 1),
        "pool_p95_us": round(percentile(pool_times, 0.95) * 1e6, 1),
        "pool_overhead_p50_us": round(pool_p50 - client_p50, 1),
    }


def cpu_seconds(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def machine() -> Dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"os_cpu_count": os.cpu_count(), "cpu": model, "platform": platform.platform(),
            "python": platform.python_version(), "gpu": "none (GPU stage answers infra_error)"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=240)
    parser.add_argument("--inflight", type=int, default=8)
    parser.add_argument("--servers", default="1,2,4")
    parser.add_argument("--hellos", type=int, default=2000)
    parser.add_argument("--binary", default=os.environ.get("CRUCIBLE_BIN")
                        or str(REPO / "build" / "dev" / "bin" / "crucible"))
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()
    counts = [int(n) for n in args.servers.split(",")]
    base = SOLUTION.read_text()
    if ANCHOR not in base:
        raise SystemExit(f"{SOLUTION} no longer holds {ANCHOR!r}")
    salt = f"{time.time_ns()}"  # no cache of an earlier run can hit either
    runs = []
    overhead: Dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="pool_bench_") as tmp:
        for count in counts:
            processes: List[subprocess.Popen] = []
            try:
                folder = Path(tmp) / f"n{count}"
                folder.mkdir()
                endpoints = []
                for index in range(count):
                    endpoint, process = start_server(Path(args.binary), folder, index)
                    endpoints.append(endpoint)
                    processes.append(process)
                texts = sources(base, f"{salt}-n{count}", args.requests)
                load_before = os.getloadavg()
                children_before = cpu_seconds(resource.RUSAGE_CHILDREN)
                self_before = cpu_seconds(resource.RUSAGE_SELF)
                runs.append(run_scores(endpoints, texts, args.inflight))
                runs[-1]["client_cpu_ms_per_request"] = round(
                    (cpu_seconds(resource.RUSAGE_SELF) - self_before) * 1e3 / len(texts), 2)
                runs[-1]["loadavg_1m_before_after"] = [round(load_before[0], 2),
                                                       round(os.getloadavg()[0], 2)]
                print(json.dumps(runs[-1]), file=sys.stderr)
                if count == 1 and args.hellos > 0:
                    overhead = hello_round_trips(endpoints[0], args.hellos)
                    print(json.dumps(overhead), file=sys.stderr)
            finally:
                stop_servers(processes)
            if runs and runs[-1]["servers"] == count:
                # The servers and their compile workers are reaped now, so their CPU time (the
                # hello round trips of the first run included) is in RUSAGE_CHILDREN.
                runs[-1]["server_cpu_ms_per_request"] = round(
                    (cpu_seconds(resource.RUSAGE_CHILDREN) - children_before) * 1e3
                    / len(texts), 2)
    base_rate = runs[0]["steps_per_s"] if runs else None
    for run in runs:
        run["speedup_vs_first"] = round(run["steps_per_s"] / base_rate, 2) if base_rate else None
    report = {
        "benchmark": "pool_bench",
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join([Path(sys.argv[0]).as_posix()] + sys.argv[1:]),
        "binary": args.binary,
        "machine": machine(),
        "setup": (f"{TASK} scores, each with a distinct source (cache never hits), through "
                  f"crucible_client.Pool with {args.inflight} in flight; each server is "
                  "`crucible serve --compile-workers 1` on loopback; without a GPU every score "
                  "compiles for real and the GPU stage answers infra_error"),
        "note": (f"os.cpu_count() is {os.cpu_count()}: every server, its compile worker and "
                 "this client share those cores, so steps/s cannot grow past what those cores "
                 "compile (about cpu_count / (server + client CPU per request)), and 4 servers "
                 "only share them more ways; other work on the machine (loadavg_1m) takes "
                 "its share too. The figures measure the pool's spreading and the compile "
                 "workers, not a GPU"),
        "scores": runs,
        "pool_overhead": overhead,
    }
    text = json.dumps(report, indent=2)
    print(text)
    if args.json_path:
        Path(args.json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_path).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
