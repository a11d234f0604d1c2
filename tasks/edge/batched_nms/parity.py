"""edge/batched_nms's parity anchors: torchvision.ops.batched_nms itself, and the same greedy as a
PyTorch composite (sort, pairwise IoU within a group, the fixed point of "kept unless a kept
earlier box overlaps it").

Signature and contract: tasks/llm/rms_norm/parity.py.
"""

# Candidates an image and objects an image of the visible cases, by num_boxes (the benchmark
# passes the symbols only); other sizes are one image with an object per 32 candidates.
_LAYOUTS = {512: (512, 16), 6144: (384, 12), 2400: (300, 20), 8400: (8400, 24)}


def _detections(torch, n, device, classes=80, size=640.0):
    """Clustered candidates after the model of the detections generator (docs/tasks.md):
    jittered duplicates of objects of log-uniform size, object-correlated scores, a few classes
    an image, idxs = image * classes + class. Coordinates lie on a quarter-pixel grid, so every
    area and intersection is exact in fp32, with or without torchvision's coordinate offsets,
    and all scores are distinct: the check and torchvision then visit the same boxes in the
    same order and compare the same IoUs."""
    per_image, objects = _LAYOUTS.get(n, (n, max(1, n // 32)))
    g = torch.Generator(device="cpu").manual_seed(1234 + n)
    images = (n + per_image - 1) // per_image
    count = images * objects

    def uniform(*shape):
        return torch.rand(*shape, generator=g, dtype=torch.float64)

    def log_uniform(lo, hi, k):
        return torch.exp(torch.log(torch.tensor(lo, dtype=torch.float64)) +
                         uniform(k) * (torch.log(torch.tensor(hi, dtype=torch.float64)) -
                                       torch.log(torch.tensor(lo, dtype=torch.float64))))

    image = torch.arange(n) // per_image
    u = uniform(n)
    obj = image * objects + (objects * u * u).long().clamp_max(objects - 1)
    scale = log_uniform(16.0, 0.6 * size, count)
    aspect = log_uniform(1.0 / 3.0, 3.0, count).sqrt()
    centre = uniform(count, 2) * size
    extent = torch.stack([scale * aspect, scale / aspect], dim=-1)
    jitter = 0.15 * (uniform(n, 4) + uniform(n, 4) - 1.0) * extent[obj].repeat(1, 2)
    half = torch.cat([-0.5 * extent[obj], 0.5 * extent[obj]], dim=-1)
    boxes = (centre[obj].repeat(1, 2) + half + jitter).clamp(0.0, size)
    boxes = (boxes * 4.0).round() / 4.0
    confidence = 0.35 + 0.6 * uniform(count)
    scores = confidence[obj] * (0.55 + 0.45 * uniform(n))
    rank = scores.argsort().argsort()
    scores = 0.01 + 0.98 * (rank.double() + 1.0) / (n + 1.0)
    shown = 1 + (uniform(images) * 4).long().clamp_max(3)
    palette = (uniform(images, 4) * classes).long().clamp_max(classes - 1)
    pick = (uniform(count) * shown.repeat_interleave(objects).double()).long()
    object_class = palette.repeat_interleave(objects, dim=0).gather(1, pick[:, None])[:, 0]
    idxs = image * classes + object_class[obj]
    return (boxes.float().to(device), scores.float().to(device), idxs.to(device))


def prepare(torch, t, s, sym):
    """The three inputs from the candidate model (the benchmark fills generators it does not
    know with zeros: every box would be the same empty box)."""
    boxes, scores, idxs = _detections(torch, sym["num_boxes"], t["boxes"].device)
    t["boxes"].copy_(boxes)
    t["scores"].copy_(scores)
    t["idxs"].copy_(idxs)


def _greedy(torch, boxes, scores, idxs, threshold):
    """The kept indices by decreasing score (equal scores: lower index first)."""
    order = torch.sort(scores, descending=True, stable=True).indices
    b = boxes[order]
    g = idxs[order]
    x1, y1, x2, y2 = b.unbind(1)
    area = (x2 - x1) * (y2 - y1)
    w = (torch.minimum(x2[:, None], x2[None, :]) - torch.maximum(x1[:, None], x1[None, :]))
    h = (torch.minimum(y2[:, None], y2[None, :]) - torch.maximum(y1[:, None], y1[None, :]))
    inter = w.clamp_min(0) * h.clamp_min(0)
    iou = inter / (area[:, None] + area[None, :] - inter)
    # over[j, i]: box j, visited before box i, suppresses it if j is kept.
    over = torch.triu((iou > threshold) & (g[:, None] == g[None, :]), diagonal=1)
    keep = torch.ones(order.shape[0], dtype=torch.bool, device=boxes.device)
    # Greedy NMS is the unique fixed point of keep[i] = no kept j before i overlaps i; iterating
    # from all-kept settles it in (longest suppression chain + 1) rounds.
    while True:
        settled = ~(over & keep[:, None]).any(0)
        if torch.equal(settled, keep):
            return order[keep]
        keep = settled


def batched_nms(torch, t, s, sym):
    kept = _greedy(torch, t["boxes"], t["scores"], t["idxs"], s["iou_threshold"])
    t["keep"].fill_(-1)
    t["keep"][: kept.shape[0]] = kept
    t["num_kept"].fill_(kept.shape[0])


def check(torch, t, s):
    """keep as the task lays it out: the greedy's list, then -1."""
    kept = _greedy(torch, t["boxes"], t["scores"], t["idxs"], s["iou_threshold"])
    out = torch.full_like(t["scores"], -1.0)
    out[: kept.shape[0]] = kept.float()
    return out


def torchvision_batched_nms(torch, t, s, sym):
    try:
        import torchvision
    except ImportError as error:
        raise RuntimeError("torchvision is not installed on this machine (pip install torchvision "
                           "matching this PyTorch): the torchvision anchor cannot run") from error
    kept = torchvision.ops.batched_nms(t["boxes"], t["scores"], t["idxs"], s["iou_threshold"])
    out = torch.full_like(t["idxs"], -1)
    out[: kept.shape[0]] = kept
    return out
