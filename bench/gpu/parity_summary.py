#!/usr/bin/env python3
"""Every task's worst parity case, from the committed parity tables (bench/results/h200_parity*.json).

Two ratios per timing case, both of the reference's time over the best library's:
- crucible's: the reference timed by crucible (CUPTI, a call from its first kernel's start to its
  last one's end) over the library's summed kernel time in the parity harness (torch.profiler);
- like for like: the reference exported as a PyTorch op and timed in the same harness, by the
  same method, in the same run (`harness_reference_over_library`, or the run that timed that
  library alone, `anchor_runs`). Where the reference is several kernels, crucible's time counts
  the gaps between them and the harness's sum does not; on the smallest kernels crucible's time
  is also 0.1-0.25 us longer.
A task's rows come from the newest table that measured it. Tasks no table has measured are
listed as such.

Usage: parity_summary.py [--results bench/results] [--bound 1.05] [--json FILE]
"""
import argparse
import glob
import json
import pathlib
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def like_for_like(row):
    """The row's reference over its library, both timed in the parity harness (None if no run
    timed both)."""
    if row.get("harness_reference_over_library"):
        return row["harness_reference_over_library"]
    library = (row.get("library") or "").lower()
    for run in row.get("anchor_runs") or []:
        if run.get("harness_reference_over_library") and any(
                anchor.lower() in library for anchor in run.get("anchors") or []):
            return run["harness_reference_over_library"]
    return None


def task_dates(table):
    """When the table last measured each of its tasks (its runs; else the table's date)."""
    dates = {}
    for run in table.get("runs") or []:
        for task in run.get("tasks") or []:
            dates[task] = max(dates.get(task, ""), str(run.get("date") or ""))
    for row in table["rows"]:
        dates.setdefault(row["task"], str(table.get("date") or ""))
    return dates


def newest_rows(paths):
    """{task: (table name, date, rows)}, each task from the newest table that measured it."""
    chosen = {}
    for path in paths:
        table = json.loads(pathlib.Path(path).read_text())
        dates = task_dates(table)
        for task, date in dates.items():
            rows = [row for row in table["rows"] if row["task"] == task]
            if rows and (task not in chosen or date > chosen[task][1]):
                chosen[task] = (pathlib.Path(path).name, date, rows)
    return chosen


def worst(rows, ratio):
    measured = [(ratio(row), row) for row in rows if ratio(row) is not None]
    if not measured:
        return None
    value, row = max(measured, key=lambda pair: pair[0])
    return {"ratio": round(value, 3), "case": row["case"], "library": row.get("library")}


def summarize(chosen, tasks, bound):
    out = {}
    for task in tasks:
        if task not in chosen:
            out[task] = {"measured": False}
            continue
        table, date, rows = chosen[task]
        crucible = lambda row: row.get("reference_over_library")  # noqa: E731
        out[task] = {
            "measured": True, "table": table, "date": date, "cases": len(rows),
            "worst_crucible": worst(rows, crucible),
            "worst_like_for_like": worst(rows, like_for_like),
            "over_bound_crucible": sorted(row["case"] for row in rows
                                          if (crucible(row) or 0) > bound),
            "over_bound_like_for_like": sorted(row["case"] for row in rows
                                               if (like_for_like(row) or 0) > bound),
        }
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=pathlib.Path, default=ROOT / "bench" / "results")
    parser.add_argument("--bound", type=float, default=1.05)
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args(argv)
    tasks = sorted(str(path.parent.relative_to(ROOT / "tasks"))
                   for path in (ROOT / "tasks").glob("*/*/task.toml")
                   if "parity" in tomllib.loads(path.read_text()))
    chosen = newest_rows(sorted(glob.glob(str(args.results / "h200_parity*.json"))))
    summary = summarize(chosen, tasks, args.bound)
    for task, row in summary.items():
        if not row["measured"]:
            print(f"{task:42s} not measured")
            continue
        parts = []
        for name in ("crucible", "like_for_like"):
            figure = row[f"worst_{name}"]
            parts.append(f"{figure['ratio']:.3f} {figure['case']}" if figure else "-")
        over = row["over_bound_crucible"], row["over_bound_like_for_like"]
        print(f"{task:42s} crucible {parts[0]:34s} like for like {parts[1]:34s} "
              f"over {args.bound}: {len(over[0])}/{len(over[1])} of {row['cases']}  "
              f"({row['table']}, {row['date'][:10]})")
    if args.json:
        args.json.write_text(json.dumps({"bound": args.bound, "tasks": summary}, indent=2) + "\n")
    return summary


if __name__ == "__main__":
    main()
