"""recsys/colbert_maxsim's parity anchor: ColBERT's colbert_score (padded passages times the
query on cuBLAS, padding masked, max over tokens, sum over query tokens), writing scores.

Signature and contract: tasks/llm/rms_norm/parity.py.
"""


def colbert_maxsim(torch, t, s, sym):
    docs = t["docs"]  # [N, L, dim]
    sim = docs @ t["query"].to(docs.dtype).T  # [N, L, query_len]
    padding = (torch.arange(docs.shape[1], device=docs.device)[None, :]
               >= t["doc_lens"][:, None])  # [N, L]
    sim = sim.float().masked_fill(padding[..., None], float("-inf"))
    t["scores"].copy_(sim.max(dim=1).values.sum(dim=-1))
