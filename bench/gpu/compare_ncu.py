"""Compares the CUPTI median of crucible-kernel-timing with ncu's gpu__time_duration.sum.

Usage: compare_ncu.py CUPTI_JSON NCU_CSV OUT_JSON
"""
import csv
import json
import statistics
import sys


def main() -> int:
    cupti = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
    durations = []
    with open(sys.argv[2]) as handle:
        lines = [line for line in handle if line.startswith('"')]
    for row in csv.DictReader(lines):
        if row.get("Metric Name") == "gpu__time_duration.sum":
            value = float(row["Metric Value"].replace(",", ""))
            unit = row.get("Metric Unit", "nsecond")
            scale = {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9}.get(unit, 1.0)
            durations.append(value * scale)
    if not durations:
        print("no ncu measurements found", file=sys.stderr)
        return 1
    ncu_median = statistics.median(durations)
    ratio = cupti["median_ns"] / ncu_median
    out = {
        "cupti_median_ns": cupti["median_ns"],
        "ncu_median_ns": ncu_median,
        "ncu_launches": len(durations),
        "cupti_over_ncu": ratio,
        "within_3_percent": abs(ratio - 1.0) <= 0.03,
        "shape": {"tokens": cupti["tokens"], "hidden": cupti["hidden"]},
        "kernel": cupti["kernel"],
    }
    json.dump(out, open(sys.argv[3], "w"), indent=2)
    print(f"CUPTI median {cupti['median_ns']:.0f} ns, ncu median {ncu_median:.0f} ns "
          f"({len(durations)} launches): ratio {ratio:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
