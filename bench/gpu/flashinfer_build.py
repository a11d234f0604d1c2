#!/usr/bin/env python3
"""Builds the FlashInfer JIT modules the parity anchors call, one process each so that they
compile side by side, by calling each op once at a small Llama-3-8B shape (bf16, 32 query and 8
key-value heads of 128, pages of 16): norm (rmsnorm and fused_add_rmsnorm; the module also holds
layernorm and fused_add_rmsnorm_quant), silu_and_mul, gelu_tanh_and_mul, rope,
paged decode on CUDA cores and on tensor cores, causal paged prefill, non-causal single-sequence
prefill (diffusion/attention), the paged-cache append (llm/reshape_and_cache_flash), the
DeepSeek-V3 router (llm/grouped_topk), Mamba's selective_state_update at the visible cases'
configuration (ssm/selective_state_update), TensorRT-LLM's XQA decode for query groups of 4 and
7 (llm/paged_decode_attention). The modules land in
$FLASHINFER_WORKSPACE_BASE, where the parity harness then finds them (a module still building
when the harness asks for it is waited for: FlashInfer locks its build). Run on the GPU machine
with the carried package on PYTHONPATH (device_run.sh does both).

    python3 bench/gpu/flashinfer_build.py            all modules, in parallel
    python3 bench/gpu/flashinfer_build.py decode     one
"""
import subprocess
import sys
import time

MODULES = ("norm", "silu_and_mul", "gelu_tanh_and_mul", "rope", "decode", "decode_tensor_cores",
           "prefill", "single_prefill", "page", "dsv3_routing", "selective_state_update",
           "xqa_group_4", "xqa_group_7")


def build(name):
    import torch
    import flashinfer
    dev = "cuda"
    bf16 = torch.bfloat16
    if name == "norm":
        x = torch.randn(4, 4096, device=dev, dtype=bf16)
        w = torch.ones(4096, device=dev, dtype=bf16)
        flashinfer.norm.rmsnorm(x, w)
        flashinfer.norm.fused_add_rmsnorm(x, torch.randn_like(x), w)
    elif name == "silu_and_mul":
        flashinfer.activation.silu_and_mul(torch.randn(4, 2 * 14336, device=dev, dtype=bf16))
    elif name == "gelu_tanh_and_mul":
        flashinfer.activation.gelu_tanh_and_mul(torch.randn(4, 2 * 4304, device=dev, dtype=bf16))
    elif name == "rope":
        flashinfer.rope.apply_rope_with_cos_sin_cache_inplace(
            torch.arange(4, device=dev), torch.randn(4, 32 * 128, device=dev, dtype=bf16),
            torch.randn(4, 8 * 128, device=dev, dtype=bf16), 128,
            torch.randn(16, 128, device=dev), is_neox=True)
    elif name == "page":
        import flashinfer.page
        cache = torch.zeros(2, 4, 16, 8, 128, device=dev, dtype=bf16)
        rows = torch.randn(5, 8, 128, device=dev, dtype=bf16)
        flashinfer.page.append_paged_kv_cache(
            rows, rows, torch.zeros(5, device=dev, dtype=torch.int32),
            torch.arange(5, device=dev, dtype=torch.int32) * 7, (cache[0], cache[1]),
            torch.arange(4, device=dev, dtype=torch.int32),
            torch.tensor([0, 4], device=dev, dtype=torch.int32),
            torch.tensor([16], device=dev, dtype=torch.int32), kv_layout="NHD")
    elif name.startswith("xqa_group_"):
        # TensorRT-LLM's XQA decode, one module per query-head group: 4 (Llama-3, Mixtral) and
        # 7 (Qwen2.5-7B), bf16 with pages of 16 and head size 128, as the visible cases.
        from flashinfer.xqa import xqa  # flashinfer.xqa is the function re-exported

        group, seqs, pages = int(name.rsplit("_", 1)[1]), 2, 4
        kv = torch.randn(seqs * pages, 16, 2, 128, device=dev, dtype=bf16)
        q = torch.randn(seqs, 1, 2 * group, 128, device=dev, dtype=bf16)
        xqa(
            q, kv, kv, torch.arange(seqs * pages, device=dev, dtype=torch.int32).view(seqs, pages),
            torch.full((seqs, 1), 40, device=dev, dtype=torch.int32).view(torch.uint32),
            torch.empty_like(q), torch.zeros(64 << 20, dtype=torch.uint8, device=dev),
            torch.zeros(1 << 20, dtype=torch.uint32, device=dev), 2, 16)
    elif name == "selective_state_update":
        # The visible cases' configuration: fp32 state lines, bf16 x, B, C, fp32 dt, A, D and
        # dt_bias broadcast over head size 64, state size 128 (Mamba-2, Codestral).
        from flashinfer.mamba import selective_state_update
        heads, dim, dstate, seqs = 8, 64, 128, 2
        f32 = torch.float32
        selective_state_update(
            torch.zeros(4, heads, dim, dstate, device=dev, dtype=f32),
            torch.randn(seqs, heads, dim, device=dev, dtype=bf16),
            torch.rand(seqs, heads, device=dev, dtype=f32)[..., None].expand(seqs, heads, dim),
            # A broadcast over (dim, dstate), as the kernel requires (strides 1, 0, 0): negated
            # before the expand, which the minus would otherwise materialise.
            (-torch.rand(heads, device=dev, dtype=f32))[:, None, None].expand(heads, dim, dstate),
            torch.randn(seqs, 1, dstate, device=dev, dtype=bf16),
            torch.randn(seqs, 1, dstate, device=dev, dtype=bf16),
            D=torch.ones(heads, device=dev, dtype=f32)[:, None].expand(heads, dim),
            dt_bias=torch.zeros(heads, device=dev, dtype=f32)[:, None].expand(heads, dim),
            dt_softplus=True,
            state_batch_indices=torch.arange(seqs, device=dev, dtype=torch.int32))
    elif name == "dsv3_routing":
        from flashinfer.fused_moe import fused_topk_deepseek
        weights = torch.empty(4, 8, device=dev)
        ids = torch.empty(4, 8, device=dev, dtype=torch.int32)
        fused_topk_deepseek(torch.randn(4, 256, device=dev), torch.zeros(256, device=dev), 8, 4,
                            8, 2.5, weights, ids)
    elif name == "single_prefill":
        q = torch.randn(256, 24, 128, device=dev, dtype=bf16)
        flashinfer.single_prefill_with_kv_cache(q, q, q, causal=False, kv_layout="NHD")
    else:
        seqs, pages_each, page = 2, 4, 16
        kv = torch.randn(seqs * pages_each, page, 8, 128, device=dev, dtype=bf16)
        indptr = torch.arange(seqs + 1, device=dev, dtype=torch.int32) * pages_each
        indices = torch.arange(seqs * pages_each, device=dev, dtype=torch.int32)
        last = torch.full((seqs,), page, device=dev, dtype=torch.int32)
        workspace = torch.empty(64 << 20, dtype=torch.uint8, device=dev)
        if name == "prefill":
            rows = 8
            wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, "NHD")
            wrapper.plan(torch.arange(seqs + 1, device=dev, dtype=torch.int32) * rows, indptr,
                         indices, last, 32, 8, 128, page, causal=True, q_data_type=bf16,
                         kv_data_type=bf16)
        else:
            rows = 1
            wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
                workspace, "NHD", use_tensor_cores=name == "decode_tensor_cores")
            wrapper.plan(indptr, indices, last, 32, 8, 128, page, q_data_type=bf16,
                         kv_data_type=bf16)
        wrapper.run(torch.randn(seqs * rows, 32, 128, device=dev, dtype=bf16), (kv, kv))
    torch.cuda.synchronize()


def main():
    names = sys.argv[1:]
    if len(names) == 1:
        start = time.time()
        build(names[0])
        print(f"{names[0]}: built and ran in {time.time() - start:.1f} s", flush=True)
        return
    start = time.time()
    jobs = {name: subprocess.Popen([sys.executable, __file__, name]) for name in names or MODULES}
    failed = [name for name, job in jobs.items() if job.wait() != 0]
    print(f"all modules in {time.time() - start:.1f} s; failed: {failed or 'none'}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
