"""The `model` field against the real server (docs/models.md): a reset names the model check
its steps get, a score takes a name or a map, and a model, variable or task the server cannot
check is refused as invalid_argument naming it. (The check itself needs a GPU: test_model_gpu.)"""

from __future__ import annotations

import pytest

from crucible_client import Env
from crucible_client.errors import InvalidArgument

TASK = "llm/silu_and_mul"
BROKEN = ('// @launch k<<<1, 32>>>(out)\n#include <cuda_bf16.h>\n'
          'extern "C" __global__ void k(__nv_bfloat16* out) { out[0] = 1 }\n')


def test_reset_and_score_carry_the_model(live_server):
    with Env(live_server.endpoint, timeout=120) as env:
        observation = env.reset(TASK, model={"name": "llama3_8b", "num_seqs": 8})
        assert observation["model"] == {"name": "llama3_8b",
                                        "variables": {"context": 2048, "num_seqs": 8}}
        scored = env.score(TASK, BROKEN, model="stories260K")
        # Not ok (it does not compile), so no model check ran and none is reported.
        assert scored["result"]["status"] == "compile_error"
        assert "model" not in scored["result"]


@pytest.mark.parametrize("model, needle", [
    ("llama4", "no model 'llama4' on this server"),
    ({"name": "llama3_8b", "batch": 4}, "no variable 'batch'"),
    ({"name": "llama3_8b", "context": -1}, "'context' must be a positive integer"),
])
def test_a_model_the_server_cannot_check_is_refused(live_server, model, needle):
    with Env(live_server.endpoint, timeout=120) as env:
        with pytest.raises(InvalidArgument, match=needle):
            env.score(TASK, BROKEN, model=model)
        with pytest.raises(InvalidArgument, match=needle):
            env.reset(TASK, model=model)


def test_a_task_the_model_never_calls_is_refused(live_server):
    with Env(live_server.endpoint, timeout=120) as env:
        with pytest.raises(InvalidArgument, match="model llama3_8b never calls llm/rms_norm"):
            env.score("llm/rms_norm", BROKEN, model="llama3_8b")
