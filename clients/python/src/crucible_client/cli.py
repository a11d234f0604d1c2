"""The crucible-client command: one request (or one short episode) per run, printed as JSON."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, List, Optional

from . import wire
from .client import DEFAULT_TIMEOUT_S
from .env import Env
from .errors import CrucibleError
from .prompts import render_prompt


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return {"bytes": len(value)}
    return repr(value)


def _print(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, default=_json_default, ensure_ascii=False)
    sys.stdout.write("\n")


def _json_arg(text: Optional[str]) -> Any:
    """A JSON value given inline, or as @path to a JSON file."""
    if text is None:
        return None
    if text.startswith("@"):
        with open(text[1:], encoding="utf-8") as handle:
            return json.load(handle)
    return json.loads(text)


def _read_source(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="crucible-client",
        description="Talk to a crucible server (protocol v1) and print replies as JSON.",
    )
    parser.add_argument("--endpoint", "-e", default=wire.DEFAULT_ENDPOINT,
                        help="server address, or several separated by commas (a Pool) "
                             "(default: %(default)s)")
    parser.add_argument("--timeout", "-t", type=float, default=DEFAULT_TIMEOUT_S,
                        help="seconds to wait for each reply (default: %(default)s)")
    ops = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    ops.add_parser("hello", help="server identity, GPUs, stages and limits")
    tasks = ops.add_parser("tasks", help="list tasks")
    tasks.add_argument("--category", "-c")
    task = ops.add_parser("task", help="one task's agent view")
    task.add_argument("task")
    ops.add_parser("stats", help="server counters")

    prompt = ops.add_parser("prompt", help="print the prompt an LLM would get for a task")
    prompt.add_argument("task")
    prompt.add_argument("--compact", action="store_true", help="names and types only")
    prompt.add_argument("--no-reference", action="store_true", help="leave the reference out")
    prompt.add_argument("--max-chars", type=int, help="character budget")
    prompt.add_argument("--example", help="a source file shown as a one-shot example")

    score = ops.add_parser("score", help="score one source file without an episode")
    score.add_argument("task")
    score.add_argument("file", help="CUDA source file, or - for stdin")
    score.add_argument("--seed", type=int)
    score.add_argument("--plan", help="launch plan as JSON, or @file.json")
    score.add_argument("--reward", help="reward spec as JSON, or @file.json")

    episode = ops.add_parser("episode", help="reset a task, step each file in turn, close")
    episode.add_argument("task")
    episode.add_argument("files", nargs="+", help="CUDA source files, one per step")
    episode.add_argument("--seed", type=int)
    episode.add_argument("--max-steps", type=int)
    episode.add_argument("--reward", help="reward spec as JSON, or @file.json")

    raw = ops.add_parser("request", help="send any op with fields given as a JSON map")
    raw.add_argument("op")
    raw.add_argument("fields", nargs="?", default="{}", help="JSON map, or @file.json")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = _parser().parse_args(argv)
    try:
        with Env(args.endpoint, args.timeout, client_name="crucible-client") as env:
            if args.command == "hello":
                _print(env.hello())
            elif args.command == "tasks":
                _print(env.tasks(args.category))
            elif args.command == "task":
                _print(env.task(args.task))
            elif args.command == "stats":
                _print(env.stats())
            elif args.command == "prompt":
                example = _read_source(args.example) if args.example else None
                sys.stdout.write(render_prompt(
                    env.task(args.task), style="compact" if args.compact else "full",
                    reference=not args.no_reference, example=example, hello=env.hello(),
                    max_chars=args.max_chars))
            elif args.command == "score":
                _print(env.score(args.task, _read_source(args.file), plan=_json_arg(args.plan),
                                 seed=args.seed, reward=_json_arg(args.reward)))
            elif args.command == "episode":
                observation = env.reset(args.task, seed=args.seed, max_steps=args.max_steps,
                                        reward=_json_arg(args.reward))
                steps = []
                for path in args.files:
                    _, reward, terminated, truncated, info = env.step(_read_source(path))
                    steps.append({"file": path, **wire.body(info)})
                    if terminated or truncated:
                        break
                closed = env.close_episode()
                _print({"episode": observation["episode"], "steps": steps, "close": closed})
            elif args.command == "request":
                fields = _json_arg(args.fields)
                if not isinstance(fields, dict):
                    raise SystemExit("crucible-client: request fields must be a JSON map")
                _print(env.client.request(args.op, **fields))
    except CrucibleError as exc:
        _print({"ok": False, "error": {"code": exc.code, "message": exc.message}})
        return 1
    except ValueError as exc:  # a prompt that cannot fit its budget
        print(f"crucible-client: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"crucible-client: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
