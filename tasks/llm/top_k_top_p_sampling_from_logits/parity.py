"""llm/top_k_top_p_sampling_from_logits's parity anchor: FlashInfer's fused sampler where it
imports, else vLLM's native top-k/top-p sampler as a PyTorch composite.

Signature and contract: tasks/llm/rms_norm/parity.py. FlashInfer draws its own uniforms (Philox)
instead of reading uniform_samples, so its tokens differ from this task's: the benchmark's kernel
anchors are held to an exact check, which a sampler with its own draws cannot meet, so FlashInfer
is timed through the composite slot (its eager time is its own kernel's; torch.compile leaves a
custom op as it is).
"""


def _flashinfer(torch, t):
    if not t["logits"].is_cuda:
        return None
    try:
        import flashinfer.sampling as sampling  # noqa: PLC0415 (optional, GPU machine only)
    except Exception:  # noqa: BLE001 (absent or unbuildable: fall back to the composite)
        return None
    return sampling


def torch_sampling(torch, t, s, sym):
    logits = t["logits"].float()
    vocab = logits.shape[1]
    k = t["top_k"].long()
    k = torch.where((k <= 0) | (k >= vocab), torch.full_like(k, vocab), k)
    p = t["top_p"].float().unsqueeze(1)
    ordered, order = logits.sort(dim=-1)  # ascending, as vLLM's apply_top_k_top_p
    kth = ordered.gather(1, (vocab - k).unsqueeze(1))
    ordered = ordered.masked_fill(ordered < kth, float("-inf"))
    cumulative = ordered.softmax(dim=-1).cumsum(dim=-1)
    drop = cumulative <= 1 - p
    drop[:, -1] = False
    ordered = ordered.masked_fill(drop, float("-inf"))
    filtered = torch.empty_like(logits).scatter_(1, order, ordered)
    cdf = filtered.softmax(dim=-1).cumsum(dim=-1)
    target = t["uniform_samples"].float().unsqueeze(1) * cdf[:, -1:]
    token = (cdf <= target).sum(dim=-1).clamp(max=vocab - 1)
    t["samples"].copy_(token.to(torch.int32))


def sampling(torch, t, s, sym):
    flashinfer = _flashinfer(torch, t)
    if flashinfer is None:
        torch_sampling(torch, t, s, sym)
        return
    token = flashinfer.top_k_top_p_sampling_from_logits(
        t["logits"], t["top_k"], t["top_p"], filter_apply_order="top_k_first",
        deterministic=True)
    t["samples"].copy_(token.to(torch.int32))
