#!/usr/bin/env python3
"""A multi-turn episode through OpenEnv: crucible served as an OpenEnv environment, a scripted
agent on OpenEnv's own client.

    python3 clients/python/examples/openenv_episode.py --endpoint tcp://127.0.0.1:5555 \
        --task llm/rms_norm --file tasks/llm/rms_norm/solution.cu

Needs the `trainers` extra (openenv). The script serves `make_openenv_app` with uvicorn on a
free loopback port (as `python -m crucible_client.openenv_env` would), connects a
`CrucibleEnvClient` over OpenEnv's WebSocket session, resets on the task and plays a scripted
policy: a kernel that does not compile, then, because the feedback it reads names a compile
error, the given kernel. Each turn prints the status, the reward (None for infra_error) and
the feedback the agent read.
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading
import time
from pathlib import Path

try:
    import crucible_client  # noqa: F401
except ImportError:  # running from a checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import uvicorn

from crucible_client.openenv_env import CrucibleEnvClient, KernelAction, make_openenv_app

BROKEN = ('// @launch k<<<1, 32>>>(out)\n#include <cuda_bf16.h>\n'
          'extern "C" __global__ void k(__nv_bfloat16* out) { out[0] = 1 }\n')


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", default="tcp://127.0.0.1:5555", help="crucible server")
    parser.add_argument("--task", default="llm/rms_norm")
    parser.add_argument("--file", required=True, help="the kernel the agent submits second")
    args = parser.parse_args()
    kernel = Path(args.file).read_text()

    port = free_port()
    app = make_openenv_app(args.endpoint, max_concurrent_envs=4,
                           prompt_options={"style": "compact", "max_chars": 8000})
    # log_level "critical": openenv 0.4 logs a traceback when a session's socket is closed by
    # the client first, as this script's is at the end; nothing fails.
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                           log_level="critical"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            print("the OpenEnv app did not start", file=sys.stderr)
            return 1
        time.sleep(0.05)
    try:
        with CrucibleEnvClient(base_url=f"http://127.0.0.1:{port}").sync() as env:
            result = env.reset(task=args.task, max_steps=3,
                               tag={"run": "example-openenv", "agent": "scripted"})
            print(f"reset: {args.task}, prompt of {len(result.observation.text)} characters, "
                  f"max_steps {result.observation.max_steps}, tag {result.observation.tag}")
            source = BROKEN
            for turn in (1, 2):
                result = env.step(KernelAction(source=source))
                observation = result.observation
                print(f"turn {turn}: step {observation.step} {observation.status} "
                      f"reward {result.reward} done {result.done}")
                print("  " + observation.text.rstrip().replace("\n", "\n  "))
                # The scripted policy reads the feedback: a compile error sends the fixed kernel.
                source = kernel if observation.status == "compile_error" else source
            state = env.state()
            print(f"state: step_count {state.step_count}, best {state.best}")
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
