"""AsyncClient: the pipelined client for asyncio programs, on zmq.asyncio."""

from __future__ import annotations

import asyncio
import itertools
import random
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

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
from .pool import (
    _EPISODE_OPS,
    DEFAULT_HEALTH_INTERVAL_S,
    DEFAULT_HEALTH_TIMEOUT_S,
    ServerLost,
    _episode_reply,
    _configure,
    _is_loss,
    _one_or_many,
    _Routes,
)
from .errors import (
    Busy,
    CrucibleConnectionError,
    CrucibleError,
    CrucibleTimeout,
    ProtocolError,
    UnknownEpisode,
)

__all__ = ["AsyncClient", "AsyncEnv", "AsyncPool", "AsyncTarget", "connect_async"]


class _AsyncOps:
    """The calls AsyncClient and AsyncPool build on their own `request`."""

    async def request(self, op: str, *, timeout: Optional[float] = None, **fields: Any
                      ) -> Dict[str, Any]:
        raise NotImplementedError

    async def score_many(
        self,
        items: Iterable[ScoreItem],
        *,
        max_inflight: int = 64,
        timeout: Optional[float] = None,
        return_exceptions: bool = False,
        **common: Any,
    ) -> List[Any]:
        """As Client.score_many: reply bodies ({task, result, reward}) in item order, at most
        `max_inflight` requests in flight."""
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


class AsyncClient(_AsyncOps):
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
        self._sent: "set[int]" = set()  # ids of pending requests already handed to the socket
        self._reader: "Optional[asyncio.Task[None]]" = None
        self._closed = False
        self.dropped_replies = 0
        self.protocol_violations = 0
        self.disconnects = 0  # connections to the server lost (it died or restarted)

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
                self.disconnects += 1
                # As Client: the replies to what was sent went to the lost connection, so
                # waiting for them would only run out the timeout.
                lost = CrucibleConnectionError(
                    None,
                    f"lost the connection to {self.endpoint} with the request in flight "
                    "(server restarted, or it dropped this client for an oversized frame)")
                for rid in list(self._sent):
                    future = self._pending.get(rid)
                    if future is not None and not future.done():
                        future.set_exception(lost)
                self._sent.clear()

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
            self._sent.add(rid)
            reply = await asyncio.wait_for(future, wait)
        except asyncio.TimeoutError:
            raise CrucibleTimeout(
                None, f"no reply to '{op}' from {self.endpoint} within {wait:g} s"
            ) from None
        finally:
            self._pending.pop(rid, None)
            self._sent.discard(rid)
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

    @property
    def connected(self) -> bool:
        """Whether a connection to the server is up now (as far as the monitor has seen)."""
        return self._connected is not None and self._connected.is_set()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def inflight(self) -> int:
        """Requests awaiting their reply."""
        return len(self._pending)

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


class AsyncPool(_AsyncOps):
    """Pool for asyncio programs: several servers behind AsyncClient's API.

    `AsyncPool(endpoints, **client_options)` opens one AsyncClient per endpoint with the same
    options. Routing, episode ids (``"s<index>/<server's id>"``), retries and ServerLost are
    Pool's (see its docstring): `score` and the other stateless ops go to the least-loaded
    server that is up and are sent again to another one when theirs is lost; episodes stay on
    the server that opened them; a step of an episode whose server was lost raises ServerLost.
    A background task asks every server for `stats` every `health_interval` seconds once the
    pool is first used in a running loop. Use from one event loop.

        async with AsyncPool(["tcp://10.0.0.1:5555", "tcp://10.0.0.2:5555"]) as pool:
            bodies = await pool.score_many(items, max_inflight=128)
    """

    endpoints: List[str]
    health_interval: float
    health_timeout: float
    _client_options: Dict[str, Any]

    def __init__(
        self,
        endpoints: Sequence[str],
        *,
        health_interval: float = DEFAULT_HEALTH_INTERVAL_S,
        health_timeout: float = DEFAULT_HEALTH_TIMEOUT_S,
        **client_options: Any,
    ):
        _configure(self, endpoints, health_interval, health_timeout, client_options)
        self._routes = _Routes([AsyncClient(e, **client_options) for e in self.endpoints])
        self._health: "Optional[asyncio.Task[None]]" = None
        self._closed = False

    async def request(self, op: str, *, timeout: Optional[float] = None, **fields: Any
                      ) -> Dict[str, Any]:
        """Sends one request to the server its op and fields route it to; returns the reply.

        Raises UnknownEpisode for a step or close whose id this pool did not issue, ServerLost
        when the server is lost (for a stateless op: every server was tried), and
        CrucibleConnectionError when the pool is closed."""
        if self._closed:
            raise CrucibleConnectionError(None, "the pool is closed")
        self._start_health()
        if op in _EPISODE_OPS:
            return await self._episode_request(op, timeout, fields)
        tried: "set[int]" = set()
        last: Optional[ServerLost] = None
        while True:
            server = self._routes.pick(exclude=tried)
            if server is None:
                raise last if last is not None else self._routes.no_server_error()
            tried.add(server.index)
            self._routes.sent(server, +1)
            try:
                reply: Dict[str, Any] = await server.client.request(op, timeout=timeout,
                                                                     **fields)
            except CrucibleError as exc:
                if not _is_loss(exc):
                    raise
                self._routes.mark_lost(server, exc)
                last = ServerLost(server.endpoint,
                                  f"lost {server.endpoint} with '{op}' in flight: {exc}")
                if op == "reset" or self._closed:  # a reset may have opened an episode
                    raise last from None
                continue
            finally:
                self._routes.sent(server, -1)
            if op == "reset" and isinstance(reply.get("episode"), str):
                reply = dict(reply, episode=self._routes.remember(server, reply["episode"]))
            return reply

    async def _episode_request(self, op: str, timeout: Optional[float], fields: Dict[str, Any]
                               ) -> Dict[str, Any]:
        episode = fields.get("episode")
        server, server_id = self._routes.route(episode)
        assert isinstance(episode, str)
        lost = self._routes.lost_episode(episode, server, op)
        if lost is not None:
            raise lost
        self._routes.sent(server, +1)
        try:
            reply = await server.client.request(op, timeout=timeout,
                                                **dict(fields, episode=server_id))
        except CrucibleError as exc:
            return _episode_reply(self._routes, server, op, episode, exc, None)
        finally:
            self._routes.sent(server, -1)
        return _episode_reply(self._routes, server, op, episode, None, reply)

    # -- health ---------------------------------------------------------------------------
    def _start_health(self) -> None:
        if self._health is None or self._health.done():
            self._health = asyncio.get_running_loop().create_task(self._health_loop())

    async def _health_loop(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.health_interval)
            try:
                await self.check_health()
            except CrucibleError:  # a failing check must not end the task; the next retries
                pass

    async def check_health(self) -> None:
        """Asks every server for `stats` now (the background task does this every interval)."""
        if self._closed:
            return
        servers = self._routes.servers
        answers = await asyncio.gather(
            *(s.client.request("stats", timeout=self.health_timeout) for s in servers),
            return_exceptions=True)
        for server, answer in zip(servers, answers):
            if isinstance(answer, BaseException):
                if not isinstance(answer, CrucibleError):
                    raise answer
                self._routes.check_epoch(server)
                self._routes.mark_lost(server, answer)
            else:
                self._routes.healthy(server, wire.body(answer))

    async def move_server(self, index: int, endpoint: str) -> None:
        """Points server `index` at `endpoint`, as Pool.move_server."""
        if self._closed:
            raise CrucibleConnectionError(None, "the pool is closed")
        old = self._routes.replace(index, AsyncClient(endpoint, **self._client_options))
        self.endpoints[index] = endpoint
        await old.close()

    def servers(self) -> List[Dict[str, Any]]:
        """Per endpoint, as Pool.servers()."""
        return self._routes.report()

    @property
    def clients(self) -> List[AsyncClient]:
        return [s.client for s in self._routes.servers]

    @property
    def inflight(self) -> int:
        return sum(s.client.inflight for s in self._routes.servers)

    @property
    def connected(self) -> bool:
        return any(s.client.connected for s in self._routes.servers)

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        """Stops the health task and closes every client (failing what is outstanding)."""
        if self._closed:
            return
        self._closed = True
        if self._health is not None:
            self._health.cancel()
            try:
                await self._health
            except (asyncio.CancelledError, Exception):
                pass
        for server in self._routes.servers:
            await server.client.close()

    async def __aenter__(self) -> "AsyncPool":
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()


class AsyncEnv:
    """Env's one-episode view for asyncio trainers: the same calls, awaited.

        async with AsyncEnv(endpoint) as env:
            observation = await env.reset("llm/rms_norm", seed=0, max_steps=4)
            observation, reward, terminated, truncated, info = await env.step(source)

    Observations and errors are Env's; many AsyncEnvs (one per rollout) can share a loop and
    run their steps concurrently. Keyword arguments beyond `timeout` go to AsyncClient (or
    AsyncPool, for several endpoints); many AsyncEnvs can also share one AsyncPool passed in.
    """

    def __init__(
        self,
        endpoint: "AsyncTarget" = wire.DEFAULT_ENDPOINT,
        timeout: float = DEFAULT_TIMEOUT_S,
        *,
        client_name: str = "crucible_client.AsyncEnv",
        **client_options: Any,
    ):
        # Several endpoints open an AsyncPool; a given AsyncClient or AsyncPool is shared, not
        # closed by close(), and keeps its own options.
        self._owns_client = not isinstance(endpoint, (AsyncClient, AsyncPool))
        self.client = connect_async(endpoint, timeout=timeout, **client_options)
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
        model: Optional[wire.ModelChoice] = None,
    ) -> Dict[str, Any]:
        """Opens a new episode (closing the previous one); returns the observation
        {episode, task, max_steps, step}. `tag` labels the episode: its steps carry it unless
        they set their own; `model` asks its ok steps for the model check."""
        if self.episode is not None:
            try:
                await self.close_episode()
            except UnknownEpisode:
                pass  # it expired on the server; nothing left to close
        observation = wire.body(await self.client.request(
            "reset", task=task, seed=seed, max_steps=max_steps, reward=reward, options=options,
            tag=tag, model=model))
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
            if self._owns_client:
                await self.client.close()

    async def __aenter__(self) -> "AsyncEnv":
        return self

    async def __aexit__(self, exc_type: Any, *rest: Any) -> None:
        try:
            await self.close()
        except CrucibleError:
            if exc_type is None:
                raise


# AsyncEnv's and the async reward's target: as pool.Target, with the asyncio clients.
AsyncTarget = Union[str, Sequence[str], AsyncClient, AsyncPool]


def connect_async(target: AsyncTarget, **client_options: Any) -> Union[AsyncClient, AsyncPool]:
    """As pool.connect, for asyncio: an AsyncClient for one endpoint, an AsyncPool for several
    (a list, or a string with commas); a given AsyncClient or AsyncPool as it is."""
    if isinstance(target, (AsyncClient, AsyncPool)):
        return target
    single, endpoints = _one_or_many(target, client_options)
    if single:
        return AsyncClient(single, **client_options)
    return AsyncPool(endpoints, **client_options)
