"""llm/fused_add_rms_norm's parity anchor: vLLM fused_add_rms_norm as a PyTorch composite.

Signature and contract: tasks/llm/rms_norm/parity.py.
"""


def fused_add_rms_norm(torch, t, s, sym):
    r = (t["input"].float() + t["residual"].float()).to(t["residual"].dtype)
    t["residual"].copy_(r)
    x = r.float()
    t["input"].copy_((x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + s["epsilon"])).to(
        r.dtype) * t["weight"])
