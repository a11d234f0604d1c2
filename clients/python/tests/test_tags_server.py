"""Request tags against the real server: echoed on reset, step and score, a step without its
own tag carrying its episode's, and the server's own limits."""

from __future__ import annotations

from crucible_client import Env

TASK = "llm/rms_norm"
BROKEN = ('// @launch k<<<1, 32>>>(out)\n#include <cuda_bf16.h>\n'
          'extern "C" __global__ void k(__nv_bfloat16* out) { out[0] = 1 }\n')


def test_tags_are_echoed_and_a_step_inherits_its_episodes(live_server):
    with Env(live_server.endpoint, timeout=120, tag={"run": "pytest-tags"}) as env:
        observation = env.reset(TASK, max_steps=3, tag={"rollout": 12, "model": "qwen"})
        expected = {"run": "pytest-tags", "rollout": 12, "model": "qwen"}
        assert observation["tag"] == expected
        _, _, _, _, reply = env.step(BROKEN)
        assert reply["tag"] == expected  # no tag of its own: the episode's
        _, _, _, _, reply = env.step(BROKEN, tag={"attempt": 2})
        assert reply["tag"] == {"attempt": 2}
        scored = env.score(TASK, BROKEN, tag={"rollout": 13})
        assert scored["tag"] == {"run": "pytest-tags", "rollout": 13}


def test_the_server_refuses_what_the_client_would_not_send(live_server):
    # Sent raw (no client-side check) to see the server's own limits answer as data.
    import msgpack

    from conftest import raw_dealer, raw_recv

    sock = raw_dealer(live_server.endpoint)
    try:
        sock.send(msgpack.packb({"v": 1, "id": 1, "op": "score", "task": TASK, "source": BROKEN,
                                 "tag": {f"k{i}": i for i in range(9)}}))
        reply = raw_recv(sock, timeout=60)
    finally:
        sock.close(linger=0)
    assert reply["ok"] is False
    assert reply["error"]["code"] in ("invalid_argument", "too_large", "bad_request")
    assert "tag" in reply["error"]["message"]
