"""Python client for crucible, the RL environment server for GPU-kernel-generation agents.

    from crucible_client import Env, Client
    with Env("tcp://127.0.0.1:5555") as env:
        obs = env.reset("llm/rms_norm")
        obs, reward, terminated, truncated, info = env.step(open("kernel.cu").read())

Client keeps many requests in flight from threads; AsyncClient does the same on asyncio; Pool
spreads Client's requests over several servers (scores by load, episodes kept on their server),
and AsyncPool AsyncClient's. Env, AsyncEnv and the trainer adapters take a list of endpoints
(or a Pool) wherever they take one endpoint.
`crucible_client.prompts` renders prompts from task views, extracts sources from completions
and writes feedback from results; `crucible_client.adapters` has reward functions for TRL and
verl; `crucible_client.trl_env` is TRL's multi-turn `environment_factory`;
`crucible_client.gym_env.CrucibleGymEnv` wraps an episode as a gymnasium.Env; `.openenv_env`
and `.verifiers_env` are OpenEnv and verifiers environments (those three need optional
packages, imported only by their modules); `crucible_client.ray_cluster.start_servers` starts
one server per GPU node of a Ray cluster and returns a Pool over them (needs Ray).
"""

from typing import Any

from .client import DEFAULT_TIMEOUT_S, Client
from .env import Env
from .pool import Pool, ServerLost
from .errors import (
    ERROR_CLASSES,
    BadRequest,
    Busy,
    CrucibleConnectionError,
    CrucibleError,
    CrucibleTimeout,
    EpisodeDone,
    InvalidArgument,
    ProtocolError,
    ServerInternalError,
    ShuttingDown,
    TooLarge,
    UnknownEpisode,
    UnknownOp,
    UnknownTask,
    UnsupportedVersion,
    error_from_wire,
)
from .wire import DEFAULT_ENDPOINT, OPS, PROTOCOL_VERSION, STATUSES

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # Imported lazily so that asyncio and gymnasium are only loaded by those who use them.
    if name == "AsyncClient":
        from .aio import AsyncClient

        return AsyncClient
    if name == "AsyncEnv":
        from .aio import AsyncEnv

        return AsyncEnv
    if name == "AsyncPool":
        from .aio import AsyncPool

        return AsyncPool
    if name == "ray_cluster":
        # Not imported by `import crucible_client`: it imports Ray when used.
        import importlib

        return importlib.import_module(".ray_cluster", __name__)
    if name == "CrucibleGymEnv":
        from .gym_env import CrucibleGymEnv

        return CrucibleGymEnv
    raise AttributeError(f"module 'crucible_client' has no attribute {name!r}")


__all__ = [
    "AsyncClient",
    "AsyncEnv",
    "AsyncPool",
    "BadRequest",
    "Busy",
    "Client",
    "CrucibleConnectionError",
    "CrucibleError",
    "CrucibleGymEnv",
    "CrucibleTimeout",
    "DEFAULT_ENDPOINT",
    "DEFAULT_TIMEOUT_S",
    "ERROR_CLASSES",
    "Env",
    "EpisodeDone",
    "InvalidArgument",
    "OPS",
    "PROTOCOL_VERSION",
    "Pool",
    "ProtocolError",
    "STATUSES",
    "ServerInternalError",
    "ServerLost",
    "ShuttingDown",
    "TooLarge",
    "UnknownEpisode",
    "UnknownOp",
    "UnknownTask",
    "UnsupportedVersion",
    "error_from_wire",
]
