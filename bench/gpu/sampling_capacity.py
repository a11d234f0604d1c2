#!/usr/bin/env python3
"""How often a row of llm/top_k_top_p_sampling_from_logits's visible cases overflows the
reference's candidate lists, on the CPU: a model of the reference's steps 1 and 2 (the max and
the half-nat histogram of the top 16 nats, then the smallest cutoff whose candidates hold the
filtered set) over rows drawn from each visible case's distributions, under two capacity rules:

- per warp (the reference): each of the 16 warps keeps at most 256 candidates of its 1/16 of the
  row; one warp over 256 sends the whole row to the global-memory path (every threshold search
  step a pass over the row in global memory);
- pooled (variants.py's `pooled_lists`): every warp's list in one pool of 6144 entries, so only
  the row's total counts;
- wide (variants.py's `wide_lists`): the reference's rule at 512 candidates a warp.

A call's time is its slowest row's, so a call is slow when any of its rows overflows: the figure
per case is the probability of that under each rule, from the per-setting rates (row b takes
entry b % n of each of the task's top_k and top_p lists). The model computes in float64 from
logits rounded to fp32; the kernel's fp32 differences can move a logit across a bucket edge
only at the last bit.

Usage: sampling_capacity.py [--rows N] [--seed S] [--json FILE]
"""
import argparse
import array
import datetime
import json
import math
import pathlib
import random
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
TASK = ROOT / "tasks/llm/top_k_top_p_sampling_from_logits/task.toml"
WARPS = 16
WARP_CAPACITY = 256  # the reference's kWarpCapacity
POOL_CAPACITY = 6144  # the pooled_lists variant's kCapacity
WIDE_CAPACITY = 512  # the wide_lists variant's kWarpCapacity
BUCKETS = 32
BUCKETS_PER_NAT = 2.0
RANGE = BUCKETS / BUCKETS_PER_NAT


def segment(vocab):
    """The reference's warp segment: a sixteenth of the row rounded up to 128 logits."""
    return ((vocab + WARPS - 1) // WARPS + 127) // 128 * 128


def histogram(row):
    """The reference's step 2 on `row` (fp32 values as floats): per warp the counts of the logits
    in each half-nat bucket of the top 16 nats, the buckets' masses exp(l - m) and the row's Z."""
    seg = segment(len(row))
    m = max(row)
    counts = [[0] * BUCKETS for _ in range(WARPS)]
    masses = [0.0] * BUCKETS
    z = 0.0
    exp = math.exp
    for index, x in enumerate(row):
        d = m - x
        w = exp(-d)
        z += w
        if d < RANGE:
            b = int(d * BUCKETS_PER_NAT)
            counts[index // seg][b] += 1
            masses[b] += w
    return {"vocab": len(row), "counts": counts, "masses": masses, "z": z}


def cutoff(hist, k, p):
    """The smallest cutoff bucket whose candidates hold the filtered set for top-k `k` (0 or >=
    the vocabulary: off) and top-p `p` (>= 1: off), as the reference picks it (None when no
    bucket within 16 nats does), with the candidates at it: in all and in the fullest warp."""
    counts, masses = hist["counts"], hist["masses"]
    k_active = 0 < k < hist["vocab"]
    per_warp = [0] * WARPS
    total = 0
    mass = 0.0
    for b in range(BUCKETS):
        for w in range(WARPS):
            per_warp[w] += counts[w][b]
            total += counts[w][b]
        mass += masses[b]
        holds = total >= k if k_active else mass >= p * hist["z"] * (1.0 + 1e-4)
        if holds:
            return {"bucket": b, "total": total, "warp_max": max(per_warp)}
    return {"bucket": None, "total": total, "warp_max": max(per_warp)}


def overflows(result):
    """Whether a row with this cutoff takes the global-memory path under each rule."""
    if result["bucket"] is None:
        return {"per_warp": True, "pooled": True, "wide": True}
    return {"per_warp": result["warp_max"] > WARP_CAPACITY,
            "pooled": result["total"] > POOL_CAPACITY,
            "wide": result["warp_max"] > WIDE_CAPACITY}


def gaussian_row(rng, vocab, mean, std):
    return array.array("f", (rng.gauss(mean, std) for _ in range(vocab))).tolist()


def visible_cases(manifest):
    """Per visible case: its name, batch, vocabulary, logit distribution and row settings."""
    tensors = {t["name"]: t for t in manifest["tensors"]}
    cases = []
    for case in manifest["visible_cases"]:
        values = {name: t.get("values") for name, t in tensors.items()}
        values.update(case.get("values", {}))
        logits = values["logits"]
        assert logits["generator"] == "randn", "the model draws Gaussian logits"
        ks = values["top_k"]["values"]
        ps = values["top_p"]["values"]
        period = len(ks) * len(ps) // math.gcd(len(ks), len(ps))  # row b: ks[b % len(ks)]...
        settings = [(int(ks[i % len(ks)]), float(ps[i % len(ps)])) for i in range(period)]
        cases.append({"case": case["name"], "batch": case["symbols"]["batch_size"],
                      "vocab": case["symbols"]["vocab_size"], "mean": logits["mean"],
                      "std": logits["std"], "settings": settings})
    return cases


def collects(k, p, vocab):
    """Whether a row with this setting runs steps 2 and 3 (a filter is on)."""
    return 0 < k < vocab or p < 1.0


def measure(cases, rows, seed):
    """Overflow rates per (case, setting) over `rows` drawn rows of the case's distribution
    (every setting judged on the same rows), and per case the probability that a call holds at
    least one overflowing row."""
    rng = random.Random(seed)
    out = []
    for case in cases:
        batch, vocab = case["batch"], case["vocab"]
        settings = {}  # (k, p) -> rows of the call with that setting
        for index, (k, p) in enumerate(case["settings"]):
            in_call = len(range(index, batch, len(case["settings"])))
            if in_call and collects(k, p, vocab):
                settings[(k, p)] = settings.get((k, p), 0) + in_call
        results = {setting: [] for setting in settings}
        for _ in range(rows):
            hist = histogram(gaussian_row(rng, vocab, case["mean"], case["std"]))
            for k, p in settings:
                results[(k, p)].append(cutoff(hist, k, p))
        per_setting = []
        call_fits = {"per_warp": 1.0, "pooled": 1.0, "wide": 1.0}
        for (k, p), in_call in settings.items():
            flags = [overflows(r) for r in results[(k, p)]]
            entry = {"k": k, "p": p, "rows_in_call": in_call, "rows_drawn": rows,
                     "overflow_per_warp": sum(f["per_warp"] for f in flags) / rows,
                     "overflow_pooled": sum(f["pooled"] for f in flags) / rows,
                     "overflow_wide": sum(f["wide"] for f in flags) / rows,
                     "max_total": max(r["total"] for r in results[(k, p)]),
                     "max_warp": max(r["warp_max"] for r in results[(k, p)])}
            per_setting.append(entry)
            for rule in call_fits:
                call_fits[rule] *= (1.0 - entry["overflow_" + rule]) ** in_call
        out.append({"case": case["case"], "batch": batch, "vocab": vocab, "std": case["std"],
                    "settings": per_setting,
                    "call_overflow_per_warp": 1.0 - call_fits["per_warp"],
                    "call_overflow_pooled": 1.0 - call_fits["pooled"],
                    "call_overflow_wide": 1.0 - call_fits["wide"]})
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200, help="rows drawn per setting")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    manifest = tomllib.loads(TASK.read_text())
    figures = measure(visible_cases(manifest), args.rows, args.seed)
    for case in figures:
        print(f"{case['case']:<20} P(call overflows): per warp {case['call_overflow_per_warp']:.3f}"
              f"  pooled {case['call_overflow_pooled']:.3f}  wide {case['call_overflow_wide']:.3f}")
        for s in case["settings"]:
            print(f"    k={s['k']:<8} p={s['p']:<5} x{s['rows_in_call']:<3} row overflow: per warp "
                  f"{s['overflow_per_warp']:.3f} pooled {s['overflow_pooled']:.3f} wide "
                  f"{s['overflow_wide']:.3f}  "
                  f"max candidates {s['max_total']} (one warp {s['max_warp']})")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({
            "benchmark": "llm/top_k_top_p_sampling_from_logits: candidate-list overflow of the "
                         "visible cases, a CPU model of the reference's steps 1-2",
            "command": f"python3 bench/gpu/sampling_capacity.py --rows {args.rows} "
                       f"--seed {args.seed}",
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "machine": "CPU (a model of the kernel's steps 1-2; no GPU)",
            "warp_capacity": WARP_CAPACITY, "pool_capacity": POOL_CAPACITY,
            "wide_capacity": WIDE_CAPACITY,
            "cases": figures}, indent=1) + "\n")


if __name__ == "__main__":
    main()
