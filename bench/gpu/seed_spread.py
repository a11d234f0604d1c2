#!/usr/bin/env python3
"""Does a reference's time, or its correctness, depend on the draw of its visible cases?

A step's inputs come from its case seed (`crucible eval --seed`, a trainer's seed per step), and a
candidate's speedup is its time over the reference's on the same draw. A reference whose time
swings from draw to draw (a slow path some draws take, as the sampler's candidate lists overflow
on some rows) makes the same candidate's reward swing with it, and a reference that fails its own
check on some draw is a bug seed 1 hides. This scores every task's reference as a sample
(the reference against itself) once per seed and, per timing case, compares:

- `spread`: the largest over the smallest of the reference's CUPTI medians across the seeds;
- `noise`: within each seed's run the two timings of the same source (as candidate and as
  reference) should agree: the largest |candidate / reference - 1| over the seeds;
- the statuses per seed (anything but `ok` is listed).

A case is `draw_dependent` when its spread is over 1.10 and over 1 + 4 x its noise.

Usage:
  seed_spread.py --references FILE [--tasks ID ...]   the samples: every task's reference
  seed_spread.py [--json FILE] SEED=RESULTS ...        the summary of the evals, one per seed
                                                        (RESULTS: an eval's results.jsonl)
"""
import argparse
import importlib.util
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
SPREAD_BOUND = 1.10
NOISE_FACTOR = 4.0


def write_references(path, tasks):
    spec = importlib.util.spec_from_file_location("parity", HERE / "parity.py")
    parity = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(parity)
    parity.write_references(path, tasks)


def load_runs(pairs):
    """{seed: {sample_id: record}} from SEED=RESULTS arguments. An eval that wrote no results
    (it ran out of time before its first sample) counts as a seed without samples: each is
    listed as missing there."""
    runs = {}
    for pair in pairs:
        seed, _, path = pair.partition("=")
        if not path:
            sys.exit(f"seed_spread.py: '{pair}' is not SEED=RESULTS")
        text = pathlib.Path(path).read_text() if pathlib.Path(path).exists() else ""
        records = [json.loads(line) for line in text.splitlines() if line.strip()]
        runs[int(seed)] = {record["sample_id"]: record for record in records}
    return runs


def summarize(runs):
    seeds = sorted(runs)
    samples = sorted({sample for run in runs.values() for sample in run})
    rows, problems = [], []
    for sample in samples:
        cases = {}
        for seed in seeds:
            record = runs[seed].get(sample)
            if record is None:
                problems.append({"sample_id": sample, "seed": seed, "status": "missing"})
                continue
            if record.get("status") != "ok":
                problems.append({"sample_id": sample, "seed": seed, "status": record.get("status"),
                                 "message": (record.get("result") or {}).get("message")})
            timing = (record.get("result") or {}).get("timing") or {}
            for case in timing.get("cases", []):
                reference = (case.get("reference") or {}).get("median_ns")
                candidate = (case.get("candidate") or {}).get("median_ns")
                if reference and candidate:
                    cases.setdefault(case["case"], {})[seed] = (reference, candidate)
        for name, per_seed in cases.items():
            references = [pair[0] for pair in per_seed.values()]
            spread = max(references) / min(references)
            noise = max(abs(candidate / reference - 1.0) for reference, candidate in
                        per_seed.values())
            rows.append({
                "sample_id": sample, "task": sample.split("#")[0], "case": name,
                "reference_ns": {str(seed): per_seed[seed][0] for seed in sorted(per_seed)},
                "spread": round(spread, 4), "noise": round(noise, 4),
                "draw_dependent": len(per_seed) > 1 and spread > SPREAD_BOUND
                and spread > 1.0 + NOISE_FACTOR * noise})
    return {"seeds": seeds, "spread_bound": SPREAD_BOUND, "noise_factor": NOISE_FACTOR,
            "rows": rows, "draw_dependent": [f"{r['task']} {r['case']}" for r in rows
                                             if r["draw_dependent"]],
            "not_ok": problems}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--references", help="write every task's reference as a sample here")
    parser.add_argument("--tasks", nargs="+", help="with --references: only these tasks")
    parser.add_argument("--json", help="write the summary here")
    parser.add_argument("runs", nargs="*", help="SEED=RESULTS, one per seed")
    args = parser.parse_args(argv)
    if args.references:
        write_references(args.references, args.tasks)
        return
    if not args.runs:
        parser.error("give SEED=RESULTS for at least one seed, or --references")
    summary = summarize(load_runs(args.runs))
    for row in sorted(summary["rows"], key=lambda r: -r["spread"])[:20]:
        times = " ".join(f"{seed}:{ns / 1000:.1f}" for seed, ns in row["reference_ns"].items())
        flag = "  DRAW-DEPENDENT" if row["draw_dependent"] else ""
        print(f"{row['task']:<42} {row['case']:<28} spread {row['spread']:.3f} noise "
              f"{row['noise']:.3f}{flag}  us {times}")
    print(f"{len(summary['draw_dependent'])} draw-dependent cases of {len(summary['rows'])}; "
          f"{len(summary['not_ok'])} samples not ok on some seed")
    for problem in summary["not_ok"]:
        print(f"  not ok: {problem['sample_id']} seed {problem['seed']}: {problem['status']} "
              f"{problem.get('message') or ''}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
