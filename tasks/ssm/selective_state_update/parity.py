"""ssm/selective_state_update's parity anchor: mamba_ssm selective_state_update (Mamba-2 heads,
dt_softplus, state_batch_indices, no z) as a PyTorch composite.

Signature of the calls: tasks/llm/rms_norm/parity.py. The Triton kernels of mamba_ssm and vLLM
are not installable on the GPU machine, so the anchor is the op in PyTorch, eager and under
torch.compile: the named fp32 state lines gathered, updated, read out and scattered back.
"""


def selective_state_update(torch, t, s, sym):
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
    t["out"].copy_(((rows * c_heads[:, :, None, :]).sum(-1) + t["D"][:, None] * x).to(
        t["out"].dtype))
    state[lines] = rows
