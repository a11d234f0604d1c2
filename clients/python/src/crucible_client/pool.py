"""Pool: one client over several crucible servers, routing scores by load and episodes by id."""

from __future__ import annotations

import itertools
import re
import threading
import time
import weakref
from concurrent.futures import Future
from typing import (Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple,
                    Union)

from .client import Client, ScoreItem, _score_in_window, _settle
from .errors import (
    CrucibleConnectionError,
    CrucibleError,
    CrucibleTimeout,
    UnknownEpisode,
)

__all__ = ["Pool", "ServerLost", "Target", "connect", "split_endpoints",
           "DEFAULT_HEALTH_INTERVAL_S", "DEFAULT_HEALTH_TIMEOUT_S"]

# How often the background check asks every server for `stats`, and how long it waits for one.
DEFAULT_HEALTH_INTERVAL_S = 2.0
DEFAULT_HEALTH_TIMEOUT_S = 2.0

# Ops that change nothing on the server: sent to the least-loaded server and, when that server
# is lost, sent again to another one.
_STATELESS_OPS = ("score", "hello", "tasks", "task", "stats")
# Ops that name an episode: sent to the server that opened it, never retried elsewhere.
_EPISODE_OPS = ("step", "close")
_EPISODE_ID = re.compile(r"^s(\d+)/(.+)$", re.DOTALL)


class ServerLost(CrucibleConnectionError):
    """Client-side: the server holding the request (or its episode) was lost.

    Raised for a step or close whose episode lives on a server that stopped answering, or
    restarted, since the episode was opened (its episodes are gone with it), and for a score
    when every server was tried. `endpoint` names the lost server (None when the pool had no
    server up at all).
    """

    code = "server_lost"

    def __init__(self, endpoint: Optional[str], message: str):
        self.endpoint = endpoint
        super().__init__(None, message)


class _Server:
    """One endpoint's client and what the pool knows of it. Guarded by _Routes.lock."""

    def __init__(self, index: int, client: Any):
        self.index = index
        self.client = client  # a Client (Pool) or an AsyncClient (AsyncPool)
        self.up = True  # optimistic until a request or a health check fails
        self.inflight = 0  # requests this pool has sent there and not yet settled
        # Load from its last `stats` (`inflight` + pool queue depths) less this pool's own
        # requests in flight there then, which `inflight` above counts already.
        self.server_load = 0
        self.last_error: Optional[str] = None
        self.last_check: Optional[float] = None  # time.time() of the last health answer
        # Bumped whenever the server is lost (failed request or check, or a dropped
        # connection): an episode opened in an earlier epoch is gone.
        self.epoch = 0
        self.disconnects_seen = 0

    @property
    def endpoint(self) -> str:
        return str(self.client.endpoint)


def _is_loss(exc: Optional[BaseException]) -> bool:
    # A timeout or a lost connection: the server may be gone. An error reply is an answer.
    return isinstance(exc, (CrucibleConnectionError, CrucibleTimeout))


def _stats_load(stats: Mapping[str, Any]) -> int:
    load = stats.get("inflight")
    total = load if isinstance(load, int) else 0
    pools = stats.get("pools")
    if isinstance(pools, Mapping):
        for pool in pools.values():
            depth = pool.get("queue_depth") if isinstance(pool, Mapping) else None
            if isinstance(depth, int):
                total += depth
    return total


def _configure(pool: Any, endpoints: Sequence[str], health_interval: float,
               health_timeout: float, client_options: Mapping[str, Any]) -> None:
    """Checks and sets what Pool and AsyncPool keep alike: endpoints, health check timing and
    the options each server's client is opened with."""
    if isinstance(endpoints, str):
        raise TypeError("endpoints must be a list of endpoints, not one string")
    if not endpoints:
        raise ValueError(f"a {type(pool).__name__} needs at least one endpoint")
    if health_interval <= 0 or health_timeout <= 0:
        raise ValueError("health_interval and health_timeout must be positive")
    pool.endpoints = list(endpoints)
    pool.health_interval = float(health_interval)
    pool.health_timeout = float(health_timeout)
    pool._client_options = dict(client_options)


class _Routes:
    """What Pool and AsyncPool share: the servers, their state, and the routing rules.

    Holds no I/O: each method takes the lock briefly, so the threaded Pool and the asyncio
    AsyncPool (whose callers never block on it for long) use the same code.
    """

    def __init__(self, clients: Sequence[Any]):
        self.lock = threading.Lock()
        self._turn = itertools.count()
        # Epoch of each episode this pool opened and has not seen closed, by prefixed id.
        self._episodes: Dict[str, int] = {}
        self.servers = [_Server(index, client) for index, client in enumerate(clients)]

    def pick(self, exclude: "set[int]") -> Optional[_Server]:
        """The least-loaded server that is up and not in `exclude` (ties round-robin)."""
        for server in self.servers:
            self.check_epoch(server)
        with self.lock:
            up = [s for s in self.servers if s.up and s.index not in exclude]
            if not up:
                return None
            start = next(self._turn) % len(self.servers)
            return min(up, key=lambda s: (s.inflight + s.server_load,
                                          (s.index - start) % len(self.servers)))

    def route(self, episode: Any) -> "Tuple[_Server, str]":
        """The server an episode id of this pool names, and the server's own id."""
        match = _EPISODE_ID.match(episode) if isinstance(episode, str) else None
        if match is not None and int(match.group(1)) < len(self.servers):
            return self.servers[int(match.group(1))], match.group(2)
        raise UnknownEpisode(
            None,
            f"episode id {episode!r} was not issued by this pool: its ids read "
            f"'s<server index>/<server's episode id>' with index 0 to {len(self.servers) - 1}")

    def lost_episode(self, episode: str, server: _Server, op: str) -> Optional[ServerLost]:
        """ServerLost when the episode's server was lost since the episode was opened."""
        self.check_epoch(server)
        with self.lock:
            opened = self._episodes.get(episode)
            lost = (opened is not None and opened != server.epoch) or not server.up
            error = server.last_error
        if not lost:
            return None
        if op == "close":
            self.forget(episode)
        return ServerLost(server.endpoint,
                          f"{server.endpoint} was lost, and episode {episode!r} with it"
                          + (f" ({error})" if error else ""))

    def remember(self, server: _Server, server_id: str) -> str:
        episode = f"s{server.index}/{server_id}"
        with self.lock:
            self._episodes[episode] = server.epoch
        return episode

    def forget(self, episode: str) -> None:
        with self.lock:
            self._episodes.pop(episode, None)

    def sent(self, server: _Server, delta: int) -> None:
        with self.lock:
            server.inflight += delta

    def no_server_error(self) -> ServerLost:
        with self.lock:
            states = "; ".join(f"{s.endpoint}: {s.last_error or 'down'}" for s in self.servers)
        return ServerLost(None, f"no server of the pool is up ({states})")

    def mark_lost(self, server: _Server, exc: BaseException) -> None:
        with self.lock:
            if server.up:
                server.epoch += 1
            server.up = False
            server.last_error = str(exc)

    def check_epoch(self, server: _Server) -> None:
        """A dropped connection (the server died or restarted) ends the server's episodes."""
        disconnects = server.client.disconnects
        with self.lock:
            if disconnects != server.disconnects_seen:
                server.disconnects_seen = disconnects
                server.epoch += 1
                server.last_error = f"lost the connection to {server.endpoint}"
                if not server.client.connected:
                    server.up = False

    def replace(self, index: int, client: Any) -> Any:
        """Gives server `index` a new client (a new address); returns the old client, to close.

        The server gets a fresh record: what is still in flight on the old address settles
        against the old record (its loss marks nothing down here), and the new epoch ends the
        episodes opened at the old address."""
        with self.lock:
            old = self.servers[index]
            fresh = _Server(index, client)
            fresh.epoch = old.epoch + 1
            fresh.last_error = f"moved from {old.endpoint}"
            self.servers[index] = fresh
        return old.client

    def healthy(self, server: _Server, stats: Mapping[str, Any]) -> None:
        """A health check's answer: the server is up, with the load its `stats` report."""
        self.check_epoch(server)
        with self.lock:
            server.up = True
            # The server's figures include this pool's own requests, counted in `inflight`:
            # counted twice, a snapshot taken while one was running kept steering work away
            # from that server until the next check, though the request had long settled.
            server.server_load = max(0, _stats_load(stats) - server.inflight)
            server.last_check = time.time()

    def report(self) -> List[Dict[str, Any]]:
        for server in self.servers:
            self.check_epoch(server)
        with self.lock:
            return [
                {"index": s.index, "endpoint": s.endpoint, "up": s.up, "inflight": s.inflight,
                 "server_load": s.server_load, "last_error": s.last_error,
                 "last_check": s.last_check}
                for s in self.servers
            ]


class Pool:
    """Several crucible servers behind the request API of `Client`.

    `Pool(endpoints, **client_options)` opens one `Client` per endpoint, each with the same
    options (timeout, connect_timeout, busy_retries, tag, ...). `submit`, `request`,
    `score_many`, `close` and the context manager behave as on `Client`; switching a trainer
    from one server to several is changing the constructor.

    Routing:
    - `score`, `hello`, `tasks`, `task` and `stats` go to the least-loaded server that is up.
      Load is the requests this pool has in flight there plus the server's own `inflight` and
      the `queue_depth` of each of its `pools`, from its last `stats`; ties go round-robin.
      When the chosen server is lost (a timeout or a lost connection, not an error reply),
      the request is sent again to another server, at most once per server; when every
      server was tried, ServerLost is raised. Each attempt waits up to the request's timeout.
      A reset whose server is lost is not sent again (it may have opened an episode there).
    - `reset` goes to the least-loaded server; the reply's `episode` is the server's id behind
      a prefix naming the server: ``"s<index>/<server episode id>"``, where index is the
      endpoint's position in `endpoints` (e.g. ``"s1/ep-3f9a0c1d2e4b5a69"``). `step` and
      `close` take such an id, go to that server with the prefix removed, and answer with the
      prefixed id again. An id without a prefix of this pool raises UnknownEpisode.
    - A step or close of an episode whose server was lost (then or since the reset) raises
      ServerLost naming the endpoint. Steps are not retried: they are not idempotent. A
      server counts as lost on a timeout, a dropped connection (it died or restarted) or a
      failed health check; its episodes stay lost after it rejoins.

    A background thread asks every server for `stats` every `health_interval` seconds (waiting
    up to `health_timeout`): a server that does not answer is marked down and gets no new
    work; one that answers again rejoins. `servers()` reports each one. Every public method is
    thread-safe.
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
        clients: List[Client] = []
        try:
            for endpoint in self.endpoints:
                clients.append(Client(endpoint, **client_options))
        except BaseException:
            for client in clients:
                client.close()
            raise
        self._routes = _Routes(clients)
        self._stop = threading.Event()
        self._health = threading.Thread(
            target=_health_loop, args=(weakref.ref(self), self._stop, self.health_interval),
            name="crucible-pool-health", daemon=True)
        self._health.start()
        self._finalizer = weakref.finalize(self, _shutdown, self._stop, self._health,
                                           self._routes)

    # -- requests -------------------------------------------------------------------------
    def submit(self, op: str, *, timeout: Optional[float] = None, **fields: Any
               ) -> "Future[Dict[str, Any]]":
        """Sends one request to the server its op and fields route it to (class docstring).

        Returns a Future as `Client.submit` does. Raises UnknownEpisode for a step or close
        whose id this pool did not issue, ServerLost (in the Future, or here when no server is
        up) when the server is lost, and CrucibleConnectionError when the pool is closed.
        """
        if self.closed:
            raise CrucibleConnectionError(None, "the pool is closed")
        if op in _EPISODE_OPS:
            return self._submit_episode(op, timeout, fields)
        outer: "Future[Dict[str, Any]]" = Future()
        outer.set_running_or_notify_cancel()
        self._attempt(op, timeout, fields, outer, tried=set(), last=None)
        return outer

    def request(self, op: str, *, timeout: Optional[float] = None, **fields: Any) -> Dict[str, Any]:
        """Sends one request and waits for its reply (the full reply map)."""
        return self.submit(op, timeout=timeout, **fields).result()

    def score_many(
        self,
        items: Iterable[ScoreItem],
        *,
        max_inflight: int = 64,
        timeout: Optional[float] = None,
        return_exceptions: bool = False,
        **common: Any,
    ) -> List[Any]:
        """`Client.score_many` over the pool: each item goes to the least-loaded server."""
        return _score_in_window(self.submit, items, common, max_inflight=max_inflight,
                                timeout=timeout, return_exceptions=return_exceptions)

    def _attempt(self, op: str, timeout: Optional[float], fields: Dict[str, Any],
                 outer: "Future[Dict[str, Any]]", tried: "set[int]",
                 last: Optional[ServerLost]) -> None:
        """Sends `op` to the least-loaded server not yet tried; on a loss, the next one."""
        server = self._routes.pick(exclude=tried)
        if server is None:
            # Every server was tried (the last loss is the answer), or none is up.
            _settle(outer, exc=last if last is not None else self._routes.no_server_error())
            return
        tried.add(server.index)

        def settled(inner: "Future[Dict[str, Any]]") -> None:
            exc = inner.exception()
            if _is_loss(exc):
                assert exc is not None
                self._routes.mark_lost(server, exc)
                lost = ServerLost(server.endpoint,
                                  f"lost {server.endpoint} with '{op}' in flight: {exc}")
                if op != "reset" and not self.closed:  # a reset may have opened an episode
                    self._attempt(op, timeout, fields, outer, tried, lost)
                    return
                _settle(outer, exc=lost)
                return
            if exc is not None:
                _settle(outer, exc=exc)
                return
            reply = inner.result()
            if op == "reset" and isinstance(reply.get("episode"), str):
                reply = dict(reply, episode=self._routes.remember(server, reply["episode"]))
            _settle(outer, result=reply)

        try:
            inner = self._send(server, op, timeout, fields)
        except CrucibleError as exc:
            _settle(outer, exc=exc)  # refused before sending (too large, closed)
            return
        inner.add_done_callback(settled)

    def _submit_episode(self, op: str, timeout: Optional[float], fields: Dict[str, Any]
                        ) -> "Future[Dict[str, Any]]":
        episode = fields.get("episode")
        server, server_id = self._routes.route(episode)
        assert isinstance(episode, str)
        outer: "Future[Dict[str, Any]]" = Future()
        outer.set_running_or_notify_cancel()
        lost = self._routes.lost_episode(episode, server, op)
        if lost is not None:
            _settle(outer, exc=lost)
            return outer

        def settled(inner: "Future[Dict[str, Any]]") -> None:
            exc = inner.exception()
            try:
                reply = _episode_reply(self._routes, server, op, episode, exc,
                                       None if exc is not None else inner.result())
            except CrucibleError as error:
                _settle(outer, exc=error)
                return
            _settle(outer, result=reply)

        try:
            inner = self._send(server, op, timeout, dict(fields, episode=server_id))
        except CrucibleError as exc:
            _settle(outer, exc=exc)
            return outer
        inner.add_done_callback(settled)
        return outer

    def _send(self, server: _Server, op: str, timeout: Optional[float],
              fields: Mapping[str, Any]) -> "Future[Dict[str, Any]]":
        future: "Future[Dict[str, Any]]" = server.client.submit(op, timeout=timeout, **fields)
        self._routes.sent(server, +1)
        future.add_done_callback(lambda _: self._routes.sent(server, -1))
        return future

    # -- health ---------------------------------------------------------------------------
    def check_health(self) -> None:
        """Asks every server for `stats` now (the background thread does this every interval)."""
        if self.closed:
            return
        asked: "List[Tuple[_Server, Future[Dict[str, Any]]]]" = []
        for server in self._routes.servers:
            try:
                asked.append((server, server.client.submit("stats", timeout=self.health_timeout)))
            except CrucibleError as exc:
                self._routes.mark_lost(server, exc)
        for server, future in asked:
            failure = future.exception()
            if failure is not None:
                self._routes.check_epoch(server)
                self._routes.mark_lost(server, failure)
            else:
                self._routes.healthy(server, future.result())

    def move_server(self, index: int, endpoint: str) -> None:
        """Points server `index` at `endpoint`: for a server restarted at another address (its
        node was lost, or its port taken). Its episodes are lost, as after any restart, and
        requests in flight on the old address fail as lost (scores are sent again elsewhere);
        the new address takes work at once and is health-checked as the others."""
        if self.closed:
            raise CrucibleConnectionError(None, "the pool is closed")
        fresh = Client(endpoint, **self._client_options)
        old = self._routes.replace(index, fresh)
        self.endpoints[index] = endpoint
        old.close()

    def servers(self) -> List[Dict[str, Any]]:
        """Per endpoint, in order: {index, endpoint, up, inflight, server_load, last_error,
        last_check}. `inflight` counts this pool's requests there; `server_load` the server's
        in-flight and queued work at its last `stats`, less this pool's own requests there then;
        `last_check` the time.time() of its last health answer."""
        return self._routes.report()

    # -- bookkeeping ----------------------------------------------------------------------
    @property
    def clients(self) -> List[Client]:
        """The Client of each endpoint, in order."""
        return [s.client for s in self._routes.servers]

    def _total(self, counter: str) -> int:
        return sum(getattr(s.client, counter) for s in self._routes.servers)

    @property
    def inflight(self) -> int:
        """Requests submitted on every client and not yet settled."""
        return self._total("inflight")

    @property
    def dropped_replies(self) -> int:
        return self._total("dropped_replies")

    @property
    def protocol_violations(self) -> int:
        return self._total("protocol_violations")

    @property
    def disconnects(self) -> int:
        return self._total("disconnects")

    @property
    def busy_retried(self) -> int:
        return self._total("busy_retried")

    @property
    def connected(self) -> bool:
        """Whether a connection to some server is up now."""
        return any(s.client.connected for s in self._routes.servers)

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def close(self) -> None:
        """Stops the health thread and closes every client (failing what is outstanding)."""
        self._finalizer()

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def _episode_reply(routes: _Routes, server: _Server, op: str, episode: str,
                   exc: Optional[BaseException], reply: Optional[Dict[str, Any]]
                   ) -> Dict[str, Any]:
    """The answer to a step or close of `episode` once its server replied (or failed): the
    reply with the pool's id, or the error to raise (ServerLost for a loss, not retried)."""
    if _is_loss(exc):
        assert exc is not None
        routes.mark_lost(server, exc)
        raise ServerLost(server.endpoint,
                         f"lost {server.endpoint} with '{op}' of episode {episode!r} in flight "
                         f"(not retried): {exc}")
    if exc is not None:
        if op == "close" or getattr(exc, "code", None) == "unknown_episode":
            routes.forget(episode)
        raise exc
    assert reply is not None
    if op == "close":
        routes.forget(episode)
    return dict(reply, episode=episode) if "episode" in reply else reply


def _health_loop(pool_ref: "Callable[[], Optional[Pool]]", stop: threading.Event,
                 interval: float) -> None:
    # Holds the pool only weakly between checks, so a pool that is dropped still closes.
    while not stop.wait(interval):
        pool = pool_ref()
        if pool is None:
            return
        try:
            pool.check_health()
        except Exception:  # a failing check must not end the thread; the next one retries
            pass
        del pool


def _shutdown(stop: threading.Event, thread: threading.Thread, routes: _Routes) -> None:
    stop.set()
    for server in list(routes.servers):
        server.client.close()
    if thread.is_alive() and threading.current_thread() is not thread:
        thread.join(timeout=5.0)


# What every entry point that talks to servers accepts: one endpoint, several (a list, or one
# string with commas: "tcp://10.0.0.1:5555,tcp://10.0.0.2:5555"), or a Client or Pool to share.
Target = Union[str, Sequence[str], Client, Pool]
_POOL_ONLY_OPTIONS = ("health_interval", "health_timeout")


def split_endpoints(endpoints: Union[str, Sequence[str]]) -> List[str]:
    """The endpoints a target names: a string is split at commas (ZeroMQ endpoints have none).
    Raises ValueError when it names none."""
    parts = endpoints.split(",") if isinstance(endpoints, str) else list(endpoints)
    names = [str(part).strip() for part in parts if str(part).strip()]
    if not names:
        raise ValueError(f"no endpoint in {endpoints!r}")
    return names


def connect(target: Target, **client_options: Any) -> Union[Client, Pool]:
    """A Client for one endpoint, a Pool for several; a given Client or Pool as it is (the
    options are then not used). The caller owns what this opens and closes it."""
    if isinstance(target, (Client, Pool)):
        return target
    single, endpoints = _one_or_many(target, client_options)
    return Client(single, **client_options) if single else Pool(endpoints, **client_options)


def _one_or_many(target: Union[str, Sequence[str]], client_options: Dict[str, Any]
                 ) -> Tuple[Optional[str], List[str]]:
    """(the endpoint, []) when `target` is one string naming one endpoint (the pool's own
    options are then dropped from `client_options`), else (None, every endpoint)."""
    endpoints = split_endpoints(target)
    if isinstance(target, str) and len(endpoints) == 1:
        for option in _POOL_ONLY_OPTIONS:
            client_options.pop(option, None)
        return endpoints[0], []
    return None, endpoints
