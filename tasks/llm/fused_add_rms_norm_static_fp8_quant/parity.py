"""llm/fused_add_rms_norm_static_fp8_quant's parity anchors: vLLM's fused residual add, RMSNorm
and static per-tensor fp8 quantisation as a PyTorch composite, and FlashInfer's
fused_add_rmsnorm_quant kernel.

Signature and contract: tasks/llm/rms_norm/parity.py; `check` and a kernel anchor's return:
tasks/llm/paged_decode_attention/parity.py (a tuple for the two outputs: docs/tasks.md).
"""


def fused_add_rms_norm_quant(torch, t, s, sym):
    r = (t["input"].float() + t["residual"].float()).to(t["residual"].dtype)
    t["residual"].copy_(r)
    x = r.float()
    y = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + s["epsilon"])).to(r.dtype) * t["weight"]
    q = (y.float() * (1.0 / t["scale"])).clamp(-448.0, 448.0)
    t["result"].copy_(q.to(torch.float8_e4m3fn))


def check(torch, t, s):
    """(result, residual) after the call: the bf16-rounded sum, its RMSNorm times the weight in
    float64, divided by the scale and rounded once to e4m3 (the task's definition)."""
    r = (t["input"].float() + t["residual"].float()).to(t["residual"].dtype)
    x = r.double()
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + s["epsilon"]) * t["weight"].double()
    q = (y / t["scale"].double()).clamp(-448.0, 448.0).float().to(torch.float8_e4m3fn)
    return q.float(), r.float()


def flashinfer_fused_add_rmsnorm_quant(torch, t, s, sym):
    # flashinfer.norm.fused_add_rmsnorm_quant(out, input, residual, weight, scale, eps): residual
    # += input, then out = e4m3(RMSNorm(residual) * weight / scale); input is only read.
    import flashinfer.norm  # carried to the GPU machine only; the harness names it when absent

    flashinfer.norm.fused_add_rmsnorm_quant(t["result"], t["input"], t["residual"], t["weight"],
                                            t["scale"], s["epsilon"])
    return t["result"], t["residual"]
