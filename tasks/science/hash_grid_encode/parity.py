"""science/hash_grid_encode's parity anchor: tiny-cuda-nn's HashGrid encoding forward as a
PyTorch composite (all levels at once: corner indices, gathers and the trilinear blend), writing
out.

Signature and contract: tasks/llm/rms_norm/parity.py.
"""


def hash_grid_encode(torch, t, s, sym):
    x = t["positions"]  # [N, 3]
    table = t["table"]  # [L, T, 2]
    levels, size = sym["num_levels"], sym["table_size"]
    device = x.device
    lv = torch.arange(levels, device=device, dtype=torch.float32)
    scale = torch.exp2(lv * torch.log2(torch.tensor(float(s["per_level_scale"]), device=device)))
    scale = scale * float(s["base_resolution"]) - 1.0  # [L]
    res = torch.ceil(scale).to(torch.int64) + 1
    dense = (res * res * res) <= size  # [L]
    p = x[:, None, :] * scale[None, :, None] + 0.5  # [N, L, 3]
    g = torch.floor(p)
    f = p - g
    g = g.to(torch.int64)
    out = torch.zeros(x.shape[0], levels, 2, device=device, dtype=torch.float32)
    base = (torch.arange(levels, device=device, dtype=torch.int64) * size)[None, :]
    flat = table.view(-1, 2)
    mask32 = 0xFFFFFFFF
    for o in range(8):
        off = torch.tensor([o & 1, (o >> 1) & 1, (o >> 2) & 1], device=device, dtype=torch.int64)
        c = g + off  # [N, L, 3]
        dense_index = (c[..., 0] + c[..., 1] * res + c[..., 2] * res * res) & mask32
        hashed = (c[..., 0] ^ ((c[..., 1] * 2654435761) & mask32)
                  ^ ((c[..., 2] * 805459861) & mask32))
        index = torch.where(dense[None, :], dense_index, hashed) % size
        w = torch.where(off.bool(), f, 1.0 - f).prod(dim=-1)  # [N, L]
        out += w[..., None] * flat[index + base].float()
    t["out"].copy_(out.view_as(t["out"]).to(t["out"].dtype))
