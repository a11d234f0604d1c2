#!/usr/bin/env python3
"""A verifiers rollout of the `crucible-kernels` environment, with a scripted model.

    python3 clients/python/examples/verifiers_episode.py --endpoint tcp://127.0.0.1:5555 \
        --task llm/rms_norm --file tasks/llm/rms_norm/solution.cu

Needs the `trainers` extra (verifiers, and `uv`, which verifiers uses to run its chat
harness). The "model" is a small OpenAI-compatible server on a loopback port that answers
from a script: a kernel that does not compile, then, when the last user turn (crucible's
feedback) names a compile error, the given kernel, then a closing sentence with no code. The
rest is verifiers' own machinery: `load_environment` builds the env, the `null` harness runs
its chat program in a local subprocess through verifiers' interception server, and the env
plays the user with crucible's feedback. The script prints each attempt, the reward the env's
rubric recorded (the episode's best step) and what the model was sent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Dict, List

try:
    import crucible_client  # noqa: F401
except ImportError:  # running from a checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import verifiers.v1 as vf

from crucible_client.verifiers_env import load_environment

BROKEN = ('// @launch k<<<1, 32>>>(out)\n#include <cuda_bf16.h>\n'
          'extern "C" __global__ void k(__nv_bfloat16* out) { out[0] = 1 }\n')


class ScriptedModel(BaseHTTPRequestHandler):
    """POST .../chat/completions: the scripted reply, streamed (SSE) when asked."""

    kernel = ""
    requests: List[Dict[str, Any]] = []

    def reply_text(self, messages: List[Dict[str, Any]]) -> str:
        users = [m for m in messages if m.get("role") == "user"]
        last = users[-1].get("content") if users else ""
        last = last if isinstance(last, str) else json.dumps(last)
        if not any(m.get("role") == "assistant" for m in messages):
            return f"Here is my kernel.\n```cuda\n{BROKEN}```"
        if "compile_error" in last:
            return f"Fixed the missing semicolon; the real kernel:\n```cuda\n{self.kernel}```"
        return "That is my final answer."

    def do_POST(self) -> None:  # noqa: N802 (the http.server name)
        request = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
        self.requests.append(request)
        text = self.reply_text(request.get("messages") or [])
        head = {"id": f"scripted-{len(self.requests)}", "created": int(time.time()),
                "model": request.get("model", "scripted")}
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        if request.get("stream"):
            chunk = dict(head, object="chat.completion.chunk")
            events = [dict(chunk, choices=[{"index": 0, "finish_reason": None,
                                            "delta": {"role": "assistant", "content": text}}]),
                      dict(chunk, choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}]),
                      dict(chunk, choices=[], usage=usage)]
            body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events)
            body += b"data: [DONE]\n\n"
            kind = "text/event-stream"
        else:
            body = json.dumps(dict(head, object="chat.completion", usage=usage, choices=[
                {"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": text}}])).encode()
            kind = "application/json"
        self.send_response(200)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


async def run_episode(env: Any, model_url: str) -> Any:
    task = next(iter(env.taskset))
    context = vf.ModelContext(model="scripted", client=vf.EvalClientConfig(
        base_url=model_url, api_key_var="CRUCIBLE_SCRIPTED_MODEL_KEY"))
    async with env.serving():
        return await env.run_episode(task, context)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", default="tcp://127.0.0.1:5555", help="crucible server")
    parser.add_argument("--task", default="llm/rms_norm")
    parser.add_argument("--file", required=True, help="the kernel the model submits second")
    args = parser.parse_args()
    ScriptedModel.kernel = Path(args.file).read_text()
    os.environ.setdefault("CRUCIBLE_SCRIPTED_MODEL_KEY", "unused")
    try:  # the uv that pip installed (the trainers extra), where verifiers' harness looks first
        import uv

        os.environ["PATH"] = os.path.dirname(uv.find_uv_bin()) + os.pathsep + os.environ["PATH"]
    except (ImportError, FileNotFoundError):
        pass  # verifiers finds or installs uv itself

    model = ThreadingHTTPServer(("127.0.0.1", 0), ScriptedModel)
    threading.Thread(target=model.serve_forever, daemon=True).start()
    try:
        env = load_environment(
            args.endpoint, tasks=[args.task], max_steps=3, tag={"run": "example-verifiers"},
            taskset={"prompt_style": "compact", "max_prompt_chars": 8000},
            agent={"harness": {"id": "null"}, "runtime": {"type": "subprocess"}})
        episode = asyncio.run(run_episode(env, f"http://127.0.0.1:{model.server_address[1]}/v1"))
    finally:
        model.shutdown()
    print(f"episode ok: {episode.ok}; errors: {[e.message for e in episode.errors]}")
    for trace in episode.traces:
        for attempt in trace.info.get("crucible_attempts", []):
            print(f"attempt step {attempt['step']}: {attempt['status']:<15} "
                  f"reward {attempt['reward']}")
        rewards = {name: r.score for name, r in trace.rewards.items()}
        print(f"rewards: {rewards}; trace reward {trace.reward}; stop: {trace.stop_condition}")
    print(f"model requests: {len(ScriptedModel.requests)}")
    for i, request in enumerate(ScriptedModel.requests[1:], start=2):
        users = [m for m in request.get("messages", []) if m.get("role") == "user"]
        content = users[-1].get("content") if users else ""
        text = content if isinstance(content, str) else json.dumps(content)
        print(f"request {i}, last user turn: " + text.strip().splitlines()[0])
    return 0 if episode.ok else 1


if __name__ == "__main__":
    sys.exit(main())
