"""The page table FlashInfer's paged attention wrappers plan over, from a task's vLLM block tables:
the parity anchors of llm/paged_decode_attention and llm/flash_attn_varlen_prefill share it
(bench/gpu/parity.py puts this folder on the path before it imports them)."""


def page_table(torch, block_tables, lens, block):
    """(indptr, indices, last_page_len), int32 on the block tables' device: sequence i's pages
    are indices[indptr[i]:indptr[i + 1]], the first cdiv(lens[i], block) of its block table row,
    and last_page_len[i] the tokens in its last page."""
    device = block_tables.device
    pages = [(n + block - 1) // block for n in lens]
    indptr = [0]
    for p in pages:
        indptr.append(indptr[-1] + p)
    indices = torch.cat([block_tables[i, :p] for i, p in enumerate(pages)]).to(torch.int32)
    last = [n - (p - 1) * block for n, p in zip(lens, pages)]
    return (torch.tensor(indptr, dtype=torch.int32, device=device), indices,
            torch.tensor(last, dtype=torch.int32, device=device))
