"""diffusion/qk_rmsnorm_rope's parity anchor: diffusers' RMSNorm of query and key and
apply_rotary_emb (interleaved pairs, use_real_unbind_dim=-1) as a PyTorch composite.

Signature and contract: tasks/llm/rms_norm/parity.py. The table arrives as the task's
[seq_len, head_dim] cosines-then-sines; diffusers' repeat-interleaved cos and sin tensors are
formed from it inside the call (a few hundred KB, so the timing barely moves).
"""


def _rms_norm(torch, x, weight, eps):
    variance = x.float().pow(2).mean(-1, keepdim=True)
    return (x * torch.rsqrt(variance + eps)).to(weight.dtype) * weight


def _rotate(torch, x, cos, sin):
    real, imag = x.reshape(*x.shape[:-1], -1, 2).unbind(-1)
    rotated = torch.stack([-imag, real], dim=-1).flatten(3)
    return (x.float() * cos + rotated.float() * sin).to(x.dtype)


def qk_rmsnorm_rope(torch, t, s, sym):
    half = sym["head_dim"] // 2
    table = t["cos_sin"]
    cos = table[:, :half].repeat_interleave(2, dim=-1)[None, :, None, :]
    sin = table[:, half:].repeat_interleave(2, dim=-1)[None, :, None, :]
    eps = s["epsilon"]
    t["query"].copy_(_rotate(torch, _rms_norm(torch, t["query"], t["q_weight"], eps), cos, sin))
    t["key"].copy_(_rotate(torch, _rms_norm(torch, t["key"], t["k_weight"], eps), cos, sin))
