"""Command line: python3 -m tasks.capture [options] (run from the repository root)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from .capture import OPS, CaptureSettings, run_capture, write_run
from .loaders import load

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_MODEL = os.path.join(HERE, "models", "stories260K", "stories260K.bin")


def _ints(text: str) -> List[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _layers(text: str) -> Optional[List[int]]:
    return None if text == "all" else _ints(text)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="python3 -m tasks.capture",
        description="Run a Llama-architecture model and record the inputs and outputs of the "
        "vLLM ops it calls (docs/capture.md).",
    )
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help="llama2.c .bin file or Hugging Face checkpoint folder "
                   "(default: stories260K)")
    p.add_argument("--name", default="",
                   help="model name in the provenance (default: file or folder name)")
    p.add_argument("--out", default="", help="output folder (default: tasks/capture/cases/<name>)")
    p.add_argument("--device", default="cpu", help="torch device: cpu (default) or cuda")
    p.add_argument("--seed", type=int, default=1234, help="sampling and block-shuffle seed")
    p.add_argument("--temperature", type=float, default=1.0, help="0 for greedy decoding")
    p.add_argument("--top-k", type=int, default=0,
                   help="sample from the k most likely tokens (0: all)")
    p.add_argument("--prompt-lens", default="3,5,8,11",
                   help="prompt length of each sequence (BOS included); their count is the batch")
    p.add_argument("--decode-steps", type=int, default=4, help="decode steps after the prefill")
    p.add_argument("--capture-steps", default="",
                   help="decode steps to record (default: the first and the last)")
    p.add_argument("--block-size", type=int, default=16, help="KV cache block size in tokens")
    p.add_argument("--ops", default=",".join(OPS), help="ops to record, comma-separated")
    p.add_argument("--layers", default="all", help="layers to record (comma-separated or all)")
    p.add_argument("--kv-layers", default="",
                   help="layers recorded for the KV-cache and attention ops (default: as --layers)")
    p.add_argument("--decode-pad-to", type=int, default=8,
                   help="pad decode rows of reshape_and_cache_flash to a multiple "
                   "with slot -1 (0: off)")
    p.add_argument("--rope-rows", type=int, default=0,
                   help="positions kept in the cos_sin_cache (default: min(max positions, 4096))")
    args = p.parse_args(argv)

    unknown = set(args.ops.split(",")) - set(OPS)
    if unknown:
        p.error(f"unknown ops {sorted(unknown)}; known: {', '.join(OPS)}")
    capture_steps = _ints(args.capture_steps) if args.capture_steps else sorted(
        {0, max(args.decode_steps - 1, 0)})
    settings = CaptureSettings(
        seed=args.seed,
        temperature=args.temperature,
        top_k=args.top_k,
        prompt_lens=_ints(args.prompt_lens),
        decode_steps=args.decode_steps,
        capture_steps=capture_steps,
        block_size=args.block_size,
        ops=args.ops.split(","),
        layers=_layers(args.layers),
        kv_layers=_layers(args.kv_layers) if args.kv_layers else None,
        decode_pad_to=args.decode_pad_to,
        rope_rows=args.rope_rows or None,
    )
    model = load(args.model, args.name).to(args.device)
    out = args.out or os.path.join(HERE, "cases", model.config.name)
    run = run_capture(model, settings)
    command = "python3 -m tasks.capture " + " ".join(argv if argv is not None else sys.argv[1:])
    paths = write_run(model, settings, run, out, command.strip())
    total = sum(os.path.getsize(x) for x in paths)
    print(f"{model.config.name}: prompts {run.prompts}")
    print(f"{model.config.name}: generated {run.generated}")
    print(f"wrote {len(paths)} case groups ({total} bytes of tensors) to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
