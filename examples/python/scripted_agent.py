#!/usr/bin/env python3
"""A scripted agent: open an episode on a task, submit a solution file, print what came back.

    python3 examples/python/scripted_agent.py --task llm/rms_norm \
        --file tasks/llm/rms_norm/solution.cu --endpoint tcp://127.0.0.1:5555

A learning agent would replace the file with model output and loop on the observation; the
calls are the same. Exits 0 whenever the server answered (even with a failing status: that is
the agent's feedback), 1 on an error reply or a timeout.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
try:
    import crucible_client
except ImportError:  # running from a checkout without installing the package
    sys.path.insert(0, str(REPO / "clients" / "python" / "src"))
    import crucible_client

from crucible_client import CrucibleError, Env


def summarize_result(observation: dict) -> dict:
    """The parts of a step's observation an agent reads first."""
    reward = observation.get("reward") or {}
    summary = {
        "step": observation.get("step"),
        "status": observation.get("status"),
        "message": observation.get("message"),
        "reward_terms": reward.get("terms"),
        "infra": reward.get("infra"),
        "stages_ms": observation.get("stages"),
    }
    for section in ("compile", "correctness", "timing"):
        if observation.get(section) is not None:
            summary[section] = observation[section]
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", default=crucible_client.DEFAULT_ENDPOINT)
    parser.add_argument("--task", default="llm/rms_norm")
    parser.add_argument("--file", default=str(REPO / "tasks" / "llm" / "rms_norm" / "solution.cu"))
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--max-steps", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args()

    source = Path(args.file).read_text(encoding="utf-8")
    try:
        with Env(args.endpoint, args.timeout, client_name="scripted_agent") as env:
            hello = env.hello()
            gpus = ", ".join(g["name"] for g in hello["gpus"]) or "no GPU"
            print(f"server {hello['server']} {hello['version']} ({hello['arch']}, {gpus}), "
                  f"{hello['tasks']} tasks")

            observation = env.reset(args.task, seed=args.seed, max_steps=args.max_steps)
            task = observation["task"]
            print(f"episode {observation['episode']}: {task['id']} — {task.get('title', '')} "
                  f"(up to {observation['max_steps']} steps)")

            observation, reward, terminated, truncated, info = env.step(source)
            print(json.dumps(summarize_result(observation), indent=2, default=str))
            print(f"reward {reward:+.4f}  terminated={terminated}  truncated={truncated}")
            if observation.get("status") == "infra_error":
                print("note: infra_error is the server's fault; trainers drop such samples")

            closed = env.close_episode()
            print(f"closed after {closed['steps']} step(s); best: {json.dumps(closed['best'])}")
    except CrucibleError as exc:
        print(f"error {exc.code}: {exc.message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
