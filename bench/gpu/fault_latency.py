#!/usr/bin/env python3
"""How long a faulting kernel takes to be reported on this GPU: the number the runner's deadline
floor must stay above (docs/runner.md, issue 19).

Writes an eval set of faulting kernels (a trap and a wild store inserted into the example
solutions of a few tasks of different sizes, each repeated), or, given the results of
`crucible eval` on that set, summarises the runner's "reported N ms into the wait" per kind.

    fault_latency.py --samples > faults.jsonl
    crucible eval faults.jsonl -o faults-eval -j 1
    fault_latency.py --results faults-eval/results.jsonl --json fault_latency.json
"""
import argparse
import json
import pathlib
import re
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import training_mix  # noqa: E402

TASKS = ["llm/rms_norm", "llm/silu_and_mul", "llm/paged_decode_attention", "recsys/csr_spmm"]
FAULTS = {"trap": training_mix.trap, "bad_address": training_mix.bad_address}
REPORTED = re.compile(r"reported (\d+) ms into the wait")


def samples(root, repeats):
    for task in TASKS:
        solution, _ = training_mix.task_sources(root, task)
        for kind, mutate in FAULTS.items():
            for r in range(repeats):
                source = mutate(solution[1], None) + f"\n// fault latency {kind} {r}\n"
                yield {"task": task, "sample_id": f"{task}:{kind}:{r}", "source": source,
                       "meta": {"kind": kind}}


def summarise(results_path):
    rows = {}
    for line in open(results_path):
        row = json.loads(line)
        task, kind, _ = row["sample_id"].split(":")
        entry = rows.setdefault(f"{task} {kind}", {"statuses": {}, "reported_ms": []})
        entry["statuses"][row["status"]] = entry["statuses"].get(row["status"], 0) + 1
        match = REPORTED.search(row.get("message", ""))
        if match:
            entry["reported_ms"].append(int(match.group(1)))
    all_ms = []
    for name, entry in sorted(rows.items()):
        ms = entry["reported_ms"]
        all_ms += ms
        if ms:
            entry.update(min_ms=min(ms), median_ms=statistics.median(ms), max_ms=max(ms))
        print(f"{name:45s} {entry['statuses']}  reported after {ms} ms")
    summary = {"samples": sum(sum(e["statuses"].values()) for e in rows.values()),
               "reported": len(all_ms)}
    if all_ms:
        summary.update(min_ms=min(all_ms), median_ms=statistics.median(all_ms), max_ms=max(all_ms))
    print("all:", summary)
    return {"faults": rows, "summary": summary}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", action="store_true", help="print the eval set (JSONL)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--results", help="results.jsonl of `crucible eval` on the set")
    parser.add_argument("--json", help="write the summary here")
    parser.add_argument("--root", type=pathlib.Path, default=pathlib.Path.cwd())
    args = parser.parse_args()
    if args.samples:
        for sample in samples(args.root, args.repeats):
            print(json.dumps(sample))
    if args.results:
        out = summarise(args.results)
        if args.json:
            pathlib.Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
