#!/usr/bin/env bash
# Puts into .whl/ (git-ignored) the pure-Python wheels of the production libraries that some
# parity anchors call, for carrying to the GPU machine, which has PyTorch and Triton but no
# network (bench/README.md, "On the GPU machine"):
#   FLA 0.6.0 (flash-linear-attention and fla-core): ssm/chunk_gated_delta_rule and
#     ssm/fused_recurrent_gated_delta_rule;
#   mamba_ssm 2.3.2.post1: ssm/mamba_chunk_scan and ssm/selective_state_update (through
#     bench/gpu/mamba_ssm_triton.py). Published as a source package only; built
#     without its CUDA extension (MAMBA_SKIP_CUDA_BUILD) it is its Triton ops in Python.
# With `client`: the Python client's two packages instead, pyzmq and msgpack, built for that
# machine's CPython 3.12 (bench/gpu/multi_gpu.py drives its servers through crucible_client.Pool).
# Usage: bench/gpu/fetch_wheels.sh [DEST] [client]   (default .whl)
set -euo pipefail
dest=${1:-.whl}
mkdir -p "$dest"
if [ "${2:-}" = client ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_26_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$dest" \
    pyzmq==27.3.0 msgpack==1.2.4
  ls -l "$dest"
  exit 0
fi
python3 -m pip download -q --no-deps --only-binary=:all: -d "$dest" \
  flash-linear-attention==0.6.0 fla-core==0.6.0
if ! ls "$dest"/mamba_ssm-2.3.2.post1-*.whl > /dev/null 2>&1; then
  python3 -m pip install -q wheel setuptools
  MAMBA_SKIP_CUDA_BUILD=TRUE MAMBA_FORCE_BUILD=TRUE python3 -m pip wheel -q --no-deps \
    --no-build-isolation -w "$dest" mamba-ssm==2.3.2.post1
fi
ls -l "$dest"
