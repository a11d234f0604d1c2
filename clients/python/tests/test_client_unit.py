"""Client behaviour against a hand-driven ROUTER: envelopes, id matching, errors, timeouts."""

from __future__ import annotations

import asyncio
import threading
import time

import msgpack
import pytest

from crucible_client import (
    ERROR_CLASSES,
    AsyncClient,
    Client,
    CrucibleConnectionError,
    CrucibleError,
    CrucibleTimeout,
    Env,
    EpisodeDone,
    ProtocolError,
    TooLarge,
    UnknownTask,
)
from crucible_client.wire import MAX_FRAME_BYTES

SERVER_CODES = [
    "bad_request", "unsupported_version", "unknown_op", "unknown_task", "unknown_episode",
    "episode_done", "too_large", "invalid_argument", "busy", "shutting_down", "internal",
]


def test_request_envelope_has_version_op_and_a_fresh_integer_id(fake_server):
    with Client(fake_server.endpoint, timeout=5) as client:
        client.submit("reset", task="llm/rms_norm", seed=7, max_steps=None)
        client.submit("hello")
        _, first = fake_server.recv()
        _, second = fake_server.recv()
    assert first == {"v": 1, "id": first["id"], "op": "reset", "task": "llm/rms_norm", "seed": 7}
    assert "max_steps" not in first, "fields set to None must be left out"
    assert isinstance(first["id"], int) and isinstance(second["id"], int)
    assert second["id"] != first["id"]


def test_replies_out_of_order_reach_the_request_they_answer(fake_server):
    with Client(fake_server.endpoint, timeout=5) as client:
        futures = [client.submit("task", task=f"t{i}") for i in range(3)]
        requests = [fake_server.recv() for _ in range(3)]
        for peer, request in reversed(requests):
            fake_server.reply(peer, request["id"], task={"id": request["task"]})
        for i, future in enumerate(futures):
            assert future.result(timeout=5)["task"]["id"] == f"t{i}"


def test_a_reply_for_an_unknown_id_is_dropped_and_counted(fake_server):
    with Client(fake_server.endpoint, timeout=5) as client:
        future = client.submit("hello")
        peer, request = fake_server.recv()
        fake_server.reply(peer, request["id"] + 1000, server="stray")
        fake_server.reply(peer, "not-an-id-we-sent", server="stray")
        fake_server.reply(peer, request["id"], server="crucible")
        assert future.result(timeout=5)["server"] == "crucible"
        assert client.dropped_replies == 2


@pytest.mark.parametrize("code", SERVER_CODES)
def test_each_wire_error_code_raises_its_own_exception(fake_server, code):
    # busy_retries=0: a `busy` reply raises at once instead of being retried.
    with Client(fake_server.endpoint, timeout=5, busy_retries=0) as client:
        future = client.submit("hello")
        peer, request = fake_server.recv()
        fake_server.error(peer, request["id"], code, f"the {code} message")
        with pytest.raises(CrucibleError) as caught:
            future.result(timeout=5)
    assert type(caught.value) is ERROR_CLASSES[code]
    assert caught.value.code == code
    assert caught.value.message == f"the {code} message"
    assert caught.value.reply["id"] == request["id"]


def test_an_unknown_error_code_keeps_its_name(fake_server):
    with Client(fake_server.endpoint, timeout=5) as client:
        future = client.submit("hello")
        peer, request = fake_server.recv()
        fake_server.error(peer, request["id"], "quota_exceeded", "slow down")
        with pytest.raises(CrucibleError) as caught:
            future.result(timeout=5)
    assert type(caught.value) is CrucibleError
    assert caught.value.code == "quota_exceeded"


@pytest.mark.parametrize(
    "reply",
    [
        {"v": 1, "ok": "yes"},
        {"v": 2, "ok": True},
        {"v": 1, "ok": False},
        {"v": 1, "ok": False, "error": {"code": 3, "message": "x"}},
        {"v": 1},
    ],
    ids=["ok-not-bool", "wrong-version", "error-missing", "error-code-not-str", "ok-missing"],
)
def test_a_malformed_reply_raises_protocol_error(fake_server, reply):
    with Client(fake_server.endpoint, timeout=5) as client:
        future = client.submit("hello")
        peer, request = fake_server.recv()
        fake_server.send(peer, dict(reply, id=request["id"]))
        with pytest.raises(ProtocolError):
            future.result(timeout=5)


def test_undecodable_frames_are_counted_and_the_request_still_times_out(fake_server):
    with Client(fake_server.endpoint, timeout=0.5) as client:
        future = client.submit("hello")
        peer, _ = fake_server.recv()
        fake_server.send(peer, b"\xc1\xc1")  # 0xc1 is never valid msgpack
        fake_server.send(peer, msgpack.packb([1, 2]))
        with pytest.raises(CrucibleTimeout):
            future.result(timeout=5)
        assert client.protocol_violations == 2


def test_a_reply_with_a_string_that_is_not_utf8_still_reaches_its_request(fake_server):
    with Client(fake_server.endpoint, timeout=5) as client:
        future = client.submit("hello")
        peer, request = fake_server.recv()
        good = msgpack.packb({"v": 1, "id": request["id"], "ok": True, "server": "ab"})
        # Rewrite the 2-byte str "ab" into the first two bytes of an em dash (E2 80 94).
        bad = good.replace(b"\xa2ab", b"\xa2\xe2\x80")
        assert bad != good
        fake_server.send(peer, bad)
        reply = future.result(timeout=5)
        assert reply["server"] == "\ufffd"
        assert client.protocol_violations == 0


def test_no_reply_raises_timeout_and_a_late_reply_is_dropped(fake_server):
    with Client(fake_server.endpoint, timeout=0.3) as client:
        started = time.monotonic()
        future = client.submit("score", task="t", source="x")
        peer, request = fake_server.recv()
        with pytest.raises(CrucibleTimeout) as caught:
            future.result(timeout=5)
        elapsed = time.monotonic() - started
        assert 0.25 <= elapsed < 2.0
        assert isinstance(caught.value, TimeoutError) and caught.value.code == "timeout"
        fake_server.reply(peer, request["id"], result={})
        deadline = time.monotonic() + 2
        while client.dropped_replies == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert client.dropped_replies == 1
        assert client.inflight == 0


def test_per_request_timeout_overrides_the_client_default(fake_server):
    with Client(fake_server.endpoint, timeout=60) as client:
        future = client.submit("hello", timeout=0.2)
        fake_server.recv()
        with pytest.raises(CrucibleTimeout):
            future.result(timeout=5)


def test_an_oversized_request_is_refused_before_sending(fake_server):
    with Client(fake_server.endpoint, timeout=5) as client:
        with pytest.raises(TooLarge) as caught:
            client.submit("score", task="t", source="x" * MAX_FRAME_BYTES)
        assert "not sent" in caught.value.message
        assert fake_server.recv_nothing()
        assert client.inflight == 0


def test_losing_the_connection_fails_requests_in_flight_without_waiting_for_timeout(fake_server):
    with Client(fake_server.endpoint, timeout=60) as client:
        future = client.submit("step", episode="e", source="x")
        fake_server.recv()
        started = time.monotonic()
        fake_server.close()
        with pytest.raises(CrucibleConnectionError) as caught:
            future.result(timeout=10)
        assert time.monotonic() - started < 5
        assert isinstance(caught.value, ConnectionError) and caught.value.code == "io"
        assert client.disconnects >= 1


def test_closing_the_client_fails_pending_requests_and_refuses_new_ones(fake_server):
    client = Client(fake_server.endpoint, timeout=60)
    future = client.submit("hello")
    fake_server.recv()
    client.close()
    with pytest.raises(CrucibleConnectionError):
        future.result(timeout=5)
    with pytest.raises(CrucibleConnectionError):
        client.submit("hello")
    assert client.closed


def test_score_many_keeps_at_most_max_inflight_and_returns_results_in_order(fake_server):
    items = [("task/a" if i % 2 else "task/b", f"source {i}") for i in range(10)]
    results = {}

    def run():
        with Client(fake_server.endpoint, timeout=10) as client:
            results["out"] = client.score_many(items, max_inflight=3, seed=5)

    worker = threading.Thread(target=run)
    worker.start()
    answered = 0
    while answered < len(items):
        batch = [fake_server.recv()]
        while not fake_server.recv_nothing(0.15):
            batch.append(fake_server.recv())
        assert len(batch) <= 3, f"{len(batch)} requests in flight with max_inflight=3"
        for peer, request in reversed(batch):
            assert request["op"] == "score" and request["seed"] == 5
            fake_server.reply(peer, request["id"], task=request["task"],
                              result={"status": "ok", "message": request["source"]}, reward=1.0)
            answered += 1
    worker.join(timeout=10)
    assert [r["result"]["message"] for r in results["out"]] == [s for _, s in items]
    assert [r["task"] for r in results["out"]] == [t for t, _ in items]


def test_score_many_can_return_failures_in_place(fake_server):
    results = {}

    def run():
        with Client(fake_server.endpoint, timeout=10) as client:
            results["out"] = client.score_many(
                [("good", "a"), ("missing", "b"), ("good", "c")], return_exceptions=True)

    worker = threading.Thread(target=run)
    worker.start()
    for _ in range(3):
        peer, request = fake_server.recv()
        if request["task"] == "missing":
            fake_server.error(peer, request["id"], "unknown_task", "no task 'missing'")
        else:
            fake_server.reply(peer, request["id"], task="good", result={}, reward=0.0)
    worker.join(timeout=10)
    out = results["out"]
    assert out[0]["task"] == "good" and out[2]["task"] == "good"
    assert isinstance(out[1], UnknownTask)


def test_many_threads_share_one_client(fake_server):
    stop = threading.Event()

    def echo():
        while not stop.is_set():
            if fake_server.socket.poll(50):
                peer, request = fake_server.recv()
                fake_server.reply(peer, request["id"], echo=request["client"])

    server_thread = threading.Thread(target=echo)
    server_thread.start()
    failures = []
    try:
        with Client(fake_server.endpoint, timeout=10) as client:
            def worker(n):
                futures = {f"{n}-{i}": client.submit("hello", client=f"{n}-{i}") for i in range(16)}
                for name, future in futures.items():
                    if future.result()["echo"] != name:
                        failures.append(name)

            threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=20)
    finally:
        stop.set()
        server_thread.join()
    assert failures == []


def test_env_step_returns_the_gym_five_tuple(fake_server):
    result = {"status": "infra_error", "message": "no CUDA device on this server",
              "reward": {"total": 0.0, "terms": {}, "preset": "default", "infra": True},
              "stages": {}, "compile": None, "correctness": None, "timing": None}
    with Env(fake_server.endpoint, timeout=5) as env:
        with pytest.raises(RuntimeError):
            env.step("__global__ void k() {}")
        outcome = {}
        worker = threading.Thread(target=lambda: outcome.update(obs=env.reset("t", seed=3, max_steps=2)))
        worker.start()
        peer, request = fake_server.recv()
        assert request["op"] == "reset" and request["max_steps"] == 2 and request["seed"] == 3
        fake_server.reply(peer, request["id"], episode="ep-1", task={"id": "t"}, max_steps=2, step=0)
        worker.join(timeout=5)
        assert outcome["obs"] == {"episode": "ep-1", "task": {"id": "t"}, "max_steps": 2, "step": 0}

        worker = threading.Thread(target=lambda: outcome.update(step=env.step(b"src")))
        worker.start()
        peer, request = fake_server.recv()
        assert request == {"v": 1, "id": request["id"], "op": "step", "episode": "ep-1", "source": "src"}
        fake_server.reply(peer, request["id"], episode="ep-1", step=2, result=result, reward=0.0,
                          terminated=False, truncated=True, best=None)
        worker.join(timeout=5)
        observation, reward, terminated, truncated, info = outcome["step"]
        assert observation["status"] == "infra_error" and observation["step"] == 2
        assert reward == 0.0 and isinstance(reward, float)
        assert (terminated, truncated) == (False, True)
        assert info["result"] == result and info["best"] is None

        # Leaving the block closes the episode: answer that close so __exit__ finishes cleanly.
        closer = threading.Thread(target=env.close)
        closer.start()
        peer, request = fake_server.recv()
        assert request["op"] == "close" and request["episode"] == "ep-1"
        fake_server.reply(peer, request["id"], episode="ep-1", steps=2, best=None)
        closer.join(timeout=5)
    assert env.client.closed


def test_env_maps_episode_done_to_its_exception(fake_server):
    with Client(fake_server.endpoint, timeout=5) as client:
        future = client.submit("step", episode="e", source="s")
        peer, request = fake_server.recv()
        fake_server.error(peer, request["id"], "episode_done", "episode e took its 2 steps")
        with pytest.raises(EpisodeDone):
            future.result(timeout=5)


def test_async_client_matches_out_of_order_replies_and_maps_errors(fake_server):
    async def scenario():
        async with AsyncClient(fake_server.endpoint, timeout=5) as client:
            first = asyncio.ensure_future(client.request("task", task="a"))
            second = asyncio.ensure_future(client.request("task", task="b"))
            third = asyncio.ensure_future(client.request("task", task="c"))
            requests = []
            while len(requests) < 3:
                await asyncio.sleep(0.01)
                while fake_server.socket.poll(0):
                    requests.append(fake_server.recv())
            for peer, request in reversed(requests):
                if request["task"] == "c":
                    fake_server.error(peer, request["id"], "unknown_task", "no task c")
                else:
                    fake_server.reply(peer, request["id"], task={"id": request["task"]})
            assert (await first)["task"]["id"] == "a"
            assert (await second)["task"]["id"] == "b"
            with pytest.raises(UnknownTask):
                await third
            with pytest.raises(CrucibleTimeout):
                await client.request("hello", timeout=0.2)

    asyncio.run(scenario())


def test_env_reset_replaces_an_episode_that_expired_on_the_server(fake_server):
    env = Env(fake_server.endpoint, timeout=5)
    env.episode = "ep-old"
    outcome = {}
    worker = threading.Thread(target=lambda: outcome.update(obs=env.reset("t")))
    worker.start()
    peer, request = fake_server.recv()
    assert request["op"] == "close" and request["episode"] == "ep-old"
    fake_server.error(peer, request["id"], "unknown_episode", "expired")
    peer, request = fake_server.recv()
    assert request["op"] == "reset"
    fake_server.reply(peer, request["id"], episode="ep-new", task={"id": "t"}, max_steps=4, step=0)
    worker.join(timeout=5)
    assert outcome["obs"]["episode"] == "ep-new" == env.episode
    env.client.close()


def test_gym_wrapper_speaks_gymnasium(fake_server):
    gymnasium = pytest.importorskip("gymnasium")
    from crucible_client import CrucibleGymEnv

    env = CrucibleGymEnv("llm/rms_norm", fake_server.endpoint, max_steps=1, timeout=5,
                         hardware_notes=False)
    assert isinstance(env, gymnasium.Env)
    assert env.action_space.contains("__global__ void k(float* x) {\n\tx[0] = 1.0f;\n}\n")
    outcome = {}
    worker = threading.Thread(target=lambda: outcome.update(reset=env.reset(seed=9)))
    worker.start()
    peer, request = fake_server.recv()
    assert (request["op"], request["task"], request["seed"], request["max_steps"]) == (
        "reset", "llm/rms_norm", 9, 1)
    fake_server.reply(peer, request["id"], episode="ep-g",
                      task={"id": "llm/rms_norm", "title": "RMSNorm", "description": "x"},
                      max_steps=1, step=0)
    worker.join(timeout=5)
    observation, info = outcome["reset"]
    assert observation in env.observation_space
    assert observation["text"].startswith("# RMSNorm") and int(observation["status"]) == 0
    assert info["task"] == "llm/rms_norm" and "ep-g" not in repr(info)

    worker = threading.Thread(target=lambda: outcome.update(step=env.step("src")))
    worker.start()
    peer, request = fake_server.recv()
    fake_server.reply(peer, request["id"], episode="ep-g", step=1, reward=-1.0,
                      result={"status": "compile_error", "message": "x"},
                      terminated=False, truncated=True, best=None)
    worker.join(timeout=5)
    observation, reward, terminated, truncated, info = outcome["step"]
    assert observation in env.observation_space
    assert observation["text"].startswith("Step 1: compile_error")
    assert info["result"]["status"] == "compile_error" and reward == -1.0 and truncated
    assert "ep-g" not in repr(info)

    closer = threading.Thread(target=env.close)
    closer.start()
    peer, request = fake_server.recv()
    fake_server.reply(peer, request["id"], episode="ep-g", steps=1, best=None)
    closer.join(timeout=5)


# ----------------------------------------------------------------------------------------
# Request tags: checked before sending, the client's default on reset and score only.
@pytest.mark.parametrize("tag, error, text", [
    ({f"k{i}": i for i in range(9)}, ValueError, "9 keys"),
    ({"k" * 33: 1}, ValueError, "over 32 bytes"),
    ({"": 1}, ValueError, "must not be empty"),
    ({"model": "q" * 257}, ValueError, "over 256 bytes"),
    ({"model": "é" * 129}, ValueError, "over 256 bytes"),  # 258 bytes in UTF-8
    ({"rollout": 1 << 64}, ValueError, "64 bits"),
    ({"rollout": True}, TypeError, "string or an integer"),
    ({"rollout": 1.5}, TypeError, "string or an integer"),
    ({"nested": {"a": 1}}, TypeError, "string or an integer"),
    ({3: "x"}, TypeError, "keys must be strings"),
    (["run", "x"], TypeError, "must be a map"),
])
def test_a_bad_tag_is_refused_before_sending(fake_server, tag, error, text):
    with Client(fake_server.endpoint, timeout=5) as client:
        with pytest.raises(error, match=text):
            client.submit("reset", task="t", tag=tag)
        assert fake_server.recv_nothing()
    with pytest.raises(error, match=text):
        Client(fake_server.endpoint, tag=tag)


def test_the_largest_tag_allowed_goes_out_as_given(fake_server):
    tag = {"k" * 31 + str(i): ("v" * 256 if i % 2 else (1 << 64) - 1 - i) for i in range(8)}
    tag["k" * 31 + "0"] = -(1 << 63)
    with Client(fake_server.endpoint, timeout=5) as client:
        client.submit("score", task="t", source="s", tag=tag)
        _, request = fake_server.recv()
    assert request["tag"] == tag


def test_the_clients_default_tag_goes_on_reset_and_score_but_not_step(fake_server):
    with Client(fake_server.endpoint, timeout=5, tag={"run": "grpo-7", "model": "qwen"}) as client:
        client.submit("reset", task="t", tag={"rollout": 12, "model": "llama"})
        client.submit("score", task="t", source="s")
        client.submit("step", episode="e", source="s")
        client.submit("step", episode="e", source="s", tag={"retry": 1})
        client.submit("hello")
        requests = [fake_server.recv()[1] for _ in range(5)]
    reset, score, step, tagged_step, hello = requests
    # The request's own keys win over the default's.
    assert reset["tag"] == {"run": "grpo-7", "model": "llama", "rollout": 12}
    assert score["tag"] == {"run": "grpo-7", "model": "qwen"}
    # A step without a tag inherits its episode's reset tag on the server: none is sent.
    assert "tag" not in step
    assert tagged_step["tag"] == {"retry": 1}
    assert "tag" not in hello


def test_a_merged_tag_over_eight_keys_is_refused(fake_server):
    with Client(fake_server.endpoint, timeout=5, tag={f"k{i}": i for i in range(5)}) as client:
        with pytest.raises(ValueError, match="9 keys"):
            client.submit("reset", task="t", tag={"a": 1, "b": 2, "c": 3, "d": 4})
        assert fake_server.recv_nothing()


def test_env_sends_reset_step_and_score_tags_and_returns_the_echo(fake_server):
    with Env(fake_server.endpoint, timeout=5, tag={"run": "r"}) as env:
        outcome = {}
        worker = threading.Thread(target=lambda: outcome.update(
            obs=env.reset("t", tag={"rollout": 3})))
        worker.start()
        peer, request = fake_server.recv()
        assert request["tag"] == {"run": "r", "rollout": 3}
        fake_server.reply(peer, request["id"], episode="ep-1", task={"id": "t"}, max_steps=2,
                          step=0, tag=request["tag"])
        worker.join(timeout=5)
        assert outcome["obs"]["tag"] == {"run": "r", "rollout": 3}

        for kwargs, expected in (({}, None), ({"tag": {"attempt": 2}}, {"attempt": 2})):
            worker = threading.Thread(target=lambda: outcome.update(step=env.step("s", **kwargs)))
            worker.start()
            peer, request = fake_server.recv()
            assert request.get("tag") == expected
            fake_server.reply(peer, request["id"], episode="ep-1", step=1, reward=0.0,
                              result={"status": "ok"}, terminated=False, truncated=False,
                              best=None, tag=expected or {"run": "r", "rollout": 3})
            worker.join(timeout=5)
            assert outcome["step"][4]["tag"] == (expected or {"run": "r", "rollout": 3})

        worker = threading.Thread(target=lambda: outcome.update(score=env.score("t", "s")))
        worker.start()
        peer, request = fake_server.recv()
        assert request["tag"] == {"run": "r"}
        fake_server.reply(peer, request["id"], task="t", result={"status": "ok"}, reward=1.0,
                          tag=request["tag"])
        worker.join(timeout=5)
        assert outcome["score"]["tag"] == {"run": "r"}

        closer = threading.Thread(target=env.close)
        closer.start()
        peer, request = fake_server.recv()
        assert request["op"] == "close" and "tag" not in request
        fake_server.reply(peer, request["id"], episode="ep-1", steps=2, best=None)
        closer.join(timeout=5)


def test_async_client_and_env_send_tags(fake_server):
    from crucible_client import AsyncEnv

    async def scenario():
        async with AsyncEnv(fake_server.endpoint, timeout=5, tag={"run": "a"}) as env:
            reset = asyncio.ensure_future(env.reset("t", tag={"rollout": 1}))
            peer, request = await asyncio.to_thread(fake_server.recv)
            assert request["tag"] == {"run": "a", "rollout": 1}
            fake_server.reply(peer, request["id"], episode="ep-9", task={}, max_steps=1, step=0)
            await reset
            step = asyncio.ensure_future(env.step("s"))
            peer, request = await asyncio.to_thread(fake_server.recv)
            assert "tag" not in request
            fake_server.reply(peer, request["id"], episode="ep-9", step=1, reward=0.0,
                              result={"status": "ok"}, terminated=False, truncated=True, best=None)
            await step
            score = asyncio.ensure_future(env.client.score("t", "s", tag={"k": "v"}))
            peer, request = await asyncio.to_thread(fake_server.recv)
            assert request["tag"] == {"run": "a", "k": "v"}
            fake_server.reply(peer, request["id"], task="t", result={"status": "ok"}, reward=1.0)
            await score
            close = asyncio.ensure_future(env.close_episode())
            peer, request = await asyncio.to_thread(fake_server.recv)
            fake_server.reply(peer, request["id"], episode="ep-9", steps=1, best=None)
            await close

    asyncio.run(scenario())


def test_trl_reward_tags_each_sample_from_the_call(fake_server):
    from types import SimpleNamespace

    from crucible_client.adapters import make_trl_reward

    reward = make_trl_reward(fake_server.endpoint, task="t", tag=lambda i, kw: {
        "run": "grpo-7", "rollout": i, "step": kw["trainer_state"].global_step})
    outcome = {}
    worker = threading.Thread(target=lambda: outcome.update(rewards=reward(
        ["p", "p"], ["```cuda\n__global__ void k() {}\n```"] * 2,
        trainer_state=SimpleNamespace(global_step=5))))
    worker.start()
    try:
        tags = []
        for _ in range(2):
            peer, request = fake_server.recv()
            tags.append(request["tag"])
            fake_server.reply(peer, request["id"], task="t", reward=0.5,
                              result={"status": "ok", "reward": {"infra": False}})
        worker.join(timeout=10)
    finally:
        reward.close()
    assert sorted(tags, key=lambda t: t["rollout"]) == [
        {"run": "grpo-7", "rollout": 0, "step": 5}, {"run": "grpo-7", "rollout": 1, "step": 5}]
    assert outcome["rewards"] == [0.5, 0.5]
    with pytest.raises(ValueError, match="9 keys"):
        make_trl_reward(fake_server.endpoint, tag={f"k{i}": i for i in range(9)})


def test_verl_scores_carry_the_reward_kwargs_tag_under_each_samples_own(fake_server):
    from crucible_client.adapters import compute_score_batch

    outcome = {}
    worker = threading.Thread(target=lambda: outcome.update(scores=compute_score_batch(
        ["crucible"] * 2, ["```cuda\n__global__ void k() {}\n```"] * 2, ["t", "t"],
        [{"tag": {"rollout": 0}}, None], endpoint=fake_server.endpoint, tag={"run": "verl-1"})))
    worker.start()
    tags = []
    for _ in range(2):
        peer, request = fake_server.recv()
        tags.append(request.get("tag"))
        fake_server.reply(peer, request["id"], task="t", reward=-1.0,
                          result={"status": "compile_error", "reward": {"infra": False}})
    worker.join(timeout=10)
    assert sorted(tags, key=len) == [{"run": "verl-1"}, {"run": "verl-1", "rollout": 0}]
    assert [s["score"] for s in outcome["scores"]] == [-1.0, -1.0]
