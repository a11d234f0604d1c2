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
    t["_flashinfer"] = _flashinfer_plans(torch, t, s, lens, block)
    # TensorRT-LLM's XQA decode kernel through FlashInfer reads the task's own cache and block
    # tables; it takes the lengths as uint32 [seqs, 1] (a reinterpretation of the int32 ones),
    # the query with a beam axis (a view), an output of the same shape, a workspace and
    # semaphores that start at zero and that its kernel leaves at zero.
    device = t["query"].device
    t["_xqa_seq_lens"] = t["seq_lens"].to(torch.int32).contiguous().view(torch.uint32)[:, None]
    t["_xqa_out"] = torch.empty_like(t["query"][:, None])
    t["_xqa_workspace"] = torch.zeros(128 << 20, dtype=torch.uint8, device=device)
    t["_xqa_semaphores"] = torch.zeros(8 << 20, dtype=torch.uint32, device=device)


def _flashinfer_plans(torch, t, s, lens, block):
    """FlashInfer's batch decode planned over the paged cache itself (what vLLM's and SGLang's
    FlashInfer backends run for decode): the block tables as its page-table CSR, the cache in its
    NHD page layout ([pages, page_size, kv_heads, head_dim], the task's flash layout). Its CUDA-
    core kernel and its tensor-core one (the prefill kernel on one query row, which the serving
    engines pick for wide query groups) are both planned; the faster is the bar. Returns
    {use_tensor_cores: the planned wrapper, or the error its plan raised (e.g. a query group its
    CUDA-core kernel has no build of)}; both None where FlashInfer is not on the path (its
    anchors then say so)."""
    try:
        import flashinfer
    except ModuleNotFoundError:
        return {False: None, True: None}
    from flashinfer_pages import page_table  # bench/gpu
    indptr, indices, last = page_table(torch, t["block_tables"], lens, block)
    _, heads, dims = t["query"].shape
    plans = {}
    for tensor_cores in (False, True):
        wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            torch.empty(128 << 20, dtype=torch.uint8, device=t["query"].device), "NHD",
            use_tensor_cores=tensor_cores)
        try:
            wrapper.plan(indptr, indices, last, heads, t["key_cache"].shape[2], dims, block,
                         sm_scale=float(s.get("scale", 1.0 / (dims ** 0.5))),
                         q_data_type=t["query"].dtype, kv_data_type=t["key_cache"].dtype)
            plans[tensor_cores] = wrapper
        except RuntimeError as error:
            plans[tensor_cores] = error
    return plans


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


def _flashinfer_decode(t, tensor_cores):
    wrapper = t["_flashinfer"][tensor_cores]
    if wrapper is None:
        import flashinfer  # noqa: F401  (absent here: the import error says so)
    if isinstance(wrapper, Exception):  # its plan failed: the anchor reports why
        # FlashInfer's message ends "<source>.cu:<line>: <what>": keep what.
        raise RuntimeError(f"plan failed: {str(wrapper).rsplit('.cu:', 1)[-1].split(': ', 1)[-1]}")
    return wrapper.run(t["query"], (t["key_cache"], t["value_cache"]))


def flashinfer_paged_decode(torch, t, s, sym):
    # FlashInfer's batch decode (CUDA cores) reading keys and values through the page table,
    # planned in prepare (untimed): the run is the attention kernel alone, held to `check`.
    return _flashinfer_decode(t, False)


def flashinfer_paged_decode_tensor_cores(torch, t, s, sym):
    # The same call with use_tensor_cores=True (FlashInfer's prefill kernel on one query row).
    return _flashinfer_decode(t, True)


def flashinfer_xqa(torch, t, s, sym):
    # flashinfer.xqa: TensorRT-LLM's XQA decode attention (bf16 query and NHD paged cache, the
    # task's block tables as its page table); its softmax scale is q_scale / sqrt(head_dim).
    # flashinfer re-exports the function under its module's name: flashinfer.xqa is the function.
    from flashinfer.xqa import xqa  # carried to the GPU machine only; the harness names it absent

    dims = t["query"].shape[-1]
    scale = float(s.get("scale", 1.0 / (dims ** 0.5)))
    xqa(t["query"][:, None], t["key_cache"], t["value_cache"], t["block_tables"],
        t["_xqa_seq_lens"], t["_xqa_out"], t["_xqa_workspace"], t["_xqa_semaphores"],
        t["key_cache"].shape[2], t["key_cache"].shape[1], q_scale=scale * dims ** 0.5,
        kv_layout="NHD")
    return t["_xqa_out"][:, 0]
