"""Pipelined client: one DEALER socket, many requests in flight, replies matched by id."""

from __future__ import annotations

import collections
import heapq
import itertools
import random
import socket
import threading
import time
import weakref
from concurrent.futures import Future
from typing import (Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple,
                    Union)

import zmq
from zmq.utils.monitor import recv_monitor_message

from . import curve, wire
from .errors import Busy, CrucibleConnectionError, CrucibleError, CrucibleTimeout, ProtocolError

__all__ = ["Client", "DEFAULT_BUSY_RETRIES", "DEFAULT_CONNECT_TIMEOUT_S", "DEFAULT_TIMEOUT_S"]

# Generous: a step compiles (seconds), checks correctness on every case and times both
# kernels. Trainers that want a tighter bound pass their own.
DEFAULT_TIMEOUT_S = 300.0
# How long a request waits for a connection before failing: a wrong address should fail in
# seconds, not after the request timeout. A server that is up accepts within milliseconds.
DEFAULT_CONNECT_TIMEOUT_S = 10.0
# `busy` means the server did nothing and asks to be retried later: retried this many times,
# waiting BUSY_BACKOFF_S doubled on each retry (with jitter), at most BUSY_BACKOFF_CAP_S.
DEFAULT_BUSY_RETRIES = 8
BUSY_BACKOFF_S = 0.1
BUSY_BACKOFF_CAP_S = 5.0

_monitor_ids = itertools.count()
# A connection counts as up once the ZMTP handshake succeeded (libzmq >= 4.3), else on TCP connect.
_CONNECTED_EVENT = getattr(zmq, "EVENT_HANDSHAKE_SUCCEEDED", zmq.EVENT_CONNECTED)


class _Pending:
    __slots__ = ("future", "deadline", "timeout", "op", "sent", "queued_at")

    def __init__(self, future: "Future[Any]", deadline: float, timeout: float, op: str):
        self.future = future
        self.deadline = deadline
        self.timeout = timeout
        self.op = op
        self.sent = False
        self.queued_at = time.monotonic()


class _Pipeline:
    """The I/O thread's state. Only the thread touches the sockets after start().

    Kept apart from Client so the thread holds no reference to the Client, and a Client that
    is garbage collected still shuts its thread down (weakref.finalize).
    """

    def __init__(
        self,
        sock: "zmq.Socket[bytes]",
        monitor: "Optional[zmq.Socket[bytes]]",
        endpoint: str,
        connect_timeout: Optional[float] = None,
    ):
        self.sock = sock
        self.monitor = monitor
        self.endpoint = endpoint
        # The connect check needs the monitor to know when a connection is up.
        self.connect_timeout = connect_timeout if monitor is not None else None
        self.connected = False
        self.lock = threading.Lock()
        self.outbox: "collections.deque[Tuple[wire.RequestId, bytes]]" = collections.deque()
        self.pending: Dict[wire.RequestId, _Pending] = {}
        self.deadlines: List[Tuple[float, wire.RequestId]] = []
        self.closing = False
        self.dropped_replies = 0  # replies that matched no pending request
        self.protocol_violations = 0  # frames that could not be read as a reply at all
        self.disconnects = 0
        self.wake_r, self.wake_w = socket.socketpair()
        self.wake_r.setblocking(False)
        self.wake_w.setblocking(False)
        self.thread = threading.Thread(target=self.run, name="crucible-client-io", daemon=True)

    # -- called from user threads -------------------------------------------------------
    def enqueue(self, rid: wire.RequestId, frame: bytes, entry: _Pending) -> None:
        with self.lock:
            if self.closing:
                raise CrucibleConnectionError(None, "the client is closed")
            self.pending[rid] = entry
            heapq.heappush(self.deadlines, (entry.deadline, rid))
            self.outbox.append((rid, frame))
        self.wake()

    def wake(self) -> None:
        try:
            self.wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # the buffer is full of wake-ups already, or the thread is gone

    def shutdown(self) -> None:
        with self.lock:
            if self.closing:
                return
            self.closing = True
        self.wake()
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join(timeout=5.0)

    # -- the I/O thread -----------------------------------------------------------------
    def run(self) -> None:
        poller = zmq.Poller()
        poller.register(self.wake_r, zmq.POLLIN)
        if self.monitor is not None:
            poller.register(self.monitor, zmq.POLLIN)
        try:
            while True:
                with self.lock:
                    if self.closing:
                        break
                    want_out = bool(self.outbox) and self._may_send()
                poller.register(self.sock, zmq.POLLIN | (zmq.POLLOUT if want_out else 0))
                events = dict(poller.poll(self._poll_ms()))
                if self.wake_r.fileno() in events or self.wake_r in events:
                    self._drain_wake()
                if self.monitor is not None and self.monitor in events:
                    self._read_monitor()
                if events.get(self.sock, 0) & zmq.POLLIN:
                    self._read_replies()
                self._flush_outbox()
                self._expire(time.monotonic())
        finally:
            self._fail_all(CrucibleConnectionError(None, "the client was closed"))
            if self.monitor is not None:
                try:
                    self.sock.disable_monitor()
                except zmq.ZMQError:
                    pass
                self.monitor.close(linger=0)
            self.sock.close(linger=0)
            self.wake_r.close()
            self.wake_w.close()

    def _poll_ms(self) -> int:
        with self.lock:
            while self.deadlines and self.deadlines[0][1] not in self.pending:
                heapq.heappop(self.deadlines)
            if not self.deadlines:
                return 1000
            wait = self.deadlines[0][0] - time.monotonic()
            if self.connect_timeout is not None and not self.connected and self.outbox:
                wait = min(wait, 0.05)  # watch unsent requests for the connect check
        return max(0, min(1000, int(wait * 1000) + 1))

    def _drain_wake(self) -> None:
        try:
            while self.wake_r.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def _may_send(self) -> bool:
        # With a monitor, send only once it has reported the connection up: right after a
        # disconnect the socket can still accept a frame into the old connection's pipe,
        # which ZMQ_IMMEDIATE then discards with it.
        return self.monitor is None or self.connected

    def _flush_outbox(self) -> None:
        while True:
            with self.lock:
                if not self.outbox or not self._may_send():
                    return
                rid, frame = self.outbox[0]
                entry = self.pending.get(rid)
                if entry is None:  # timed out before it could be sent
                    self.outbox.popleft()
                    continue
            try:
                self.sock.send(frame, zmq.NOBLOCK)
            except zmq.Again:
                return  # high-water mark: wait for POLLOUT
            except zmq.ZMQError as exc:
                with self.lock:
                    self.outbox.popleft()
                    self.pending.pop(rid, None)
                _settle(entry.future, exc=CrucibleConnectionError(None, f"send failed: {exc}"))
                continue
            with self.lock:
                self.outbox.popleft()
                entry.sent = True

    def _read_replies(self) -> None:
        while True:
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK, copy=True)
            except zmq.Again:
                return
            try:
                reply = wire.decode_frames(frames)
            except ProtocolError:
                self.protocol_violations += 1
                continue
            rid = wire.reply_id(reply)
            with self.lock:
                entry = self.pending.pop(rid, None) if rid is not None else None
            if entry is None:
                if isinstance(reply, dict):
                    self.dropped_replies += 1
                else:
                    self.protocol_violations += 1
                continue
            try:
                _settle(entry.future, result=wire.check_reply(reply))
            except CrucibleError as exc:
                _settle(entry.future, exc=exc)

    def _read_monitor(self) -> None:
        if self.monitor is None:
            return
        while True:
            try:
                event = recv_monitor_message(self.monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            except zmq.ZMQError:
                return
            if event.get("event") == _CONNECTED_EVENT:
                self.connected = True
            elif event.get("event") == zmq.EVENT_DISCONNECTED:
                self.connected = False
                self.disconnects += 1
                # The server's replies to anything already sent went to the lost connection;
                # waiting for them would only run out the timeout.
                self._fail_sent(
                    CrucibleConnectionError(
                        None,
                        f"lost the connection to {self.endpoint} with the request in flight "
                        "(server restarted, or it dropped this client for an oversized frame)",
                    )
                )

    def _expire(self, now: float) -> None:
        expired: List[_Pending] = []
        unconnected: List[_Pending] = []
        with self.lock:
            if self.connect_timeout is not None and not self.connected:
                # With ZMQ_IMMEDIATE a request waits in the outbox until a connection is up;
                # one that waited past the connect timeout was never sent and fails now.
                for rid, entry in list(self.pending.items()):
                    if not entry.sent and now - entry.queued_at >= self.connect_timeout:
                        unconnected.append(self.pending.pop(rid))
            while self.deadlines and self.deadlines[0][0] <= now:
                _, rid = heapq.heappop(self.deadlines)
                lapsed = self.pending.pop(rid, None)
                if lapsed is not None:
                    expired.append(lapsed)
        for entry in unconnected:
            _settle(
                entry.future,
                exc=CrucibleConnectionError(
                    None,
                    f"could not connect to {self.endpoint} within {self.connect_timeout:g} s "
                    f"('{entry.op}' was not sent): is a crucible server listening there?",
                ),
            )
        for entry in expired:
            where = "queued on the socket" if entry.sent else "never queued: the socket was full"
            _settle(
                entry.future,
                exc=CrucibleTimeout(
                    None,
                    f"no reply to '{entry.op}' from {self.endpoint} within {entry.timeout:g} s "
                    f"({where})",
                ),
            )

    def _fail_sent(self, exc: CrucibleError) -> None:
        with self.lock:
            lost = [rid for rid, entry in self.pending.items() if entry.sent]
            entries = [self.pending.pop(rid) for rid in lost]
        for entry in entries:
            _settle(entry.future, exc=exc)

    def _fail_all(self, exc: CrucibleError) -> None:
        with self.lock:
            entries = list(self.pending.values())
            self.pending.clear()
            self.outbox.clear()
        for entry in entries:
            _settle(entry.future, exc=exc)


def with_default_tag(op: str, fields: Dict[str, Any], default: Optional[wire.Tag]
                     ) -> Dict[str, Any]:
    """`fields` with the client's default tag merged under the request's own, for the ops that
    open something (reset, score). A step without a tag takes its episode's reset tag on the
    server, which a default added here would replace."""
    if default is None or op not in ("reset", "score"):
        return fields
    return dict(fields, tag=wire.merge_tags(default, fields.get("tag")))


def _settle(future: "Future[Any]", result: Any = None, exc: Optional[BaseException] = None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)


ScoreItem = Union[Tuple[str, Union[str, bytes]], Mapping[str, Any]]


class Client:
    """A connection to one crucible server that keeps many requests in flight.

    `submit()` returns a `concurrent.futures.Future` whose result is the full reply map
    ({v, id, ok: true, ...}) or whose exception is a CrucibleError: the subclass for the wire
    error code, CrucibleTimeout when no reply came within the request's timeout, or
    CrucibleConnectionError when the connection carrying it was lost. Request ids are integers
    counted per client; replies may arrive in any order and are matched by id.

    One background thread owns the socket; every public method is thread-safe.
    `max_frame_bytes` (None: unchecked) refuses oversized requests before they are sent,
    because the server drops a peer that sends a frame over its transport limit. `tag` (a map
    of at most 8 string keys to strings or integers, `wire.check_tag`) is sent with every
    `reset` and `score`, under the request's own tag; the server echoes it in the reply and
    keeps it in the trajectory log. `server_key` (the server's public key: Z85 or a `.pub`
    file) and `client_key` (this client's `.key` file) talk to a server started with Curve keys
    (`crucible_client.curve`); a server that does not know the client's key never answers, so
    the connect check fails.
    """

    def __init__(
        self,
        endpoint: str = wire.DEFAULT_ENDPOINT,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        max_frame_bytes: Optional[int] = wire.MAX_FRAME_BYTES,
        context: "Optional[zmq.Context[Any]]" = None,
        detect_disconnect: bool = True,
        connect_timeout: Optional[float] = DEFAULT_CONNECT_TIMEOUT_S,
        busy_retries: int = DEFAULT_BUSY_RETRIES,
        tag: Optional[wire.Tag] = None,
        server_key: Optional[curve.PathLike] = None,
        client_key: Optional[curve.PathLike] = None,
    ):
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        if connect_timeout is not None and connect_timeout <= 0:
            raise ValueError("connect_timeout must be positive or None")
        self.endpoint = endpoint
        self.timeout = float(timeout)
        self.max_frame_bytes = max_frame_bytes
        self.busy_retries = max(0, int(busy_retries))
        self.tag = wire.merge_tags(tag)
        self._busy_retried = 0
        self._context = context or zmq.Context.instance()
        self._ids = itertools.count(1)
        self._id_lock = threading.Lock()
        sock = self._context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        # Queue only on live connections, so a request waits in our outbox (where the connect
        # check can fail it unsent) instead of in a pipe to a peer that may never answer.
        sock.setsockopt(zmq.IMMEDIATE, 1)
        if "[" in endpoint:  # tcp://[::1]:5555: ZeroMQ speaks IPv6 only when asked
            sock.setsockopt(zmq.IPV6, 1)
        try:
            curve.apply(sock, server_key, client_key)
        except Exception:
            sock.close(linger=0)
            raise
        monitor = None
        try:
            if detect_disconnect or connect_timeout is not None:
                address = f"inproc://crucible-client-monitor-{id(self)}-{next(_monitor_ids)}"
                sock.monitor(address, zmq.EVENT_DISCONNECTED | _CONNECTED_EVENT)
                monitor = self._context.socket(zmq.PAIR)
                monitor.setsockopt(zmq.LINGER, 0)
                monitor.connect(address)
            sock.connect(endpoint)
        except zmq.ZMQError as exc:
            if monitor is not None:
                monitor.close(linger=0)
            sock.close(linger=0)
            raise CrucibleConnectionError(None, f"cannot connect to {endpoint!r}: {exc}") from None
        self._pipeline = _Pipeline(sock, monitor, endpoint, connect_timeout)
        self._pipeline.thread.start()
        self._finalizer = weakref.finalize(self, self._pipeline.shutdown)

    # -- requests -------------------------------------------------------------------------
    def submit(self, op: str, *, timeout: Optional[float] = None, **fields: Any
               ) -> "Future[Dict[str, Any]]":
        """Sends one request and returns at once; see the class docstring for the Future.

        Fields set to None are left out of the request. A `reset` or `score` carries the
        client's default `tag` merged under its own (a `step` inherits its episode's tag on the
        server, so the default is not added to it). Raises TooLarge (before sending) when
        the frame is over `max_frame_bytes`, CrucibleConnectionError when the client is closed.
        A `busy` reply is retried (a new id each time) up to `busy_retries` times with
        exponential backoff, within the request's timeout; the last `Busy` is raised after that.
        """
        wait = self.timeout if timeout is None else float(timeout)
        deadline = time.monotonic() + wait
        fields = with_default_tag(op, fields, self.tag)
        first = self._send_once(op, fields, wait)
        if self.busy_retries == 0:
            return first
        outer: "Future[Dict[str, Any]]" = Future()
        outer.set_running_or_notify_cancel()

        def settle_from(inner: "Future[Dict[str, Any]]", attempt: int) -> None:
            exc = inner.exception()
            if isinstance(exc, Busy) and attempt < self.busy_retries and not self.closed:
                delay = min(BUSY_BACKOFF_CAP_S, BUSY_BACKOFF_S * 2 ** attempt)
                delay *= random.uniform(0.5, 1.0)
                if time.monotonic() + delay < deadline:
                    timer = threading.Timer(delay, retry, (attempt + 1,))
                    timer.daemon = True
                    timer.start()
                    return
            if exc is not None:
                _settle(outer, exc=exc)
            else:
                _settle(outer, result=inner.result())

        def retry(attempt: int) -> None:
            with self._id_lock:
                self._busy_retried += 1
            try:
                inner = self._send_once(op, fields, max(0.001, deadline - time.monotonic()))
            except CrucibleError as exc:
                _settle(outer, exc=exc)
                return
            inner.add_done_callback(lambda f: settle_from(f, attempt))

        first.add_done_callback(lambda f: settle_from(f, 0))
        return outer

    def _send_once(self, op: str, fields: Mapping[str, Any], wait: float
                   ) -> "Future[Dict[str, Any]]":
        with self._id_lock:
            rid = next(self._ids)
        frame = wire.encode_request(rid, op, fields, self.max_frame_bytes)
        future: "Future[Dict[str, Any]]" = Future()
        future.set_running_or_notify_cancel()  # in flight: cannot be cancelled
        entry = _Pending(future, time.monotonic() + wait, wait, op)
        self._pipeline.enqueue(rid, frame, entry)
        return future

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
        """Scores many sources with up to `max_inflight` requests outstanding.

        Each item is `(task, source)` or a map of score fields ({task, source, plan?, seed?,
        reward?}); `common` fields apply to every item unless the item sets them. Returns the
        reply bodies ({task, result, reward}) in the order of `items`. With
        `return_exceptions`, a failed item's CrucibleError takes its place in the list;
        otherwise the first failure (in item order) is raised after every request settles.
        """
        return _score_in_window(self.submit, items, common, max_inflight=max_inflight,
                                timeout=timeout, return_exceptions=return_exceptions)

    @staticmethod
    def _score_fields(item: ScoreItem, common: Mapping[str, Any]) -> Dict[str, Any]:
        if isinstance(item, Mapping):
            fields = dict(common)
            fields.update(item)
        else:
            task, source = item
            fields = dict(common)
            fields.update(task=task, source=source)
        if "source" in fields and fields["source"] is not None:
            fields["source"] = wire.source_text(fields["source"])
        return fields

    # -- bookkeeping ----------------------------------------------------------------------
    @property
    def inflight(self) -> int:
        """Requests submitted and not yet settled."""
        with self._pipeline.lock:
            return len(self._pipeline.pending)

    @property
    def dropped_replies(self) -> int:
        """Replies that matched no pending request (e.g. arrived after their timeout)."""
        return self._pipeline.dropped_replies

    @property
    def protocol_violations(self) -> int:
        """Frames from the server that could not be read as a reply map at all."""
        return self._pipeline.protocol_violations

    @property
    def disconnects(self) -> int:
        """Times the connection to the server was lost (it reconnects by itself)."""
        return self._pipeline.disconnects

    @property
    def busy_retried(self) -> int:
        """Requests sent again after a `busy` reply."""
        return self._busy_retried

    @property
    def connected(self) -> bool:
        """Whether a connection to the server is up now (False without a monitor)."""
        return self._pipeline.connected

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def close(self) -> None:
        """Fails outstanding requests with CrucibleConnectionError and closes the socket."""
        self._finalizer()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def _score_in_window(
    submit: "Callable[..., Future[Dict[str, Any]]]",
    items: Iterable[ScoreItem],
    common: Mapping[str, Any],
    *,
    max_inflight: int,
    timeout: Optional[float],
    return_exceptions: bool,
) -> List[Any]:
    """`score_many` over any `submit(op, timeout=, **fields)`, Client's or Pool's."""
    if max_inflight < 1:
        raise ValueError("max_inflight must be at least 1")
    requests = [Client._score_fields(item, common) for item in items]
    futures: "List[Future[Dict[str, Any]]]" = []
    window: "collections.deque[Future[Dict[str, Any]]]" = collections.deque()
    for fields in requests:
        while len(window) >= max_inflight:
            _wait_first(window)
        try:
            future = submit("score", timeout=timeout, **fields)
        except CrucibleError as exc:  # e.g. too large: fail this item, keep going
            future = Future()
            future.set_exception(exc)
        futures.append(future)
        window.append(future)
    out: List[Any] = []
    first_error: Optional[BaseException] = None
    for settled in futures:
        failure = settled.exception()
        if failure is None:
            out.append(wire.body(settled.result()))
        else:
            out.append(failure)
            first_error = first_error or failure
    if first_error is not None and not return_exceptions:
        raise first_error
    return out


def _wait_first(window: "collections.deque[Future[Dict[str, Any]]]") -> None:
    """Blocks until some future in the window settles, then drops the settled ones."""
    from concurrent.futures import FIRST_COMPLETED, wait

    wait(list(window), return_when=FIRST_COMPLETED)
    for _ in range(len(window)):
        future = window.popleft()
        if not future.done():
            window.append(future)
