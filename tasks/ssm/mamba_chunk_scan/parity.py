"""ssm/mamba_chunk_scan's parity anchors: mamba_ssm's _chunk_scan_fwd (the Triton kernel of
mamba_chunk_scan_combined's last stage) and the op as a PyTorch composite.

Signature of the calls: tasks/llm/rms_norm/parity.py; kernel anchors:
tasks/llm/paged_decode_attention/parity.py. mamba_ssm's Triton modules come through
bench/gpu/mamba_ssm_triton.py (the carried wheel has no CUDA extension).
"""


def _chunked(torch, t):
    """The op chunk by chunk in fp32: the decayed weights [b, nc, h, Q, Q] and the two products."""
    cb, x, dt, da = t["cb"], t["x"], t["dt"], t["dA_cumsum"]
    c_in, states, d = t["C"], t["states"], t["D"]
    batch, seqlen, heads, hdim = x.shape
    _, nchunks, groups, chunk, _ = cb.shape
    pad = nchunks * chunk - seqlen
    xc = torch.nn.functional.pad(x.float(), (0, 0, 0, 0, 0, pad))
    xc = xc.view(batch, nchunks, chunk, heads, hdim).permute(0, 1, 3, 2, 4)      # b c h Q p
    cc = torch.nn.functional.pad(c_in.float(), (0, 0, 0, 0, 0, pad))
    cc = cc.view(batch, nchunks, chunk, groups, -1).permute(0, 1, 3, 2, 4)
    cc = cc.repeat_interleave(heads // groups, dim=2)                             # b c h Q n
    da_c = da.permute(0, 2, 1, 3)                                                 # b c h Q
    dt_c = dt.permute(0, 2, 1, 3)
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=x.device).tril()
    diff = (da_c[..., :, None] - da_c[..., None, :]).masked_fill(~causal, float("-inf"))
    weights = cb.repeat_interleave(heads // groups, dim=2) * torch.exp(diff) * dt_c[..., None, :]
    read = (cc @ states.float().transpose(-1, -2)) * torch.exp(da_c)[..., None]   # b c h Q p
    return weights, xc, read, d, (batch, seqlen, heads, hdim, nchunks, chunk)


def _finish(torch, mix, read, xc, d, dims):
    batch, seqlen, heads, hdim, nchunks, chunk = dims
    y = mix + read + d[None, None, :, None, None] * xc
    return y.permute(0, 1, 3, 2, 4).reshape(batch, nchunks * chunk, heads, hdim)[:, :seqlen]


def check(torch, t, s):
    """The op in fp32 with the decayed weights rounded to bf16 (as mamba_ssm's kernel rounds
    them): the output mamba_ssm's must match (untimed)."""
    weights, xc, read, d, dims = _chunked(torch, t)
    mix = weights.to(torch.bfloat16).float() @ xc
    return _finish(torch, mix, read, xc, d, dims)


def mamba_ssm_chunk_scan(torch, t, s, sym):
    from mamba_ssm_triton import triton_op  # noqa: PLC0415 (bench/gpu, GPU harnesses only)
    chunk_scan_fwd = triton_op("ssd_chunk_scan", "_chunk_scan_fwd")
    out, _ = chunk_scan_fwd(t["cb"], t["x"], t["dt"], t["dA_cumsum"], t["C"], t["states"],
                            D=t["D"])
    return out


def chunk_scan_composite(torch, t, s, sym):
    weights, xc, read, d, dims = _chunked(torch, t)
    t["out"].copy_(_finish(torch, weights @ xc, read, xc, d, dims).to(t["out"].dtype))
