#!/usr/bin/env python3
"""One GRPO-style step and one multi-turn turn with a scripted policy, no trainer needed.

    python3 clients/python/examples/scripted_grpo.py --endpoint tcp://127.0.0.1:5555 \
        --task llm/rms_norm --file tasks/llm/rms_norm/solution.cu

The "policy" answers the task's prompt with a fixed group of completions (the given kernel in
a ```cuda block, a kernel that does not compile, prose with no code). The TRL reward function
scores the group as GRPOTrainer would call it, the script prints each reward and its
group-relative advantage, then feeds the failing completion's result back as the next turn's
prompt. A real run puts a model where the scripted completions are.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

try:
    import crucible_client  # noqa: F401
except ImportError:  # running from a checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from crucible_client import Client
from crucible_client.adapters import make_trl_reward
from crucible_client.prompts import extract_source, render_feedback, render_prompt

BROKEN = ('// @launch k<<<1, 32>>>(out)\n#include <cuda_bf16.h>\n'
          'extern "C" __global__ void k(__nv_bfloat16* out) { out[0] = 1 }\n')


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", default="tcp://127.0.0.1:5555")
    parser.add_argument("--task", default="llm/rms_norm")
    parser.add_argument("--file", required=True, help="a kernel the policy proposes")
    parser.add_argument("--max-chars", type=int, default=12000, help="prompt budget")
    args = parser.parse_args()

    with Client(args.endpoint, timeout=600) as client:
        view = client.request("task", task=args.task)["task"]
        prompt = render_prompt(view, hello=client.request("hello"), max_chars=args.max_chars)
        print(f"prompt: {len(prompt)} characters, {prompt.count(chr(10))} lines")

        # The scripted policy: one group of completions for this prompt.
        kernel = Path(args.file).read_text()
        completions = [f"Vectorised version:\n```cuda\n{kernel}```\n",
                       f"```cpp\n{BROKEN}```\n",
                       "I would use shared memory here, but I am not sure."]

        # As GRPOTrainer calls a reward function: prompts, completions, dataset columns.
        reward = make_trl_reward(client)
        rewards = reward(prompts=[prompt] * len(completions), completions=completions,
                         task=[args.task] * len(completions))
        scored = [r for r in rewards if r is not None]
        mean = statistics.fmean(scored) if scored else 0.0
        spread = statistics.pstdev(scored) if len(scored) > 1 else 0.0
        for i, (value, outcome) in enumerate(zip(rewards, reward.last_outcomes)):
            advantage = "dropped (infra_error)" if value is None else \
                f"advantage {(value - mean) / (spread + 1e-4):+.2f}"
            print(f"completion {i}: {outcome['status']:<15} reward {value}  {advantage}")

        # Multi-turn: the failing completion's result becomes the next turn's prompt.
        source = extract_source(completions[1])
        reply = client.request("score", task=args.task, source=source)
        print("next turn's feedback:")
        print(render_feedback(reply, source=source), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
