"""The trainer integrations inside the trainers themselves, against the real server: a GRPO
step of TRL's GRPOTrainer through `environment_factory`, an OpenEnv app and client, a verifiers
rollout. They need the `trainers` extra (scripts/setup-extras); without a library its tests
report themselves skipped, never passed. Marked `extra`: CTest runs them under that label."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from crucible_client import Client
from crucible_client.wire import body

pytestmark = pytest.mark.extra

TASK = "llm/rms_norm"
SOLUTION_PATH = REPO / "tasks" / "llm" / "rms_norm" / "solution.cu"
EXAMPLES = REPO / "clients" / "python" / "examples"
BROKEN = ('// @launch k<<<1, 32>>>(out)\n#include <cuda_bf16.h>\n'
          'extern "C" __global__ void k(__nv_bfloat16* out) { out[0] = 1 }\n')


@pytest.fixture(scope="module")
def gpu(server):
    with Client(server.endpoint, timeout=30) as c:
        stages = body(c.request("hello"))["stages"]
    return bool(stages["compile"] and stages["gpu"])


def run_example(name, endpoint, timeout=600):
    env = dict(os.environ, PYTHONPATH=str(REPO / "clients" / "python" / "src"),
               TRL_EXPERIMENTAL_SILENCE="1")
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), "--endpoint", endpoint, "--task", TASK,
         "--file", str(SOLUTION_PATH)],
        capture_output=True, text=True, timeout=timeout, env=env)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return done.stdout


# ----------------------------------------------------------------------------------------
# TRL
def test_trl_builds_the_tool_schema_from_submit_kernel():
    pytest.importorskip("trl")
    from transformers.utils import get_json_schema

    from crucible_client.trl_env import make_trl_environment

    episode = make_trl_environment("tcp://127.0.0.1:1")()  # no request is sent
    schema = get_json_schema(episode.submit_kernel)["function"]
    assert schema["name"] == "submit_kernel"
    assert schema["parameters"]["required"] == ["source"]
    assert schema["parameters"]["properties"]["source"]["type"] == "string"
    assert "@launch" in schema["parameters"]["properties"]["source"]["description"]


def test_a_grpo_step_runs_the_multi_turn_loop_through_crucible(live_server, gpu):
    for module in ("trl", "transformers", "datasets", "torch", "tokenizers"):
        pytest.importorskip(module)
    out = run_example("trl_grpo_multiturn.py", live_server.endpoint)
    episodes = out.split("rollout episode ")[1:]
    assert len(episodes) == 2, out
    # Rollout 0 submitted the broken kernel, read the feedback, submitted the real one.
    assert "step 1: compile_error   reward -1.0" in episodes[0]
    second = "step 2: ok" if gpu else "step 2: infra_error     reward None"
    assert second in episodes[0], out
    # Rollout 1 never called the tool: the preset's invalid_action penalty (-0.5 here).
    assert "step 1: invalid_action  reward -0.5" in episodes[1]
    # The tool's feedback was in the context of the model's next generate() call.
    assert re.search(r"with tool feedback in the context: [1-9]", out), out
    feedback = out.split("the feedback the model read:")[1]
    assert "Step 1: compile_error" in feedback and "- line 3: error" in feedback
    # GRPO used the environment's reward and took a real optimizer step.
    log = out.split("trainer log:")[1]
    assert '"rewards/KernelEpisode/mean"' in log and '"frac_reward_zero_std": 0.0' in log
    assert "parameters updated: True" in out


# ----------------------------------------------------------------------------------------
# OpenEnv
def test_openenv_environment_resets_steps_and_reports_infra_as_no_reward(live_server, gpu):
    pytest.importorskip("openenv")
    from crucible_client.openenv_env import CrucibleEnvironment, KernelAction

    env = CrucibleEnvironment(live_server.endpoint, task=TASK, max_steps=2,
                              prompt_options={"style": "compact"})
    try:
        observation = env.reset(seed=3, tag={"run": "pytest"})
        assert observation.text.startswith("# RMSNorm") and observation.reward is None
        assert observation.max_steps == 2 and observation.status == "none"
        assert env.state.task == TASK and env.state.episode_id.startswith("ep-")
        observation = env.step(KernelAction(source=BROKEN))
        assert (observation.status, observation.reward, observation.done) == \
            ("compile_error", -1.0, False)
        assert "- line 3: error" in observation.text and observation.step == 1
        observation = env.step(KernelAction(source=SOLUTION_PATH.read_text()))
        if gpu:
            assert observation.status == "ok" and observation.reward is not None
            assert observation.done  # the second of two steps
        else:
            assert observation.status == "infra_error" and observation.infra_error
            assert observation.reward is None and not observation.done
        assert env.state.best["status"] in ("compile_error", "ok")
        with pytest.raises(ValueError, match="needs a task"):
            CrucibleEnvironment(live_server.endpoint).reset()
    finally:
        env.close()


def test_openenv_example_plays_an_episode_over_the_websocket_client(live_server, gpu):
    pytest.importorskip("openenv")
    pytest.importorskip("uvicorn")
    out = run_example("openenv_episode.py", live_server.endpoint)
    assert "reset: llm/rms_norm" in out and "max_steps 3" in out
    assert "turn 1: step 1 compile_error reward -1.0 done False" in out
    assert ("turn 2: step 2 ok" if gpu else "turn 2: step 2 infra_error reward None") in out
    assert "- line 3: error" in out
    assert "state: step_count 2" in out


# ----------------------------------------------------------------------------------------
# verifiers
def test_verifiers_taskset_has_the_servers_tasks_with_rendered_prompts(live_server):
    pytest.importorskip("verifiers")
    from crucible_client.verifiers_env import CrucibleEnv, load_environment

    env = load_environment(live_server.endpoint, category="llm", max_steps=2,
                           taskset={"prompt_style": "compact", "reference": False},
                           agent={"harness": {"id": "null"}, "runtime": {"type": "subprocess"}})
    assert isinstance(env, CrucibleEnv) and env.config.max_steps == 2
    tasks = list(env.taskset)
    with Client(live_server.endpoint) as client:
        expected = [t["id"] for t in client.request("tasks", category="llm")["tasks"]]
    assert [t.data.name for t in tasks] == expected
    first = tasks[expected.index(TASK)].data
    assert first.info == {"task": TASK} and first.prompt.startswith("# RMSNorm")


def test_a_verifiers_rollout_plays_crucible_as_the_user(live_server, gpu):
    pytest.importorskip("verifiers")
    if importlib.util.find_spec("uv") is None and shutil.which("uv") is None and \
            not (Path.home() / ".local" / "bin" / "uv").exists():
        pytest.skip("NOT RUN: verifiers runs its chat harness with uv, which is not installed "
                    "(the trainers extra, scripts/setup-extras, installs it)")
    out = run_example("verifiers_episode.py", live_server.endpoint, timeout=900)
    assert "episode ok: True" in out, out
    assert "attempt step 1: compile_error   reward -1.0" in out
    if gpu:
        assert "attempt step 2: ok" in out
    else:
        assert "attempt step 2: infra_error     reward None" in out
        assert "rewards: {'kernel_reward': -1.0}" in out  # the best scored step
    # The second model request carried crucible's feedback as its last user turn.
    assert "request 2, last user turn: Step 1: compile_error" in out
