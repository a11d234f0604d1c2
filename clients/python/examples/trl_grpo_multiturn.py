#!/usr/bin/env python3
"""One real GRPO step of TRL's GRPOTrainer on CPU, multi-turn through crucible.

    python3 clients/python/examples/trl_grpo_multiturn.py --endpoint tcp://127.0.0.1:5555 \
        --task llm/rms_norm --file tasks/llm/rms_norm/solution.cu

Needs the `trainers` extra (TRL, transformers, datasets; PyTorch). No download: the model is a
one-layer Qwen2 with random weights built from a config, the tokenizer a byte-level one built
here, with TRL's own Qwen2.5 chat template (so TRL parses tool calls as it would for Qwen).

The policy is scripted: the model's `generate` writes fixed turns, while its forward pass, the
log-probabilities and the optimizer step are the real ones. The first rollout of the group
submits a kernel that does not compile, then, once the tool's feedback names the compile
error, the given kernel; the second answers in prose and never calls the tool. So the step runs
TRL's whole tool loop: `environment_factory` opens one crucible episode per rollout,
`submit_kernel` calls step the episode, the feedback goes back into the conversation, and each
rollout's reward is the episode's best step (None, left out by TRL, when every step was an
infra_error; the preset's invalid_action penalty, -0.5 here, when nothing was submitted).
The two rewards differ, so the group has a non-zero advantage and the weights move. A real
run loads a real model where the scripted one is.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any, List

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

try:
    import crucible_client  # noqa: F401
except ImportError:  # running from a checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch
from datasets import Dataset
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
from trl import GRPOConfig, GRPOTrainer

from crucible_client.trl_env import make_trl_environment, trl_dataset_rows

BROKEN = ('// @launch k<<<1, 32>>>(out)\n#include <cuda_bf16.h>\n'
          'extern "C" __global__ void k(__nv_bfloat16* out) { out[0] = 1 }\n')
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def byte_level_tokenizer() -> PreTrainedTokenizerFast:
    """One token per byte plus the chat markers: any text round-trips exactly."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tokenizer = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(SPECIAL_TOKENS)
    template = (resources.files("trl") / "chat_templates" / "qwen2_5.jinja").read_text()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", chat_template=template)


class ScriptedPolicy(Qwen2ForCausalLM):
    """A real (random, tiny) Qwen2 whose generate() writes scripted turns.

    First turn: the even rows of the batch submit `BROKEN`, the odd rows answer in prose. After
    a tool answer that reports a compile error: submit the kernel in `self.kernel`. After any
    other tool answer: a closing sentence. `self.seen` records every conversation generate()
    was given, to show what the model read.
    """

    kernel = ""
    tokenizer: Any = None
    seen: List[str] = []

    def _turn(self, conversation: str, row: int) -> str:
        if "<tool_response>" not in conversation:
            if row % 2:
                return "I would tile the rows over warps, but I cannot write it.<|im_end|>"
            source = BROKEN
        elif "compile_error" in conversation.rsplit("<tool_response>", 1)[1]:
            source = self.kernel
        else:
            return "I am done.<|im_end|>"
        call = {"name": "submit_kernel", "arguments": {"source": source}}
        return "<tool_call>\n" + json.dumps(call) + "\n</tool_call><|im_end|>"

    @torch.no_grad()
    def generate(self, input_ids: torch.Tensor,  # type: ignore[override]
                 attention_mask: Any = None, **kwargs: Any) -> torch.Tensor:
        pad = self.tokenizer.pad_token_id
        rows = []
        for row, ids in enumerate(input_ids.tolist()):
            conversation = self.tokenizer.decode([i for i in ids if i != pad])
            self.seen.append(conversation)
            turn = self.tokenizer(self._turn(conversation, row), add_special_tokens=False)
            rows.append(ids + turn["input_ids"])
        width = max(len(r) for r in rows)
        return torch.tensor([r + [pad] * (width - len(r)) for r in rows], dtype=torch.long)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoint", default="tcp://127.0.0.1:5555")
    parser.add_argument("--task", default="llm/rms_norm")
    parser.add_argument("--file", required=True, help="the kernel the policy submits second")
    parser.add_argument("--output-dir", default=None)
    args = parser.parse_args()

    torch.manual_seed(0)
    tokenizer = byte_level_tokenizer()
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=32768, tie_word_embeddings=True,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    model = ScriptedPolicy(config)
    model.kernel = Path(args.file).read_text()
    model.tokenizer = tokenizer

    rows = trl_dataset_rows(args.endpoint, [args.task], style="compact", reference=False,
                            repeat=2)
    environments = make_trl_environment(args.endpoint, max_steps=3,
                                        reward={"penalty": {"invalid_action": -0.5}},
                                        tag={"run": "example-grpo", "model": "tiny-qwen2"})
    with tempfile.TemporaryDirectory() as scratch:
        training = GRPOConfig(
            output_dir=args.output_dir or scratch, per_device_train_batch_size=2,
            num_generations=2, max_completion_length=12000, max_tool_calling_iterations=3,
            max_steps=1, learning_rate=1e-2, beta=0.0, logging_steps=1, report_to=[],
            save_strategy="no", use_cpu=True, bf16=False, seed=0, dataloader_num_workers=0)
        trainer = GRPOTrainer(model=model, args=training, processing_class=tokenizer,
                              train_dataset=Dataset.from_list(rows),
                              environment_factory=environments)
        before = [p.detach().clone() for p in model.parameters()]
        trainer.train()
        moved = any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    try:
        for i, episode in enumerate(environments.episodes):
            print(f"rollout episode {i}: task {episode.task_id}")
            for attempt in episode.attempts:
                print(f"  step {attempt['step']}: {attempt['status']:<15} "
                      f"reward {attempt['reward']}")
            if episode.closed_reply is not None:
                print(f"  closed: best {episode.closed_reply.get('best')}")
        fed_back = [c for c in model.seen if "<tool_response>" in c]
        print(f"generate() calls: {len(model.seen)}, with tool feedback in the context: "
              f"{len(fed_back)}")
        if fed_back:
            answer = fed_back[0].rsplit("<tool_response>", 1)[1].split("</tool_response>")[0]
            print("the feedback the model read:" + answer.rstrip())
        logs = [entry for entry in trainer.state.log_history if "loss" in entry]
        print("trainer log:", json.dumps(logs[-1] if logs else {}, sort_keys=True, default=str))
        print(f"parameters updated: {moved}")
    finally:
        environments.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
