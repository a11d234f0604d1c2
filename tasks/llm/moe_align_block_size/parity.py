"""llm/moe_align_block_size's parity anchor: vLLM moe_align_block_size as a PyTorch composite.

Signature and contract: tasks/llm/rms_norm/parity.py.
"""


def moe_align_block_size(torch, t, s, sym):
    ids = t["topk_ids"].flatten()
    experts = int(s["num_experts"])
    block = int(s["block_size"])
    numel = ids.numel()
    order = torch.argsort(ids, stable=True)
    counts = torch.bincount(ids, minlength=experts)
    padded = (counts + block - 1) // block * block
    ends = torch.cumsum(padded, 0)
    starts = ends - padded
    count_starts = torch.cumsum(counts, 0) - counts
    sorted_experts = ids[order]
    position = starts[sorted_experts] + torch.arange(numel, device=ids.device) - \
        count_starts[sorted_experts]
    out = t["sorted_token_ids"]
    out.fill_(numel)
    out.scatter_(0, position, order.to(out.dtype))
    total = ends[-1]
    block_starts = torch.arange(t["experts_ids"].numel(), device=ids.device) * block
    owner = torch.searchsorted(ends, block_starts, right=True)
    t["experts_ids"].copy_(torch.where(block_starts < total, owner, 0).to(t["experts_ids"].dtype))
    t["num_tokens_post_pad"].copy_(total.reshape(1).to(t["num_tokens_post_pad"].dtype))
