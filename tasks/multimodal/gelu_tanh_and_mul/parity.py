"""multimodal/gelu_tanh_and_mul's parity anchor: vLLM gelu_tanh_and_mul as a PyTorch composite.

Signature and contract: tasks/llm/rms_norm/parity.py.
"""


def gelu_tanh_and_mul(torch, t, s, sym):
    x = t["input"].reshape(t["input"].shape[0], 2, -1)  # [tokens, 2, d]: gate half, then up
    t["out"].copy_(torch.nn.functional.gelu(x[:, 0], approximate="tanh") * x[:, 1])
