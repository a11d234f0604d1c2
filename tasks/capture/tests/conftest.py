"""pytest setup for tasks/capture: the repository root on sys.path (the tool is the package
`tasks.capture`), and shared fixtures and forward helpers."""

import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

STORIES = os.path.join(ROOT, "tasks", "capture", "models", "stories260K", "stories260K.bin")
COMMITTED = os.path.join(ROOT, "tasks", "capture", "cases", "stories260K")

# Every test here needs PyTorch (scripts/setup installs it). Without it they are reported as
# skipped, with this reason, never as passed.
TORCH_REASON = "PyTorch is not installed (scripts/setup installs it); tasks/capture needs it"


@pytest.fixture(scope="session")
def stories():
    pytest.importorskip("torch", reason=TORCH_REASON)
    from tasks.capture.loaders import load_llama2c

    return load_llama2c(STORIES)


def next_token_logits(model, tokens):
    """float64 logits [vocab] after the last of `tokens`, from one prefill of them all."""
    import random

    from tasks.capture.capture import Engine, Sequence_

    blocks = (len(tokens) + 15) // 16
    engine = Engine(model, blocks, 16, random.Random(0))
    return engine.step([Sequence_(list(tokens))], "prefill")[0].double()


def prefill_logits(model, tokens):
    """float64 logits [len(tokens), vocab] of every position, one prefill per prefix (the engine
    returns only each sequence's last position)."""
    import torch

    return torch.stack([next_token_logits(model, tokens[:n]) for n in range(1, len(tokens) + 1)])


def pytest_terminal_summary(terminalreporter):
    try:
        import torch  # noqa: F401
    except ImportError:
        terminalreporter.write_line(f"tasks/capture: SKIPPED, {TORCH_REASON}")
