"""mamba_ssm's Triton ops for the parity anchors of the ssm tasks, without its CUDA extension.

mamba_ssm is carried as the pure-Python wheel built by bench/gpu/fetch_wheels.sh (from the sdist
with MAMBA_SKIP_CUDA_BUILD=TRUE) and unzipped onto PYTHONPATH. Its package __init__ imports the
selective-scan CUDA extension, which that wheel lacks, so the Triton modules are imported under a
bare package object: they import only torch, triton, einops and their siblings. The anchors
import this module when they run (bench/gpu is on sys.path for the GPU harnesses there).
"""
import importlib
import importlib.util
import sys
import types


def triton_op(module, name):
    """mamba_ssm.ops.triton.<module>.<name>, e.g. ("ssd_chunk_scan", "_chunk_scan_fwd")."""
    if "mamba_ssm" not in sys.modules:
        spec = importlib.util.find_spec("mamba_ssm")
        if spec is None or not spec.submodule_search_locations:
            raise ModuleNotFoundError("mamba_ssm is not on the path (unzip its wheel onto "
                                      "PYTHONPATH)", name="mamba_ssm")
        package = types.ModuleType("mamba_ssm")
        package.__path__ = list(spec.submodule_search_locations)
        sys.modules["mamba_ssm"] = package
    return getattr(importlib.import_module(f"mamba_ssm.ops.triton.{module}"), name)
