"""AsyncClient: the pipelined client for asyncio programs, on zmq.asyncio."""

from __future__ import annotations

import asyncio
import itertools
import random
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from . import curve, wire
from .client import (
    _CONNECTED_EVENT,
    BUSY_BACKOFF_CAP_S,
    BUSY_BACKOFF_S,
    DEFAULT_BUSY_RETRIES,
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_TIMEOUT_S,
    Client,
    ScoreItem,
    with_default_tag,
)
from .errors import (
    Busy,
    CrucibleConnectionError,
    CrucibleError,
    CrucibleTimeout,
    ProtocolError,
    UnknownEpisode,
)

__all__ = ["AsyncClient", "AsyncEnv"]


class AsyncClient:
    """One DEALER socket; `await request(op, **fields)` from any number of tasks at once.

    Replies are read by one background task and matched to requests by id. Errors are the
    same as Client's: the CrucibleError subclass of the wire code, CrucibleTimeout after
    `timeout` seconds, CrucibleConnectionError when no connection comes up within
    `connect_timeout` seconds (the request is then not sent). `busy` replies are retried up
    to `busy_retries` times with exponential backoff. `tag` is Client's default request tag.
    Use from one event loop.

        async with AsyncClient(endpoint) as client:
            replies = await client.score_many(items, max_inflight=64)
    """

    def __init__(
        self,
        endpoint: str = wire.DEFAULT_ENDPOINT,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_frame_bytes: Optional[int] = wire.MAX_FRAME_BYTES,
        context: Optional[zmq.asyncio.Context] = None,
        connect_timeout: Optional[float] = DEFAULT_CONNECT_TIMEOUT_S,
        busy_retries: int = DEFAULT_BUSY_RETRIES,
        tag: Optional[wire.Tag] = None,
        server_key: Optional[curve.PathLike] = None,
        client_key: Optional[curve.PathLike] = None,
    ):
        self.endpoint = endpoint
        self.timeout = float(timeout)
        self.max_frame_bytes = max_frame_bytes
        self.connect_timeout = connect_timeout
        self.busy_retries = max(0, int(busy_retries))
        self.tag = wire.merge_tags(tag)
        self.busy_retried = 0
        self._context = context or zmq.asyncio.Context.instance()
        self._socket = self._context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        if "[" in endpoint:  # tcp://[::1]:5555: ZeroMQ speaks IPv6 only when asked
            self._socket.setsockopt(zmq.IPV6, 1)
        try:
            curve.apply(self._socket, server_key, client_key)
        except Exception:
            self._socket.close(linger=0)
            raise
        self._monitor: Optional[zmq.asyncio.Socket] = None
        try:
            if connect_timeout is not None:
                self._monitor = self._socket.get_monitor_socket(
                    _CONNECTED_EVENT | zmq.EVENT_DISCONNECTED)
            self._socket.connect(endpoint)
        except zmq.ZMQError as exc:
            if self._monitor is not None:
                self._monitor.close(linger=0)
            self._socket.close(linger=0)
            raise CrucibleConnectionError(None, f"cannot connect to {endpoint!r}: {exc}") from None
        self._connected: Optional[asyncio.Event] = None
        self._watcher: "Optional[asyncio.Task[None]]" = None
        self._ids = itertools.count(1)
        self._pending: "Dict[int, asyncio.Future[Any]]" = {}
        self._reader: "Optional[asyncio.Task[None]]" = None
        self._closed = False
        self.dropped_replies = 0
        self.protocol_violations = 0

    async def request(
        self, op: str, *, timeout: Optional[float] = None, **fields: Any
    ) -> Dict[str, Any]:
        """Sends one request and returns its full reply map, or raises a CrucibleError.

        As Client.submit, a `reset` or `score` carries the client's default `tag` under its own.
        """
        fields = with_default_tag(op, fields, self.tag)
        wait = self.timeout if timeout is None else float(timeout)
        deadline = asyncio.get_running_loop().time() + wait
        attempt = 0
        while True:
            try:
                return await self._request_once(op, wait, fields)
            except Busy:
                loop = asyncio.get_running_loop()
                delay = min(BUSY_BACKOFF_CAP_S, BUSY_BACKOFF_S * 2 ** attempt)
                delay *= random.uniform(0.5, 1.0)
                if attempt >= self.busy_retries or loop.time() + delay >= deadline:
                    raise
                await asyncio.sleep(delay)
                attempt += 1
                self.busy_retried += 1
                wait = max(0.001, deadline - loop.time())

    async def _wait_connected(self, op: str) -> None:
        if self._monitor is None or self.connect_timeout is None:
            return
        loop = asyncio.get_running_loop()
        if self._connected is None:
            self._connected = asyncio.Event()
        if self._watcher is None or self._watcher.done():
            self._watcher = loop.create_task(self._watch_monitor())
        if self._connected.is_set():
            return
        try:
            await asyncio.wait_for(self._connected.wait(), self.connect_timeout)
        except asyncio.TimeoutError:
            raise CrucibleConnectionError(
                None,
                f"could not connect to {self.endpoint} within {self.connect_timeout:g} s "
                f"('{op}' was not sent): is a crucible server listening there?",
            ) from None

    async def _watch_monitor(self) -> None:
        assert self._monitor is not None and self._connected is not None
        while not self._closed:
            try:
                event = parse_monitor_message(await self._monitor.recv_multipart())
            except (zmq.ZMQError, asyncio.CancelledError):
                return
            if event.get("event") == _CONNECTED_EVENT:
                self._connected.set()
            elif event.get("event") == zmq.EVENT_DISCONNECTED:
                self._connected.clear()

    async def _request_once(self, op: str, wait: float, fields: Dict[str, Any]) -> Dict[str, Any]:
        if self._closed:
            raise CrucibleConnectionError(None, "the client is closed")
        rid = next(self._ids)
        frame = wire.encode_request(rid, op, fields, self.max_frame_bytes)
        await self._wait_connected(op)
        loop = asyncio.get_running_loop()
        if self._reader is None or self._reader.done():
            self._reader = loop.create_task(self._read_loop())
        future = loop.create_future()
        self._pending[rid] = future
        try:
            await self._socket.send(frame)
            reply = await asyncio.wait_for(future, wait)
        except asyncio.TimeoutError:
            raise CrucibleTimeout(
                None, f"no reply to '{op}' from {self.endpoint} within {wait:g} s"
            ) from None
        finally:
            self._pending.pop(rid, None)
        return wire.check_reply(reply)

    async def _read_loop(self) -> None:
        while not self._closed:
            try:
                frames = await self._socket.recv_multipart()
            except (zmq.ZMQError, asyncio.CancelledError):
                return
            try:
                reply = wire.decode_frames(frames)
            except ProtocolError:
                self.protocol_violations += 1
                continue
            rid = wire.reply_id(reply)
            future = self._pending.get(rid) if isinstance(rid, int) else None
            if future is None or future.done():
                if isinstance(reply, dict):
                    self.dropped_replies += 1
                else:
                    self.protocol_violations += 1
                continue
            future.set_result(reply)

    async def score_many(
        self,
        items: Iterable[ScoreItem],
        *,
        max_inflight: int = 64,
        timeout: Optional[float] = None,
        return_exceptions: bool = False,
        **common: Any,
    ) -> List[Any]:
        """As Client.score_many: reply bodies ({task, result, reward}) in item order."""
        if max_inflight < 1:
            raise ValueError("max_inflight must be at least 1")
        gate = asyncio.Semaphore(max_inflight)

        async def one(fields: Mapping[str, Any]) -> Dict[str, Any]:
            async with gate:
                return wire.body(await self.request("score", timeout=timeout, **fields))

        requests = [Client._score_fields(item, common) for item in items]
        results = await asyncio.gather(*(one(f) for f in requests), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        for error in errors:
            if not isinstance(error, CrucibleError):
                raise error  # a bug or a cancellation, not a server answer
        if errors and not return_exceptions:
            raise errors[0]
        return list(results)

    # Convenience wrappers mirroring Env's stateless calls.
    async def hello(self, client: str = "crucible_client.AsyncClient") -> Dict[str, Any]:
        return wire.body(await self.request("hello", client=client))

    async def tasks(self, category: Optional[str] = None) -> List[Dict[str, Any]]:
        tasks: List[Dict[str, Any]] = (await self.request("tasks", category=category))["tasks"]
        return tasks

    async def task(self, task_id: str) -> Dict[str, Any]:
        view: Dict[str, Any] = (await self.request("task", task=task_id))["task"]
        return view

    async def score(self, task: str, source: Any, **fields: Any) -> Dict[str, Any]:
        fields.update(task=task, source=wire.source_text(source))
        return wire.body(await self.request("score", **fields))

    async def stats(self) -> Dict[str, Any]:
        return wire.body(await self.request("stats"))

    async def close(self) -> None:
        """Fails outstanding requests with CrucibleConnectionError and closes the socket."""
        if self._closed:
            return
        self._closed = True
        for future in self._pending.values():
            if not future.done():
                future.set_exception(CrucibleConnectionError(None, "the client was closed"))
        for task in (self._reader, self._watcher):
            if task is None:
                continue
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        if self._monitor is not None:
            try:
                self._socket.disable_monitor()
            except zmq.ZMQError:
                pass
            self._monitor.close(linger=0)
        self._socket.close(linger=0)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()


class AsyncEnv:
    """Env's one-episode view for asyncio trainers: the same calls, awaited.

        async with AsyncEnv(endpoint) as env:
            observation = await env.reset("llm/rms_norm", seed=0, max_steps=4)
            observation, reward, terminated, truncated, info = await env.step(source)

    Observations and errors are Env's; many AsyncEnvs (one per rollout) can share a loop and
    run their steps concurrently. Keyword arguments beyond `timeout` go to AsyncClient.
    """

    def __init__(
        self,
        endpoint: str = wire.DEFAULT_ENDPOINT,
        timeout: float = DEFAULT_TIMEOUT_S,
        *,
        client_name: str = "crucible_client.AsyncEnv",
        **client_options: Any,
    ):
        self.client = AsyncClient(endpoint, timeout=timeout, **client_options)
        self.client_name = client_name
        self.episode: Optional[str] = None
        self.task_id: Optional[str] = None
        self.max_steps: Optional[int] = None
        self.steps = 0

    async def hello(self) -> Dict[str, Any]:
        return await self.client.hello(self.client_name)

    async def tasks(self, category: Optional[str] = None) -> List[Dict[str, Any]]:
        return await self.client.tasks(category)

    async def task(self, task_id: str) -> Dict[str, Any]:
        return await self.client.task(task_id)

    async def score(self, task: str, source: Any, **fields: Any) -> Dict[str, Any]:
        return await self.client.score(task, source, **fields)

    async def stats(self) -> Dict[str, Any]:
        return await self.client.stats()

    async def reset(
        self,
        task: str,
        seed: Optional[int] = None,
        options: Optional[Dict[str, Any]] = None,
        max_steps: Optional[int] = None,
        reward: Optional[Dict[str, Any]] = None,
        tag: Optional[wire.Tag] = None,
    ) -> Dict[str, Any]:
        """Opens a new episode (closing the previous one); returns the observation
        {episode, task, max_steps, step}. `tag` labels the episode: its steps carry it unless
        they set their own."""
        if self.episode is not None:
            try:
                await self.close_episode()
            except UnknownEpisode:
                pass  # it expired on the server; nothing left to close
        observation = wire.body(await self.client.request(
            "reset", task=task, seed=seed, max_steps=max_steps, reward=reward, options=options,
            tag=tag))
        self.episode = observation["episode"]
        self.task_id = task
        self.max_steps = observation.get("max_steps")
        self.steps = observation.get("step", 0)
        return observation

    async def step(
        self, source: Any, plan: Any = None, tag: Optional[wire.Tag] = None
    ) -> Tuple[Dict[str, Any], float, bool, bool, Dict[str, Any]]:
        """(observation, reward, terminated, truncated, info), as Env.step."""
        if self.episode is None:
            raise RuntimeError("step() needs an open episode: call reset() first")
        reply = await self.client.request(
            "step", episode=self.episode, source=wire.source_text(source), plan=plan, tag=tag)
        observation = dict(reply.get("result") or {})
        observation["step"] = reply.get("step")
        self.steps = reply.get("step", self.steps)
        return (observation, float(reply.get("reward", 0.0)),
                bool(reply.get("terminated", False)), bool(reply.get("truncated", False)), reply)

    async def close_episode(self) -> Optional[Dict[str, Any]]:
        if self.episode is None:
            return None
        episode, self.episode = self.episode, None
        return wire.body(await self.client.request("close", episode=episode))

    async def close(self) -> Optional[Dict[str, Any]]:
        """Closes the open episode (if any) and the connection; returns the close reply."""
        try:
            return await self.close_episode()
        finally:
            await self.client.close()

    async def __aenter__(self) -> "AsyncEnv":
        return self

    async def __aexit__(self, exc_type: Any, *rest: Any) -> None:
        try:
            await self.close()
        except CrucibleError:
            if exc_type is None:
                raise
