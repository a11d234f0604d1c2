"""llm/rotary_embedding's parity anchor: vLLM rotary_embedding (NeoX and GPT-J styles) as a
PyTorch composite.

Signature and contract: tasks/llm/rms_norm/parity.py.
"""


def _rotated(torch, x, cos, sin, head, neox):
    """x [tokens, heads * head] or [tokens, heads, head] rotated by the rows' cos and sin
    ([tokens, head / 2] each), as [tokens, heads, head] in x's dtype or cos's, whichever wider."""
    xs = x.view(x.shape[0], -1, head)
    c, sn = cos[:, None, :], sin[:, None, :]
    if neox:
        x1, x2 = xs[..., : head // 2], xs[..., head // 2:]
        return torch.cat([x1 * c - x2 * sn, x2 * c + x1 * sn], dim=-1)
    x1, x2 = xs[..., 0::2], xs[..., 1::2]
    return torch.stack([x1 * c - x2 * sn, x2 * c + x1 * sn], dim=-1).flatten(-2)


def rotary_embedding(torch, t, s, sym):
    head = int(s.get("head_size", sym.get("head_size", 128)))
    cos, sin = t["cos_sin_cache"].index_select(0, t["positions"]).chunk(2, dim=-1)
    neox = int(s.get("is_neox", 1)) == 1
    for name in ("query", "key"):
        x = t[name]
        x.view(x.shape[0], -1, head).copy_(_rotated(torch, x, cos, sin, head, neox))


def prepare(torch, t, s, sym):
    """FlashInfer's cos/sin cache: the task's, in fp32 (the dtype FlashInfer requires; SGLang
    keeps its cache so), converted once per input copy, untimed."""
    t["_cache_f32"] = t["cos_sin_cache"].float()


def check(torch, t, s):
    """The rotated query in fp32 from the bf16 inputs and cache: what a library kernel's query is
    held to before it is timed (its key goes through the same code)."""
    head = t["query"].shape[-1]
    cos, sin = t["cos_sin_cache"].float().index_select(0, t["positions"]).chunk(2, dim=-1)
    return _rotated(torch, t["query"].float(), cos, sin, head, int(s.get("is_neox", 1)) == 1)


def flashinfer_rope(torch, t, s, sym):
    # FlashInfer's rope on vLLM's interface, in place on query and key; the rotated query is the
    # call's result for `check`.
    import flashinfer  # carried to the GPU machine only; the harness names it when absent
    head = t["query"].shape[-1]
    flashinfer.rope.apply_rope_with_cos_sin_cache_inplace(
        t["positions"], t["query"], t["key"], head, t["_cache_f32"],
        is_neox=int(s.get("is_neox", 1)) == 1)
    return t["query"]
