"""Tests of the training-mix generator and the throughput driver (no GPU needed).

The driver's end-to-end smoke test needs a crucible binary: set CRUCIBLE_BIN (ctest does);
without it that test reports itself skipped.
"""
import json
import os
import pathlib
import random
import re
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
import throughput  # noqa: E402
import training_mix  # noqa: E402

EVAL_KEYS = {"task", "source", "sample_id", "meta"}
TASK_ID = re.compile(r"^[a-z0-9_]+/[a-z0-9_]+$")


def run_generator(*args):
    done = subprocess.run([sys.executable, str(HERE / "training_mix.py"), *args], cwd=ROOT,
                          capture_output=True, text=True, check=True)
    return done.stdout


def parse_eval_input(text):
    """Reads a JSONL text the way `crucible eval` does (docs/eval.md): one JSON object per line
    with a known task and a non-empty source; anything else fails the test."""
    samples = []
    for number, line in enumerate(text.splitlines(), 1):
        record = json.loads(line)
        assert isinstance(record, dict), f"line {number} is not an object"
        assert set(record) <= EVAL_KEYS, f"line {number}: unknown keys {set(record) - EVAL_KEYS}"
        assert TASK_ID.match(record["task"]), record["task"]
        assert (ROOT / "tasks" / record["task"] / "task.toml").exists(), record["task"]
        assert isinstance(record["source"], str) and record["source"].strip()
        assert "\0" not in record["source"]
        assert isinstance(record["sample_id"], (str, int))
        assert isinstance(record["meta"], dict)
        samples.append(record)
    return samples


def test_every_line_is_an_eval_sample_with_its_meta():
    samples = parse_eval_input(run_generator("--count", "200"))
    assert len(samples) == 200
    assert len({s["sample_id"] for s in samples}) == 200
    statuses = {status for _, status in training_mix.MIX.values()} | {"launch_error"}
    for sample in samples:
        meta = sample["meta"]
        assert meta["kind"] in training_mix.MIX
        assert meta["expect"] in statuses
        assert meta["source_of_sample"]
        assert meta["cache"] == "new"
        assert sample["task"] in training_mix.DEFAULT_TASKS


@pytest.mark.parametrize("count", [1, 7, 100, 200, 333])
def test_class_counts_are_the_shares_to_within_one_sample(count):
    samples = training_mix.generate(ROOT, count=count, seed=3)
    kinds = [s["meta"]["kind"] for s in samples]
    assert len(kinds) == count
    for kind, (share, _) in training_mix.MIX.items():
        assert abs(kinds.count(kind) - share * count) < 1.0, (kind, kinds.count(kind))


def test_the_default_mix_is_the_documented_one():
    shares = {kind: share for kind, (share, _) in training_mix.MIX.items()}
    assert shares == {"compile_error": 0.30, "invalid_launch": 0.10, "wrong_answer": 0.25,
                      "fault": 0.03, "hang": 0.02, "correct": 0.30}
    assert sum(shares.values()) == pytest.approx(1.0)
    counts = training_mix.class_counts(200, training_mix.MIX)
    assert counts == {"compile_error": 60, "invalid_launch": 20, "wrong_answer": 50,
                      "fault": 6, "hang": 4, "correct": 60}


def test_every_default_task_appears_and_none_dominates():
    samples = training_mix.generate(ROOT, count=400, seed=11)
    per_task = {task: 0 for task in training_mix.DEFAULT_TASKS}
    for sample in samples:
        per_task[sample["task"]] += 1
    assert min(per_task.values()) >= 400 / len(per_task) / 2, per_task
    assert max(per_task.values()) <= 400 / len(per_task) * 2, per_task


def test_same_seed_same_output_and_another_seed_another():
    first = run_generator("--seed", "5", "--count", "60")
    assert first == run_generator("--seed", "5", "--count", "60")
    assert first != run_generator("--seed", "6", "--count", "60")


def test_sources_are_distinct_and_a_tag_changes_only_the_sources():
    plain = training_mix.generate(ROOT, count=200, seed=9)
    tagged = training_mix.generate(ROOT, count=200, seed=9, tag="j8")
    assert len({s["source"] for s in plain}) == 200
    assert not {s["source"] for s in plain} & {s["source"] for s in tagged}
    assert [(s["task"], s["sample_id"], s["meta"]) for s in plain] == \
        [(s["task"], s["sample_id"], s["meta"]) for s in tagged]


def test_repeats_are_exact_copies_of_earlier_correct_samples():
    samples = training_mix.generate(ROOT, count=300, seed=4, repeat_share=0.5)
    seen = set()
    repeats = 0
    for sample in samples:
        if sample["meta"]["cache"] == "repeat":
            repeats += 1
            assert sample["meta"]["kind"] == "correct"
            assert sample["source"] in seen
        else:
            assert sample["source"] not in seen
        if sample["meta"]["kind"] == "correct":
            seen.add(sample["source"])
    assert repeats > 0


def test_all_tasks_generate():
    tasks = sorted(str(p.parent.relative_to(ROOT / "tasks"))
                   for p in (ROOT / "tasks").glob("*/*/solution.cu"))
    samples = training_mix.generate(ROOT, count=len(tasks) * 10, seed=1, tasks=tasks)
    assert {s["task"] for s in samples} <= set(tasks)
    assert len({s["source"] for s in samples}) == len(samples)


def test_mutations_change_the_source_where_they_apply():
    for task in training_mix.DEFAULT_TASKS:
        solution, reference = training_mix.task_sources(ROOT, task)
        for kind, mutations in training_mix.MUTATIONS.items():
            for name, mutate, on_reference in mutations:
                for path, text in (solution, reference) if on_reference else (solution,):
                    try:
                        changed = mutate(text, random.Random(0))
                    except training_mix.MutationError:
                        continue
                    assert changed != text, (task, path, name)


def test_launch_mutations_touch_the_directive_only():
    text = (ROOT / "tasks/llm/rms_norm/solution.cu").read_text()
    for name, mutate, _ in training_mix.MUTATIONS["invalid_launch"]:
        changed = mutate(text, random.Random(0))
        before = [l for l in text.splitlines() if "@launch" not in l]
        after = [l for l in changed.splitlines() if "@launch" not in l and "launch:" not in l]
        assert before == after, name
    blocked = training_mix.block_too_large(text, random.Random(0))
    assert re.search(r"<<<num_tokens, (2048|4096)>>>", blocked)


def test_wrong_answer_mutations():
    text = (ROOT / "tasks/llm/rms_norm/solution.cu").read_text()
    changed = training_mix.off_by_one(text, random.Random(0))
    loops = re.findall(r"i < hidden_size(?: - 1)?;", changed)
    assert loops == ["i < hidden_size;", "i < hidden_size - 1;"]  # only the output loop
    silu = (ROOT / "tasks/llm/silu_and_mul/solution.cu").read_text()
    with pytest.raises(training_mix.MutationError):
        training_mix.off_by_one(silu, random.Random(0))


def test_percentile_and_summary():
    assert throughput.percentile([5.0], 95) == 5.0
    assert throughput.percentile([1.0, 2.0, 3.0, 4.0], 50) == pytest.approx(2.5)
    assert throughput.percentile(list(map(float, range(101))), 95) == pytest.approx(95.0)
    records = [{"status": "ok", "wall_ms": 100.0, "meta": {"kind": "correct", "expect": "ok"}},
               {"status": "ok", "wall_ms": 300.0, "meta": {"kind": "correct", "expect": "ok"}},
               {"status": "infra_error", "wall_ms": 50.0, "message": "no GPU",
                "meta": {"kind": "hang", "expect": "timeout"}}]
    row = throughput.summarize(records, 2.0, 8)
    assert row["steps_per_s"] == 1.5 and row["scored_steps_per_s"] == 1.0
    assert row["latency_by_status"]["ok"]["p50_ms"] == 200.0
    assert row["expect_to_status"] == {"ok->ok": 2, "timeout->infra_error": 1}
    assert row["infra_error_reasons"] == {"no GPU": 1}


@pytest.mark.skipif(not os.environ.get("CRUCIBLE_BIN"), reason="CRUCIBLE_BIN is not set")
def test_throughput_driver_runs_against_a_real_server(tmp_path):
    out = tmp_path / "throughput.json"
    subprocess.run([sys.executable, str(HERE / "throughput.py"), os.environ["CRUCIBLE_BIN"],
                    "--count", "12", "--concurrency", "1,4", "--single-steps", "2",
                    "--runners", "1,2", "--json", str(out), "--work", str(tmp_path / "work")],
                   cwd=ROOT, check=True, timeout=240)
    report = json.loads(out.read_text())
    # One server per runner count, each through every concurrency.
    assert [(row["runners_per_gpu"], row["in_flight"]) for row in report["concurrency"]] == [
        (1, 1), (1, 4), (2, 1), (2, 4)]
    assert [s["runners_per_gpu"] for s in report["single_steps"]] == [1, 2]
    assert len(report["serve_commands"]) == 2
    assert "--runners-per-gpu 2" in report["serve_commands"][1]
    for row in report["concurrency"]:
        assert row["samples"] == 12 and row["steps_per_s"] > 0
        counts = sum(v["count"] for v in row["latency_by_status"].values())
        assert counts == 12
        # The statuses decided before the GPU stage are real on any machine.
        for key, n in row["expect_to_status"].items():
            expect, status = key.split("->")
            if expect in ("compile_error", "invalid_action"):
                assert status == expect, key
    assert all(s["steps"] == 2 for s in report["single_steps"])
    assert report["date"] and report["gpu"] and "throughput.py" in report["command"]
