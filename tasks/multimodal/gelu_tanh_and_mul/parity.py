"""multimodal/gelu_tanh_and_mul's parity anchors: vLLM gelu_tanh_and_mul as a PyTorch composite,
and FlashInfer's fused gelu_tanh_and_mul kernel.

Signature and contract: tasks/llm/rms_norm/parity.py; `check` and a kernel anchor's return:
tasks/llm/silu_and_mul/parity.py.
"""


def gelu_tanh_and_mul(torch, t, s, sym):
    x = t["input"].reshape(t["input"].shape[0], 2, -1)  # [tokens, 2, d]: gate half, then up
    t["out"].copy_(torch.nn.functional.gelu(x[:, 0], approximate="tanh") * x[:, 1])


def check(torch, t, s):
    """gelu_tanh(gate) * up in float64: what a library kernel's output is held to."""
    x = t["input"].reshape(t["input"].shape[0], 2, -1).double()
    return torch.nn.functional.gelu(x[:, 0], approximate="tanh") * x[:, 1]


def flashinfer_gelu_tanh_and_mul(torch, t, s, sym):
    # FlashInfer's fused GeLU(tanh)-and-mul kernel (gate half first, as vLLM's op), on the task's
    # [tokens, 2, d] input viewed as vLLM's [tokens, 2 * d] rows (no copy).
    import flashinfer  # carried to the GPU machine only; the harness names it when absent

    rows = t["input"].view(t["input"].shape[0], -1)
    return flashinfer.activation.gelu_tanh_and_mul(rows, out=t["out"])
