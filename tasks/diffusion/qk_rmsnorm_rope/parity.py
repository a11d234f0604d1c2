"""diffusion/qk_rmsnorm_rope's parity anchor: diffusers' RMSNorm of query and key and
apply_rotary_emb (interleaved pairs, use_real_unbind_dim=-1) as a PyTorch composite.

Signature and contract: tasks/llm/rms_norm/parity.py. The table arrives as the task's
[seq_len, head_dim] cosines-then-sines; diffusers' repeat-interleaved cos and sin tensors are
formed from it inside the call (a few hundred KB, so the timing barely moves). Everything is
written inside the one function: torch.compile cannot trace calls to other functions of a
module loaded from a file path.
"""


def qk_rmsnorm_rope(torch, t, s, sym):
    half = sym["head_dim"] // 2
    table = t["cos_sin"]
    cos = table[:, :half].repeat_interleave(2, dim=-1)[None, :, None, :]
    sin = table[:, half:].repeat_interleave(2, dim=-1)[None, :, None, :]
    for name, weight in (("query", t["q_weight"]), ("key", t["k_weight"])):
        x = t[name]
        # diffusers RMSNorm: fp32 mean square, normalised value rounded to the weight's dtype.
        variance = x.float().pow(2).mean(-1, keepdim=True)
        normed = (x * torch.rsqrt(variance + s["epsilon"])).to(weight.dtype) * weight
        # diffusers apply_rotary_emb, interleaved pairs: (a, b) -> (a c - b s, b c + a s).
        real, imag = normed.reshape(*normed.shape[:-1], -1, 2).unbind(-1)
        rotated = torch.stack([-imag, real], dim=-1).flatten(3)
        x.copy_((normed.float() * cos + rotated.float() * sin).to(x.dtype))
