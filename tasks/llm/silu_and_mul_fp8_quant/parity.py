"""llm/silu_and_mul_fp8_quant's parity anchor: vLLM silu_and_mul_quant (silu_and_mul followed by
static per-tensor fp8 quantisation) as a PyTorch composite.

Signature and contract: tasks/llm/rms_norm/parity.py.
"""


def silu_and_mul_quant(torch, t, s, sym):
    x = t["input"].reshape(t["input"].shape[0], 2, -1)  # [tokens, 2, d]: gate half, then up
    y = torch.nn.functional.silu(x[:, 0].float()).to(x.dtype) * x[:, 1]
    q = (y.float() * (1.0 / t["scale"])).clamp(-448.0, 448.0)
    t["result"].copy_(q.to(torch.float8_e4m3fn))
