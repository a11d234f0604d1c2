"""ssm/mamba_chunk_scan's parity anchors: mamba_ssm's _chunk_scan_fwd (the Triton kernel of
mamba_chunk_scan_combined's last stage) and the op as a PyTorch composite.

Signature of the calls: tasks/llm/rms_norm/parity.py; kernel anchors:
tasks/llm/paged_decode_attention/parity.py. mamba_ssm is carried as the pure-Python wheel
(mamba_ssm-2.3.2.post1-py3-none-any.whl, built from the sdist with MAMBA_SKIP_CUDA_BUILD=TRUE),
unzipped onto PYTHONPATH. Its package __init__ imports the selective-scan CUDA extension, which
that wheel lacks, so the Triton modules are imported under a bare package object (the modules
themselves import only torch, triton, einops and their siblings).
"""


def _mamba_ssm_chunk_scan_fwd():
    import importlib.util
    import sys
    import types
    if "mamba_ssm" not in sys.modules:
        spec = importlib.util.find_spec("mamba_ssm")
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("mamba_ssm is not on the path (unzip its wheel onto PYTHONPATH)")
        package = types.ModuleType("mamba_ssm")
        package.__path__ = list(spec.submodule_search_locations)
        sys.modules["mamba_ssm"] = package
    from mamba_ssm.ops.triton.ssd_chunk_scan import _chunk_scan_fwd
    return _chunk_scan_fwd


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
    chunk_scan_fwd = _mamba_ssm_chunk_scan_fwd()
    out, _ = chunk_scan_fwd(t["cb"], t["x"], t["dt"], t["dA_cumsum"], t["C"], t["states"],
                            D=t["D"])
    return out


def chunk_scan_composite(torch, t, s, sym):
    weights, xc, read, d, dims = _chunked(torch, t)
    t["out"].copy_(_finish(torch, weights @ xc, read, xc, d, dims).to(t["out"].dtype))
