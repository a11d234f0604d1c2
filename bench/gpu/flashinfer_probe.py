#!/usr/bin/env python3
"""Tries the FlashInfer carry of bench/gpu/flashinfer_carry.sh on the GPU machine: unpacks
.whl/flashinfer.tgz to /tmp, imports it, and calls each JIT module the parity anchors would use
at one Llama-3-8B shape, printing the first call's time (the JIT build) and then the mean of 20
calls by CUDA events with a warm L2 (an indication, not a parity figure: the parity benchmark
times with CUPTI after an L2 flush).

    python3 bench/gpu/flashinfer_probe.py      (carry [".whl"])
"""
import os, sys, time, tarfile
t0 = time.time()
os.makedirs("/tmp/fi", exist_ok=True)
tarfile.open(".whl/flashinfer.tgz").extractall("/tmp/fi")
sys.path.insert(0, "/tmp/fi")
os.environ.setdefault("FLASHINFER_WORKSPACE_BASE", "/tmp/fiws")
print(f"unpacked {time.time()-t0:.1f}s", flush=True)
import torch
t = time.time(); import flashinfer; print(f"import {time.time()-t:.1f}s version {flashinfer.__version__}", flush=True)
dev = "cuda"
def timed(name, fn):
    t = time.time()
    try:
        fn(); torch.cuda.synchronize(); first = time.time() - t
        s, e = torch.cuda.Event(True), torch.cuda.Event(True)
        s.record()
        for _ in range(20): fn()
        e.record(); torch.cuda.synchronize()
        print(f"{name}: first call {first:.1f}s, then {s.elapsed_time(e)/20*1e3:.1f} us (events, L2 warm)", flush=True)
    except Exception as ex:
        print(f"{name}: FAILED after {time.time()-t:.1f}s: {type(ex).__name__}: {str(ex)[:600]}", flush=True)
x = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16); w = torch.ones(4096, device=dev, dtype=torch.bfloat16)
timed("norm.rmsnorm 4096x4096", lambda: flashinfer.norm.rmsnorm(x, w))
r = torch.randn_like(x)
timed("norm.fused_add_rmsnorm 4096x4096", lambda: flashinfer.norm.fused_add_rmsnorm(x, r, w))
g = torch.randn(64, 2 * 14336, device=dev, dtype=torch.bfloat16)
timed("activation.silu_and_mul 64x14336", lambda: flashinfer.activation.silu_and_mul(g))
# paged decode: 64 seqs x 2048, 32 q / 8 kv heads of 128, pages of 16, NHD
B, L, P = 64, 2048, 16
pages = B * L // P
kv = torch.randn(pages, 2, P, 8, 128, device=dev, dtype=torch.bfloat16)
indptr = torch.arange(0, B + 1, device=dev, dtype=torch.int32) * (L // P)
indices = torch.randperm(pages, device=dev).int()
last = torch.full((B,), P, device=dev, dtype=torch.int32)
q = torch.randn(B, 32, 128, device=dev, dtype=torch.bfloat16)
ws = torch.empty(128 * 1024 * 1024, dtype=torch.uint8, device=dev)
def decode():
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD")
    wrapper.plan(indptr, indices, last, 32, 8, 128, P, data_type=torch.bfloat16, q_data_type=torch.bfloat16)
    global run_decode
    run_decode = lambda: wrapper.run(q, kv)
    run_decode()
timed("decode plan+run (first) / plan+run", decode)
if "run_decode" in globals(): timed("BatchDecodeWithPagedKVCacheWrapper.run 64x2048", run_decode)
logits = torch.randn(64, 128256, device=dev, dtype=torch.float32)
timed("sampling.top_k_top_p_sampling_from_logits 64x128256", lambda: flashinfer.sampling.top_k_top_p_sampling_from_logits(logits, 50, 0.9))
print(f"total {time.time()-t0:.1f}s", flush=True)
