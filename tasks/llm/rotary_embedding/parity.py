"""llm/rotary_embedding's parity anchor: vLLM rotary_embedding (NeoX and GPT-J styles) as a
PyTorch composite.

Signature and contract: tasks/llm/rms_norm/parity.py.
"""


def rotary_embedding(torch, t, s, sym):
    pos = t["positions"]
    head = int(s.get("head_size", sym.get("head_size", 128)))
    cache = t["cos_sin_cache"].index_select(0, pos)
    cos, sin = cache.chunk(2, dim=-1)
    neox = int(s.get("is_neox", 1)) == 1
    for name in ("query", "key"):
        x = t[name]
        xs = x.view(x.shape[0], -1, head)
        if neox:
            x1, x2 = xs[..., : head // 2], xs[..., head // 2:]
            c, sn = cos[:, None, :], sin[:, None, :]
            out = torch.cat([x1 * c - x2 * sn, x2 * c + x1 * sn], dim=-1)
        else:
            x1, x2 = xs[..., 0::2], xs[..., 1::2]
            c, sn = cos[:, None, :], sin[:, None, :]
            out = torch.stack([x1 * c - x2 * sn, x2 * c + x1 * sn], dim=-1).flatten(-2)
        xs.copy_(out)
