"""llm/fused_moe's parity anchor: vLLM fused_experts as a PyTorch composite over its grouped GEMM.

Signature and contract: tasks/llm/rms_norm/parity.py.
"""


def _expert_products(torch, x, w, offsets, counts):
    """Row block e of x (rows offsets[e - 1] to offsets[e], sorted by expert) times w[e]^T.

    On CUDA one torch._grouped_mm (CUTLASS on sm_90, group ends read on the device); elsewhere
    (the CPU test of the anchors) one matrix product per expert that has rows."""
    if x.is_cuda:
        return torch._grouped_mm(x, w.transpose(1, 2), offs=offsets)
    y = x.new_empty(x.shape[0], w.shape[1])
    start = 0
    for e, count in enumerate(counts.tolist()):
        if count:
            y[start:start + count] = x[start:start + count] @ w[e].t()
        start += count
    return y


def fused_experts(torch, t, s, sym):
    x_all, w1, w2 = t["hidden_states"], t["w1"], t["w2"]
    topk = t["topk_ids"].shape[1]
    inter = int(sym["intermediate_size"])
    ids = t["topk_ids"].flatten()
    order = torch.argsort(ids, stable=True)
    tokens = order // topk
    counts = torch.bincount(ids, minlength=int(sym["num_experts"]))
    offsets = torch.cumsum(counts, 0).to(torch.int32)
    x = x_all[tokens]
    h = _expert_products(torch, x, w1, offsets, counts)
    a = torch.nn.functional.silu(h[:, :inter]) * h[:, inter:]
    y = _expert_products(torch, a, w2, offsets, counts)
    y = y.float() * t["topk_weights"].flatten()[order, None]
    out = torch.zeros(x_all.shape[0], x_all.shape[1], dtype=torch.float32, device=x_all.device)
    out.index_add_(0, tokens, y)
    t["out"].copy_(out.to(t["out"].dtype))
