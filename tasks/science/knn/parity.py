"""science/knn's parity anchor: the k nearest neighbours as the PyTorch composite point-cloud
models fall back to without PyTorch3D or pointops (squared pairwise distances, topk smallest).

Signature and contract: tasks/llm/rms_norm/parity.py.
"""


def _surface_points(torch, shape, device, objects=8):
    """Points of the surface_points model (docs/tasks.md): a third on the floor z = 0, the rest
    on `objects` spheres resting on it (one fixed scene, its own draw of centres and radii)."""
    g = torch.Generator(device="cpu").manual_seed(1234)
    radius = 0.05 + 0.1 * torch.rand(objects, generator=g)
    centre = torch.stack([0.15 + 0.7 * torch.rand(objects, generator=g),
                          0.15 + 0.7 * torch.rand(objects, generator=g), radius], dim=-1)
    radius, centre = radius.to(device), centre.to(device)
    n = 1
    for d in shape[:-1]:
        n *= d
    direction = torch.randn(n, 3, device=device)
    direction = direction / direction.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    which = torch.randint(objects, (n,), device=device)
    on_sphere = centre[which] + radius[which, None] * direction
    floor = torch.rand(n, 3, device=device)
    floor[:, 2] = 0.0
    pick = torch.rand(n, device=device) < 1.0 / 3.0
    return torch.where(pick[:, None], floor, on_sphere).reshape(shape)


def prepare(torch, t, s, sym):
    """Both clouds from the surface model (the benchmark fills generators it does not know with
    zeros, which would tie every distance)."""
    for name in ("query", "ref"):
        x = t[name]
        x.copy_(_surface_points(torch, tuple(x.shape), x.device))


def knn(torch, t, s, sym):
    q = t["query"]  # [B, Q, 3]
    r = t["ref"]  # [B, R, 3]
    # DGCNN's knn: |q|^2 - 2 q.r + |r|^2 through a batched GEMM, [B, Q, R].
    d = q.pow(2).sum(-1, keepdim=True) - 2.0 * torch.bmm(q, r.transpose(1, 2)) + \
        r.pow(2).sum(-1)[:, None, :]
    values, index = torch.topk(d, sym["k"], dim=-1, largest=False, sorted=True)
    t["dists"].copy_(values)
    t["idx"].copy_(index)
