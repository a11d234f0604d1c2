"""llm/paged_decode_attention's parity anchors: PyTorch's FlashAttention-2 and memory-efficient
attention kernels over the contexts gathered into their packed varlen layout.

Signature of the calls: tasks/llm/rms_norm/parity.py. These are "kernel" anchors: named library
kernels, each timed eagerly (there is nothing for torch.compile to fuse), the best kept. Each
returns its output instead of writing `out` (only the attention kernel is timed, no copy), and
that output is held to `check` before the kernel is timed. `prepare` runs once per input copy,
untimed.
"""


def prepare(torch, t, s, sym):
    """Gathers each sequence's context from the paged cache into the packed layout of
    FlashAttention's varlen call (untimed: the library gets contiguous keys and values, the
    reference reads them through the block table)."""
    block = t["key_cache"].shape[1]
    lens = t["seq_lens"].long().tolist()
    keys, values = [], []
    for s_i, n in enumerate(lens):
        blocks = t["block_tables"][s_i, : (n + block - 1) // block].long()
        keys.append(t["key_cache"][blocks].flatten(0, 1)[:n])
        values.append(t["value_cache"][blocks].flatten(0, 1)[:n])
    t["_k"] = torch.cat(keys).contiguous()
    t["_v"] = torch.cat(values).contiguous()
    cu = [0]
    for n in lens:
        cu.append(cu[-1] + n)
    t["_cu_k"] = torch.tensor(cu, dtype=torch.int32, device=t["query"].device)
    t["_cu_q"] = torch.arange(len(lens) + 1, dtype=torch.int32, device=t["query"].device)
    t["_max_k"] = max(lens)
    # The memory-efficient kernel has no grouped-query heads: it gets keys and values repeated
    # per query head (also untimed).
    group = t["query"].shape[1] // t["_k"].shape[1]
    t["_ke"] = t["_k"].repeat_interleave(group, dim=1)[None].contiguous()
    t["_ve"] = t["_v"].repeat_interleave(group, dim=1)[None].contiguous()


def check(torch, t, s):
    """The exact attention of the prepared contexts in fp32: what a library kernel's output is
    checked against before it is timed (a mis-specified call must not yield a time)."""
    scale = float(s.get("scale", 1.0 / (t["query"].shape[-1] ** 0.5)))
    cu = t["_cu_k"].tolist()
    heads = t["query"].shape[1]
    outs = []
    for i in range(len(cu) - 1):
        k = t["_k"][cu[i]:cu[i + 1]].float()
        v = t["_v"][cu[i]:cu[i + 1]].float()
        group = heads // k.shape[1]
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        scores = torch.einsum("hd,nhd->hn", t["query"][i].float(), k) * scale
        outs.append(torch.einsum("hn,nhd->hd", torch.softmax(scores, dim=-1), v))
    return torch.stack(outs)


def flash_attention_varlen(torch, t, s, sym):
    # FlashAttention-2 (PyTorch's own build) over the packed varlen layout, one query a sequence.
    # Only the attention kernel runs here: its output is the call's result (no copy timed).
    return torch.ops.aten._flash_attention_forward(
        t["query"], t["_k"], t["_v"], t["_cu_q"], t["_cu_k"], 1, t["_max_k"], 0.0, False, False,
        scale=float(s.get("scale", 1.0 / (t["query"].shape[-1] ** 0.5))))[0]


def efficient_attention(torch, t, s, sym):
    # The memory-efficient (CUTLASS) attention kernel over the same packed layout. It has no
    # grouped-query heads, so it reads keys and values repeated per query head (G times the
    # bytes): not like for like, listed for completeness.
    q = t["query"][None]
    return torch.ops.aten._efficient_attention_forward(
        q, t["_ke"], t["_ve"], None, t["_cu_q"], t["_cu_k"], 1, t["_max_k"], 0.0, 0, False,
        scale=float(s.get("scale", 1.0 / (q.shape[-1] ** 0.5))))[0][0]
