"""Client habits trainers rely on: a wrong address fails in seconds (connect check), and `busy`
replies are retried with backoff. Against the in-test ROUTER and an empty port."""

from __future__ import annotations

import asyncio
import threading
import time

import msgpack
import pytest
import zmq

from conftest import free_loopback_port
from crucible_client import AsyncClient, Busy, Client, CrucibleConnectionError, Env
from crucible_client.client import DEFAULT_CONNECT_TIMEOUT_S


def test_a_wrong_port_fails_in_seconds_not_after_the_request_timeout():
    assert DEFAULT_CONNECT_TIMEOUT_S <= 10
    endpoint = f"tcp://127.0.0.1:{free_loopback_port()}"
    with Client(endpoint, timeout=300, connect_timeout=1.0) as client:
        started = time.monotonic()
        with pytest.raises(CrucibleConnectionError, match="could not connect to .* within 1 s"):
            client.request("hello")
        assert time.monotonic() - started < 3
        assert not client.connected


def test_env_and_async_client_fail_fast_too():
    endpoint = f"tcp://127.0.0.1:{free_loopback_port()}"
    env = Env(endpoint, timeout=300, connect_timeout=0.5)
    with pytest.raises(CrucibleConnectionError):
        env.hello()
    env.client.close()

    async def run():
        async with AsyncClient(endpoint, timeout=300, connect_timeout=0.5) as client:
            started = time.monotonic()
            with pytest.raises(CrucibleConnectionError, match="is a crucible server listening"):
                await client.request("hello")
            return time.monotonic() - started

    assert asyncio.run(run()) < 3


def test_a_request_that_failed_to_connect_was_never_sent():
    port = free_loopback_port()
    endpoint = f"tcp://127.0.0.1:{port}"
    with Client(endpoint, timeout=10, connect_timeout=0.5) as client:
        with pytest.raises(CrucibleConnectionError):
            client.request("hello", client="too-early")
        router = zmq.Context.instance().socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        router.bind(endpoint)
        try:
            future = client.submit("hello", client="in-time")
            assert router.poll(5000), "the server never got the request"
            peer, frame = router.recv_multipart()
            request = msgpack.unpackb(frame, raw=False)
            assert request["client"] == "in-time"  # the failed request did not follow later
            router.send_multipart([peer, msgpack.packb({"v": 1, "id": request["id"], "ok": True})])
            assert future.result(timeout=5)["ok"] is True
            assert client.connected
            assert not router.poll(200)
        finally:
            router.close(linger=0)


def answer(fake_server, replies):
    """Plays the server: answers each incoming request with the next reply ('busy' or 'ok')."""
    seen = []
    for kind in replies:
        peer, request = fake_server.recv()
        seen.append(request)
        if kind == "busy":
            fake_server.error(peer, request["id"], "busy", "the work queue is full")
        else:
            fake_server.reply(peer, request["id"], task=request.get("task"), reward=1.0)
    return seen


def test_busy_is_retried_with_backoff_and_a_new_id(fake_server):
    with Client(fake_server.endpoint, timeout=10) as client:
        started = time.monotonic()
        future = client.submit("score", task="t", source="s")
        seen = answer(fake_server, ["busy", "busy", "ok"])
        assert future.result(timeout=5)["reward"] == 1.0
        assert client.busy_retried == 2
        assert len({r["id"] for r in seen}) == 3
        assert all((r["op"], r["task"], r["source"]) == ("score", "t", "s") for r in seen)
        assert time.monotonic() - started >= 0.1  # backoff: 0.05-0.1 s, then 0.1-0.2 s


def test_busy_is_raised_once_the_retries_are_used_up(fake_server):
    with Client(fake_server.endpoint, timeout=10, busy_retries=1) as client:
        future = client.submit("step", episode="ep", source="s")
        answer(fake_server, ["busy", "busy"])
        with pytest.raises(Busy, match="work queue is full"):
            future.result(timeout=5)
        assert fake_server.recv_nothing(0.5)


def test_busy_retries_stop_at_the_request_timeout(fake_server):
    with Client(fake_server.endpoint, timeout=0.6) as client:
        started = time.monotonic()
        future = client.submit("score", task="t", source="s")
        stop = threading.Event()

        def keep_busy():
            while not stop.is_set():
                if fake_server.socket.poll(50):
                    peer, frame = fake_server.socket.recv_multipart()
                    request = msgpack.unpackb(frame, raw=False)
                    fake_server.error(peer, request["id"], "busy", "full")

        worker = threading.Thread(target=keep_busy)
        worker.start()
        try:
            with pytest.raises(Busy):
                future.result(timeout=5)
            assert time.monotonic() - started < 1.5
        finally:
            stop.set()
            worker.join()


def test_async_client_retries_busy(fake_server):
    seen = []
    worker = threading.Thread(target=lambda: seen.extend(answer(fake_server, ["busy", "ok"])))
    worker.start()

    async def run():
        async with AsyncClient(fake_server.endpoint, timeout=10) as client:
            reply = await client.request("score", task="t", source="s")
            return reply, client.busy_retried

    reply, retried = asyncio.run(run())
    worker.join(timeout=5)
    assert reply["reward"] == 1.0 and retried == 1 and len(seen) == 2
