"""ssm/selective_state_update's parity anchors: mamba_ssm's selective_state_update (the Triton
kernel vLLM's Mamba-2 layers call in decode, Mamba-2 heads as vLLM passes them: dt, dt_bias, A
and D per head broadcast over the head's channels with stride 0, dt_softplus,
state_batch_indices, no z), FlashInfer's CUDA selective_state_update on the same views, and the
op as a PyTorch composite.

Signature of the calls: tasks/llm/rms_norm/parity.py; kernel anchors:
tasks/llm/paged_decode_attention/parity.py. mamba_ssm's Triton modules come through
bench/gpu/mamba_ssm_triton.py (the carried wheel has no CUDA extension).
"""


def _update(torch, t):
    """The named fp32 state lines updated (not written back) and the output, in fp32."""
    state = t["state"]
    lines = t["state_batch_indices"].long()
    heads, groups = t["A"].shape[0], t["B"].shape[1]
    x = t["x"].float()                                                   # [b, h, p]
    dt = torch.nn.functional.softplus(t["dt"].float() + t["dt_bias"])   # [b, h], threshold 20
    decay = torch.exp(dt * t["A"])                                       # [b, h]
    b_heads = t["B"].float().repeat_interleave(heads // groups, dim=1)  # [b, h, n]
    c_heads = t["C"].float().repeat_interleave(heads // groups, dim=1)
    rows = state[lines] * decay[..., None, None] + \
        (dt[..., None] * x)[..., None] * b_heads[:, :, None, :]
    return rows, (rows * c_heads[:, :, None, :]).sum(-1) + t["D"][:, None] * x


def check(torch, t, s):
    """The output mamba_ssm's must match (untimed; the state is left as it was)."""
    return _update(torch, t)[1]


def selective_state_update(torch, t, s, sym):
    rows, out = _update(torch, t)
    t["out"].copy_(out.to(t["out"].dtype))
    t["state"][t["state_batch_indices"].long()] = rows


def mamba_ssm_selective_state_update(torch, t, s, sym):
    from mamba_ssm_triton import triton_op  # noqa: PLC0415 (bench/gpu, GPU harnesses only)
    update = triton_op("selective_state_update", "selective_state_update")
    batch, heads, dim = t["x"].shape
    dstate = t["B"].shape[2]
    per_channel = (heads, dim)
    return update(t["state"], t["x"], t["dt"][..., None].expand(batch, heads, dim),
                  t["A"][:, None, None].expand(heads, dim, dstate), t["B"], t["C"],
                  D=t["D"][:, None].expand(per_channel), z=None,
                  dt_bias=t["dt_bias"][:, None].expand(per_channel), dt_softplus=True,
                  state_batch_indices=t["state_batch_indices"])


def prepare(torch, t, s, sym):
    """FlashInfer's kernel takes dt, D and dt_bias in one dtype: dt is given in the fp32 of D and
    dt_bias, converted once (untimed; every bf16 value is exact in fp32)."""
    t["_dt_f32"] = t["dt"].float()


def flashinfer_selective_state_update(torch, t, s, sym):
    # flashinfer.mamba.selective_state_update (its CUDA kernel, JIT-built for the case's head
    # size and state size) on the same broadcast views as mamba_ssm's, dt in fp32.
    from flashinfer.mamba import selective_state_update  # carried to the GPU machine only

    batch, heads, dim = t["x"].shape
    dstate = t["B"].shape[2]
    per_channel = (heads, dim)
    return selective_state_update(
        t["state"], t["x"], t["_dt_f32"][..., None].expand(batch, heads, dim),
        t["A"][:, None, None].expand(heads, dim, dstate), t["B"], t["C"],
        D=t["D"][:, None].expand(per_channel), z=None,
        dt_bias=t["dt_bias"][:, None].expand(per_channel), dt_softplus=True,
        state_batch_indices=t["state_batch_indices"])
