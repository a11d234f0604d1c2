"""Reward functions in the shapes RL trainers call, over a crucible server.

No trainer is imported: these are plain callables with the trainers' signatures.

TRL (`GRPOTrainer(reward_funcs=[...])`):

    reward = make_trl_reward("tcp://127.0.0.1:5555")          # dataset column "task" = task id
    trainer = GRPOTrainer(model=..., reward_funcs=[reward], train_dataset=dataset)

The function takes `(prompts, completions, **kwargs)`, pulls the kernel out of each completion
(`prompts.extract_source`), scores all of them concurrently with the `score` op and returns
one value per completion: the server's reward, or **None where the server answered
`infra_error`** (or could not be reached in time). TRL turns a None into NaN and sums each
sample's rewards with `nansum`: with other reward functions, the sample keeps their rewards
and this one leaves its sum; when this is the only reward function, the sum is 0.0 and TRL
warns, and that 0.0 enters the group's mean and standard deviation. `infra_reward=
"group_mean"` avoids that: an infra sample then gets the mean reward of the completions of the
same prompt in the call, so it moves neither the group's mean nor (with advantage 0) the
policy. A completion with no source gets the preset's `invalid_action` penalty (the server
scores a placeholder with no kernel) unless `no_source_reward` says otherwise.

verl (`custom_reward_function.path` pointing at this module, `name: compute_score`, or
`compute_score_batch` with the batch reward manager): the task id is `extra_info["task"]`,
else `ground_truth`; the endpoint is `extra_info["endpoint"]`, else the `endpoint` keyword
(verl's `reward_kwargs`), else `$CRUCIBLE_ENDPOINT`, else the default. verl cannot drop a
sample, so an infra_error scores 0.0 with `infra_error: True` in the returned dict.
"""

from __future__ import annotations

import asyncio
import os
import threading
import warnings
from typing import (TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence,
                    Tuple, Union)

from . import wire
from .client import DEFAULT_TIMEOUT_S, Client
from .errors import CrucibleError, TooLarge
from .pool import Pool, Target, connect

if TYPE_CHECKING:
    from .aio import AsyncTarget
from .prompts import NoSourceFound, extract_source

__all__ = [
    "NO_SOURCE_PLACEHOLDER",
    "compute_score",
    "compute_score_batch",
    "make_trl_reward",
    "make_trl_reward_async",
    "score_completions",
]

# Scored in place of a completion with no source: it declares no kernel, so the server answers
# invalid_action with the reward preset's own penalty, without compiling anything.
NO_SOURCE_PLACEHOLDER = "// no kernel source was found in the completion\n"

# Client-side or server-capacity failures: the sample is the server's problem, not the policy's
# (the reward functions, TRL's environment and the verifiers environment share this set).
# ServerLost (server_lost) is a Pool's: every server it tried was lost with the score in flight.
_INFRA_CODES = frozenset({"timeout", "io", "busy", "shutting_down", "internal", "protocol_error",
                          "server_lost"})

Server = Target  # an endpoint, several (a list or a comma-separated string), a Client or a Pool
Outcome = Dict[str, Any]  # {reward: float|None, status: str, body: reply body|None, ...}


def _score_fields(
    task: str, completion: Any, which: str, reward: Optional[Mapping[str, Any]],
    seed: Optional[int], tag: Optional[wire.Tag] = None,
) -> Tuple[Dict[str, Any], Optional[str]]:
    """(score request fields, why the completion had no usable source)."""
    try:
        source = extract_source(completion, which=which)
        problem = None
        if len(source.encode("utf-8")) > wire.MAX_SOURCE_BYTES:
            source, problem = NO_SOURCE_PLACEHOLDER, "source over the server's size limit"
    except NoSourceFound as exc:
        source, problem = NO_SOURCE_PLACEHOLDER, str(exc)
    fields = {"task": task, "source": source, "reward": dict(reward) if reward else None,
              "seed": seed, "tag": wire.merge_tags(tag)}
    return fields, problem


def _outcome(reply: Any, problem: Optional[str]) -> Outcome:
    if isinstance(reply, CrucibleError):
        if reply.code in _INFRA_CODES:
            return {"reward": None, "status": "infra_error", "infra": True, "body": None,
                    "error": str(reply), "no_source": problem}
        raise reply  # unknown task, bad reward spec...: a configuration error, not a sample's
    result = reply.get("result") or {}
    infra = bool((result.get("reward") or {}).get("infra")) or result.get("status") == "infra_error"
    return {"reward": None if infra else float(reply.get("reward", 0.0)),
            "status": str(result.get("status")), "infra": infra, "body": reply,
            "speedup": result.get("speedup"), "error": None, "no_source": problem}


def score_completions(
    client: Union[Client, Pool],
    tasks: Sequence[str],
    completions: Sequence[Any],
    *,
    which: str = "last",
    reward: Optional[Mapping[str, Any]] = None,
    seed: Optional[int] = None,
    max_inflight: int = 64,
    timeout: Optional[float] = None,
    tag: Union[wire.Tag, Sequence[Optional[wire.Tag]], None] = None,
) -> List[Outcome]:
    """Scores each completion on its task, concurrently; one outcome map per completion.

    `tag` is one request tag for every score, or a sequence with one (or None) per completion.

    An outcome is `{reward, status, infra, body, speedup, error, no_source}`: `reward` is None
    for infra_error (and for timeouts, lost connections and `busy` after the client's
    retries); `body` is the score reply ({task, result, reward}). Errors that mean the call
    itself is wrong (unknown task, bad reward spec) are raised.
    """
    if len(tasks) != len(completions):
        raise ValueError(f"{len(tasks)} tasks for {len(completions)} completions")
    tags = _per_sample(tag, len(completions))
    prepared = [_score_fields(t, c, which, reward, seed, g)
                for t, c, g in zip(tasks, completions, tags)]
    replies = client.score_many([f for f, _ in prepared], max_inflight=max_inflight,
                                timeout=timeout, return_exceptions=True)
    redo = _oversized(replies, prepared)
    if redo:
        again = client.score_many([prepared[i][0] for i in redo], max_inflight=max_inflight,
                                  timeout=timeout, return_exceptions=True)
        for i, reply in zip(redo, again):
            replies[i] = reply
    return [_outcome(r, problem) for r, (_, problem) in zip(replies, prepared)]


def _oversized(replies: List[Any], prepared: List[Tuple[Dict[str, Any], Optional[str]]]
               ) -> List[int]:
    """Indices refused as too large (a server with a lower source limit than the default);
    their sources are replaced by the placeholder, to be scored again."""
    redo = [i for i, r in enumerate(replies) if isinstance(r, TooLarge)]
    for i in redo:
        fields = dict(prepared[i][0], source=NO_SOURCE_PLACEHOLDER)
        prepared[i] = (fields, "source over the server's size limit")
    return redo


def _per_sample(tag: Union[wire.Tag, Sequence[Optional[wire.Tag]], None], n: int
                ) -> List[Optional[wire.Tag]]:
    if tag is None or isinstance(tag, Mapping):
        return [tag] * n
    tags = list(tag)
    if len(tags) != n:
        raise ValueError(f"{len(tags)} tags for {n} completions")
    return tags


# A TRL reward function's tag: one map for every sample, or a function of the sample's index in
# the call and the call's keyword arguments (dataset columns, trainer_state) returning one.
TagSpec = Union[wire.Tag, Callable[[int, Mapping[str, Any]], Optional[wire.Tag]], None]


def _tags_for(tag: TagSpec, n: int, kwargs: Mapping[str, Any]) -> List[Optional[wire.Tag]]:
    if tag is None or isinstance(tag, Mapping):
        return [tag] * n
    return [tag(i, kwargs) for i in range(n)]


def _tasks_for(
    n: int, task: Optional[str], task_field: str, kwargs: Mapping[str, Any]
) -> List[str]:
    if task is not None:
        return [task] * n
    column = kwargs.get(task_field)
    if column is None:
        raise KeyError(
            f"no '{task_field}' column reached the reward function: add the task id to the "
            "dataset under that name, or pass task=... to make_trl_reward")
    column = list(column)
    if len(column) != n:
        raise ValueError(f"'{task_field}' has {len(column)} entries for {n} completions")
    return [str(t) for t in column]


def _rewards(outcomes: List[Outcome], no_source_reward: Optional[float], infra_reward: str,
             prompts: Any) -> List[Optional[float]]:
    out: List[Optional[float]] = []
    for o in outcomes:
        if o["no_source"] is not None and no_source_reward is not None:
            out.append(float(no_source_reward))
        else:
            out.append(o["reward"])
    if infra_reward == "group_mean" and any(r is None for r in out):
        keys = [repr(p) for p in prompts] if prompts is not None and len(prompts) == len(out) \
            else [""] * len(out)
        groups: Dict[str, List[float]] = {}
        for key, value in zip(keys, out):
            if value is not None:
                groups.setdefault(key, []).append(value)
        out = [value if value is not None else
               (sum(groups[key]) / len(groups[key]) if groups.get(key) else None)
               for key, value in zip(keys, out)]
    return out


def _check_infra_reward(infra_reward: str) -> None:
    if infra_reward not in ("none", "group_mean"):
        raise ValueError("infra_reward must be 'none' or 'group_mean'")


def make_trl_reward(
    server: Server = wire.DEFAULT_ENDPOINT,
    *,
    task_field: str = "task",
    task: Optional[str] = None,
    which: str = "last",
    reward: Optional[Mapping[str, Any]] = None,
    seed: Optional[int] = None,
    max_inflight: int = 64,
    timeout: Optional[float] = None,
    no_source_reward: Optional[float] = None,
    infra_reward: str = "none",
    name: str = "crucible_reward",
    tag: TagSpec = None,
) -> Callable[..., List[Optional[float]]]:
    """A TRL reward function `(prompts, completions, **kwargs) -> list[float | None]`.

    `server` is an endpoint (a Client is opened on first use, in the calling process) or a
    Client. Each sample's task id comes from the dataset column `task_field` (TRL passes extra
    columns as keyword arguments), or from `task` for all of them. `reward` is a reward spec
    (`{"preset": "fast_p"}`...) and `seed` the case-value seed, both sent with every score.
    Completions may be strings or conversational message lists. None marks infra_error
    (`infra_reward="none"`), or the infra sample gets its prompt group's mean reward
    (`"group_mean"`), as the module docstring explains. The function's `last_outcomes`
    attribute holds the last call's outcome maps (status, speedup, full reply) for logging.
    `tag` labels every score in the server's log: a map, or `f(index, kwargs) -> map` called per
    sample with the call's keyword arguments (e.g. `{"run": "grpo-7", "step":
    kwargs["trainer_state"].global_step}`).
    """
    _check_infra_reward(infra_reward)
    if tag is not None and not callable(tag):
        wire.check_tag(tag)  # a bad tag fails here, not in the middle of training
    holder = _ClientHolder(server)

    def reward_function(prompts: Any = None, completions: Sequence[Any] = (), **kwargs: Any
                        ) -> List[Optional[float]]:
        completions = list(completions)
        tasks = _tasks_for(len(completions), task, task_field, kwargs)
        outcomes = score_completions(holder.get(), tasks, completions, which=which,
                                     reward=reward, seed=seed, max_inflight=max_inflight,
                                     timeout=timeout, tag=_tags_for(tag, len(completions), kwargs))
        reward_function.last_outcomes = outcomes  # type: ignore[attr-defined]
        return _rewards(outcomes, no_source_reward, infra_reward, prompts)

    reward_function.__name__ = reward_function.__qualname__ = name
    reward_function.last_outcomes = []  # type: ignore[attr-defined]
    reward_function.close = holder.close  # type: ignore[attr-defined]
    return reward_function


def make_trl_reward_async(
    endpoint: "AsyncTarget" = wire.DEFAULT_ENDPOINT,
    *,
    task_field: str = "task",
    task: Optional[str] = None,
    which: str = "last",
    reward: Optional[Mapping[str, Any]] = None,
    seed: Optional[int] = None,
    max_inflight: int = 64,
    timeout: Optional[float] = None,
    no_source_reward: Optional[float] = None,
    infra_reward: str = "none",
    name: str = "crucible_reward",
    tag: TagSpec = None,
) -> Callable[..., Any]:
    """The same reward as `make_trl_reward`, as a coroutine function (TRL runs async reward
    functions on its own event loop, concurrently with the others). `endpoint` is one endpoint
    (an AsyncClient is opened per event loop that calls it), several (a list or a
    comma-separated string: an AsyncPool per event loop), or an AsyncClient or AsyncPool to use
    as it is (in its own loop)."""
    from .aio import AsyncClient, AsyncPool, connect_async

    _check_infra_reward(infra_reward)
    if tag is not None and not callable(tag):
        wire.check_tag(tag)
    given = endpoint if isinstance(endpoint, (AsyncClient, AsyncPool)) else None
    clients: Dict[int, Tuple[Any, Union[AsyncClient, AsyncPool]]] = {}

    async def reward_function(prompts: Any = None, completions: Sequence[Any] = (), **kwargs: Any
                              ) -> List[Optional[float]]:
        client: Union[AsyncClient, AsyncPool]
        if given is not None:
            client = given
        else:
            loop = asyncio.get_running_loop()
            entry = clients.get(id(loop))
            if entry is None or entry[0] is not loop:
                entry = (loop, connect_async(endpoint, timeout=timeout or DEFAULT_TIMEOUT_S))
                clients[id(loop)] = entry
            client = entry[1]
        completions = list(completions)
        tasks = _tasks_for(len(completions), task, task_field, kwargs)
        tags = _tags_for(tag, len(completions), kwargs)
        prepared = [_score_fields(t, c, which, reward, seed, g)
                    for t, c, g in zip(tasks, completions, tags)]
        replies = await client.score_many([f for f, _ in prepared], max_inflight=max_inflight,
                                          timeout=timeout, return_exceptions=True)
        redo = _oversized(replies, prepared)
        if redo:
            again = await client.score_many([prepared[i][0] for i in redo],
                                            max_inflight=max_inflight, timeout=timeout,
                                            return_exceptions=True)
            for i, reply in zip(redo, again):
                replies[i] = reply
        outcomes = [_outcome(r, p) for r, (_, p) in zip(replies, prepared)]
        reward_function.last_outcomes = outcomes  # type: ignore[attr-defined]
        return _rewards(outcomes, no_source_reward, infra_reward, prompts)

    async def close() -> None:
        loop = asyncio.get_running_loop()
        entry = clients.pop(id(loop), None)
        if entry is not None:
            await entry[1].close()

    reward_function.__name__ = reward_function.__qualname__ = name
    reward_function.last_outcomes = []  # type: ignore[attr-defined]
    reward_function.close = close  # type: ignore[attr-defined]
    return reward_function


class _ClientHolder:
    """A Client (or a Pool, for several endpoints) opened on first use, and again after a fork
    (a socket cannot cross one); a given Client or Pool is used as it is."""

    def __init__(self, server: Server):
        self._given = server if isinstance(server, (Client, Pool)) else None
        self._target = None if self._given is not None else server
        self._client: Optional[Union[Client, Pool]] = None
        self._pid = 0
        self._lock = threading.Lock()

    def get(self) -> Union[Client, Pool]:
        if self._given is not None:
            return self._given
        with self._lock:
            if self._client is None or self._pid != os.getpid() or self._client.closed:
                self._client = connect(self._target or wire.DEFAULT_ENDPOINT)
                self._pid = os.getpid()
            return self._client

    def close(self) -> None:
        with self._lock:
            if self._client is not None and self._pid == os.getpid():
                self._client.close()
            self._client = None


# ---------------------------------------------------------------------------------------
# verl
_verl_clients: Dict[str, _ClientHolder] = {}
_verl_lock = threading.Lock()


def _verl_client(endpoint: Optional[str]) -> Union[Client, Pool]:
    endpoint = endpoint or os.environ.get("CRUCIBLE_ENDPOINT") or wire.DEFAULT_ENDPOINT
    with _verl_lock:
        holder = _verl_clients.get(endpoint)
        if holder is None:
            holder = _verl_clients[endpoint] = _ClientHolder(endpoint)
    return holder.get()


def _verl_task(ground_truth: Any, extra_info: Optional[Mapping[str, Any]]) -> str:
    if isinstance(extra_info, Mapping) and extra_info.get("task"):
        return str(extra_info["task"])
    if isinstance(ground_truth, str) and ground_truth:
        return ground_truth
    raise ValueError("no task id: put it in extra_info['task'] or in the reward model's "
                     "ground_truth")


def _verl_result(outcome: Outcome) -> Dict[str, Any]:
    speedup = outcome.get("speedup")
    return {
        "score": 0.0 if outcome["reward"] is None else float(outcome["reward"]),
        "status": outcome["status"],
        "speedup": float(speedup) if isinstance(speedup, (int, float)) else 0.0,
        "infra_error": bool(outcome["infra"]),
        "no_source": outcome["no_source"] is not None,
    }


def compute_score(
    data_source: Any,
    solution_str: str,
    ground_truth: Any,
    extra_info: Optional[Mapping[str, Any]] = None,
    **kwargs: Any,
) -> Dict[str, Any]:
    """verl's reward function: scores one response; returns `{score, status, speedup,
    infra_error, no_source}` (verl logs the extra keys). `speedup` is 0.0 when not timed.

    Keyword arguments (verl's `reward_kwargs`): `endpoint`, `reward` (a reward spec), `seed`,
    `which` ("last"/"first" code block), `timeout`, `tag` (a request tag; `extra_info["tag"]`
    is merged over it).
    """
    return compute_score_batch([data_source], [solution_str], [ground_truth], [extra_info],
                               **kwargs)[0]


def compute_score_batch(
    data_sources: Sequence[Any],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Optional[Sequence[Optional[Mapping[str, Any]]]] = None,
    *,
    endpoint: Optional[str] = None,
    reward: Optional[Mapping[str, Any]] = None,
    seed: Optional[int] = None,
    which: str = "last",
    timeout: Optional[float] = None,
    max_inflight: int = 64,
    tag: Optional[wire.Tag] = None,
    **ignored: Any,
) -> List[Dict[str, Any]]:
    """verl's batch reward function (BatchRewardManager): every response scored concurrently.

    `tag` (from `reward_kwargs`) labels every score; a sample's `extra_info["tag"]` map is
    merged over it."""
    extras = list(extra_infos) if extra_infos is not None else [None] * len(solution_strs)
    if ignored:
        warnings.warn(f"compute_score_batch ignores {sorted(ignored)}", stacklevel=2)
    tasks = [_verl_task(g, e) for g, e in zip(ground_truths, extras)]
    if endpoint is None:
        given = {str(e["endpoint"]) for e in extras if isinstance(e, Mapping) and e.get("endpoint")}
        if len(given) > 1:
            raise ValueError(f"the batch names {len(given)} endpoints; score one per call")
        endpoint = given.pop() if given else None
    tags = [wire.merge_tags(tag, e.get("tag") if isinstance(e, Mapping) else None)
            for e in extras]
    outcomes = score_completions(_verl_client(endpoint), tasks, list(solution_strs), which=which,
                                 reward=reward, seed=seed, max_inflight=max_inflight,
                                 timeout=timeout, tag=tags)
    return [_verl_result(o) for o in outcomes]
