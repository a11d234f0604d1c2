"""pytest setup for tasks/capture: the repository root on sys.path (the tool is the package
`tasks.capture`), and shared fixtures."""

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


def pytest_terminal_summary(terminalreporter):
    try:
        import torch  # noqa: F401
    except ImportError:
        terminalreporter.write_line(f"tasks/capture: SKIPPED, {TORCH_REASON}")
