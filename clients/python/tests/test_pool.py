"""Pool against real servers: scores spread by load, episodes stay on the server that opened
them, a killed server fails its episodes with ServerLost while scores go on, a restarted one
rejoins."""

from __future__ import annotations

import os
import signal
import threading
import subprocess
import time
from concurrent.futures import FIRST_COMPLETED, wait
from pathlib import Path
from typing import Any, Callable, Dict, List

import pytest

from conftest import RunningServer, free_loopback_port, server_binary, wait_until_answering
from crucible_client import (
    Client,
    CrucibleConnectionError,
    CrucibleError,
    Pool,
    ServerLost,
    UnknownEpisode,
)

SOURCE = "__global__ void k() {}"
# Short enough that a lost server is noticed within the test's patience, long enough that a
# loaded CI machine does not mark a live server down.
POOL_OPTIONS: Dict[str, Any] = {"timeout": 20.0, "connect_timeout": 2.0, "health_interval": 0.2,
                                "health_timeout": 2.0}


class Servers:
    """Real `crucible serve` processes on free loopback ports, each restartable on its port."""

    def __init__(self, root: Path):
        binary = server_binary()
        if not (binary.is_file() and os.access(binary, os.X_OK)):
            message = f"crucible server binary not found at {binary}"
            if os.environ.get("CRUCIBLE_REQUIRE_SERVER") == "1":
                pytest.fail(message + " (CRUCIBLE_REQUIRE_SERVER=1)", pytrace=False)
            pytest.skip("NOT RUN: " + message)
        self.binary = binary
        self.root = root
        self.running: List[RunningServer] = []

    def start(self, endpoint: str = "") -> RunningServer:
        endpoint = endpoint or f"tcp://127.0.0.1:{free_loopback_port()}"
        workdir = self.root / f"server{len(self.running)}"
        workdir.mkdir()
        stderr_path = workdir / "stderr.txt"
        with open(stderr_path, "wb") as stderr:
            process = subprocess.Popen(
                [str(self.binary), "serve", "--bind", endpoint, "--log", str(workdir / "t.log"),
                 "--workers", "2", "--compile-workers", "1"],
                stdout=subprocess.DEVNULL, stderr=stderr, stdin=subprocess.DEVNULL,
                cwd=str(workdir))
        server = RunningServer(endpoint, process, workdir / "t.log", stderr_path)
        self.running.append(server)
        wait_until_answering(server, 30.0)
        return server

    def stop_all(self) -> None:
        for server in self.running:
            if server.process.poll() is None:
                server.process.kill()
            server.process.wait()


@pytest.fixture
def servers(tmp_path: Path):
    started = Servers(tmp_path)
    yield started
    started.stop_all()


def counters(endpoint: str) -> Dict[str, int]:
    """The server's own count of the steps and scores it answered."""
    with Client(endpoint, timeout=5.0) as direct:
        stats = direct.request("stats")
    return {"steps": stats["steps"], "scores": stats["scores"]}


def wait_for(condition: Callable[[], bool], within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {within_s} s")
        time.sleep(0.05)


def task_id(pool: Pool) -> str:
    task: str = pool.request("tasks")["tasks"][0]["id"]
    return task


def episode_on_server_0(pool: Pool, task: str, tries: int = 50) -> str:
    """Resets until the pool opens an episode on its first server (round-robin gets there)."""
    for _ in range(tries):
        episode: str = pool.request("reset", task=task)["episode"]
        if episode.startswith("s0/"):
            return episode
    pytest.fail(f"no reset of {tries} opened an episode on server 0")


def test_scores_spread_over_every_server(servers: Servers):
    endpoints = [servers.start().endpoint for _ in range(3)]
    with Pool(endpoints, **POOL_OPTIONS) as pool:
        task = task_id(pool)
        for _ in range(12):
            assert "result" in pool.request("score", task=task, source=SOURCE)
        bodies = pool.score_many([(task, SOURCE)] * 18, max_inflight=6)
        assert len(bodies) == 18 and all(body["task"] == task for body in bodies)
    scores = [counters(endpoint)["scores"] for endpoint in endpoints]
    assert sum(scores) == 30
    assert all(count >= 5 for count in scores), scores


def test_episodes_stay_on_the_server_that_opened_them(servers: Servers):
    endpoints = [servers.start().endpoint for _ in range(3)]
    with Pool(endpoints, **POOL_OPTIONS) as pool:
        task = task_id(pool)
        episodes = [pool.request("reset", task=task, max_steps=4)["episode"] for _ in range(6)]
        owners = []
        for episode in episodes:
            prefix, _, server_id = episode.partition("/")
            assert prefix in ("s0", "s1", "s2") and server_id.startswith("ep-"), episode
            owners.append(int(prefix[1:]))
        assert sorted(set(owners)) == [0, 1, 2]  # resets spread too
        for round_ in (1, 2):
            for episode in episodes:
                reply = pool.request("step", episode=episode, source=SOURCE)
                assert reply["episode"] == episode and reply["step"] == round_
        steps = [counters(endpoint)["steps"] for endpoint in endpoints]
        assert steps == [2 * owners.count(index) for index in range(3)]
        closed = pool.request("close", episode=episodes[0])
        assert closed["episode"] == episodes[0] and closed["steps"] == 2
        with pytest.raises(UnknownEpisode):  # the server's answer, routed back
            pool.request("step", episode=episodes[0], source=SOURCE)


@pytest.mark.parametrize("episode", ["ep-0123456789abcdef", "s3/ep-0123456789abcdef", "s/ep-1",
                                     "", None])
def test_an_episode_id_this_pool_did_not_issue_is_refused_clearly(servers: Servers, episode):
    endpoint = servers.start().endpoint if not servers.running else servers.running[0].endpoint
    with Pool([endpoint, endpoint, endpoint], **POOL_OPTIONS) as pool:
        with pytest.raises(UnknownEpisode, match="not issued by this pool.*s<server index>/"):
            pool.submit("step", episode=episode, source=SOURCE)
        with pytest.raises(UnknownEpisode, match="not issued by this pool"):
            pool.request("close", episode=episode)
    assert counters(endpoint)["steps"] == 0  # nothing was sent


def test_a_killed_server_fails_its_episodes_and_scores_go_to_the_others(servers: Servers):
    doomed, survivor = servers.start(), servers.start()
    with Pool([doomed.endpoint, survivor.endpoint], **POOL_OPTIONS) as pool:
        task = task_id(pool)
        episodes = {}
        while len(episodes) < 2:
            episode = pool.request("reset", task=task, max_steps=8)["episode"]
            episodes.setdefault(episode.partition("/")[0], episode)
        doomed.process.send_signal(signal.SIGKILL)
        doomed.process.wait()
        started = time.monotonic()
        with pytest.raises(ServerLost, match=doomed.endpoint.replace(".", r"\.")) as lost:
            pool.request("step", episode=episodes["s0"], source=SOURCE)
        assert time.monotonic() - started < 5.0
        assert lost.value.endpoint == doomed.endpoint
        assert isinstance(lost.value, CrucibleConnectionError)
        # The other server's episode and scores are untouched.
        assert pool.request("step", episode=episodes["s1"], source=SOURCE)["step"] == 1
        for _ in range(6):
            pool.request("score", task=task, source=SOURCE)
        assert counters(survivor.endpoint)["scores"] == 6
        report = pool.servers()
        assert report[0]["endpoint"] == doomed.endpoint and not report[0]["up"]
        assert report[0]["last_error"] and report[1]["up"]
        # Later steps of the lost episode fail at once, without waiting for a connection.
        started = time.monotonic()
        with pytest.raises(ServerLost, match="was lost"):
            pool.request("step", episode=episodes["s0"], source=SOURCE)
        assert time.monotonic() - started < 0.5


def test_a_restarted_server_rejoins_but_its_old_episodes_stay_lost(servers: Servers):
    first, other = servers.start(), servers.start()
    with Pool([first.endpoint, other.endpoint], **POOL_OPTIONS) as pool:
        task = task_id(pool)
        old = episode_on_server_0(pool, task)
        first.process.send_signal(signal.SIGKILL)
        first.process.wait()
        wait_for(lambda: not pool.servers()[0]["up"], 5.0, "the killed server was not marked down")
        servers.start(first.endpoint)
        wait_for(lambda: pool.servers()[0]["up"], 10.0, "the restarted server did not rejoin")
        with pytest.raises(ServerLost):
            pool.request("step", episode=old, source=SOURCE)
        for _ in range(8):
            pool.request("score", task=task, source=SOURCE)
        assert counters(first.endpoint)["scores"] >= 2  # the new process takes work again
        fresh = episode_on_server_0(pool, task)
        assert pool.request("step", episode=fresh, source=SOURCE)["step"] == 1
        assert counters(first.endpoint)["steps"] == 1


def test_a_score_on_an_unreachable_server_is_sent_again_to_another(servers: Servers):
    live = servers.start()
    nobody = f"tcp://127.0.0.1:{free_loopback_port()}"
    options = dict(POOL_OPTIONS, connect_timeout=0.3, health_interval=60.0)
    with Pool([nobody, live.endpoint], **options) as pool:
        task = "x"
        for _ in range(4):  # round-robin puts at least one first on the unreachable server
            try:
                pool.request("score", task=task, source=SOURCE)
            except CrucibleError as exc:
                assert exc.code == "unknown_task"  # answered by the live server
        assert counters(live.endpoint)["scores"] == 0  # unknown tasks are not scored
        report = pool.servers()
        assert not report[0]["up"] and "could not connect" in report[0]["last_error"]
    with Pool([nobody], **options) as alone:
        with pytest.raises(ServerLost, match=nobody.replace(".", r"\.")):
            alone.request("hello", client="pytest")
        with pytest.raises(ServerLost, match="no server of the pool is up"):
            alone.request("hello", client="pytest")


def test_a_closed_pool_refuses_requests_and_stops_its_thread(servers: Servers):
    endpoint = servers.start().endpoint
    pool = Pool([endpoint], **POOL_OPTIONS)
    assert pool.request("hello", client="pytest")["ok"]
    thread = pool._health
    pool.close()
    assert pool.closed and all(client.closed for client in pool.clients)
    assert not thread.is_alive()
    with pytest.raises(CrucibleConnectionError, match="closed"):
        pool.submit("score", task="x", source=SOURCE)
    with pytest.raises(TypeError):
        Pool(endpoint)  # type: ignore[arg-type]


def test_a_servers_load_leaves_out_this_pools_own_requests(fake_server):
    options = dict(POOL_OPTIONS, health_interval=60.0)
    with Pool([fake_server.endpoint], **options) as pool:
        held = pool.submit("score", task="x", source=SOURCE)
        peer, request = fake_server.recv()
        assert request["op"] == "score"
        checking = threading.Thread(target=pool.check_health)
        checking.start()
        stats_peer, stats = fake_server.recv()
        assert stats["op"] == "stats"
        # 3 in flight and 1 queued at the server, one of them this pool's own score.
        fake_server.reply(stats_peer, stats["id"], inflight=3,
                          pools={"compile": {"queue_depth": 1}})
        checking.join(timeout=10)
        report = pool.servers()[0]
        assert report["inflight"] == 1 and report["server_load"] == 3
        fake_server.reply(peer, request["id"], task="x", result={}, reward=0.0)
        assert held.result(timeout=5)["ok"]


def test_the_least_loaded_server_gets_the_work(servers: Servers, fake_server):
    # The fake server answers only by hand: what it holds stays in flight.
    real = servers.start()
    options = dict(POOL_OPTIONS, health_interval=60.0)
    with Pool([fake_server.endpoint, real.endpoint], **options) as pool:
        held = [pool.submit("score", task="x", source=SOURCE) for _ in range(2)]
        peer, request = fake_server.recv()  # round-robin sent one of the two there
        assert request["op"] == "score"
        wait(held, timeout=10, return_when=FIRST_COMPLETED)  # the real server's answer
        assert pool.servers()[0]["inflight"] == 1 and pool.servers()[1]["inflight"] == 0
        for _ in range(6):  # the fake has one in flight, the real one none when each is sent
            with pytest.raises(CrucibleError, match="unknown_task"):
                pool.request("score", task="x", source=SOURCE)
        assert fake_server.recv_nothing()
        fake_server.reply(peer, request["id"], task="x", result={}, reward=0.0)
        assert sorted(f.result(timeout=5)["ok"] if f.exception(timeout=5) is None else False
                      for f in held) == [False, True]
        assert pool.servers()[0]["inflight"] == 0

        # Load reported by the server's stats counts too: in flight plus queue depths.
        checking = threading.Thread(target=pool.check_health)
        checking.start()
        peer, request = fake_server.recv()
        assert request["op"] == "stats"
        fake_server.reply(peer, request["id"], inflight=3,
                          pools={"compile": {"queue_depth": 4}, "gpu": {"queue_depth": 5}})
        checking.join(timeout=10)
        report = pool.servers()
        assert report[0]["up"] and report[0]["server_load"] == 12 and report[1]["server_load"] == 0
        for _ in range(6):
            with pytest.raises(CrucibleError, match="unknown_task"):
                pool.request("score", task="x", source=SOURCE)
        assert fake_server.recv_nothing()


def test_a_step_in_flight_when_its_server_goes_away_raises_server_lost(servers: Servers,
                                                                      fake_server):
    real = servers.start()
    options = dict(POOL_OPTIONS, health_interval=60.0)
    with Pool([fake_server.endpoint, real.endpoint], **options) as pool:
        opening = pool.submit("reset", task="x")  # round-robin: the first goes to the fake
        peer, request = fake_server.recv()
        fake_server.reply(peer, request["id"], episode="ep-held", task={}, max_steps=4, step=0)
        episode = opening.result(timeout=5)["episode"]
        assert episode == "s0/ep-held"
        stepping = pool.submit("step", episode=episode, source=SOURCE)
        peer, request = fake_server.recv()
        assert request["episode"] == "ep-held"  # the prefix is stripped on the wire
        started = time.monotonic()
        fake_server.close()  # the server goes away with the step in flight
        with pytest.raises(ServerLost, match="not retried") as lost:
            stepping.result(timeout=10)
        assert time.monotonic() - started < 5.0
        assert lost.value.endpoint == fake_server.endpoint
        assert counters(real.endpoint)["steps"] == 0  # not sent elsewhere


def test_a_server_moved_to_another_address_is_followed_and_its_old_episodes_lost(
        servers: Servers):
    first, other = servers.start(), servers.start()
    with Pool([first.endpoint, other.endpoint], **POOL_OPTIONS) as pool:
        task = task_id(pool)
        old = episode_on_server_0(pool, task)
        first.process.send_signal(signal.SIGKILL)
        first.process.wait()
        moved = servers.start()  # the same server, back at another address
        pool.move_server(0, moved.endpoint)
        assert pool.endpoints[0] == moved.endpoint
        report = pool.servers()[0]
        assert report["endpoint"] == moved.endpoint and report["up"]
        assert first.endpoint in report["last_error"]
        with pytest.raises(ServerLost, match="was lost"):
            pool.request("step", episode=old, source=SOURCE)
        for _ in range(8):
            pool.request("score", task=task, source=SOURCE)
        assert counters(moved.endpoint)["scores"] >= 2
        fresh = episode_on_server_0(pool, task)
        assert pool.request("step", episode=fresh, source=SOURCE)["step"] == 1
        assert counters(moved.endpoint)["steps"] == 1
    assert all(client.closed for client in pool.clients)  # the moved-in client too
