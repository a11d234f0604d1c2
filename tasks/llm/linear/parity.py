"""llm/linear's parity anchor: the bias-free nn.Linear matrix product through torch.mm (cuBLAS).

Signature and contract: tasks/llm/rms_norm/parity.py.
"""


def mm(torch, t, s, sym):
    # F.linear without a bias is this matrix product; PyTorch hands it to cuBLAS(Lt).
    torch.mm(t["input"], t["weight"].t(), out=t["out"])
