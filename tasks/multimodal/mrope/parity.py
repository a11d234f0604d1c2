"""multimodal/mrope's parity anchor: vLLM's MRotaryEmbedding.forward_native (Qwen2-VL M-RoPE,
NeoX style) as a PyTorch composite.

Signature and contract: tasks/llm/rms_norm/parity.py.
"""


def _layout_positions(torch, tokens, text, grid_h, grid_w, device):
    """[3, tokens] ids of prompts that repeat `text` text tokens and one grid_h x grid_w image
    (the mrope_positions model of docs/tasks.md, starting at 0)."""
    period = text + grid_h * grid_w
    advance = text + max(grid_h, grid_w)
    j = torch.arange(tokens, device=device)
    base = (j // period) * advance
    r = j % period
    v = (r - text).clamp_min(0)
    is_text = r < text
    st = base + text
    t = torch.where(is_text, base + r, st)
    h = torch.where(is_text, base + r, st + v // grid_w)
    w = torch.where(is_text, base + r, st + v % grid_w)
    return torch.stack([t, h, w])


def prepare(torch, t, s, sym):
    """Position ids of the cases' kinds (the benchmark fills generators it does not know with
    zeros): decode batches (up to 256 tokens) at drawn positions, equal in the three rows;
    prefill chunks of 40 text tokens and a 16 x 16 image, repeated."""
    pos = t["positions"]
    tokens = pos.shape[1]
    if tokens <= 256:
        drawn = torch.randint(0, sym["max_position"], (tokens,), device=pos.device)
        pos.copy_(drawn[None, :].expand(3, tokens))
    else:
        ids = _layout_positions(torch, tokens, 40, 16, 16, pos.device)
        pos.copy_(ids.clamp_max(sym["max_position"] - 1))


def mrope(torch, t, s, sym):
    pos = t["positions"]  # [3, num_tokens]
    head = int(sym["head_size"])
    section = [int(sym["mrope_section_t"]), int(sym["mrope_section_h"]),
               int(sym["mrope_section_w"])]
    cos_sin = t["cos_sin_cache"][pos]  # [3, num_tokens, head_size]
    cos, sin = cos_sin.chunk(2, dim=-1)
    # Section i of the frequencies takes its values from position row i.
    cos = torch.cat([part[i] for i, part in enumerate(cos.split(section, dim=-1))], dim=-1)
    sin = torch.cat([part[i] for i, part in enumerate(sin.split(section, dim=-1))], dim=-1)
    c, sn = cos[:, None, :], sin[:, None, :]
    for name in ("query", "key"):
        x = t[name]
        xs = x.view(x.shape[0], -1, head)
        x1, x2 = xs[..., : head // 2], xs[..., head // 2:]
        xs.copy_(torch.cat([x1 * c - x2 * sn, x2 * c + x1 * sn], dim=-1))
