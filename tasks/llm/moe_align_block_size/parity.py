"""llm/moe_align_block_size's parity anchor: vLLM moe_align_block_size as a PyTorch composite.

Signature and contract: tasks/llm/rms_norm/parity.py.
"""

# The routing model of the task's generator (docs/tasks.md, `routing`): Zipf popularities over
# a random order of the experts, each token's topk experts drawn without replacement by
# Gumbel-top-k. The skew is the task's: 0.3 for 8 experts, 0.5 for the fine-grained routers.
def prepare(torch, t, s, sym):
    ids = t["topk_ids"]
    experts = int(s["num_experts"])
    skew = 0.3 if experts <= 8 else 0.5
    rank = torch.randperm(experts, device=ids.device).double()
    log_weight = -skew * torch.log1p(rank)
    uniform = torch.rand(ids.shape[0], experts, device=ids.device, dtype=torch.float64)
    gumbel = -torch.log(-torch.log(uniform.clamp_min(1e-300)))
    ids.copy_((log_weight + gumbel).topk(ids.shape[1], dim=-1).indices.to(ids.dtype))


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
