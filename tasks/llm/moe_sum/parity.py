"""llm/moe_sum's parity anchor: vLLM moe_sum as a PyTorch composite.

Signature and contract: tasks/llm/rms_norm/parity.py.
"""


def moe_sum(torch, t, s, sym):
    torch.sum(t["input"], dim=1, out=t["output"])
