"""recsys/embedding_bag's parity anchors: PyTorch's CUDA embedding_bag kernel over the tables as
one weight, and the gather-and-sum composite (eager and torch.compile).

Signature and contract: tasks/llm/rms_norm/parity.py; a "kernel" anchor returns its output,
held to `check` before it is timed; `prepare` runs once per input copy, untimed.
"""


def prepare(torch, t, s, sym):
    """The tables as one [num_tables * num_rows, dim] weight and the ids offset into it, bags in
    the output's order (sample-major, then table), as embedding_bag's 2-D input wants them."""
    tables, rows = sym["num_tables"], sym["num_rows"]
    base = torch.arange(tables, device=t["indices"].device, dtype=torch.int64) * rows
    ids = t["indices"] + base[:, None, None]  # [tables, batch, pooling]
    t["_ids"] = ids.permute(1, 0, 2).reshape(-1, sym["pooling"]).contiguous()
    t["_weight"] = t["weights"].view(tables * rows, sym["dim"])


def check(torch, t, s):
    """The sums in fp32, [batch, num_tables, dim] like out: what a kernel anchor is held to."""
    return t["_weight"][t["_ids"]].float().sum(dim=1).view(t["out"].shape)


def embedding_bag_kernel(torch, t, s, sym):
    # [batch * num_tables, dim] in the output's order, seen as out's shape (a view).
    return torch.nn.functional.embedding_bag(t["_ids"], t["_weight"], mode="sum").view(
        t["out"].shape)


def embedding_bag_composite(torch, t, s, sym):
    rows = t["weights"][torch.arange(sym["num_tables"], device=t["indices"].device)[:, None, None],
                        t["indices"]]  # [tables, batch, pooling, dim]
    t["out"].copy_(rows.float().sum(dim=2).permute(1, 0, 2))
