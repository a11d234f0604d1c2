"""ssm/fused_recurrent_gated_delta_rule's parity anchor: FLA's fused_recurrent_gated_delta_rule
(Triton), the production kernel vLLM's gated DeltaNet decode runs.

Signature of the calls: tasks/llm/rms_norm/parity.py; kernel anchors:
tasks/llm/paged_decode_attention/parity.py. FLA 0.6.0 has no state indices: `prepare` gathers
the named state lines into its [num_seqs, num_v_heads, K, V] initial state (untimed); the call
writes a fresh final state of the same size (the bytes of vLLM's in-place update).
"""


def prepare(torch, t, s, sym):
    lines = t["ssm_state_indices"].long()
    t["_h0"] = t["initial_state"][lines].contiguous()


def check(torch, t, s):
    """The step in fp32 on the prepared state: the output FLA's must match."""
    heads_v, heads_k = t["v"].shape[1], t["q"].shape[1]
    q = t["q"].float().repeat_interleave(heads_v // heads_k, dim=1)
    k = t["k"].float().repeat_interleave(heads_v // heads_k, dim=1)
    if int(s.get("use_qk_l2norm_in_kernel", 1)):
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    q = q * float(s["scale"])
    h = t["_h0"] * torch.exp(t["g"])[..., None, None]
    u = t["beta"].float()[..., None] * (t["v"].float() - torch.einsum("nhkv,nhk->nhv", h, k))
    h = h + k[..., :, None] * u[..., None, :]
    return torch.einsum("nhkv,nhk->nhv", h, q)


def fla_fused_recurrent(torch, t, s, sym):
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule
    o, _ = fused_recurrent_gated_delta_rule(
        t["q"][:, None], t["k"][:, None], t["v"][:, None], g=t["g"][:, None],
        beta=t["beta"][:, None], scale=float(s["scale"]), initial_state=t["_h0"],
        output_final_state=True,
        use_qk_l2norm_in_kernel=bool(int(s.get("use_qk_l2norm_in_kernel", 1))))
    return o[:, 0]
