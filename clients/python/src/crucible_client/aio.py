"""AsyncClient: the pipelined client for asyncio programs, on zmq.asyncio."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any, Dict, Iterable, List, Mapping, Optional

import zmq
import zmq.asyncio

from . import wire
from .client import DEFAULT_TIMEOUT_S, ScoreItem, Client
from .errors import CrucibleConnectionError, CrucibleError, CrucibleTimeout, ProtocolError

__all__ = ["AsyncClient"]


class AsyncClient:
    """One DEALER socket; `await request(op, **fields)` from any number of tasks at once.

    Replies are read by one background task and matched to requests by id. Errors are the
    same as Client's: the CrucibleError subclass of the wire code, CrucibleTimeout after
    `timeout` seconds. Use from one event loop.

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
    ):
        self.endpoint = endpoint
        self.timeout = float(timeout)
        self.max_frame_bytes = max_frame_bytes
        self._context = context or zmq.asyncio.Context.instance()
        self._socket = self._context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 0)
        if "[" in endpoint:  # tcp://[::1]:5555: ZeroMQ speaks IPv6 only when asked
            self._socket.setsockopt(zmq.IPV6, 1)
        try:
            self._socket.connect(endpoint)
        except zmq.ZMQError as exc:
            self._socket.close(linger=0)
            raise CrucibleConnectionError(None, f"cannot connect to {endpoint!r}: {exc}") from None
        self._ids = itertools.count(1)
        self._pending: Dict[int, asyncio.Future] = {}
        self._reader: Optional[asyncio.Task] = None
        self._closed = False
        self.dropped_replies = 0
        self.protocol_violations = 0

    async def request(
        self, op: str, *, timeout: Optional[float] = None, **fields: Any
    ) -> Dict[str, Any]:
        """Sends one request and returns its full reply map, or raises a CrucibleError."""
        if self._closed:
            raise CrucibleConnectionError(None, "the client is closed")
        rid = next(self._ids)
        frame = wire.encode_request(rid, op, fields, self.max_frame_bytes)
        loop = asyncio.get_running_loop()
        if self._reader is None or self._reader.done():
            self._reader = loop.create_task(self._read_loop())
        future = loop.create_future()
        self._pending[rid] = future
        wait = self.timeout if timeout is None else float(timeout)
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
        return (await self.request("tasks", category=category))["tasks"]

    async def task(self, task_id: str) -> Dict[str, Any]:
        return (await self.request("task", task=task_id))["task"]

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
        if self._reader is not None:
            self._reader.cancel()
            try:
                await self._reader
            except (asyncio.CancelledError, Exception):
                pass
        self._socket.close(linger=0)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()
