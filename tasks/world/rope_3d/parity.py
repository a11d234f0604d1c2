"""world/rope_3d's parity anchor: V-JEPA 2's rotate_queries_or_keys over the frame, row and
column slices of the query and key, as a PyTorch composite writing qkv in place.

Signature and contract: tasks/llm/rms_norm/parity.py.
"""


def _rotate(torch, x, pos):
    # V-JEPA 2 (src/models/utils/modules.py): frequencies repeated across the two halves of the
    # slice (not interleaved), pairs (2i, 2i + 1) rotated.
    d = x.shape[-1]
    omega = torch.arange(d // 2, dtype=torch.float32, device=x.device) / (d / 2.0)
    omega = 1.0 / 10000 ** omega
    freq = pos.float()[..., None] * omega
    sin = freq.sin().repeat(1, 1, 2)[:, :, None, :]
    cos = freq.cos().repeat(1, 1, 2)[:, :, None, :]
    xf = x.float()
    pairs = xf.unflatten(-1, (-1, 2))
    y = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
    return xf * cos + y * sin


def rope_3d(torch, t, s, sym):
    qkv = t["qkv"]
    ids = t["token_ids"]
    plane = sym["grid_h"] * sym["grid_w"]
    positions = (ids // plane, (ids % plane) // sym["grid_w"], ids % sym["grid_w"])
    dim = sym["head_dim"]
    width = 2 * ((dim // 3) // 2)
    qk = qkv[:, :, 0:2]  # [batch, tokens, 2, heads, dim], a view: written in place
    for axis in range(3):
        part = qk[..., axis * width:(axis + 1) * width]
        b, n = part.shape[0], part.shape[1]
        rotated = _rotate(torch, part.reshape(b, n, -1, width), positions[axis])
        part.copy_(rotated.reshape(part.shape).to(qkv.dtype))
