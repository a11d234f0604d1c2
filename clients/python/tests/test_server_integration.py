"""The client against the real `crucible serve`: every op, every reachable error, pipelining,
malformed frames and disconnecting peers. Needs the server binary (see conftest.py)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import msgpack
import pytest
import zmq

from conftest import REPO, raw_dealer, raw_recv
from crucible_client import (
    STATUSES,
    AsyncClient,
    BadRequest,
    Client,
    CrucibleConnectionError,
    CrucibleTimeout,
    Env,
    EpisodeDone,
    InvalidArgument,
    TooLarge,
    UnknownEpisode,
    UnknownOp,
    UnknownTask,
)
from crucible_client.wire import body

SOLUTION = REPO / "tasks" / "llm" / "rms_norm" / "solution.cu"
# Used when the sample solution is not there: a well-formed kernel with a launch directive.
FALLBACK_SOURCE = """\
// @launch copy_kernel<<<1, 32>>>(out, input)
extern "C" __global__ void copy_kernel(float* out, const float* input) {
  out[threadIdx.x] = input[threadIdx.x];
}
"""
RESULT_KEYS = {"status", "message", "reward", "stages", "compile", "correctness", "timing"}


# -- shared facts about the running server ------------------------------------------------
@pytest.fixture(scope="module")
def facts(server):
    with Client(server.endpoint, timeout=30) as c:
        hello = body(c.request("hello", client="pytest"))
        tasks = c.request("tasks")["tasks"]
    if not tasks:
        pytest.fail("the server lists no tasks; the integration tests need at least one")
    ids = [t["id"] for t in tasks]
    task_id = "llm/rms_norm" if "llm/rms_norm" in ids else ids[0]
    return {"hello": hello, "tasks": tasks, "task_id": task_id}


@pytest.fixture(scope="module")
def source(facts):
    if facts["task_id"] == "llm/rms_norm" and SOLUTION.is_file():
        return SOLUTION.read_text()
    return FALLBACK_SOURCE


def check_result(result):
    assert RESULT_KEYS <= set(result), f"result misses {RESULT_KEYS - set(result)}: {result}"
    assert result["status"] in STATUSES
    assert isinstance(result["message"], str)
    reward = result["reward"]
    assert {"total", "terms", "preset", "infra"} <= set(reward), reward
    assert isinstance(reward["total"], float) and isinstance(reward["infra"], bool)
    assert isinstance(reward["terms"], dict) and isinstance(reward["preset"], str)
    assert isinstance(result["stages"], dict)
    for stage, ms in result["stages"].items():
        assert isinstance(stage, str) and isinstance(ms, (int, float)) and ms >= 0


def check_unavailable_stage_answer(facts, result):
    """A server that cannot compile or run (no GPU, or a stage not built) still answers a
    well-formed source truthfully: infra_error, marked infra so trainers drop the sample."""
    stages = facts["hello"]["stages"]
    if stages["compile"] and stages["gpu"]:
        return
    assert result["status"] == "infra_error", result
    assert result["reward"]["infra"] is True
    assert result["message"], "an infra_error must say what is missing"


# -- every op ---------------------------------------------------------------------------
def test_server_announces_it_is_listening(live_server):
    assert "listening on tcp://127.0.0.1:" in live_server.stderr_text()


def test_hello_describes_the_server(client, facts):
    hello = body(client.request("hello", client="pytest"))
    assert hello["server"] == "crucible"
    assert hello["version"] == "0.1.0"
    assert hello["protocol"] == 1
    assert isinstance(hello["arch"], str) and hello["arch"].startswith("sm_")
    assert isinstance(hello["gpus"], list)
    for gpu in hello["gpus"]:
        assert isinstance(gpu["index"], int) and isinstance(gpu["name"], str)
    assert set(hello["stages"]) >= {"compile", "gpu"}
    assert all(isinstance(v, bool) for v in hello["stages"].values())
    if not hello["gpus"]:
        assert hello["stages"]["gpu"] is False, "no GPU, yet the gpu stage claims to run"
    limits = hello["limits"]
    assert limits["max_frame_bytes"] == 1 << 20
    assert limits["max_source_bytes"] == 256 << 10
    assert limits["max_steps_cap"] == 10000
    assert hello["tasks"] == len(facts["tasks"])


def test_tasks_lists_every_task_and_filters_by_category(client, facts):
    tasks = client.request("tasks")["tasks"]
    assert len({t["id"] for t in tasks}) == len(tasks)
    for task in tasks:
        assert {"id", "category", "module", "title"} <= set(task)
        assert all(isinstance(task[k], str) and task[k] for k in ("id", "category", "title"))
    category = tasks[0]["category"]
    filtered = client.request("tasks", category=category)["tasks"]
    assert filtered and all(t["category"] == category for t in filtered)
    assert {t["id"] for t in filtered} == {t["id"] for t in tasks if t["category"] == category}
    assert client.request("tasks", category="no-such-category")["tasks"] == []


def test_task_returns_the_agent_view(client, facts):
    view = client.request("task", task=facts["task_id"])["task"]
    assert view["id"] == facts["task_id"]
    for key in ("category", "module", "title", "description", "symbols", "tensors", "scalars",
                "cases", "reference"):
        assert key in view, f"task view lacks '{key}': {sorted(view)}"
    assert isinstance(view["tensors"], list) and view["tensors"]
    assert isinstance(view["cases"], list) and view["cases"]
    # Tolerances come per output tensor (with per-dtype defaults) or as one task-level map.
    outputs = [t for t in view["tensors"] if t.get("role") in ("out", "inout")]
    assert outputs, "a task has at least one output tensor"
    assert "tolerance" in view or all("tolerance" in t for t in outputs), view["tensors"]
    # Only visible cases are shown: nothing marks a case hidden.
    assert not any(c.get("hidden") for c in view["cases"])


def test_reset_opens_an_episode_at_step_zero(client, facts):
    reply = client.request("reset", task=facts["task_id"], seed=1, max_steps=3)
    assert isinstance(reply["episode"], str) and reply["episode"]
    assert reply["task"]["id"] == facts["task_id"]
    assert reply["max_steps"] == 3 and reply["step"] == 0
    other = client.request("reset", task=facts["task_id"])
    assert other["episode"] != reply["episode"]
    assert isinstance(other["max_steps"], int) and 1 <= other["max_steps"] <= 10000
    for episode in (reply["episode"], other["episode"]):
        client.request("close", episode=episode)


def test_step_answers_with_a_result_and_counts_steps(live_server, facts, source):
    with Env(live_server.endpoint, timeout=120) as env:
        env.reset(facts["task_id"], seed=3, max_steps=5)
        observation, reward, terminated, truncated, info = env.step(source)
        check_result(info["result"])
        check_unavailable_stage_answer(facts, info["result"])
        assert observation["step"] == 1 == info["step"]
        assert observation["status"] == info["result"]["status"]
        assert info["episode"] == env.episode
        assert isinstance(reward, float) and reward == info["reward"]
        assert reward == pytest.approx(info["result"]["reward"]["total"])
        assert truncated is False
        best = info["best"]
        assert best is None or {"step", "reward", "status"} <= set(best)
        counted = [info["result"]["status"] != "infra_error"]
        if not terminated:
            _, _, _, _, info2 = env.step(source)
            assert info2["step"] == 2
            counted.append(info2["result"]["status"] != "infra_error")
        closed = env.close_episode()
        # infra_error steps are the server's fault: they do not use the episode's budget.
        assert closed["steps"] == sum(counted)
        assert "best" in closed


def test_infra_error_steps_do_not_use_the_budget_or_become_best(client, facts, source):
    episode = client.request("reset", task=facts["task_id"], max_steps=1)["episode"]
    first = client.request("step", episode=episode, source=source)
    if first["result"]["status"] != "infra_error":
        pytest.skip("this server has a GPU: its steps are not infra_error")
    assert first["truncated"] is False and first["best"] is None
    second = client.request("step", episode=episode, source=source)
    assert second["step"] == 2 and second["truncated"] is False
    closed = client.request("close", episode=episode)
    assert closed["steps"] == 0 and closed["best"] is None


def test_steps_until_max_steps_then_episode_done(client, facts):
    # A source with no launch directive is the agent's fault on any server: it counts.
    source = "__global__ void k() {}\n"
    episode = client.request("reset", task=facts["task_id"], max_steps=2)["episode"]
    replies = []
    for _ in range(2):
        reply = client.request("step", episode=episode, source=source)
        assert reply["result"]["status"] == "invalid_action"
        replies.append(reply)
        if reply["terminated"]:
            break
    last = replies[-1]
    assert last["terminated"] or (last["truncated"] and last["step"] == 2)
    assert [r["truncated"] for r in replies[:-1]] == [False] * (len(replies) - 1)
    with pytest.raises(EpisodeDone) as caught:
        client.request("step", episode=episode, source=source)
    assert caught.value.message
    closed = client.request("close", episode=episode)
    assert closed["steps"] == len(replies)


def test_close_ends_the_episode(client, facts, source):
    episode = client.request("reset", task=facts["task_id"])["episode"]
    closed = client.request("close", episode=episode)
    assert closed["episode"] == episode and closed["steps"] == 0 and closed["best"] is None
    with pytest.raises(UnknownEpisode):
        client.request("step", episode=episode, source=source)
    with pytest.raises(UnknownEpisode):
        client.request("close", episode=episode)


def test_score_is_stateless(client, facts, source):
    reply = client.request("score", task=facts["task_id"], source=source, seed=11)
    assert reply["task"] == facts["task_id"]
    check_result(reply["result"])
    check_unavailable_stage_answer(facts, reply["result"])
    assert isinstance(reply["reward"], float)
    assert reply["reward"] == pytest.approx(reply["result"]["reward"]["total"])
    with_spec = client.request("score", task=facts["task_id"], source=source,
                               reward={"preset": "default"})
    check_result(with_spec["result"])


def test_stats_counts_requests_errors_and_log_records(client, facts, source, live_server):
    before = body(client.request("stats"))
    for key in ("uptime_s", "requests", "replies", "errors", "statuses", "episodes_open",
                "inflight", "steps", "scores", "dropped_replies", "log"):
        assert key in before, f"stats lacks '{key}'"
    with pytest.raises(UnknownOp):
        client.request("frobnicate")
    client.request("score", task=facts["task_id"], source=source)
    after = body(client.request("stats"))
    assert after["requests"] >= before["requests"] + 3
    assert after["errors"].get("unknown_op", 0) == before["errors"].get("unknown_op", 0) + 1
    assert after["scores"] == before["scores"] + 1
    assert sum(after["statuses"].values()) > sum(before["statuses"].values())
    assert after["uptime_s"] >= before["uptime_s"]
    assert "path" not in after["log"], "the log's host path is not shown to clients"
    assert after["log"]["failed_appends"] == 0
    assert after["log"]["records"] > before["log"]["records"]
    assert live_server.log_path.stat().st_size > 0


# -- errors a client can cause -------------------------------------------------------------
@pytest.mark.parametrize(
    "op, fields, exception, text",
    [
        ("frobnicate", {}, UnknownOp, "unknown op 'frobnicate'"),
        ("task", {}, BadRequest, "missing field 'task'"),
        ("task", {"task": 5}, BadRequest, "field 'task' must be a string, got integer"),
        ("task", {"task": ""}, BadRequest, "must not be empty"),
        ("tasks", {"category": ["llm"]}, BadRequest, "field 'category' must be a string"),
        ("hello", {"client": {"a": 1}}, BadRequest, "field 'client' must be a string"),
        ("reset", {}, BadRequest, "missing field 'task'"),
        ("reset", {"task": "x", "seed": "7"}, BadRequest, "field 'seed'"),
        ("reset", {"task": "x", "reward": [1]}, BadRequest, "field 'reward' must be a map"),
        ("reset", {"task": "x", "options": "o"}, BadRequest, "field 'options' must be a map"),
        ("step", {"episode": "e"}, BadRequest, "missing field 'source'"),
        ("step", {"source": "s"}, BadRequest, "missing field 'episode'"),
        ("step", {"episode": "e", "source": b"bytes"}, BadRequest, "got binary"),
        ("step", {"episode": "e", "source": "s", "plan": 5}, BadRequest, "field 'plan'"),
        ("score", {"task": "x", "source": 1.5}, BadRequest, "got float"),
        ("close", {}, BadRequest, "missing field 'episode'"),
        ("reset", {"task": "x", "max_steps": 0}, InvalidArgument, "at least 1"),
        ("reset", {"task": "x", "max_steps": 10001}, InvalidArgument, "10000"),
        ("reset", {"task": "x", "seed": -1}, InvalidArgument, "must not be negative"),
        ("task", {"task": "t" * 129}, TooLarge, "limit is 128"),
    ],
)
def test_bad_requests_get_the_documented_error(client, op, fields, exception, text):
    with pytest.raises(exception) as caught:
        client.request(op, **fields)
    assert text in caught.value.message, caught.value.message


def test_bad_reward_specs_and_options_are_refused(client, facts, source):
    task = facts["task_id"]
    with pytest.raises(InvalidArgument) as caught:
        client.request("reset", task=task, reward={"preset": "no-such-preset"})
    assert "no-such-preset" in caught.value.message
    with pytest.raises(InvalidArgument):
        client.request("score", task=task, source=source, reward={"no_such_constant": 1.0})
    with pytest.raises(BadRequest) as caught:
        client.request("reset", task=task, options={"stop_on_ok": "yes"})
    assert "stop_on_ok" in caught.value.message


def test_unknown_task_for_every_op_that_names_one(client, source):
    with pytest.raises(UnknownTask):
        client.request("task", task="no/such_task")
    with pytest.raises(UnknownTask):
        client.request("reset", task="no/such_task")
    with pytest.raises(UnknownTask):
        client.request("score", task="no/such_task", source=source)


def test_unknown_episode(client, source):
    with pytest.raises(UnknownEpisode):
        client.request("step", episode="no-such-episode", source=source)
    with pytest.raises(UnknownEpisode):
        client.request("close", episode="no-such-episode")


def test_a_source_over_256_kib_is_too_large(client, facts):
    big = "/" * ((256 << 10) + 1)
    with pytest.raises(TooLarge):
        client.request("score", task=facts["task_id"], source=big)
    episode = client.request("reset", task=facts["task_id"])["episode"]
    with pytest.raises(TooLarge):
        client.request("step", episode=episode, source=big)
    closed = client.request("close", episode=episode)
    assert closed["steps"] == 0, "a refused step must not count"


def test_unsupported_version_and_envelope_errors_over_a_raw_socket(live_server):
    sock = raw_dealer(live_server.endpoint)
    try:
        cases = [
            ({"v": 2, "id": 1, "op": "hello"}, "unsupported_version", 1),
            ({"v": 0, "id": "s", "op": "hello"}, "unsupported_version", "s"),
            ({"id": 2, "op": "hello"}, "bad_request", 2),
            ({"v": "1", "id": 3, "op": "hello"}, "bad_request", 3),
            ({"v": 1, "id": 4}, "bad_request", 4),
            ({"v": 1, "id": 5, "op": 7}, "bad_request", 5),
            ({"v": 1, "op": "hello"}, "bad_request", None),
            ({"v": 1, "id": 1.5, "op": "hello"}, "bad_request", None),
            ({"v": 1, "id": [1], "op": "hello"}, "bad_request", None),
            ({"v": 1, "id": "i" * 129, "op": "hello"}, "too_large", None),
            ({"v": 1, "id": -7, "op": "hello"}, None, -7),
            ({"v": 1, "id": "x" * 128, "op": "hello"}, None, "x" * 128),
            ({"v": 1, "id": 2**64 - 1, "op": "hello"}, None, 2**64 - 1),
        ]
        for request, code, expected_id in cases:
            sock.send(msgpack.packb(request))
            reply = raw_recv(sock)
            assert reply["id"] == expected_id, (request, reply)
            if code is None:
                assert reply["ok"] is True, (request, reply)
            else:
                assert reply["ok"] is False and reply["error"]["code"] == code, (request, reply)
                assert reply["error"]["message"]
    finally:
        sock.close(linger=0)


# -- pipelining ---------------------------------------------------------------------------
def test_64_pipelined_requests_each_get_their_own_reply(client, facts, source):
    ids = [t["id"] for t in facts["tasks"]]
    futures = []
    for i in range(64):
        kind = i % 4
        if kind == 0:
            futures.append(("task", ids[i % len(ids)], client.submit("task", task=ids[i % len(ids)])))
        elif kind == 1:
            futures.append(("hello", f"c{i}", client.submit("hello", client=f"c{i}")))
        elif kind == 2:
            futures.append(("missing", f"none/{i}", client.submit("task", task=f"none/{i}")))
        else:
            futures.append(("score", facts["task_id"],
                            client.submit("score", task=facts["task_id"], source=source)))
    assert client.inflight > 0
    for kind, key, future in futures:
        if kind == "task":
            assert future.result()["task"]["id"] == key
        elif kind == "hello":
            assert future.result()["server"] == "crucible"
        elif kind == "missing":
            with pytest.raises(UnknownTask) as caught:
                future.result()
            assert key in caught.value.message
        else:
            assert future.result()["task"] == key
    assert client.inflight == 0
    assert client.dropped_replies == 0


def test_64_pipelined_raw_frames_with_string_ids_all_come_back(live_server, facts):
    sock = raw_dealer(live_server.endpoint)
    try:
        ids = [f"req-{i:02d}" for i in range(64)]
        for i, rid in enumerate(ids):
            op = "hello" if i % 2 else "tasks"
            sock.send(msgpack.packb({"v": 1, "id": rid, "op": op}))
        seen = {}
        for _ in ids:
            reply = raw_recv(sock)
            seen[reply["id"]] = reply
        assert sorted(seen) == ids
        for i, rid in enumerate(ids):
            assert seen[rid]["ok"] is True
            assert ("server" in seen[rid]) == bool(i % 2)
    finally:
        sock.close(linger=0)


def test_score_many_returns_results_in_order(client, facts, source):
    ids = [t["id"] for t in facts["tasks"]][:2]
    items = [(ids[i % len(ids)], source) for i in range(32)]
    started = time.monotonic()
    results = client.score_many(items, max_inflight=16, return_exceptions=True)
    assert time.monotonic() - started < 600
    assert [r["task"] for r in results] == [task for task, _ in items]
    for r in results:
        check_result(r["result"])


def test_async_client_pipelines_against_the_server(live_server, facts, source):
    async def scenario():
        async with AsyncClient(live_server.endpoint, timeout=120) as client:
            hello, tasks = await asyncio.gather(client.hello(), client.tasks())
            assert hello["server"] == "crucible" and len(tasks) == len(facts["tasks"])
            results = await client.score_many([(facts["task_id"], source)] * 8, max_inflight=8)
            assert [r["task"] for r in results] == [facts["task_id"]] * 8
            with pytest.raises(UnknownTask):
                await client.task("no/such_task")

    asyncio.run(scenario())


# -- hostile peers --------------------------------------------------------------------------
def _nested(depth):
    value = 0
    for _ in range(depth):
        value = [value]
    return {"v": 1, "id": 1, "op": "hello", "client": value}


MALFORMED = [
    ("not msgpack", b"\xc1"),
    ("empty frame", b""),
    ("truncated map", msgpack.packb({"v": 1, "id": 1, "op": "hello"})[:-3]),
    ("trailing bytes", msgpack.packb({"v": 1, "id": 1, "op": "hello"}) + b"\x00"),
    ("an integer", msgpack.packb(42)),
    ("an array", msgpack.packb([1, "hello"])),
    ("a string", msgpack.packb("hello")),
    ("integer map key", b"\x81\x01\x01"),
    ("ext type", msgpack.packb(msgpack.ExtType(5, b"abc"))),
    ("nested 40 deep", msgpack.packb(_nested(40))),
    ("array of 5000", msgpack.packb({"v": 1, "id": 1, "op": "hello", "client": [0] * 5000})),
    ("map of 300", msgpack.packb(dict({f"k{i}": i for i in range(300)}, v=1, id=1, op="hello"))),
    ("claims 4 GiB string", b"\xdb\xff\xff\xff\xff"),
    ("claims 4G map entries", b"\xdf\xff\xff\xff\xff"),
]


@pytest.mark.parametrize("name, payload", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_frames_get_an_error_reply_and_the_server_keeps_serving(
        live_server, name, payload):
    sock = raw_dealer(live_server.endpoint)
    try:
        sock.send(payload)
        reply = raw_recv(sock)
        assert reply["ok"] is False, reply
        assert reply["error"]["code"] in ("bad_request", "too_large"), reply
        assert reply["id"] is None, "an unreadable request cannot be matched"
        sock.send(msgpack.packb({"v": 1, "id": "after", "op": "hello"}))
        after = raw_recv(sock)
        assert after["id"] == "after" and after["ok"] is True
    finally:
        sock.close(linger=0)


def test_a_multipart_request_does_not_break_the_server(live_server):
    sock = raw_dealer(live_server.endpoint)
    try:
        part = msgpack.packb({"v": 1, "id": "multi", "op": "hello"})
        sock.send_multipart([part, part])
        sock.send(msgpack.packb({"v": 1, "id": "after", "op": "hello"}))
        replies = [raw_recv(sock)]
        if replies[0]["id"] != "after":
            replies.append(raw_recv(sock))
        assert replies[-1]["id"] == "after" and replies[-1]["ok"] is True
        assert all(r["id"] in ("multi", None, "after") for r in replies)
    finally:
        sock.close(linger=0)


def test_a_frame_over_1_mib_gets_too_large_addressed_to_no_id(live_server):
    sock = raw_dealer(live_server.endpoint)
    try:
        sock.send(msgpack.packb({"v": 1, "id": "big", "op": "hello", "client": "x" * (1 << 20)}))
        reply = raw_recv(sock)
        assert reply["ok"] is False and reply["error"]["code"] == "too_large", reply
        sock.send(msgpack.packb({"v": 1, "id": "after", "op": "hello"}))
        assert raw_recv(sock)["id"] == "after"
    finally:
        sock.close(linger=0)


def test_a_client_sending_an_oversized_frame_is_not_left_hanging(live_server):
    """Past 1 MiB the server answers too_large with a nil id (or drops the peer outright for
    a far larger frame); the client must fail the request by its timeout or on the
    disconnect, and then keep working."""
    for size in ((1 << 20) + 1024, 16 << 20):
        with Client(live_server.endpoint, timeout=3, max_frame_bytes=None) as unchecked:
            assert unchecked.request("hello")["server"] == "crucible"
            started = time.monotonic()
            future = unchecked.submit("hello", client="x" * size)
            with pytest.raises((TooLarge, CrucibleConnectionError, CrucibleTimeout)):
                future.result(timeout=30)
            assert time.monotonic() - started < 10
            assert unchecked.request("hello")["server"] == "crucible"
    with Client(live_server.endpoint, timeout=10) as checked:
        with pytest.raises(TooLarge):
            checked.submit("hello", client="x" * (1 << 20))


def test_a_client_that_disconnects_mid_request_does_not_disturb_others(
        live_server, facts, source, client):
    before = body(client.request("stats"))
    context = zmq.Context()
    leaver = context.socket(zmq.DEALER)
    leaver.setsockopt(zmq.LINGER, 2000)  # close() flushes the requests, then hangs up
    leaver.connect(live_server.endpoint)
    for i in range(32):
        leaver.send(msgpack.packb({"v": 1, "id": i, "op": "score", "task": facts["task_id"],
                                   "source": source}))
    leaver.close()
    context.term()  # returns once the frames are on the wire and the connection is gone
    futures = [client.submit("score", task=facts["task_id"], source=source) for _ in range(8)]
    futures += [client.submit("hello") for _ in range(8)]
    for future in futures:
        assert future.result()["ok"] is True
    deadline = time.monotonic() + 120
    while True:
        after = body(client.request("stats"))
        if after["inflight"] == 0 and after["scores"] >= before["scores"] + 40:
            break
        assert time.monotonic() < deadline, f"the departed client's work never finished: {after}"
        time.sleep(0.1)
    assert after["scores"] == before["scores"] + 40, "every request was scored exactly once"
    # The leaver was gone before (nearly) all its replies were ready; the server counts them.
    assert after["dropped_replies"] > before["dropped_replies"]
    assert client.dropped_replies == 0


# -- the command line and the examples --------------------------------------------------------
def _run(args, timeout=180):
    env = dict(os.environ, PYTHONPATH=str(REPO / "clients" / "python" / "src"))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=str(REPO))


def test_cli_prints_json(live_server, facts, tmp_path, source):
    done = _run(["-m", "crucible_client", "-e", live_server.endpoint, "hello"])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["server"] == "crucible"
    path = tmp_path / "kernel.cu"
    path.write_text(source)
    done = _run(["-m", "crucible_client", "-e", live_server.endpoint, "score",
                 facts["task_id"], str(path)])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"]["status"] in STATUSES
    done = _run(["-m", "crucible_client", "-e", live_server.endpoint, "task", "no/such_task"])
    assert done.returncode == 1
    assert json.loads(done.stdout)["error"]["code"] == "unknown_task"


def test_scripted_agent_example_runs(live_server, facts, tmp_path, source):
    path = tmp_path / "kernel.cu"
    path.write_text(source)
    done = _run([str(REPO / "examples" / "python" / "scripted_agent.py"), "--endpoint",
                 live_server.endpoint, "--task", facts["task_id"], "--file", str(path)])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "reward" in done.stdout


def test_batch_trainer_example_runs(live_server, facts, tmp_path, source):
    path = tmp_path / "kernel.cu"
    path.write_text(source)
    done = _run([str(REPO / "examples" / "python" / "batch_trainer.py"), "--endpoint",
                 live_server.endpoint, "--task", facts["task_id"], "--file", str(path),
                 "-n", "16", "--max-inflight", "8"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert "scores/s" in done.stdout
