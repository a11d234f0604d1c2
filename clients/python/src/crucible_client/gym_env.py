"""A gymnasium.Env over a crucible episode. Needs the optional `gymnasium` package."""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import gymnasium
from gymnasium import spaces

from . import wire
from .client import DEFAULT_TIMEOUT_S
from .env import Env

__all__ = ["CrucibleGymEnv"]

# Every printable ASCII character plus the whitespace C++ sources use.
_SOURCE_CHARSET = frozenset(chr(c) for c in range(32, 127)) | {"\n", "\t", "\r"}


class CrucibleGymEnv(gymnasium.Env):
    """Actions are CUDA source strings; observations are the server's maps, unchanged.

    reset(seed=..., options={"task": ..., "max_steps": ..., "reward": {...}}) opens an
    episode (the task defaults to the constructor's); step(source) returns gymnasium's
    5-tuple with the step's result map as observation and the full reply as info.
    The observation space is left open (a nested map) because its content depends on the
    result's status; `action_space` bounds the source size and charset.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        task: str,
        endpoint: str = wire.DEFAULT_ENDPOINT,
        *,
        max_steps: Optional[int] = None,
        reward: Optional[Dict[str, Any]] = None,
        timeout: float = DEFAULT_TIMEOUT_S,
    ):
        super().__init__()
        self.task = task
        self.max_steps = max_steps
        self.reward_spec = reward
        self.env = Env(endpoint, timeout, client_name="crucible_client.CrucibleGymEnv")
        self.action_space = spaces.Text(
            max_length=wire.MAX_SOURCE_BYTES, min_length=1, charset=_SOURCE_CHARSET
        )
        self.observation_space = spaces.Dict({})

    def reset(
        self, *, seed: Optional[int] = None, options: Optional[Dict[str, Any]] = None
    ) -> Tuple[Dict[str, Any], Dict[str, Any]]:
        super().reset(seed=seed)
        options = dict(options or {})
        task = options.pop("task", self.task)
        max_steps = options.pop("max_steps", self.max_steps)
        reward = options.pop("reward", self.reward_spec)
        observation = self.env.reset(
            task, seed=seed, options=options or None, max_steps=max_steps, reward=reward
        )
        return observation, {"episode": observation["episode"]}

    def step(self, action: str) -> Tuple[Dict[str, Any], float, bool, bool, Dict[str, Any]]:
        return self.env.step(action)

    def close(self) -> None:
        self.env.close()
