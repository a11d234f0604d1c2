"""One `crucible serve` per GPU node of a Ray cluster, each in a Ray actor, behind a Pool.

    import ray
    from crucible_client.ray_cluster import start_servers
    ray.init()
    with start_servers() as pool:          # a Pool over every server; close() stops them
        reply = pool.request("score", task="llm/rms_norm", source=source)

Placement: a placement group with one bundle per server and the STRICT_SPREAD strategy, so
each server runs on its own node; a bundle (and its actor) asks for the GPUs of the node it is
meant for (or `num_gpus`). Ray sets CUDA_VISIBLE_DEVICES for the actor and the server inherits
it. Keys: the driver makes a server and a client Curve key pair; each actor writes the server
pair and the client's public key to a private temporary folder (mode 0700) and starts
`crucible serve --bind tcp://<node ip>:<port> --server-key ... --client-keys ...`. The pool
talks to the servers with those keys.

Restarts: actors are created with max_restarts=-1. An actor whose server exits ends its own
process, so Ray restarts it; a restarted actor (or one whose process was killed) kills a server
left from its previous life and starts a fresh one on the same port, which the pool's health
check sees answering again. When that port is taken by then, or Ray restarts the actor on
another node (its node was lost), the new server has another endpoint: the RayPool's health
check asks the actor of each server that is down where its server is now and follows it there
(`Pool.move_server`).

Needs the `ray` extra (`pip install crucible-client[ray]`); importing `crucible_client` does
not import Ray.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import zmq

from .curve import KeyPair
from .pool import Pool

DEFAULT_BINARY = "crucible"
# How long an actor waits for its server to answer `hello` before it gives up.
DEFAULT_START_TIMEOUT_S = 60.0
_PR_SET_PDEATHSIG = 1


def _import(module: str) -> Any:
    # Ray is optional and read as untyped, so the type check is the same with or without it.
    return importlib.import_module(module)


def _die_with_parent() -> None:
    # Runs in the child before exec: a SIGKILL of the actor's process then also ends the
    # server (Linux only; elsewhere the pid file below cleans up on restart).
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _pid_runs(pid: int, binary: str) -> bool:
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return bool(command) and Path(command[0].decode(errors="replace")).name == Path(binary).name


class CrucibleServerActor:
    """The body of one Ray actor: starts `crucible serve` on its node and watches it.

    State that must outlive a restart of the actor (the port, the server's pid) is kept in a
    folder named after the actor's id under the node's temporary folder; Ray keeps the id
    across restarts.
    """

    def __init__(self, binary: str, server_pair: KeyPair, client_public: str,
                 serve_args: Sequence[str], start_timeout: float = DEFAULT_START_TIMEOUT_S):
        ray = _import("ray")
        _import("ray.util")
        self._binary = shutil.which(binary) or binary
        self._host = ray.util.get_node_ip_address()
        actor_id = ray.get_runtime_context().get_actor_id() or f"pid{os.getpid()}"
        self._state = Path(tempfile.gettempdir()) / "crucible-ray" / actor_id
        self._state.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self._state, 0o700)
        self._stop_old_server()
        keys = Path(tempfile.mkdtemp(prefix="keys-", dir=self._state))
        self._keys = keys
        server_key = keys / "server.key"
        fd = os.open(server_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(f"public-key = {server_pair.public}\nsecret-key = {server_pair.secret}\n")
        (keys / "clients").mkdir(mode=0o700)
        (keys / "clients" / "client.pub").write_text(f"public-key = {client_public}\n")

        port_file = self._state / "port"
        port = int(port_file.read_text()) if port_file.exists() else 0
        if not port or not _port_free(self._host, port):
            port = _free_port(self._host)
            port_file.write_text(str(port))
        self._endpoint = f"tcp://{self._host}:{port}"
        self._stderr = open(self._state / "stderr.log", "ab")
        self._process = subprocess.Popen(
            [self._binary, "serve", "--bind", self._endpoint, "--server-key", str(server_key),
             "--client-keys", str(keys / "clients"), "--log",
             str(self._state / "trajectories.log"), *serve_args],
            stdin=subprocess.DEVNULL, stdout=self._stderr, stderr=self._stderr,
            preexec_fn=_die_with_parent)
        (self._state / "pid").write_text(str(self._process.pid))
        self._wait_listening(start_timeout)
        self._stopping = False
        threading.Thread(target=self._watch, name="crucible-server-watch", daemon=True).start()

    def _stop_old_server(self) -> None:
        pid_file = self._state / "pid"
        if not pid_file.exists():
            return
        pid = int(pid_file.read_text())
        pid_file.unlink()
        if not _pid_runs(pid, self._binary):
            return
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            if not _pid_runs(pid, self._binary):
                return
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)

    def _wait_listening(self, timeout: float) -> None:
        # The actor holds no client secret (the ZAP handler would refuse it a request), so
        # readiness is the port accepting connections.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"crucible serve exited with {self._process.returncode}: "
                                   f"{self.log_tail()}")
            try:
                with socket.create_connection(
                        (self._host, int(self._endpoint.rsplit(":", 1)[1])), timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        self._process.kill()
        raise RuntimeError(f"crucible serve did not listen on {self._endpoint} within "
                           f"{timeout} s: {self.log_tail()}")

    def _watch(self) -> None:
        # A server that exits takes the actor down with it, so that Ray restarts both.
        self._process.wait()
        if not self._stopping:
            os._exit(1)

    def endpoint(self) -> str:
        """Where this actor's server listens now."""
        return self._endpoint

    def alive(self) -> bool:
        """Whether the server process runs."""
        return self._process.poll() is None

    def pid(self) -> int:
        return int(self._process.pid)

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the server's stdout and stderr."""
        self._stderr.flush()
        return (self._state / "stderr.log").read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        """Stops the server (SIGTERM, then SIGKILL after 10 s); the actor stays."""
        self._stopping = True
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        shutil.rmtree(self._keys, ignore_errors=True)

    def __del__(self) -> None:
        try:
            self.stop()
        except Exception:
            pass


class RayPool(Pool):
    """A Pool over servers started by `start_servers`; `close()` also stops them (kills the
    actors and removes the placement group). `actors` are the Ray actor handles, in the order
    of `endpoints`."""

    def __init__(self, endpoints: Sequence[str], actors: List[Any], placement_group: Any,
                 **options: Any):
        super().__init__(endpoints, **options)
        self.actors = actors
        self.placement_group = placement_group
        self._stopped = False

    def check_health(self) -> None:
        """Pool's health check, then, for each server that is down, asks its actor where its
        server is now: one restarted at another address (its port was taken, or Ray restarted
        the actor on another node) is followed there (`move_server`). An actor still
        restarting does not answer within `health_timeout` and is asked again next time."""
        super().check_health()
        if self.closed:
            return
        ray = _import("ray")
        for entry in self.servers():
            if entry["up"]:
                continue
            try:
                endpoint = ray.get(self.actors[entry["index"]].endpoint.remote(),
                                   timeout=self.health_timeout)
            except Exception:
                continue
            if isinstance(endpoint, str) and endpoint != entry["endpoint"]:
                self.move_server(entry["index"], endpoint)

    def close(self) -> None:
        super().close()
        if self._stopped:
            return
        self._stopped = True
        ray = _import("ray")

        for actor in self.actors:
            try:
                ray.get(actor.stop.remote(), timeout=30)
            except Exception:
                pass  # a dead or restarting actor: ray.kill ends it and its server
            ray.kill(actor, no_restart=True)
        ray.util.remove_placement_group(self.placement_group)


def _gpu_nodes() -> List[Dict[str, Any]]:
    return [node for node in _import("ray").nodes()
            if node.get("Alive") and node.get("Resources", {}).get("GPU", 0) > 0]


def start_servers(
    *,
    servers: Optional[int] = None,
    num_gpus: Optional[float] = None,
    binary: str = DEFAULT_BINARY,
    serve_args: Sequence[str] = (),
    start_timeout: float = DEFAULT_START_TIMEOUT_S,
    placement_timeout: float = 120.0,
    **pool_options: Any,
) -> RayPool:
    """Starts `servers` crucible servers (default: one per alive node with GPUs), each on its
    own node, and returns a RayPool over them.

    `num_gpus` is what each actor reserves (default: the GPU count of the node with the fewest
    GPUs, so that every bundle fits every GPU node). `binary` is the `crucible` executable on
    every node (a path or a name on PATH); `serve_args` are added to `crucible serve` (e.g.
    ["--workers", "8"]); `pool_options` go to Pool (timeout, health_interval, ...). Ray must
    be initialised (`ray.init(...)`). Raises RuntimeError when there are no GPU nodes, fewer
    than `servers`, or the placement group is not placed within `placement_timeout` seconds.
    """
    ray = _import("ray")
    placement_group = _import("ray.util.placement_group").placement_group
    PlacementGroupSchedulingStrategy = _import(
        "ray.util.scheduling_strategies").PlacementGroupSchedulingStrategy

    nodes = _gpu_nodes()
    count = len(nodes) if servers is None else servers
    if count < 1:
        raise RuntimeError("no alive Ray node has GPU resources; start_servers needs at least one")
    if count > len(nodes):
        raise RuntimeError(f"{count} servers asked for, but only {len(nodes)} nodes have GPUs "
                           f"(one server per node)")
    gpus = num_gpus if num_gpus is not None else max(
        1.0, min(float(node["Resources"]["GPU"]) for node in nodes))
    group = placement_group([{"GPU": gpus}] * count, strategy="STRICT_SPREAD")
    ready, _ = ray.wait([group.ready()], timeout=placement_timeout)
    if not ready:
        ray.util.remove_placement_group(group)
        raise RuntimeError(f"placement group of {count} bundles of {gpus} GPUs (one per node) "
                           f"not placed within {placement_timeout} s")

    server_pair = KeyPair(*(k.decode() for k in zmq.curve_keypair()))
    client_pair = KeyPair(*(k.decode() for k in zmq.curve_keypair()))
    actor_class = ray.remote(CrucibleServerActor)
    actors: List[Any] = []
    try:
        for index in range(count):
            actors.append(actor_class.options(
                num_cpus=0, num_gpus=gpus, max_restarts=-1, max_task_retries=-1,
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    placement_group=group, placement_group_bundle_index=index),
            ).remote(binary, server_pair, client_pair.public, list(serve_args), start_timeout))
        endpoints = ray.get([actor.endpoint.remote() for actor in actors])
    except BaseException:
        for actor in actors:
            ray.kill(actor, no_restart=True)
        ray.util.remove_placement_group(group)
        raise
    return RayPool(endpoints, actors, group, server_key=server_pair.public,
                   client_key=client_pair, **pool_options)


__all__ = ["CrucibleServerActor", "RayPool", "start_servers"]
