"""CurveZMQ against the real server: keys from `crucible keys new` and from Python, a client
with a known key served, one without a key or with an unknown key refused at the connect check."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from conftest import free_loopback_port, server_binary, stop_server_process
from crucible_client import Client
from crucible_client.curve import new_key_pair, read_key_pair, read_public_key
from crucible_client.errors import CrucibleConnectionError


@pytest.fixture
def curve_server(tmp_path):
    binary = server_binary()
    if not binary.is_file():
        pytest.skip(f"NOT RUN: crucible server binary not found at {binary}")
    made = subprocess.run([str(binary), "keys", "new", str(tmp_path / "server")],
                          capture_output=True, text=True, timeout=30)
    assert made.returncode == 0, made.stderr
    assert oct(os.stat(tmp_path / "server.key").st_mode & 0o777) == "0o600"
    (tmp_path / "clients").mkdir()
    client = new_key_pair(tmp_path / "clients" / "trainer")
    endpoint = f"tcp://127.0.0.1:{free_loopback_port()}"
    process = subprocess.Popen(
        [str(binary), "serve", "--bind", endpoint, "--log", str(tmp_path / "traj.log"),
         "--server-key", str(tmp_path / "server.key"), "--client-keys", str(tmp_path / "clients"),
         "--no-compile"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=str(tmp_path))
    try:
        yield endpoint, tmp_path / "server.pub", tmp_path / "clients" / "trainer.key", client
    finally:
        stop_server_process(process)


def test_a_known_client_is_served_and_others_get_nothing(curve_server, tmp_path):
    endpoint, server_pub, client_key, client_pair = curve_server
    assert read_key_pair(client_key) == client_pair
    deadline = time.monotonic() + 60
    while True:  # the server may still be starting
        try:
            with Client(endpoint, timeout=10, connect_timeout=5, server_key=server_pub,
                        client_key=client_key) as client:
                hello = client.request("hello")
            break
        except CrucibleConnectionError:
            if time.monotonic() > deadline:
                raise
    assert hello["auth"] == "curve"
    # The server key as its Z85 text works as well as the file.
    with Client(endpoint, timeout=10, server_key=read_public_key(server_pub),
                client_key=client_key) as client:
        assert client.request("hello")["ok"] is True

    stranger = new_key_pair(tmp_path / "stranger")
    for options in ({}, {"server_key": server_pub, "client_key": tmp_path / "stranger.key"}):
        started = time.monotonic()
        with pytest.raises(CrucibleConnectionError):
            with Client(endpoint, timeout=10, connect_timeout=2, **options) as client:
                client.request("hello")
        assert time.monotonic() - started < 8  # the connect check, not the request timeout
    assert stranger.public != client_pair.public


def test_key_options_are_checked_before_connecting(tmp_path):
    new_key_pair(tmp_path / "me")
    with pytest.raises(ValueError, match="both"):
        Client("tcp://127.0.0.1:9", server_key=tmp_path / "me.pub")
    with pytest.raises(ValueError, match="secret-key"):
        Client("tcp://127.0.0.1:9", server_key=tmp_path / "me.pub", client_key=tmp_path / "me.pub")
    with pytest.raises(FileExistsError):
        new_key_pair(tmp_path / "me")
