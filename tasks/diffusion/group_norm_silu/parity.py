"""diffusion/group_norm_silu's parity anchor: diffusers' GroupNorm then SiLU as a PyTorch
composite (aten native_group_norm and silu eagerly; one fused reduction under torch.compile).

Signature and contract: tasks/llm/rms_norm/parity.py.
"""


def group_norm_silu(torch, t, s, sym):
    x = torch.nn.functional.group_norm(t["input"], sym["num_groups"], t["weight"], t["bias"],
                                       s["epsilon"])
    t["out"].copy_(torch.nn.functional.silu(x))
