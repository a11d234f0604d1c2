"""The real server at the edge of its open-files limit: clients it cannot accept are counted and
reported, and the clients it has keep being served."""

from __future__ import annotations

import os
import subprocess
import time

import msgpack
import pytest
import zmq

from conftest import free_loopback_port, server_binary


def test_clients_past_the_open_files_limit_are_reported_and_the_rest_served(tmp_path):
    binary = server_binary()
    if not binary.is_file():
        pytest.skip(f"NOT RUN: no server binary at {binary}")
    endpoint = f"tcp://127.0.0.1:{free_loopback_port()}"
    stderr_path = tmp_path / "stderr.txt"
    # A hard limit of 64 open files: the server cannot raise it, so some of 100 clients are
    # past it.
    command = (f"ulimit -n 64 && exec {binary} serve --bind {endpoint} "
               f"--log {tmp_path / 'traj.log'} --no-compile --compile-workers 1 --workers 2")
    with open(stderr_path, "wb") as stderr:
        process = subprocess.Popen(["bash", "-c", command], stderr=stderr,
                                   stdin=subprocess.DEVNULL, cwd=str(tmp_path))
    context = zmq.Context()
    sockets = []
    try:
        first = context.socket(zmq.DEALER)
        first.setsockopt(zmq.LINGER, 0)
        first.connect(endpoint)
        first.send(msgpack.packb({"v": 1, "id": 0, "op": "hello"}))
        assert first.poll(20000), "the server did not answer its first client"
        first.recv()
        for i in range(100):
            sock = context.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(endpoint)
            sock.send(msgpack.packb({"v": 1, "id": i + 1, "op": "hello"}))
            sockets.append(sock)
        poller = zmq.Poller()
        for sock in sockets:
            poller.register(sock, zmq.POLLIN)
        answered = 0
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and answered < len(sockets):
            for sock, _ in poller.poll(200):
                sock.recv()
                poller.unregister(sock)
                answered += 1
        assert 0 < answered < len(sockets), f"{answered} of {len(sockets)} answered"
        time.sleep(0.3)  # connection events are read ten times a second
        first.send(msgpack.packb({"v": 1, "id": 1000, "op": "stats"}))
        assert first.poll(10000), "a connected client was not served past the limit"
        stats = msgpack.unpackb(first.recv(), raw=False)
        assert stats["ok"] is True
        assert stats["accept_failures"] > 0
        assert stats["connections"] >= answered
        assert process.poll() is None
    finally:
        context.destroy(linger=0)
        process.terminate()
        process.wait(timeout=30)
    text = stderr_path.read_text(errors="replace")
    assert "cannot accept a client connection" in text and "open files allowed" in text
