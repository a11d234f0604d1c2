"""llm/grouped_topk's parity anchors: vLLM grouped_topk (DeepSeek-V3 routing) as a PyTorch
composite, and FlashInfer's fused_topk_deepseek, the fused DeepSeek-V3 ("noaux_tc") router
kernel serving engines call.

Signature and contract: tasks/llm/rms_norm/parity.py; `prepare`, `check` and a kernel anchor's
return: tasks/llm/paged_decode_attention/parity.py; `canonical`: docs/tasks.md.
"""


def _routing(s, sym):
    """(groups, kept groups, routed scaling factor) of the case."""
    return (int(sym.get("num_expert_group", s.get("num_expert_group", 8))),
            int(sym.get("topk_group", s.get("topk_group", 4))),
            float(s.get("routed_scaling_factor", 2.5)))


def grouped_topk(torch, t, s, sym):
    gating = t["gating_output"].float()
    scores = gating.sigmoid()
    choice = scores + t["e_score_correction_bias"].float()[None, :]
    n, e = choice.shape
    groups = int(sym.get("num_expert_group", s.get("num_expert_group", 8)))
    topk_group = int(sym.get("topk_group", s.get("topk_group", 4)))
    k = t["topk_weights"].shape[-1]
    group_scores = choice.view(n, groups, -1).topk(2, dim=-1)[0].sum(-1)
    keep = group_scores.topk(topk_group, dim=-1)[1]
    mask = torch.zeros_like(group_scores).scatter_(1, keep, 1)
    mask = mask[:, :, None].expand(n, groups, e // groups).reshape(n, e)
    ids = choice.masked_fill(mask == 0, float("-inf")).topk(k, dim=-1)[1]
    w = scores.gather(1, ids)
    w = w / w.sum(-1, keepdim=True) * float(s.get("routed_scaling_factor", 2.5))
    t["topk_weights"].copy_(w)
    name = "topk_ids" if "topk_ids" in t else "topk_indices"
    t[name].copy_(ids.to(t[name].dtype))


def prepare(torch, t, s, sym):
    """FlashInfer's router writes into output buffers of its own, allocated here (untimed)."""
    shape = t["topk_weights"].shape
    t["_weights"] = torch.empty(shape, dtype=torch.float32, device=t["gating_output"].device)
    t["_ids"] = torch.empty(shape, dtype=torch.int32, device=t["gating_output"].device)


def canonical(torch, out):
    """A routing's (weights, ids) with each row's experts in ascending id order (the task leaves
    their order free), as floats."""
    weights, ids = out
    order = ids.long().argsort(dim=-1)
    return weights.float().gather(1, order), ids.long().gather(1, order).float()


def check(torch, t, s):
    """The routing of the case in float64, written apart from the composite (sorts instead of
    top-k), in canonical order."""
    groups, topk_group, scaling = _routing(s, {})
    k = t["topk_weights"].shape[-1]
    scores = t["gating_output"].double().sigmoid()
    choice = scores + t["e_score_correction_bias"].double()[None, :]
    tokens, experts = choice.shape
    by_group = choice.view(tokens, groups, experts // groups)
    group_score = by_group.sort(dim=-1, descending=True).values[..., :2].sum(-1)
    kept = group_score.argsort(dim=-1, descending=True, stable=True)[:, :topk_group]
    allowed = torch.zeros(tokens, groups, dtype=torch.bool, device=choice.device)
    allowed.scatter_(1, kept, True)
    allowed = allowed.repeat_interleave(experts // groups, dim=1)
    masked = choice.masked_fill(~allowed, float("-inf"))
    ids = masked.argsort(dim=-1, descending=True, stable=True)[:, :k]
    weights = scores.gather(1, ids)
    weights = weights / weights.sum(-1, keepdim=True) * scaling
    return canonical(torch, (weights, ids))


def flashinfer_fused_topk_deepseek(torch, t, s, sym):
    # flashinfer.fused_moe.fused_topk_deepseek: sigmoid + bias, top-2 sums per group, the kept
    # groups, top-k, the chosen sigmoid scores renormalised and scaled (it always renormalises,
    # as DeepSeek-V3 does), launched as engines do (programmatic dependent launch on).
    from flashinfer.fused_moe import fused_topk_deepseek

    groups, topk_group, scaling = _routing(s, sym)
    fused_topk_deepseek(t["gating_output"], t["e_score_correction_bias"], groups, topk_group,
                        t["_weights"].shape[-1], scaling, t["_weights"], t["_ids"])
    return t["_weights"], t["_ids"]
