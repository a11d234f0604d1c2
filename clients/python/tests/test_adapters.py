"""Trainer adapters against the real server: TRL reward functions (sync and async) and verl's
compute_score, called the way the trainers call them, with scripted completions."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from conftest import REPO
from crucible_client import Client, UnknownTask
from crucible_client.adapters import (
    compute_score,
    compute_score_batch,
    make_trl_reward,
    make_trl_reward_async,
)
from crucible_client.wire import body

TASK = "llm/rms_norm"
SOLUTION = (REPO / "tasks" / "llm" / "rms_norm" / "solution.cu").read_text()
BROKEN = ('// @launch k<<<1, 32>>>(out)\n#include <cuda_bf16.h>\n'
          'extern "C" __global__ void k(__nv_bfloat16* out) { out[0] = 1 }\n')
COMPLETIONS = [
    f"I vectorise the loads.\n```cuda\n{SOLUTION}```\n",  # a correct kernel
    f"```cpp\n{BROKEN}```",                                # does not compile
    "I am not sure how to write this kernel.",             # no source at all
    [{"role": "assistant", "content": f"```c++\n{BROKEN}```"}],  # conversational format
]


@pytest.fixture(scope="module")
def gpu(server):
    with Client(server.endpoint, timeout=30) as c:
        stages = body(c.request("hello"))["stages"]
    return bool(stages["compile"] and stages["gpu"])


def check_rewards(rewards, gpu):
    assert len(rewards) == len(COMPLETIONS)
    if gpu:
        assert isinstance(rewards[0], float) and rewards[0] >= 0.5  # correct: >= default floor
    else:
        assert rewards[0] is None  # infra_error: the sample leaves the group baseline
    assert rewards[1] == -1.0  # default preset: compile_error -1
    assert rewards[2] == -1.0  # no source: the preset's invalid_action penalty
    assert rewards[3] == -1.0


def test_trl_reward_scores_a_batch_as_grpo_calls_it(live_server, gpu):
    reward = make_trl_reward(live_server.endpoint)
    assert reward.__name__ == "crucible_reward" and not inspect.iscoroutinefunction(reward)
    try:
        # GRPOTrainer passes prompts, completions, completion_ids, the trainer state and every
        # extra dataset column as keywords.
        rewards = reward(prompts=["p"] * 4, completions=COMPLETIONS, completion_ids=[[1]] * 4,
                         trainer_state=None, task=[TASK] * 4)
        check_rewards(rewards, gpu)
        statuses = [o["status"] for o in reward.last_outcomes]
        assert statuses[1:] == ["compile_error", "invalid_action", "compile_error"]
        assert reward.last_outcomes[2]["no_source"]
        assert reward.last_outcomes[0]["body"]["task"] == TASK
    finally:
        reward.close()


def test_trl_reward_options_preset_fixed_task_and_no_source_reward(client, gpu):
    reward = make_trl_reward(client, task=TASK, reward={"preset": "fast_p"},
                             no_source_reward=-3.0, name="kernel_speed")
    assert reward.__name__ == "kernel_speed"
    rewards = reward(["p"] * 4, COMPLETIONS)
    assert rewards[1:] == [0.0, -3.0, 0.0]  # fast_p: every failure scores 0
    assert reward.last_outcomes[1]["body"]["result"]["reward"]["preset"] == "fast_p"


def test_trl_reward_refuses_a_missing_task_column_and_an_unknown_task(client):
    reward = make_trl_reward(client)
    with pytest.raises(KeyError, match="'task' column"):
        reward(["p"], ["x"])
    with pytest.raises(UnknownTask):
        reward(["p"], [f"```cuda\n{BROKEN}```"], task=["no/such_task"])


def test_async_trl_reward_is_a_coroutine_function_with_the_same_rewards(live_server, gpu):
    reward = make_trl_reward_async(live_server.endpoint, task_field="kernel_task")
    assert inspect.iscoroutinefunction(reward) and reward.__name__ == "crucible_reward"

    async def run():
        try:
            return await reward(prompts=["p"] * 4, completions=COMPLETIONS,
                                kernel_task=[TASK] * 4, trainer_state=None)
        finally:
            await reward.close()

    check_rewards(asyncio.run(run()), gpu)


def test_verl_compute_score_one_and_batch(live_server, gpu):
    one = compute_score("crucible", f"```cuda\n{BROKEN}```", TASK, None,
                        endpoint=live_server.endpoint)
    assert one == {"score": -1.0, "status": "compile_error", "speedup": 0.0,
                   "infra_error": False, "no_source": False}
    good = compute_score("crucible", COMPLETIONS[0], "ignored", {"task": TASK},
                         endpoint=live_server.endpoint)
    assert good["infra_error"] is (not gpu)
    if not gpu:
        assert good["score"] == 0.0 and good["status"] == "infra_error"
    batch = compute_score_batch(
        ["crucible"] * 3, [COMPLETIONS[1], COMPLETIONS[2], COMPLETIONS[0]], [TASK] * 3,
        [{"endpoint": live_server.endpoint}] * 3)
    assert [r["status"] for r in batch[:2]] == ["compile_error", "invalid_action"]
    assert batch[1]["no_source"] is True and batch[1]["score"] == -1.0
    # verl gathers every key of every sample: all samples carry the same keys.
    assert len({tuple(sorted(r)) for r in batch}) == 1


def test_verl_compute_score_takes_the_endpoint_from_the_environment(live_server, monkeypatch):
    monkeypatch.setenv("CRUCIBLE_ENDPOINT", live_server.endpoint)
    assert compute_score("crucible", "no code here", TASK)["status"] == "invalid_action"
    with pytest.raises(ValueError, match="no task id"):
        compute_score("crucible", "x", None, {})


def test_infra_samples_can_take_their_prompt_groups_mean(client, gpu):
    if gpu:
        pytest.skip("this server has a GPU: no infra_error to fill in")
    reward = make_trl_reward(client, task=TASK, infra_reward="group_mean")
    prompts = ["a", "a", "a", "b", "b"]
    completions = [COMPLETIONS[0], COMPLETIONS[1], f"```cuda\n{BROKEN}```", COMPLETIONS[0],
                   COMPLETIONS[0]]
    rewards = reward(prompts, completions)
    # Group "a": the infra sample takes the mean of -1 and -1; group "b" has nothing to take.
    assert rewards == [-1.0, -1.0, -1.0, None, None]
    with pytest.raises(ValueError):
        make_trl_reward(client, infra_reward="zero")


def test_group_mean_keeps_the_groups_mean():
    from crucible_client.adapters import _rewards

    outcomes = [{"reward": r, "no_source": None} for r in (1.5, None, 0.5, -1.0)]
    rewards = _rewards(outcomes, None, "group_mean", ["p", "p", "p", "q"])
    assert rewards == [1.5, 1.0, 0.5, -1.0]
    assert sum(rewards[:3]) / 3 == (1.5 + 0.5) / 2


def test_the_scripted_grpo_example_runs(live_server, gpu):
    import os
    import subprocess
    import sys

    script = REPO / "clients" / "python" / "examples" / "scripted_grpo.py"
    env = dict(os.environ, PYTHONPATH=str(REPO / "clients" / "python" / "src"))
    done = subprocess.run(
        [sys.executable, str(script), "--endpoint", live_server.endpoint, "--task", TASK,
         "--file", str(REPO / "tasks" / "llm" / "rms_norm" / "solution.cu")],
        capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "completion 1: compile_error   reward -1.0" in done.stdout
    assert ("dropped (infra_error)" in done.stdout) is (not gpu)
    assert "- line 3: error:" in done.stdout
