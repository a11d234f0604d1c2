"""Tests of the multi-GPU driver (bench/gpu/multi_gpu.py) that need no GPU.

The end-to-end smoke test starts real servers without --gpus (every sample that compiles is
then infra_error at the GPU stage) and needs a crucible binary: set CRUCIBLE_BIN (ctest does);
without it that test reports itself skipped.
"""
import json
import os
import pathlib
import sys
import threading
import time
from concurrent.futures import Future

import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
import multi_gpu  # noqa: E402


class FakePool:
    """Answers each score after the delay its source names, on a thread of its own, so replies
    come back out of order; counts the requests outstanding at once."""

    def __init__(self, endpoints, timeout):
        self.clients, self.lock = [], threading.Lock()
        self.outstanding = self.most = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def submit(self, op, task, source, seed):
        future = Future()
        with self.lock:
            self.outstanding += 1
            self.most = max(self.most, self.outstanding)

        def answer():
            time.sleep(float(source))
            with self.lock:
                self.outstanding -= 1
            future.set_result({"result": {"status": "ok", "speedup": 1.0 + seed,
                                          "message": task}})

        threading.Thread(target=answer, daemon=True).start()
        return future


def test_the_window_stays_full_and_each_latency_ends_at_its_own_reply(monkeypatch):
    pools = []
    monkeypatch.setattr(multi_gpu, "Pool", lambda endpoints, timeout: pools.append(
        FakePool(endpoints, timeout)) or pools[-1])
    # The first request is slow: the four behind it must not wait for it, nor be timed to it.
    delays = [0.6, 0.05, 0.05, 0.05, 0.05]
    samples = [{"task": "llm/rms_norm", "sample_id": str(i), "source": str(d), "meta": {}}
               for i, d in enumerate(delays)]
    records, wall_s = multi_gpu.score_window(["tcp://a"], samples, 2, 10, 30)
    assert [r["sample_id"] for r in records] == [str(i) for i in range(5)]
    assert [r["speedup"] for r in records] == [11.0, 12.0, 13.0, 14.0, 15.0]
    assert pools[0].most == 2
    assert records[0]["wall_ms"] >= 550
    assert all(r["wall_ms"] < 400 for r in records[1:])
    # Four short requests behind one long one through two slots: the long one sets the wall.
    assert 0.6 <= wall_s < 1.0


def test_a_failed_request_is_a_record_not_an_exception(monkeypatch):
    class Failing(FakePool):
        def submit(self, op, task, source, seed):
            future = Future()
            future.set_exception(TimeoutError("no reply within 30 s"))
            return future

    monkeypatch.setattr(multi_gpu, "Pool", lambda endpoints, timeout: Failing(endpoints, timeout))
    samples = [{"task": "llm/rms_norm", "sample_id": "0", "source": "x", "meta": {}}]
    records, _ = multi_gpu.score_window(["tcp://a"], samples, 4, 0, 30)
    assert records[0]["status"] == "client_error"
    assert "no reply within 30 s" in records[0]["message"]


def test_stats_delta_subtracts_per_gpu_and_keeps_the_runner_count():
    before = {"scores": 5, "gpus": {"0": {"runners": 4, "jobs": 2, "busy_s": 1.5, "timeouts": 0}}}
    after = {"scores": 9, "gpus": {"0": {"runners": 4, "jobs": 5, "busy_s": 4.0, "timeouts": 1},
                                   "1": {"runners": 4, "jobs": 3, "busy_s": 2.0, "timeouts": 0}}}
    assert multi_gpu.stats_delta(before, after) == {"scores": 4, "gpus": {
        "0": {"jobs": 3, "busy_s": 2.5, "timeouts": 1, "runners": 4},
        "1": {"jobs": 3, "busy_s": 2.0, "timeouts": 0, "runners": 4}}}


def test_arguments_are_checked():
    for bad in (["--gpus", "0,1,2"], ["--gpus", "0,0"], ["--parts", "mix,speed"],
                ["--in-flight", "0"]):
        with pytest.raises(SystemExit):
            multi_gpu.main(["crucible", *bad])


@pytest.mark.skipif(not os.environ.get("CRUCIBLE_BIN"), reason="CRUCIBLE_BIN is not set")
def test_the_driver_runs_against_real_servers(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "multi_gpu.json"
    report = multi_gpu.main([os.environ["CRUCIBLE_BIN"], "--no-gpu-selection", "--count", "16",
                             "--in-flight", "4", "--rescore", "2", "--fault-steps", "2",
                             "--work", str(tmp_path / "work"), "--json", str(out)])
    assert json.loads(out.read_text()) == report
    assert report["complete"] and report["gpus"] == ["0", "1"]
    rows = report["mix"]["configurations"]
    assert [row["configuration"] for row in rows] == [
        "one GPU, one server", "two GPUs, one server", "two GPUs, two servers, Pool"]
    assert [len(row["servers"]) for row in rows] == [1, 1, 2]
    assert rows[0]["steps_per_s_over_one_gpu"] == 1.0
    for row in rows:
        assert row["samples"] == 16 and row["steps_per_s"] > 0
        assert sum(v["count"] for v in row["latency_by_status"].values()) == 16
        # Every request reached a server: the counts are the servers' own.
        assert sum(server["scores"] for server in row["per_server"]) == 16
        for key in row["expect_to_status"]:
            expect, status = key.split("->")
            if expect in ("compile_error", "invalid_action"):
                assert status == expect, key
    # The Pool spread the mix over both servers.
    assert all(server["scores"] > 0 for server in rows[2]["per_server"])
    # One kernel on each server, in turns.
    assert set(report["rescore"]["per_gpu"]) == {"0", "1"}
    assert all(row["steps"] == 2 for row in report["rescore"]["per_gpu"].values())
    faults = report["faults"]
    for name in ("alone", "beside_hang", "beside_crash"):
        assert faults[name]["steps"] == 2
    # The second client kept faulting kernels in flight while the steps ran.
    assert faults["beside_hang"]["faults"]["requests"] > 0
    assert set(k.split("->")[0] for k in faults["beside_hang"]["faults"]["kind_to_status"]) == {
        "hang"}
    assert set(k.split("->")[0] for k in faults["beside_crash"]["faults"]["kind_to_status"]) <= {
        "trap", "bad_address"}
    assert faults["beside_crash"]["server_delta"]["scores"] >= 2


@pytest.mark.skipif(not os.environ.get("CRUCIBLE_BIN"), reason="CRUCIBLE_BIN is not set")
def test_one_gpu_runs_the_baseline_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    report = multi_gpu.main([os.environ["CRUCIBLE_BIN"], "--no-gpu-selection", "--gpus", "0",
                             "--count", "6", "--in-flight", "3", "--rescore", "1",
                             "--fault-steps", "1", "--work", str(tmp_path / "work")])
    assert report["complete"] and report["gpus"] == ["0"]
    assert [row["configuration"] for row in report["mix"]["configurations"]] == [
        "one GPU, one server"]
    assert list(report["rescore"]["per_gpu"]) == ["0"]
    assert "speedup_ratio_b_over_a" not in report["rescore"]
    assert report["faults"] == "needs two GPUs"
