"""science/knn's parity anchor: the k nearest neighbours as the PyTorch composite point-cloud
models fall back to without PyTorch3D or pointops (squared pairwise distances, topk smallest).

Signature and contract: tasks/llm/rms_norm/parity.py.
"""


def knn(torch, t, s, sym):
    q = t["query"]  # [B, Q, 3]
    r = t["ref"]  # [B, R, 3]
    # DGCNN's knn: |q|^2 - 2 q.r + |r|^2 through a batched GEMM, [B, Q, R].
    d = q.pow(2).sum(-1, keepdim=True) - 2.0 * torch.bmm(q, r.transpose(1, 2)) + \
        r.pow(2).sum(-1)[:, None, :]
    values, index = torch.topk(d, sym["k"], dim=-1, largest=False, sorted=True)
    t["dists"].copy_(values)
    t["idx"].copy_(index)
