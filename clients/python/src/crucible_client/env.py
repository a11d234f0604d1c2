"""Env: a gym-style, one-episode-at-a-time view of a crucible server."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple, Union

import zmq

from . import wire
from .client import DEFAULT_TIMEOUT_S, Client
from .errors import CrucibleError, UnknownEpisode
from .pool import Pool, Target, connect

__all__ = ["Env"]

StepReturn = Tuple[Dict[str, Any], float, bool, bool, Dict[str, Any]]


class Env:
    """One agent's connection: reset an episode on a task, step it with CUDA sources.

    Every method blocks until its reply arrives (or `timeout` seconds pass, raising
    CrucibleTimeout) and raises the CrucibleError subclass for an error reply. For many
    requests in flight use `Env.client` (a Client) or `Client` directly. `endpoint` may list
    several servers (a list, or a string with commas): the Env then runs over a Pool, and its
    episode stays on the server that opened it. A Client or Pool may be passed to share it.

        with Env("tcp://127.0.0.1:5555") as env:
            obs = env.reset("llm/rms_norm", seed=0, max_steps=4)
            obs, reward, terminated, truncated, info = env.step(source)
    """

    def __init__(
        self,
        endpoint: "Target" = wire.DEFAULT_ENDPOINT,
        timeout: float = DEFAULT_TIMEOUT_S,
        *,
        client_name: str = "crucible_client.Env",
        context: "Optional[zmq.Context[Any]]" = None,
        **client_options: Any,
    ):
        # client_options go to Client (or Pool, for several endpoints): connect_timeout,
        # busy_retries, max_frame_bytes, tag... A given Client or Pool is shared: it keeps its
        # own options and close() leaves it open.
        self._owns_client = not isinstance(endpoint, (Client, Pool))
        self.client: Union[Client, Pool] = connect(endpoint, timeout=timeout, context=context,
                                                   **client_options)
        self.client_name = client_name
        self.episode: Optional[str] = None  # id of the open episode, if any
        self.task_id: Optional[str] = None
        self.max_steps: Optional[int] = None
        self.steps = 0

    # -- stateless ops ----------------------------------------------------------------------
    def hello(self) -> Dict[str, Any]:
        """Server identity, GPUs, enabled stages, limits and task count."""
        return wire.body(self.client.request("hello", client=self.client_name))

    def tasks(self, category: Optional[str] = None) -> List[Dict[str, Any]]:
        """[{id, category, module, title}], optionally only one category."""
        tasks: List[Dict[str, Any]] = self.client.request("tasks", category=category)["tasks"]
        return tasks

    def task(self, task_id: str) -> Dict[str, Any]:
        """The agent's view of one task (description, tensors, visible cases, reference...)."""
        view: Dict[str, Any] = self.client.request("task", task=task_id)["task"]
        return view

    def score(
        self,
        task: str,
        source: Union[str, bytes],
        plan: Any = None,
        seed: Optional[int] = None,
        reward: Optional[Dict[str, Any]] = None,
        tag: Optional[wire.Tag] = None,
        model: Optional[wire.ModelChoice] = None,
    ) -> Dict[str, Any]:
        """Scores one source without an episode: returns {task, result, reward} (and `tag`,
        echoed, from a server that keeps tags). `model` ("llama3_8b", or {"name": ...,
        "num_seqs": 8}) also judges an ok step inside that model's decode step: the result then
        carries `model` (docs/models.md)."""
        reply = self.client.request(
            "score", task=task, source=wire.source_text(source), plan=plan, seed=seed,
            reward=reward, tag=tag, model=model,
        )
        return wire.body(reply)

    def stats(self) -> Dict[str, Any]:
        """Server counters: requests, replies, errors per code, statuses, open episodes..."""
        return wire.body(self.client.request("stats"))

    # -- the episode ------------------------------------------------------------------------
    def reset(
        self,
        task: str,
        seed: Optional[int] = None,
        options: Optional[Dict[str, Any]] = None,
        max_steps: Optional[int] = None,
        reward: Optional[Dict[str, Any]] = None,
        tag: Optional[wire.Tag] = None,
        model: Optional[wire.ModelChoice] = None,
    ) -> Dict[str, Any]:
        """Opens a new episode (closing the previous one) and returns the observation.

        The observation is the reply body: {episode, task: <agent view>, max_steps, step: 0}.
        `tag` (at most 8 string keys to strings or integers) labels the episode in the
        server's log; its steps carry it unless they set their own. `model` asks every ok step
        of the episode for the model check (as `score`).
        """
        if self.episode is not None:
            try:
                self.close_episode()
            except UnknownEpisode:
                pass  # it expired on the server; nothing left to close
        reply = self.client.request(
            "reset", task=task, seed=seed, max_steps=max_steps, reward=reward, options=options,
            tag=tag, model=model,
        )
        observation = wire.body(reply)
        self.episode = observation["episode"]
        self.task_id = task
        self.max_steps = observation.get("max_steps")
        self.steps = observation.get("step", 0)
        return observation

    def step(
        self, source: Union[str, bytes], plan: Any = None, tag: Optional[wire.Tag] = None
    ) -> StepReturn:
        """Submits one action; returns (observation, reward, terminated, truncated, info).

        observation is the step's result map ({status, message, reward, stages, compile,
        correctness, timing}) plus `step`; info is the full reply, including `best`. `tag`
        replaces the episode's reset tag for this step only.
        """
        if self.episode is None:
            raise RuntimeError("step() needs an open episode: call reset() first")
        reply = self.client.request(
            "step", episode=self.episode, source=wire.source_text(source), plan=plan, tag=tag
        )
        observation = dict(reply.get("result") or {})
        observation["step"] = reply.get("step")
        self.steps = reply.get("step", self.steps)
        return (
            observation,
            float(reply.get("reward", 0.0)),
            bool(reply.get("terminated", False)),
            bool(reply.get("truncated", False)),
            reply,
        )

    def close_episode(self) -> Optional[Dict[str, Any]]:
        """Closes the open episode; returns {episode, steps, best} or None if none was open."""
        if self.episode is None:
            return None
        episode, self.episode = self.episode, None
        return wire.body(self.client.request("close", episode=episode))

    def close(self) -> Optional[Dict[str, Any]]:
        """Closes the open episode (if any) and the connection; returns the close reply."""
        if self.client.closed:
            return None
        try:
            return self.close_episode()
        finally:
            if self._owns_client:
                self.client.close()

    def __enter__(self) -> "Env":
        return self

    def __exit__(self, exc_type: Any, *rest: Any) -> None:
        try:
            self.close()
        except CrucibleError:
            if exc_type is None:
                raise  # otherwise the exception already leaving the block matters more
