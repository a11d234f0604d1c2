"""CrucibleGymEnv against the real server: gymnasium's own env checker, the registered id,
vector envs, typed observations and infos without transport ids. Skipped only when gymnasium
is not installed (it is part of the `test` extra)."""

from __future__ import annotations

import warnings

import pytest

gymnasium = pytest.importorskip("gymnasium")
from gymnasium.utils.env_checker import check_env  # noqa: E402

from crucible_client.gym_env import ENV_ID, STATUS_NAMES, CrucibleGymEnv  # noqa: E402

TASK = "llm/rms_norm"
BROKEN = ('// @launch k<<<1, 32>>>(out)\n#include <cuda_bf16.h>\n'
          'extern "C" __global__ void k(__nv_bfloat16* out) { out[0] = 1 }\n')


def no_transport_ids(info):
    text = repr(info)
    assert "ep-" not in text, "an episode id leaked into info"
    assert not {"episode", "id", "v", "ok"} & set(info), sorted(info)


def test_check_env_passes_without_warnings(live_server):
    env = CrucibleGymEnv(TASK, live_server.endpoint, max_steps=4, timeout=60)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check_env(env)
        assert [str(w.message) for w in caught] == []
    finally:
        env.close()


def test_the_registered_id_makes_a_checked_env(live_server):
    env = gymnasium.make(ENV_ID, task=TASK, endpoint=live_server.endpoint, max_steps=3)
    try:
        assert env.spec.id == ENV_ID and env.spec.nondeterministic
        check_env(env.unwrapped)
    finally:
        env.close()


def test_reset_and_step_return_typed_observations_and_clean_infos(live_server):
    env = CrucibleGymEnv(TASK, live_server.endpoint, max_steps=2, text_chars=6000)
    try:
        observation, info = env.reset(seed=5)
        assert observation in env.observation_space
        assert observation["text"].startswith("# ") and len(observation["text"]) <= 6000
        assert STATUS_NAMES[int(observation["status"])] == "none" and int(observation["step"]) == 0
        assert info["task"] == TASK and info["task_view"]["id"] == TASK
        no_transport_ids(info)

        observation, reward, terminated, truncated, info = env.step(BROKEN)
        assert observation in env.observation_space
        assert STATUS_NAMES[int(observation["status"])] == "compile_error"
        assert observation["text"].startswith("Step 1: compile_error")
        assert "line 3" in observation["text"]
        assert reward == -1.0 and not terminated and not truncated
        assert info["result"]["status"] == "compile_error" and info["infra_error"] is False
        no_transport_ids(info)
    finally:
        env.close()


def test_a_sync_vector_env_steps_several_episodes(live_server):
    vector = gymnasium.vector.SyncVectorEnv(
        [lambda: CrucibleGymEnv(TASK, live_server.endpoint, max_steps=3, text_chars=4000)
         for _ in range(3)])
    try:
        observations, _ = vector.reset(seed=1)
        assert list(observations["step"]) == [0, 0, 0]
        observations, rewards, terminated, truncated, infos = vector.step(
            (BROKEN, "no kernel here", BROKEN))
        assert [STATUS_NAMES[int(s)] for s in observations["status"]] == [
            "compile_error", "invalid_action", "compile_error"]
        assert list(rewards) == [-1.0, -1.0, -1.0]
    finally:
        vector.close()


def test_a_text_space_smaller_than_the_task_still_gives_whole_lines(live_server):
    env = CrucibleGymEnv(TASK, live_server.endpoint, max_steps=2, text_chars=600)
    try:
        observation, _ = env.reset(seed=1)
        assert observation in env.observation_space
        assert 0 < len(observation["text"]) <= 600 and observation["text"].endswith("\n")
    finally:
        env.close()


def test_an_async_vector_env_runs_episodes_in_subprocesses(live_server):
    import functools

    make = functools.partial(CrucibleGymEnv, TASK, live_server.endpoint, max_steps=3,
                             text_chars=4000)
    vector = gymnasium.vector.AsyncVectorEnv([make, make], context="spawn")
    try:
        observations, _ = vector.reset(seed=2)
        assert list(observations["step"]) == [0, 0]
        observations, rewards, *_ = vector.step((BROKEN, "no kernel here"))
        assert [STATUS_NAMES[int(s)] for s in observations["status"]] == [
            "compile_error", "invalid_action"]
        assert list(rewards) == [-1.0, -1.0]
    finally:
        vector.close()
