"""llm/silu_and_mul's parity anchor: vLLM silu_and_mul as a PyTorch composite.

Signature and contract: tasks/llm/rms_norm/parity.py.
"""


def silu_and_mul(torch, t, s, sym):
    x = t["input"].reshape(t["input"].shape[0], 2, -1)  # [tokens, 2, d]: gate half, then up
    t["out"].copy_(torch.nn.functional.silu(x[:, 0].float()).to(x.dtype) * x[:, 1])


def check(torch, t, s):
    """silu(gate) * up in fp32: what a library kernel's output is held to before it is timed."""
    x = t["input"].reshape(t["input"].shape[0], 2, -1).float()
    return torch.nn.functional.silu(x[:, 0]) * x[:, 1]


def flashinfer_silu_and_mul(torch, t, s, sym):
    # FlashInfer's fused SiLU-and-mul kernel (gate half first, as vLLM's op).
    import flashinfer  # carried to the GPU machine only; the harness names it when absent
    # It takes vLLM's 2-D [tokens, 2 * d] rows: the task's [tokens, 2, d] viewed so, no copy.
    rows = t["input"].view(t["input"].shape[0], -1)
    return flashinfer.activation.silu_and_mul(rows, out=t["out"])
