"""llm/per_token_group_quant_fp8's parity anchor: vLLM's per-token-group (128) fp8 quantisation
as a PyTorch composite.

Signature and contract: tasks/llm/rms_norm/parity.py.
"""


def per_token_group_quant(torch, t, s, sym):
    x = t["input"].float()  # [tokens, groups, 128]
    amax = x.abs().amax(-1).clamp(min=s["eps"])
    scale = amax / 448.0  # [tokens, groups]
    t["out"].copy_((x / scale.unsqueeze(-1)).clamp(-448, 448).to(torch.float8_e4m3fn))
    if s["column_major_scales"]:
        t["scale"].view(-1).copy_(scale.t().reshape(-1))
    else:
        t["scale"].copy_(scale)
