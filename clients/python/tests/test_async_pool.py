"""AsyncPool against real servers, and every entry point that takes one endpoint taking several:
Env, AsyncEnv, TRL's reward functions and environment factory, verl's compute_score."""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any, Dict, List

import pytest

from conftest import free_loopback_port
from crucible_client import (
    AsyncPool,
    Client,
    CrucibleConnectionError,
    Env,
    Pool,
    ServerLost,
    UnknownEpisode,
)
from crucible_client.adapters import compute_score_batch, make_trl_reward, make_trl_reward_async
from crucible_client.aio import AsyncClient, AsyncEnv, connect_async
from crucible_client.pool import connect, split_endpoints
from crucible_client.trl_env import make_trl_environment
from test_pool import POOL_OPTIONS, SOURCE, Servers, counters, servers  # noqa: F401 (fixture)

COMPLETION = f"Here it is:\n```cuda\n{SOURCE}\n```\n"


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


def test_endpoints_split_at_commas_and_connect_opens_a_client_or_a_pool():
    assert split_endpoints("tcp://a:1, tcp://b:2,") == ["tcp://a:1", "tcp://b:2"]
    assert split_endpoints(["tcp://a:1"]) == ["tcp://a:1"]
    with pytest.raises(ValueError, match="no endpoint"):
        split_endpoints(" , ")
    port = free_loopback_port()
    one = connect(f"tcp://127.0.0.1:{port}", health_interval=5.0)  # a pool option is dropped
    several = connect(f"tcp://127.0.0.1:{port},tcp://127.0.0.1:{port + 1}")
    listed = connect([f"tcp://127.0.0.1:{port}"])
    try:
        assert isinstance(one, Client) and isinstance(several, Pool) and isinstance(listed, Pool)
        assert several.endpoints == [f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.1:{port + 1}"]
        assert connect(several) is several
    finally:
        for opened in (one, several, listed):
            opened.close()

    async def opened_async() -> None:
        single = connect_async(f"tcp://127.0.0.1:{port}")
        pooled = connect_async([f"tcp://127.0.0.1:{port}", f"tcp://127.0.0.1:{port + 1}"])
        assert isinstance(single, AsyncClient) and isinstance(pooled, AsyncPool)
        assert connect_async(pooled) is pooled
        await single.close()
        await pooled.close()

    run(opened_async())


def test_an_async_pool_spreads_scores_and_keeps_episodes_on_their_server(servers: Servers):
    endpoints = [servers.start().endpoint for _ in range(3)]

    async def use() -> List[str]:
        async with AsyncPool(endpoints, **POOL_OPTIONS) as pool:
            task = (await pool.tasks())[0]["id"]
            bodies = await pool.score_many([(task, SOURCE)] * 24, max_inflight=6)
            assert len(bodies) == 24 and all(body["task"] == task for body in bodies)
            episodes = [(await pool.request("reset", task=task, max_steps=4))["episode"]
                        for _ in range(6)]
            for episode in episodes:
                reply = await pool.request("step", episode=episode, source=SOURCE)
                assert reply["episode"] == episode and reply["step"] == 1
            closed = await pool.request("close", episode=episodes[0])
            assert closed["episode"] == episodes[0]
            with pytest.raises(UnknownEpisode, match="not issued by this pool"):
                await pool.request("step", episode="ep-0123", source=SOURCE)
            assert all(entry["up"] for entry in pool.servers())
            return episodes

    episodes = run(use())
    assert {episode.partition("/")[0] for episode in episodes} == {"s0", "s1", "s2"}
    scores = [counters(endpoint)["scores"] for endpoint in endpoints]
    steps = [counters(endpoint)["steps"] for endpoint in endpoints]
    assert sum(scores) == 24 and all(count >= 4 for count in scores), scores
    # Each step reached the server its episode's prefix names.
    for index, endpoint in enumerate(endpoints):
        assert steps[index] == sum(e.startswith(f"s{index}/") for e in episodes)


def test_an_async_pool_loses_a_killed_servers_episodes_and_takes_it_back(servers: Servers):
    doomed, survivor = servers.start(), servers.start()

    async def use() -> None:
        async with AsyncPool([doomed.endpoint, survivor.endpoint], **POOL_OPTIONS) as pool:
            task = (await pool.tasks())[0]["id"]
            episodes: Dict[str, str] = {}
            while len(episodes) < 2:
                episode = (await pool.request("reset", task=task, max_steps=8))["episode"]
                episodes.setdefault(episode.partition("/")[0], episode)
            doomed.process.send_signal(signal.SIGKILL)
            doomed.process.wait()
            started = time.monotonic()
            with pytest.raises(ServerLost) as lost:
                await pool.request("step", episode=episodes["s0"], source=SOURCE)
            assert time.monotonic() - started < 5.0
            assert lost.value.endpoint == doomed.endpoint
            assert isinstance(lost.value, CrucibleConnectionError)
            assert (await pool.request("step", episode=episodes["s1"],
                                       source=SOURCE))["step"] == 1
            for _ in range(4):
                await pool.score(task, SOURCE)
            assert not pool.servers()[0]["up"]
            # The restarted server rejoins through the health task; its old episode stays lost.
            servers.start(doomed.endpoint)
            deadline = time.monotonic() + 10.0
            while not pool.servers()[0]["up"]:
                assert time.monotonic() < deadline, "the restarted server did not rejoin"
                await asyncio.sleep(0.05)
            with pytest.raises(ServerLost, match="was lost"):
                await pool.request("step", episode=episodes["s0"], source=SOURCE)
            for _ in range(8):
                await pool.score(task, SOURCE)

    run(use())
    assert counters(survivor.endpoint)["scores"] >= 4
    assert counters(doomed.endpoint)["scores"] >= 2  # the new process takes work again


def test_an_async_step_in_flight_when_its_server_goes_away_fails_at_once(servers: Servers,
                                                                         fake_server):
    real = servers.start()
    options = dict(POOL_OPTIONS, health_interval=60.0)

    async def use() -> None:
        async with AsyncPool([fake_server.endpoint, real.endpoint], **options) as pool:
            opening = asyncio.ensure_future(pool.request("reset", task="x"))
            peer, request = await asyncio.to_thread(fake_server.recv)
            fake_server.reply(peer, request["id"], episode="ep-held", task={}, max_steps=4,
                              step=0)
            episode = (await opening)["episode"]
            assert episode == "s0/ep-held"
            stepping = asyncio.ensure_future(pool.request("step", episode=episode,
                                                          source=SOURCE))
            peer, request = await asyncio.to_thread(fake_server.recv)
            assert request["episode"] == "ep-held"
            started = time.monotonic()
            fake_server.close()
            with pytest.raises(ServerLost, match="not retried"):
                await asyncio.wait_for(stepping, 10.0)
            # The client saw the connection drop: the step did not wait for its timeout (20 s).
            assert time.monotonic() - started < 5.0
            assert pool.clients[0].disconnects >= 1

    run(use())
    assert counters(real.endpoint)["steps"] == 0  # not sent elsewhere


def test_env_and_async_env_run_episodes_over_several_servers(servers: Servers):
    endpoints = [servers.start().endpoint for _ in range(2)]
    with Env(endpoints, timeout=20.0, connect_timeout=2.0) as env:
        assert isinstance(env.client, Pool)
        task = env.tasks()[0]["id"]
        for _ in range(4):
            observation = env.reset(task, max_steps=2)
            assert observation["episode"].partition("/")[0] in ("s0", "s1")
            _, _, _, _, info = env.step(SOURCE)
            assert info["episode"] == observation["episode"]
    with Pool(endpoints, **POOL_OPTIONS) as shared:
        with Env(shared) as env:
            env.reset(task)
            env.step(SOURCE)
        assert not shared.closed  # a shared pool stays open for its other users

    async def use() -> None:
        async with AsyncEnv(",".join(endpoints), timeout=20.0) as env:
            assert isinstance(env.client, AsyncPool)
            observation = await env.reset(task, max_steps=2)
            _, _, _, _, info = await env.step(SOURCE)
            assert info["episode"] == observation["episode"]

    run(use())
    assert sum(counters(endpoint)["steps"] for endpoint in endpoints) == 6


def test_trainer_adapters_score_over_several_servers(servers: Servers):
    endpoints = [servers.start().endpoint for _ in range(2)]
    with Client(endpoints[0], timeout=20.0) as client:
        task = client.request("tasks")["tasks"][0]["id"]
    reward = make_trl_reward(endpoints, task=task, timeout=20.0)
    try:
        values = reward(prompts=["p"] * 8, completions=[COMPLETION] * 8)
    finally:
        reward.close()
    assert len(values) == 8
    assert all(outcome["status"] != "infra_error" for outcome in reward.last_outcomes)

    async_reward = make_trl_reward_async(endpoints, task=task, timeout=20.0)

    async def score_async() -> List[Any]:
        try:
            return list(await async_reward(prompts=["p"] * 4, completions=[COMPLETION] * 4))
        finally:
            await async_reward.close()

    assert len(run(score_async())) == 4
    results = compute_score_batch(["d"] * 4, [COMPLETION] * 4, [task] * 4,
                                  endpoint=",".join(endpoints), timeout=20.0)
    assert [r["status"] for r in results] == [results[0]["status"]] * 4
    assert not any(r["infra_error"] for r in results)

    factory = make_trl_environment(endpoints, task=task, max_steps=2, timeout=20.0)
    try:
        episodes = [factory() for _ in range(4)]
        for episode in episodes:
            episode.reset()
            episode.submit_kernel(COMPLETION)
        assert all(len(episode.attempts) == 1 and not episode.attempts[0]["infra"]
                   for episode in episodes)
    finally:
        factory.close()
    scores = [counters(endpoint)["scores"] for endpoint in endpoints]
    steps = [counters(endpoint)["steps"] for endpoint in endpoints]
    assert sum(scores) == 16 and min(scores) >= 2, scores
    assert sum(steps) == 4 and min(steps) >= 1, steps


def test_a_lost_pool_is_infra_for_the_reward_functions():
    nobody = f"tcp://127.0.0.1:{free_loopback_port()}"
    with Pool([nobody], timeout=2.0, connect_timeout=0.3, health_interval=60.0) as pool:
        reward = make_trl_reward(pool, task="llm/rms_norm")
        assert reward(prompts=["p"], completions=[COMPLETION]) == [None]
        assert reward.last_outcomes[0]["status"] == "infra_error"
        assert nobody in reward.last_outcomes[0]["error"]
        assert not pool.closed  # the reward function does not own a pool it was given


def test_an_async_pool_follows_a_server_to_another_address(servers: Servers):
    first, other = servers.start(), servers.start()

    async def use() -> None:
        pool = AsyncPool([first.endpoint, other.endpoint], **POOL_OPTIONS)
        try:
            task = (await pool.tasks())[0]["id"]
            old = ""
            while not old.startswith("s0/"):
                old = (await pool.request("reset", task=task))["episode"]
            moved = servers.start()
            await pool.move_server(0, moved.endpoint)
            assert pool.servers()[0]["endpoint"] == moved.endpoint
            with pytest.raises(ServerLost, match="was lost"):
                await pool.request("step", episode=old, source=SOURCE)
            for _ in range(8):
                await pool.score(task, SOURCE)
            assert counters(moved.endpoint)["scores"] >= 2
        finally:
            await pool.close()
        assert all(client.closed for client in pool.clients)

    run(use())
