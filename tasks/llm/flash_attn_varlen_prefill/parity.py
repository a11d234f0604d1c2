"""llm/flash_attn_varlen_prefill's parity anchor: PyTorch's FlashAttention-2 varlen kernel over
the contexts gathered into its packed layout.

Signature of the calls: tasks/llm/rms_norm/parity.py. This is a "kernel" anchor: a named library
kernel, timed eagerly, that returns its output instead of writing `out` (only the attention
kernel is timed, no copy); that output is held to `check` before the kernel is timed. `prepare`
runs once per input copy, untimed.

Causal alignment: FlashAttention-2 (from 2.1 on) aligns the causal mask bottom-right when a
sequence has fewer queries than keys: query row i of a sequence with q queries and n keys sees
keys j < min(n, i + 1 + n - q), i.e. j <= n - q + i, the task's rule. Verified in PyTorch's build
of it (aten/src/ATen/native/transformers/cuda/flash_attn/mask.h: `Mask::apply_mask` with
`col_idx_limit_right = min(max_seqlen_k, row_idx + 1 + max_seqlen_k - max_seqlen_q)`, built in
the forward kernel from each sequence's own lengths, `binfo.actual_seqlen_k` and
`binfo.actual_seqlen_q`), and the schema of torch 2.9's op: `_flash_attention_forward(query,
key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, return_debug_mask, *,
scale, window_size_left, window_size_right, seqused_k, alibi_slopes)`. PyTorch's
scaled_dot_product_attention with is_causal aligns top-left instead; it is not used here.
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
    cu_k = [0]
    for n in lens:
        cu_k.append(cu_k[-1] + n)
    t["_cu_k"] = torch.tensor(cu_k, dtype=torch.int32, device=t["query"].device)
    t["_max_k"] = max(lens)
    cu_q = t["cu_seqlens_q"].long().tolist()
    t["_max_q"] = max(cu_q[i + 1] - cu_q[i] for i in range(len(lens)))
    t["_flashinfer"] = _flashinfer_plan(torch, t, s, lens, block)


def _flashinfer_plan(torch, t, s, lens, block):
    """FlashInfer's batch prefill planned over the paged cache itself (what vLLM's FlashInfer
    backend runs for prefill): the block tables as its page-table CSR, the cache in its NHD page
    layout ([pages, page_size, kv_heads, head_dim], the task's flash layout). None where
    FlashInfer is not on the path; its anchor then says so."""
    try:
        import flashinfer
    except ModuleNotFoundError:
        return None
    from flashinfer_pages import page_table  # bench/gpu
    indptr, indices, last = page_table(torch, t["block_tables"], lens, block)
    wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(
        torch.empty(128 << 20, dtype=torch.uint8, device=t["query"].device), "NHD")
    _, heads, dims = t["query"].shape
    wrapper.plan(t["cu_seqlens_q"].to(torch.int32),
                 indptr, indices, last, heads,
                 t["key_cache"].shape[2], dims, block, causal=True, sm_scale=_scale(t, s),
                 q_data_type=t["query"].dtype, kv_data_type=t["key_cache"].dtype)
    return wrapper


def _scale(t, s):
    return float(s.get("scale", 1.0 / (t["query"].shape[-1] ** 0.5)))


def check(torch, t, s):
    """The exact causal attention of the prepared contexts in fp32, bottom-right aligned (row i
    of a sequence with q new tokens of n sees keys 0 .. n - q + i): what a library kernel's
    output is checked against before it is timed. Rows go in slices so that the scores of a
    32k context stay near 1 GiB."""
    scale = _scale(t, s)
    query = t["query"]
    tokens, heads, dims = query.shape
    kv_heads = t["_k"].shape[1]
    group = heads // kv_heads
    cu_q = t["cu_seqlens_q"].long().tolist()
    cu_k = t["_cu_k"].tolist()
    out = torch.empty(tokens, heads, dims, dtype=torch.float32, device=query.device)
    for i in range(len(cu_k) - 1):
        k = t["_k"][cu_k[i]:cu_k[i + 1]].float()  # [n, kv_heads, dims]
        v = t["_v"][cu_k[i]:cu_k[i + 1]].float()
        n, q = k.shape[0], cu_q[i + 1] - cu_q[i]
        step = max(1, (1 << 28) // (heads * n))
        keys = torch.arange(n, device=query.device)
        for first in range(0, q, step):
            rows = min(step, q - first)
            x = query[cu_q[i] + first:cu_q[i] + first + rows].float()
            x = x.view(rows, kv_heads, group, dims)
            scores = torch.einsum("rkgd,nkd->kgrn", x, k) * scale
            positions = n - q + first + torch.arange(rows, device=query.device)
            hidden = keys[None, :] > positions[:, None]  # [rows, n]
            scores.masked_fill_(hidden, float("-inf"))
            y = torch.einsum("kgrn,nkd->rkgd", torch.softmax(scores, dim=-1), v)
            out[cu_q[i] + first:cu_q[i] + first + rows] = y.reshape(rows, heads, dims)
    return out


def flash_attention_varlen(torch, t, s, sym):
    # FlashAttention-2 (PyTorch's own build) over the packed varlen layout, causal (bottom-right,
    # see above). Only the attention kernel runs here: its output is the call's result.
    return torch.ops.aten._flash_attention_forward(
        t["query"], t["_k"], t["_v"], t["cu_seqlens_q"], t["_cu_k"], t["_max_q"], t["_max_k"],
        0.0, True, False, scale=_scale(t, s))[0]


def flashinfer_paged_prefill(torch, t, s, sym):
    # FlashInfer's batch prefill reading keys and values through the page table (planned in
    # prepare, untimed; the run is the attention kernel alone). Its causal mask aligns each
    # sequence's queries with the end of its keys, the task's rule; `check` holds it to that
    # before it is timed.
    if t.get("_flashinfer") is None:
        import flashinfer  # noqa: F401  (absent here: the import error says so)
    return t["_flashinfer"].run(t["query"], (t["key_cache"], t["value_cache"]))
