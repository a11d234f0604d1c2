"""llm/reshape_and_cache_flash's parity anchors: vLLM reshape_and_cache_flash as a PyTorch
composite (index_copy_ of the valid slots), and FlashInfer's append_paged_kv_cache, the kernel
its serving backends write the paged cache with.

Signature and contract: tasks/llm/rms_norm/parity.py; `prepare`, `check` and the kernel anchor's
return: tasks/llm/paged_decode_attention/parity.py.
"""


def reshape_and_cache_flash(torch, t, s, sym):
    slots = t["slot_mapping"]
    valid = slots >= 0
    kc, vc = t["key_cache"], t["value_cache"]
    flat_k = kc.view(-1, *kc.shape[2:])
    flat_v = vc.view(-1, *vc.shape[2:])
    idx = slots[valid]
    flat_k.index_copy_(0, idx, t["key"][valid])
    flat_v.index_copy_(0, idx, t["value"][valid])


def prepare(torch, t, s, sym):
    """FlashInfer's call, set up once per input copy (untimed). Its append takes (request,
    position) pairs over a page table rather than slots: the cache is one request whose page
    table is every block in order, so a token's position is its slot. It has no padding rows,
    so the padding (slot -1) rows are left out here, and the kernel only writes the real tokens
    (less work than the task's kernel, which reads the slots of every row). The two caches are
    the halves of one buffer, so the anchor can return both without a copy."""
    valid = t["slot_mapping"] >= 0
    device = t["key"].device
    t["_key"] = t["key"][valid].contiguous()
    t["_value"] = t["value"][valid].contiguous()
    t["_positions"] = t["slot_mapping"][valid].to(torch.int32)
    t["_batch_indices"] = torch.zeros_like(t["_positions"])
    blocks, block = t["key_cache"].shape[:2]
    t["_kv_indptr"] = torch.tensor([0, blocks], dtype=torch.int32, device=device)
    t["_kv_indices"] = torch.arange(blocks, dtype=torch.int32, device=device)
    t["_kv_last_page_len"] = torch.tensor([block], dtype=torch.int32, device=device)
    t["_caches"] = torch.stack([t["key_cache"], t["value_cache"]])


def check(torch, t, s):
    """Both caches after the call, in fp32: every real token's key and value at its slot, every
    other row as it was."""
    valid = t["slot_mapping"] >= 0
    slots = t["slot_mapping"][valid]
    caches = []
    for cache, rows in (("key_cache", "key"), ("value_cache", "value")):
        after = t[cache].float().clone()
        after.view(-1, *after.shape[2:])[slots] = t[rows][valid].float()
        caches.append(after)
    return tuple(caches)


def flashinfer_append_paged_kv_cache(torch, t, s, sym):
    # flashinfer.page.append_paged_kv_cache over the task's flash layout (NHD pages), set up in
    # prepare: the append kernel alone is timed; both caches are returned for the check.
    import flashinfer.page

    caches = t["_caches"]
    flashinfer.page.append_paged_kv_cache(
        t["_key"], t["_value"], t["_batch_indices"], t["_positions"], (caches[0], caches[1]),
        t["_kv_indices"], t["_kv_indptr"], t["_kv_last_page_len"], kv_layout="NHD")
    return caches[0], caches[1]
