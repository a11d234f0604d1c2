"""ssm/causal_conv1d_update's parity anchor: vLLM causal_conv1d_update as a PyTorch composite.

Signature of the calls: tasks/llm/rms_norm/parity.py. vLLM's own kernel (Triton) is not
installable on the GPU machine, so the anchor is the op in PyTorch, eager and under
torch.compile: the named state lines gathered, convolved with the new token, the shifted lines
scattered back. Padding entries (-1) are masked on the device (no host synchronisation).
"""


def causal_conv1d_update(torch, t, s, sym):
    x, states = t["x"], t["conv_states"]
    lines = t["conv_state_indices"].long()
    real = lines >= 0
    safe = torch.where(real, lines, torch.zeros_like(lines))
    window = torch.cat([states[safe], x[:, None, :]], dim=1)  # [seqs, 4, dim]
    y = (window.float() * t["weight"].float().t()[None]).sum(1) + t["bias"].float()
    if s["silu_activation"]:
        y = torch.nn.functional.silu(y)
    t["out"].copy_(torch.where(real[:, None], y.to(x.dtype), x))
    # Scatter the shifted lines back. A padding entry has no line: it rewrites the first real
    # entry's line with that entry's own new values (identical duplicate writes), which keeps
    # the scatter on the device without a host-synchronising mask.
    first = torch.argmax(real.int())
    shifted = window[:, 1:]
    target = torch.where(real, lines, lines[first])
    values = torch.where(real[:, None, None], shifted, shifted[first][None])
    states.index_copy_(0, target, values)
