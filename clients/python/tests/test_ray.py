"""crucible_client.ray_cluster on a real local Ray cluster of two GPU nodes (Ray's fake GPU
resources): one server per node behind Curve keys, scores answered by both, a killed server
brought back by its actor's restart while scoring goes on. Needs the `ray` extra; without it
the tests report themselves skipped, never passed. Marked `extra`: CTest runs them under that
label."""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import time
from pathlib import Path

import pytest

from conftest import REPO, server_binary
from crucible_client import Client, CrucibleConnectionError, CrucibleTimeout
from crucible_client.wire import body

pytestmark = pytest.mark.extra

TASK = "llm/rms_norm"
SOURCE = (REPO / "tasks" / "llm" / "rms_norm" / "solution.cu").read_text()


@pytest.fixture(scope="module")
def cluster():
    if importlib.util.find_spec("ray") is None:
        pytest.skip("NOT RUN: ray is not installed (pip install 'crucible-client[ray]' or "
                    "scripts/setup-extras)")
    if not server_binary().exists():
        pytest.skip(f"NOT RUN: crucible server binary not found at {server_binary()}")
    import ray
    from ray.cluster_utils import Cluster

    # The actors' workers import crucible_client from this checkout.
    src = str(REPO / "clients" / "python" / "src")
    old_path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = src + (os.pathsep + old_path if old_path else "")
    cluster = Cluster(initialize_head=True,
                      head_node_args={"num_cpus": 1, "num_gpus": 0,
                                      "include_dashboard": False})
    nodes = [cluster.add_node(num_cpus=1, num_gpus=1) for _ in range(2)]
    ray.init(address=cluster.address)
    yield cluster, nodes
    ray.shutdown()
    cluster.shutdown()
    if old_path is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = old_path


def scores_by_endpoint(pool) -> dict:
    counts = {}
    for client in pool.clients:
        counts[client.endpoint] = body(client.request("stats"))["scores"]
    return counts


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    pytest.fail(f"not within {timeout} s: {what}")


def test_one_server_per_gpu_node_scores_through_the_pool_and_comes_back(cluster):
    import ray

    from crucible_client.ray_cluster import start_servers

    _, nodes = cluster
    with start_servers(binary=str(server_binary()), serve_args=["--compile-workers", "1"],
                       timeout=60, health_interval=0.5, health_timeout=2) as pool:
        assert len(pool.endpoints) == 2
        assert len(set(pool.endpoints)) == 2
        # Each actor is on its own GPU node.
        node_ids = ray.get([a.__ray_call__.remote(
            lambda self: ray.get_runtime_context().get_node_id()) for a in pool.actors])
        assert sorted(node_ids) == sorted(n.node_id for n in nodes)
        assert ray.get([a.alive.remote() for a in pool.actors]) == [True, True]

        # The servers take only the pool's client key.
        with Client(pool.endpoints[0], timeout=2, connect_timeout=2) as stranger:
            with pytest.raises((CrucibleTimeout, CrucibleConnectionError)):
                stranger.request("hello")

        replies = pool.score_many([{"task": TASK, "source": SOURCE}] * 6)
        for reply in replies:
            # No GPU here: the compile stage runs, the GPU stage answers infra_error.
            assert body(reply)["result"]["status"] in ("infra_error", "ok"), reply
        counts = scores_by_endpoint(pool)
        assert sum(counts.values()) == 6, counts
        assert all(n > 0 for n in counts.values()), counts

        # Kill one server: its actor goes down with it, Ray restarts the actor, which starts
        # a fresh server on the same port; the pool scores on the other meanwhile.
        victim = ray.get(pool.actors[0].pid.remote())
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: not pool.servers()[0]["up"], 30, "the pool marks the server down")
        body(pool.request("score", task=TASK, source=SOURCE))
        wait_for(lambda: pool.servers()[0]["up"], 120, "the restarted server rejoins")
        assert ray.get(pool.actors[0].endpoint.remote()) == pool.endpoints[0]
        assert ray.get(pool.actors[0].pid.remote()) != victim
        before = scores_by_endpoint(pool)[pool.endpoints[0]]
        pool.score_many([{"task": TASK, "source": SOURCE}] * 6)
        assert scores_by_endpoint(pool)[pool.endpoints[0]] > before

        # Killed again, with the port its restart would take held by another process: the
        # restarted actor starts its server on another port, and the pool follows it there.
        # (The port an actor reuses is in its state folder; pointing it at a held port stands
        # for one taken while the actor was down, without racing the restart.)
        old_endpoint = pool.endpoints[0]
        host = old_endpoint[len("tcp://"):].rsplit(":", 1)[0]
        state = Path(ray.get(pool.actors[0].__ray_call__.remote(lambda self: str(self._state))))
        squatter = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            squatter.bind((host, 0))
            squatter.listen()
            held = squatter.getsockname()[1]
            (state / "port").write_text(str(held))
            victim = ray.get(pool.actors[0].pid.remote())
            os.kill(victim, signal.SIGKILL)
            wait_for(lambda: pool.endpoints[0] != old_endpoint and pool.servers()[0]["up"], 120,
                     "the pool follows the restarted server to its new port")
            assert pool.endpoints[0] != f"tcp://{host}:{held}"
            assert ray.get(pool.actors[0].endpoint.remote()) == pool.endpoints[0]
            assert pool.servers()[0]["endpoint"] == pool.endpoints[0]
            before = scores_by_endpoint(pool)[pool.endpoints[0]]
            pool.score_many([{"task": TASK, "source": SOURCE}] * 6)
            assert scores_by_endpoint(pool)[pool.endpoints[0]] > before
        finally:
            squatter.close()
    # Closing the pool ends the actors.
    for actor in pool.actors:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.alive.remote(), timeout=30)
