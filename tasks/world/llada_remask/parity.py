"""world/llada_remask's parity anchor: LLaDA's low-confidence remasking step (generate.py,
Fast-dLLM get_transfer_index) as a PyTorch composite, with the position noise given.

Signature and contract: tasks/llm/rms_norm/parity.py.
"""


def llada_remask(torch, t, s, sym):
    logits = t["logits"]
    x = t["x"]
    mask = x == int(s["mask_id"])
    logp = torch.log_softmax(logits.float(), dim=-1)
    conf, token = logp.max(dim=-1)
    x0 = torch.where(mask, token, x)
    score = torch.where(mask, conf + t["noise"], torch.full_like(conf, float("-inf")))
    k = torch.minimum(t["num_transfer_tokens"], mask.sum(dim=-1))
    # One topk over the largest k of the batch, then each row keeps its own first k_b.
    kmax = int(sym["seq_len"])
    order = torch.topk(score, kmax, dim=-1).indices
    keep = torch.arange(kmax, device=x.device)[None, :] < k[:, None]
    transfer = torch.zeros_like(mask)
    transfer.scatter_(1, order, keep)
    t["x0"].copy_(x0)
    t["transfer_index"].copy_(transfer)
