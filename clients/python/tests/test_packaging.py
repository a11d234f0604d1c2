"""The package as it ships: clean under mypy --strict, and a wheel with its type marker,
licence expression, extras and the verifiers taskset module."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from conftest import REPO

PACKAGE = REPO / "clients" / "python"


def test_the_package_is_clean_under_mypy_strict():
    pytest.importorskip("mypy", reason="NOT RUN: mypy is not installed (the test extra has it)")
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--config-file", "pyproject.toml",
         "--cache-dir", os.devnull],
        cwd=PACKAGE, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "Success: no issues found" in done.stdout


@pytest.mark.extra
def test_the_wheel_carries_py_typed_the_licence_and_the_extras(tmp_path):
    # Built from a copy: setuptools writes its build/ folder beside the sources.
    source = tmp_path / "source"
    shutil.copytree(PACKAGE, source, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__", ".mypy_cache", "tests", "examples"))
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--disable-pip-version-check",
         str(source), "-w", str(tmp_path)],
        capture_output=True, text=True, timeout=600)
    if done.returncode != 0 and "satisfies the requirement setuptools" in done.stderr:
        pytest.skip("NOT RUN: pip could not fetch setuptools>=77 to build the wheel")
    assert done.returncode == 0, done.stderr[-4000:]
    wheels = list(tmp_path.glob("crucible_client-*.whl"))
    assert len(wheels) == 1
    with zipfile.ZipFile(wheels[0]) as wheel:
        names = set(wheel.namelist())
        metadata = next(wheel.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    for module in ("crucible_client/py.typed", "crucible_client/trl_env.py",
                   "crucible_client/verifiers_env.py", "crucible_client/openenv_env.py",
                   "crucible_kernels/__init__.py", "crucible_kernels/py.typed"):
        assert module in names
    assert "License-Expression: Apache-2.0" in metadata
    assert "Classifier: Typing :: Typed" in metadata
    assert "Provides-Extra: trainers" in metadata
    assert 'Requires-Dist: trl>=1.0; extra == "trainers"' in metadata
    # The base install stays light: only the two wire dependencies are unconditional.
    required = [line for line in metadata.splitlines()
                if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert required == ["Requires-Dist: pyzmq>=22", "Requires-Dist: msgpack>=1.0"]


def test_importing_the_client_and_its_trainer_hooks_loads_no_trainer_library():
    code = ("import sys, crucible_client, crucible_client.adapters, crucible_client.trl_env, "
            "crucible_client.prompts; print(sorted(m for m in ('trl', 'transformers', 'torch', "
            "'verifiers', 'openenv', 'gymnasium', 'datasets') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={"PYTHONPATH": str(PACKAGE / "src")})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
