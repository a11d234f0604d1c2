"""llm/dynamic_per_token_scaled_fp8_quant's parity anchor: vLLM's per-token fp8 quantisation as
a PyTorch composite.

Signature and contract: tasks/llm/rms_norm/parity.py.
"""


def fp8_quant(torch, t, s, sym):
    x = t["input"].float()
    scale = (x.abs().amax(-1, keepdim=True) / 448.0).clamp(min=1.0 / (448.0 * 512.0))
    t["scale"].copy_(scale)
    t["out"].copy_((x / scale).clamp(-448, 448).to(torch.float8_e4m3fn))
