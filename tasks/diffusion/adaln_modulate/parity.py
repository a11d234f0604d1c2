"""diffusion/adaln_modulate's parity anchor: the diffusers composite (layer_norm without affine,
then x * (1 + scale[:, None]) + shift[:, None]) as a PyTorch composite.

Signature and contract: tasks/llm/rms_norm/parity.py.
"""


def adaln_modulate(torch, t, s, sym):
    x = t["input"]
    norm = torch.nn.functional.layer_norm(x, (x.shape[-1],), None, None, s["epsilon"])
    t["out"].copy_(norm * (1 + t["scale"][:, None]) + t["shift"][:, None])
