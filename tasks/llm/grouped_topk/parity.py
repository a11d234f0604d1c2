"""llm/grouped_topk's parity anchor: vLLM grouped_topk (DeepSeek-V3 routing) as a PyTorch
composite.

Signature and contract: tasks/llm/rms_norm/parity.py.
"""


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
