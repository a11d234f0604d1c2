"""TRL's multi-turn hook (crucible_client.trl_env) against the real server, driven the way
GRPOTrainer drives an `environment_factory` instance: reset(**row), the model's tool calls,
get_reward(). TRL itself is not needed: the class only has TRL's shape (the GRPO step that
runs it inside TRL is in test_trainers.py)."""

from __future__ import annotations

import inspect

import pytest

from conftest import REPO
from crucible_client import Client
from crucible_client.trl_env import KernelEpisode, make_trl_environment, trl_dataset_rows
from crucible_client.wire import body

TASK = "llm/rms_norm"
SOLUTION = (REPO / "tasks" / "llm" / "rms_norm" / "solution.cu").read_text()
BROKEN = ('// @launch k<<<1, 32>>>(out)\n#include <cuda_bf16.h>\n'
          'extern "C" __global__ void k(__nv_bfloat16* out) { out[0] = 1 }\n')


@pytest.fixture(scope="module")
def gpu(server):
    with Client(server.endpoint, timeout=30) as c:
        stages = body(c.request("hello"))["stages"]
    return bool(stages["compile"] and stages["gpu"])


@pytest.fixture
def factory(client):
    made = make_trl_environment(client, max_steps=2)
    yield made
    made.close()


def test_trl_sees_exactly_one_tool_besides_reset_and_get_reward():
    # GRPOTrainer offers every public function of the class to the model as a tool.
    public = sorted(name for name, _ in inspect.getmembers(KernelEpisode, inspect.isfunction)
                    if not name.startswith("_"))
    assert public == ["get_reward", "reset", "submit_kernel"]
    doc = inspect.getdoc(KernelEpisode.submit_kernel)
    assert "Args:\n    source:" in doc  # the Google-style block transformers builds the schema from
    assert inspect.signature(KernelEpisode.submit_kernel).parameters["source"].annotation == "str"


def test_the_feedback_goes_back_to_the_model_and_the_reward_is_the_best_step(factory, gpu):
    episode = factory()
    note = episode.reset(prompt=[{"role": "user", "content": "write it"}], task=TASK)
    assert "2 attempts" in note and "submit_kernel" in note
    first = episode.submit_kernel(f"Here it is:\n```cuda\n{BROKEN}```")
    assert first.startswith("Step 1: compile_error")
    assert "- line 3: error" in first and "out[0] = 1 }" in first  # the agent's own line
    assert first.rstrip().endswith("1 attempt left.")
    second = episode.submit_kernel(SOLUTION)
    if gpu:
        assert episode.attempts[1]["status"] == "ok"
        assert "No attempts left." in second
        expected = episode.attempts[1]["reward"]
    else:
        # infra_error: not the kernel's fault, the budget is given back.
        assert second.startswith("Step 2: infra_error")
        assert second.rstrip().endswith("1 attempt left.")
        assert episode.attempts[1]["reward"] is None and episode.attempts[1]["infra"]
        expected = -1.0  # the compile_error is the best scored step
    assert [a["status"] for a in episode.attempts][0] == "compile_error"
    assert episode.get_reward() == expected
    assert episode.closed_reply["best"]["reward"] == expected  # the episode was closed


def test_a_rollout_that_never_submits_scores_the_presets_penalty(client):
    made = make_trl_environment(client, reward={"penalty": {"invalid_action": -0.25}})
    try:
        episode = made()
        episode.reset(task=TASK)
        assert episode.get_reward() == -0.25
        assert episode.attempts[0]["status"] == "invalid_action"
        fixed = make_trl_environment(client, no_submission_reward=-3.0)()
        fixed.reset(task=TASK)
        assert fixed.get_reward() == -3.0 and fixed.attempts == []
    finally:
        made.close()


def test_only_infra_errors_give_none_and_the_budget_ends_the_episode(factory, gpu):
    episode = factory()
    episode.reset(task=TASK)
    if not gpu:
        episode.submit_kernel(SOLUTION)
        episode.submit_kernel(SOLUTION)
        assert [a["status"] for a in episode.attempts] == ["infra_error"] * 2
        assert episode.get_reward() is None  # left out by TRL, never a 0 or a penalty
        episode.reset(task=TASK)
    episode.submit_kernel(BROKEN)
    episode.submit_kernel(BROKEN)
    over = episode.submit_kernel(BROKEN)
    assert over.startswith("The episode is over") and "Best: step" in over
    assert episode.get_reward() == -1.0


def test_last_step_reward_task_from_the_factory_and_a_missing_task(client):
    made = make_trl_environment(client, task=TASK, reward_from="last", instructions=None,
                                prompt={"style": "compact", "reference": False})
    try:
        episode = made()
        prompt = episode.reset(prompt="p")  # no task column: the factory's task
        assert prompt.startswith("# RMSNorm") and "Task: llm/rms_norm" in prompt
        assert prompt.rstrip().endswith("as fast as you can make it.")  # no instructions
        episode.submit_kernel(BROKEN)
        episode.submit_kernel("no kernel at all, just words")
        assert episode.attempts[-1]["status"] == "invalid_action"
        assert episode.get_reward() == -1.0
        with pytest.raises(KeyError, match="'task'"):
            make_trl_environment(client)().reset(prompt="p")
        with pytest.raises(ValueError):
            make_trl_environment(client, reward_from="mean")
    finally:
        made.close()


def test_dataset_rows_carry_a_prompt_and_the_task(client):
    rows = trl_dataset_rows(client, [TASK], style="compact", reference=False, repeat=2,
                            system="You write CUDA.")
    assert len(rows) == 2 and all(r["task"] == TASK for r in rows)
    messages = rows[0]["prompt"]
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[1]["content"].startswith("# RMSNorm") and "Task: llm/rms_norm" in \
        messages[1]["content"]
    plain = trl_dataset_rows(client, [TASK], conversational=False, style="compact")
    assert isinstance(plain[0]["prompt"], str)
