"""Compares the CUPTI median of crucible-kernel-timing with ncu's gpu__time_duration.sum.

Usage: compare_ncu.py CUPTI_JSON NCU_CSV OUT_JSON [THROUGHPUT_JSON CASE]

With a throughput result (bench/gpu/throughput.py --under-load) and a case of its single-step
task whose reference is the kernel ncu timed (llm/rms_norm's prefill_4096: rms_norm_kernel, 4096
tokens of 4096, 128 threads), it also holds the reference's CUPTI median of every single step,
taken alone and with the training mix in flight beside it, against ncu's time of the kernel alone:
a timing window that other jobs disturbed would show as a larger ratio under load.
"""
import csv
import json
import statistics
import sys


def steps_against_ncu(throughput, case, ncu_median):
    """The single steps' reference medians of `case` over ncu's median, alone and under load."""
    rows = {}
    runs = throughput.get("under_load") or {}
    for label in ("alone", "under_load"):
        per_case = (runs.get(label) or {}).get("case_medians_ns") or {}
        medians = [m for m in (per_case.get(case) or {}).get("reference", [])
                   if isinstance(m, (int, float))]
        if not medians:
            continue
        ratios = [m / ncu_median for m in medians]
        rows[label] = {"steps": len(medians), "reference_median_ns": statistics.median(medians),
                       "cupti_over_ncu_median": round(statistics.median(ratios), 4),
                       "cupti_over_ncu_min": round(min(ratios), 4),
                       "cupti_over_ncu_max": round(max(ratios), 4)}
    for label, row in rows.items():
        print(f"{case} reference, {label}: CUPTI {row['reference_median_ns']:.0f} ns over "
              f"{row['steps']} steps, {row['cupti_over_ncu_median']:.4f} of ncu's")
    return {"case": case, **rows}


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
    if len(sys.argv) > 5:
        out["steps"] = steps_against_ncu(json.load(open(sys.argv[4])), sys.argv[5], ncu_median)
    json.dump(out, open(sys.argv[3], "w"), indent=2)
    print(f"CUPTI median {cupti['median_ns']:.0f} ns, ncu median {ncu_median:.0f} ns "
          f"({len(durations)} launches): ratio {ratio:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
