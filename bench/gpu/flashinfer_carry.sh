#!/usr/bin/env bash
# Packs the FlashInfer wheel for the GPU machine small enough to carry beside the tree (the
# device tool takes 64 MiB in all): flashinfer-python 0.7.2.post1 and apache-tvm-ffi 0.1.11
# from PyPI, unpacked, with the JIT sources of every module but the ones the parity anchors use
# removed (the wheel is 62 MB, 426 MB unpacked: data/csrc alone is 258 MB) and the
# experimental kernels' non-Python files dropped (flashinfer/__init__ imports the package).
# Writes .whl/flashinfer.tgz (about 26 MB); bench/gpu/flashinfer_probe.py unpacks and tries it.
#   bash bench/gpu/flashinfer_carry.sh        then carry [".whl"]
set -euo pipefail
out=${1:-.whl}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip download --quiet --no-deps flashinfer-python==0.7.2.post1 apache-tvm-ffi==0.1.11 \
  --python-version 3.12 --only-binary=:all: --platform manylinux2014_x86_64 \
  --platform manylinux_2_28_x86_64 -d "$work/wheels"
mkdir -p "$work/pkg"
for wheel in "$work"/wheels/*.whl; do python3 -m zipfile -e "$wheel" "$work/pkg"; done
csrc="$work/pkg/flashinfer/data/csrc"
# The JIT modules of norm, activation, rope, paged KV, decode and prefill attention, sampling
# (top-k/top-p and their renormalisation) and Mamba's selective_state_update keep their sources
# and the shared headers/templates; the DeepSeek-V3 router (fused_topk_deepseek) its kernel
# file, the headers beside it and the TensorRT-LLM utilities it links (nv_internal, 3.4 MB);
# TensorRT-LLM's XQA decode attention its folder (0.9 MB).
# With nvcc 13 and no GPU, the packed tree builds every module the parity anchors use for
# sm_90a (FLASHINFER_CUDA_ARCH_LIST=9.0a; 5 to 33 s each on two cores).
keep="$work/keep"
mkdir -p "$keep/fused_moe"
cp -r "$csrc/nv_internal" "$csrc/xqa" "$keep/"
cp -r "$csrc/fused_moe/noAuxTcKernels.cu" "$csrc/fused_moe/moeTopKFuncs.cuh" \
  "$csrc/fused_moe/cake_deepseek_fused_routing_launch.cuh" \
  "$csrc/fused_moe/cake_deepseek_fused_routing" "$keep/fused_moe/"
find "$csrc" -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +
find "$csrc" -maxdepth 1 -type f ! -regex '.*/\(norm\|activation\|rope\|page\|batch_decode\|batch_prefill\|single_decode\|single_prefill\|sampling\|renorm\|topk\|cub_topk\|selective_state_update\|flashinfer_[a-z_]*binding\|tvm_ffi\)[^/]*' \
  ! -name '*.h' ! -name '*.cuh' ! -name '*.jinja' -delete
cp -r "$keep"/* "$csrc/"
find "$work/pkg/flashinfer/experimental" -type f ! -name '*.py' -delete
mkdir -p "$out"
tar czf "$out/flashinfer.tgz" -C "$work/pkg" .
ls -l "$out/flashinfer.tgz"
