#!/usr/bin/env python3
"""A trainer-style client: score N sources with many requests in flight, report throughput.

    python3 examples/python/batch_trainer.py --task llm/rms_norm \
        --file tasks/llm/rms_norm/solution.cu -n 256 --max-inflight 64

Each request is a stateless `score` (no episode), as an RL trainer does when it computes the
rewards of a whole batch of rollouts at once. Samples whose reward is marked `infra` are the
server's fault and are left out of the mean reward, as a trainer would drop them.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import statistics
import sys
import time
from concurrent.futures import FIRST_COMPLETED, wait
from pathlib import Path
from typing import List, Tuple

REPO = Path(__file__).resolve().parents[2]
try:
    import crucible_client
except ImportError:  # running from a checkout without installing the package
    sys.path.insert(0, str(REPO / "clients" / "python" / "src"))
    import crucible_client

from crucible_client import AsyncClient, Client, CrucibleError


def score_threaded(args, items) -> Tuple[list, List[float]]:
    """Client.submit with a window of max_inflight futures; measures each request's latency."""
    outcomes: list = [None] * len(items)
    latencies: List[float] = []
    with Client(args.endpoint, timeout=args.timeout) as client:
        window = set()
        for index, (task, source, seed) in enumerate(items):
            while len(window) >= args.max_inflight:
                _, window = wait(window, return_when=FIRST_COMPLETED)
            started = time.perf_counter()
            future = client.submit("score", task=task, source=source, seed=seed)

            def settle(done, index=index, started=started):
                latencies.append(time.perf_counter() - started)
                outcomes[index] = done.exception() or done.result()

            future.add_done_callback(settle)
            window.add(future)
        wait(window)
    return outcomes, latencies


def score_async(args, items) -> Tuple[list, List[float]]:
    """AsyncClient.score_many: the same batch from one asyncio task."""

    async def run():
        async with AsyncClient(args.endpoint, timeout=args.timeout) as client:
            fields = [{"task": t, "source": s, "seed": seed} for t, s, seed in items]
            return await client.score_many(fields, max_inflight=args.max_inflight,
                                           return_exceptions=True)

    return asyncio.run(run()), []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", default=crucible_client.DEFAULT_ENDPOINT)
    parser.add_argument("--task", default="llm/rms_norm")
    parser.add_argument("--file", action="append",
                        help="CUDA source (repeatable; default: the sample rms_norm solution)")
    parser.add_argument("-n", type=int, default=128, help="number of sources to score")
    parser.add_argument("--max-inflight", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--asyncio", action="store_true", help="use AsyncClient instead")
    args = parser.parse_args()

    files = args.file or [str(REPO / "tasks" / "llm" / "rms_norm" / "solution.cu")]
    sources = [Path(f).read_text(encoding="utf-8") for f in files]
    # Distinct seeds give each request its own generated inputs, like distinct rollouts.
    items = [(args.task, sources[i % len(sources)], i) for i in range(args.n)]

    started = time.perf_counter()
    outcomes, latencies = (score_async if args.asyncio else score_threaded)(args, items)
    elapsed = time.perf_counter() - started

    statuses = collections.Counter()
    errors = collections.Counter()
    rewards = []
    for outcome in outcomes:
        if isinstance(outcome, CrucibleError):
            errors[outcome.code] += 1
            continue
        result = outcome["result"]
        statuses[result["status"]] += 1
        if not result["reward"]["infra"]:
            rewards.append(outcome["reward"])

    print(f"scored {len(outcomes)} sources in {elapsed:.2f} s: "
          f"{len(outcomes) / elapsed:.1f} scores/s with up to {args.max_inflight} in flight")
    print("statuses: " + ", ".join(f"{k}={v}" for k, v in sorted(statuses.items())))
    if errors:
        print("errors: " + ", ".join(f"{k}={v}" for k, v in sorted(errors.items())))
    if latencies:
        cuts = statistics.quantiles(latencies, n=10) if len(latencies) > 1 else latencies * 9
        print(f"latency: p50 {statistics.median(latencies) * 1e3:.1f} ms, "
              f"p90 {cuts[-1] * 1e3:.1f} ms")
    if rewards:
        print(f"mean reward over {len(rewards)} usable samples: {statistics.fmean(rewards):+.4f}")
    else:
        print("no usable samples (every answer was infra or an error)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
