"""crucible as a verifiers environment (verifiers >= 0.4, `verifiers.v1`): a taskset of the
server's tasks and a multi-turn env whose judge is the crucible server.

Needs the optional `verifiers` package (the `trainers` extra). verifiers loads a taskset by
its id, as a top-level module exporting the Taskset and Env subclasses through `__all__`: the
package ships `crucible_kernels`, which re-exports `CrucibleTaskset` and `CrucibleEnv`, so the
id `crucible-kernels` (`TASKSET_ID`) selects both. In Python:

    from crucible_client.verifiers_env import load_environment
    env = load_environment(endpoint="tcp://127.0.0.1:5555", tasks=["llm/rms_norm"], max_steps=4)

Each task's prompt is `render_prompt` of the task's view. An episode opens a crucible episode,
takes the model's opening reply, steps the kernel it contains, and answers with the feedback
(`render_feedback`) as the next user turn, until the step budget is used, the server ends the
episode, or a reply holds no kernel (the model is done; a first reply without one is scored as
the preset's invalid_action penalty). The rollout's reward (`kernel_reward`) is the crucible
episode's best step (or its last, `reward_from="last"`); a rollout whose every attempt was an
infra_error (the server's fault) records no reward and fails the episode, so that it is
dropped or retried, never trained on as a zero.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Dict, List, Literal, Optional

import verifiers.v1 as vf

from . import wire
from .adapters import _INFRA_CODES, NO_SOURCE_PLACEHOLDER
from .aio import AsyncEnv
from .pool import connect
from .errors import CrucibleError
from .prompts import NoSourceFound, extract_source, render_feedback, render_prompt

__all__ = ["CrucibleEnv", "CrucibleTaskset", "TASKSET_ID", "load_environment"]

TASKSET_ID = "crucible-kernels"

SYSTEM_PROMPT = (
    "You write CUDA kernels. Answer with the complete kernel source in one ```cuda block; "
    "the server compiles it, checks it against the reference and times it, and answers with "
    "its feedback, which you may use to submit an improved kernel."
)


class CrucibleTasksetConfig(vf.TasksetConfig):  # type: ignore[misc]
    endpoint: str = wire.DEFAULT_ENDPOINT
    """The crucible server, or several separated by commas (a Pool)."""
    tasks: List[str] = []
    """Task ids; empty: every task the server lists (of `category`, when set)."""
    category: Optional[str] = None
    prompt_style: Literal["full", "compact"] = "compact"
    """`render_prompt`'s style."""
    reference: bool = True
    """Show the reference kernel in the prompt."""
    max_prompt_chars: Optional[int] = None
    hardware_notes: bool = True
    """Notes on the server's compile target and GPUs in the prompt."""


class CrucibleData(vf.TaskData):  # type: ignore[misc]
    info: Dict[str, Any]
    """`{"task": crucible task id}`."""


class CrucibleTask(vf.Task[CrucibleData, vf.State, vf.TaskConfig]):  # type: ignore[misc]
    pass


class CrucibleTaskset(vf.Taskset[CrucibleTask, CrucibleTasksetConfig]):  # type: ignore[misc]
    """The server's tasks, one verifiers task each, with the rendered prompt."""

    def load(self) -> Iterator[CrucibleTask]:
        config = self.config
        with connect(config.endpoint) as client:
            hello = wire.body(client.request("hello", client="crucible_client.verifiers"))
            ids = list(config.tasks) or [
                t["id"] for t in client.request("tasks", category=config.category)["tasks"]]
            for task_id in ids:
                view = client.request("task", task=task_id)["task"]
                prompt = render_prompt(
                    view, style=config.prompt_style, reference=config.reference,
                    hello=hello if config.hardware_notes else None,
                    max_chars=config.max_prompt_chars)
                yield CrucibleTask(
                    CrucibleData(id=task_id, name=task_id, prompt=prompt,
                                 system_prompt=SYSTEM_PROMPT, info={"task": task_id}),
                    config.task)


class CrucibleEnvConfig(vf.EnvConfig):  # type: ignore[misc]
    agent: vf.AgentConfig = vf.AgentConfig()
    """The policy's seat."""
    max_steps: int = 4
    """Kernels the model may submit in one episode (the crucible episode's budget)."""
    reward: Optional[Dict[str, Any]] = None
    """Reward spec for the crucible episode (`{"preset": "fast_p"}`...)."""
    reward_from: Literal["best", "last"] = "best"
    tag: Optional[Dict[str, Any]] = None
    """Request tag for every episode (the server keeps it in its log)."""
    feedback_chars: Optional[int] = 6000
    step_timeout: float = 600.0
    """Seconds to wait for one step's reply."""


class CrucibleEnv(vf.Env[CrucibleEnvConfig]):  # type: ignore[misc]
    """One crucible episode per rollout: the server plays the user, answering each kernel
    with its feedback."""

    async def run(self, task: Any, agents: Any) -> None:
        config = self.config
        attempts: List[Dict[str, Any]] = []
        last_reply: Optional[Dict[str, Any]] = None
        async with AsyncEnv(self.taskset.config.endpoint, timeout=config.step_timeout,
                            client_name="crucible_client.verifiers") as env:
            await env.reset(task.data.info["task"], max_steps=config.max_steps,
                            reward=config.reward, tag=wire.merge_tags(config.tag))
            async with agents.agent.interaction(task) as interaction:
                segment = await interaction.turn()
                while not segment.terminated:
                    source = _source_in(segment.last_reply)
                    if source is None and attempts:
                        break  # no kernel in the reply: the model is done
                    try:
                        _, reward, terminated, truncated, reply = await env.step(
                            source or NO_SOURCE_PLACEHOLDER)
                    except CrucibleError as exc:
                        if exc.code not in _INFRA_CODES:
                            raise
                        attempts.append({"status": "infra_error", "reward": None, "step": None})
                        segment = await interaction.turn(
                            f"The server could not score this attempt ({exc.message}); it does "
                            "not count. Submit it again.")
                        continue
                    last_reply = reply
                    result = reply.get("result") or {}
                    infra = bool((result.get("reward") or {}).get("infra"))
                    attempts.append({"status": result.get("status"), "step": reply.get("step"),
                                     "reward": None if infra else reward})
                    if terminated or truncated or source is None:
                        break  # the budget is used, or a reply without a kernel was scored
                    segment = await interaction.turn(render_feedback(
                        reply, source=source, max_chars=config.feedback_chars))
                self._score(interaction.trace, attempts, last_reply)

    def _score(self, trace: Any, attempts: List[Dict[str, Any]],
               last_reply: Optional[Dict[str, Any]]) -> None:
        """The rubric: the crucible episode's best (or last) scored step is the reward."""
        trace.info["crucible_attempts"] = attempts
        for name in ("ok", "compile_error", "infra_error"):
            trace.record_metric(f"attempts_{name}",
                                float(sum(1 for a in attempts if a["status"] == name)))
        scored = [a for a in attempts if a["reward"] is not None]
        if not scored:
            raise RuntimeError(
                "every attempt was an infra_error (the server's fault, not the policy's): "
                "the episode is dropped rather than scored")
        if self.config.reward_from == "last":
            value = float(scored[-1]["reward"])
        else:
            best = (last_reply or {}).get("best") or {}
            value = float(best["reward"]) if best.get("reward") is not None else \
                max(float(a["reward"]) for a in scored)
        trace.record_reward("kernel_reward", value, 1.0)


def _source_in(reply: str) -> Optional[str]:
    """The kernel in the model's reply, or None when it has none."""
    try:
        return extract_source(reply)
    except NoSourceFound:
        return None


def load_environment(
    endpoint: str = wire.DEFAULT_ENDPOINT,
    *,
    tasks: Optional[List[str]] = None,
    category: Optional[str] = None,
    max_steps: int = 4,
    reward: Optional[Dict[str, Any]] = None,
    tag: Optional[wire.Tag] = None,
    **config: Any,
) -> Any:
    """`vf.load_environment` on this module's taskset and env: the crucible server at
    `endpoint`, its `tasks` (default: all, or those of `category`), `max_steps` kernels per
    episode. Other keyword arguments are EnvConfig fields (`agent`, `prompt_style` goes in
    `taskset`...), e.g. `agent={"harness": {"id": "null"}, "runtime": {"type": "subprocess"}}`.
    """
    taskset = dict(config.pop("taskset", {}) or {})
    taskset.update(id=TASKSET_ID, endpoint=endpoint, tasks=list(tasks or []), category=category)
    data = dict(config, taskset=taskset, max_steps=max_steps, reward=reward,
                tag=wire.merge_tags(tag))
    return vf.load_environment(vf.resolve_env_config(data))
