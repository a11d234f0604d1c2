"""AsyncEnv against the real server: episodes on asyncio, several stepping at once."""

from __future__ import annotations

import asyncio

import pytest

from crucible_client import AsyncEnv, EpisodeDone

TASK = "llm/rms_norm"
BROKEN = ('// @launch k<<<1, 32>>>(out)\n#include <cuda_bf16.h>\n'
          'extern "C" __global__ void k(__nv_bfloat16* out) { out[0] = 1 }\n')


def test_async_env_runs_an_episode_to_its_budget(live_server):
    async def run():
        async with AsyncEnv(live_server.endpoint, timeout=120) as env:
            assert (await env.hello())["server"] == "crucible"
            observation = await env.reset(TASK, seed=3, max_steps=2)
            assert observation["step"] == 0 and observation["task"]["id"] == TASK
            first = await env.step(BROKEN)
            second = await env.step("no kernel here")
            with pytest.raises(EpisodeDone):
                await env.step(BROKEN)
            return first, second, await env.close_episode()

    first, second, closed = asyncio.run(run())
    observation, reward, terminated, truncated, info = first
    assert (observation["status"], observation["step"], reward) == ("compile_error", 1, -1.0)
    assert not terminated and not truncated and info["best"]["step"] == 1
    assert second[0]["status"] == "invalid_action" and second[3] is True
    assert closed["steps"] == 2


def test_async_envs_step_concurrently_on_one_loop(live_server):
    async def one(seed):
        async with AsyncEnv(live_server.endpoint, timeout=120) as env:
            await env.reset(TASK, seed=seed, max_steps=3)
            observation, reward, *_ = await env.step(BROKEN)
            return observation["status"], reward

    async def run():
        return await asyncio.gather(*(one(seed) for seed in range(6)))

    assert asyncio.run(run()) == [("compile_error", -1.0)] * 6
