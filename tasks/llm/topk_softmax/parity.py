"""llm/topk_softmax's parity anchor: vLLM topk_softmax (MoE routing) as a PyTorch composite.

Signature and contract: tasks/llm/rms_norm/parity.py.
"""


def topk_softmax(torch, t, s, sym):
    k = t["topk_weights"].shape[-1]
    probs = torch.softmax(t["gating_output"].float(), dim=-1)
    w, i = probs.topk(k, dim=-1)
    t["topk_weights"].copy_(w)
    t["topk_indices"].copy_(i.to(t["topk_indices"].dtype))
    if "token_expert_indices" in t:
        n = probs.shape[0]
        ar = torch.arange(k, device=probs.device, dtype=torch.int32)[None, :] * n
        t["token_expert_indices"].copy_(ar + torch.arange(n, device=probs.device,
                                                          dtype=torch.int32)[:, None])
