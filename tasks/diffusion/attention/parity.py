"""diffusion/attention's parity anchors: the attention kernels a diffusion pipeline runs, through
torch's scaled_dot_product_attention with one backend forced each (FlashAttention-2, cuDNN,
memory-efficient), and FlashInfer's single-sequence prefill where FlashInfer is carried.

Signature of the calls: tasks/llm/rms_norm/parity.py. These are "kernel" anchors: named library
kernels, each timed eagerly (there is nothing for torch.compile to fuse), the best kept. Each
returns its output ([batch, seq_len, num_heads, 128], a view where the library writes another
layout: no copy is timed), held to `check` before it is timed.

The task's tensors are [B, S, H, D]; torch's SDPA takes [B, H, S, D], and diffusers' native
attention backend hands it the transposed views of the same memory (no copy), as done here.
"""


def _scale(t, s):
    return float(s.get("scale", 1.0 / (t["query"].shape[-1] ** 0.5)))


def check(torch, t, s):
    """Exact attention of the inputs (float64 on the GPU, float32 on CPU), in the task's
    layout, computed 512 query rows at a time so that 32k-token cases fit in memory."""
    dtype = torch.float64 if t["query"].is_cuda else torch.float32
    q, k, v = (t[name].to(dtype).transpose(1, 2) for name in ("query", "key", "value"))
    scale = _scale(t, s)
    out = torch.empty_like(q)
    rows = q.shape[2]
    for first in range(0, rows, 512):
        scores = torch.matmul(q[:, :, first:first + 512], k.transpose(-1, -2)) * scale
        out[:, :, first:first + 512] = torch.matmul(torch.softmax(scores, dim=-1), v)
    return out.transpose(1, 2).float()


def _sdpa(torch, t, s, backend):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q, k, v = (t[name].transpose(1, 2) for name in ("query", "key", "value"))
    with sdpa_kernel(getattr(SDPBackend, backend)):
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=_scale(t, s))
    return out.transpose(1, 2)


def sdpa_flash(torch, t, s, sym):
    # PyTorch's FlashAttention-2 build (what diffusers' default backend gets on most GPUs).
    return _sdpa(torch, t, s, "FLASH_ATTENTION")


def sdpa_cudnn(torch, t, s, sym):
    # cuDNN's fused attention (Hopper: wgmma, TMA), PyTorch's default on H100-class GPUs where
    # it is enabled.
    return _sdpa(torch, t, s, "CUDNN_ATTENTION")


def sdpa_efficient(torch, t, s, sym):
    # The memory-efficient (xFormers CUTLASS) kernel.
    return _sdpa(torch, t, s, "EFFICIENT_ATTENTION")


def flashinfer_prefill(torch, t, s, sym):
    # FlashInfer's single-sequence prefill, non-causal, on [S, H, D] (its NHD layout) per
    # sample (its own choice of backend: the FlashAttention-3 templates on Hopper). Batch 2
    # stacks the two samples' outputs: one copy of the output is timed there.
    import flashinfer  # carried to the GPU machine only; the harness names it when absent
    outs = [
        flashinfer.single_prefill_with_kv_cache(
            t["query"][b], t["key"][b], t["value"][b], causal=False, kv_layout="NHD",
            sm_scale=_scale(t, s))
        for b in range(t["query"].shape[0])
    ]
    return outs[0][None] if len(outs) == 1 else torch.stack(outs)
