"""llm/fused_add_rms_norm_static_fp8_quant's parity anchor: vLLM's fused residual add, RMSNorm
and static per-tensor fp8 quantisation as a PyTorch composite.

Signature and contract: tasks/llm/rms_norm/parity.py.
"""


def fused_add_rms_norm_quant(torch, t, s, sym):
    r = (t["input"].float() + t["residual"].float()).to(t["residual"].dtype)
    t["residual"].copy_(r)
    x = r.float()
    y = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + s["epsilon"])).to(r.dtype) * t["weight"]
    q = (y.float() * (1.0 / t["scale"])).clamp(-448.0, 448.0)
    t["result"].copy_(q.to(torch.float8_e4m3fn))
