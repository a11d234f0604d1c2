"""ssm/chunk_gated_delta_rule's parity anchor: FLA's chunk_gated_delta_rule (Triton, chunk size
64), the production kernels vLLM's gated DeltaNet prefill runs.

Signature of the calls: tasks/llm/rms_norm/parity.py; kernel anchors:
tasks/llm/paged_decode_attention/parity.py. FLA takes the packed batch as [1, num_tokens, ...]
with int64 cu_seqlens (converted once in `prepare`, untimed); it returns the output and writes
fresh final states.
"""


def prepare(torch, t, s, sym):
    t["_cu"] = t["cu_seqlens"].long()


def check(torch, t, s):
    """The recurrence token by token in fp32: the output FLA's must match (slow, untimed)."""
    heads_v, heads_k = t["v"].shape[1], t["q"].shape[1]
    q = t["q"].float().repeat_interleave(heads_v // heads_k, dim=1)
    k = t["k"].float().repeat_interleave(heads_v // heads_k, dim=1)
    q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) * float(s["scale"])
    k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    v, g, beta = t["v"].float(), t["g"], t["beta"].float()
    out = torch.empty_like(v)
    cu = t["_cu"].tolist()
    for n in range(len(cu) - 1):
        state = t["initial_state"][n].clone()
        for i in range(cu[n], cu[n + 1]):
            state = state * torch.exp(g[i])[:, None, None]
            u = beta[i][:, None] * (v[i] - torch.einsum("hkv,hk->hv", state, k[i]))
            state = state + k[i][:, :, None] * u[:, None, :]
            out[i] = torch.einsum("hkv,hk->hv", state, q[i])
    return out


def fla_chunk(torch, t, s, sym):
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    o, _ = chunk_gated_delta_rule(
        t["q"][None], t["k"][None], t["v"][None], t["g"][None], t["beta"][None],
        scale=float(s["scale"]), initial_state=t["initial_state"], output_final_state=True,
        cu_seqlens=t["_cu"], use_qk_l2norm_in_kernel=True)
    return o[0]
