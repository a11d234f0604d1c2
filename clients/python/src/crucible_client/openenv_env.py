"""crucible as an OpenEnv environment: the server side (`Environment`), its app, and its client.

Needs the optional `openenv` package (the `trainers` extra). OpenEnv serves an `Environment`
over HTTP and WebSocket; a trainer holds an `EnvClient` per session:

    # serve: python -m crucible_client.openenv_env --crucible tcp://127.0.0.1:5555 --port 8000
    from crucible_client.openenv_env import CrucibleEnvClient, KernelAction

    with CrucibleEnvClient(base_url="http://127.0.0.1:8000").sync() as env:
        result = env.reset(task="llm/rms_norm", max_steps=4)   # observation.text: the prompt
        result = env.step(KernelAction(source=source))         # observation.text: the feedback
        print(result.observation.status, result.reward, result.done)

Each OpenEnv session is one `CrucibleEnvironment`, which holds its own crucible connection and
one crucible episode at a time. Actions are CUDA sources (`KernelAction`); an observation
(`KernelObservation`) carries the prompt after reset and the feedback after a step
(`prompts.render_feedback`), the status, the speedup and the full result map. The reward is
the step's reward, and **None for an infra_error** (the server's fault: leave the sample out);
`done` is the episode's `terminated or truncated`.
"""

from __future__ import annotations

import argparse
import functools
from typing import Any, Dict, List, Mapping, Optional, Union

from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, EnvironmentMetadata, Observation, State
from pydantic import Field

from . import wire
from .client import DEFAULT_TIMEOUT_S
from .env import Env
from .errors import UnknownEpisode
from .pool import Target
from .prompts import PromptTooLarge, render_feedback, render_prompt

__all__ = [
    "CrucibleEnvClient",
    "CrucibleEnvironment",
    "KernelAction",
    "KernelObservation",
    "KernelState",
    "make_openenv_app",
]


class KernelAction(Action):  # type: ignore[misc]
    """One attempt: a CUDA C++ source with its `// @launch` directives (or a launch plan)."""

    source: str = Field(..., min_length=1, description="CUDA C++ source of the kernel(s)")
    plan: Optional[Union[List[Dict[str, Any]], Dict[str, Any]]] = Field(
        default=None, description="launch plan used instead of the // @launch directives")


class KernelObservation(Observation):  # type: ignore[misc]
    """What the agent reads: `text` is the task's prompt after reset and the feedback on the
    step after a step. `reward` is None after reset and for an infra_error."""

    text: str = Field(default="", description="the prompt after reset, the feedback after a step")
    task: str = Field(default="", description="task id")
    status: str = Field(default="none", description="step status ('none' after reset)")
    step: int = Field(default=0, description="the episode's step count")
    max_steps: Optional[int] = Field(default=None, description="the episode's step budget")
    speedup: Optional[float] = Field(default=None, description="speedup, when timed")
    infra_error: bool = Field(default=False, description="the server failed, not the kernel")
    result: Optional[Dict[str, Any]] = Field(default=None, description="the full result map")
    best: Optional[Dict[str, Any]] = Field(default=None, description="the best step so far")
    task_view: Optional[Dict[str, Any]] = Field(default=None, description="agent view (reset)")
    tag: Optional[Dict[str, Union[str, int]]] = Field(default=None, description="request tag")


class KernelState(State):  # type: ignore[misc]
    """The session's episode: `episode_id` is the crucible episode id."""

    task: Optional[str] = None
    max_steps: Optional[int] = None
    best: Optional[Dict[str, Any]] = None
    done: bool = False


class CrucibleEnvironment(Environment):  # type: ignore[misc]
    """An OpenEnv `Environment[KernelAction, KernelObservation, KernelState]` over one crucible
    connection. Sessions are independent (each its own instance and episode), so the app may
    serve many at once.

    `reset(seed=None, episode_id=None, task=None, max_steps=None, reward=None, tag=None)` opens
    an episode (the task defaults to the constructor's); `step(action)` submits one source.
    `prompt_options` go to `render_prompt`, `feedback_chars` bounds the feedback.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(
        self,
        endpoint: Target = wire.DEFAULT_ENDPOINT,
        *,
        task: Optional[str] = None,
        max_steps: Optional[int] = None,
        reward: Optional[Mapping[str, Any]] = None,
        tag: Optional[wire.Tag] = None,
        prompt_options: Optional[Mapping[str, Any]] = None,
        hardware_notes: bool = True,
        feedback_chars: Optional[int] = None,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        super().__init__()
        self.task = task
        self.max_steps = max_steps
        self.reward_spec = dict(reward) if reward else None
        self.tag = wire.merge_tags(tag)
        self.prompt_options = dict(prompt_options or {})
        self.hardware_notes = hardware_notes
        self.feedback_chars = feedback_chars
        self._env = Env(endpoint, timeout, client_name="crucible_client.openenv")
        self._hello: Optional[Dict[str, Any]] = None
        self._state = KernelState()

    def reset(
        self,
        seed: Optional[int] = None,
        episode_id: Optional[str] = None,
        task: Optional[str] = None,
        max_steps: Optional[int] = None,
        reward: Optional[Dict[str, Any]] = None,
        tag: Optional[Dict[str, Union[str, int]]] = None,
        **kwargs: Any,
    ) -> KernelObservation:
        task = task or self.task
        if not task:
            raise ValueError("reset needs a task: pass task=... (or give the environment one)")
        if episode_id is not None and tag is None:
            tag = {"episode_id": episode_id}  # the caller's id, kept in the server's log
        reply = self._env.reset(
            task, seed=seed, max_steps=max_steps or self.max_steps,
            reward=reward or self.reward_spec, tag=wire.merge_tags(self.tag, tag),
            options=kwargs.get("options"))
        view = reply.get("task") or {}
        self._state = KernelState(episode_id=reply.get("episode"), step_count=0, task=task,
                                  max_steps=reply.get("max_steps"))
        return KernelObservation(
            text=self._prompt(view), task=task, status="none", step=0,
            max_steps=reply.get("max_steps"), task_view=view, tag=reply.get("tag"),
            done=False, reward=None,
            metadata={"reward_spec": reply.get("reward_spec")})

    def step(self, action: KernelAction, timeout_s: Optional[float] = None,
             **kwargs: Any) -> KernelObservation:
        observation, reward, terminated, truncated, reply = self._env.step(
            action.source, plan=action.plan)
        result = {k: v for k, v in observation.items() if k != "step"}
        infra = bool((result.get("reward") or {}).get("infra")) or \
            result.get("status") == "infra_error"
        done = terminated or truncated
        step = int(reply.get("step") or 0)
        self._state.step_count = step
        self._state.best = reply.get("best")
        self._state.done = done
        speedup = result.get("speedup")
        return KernelObservation(
            text=render_feedback(reply, source=action.source, max_chars=self.feedback_chars),
            task=self._state.task or "", status=str(result.get("status")), step=step,
            max_steps=self._state.max_steps,
            speedup=float(speedup) if isinstance(speedup, (int, float)) else None,
            infra_error=infra, result=result, best=reply.get("best"), tag=reply.get("tag"),
            done=done, reward=None if infra else reward)

    @property
    def state(self) -> KernelState:
        return self._state

    def get_metadata(self) -> Any:
        return EnvironmentMetadata(
            name="crucible",
            description="GPU kernel generation: submit CUDA sources, get them compiled, "
                        "checked against the reference and timed",
            version="1.0.0")

    def close(self) -> None:
        try:
            self._env.close()
        except UnknownEpisode:
            pass  # the episode expired on the server already

    def _prompt(self, view: Mapping[str, Any]) -> str:
        options = dict(self.prompt_options)
        if self.hardware_notes and "hello" not in options:
            if self._hello is None:
                self._hello = self._env.hello()
            options["hello"] = self._hello
        try:
            return render_prompt(view, **options)
        except PromptTooLarge:
            options["max_chars"] = None
            return render_prompt(view, **options)


class CrucibleEnvClient(EnvClient):  # type: ignore[misc]
    """OpenEnv's client for a `CrucibleEnvironment` app (`EnvClient[KernelAction,
    KernelObservation, KernelState]`): async by default, `.sync()` for blocking calls."""

    def _step_payload(self, action: KernelAction) -> Dict[str, Any]:
        payload: Dict[str, Any] = action.model_dump(exclude_none=True)
        return payload

    def _parse_result(self, payload: Dict[str, Any]) -> StepResult:
        fields = dict(payload.get("observation") or {})
        observation = KernelObservation(**fields, reward=payload.get("reward"),
                                        done=bool(payload.get("done", False)))
        return StepResult(observation=observation, reward=payload.get("reward"),
                          done=bool(payload.get("done", False)),
                          metadata=payload.get("metadata"))

    def _parse_state(self, payload: Dict[str, Any]) -> KernelState:
        return KernelState(**payload)


def make_openenv_app(endpoint: Target = wire.DEFAULT_ENDPOINT, *,
                     max_concurrent_envs: int = 64, **options: Any) -> Any:
    """The OpenEnv FastAPI app serving `CrucibleEnvironment(endpoint, **options)`, one per
    session, up to `max_concurrent_envs` sessions at once. Run it with uvicorn."""
    factory = functools.partial(CrucibleEnvironment, endpoint, **options)
    return create_app(factory, KernelAction, KernelObservation, env_name="crucible",
                      max_concurrent_envs=max_concurrent_envs)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m crucible_client.openenv_env",
        description="Serve a crucible server as an OpenEnv environment (HTTP and WebSocket).")
    parser.add_argument("--crucible", default=wire.DEFAULT_ENDPOINT,
                        help="the crucible server (default: %(default)s)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--task", help="default task for reset")
    parser.add_argument("--max-steps", type=int)
    parser.add_argument("--max-sessions", type=int, default=64)
    args = parser.parse_args(argv)
    import uvicorn

    app = make_openenv_app(args.crucible, max_concurrent_envs=args.max_sessions,
                           task=args.task, max_steps=args.max_steps)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
