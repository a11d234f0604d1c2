"""ssm/causal_conv1d_fwd's parity anchor: vLLM causal_conv1d_fn as a PyTorch composite.

Signature of the calls: tasks/llm/rms_norm/parity.py. vLLM's own kernel (Triton) is not
installable on the GPU machine, so the anchor is the op in PyTorch: every token's four-input
window gathered from one buffer holding the initial states and x, eager and under
torch.compile. Sequence bookkeeping stays on the device (no host synchronisation).
"""


def causal_conv1d_fwd(torch, t, s, sym):
    x, weight, states = t["x"], t["weight"], t["conv_states"]
    tokens, dim = x.shape
    device = x.device
    bounds = t["query_start_loc"].long()
    lines = t["cache_indices"].long()
    seqs = lines.numel()
    lengths = bounds[1:] - bounds[:-1]
    seq = torch.repeat_interleave(torch.arange(seqs, device=device), lengths,
                                  output_size=tokens)
    token = torch.arange(tokens, device=device)
    pos = token - bounds[:-1][seq]
    initial = states[lines] * t["has_initial_state"][:, None, None].to(states.dtype)
    # buffer rows: seqs * 3 initial-state rows, then the tokens.
    buffer = torch.cat([initial.reshape(seqs * 3, dim), x])
    offsets = torch.arange(-3, 1, device=device)
    back = pos[:, None] + offsets[None, :]
    index = torch.where(back >= 0, seqs * 3 + token[:, None] + offsets[None, :],
                        seq[:, None] * 3 + 3 + back)
    windows = buffer[index].float()
    y = (windows * weight.float().t()[None]).sum(1) + t["bias"].float()
    if s["silu_activation"]:
        y = torch.nn.functional.silu(y)
    t["out"].copy_(y.to(x.dtype))
    last = lengths[:, None] + offsets[None, :3]
    final = torch.where(last >= 0, seqs * 3 + bounds[:-1, None] + last,
                        torch.arange(seqs, device=device)[:, None] * 3 + 3 + last)
    states[lines] = buffer[final]
