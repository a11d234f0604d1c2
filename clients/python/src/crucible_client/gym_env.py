"""A gymnasium.Env over a crucible episode. Needs the optional `gymnasium` package.

Importing this module registers the id "crucible/Kernel-v0":

    import gymnasium, crucible_client.gym_env
    env = gymnasium.make("crucible/Kernel-v0", task="llm/rms_norm", endpoint="tcp://127.0.0.1:5555")
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.envs.registration import EnvSpec

from . import wire
from .client import DEFAULT_TIMEOUT_S
from .env import Env
from .pool import Target
from .prompts import PromptTooLarge, render_feedback, render_prompt

__all__ = ["CrucibleGymEnv", "ENV_ID", "STATUS_NAMES"]

ENV_ID = "crucible/Kernel-v0"
ENTRY_POINT = "crucible_client.gym_env:CrucibleGymEnv"

# Every printable ASCII character plus the whitespace C++ sources use.
_SOURCE_CHARSET = frozenset(chr(c) for c in range(32, 127)) | {"\n", "\t", "\r"}
_TEXT_CHARSET = frozenset(chr(c) for c in range(32, 127)) | {"\n", "\t"}
# observation["status"] indexes this: "none" before the first step, "other" for a status this
# client does not know.
STATUS_NAMES = ("none",) + tuple(wire.STATUSES) + ("other",)
_MAX_STEP = 2**31 - 1
_MAX_SPEEDUP = 1e6  # far above anything physical: the roofline floor caps real speedups


def _text(value: str, limit: int) -> str:
    """Text inside the observation space: its charset (others become '?'), at most `limit`."""
    cleaned = "".join(ch if ch in _TEXT_CHARSET else ("\n" if ch == "\r" else "?") for ch in value)
    return cleaned[:limit]


class CrucibleGymEnv(gymnasium.Env):
    """Actions are CUDA source strings; observations are typed maps an LLM policy can read.

    observation = {
        "text":    the prompt for the task after reset (prompts.render_prompt), the feedback on
                   the last step after step (prompts.render_feedback), at most `text_chars`;
        "status":  index into STATUS_NAMES (0 "none" after reset);
        "step":    the episode's step count (int64);
        "speedup": the step's speedup over the reference, 0.0 when it was not timed (float64),
    }

    reset(seed=..., options={"task": ..., "max_steps": ..., "reward": {...}, "tag": {...}}) opens
    an episode (the task defaults to the constructor's); `seed` also seeds the server's case
    values; `tag` is merged over the constructor's and labels the episode in the server's log.
    info after reset: {task, max_steps, reward_spec, task_view (the agent view map)}; after a
    step: {result (the server's full result map), best, infra_error}. No transport ids (request
    or episode ids) appear in either. The env is registered as nondeterministic: timings, and
    so rewards, vary from run to run.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        task: str,
        endpoint: Target = wire.DEFAULT_ENDPOINT,
        *,
        max_steps: Optional[int] = None,
        reward: Optional[Dict[str, Any]] = None,
        timeout: float = DEFAULT_TIMEOUT_S,
        text_chars: int = 32768,
        prompt_options: Optional[Mapping[str, Any]] = None,
        hardware_notes: bool = True,
        tag: Optional[wire.Tag] = None,
    ):
        super().__init__()
        self.task = task
        self.max_steps = max_steps
        self.reward_spec = reward
        self.text_chars = int(text_chars)
        self.prompt_options = dict(prompt_options or {})
        self.hardware_notes = hardware_notes
        self.tag = wire.merge_tags(tag)
        self._hello: Optional[Dict[str, Any]] = None
        self.env = Env(endpoint, timeout, client_name="crucible_client.CrucibleGymEnv")
        self.action_space = spaces.Text(
            max_length=wire.MAX_SOURCE_BYTES, min_length=1, charset=_SOURCE_CHARSET
        )
        self.observation_space = spaces.Dict({
            "text": spaces.Text(max_length=self.text_chars, min_length=0, charset=_TEXT_CHARSET),
            "status": spaces.Discrete(len(STATUS_NAMES)),
            "step": spaces.Box(0, _MAX_STEP, shape=(), dtype=np.int64),
            "speedup": spaces.Box(0.0, _MAX_SPEEDUP, shape=(), dtype=np.float64),
        })
        # What gymnasium.make would record, so a directly built env says how to rebuild it and
        # that it is nondeterministic.
        self.spec = EnvSpec(
            ENV_ID, entry_point=ENTRY_POINT, nondeterministic=True,
            kwargs={"task": task, "endpoint": endpoint, "max_steps": max_steps, "reward": reward,
                    "timeout": timeout, "text_chars": text_chars,
                    "prompt_options": self.prompt_options, "hardware_notes": hardware_notes,
                    "tag": self.tag},
        )

    def _observation(self, text: str, status: str, step: int, speedup: Any) -> Dict[str, Any]:
        index = STATUS_NAMES.index(status) if status in STATUS_NAMES else len(STATUS_NAMES) - 1
        value = float(speedup) if isinstance(speedup, (int, float)) else 0.0
        if not np.isfinite(value):
            value = 0.0
        return {
            "text": _text(text, self.text_chars),
            "status": np.int64(index),
            "step": np.array(min(max(int(step), 0), _MAX_STEP), dtype=np.int64),
            "speedup": np.array(min(max(value, 0.0), _MAX_SPEEDUP), dtype=np.float64),
        }

    def reset(
        self, *, seed: Optional[int] = None, options: Optional[Dict[str, Any]] = None
    ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        super().reset(seed=seed)
        options = dict(options or {})
        task = options.pop("task", self.task)
        max_steps = options.pop("max_steps", self.max_steps)
        reward = options.pop("reward", self.reward_spec)
        tag = wire.merge_tags(self.tag, options.pop("tag", None))
        reply = self.env.reset(
            task, seed=seed, options=options or None, max_steps=max_steps, reward=reward, tag=tag
        )
        view = reply.get("task") or {}
        prompt_options = dict(self.prompt_options)
        if self.hardware_notes and "hello" not in prompt_options:
            if self._hello is None:
                self._hello = self.env.hello()
            prompt_options["hello"] = self._hello
        prompt_options.setdefault("max_chars", self.text_chars)
        try:
            text = render_prompt(view, **prompt_options)
        except PromptTooLarge:
            # The task's required parts alone exceed the space: keep whole lines up to it.
            prompt_options["max_chars"] = None
            full = render_prompt(view, **prompt_options)[: self.text_chars]
            text = full[: full.rfind("\n") + 1] or full
        observation = self._observation(text, "none", int(reply.get("step", 0)), None)
        info = {"task": task, "max_steps": reply.get("max_steps"),
                "reward_spec": reply.get("reward_spec"), "task_view": view}
        return observation, info

    def step(self, action: str) -> Tuple[Dict[str, Any], float, bool, bool, Dict[str, Any]]:
        result, reward, terminated, truncated, reply = self.env.step(action)
        text = render_feedback(reply, source=action, max_chars=self.text_chars)
        observation = self._observation(text, str(result.get("status")),
                                        int(reply.get("step") or 0), result.get("speedup"))
        result = {k: v for k, v in result.items() if k != "step"}
        info = {"result": result, "best": reply.get("best"),
                "infra_error": bool((result.get("reward") or {}).get("infra"))}
        return observation, float(reward), terminated, truncated, info

    def close(self) -> None:
        self.env.close()


def register() -> None:
    """Registers ENV_ID with gymnasium (done on import; calling it again does nothing)."""
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(id=ENV_ID, entry_point=ENTRY_POINT, nondeterministic=True)


register()
