"""recsys/csr_spmm's parity anchors: cuSPARSE SpMM through torch.sparse.mm on a CSR tensor (the
call LightGCN's PyTorch code makes each layer), and the gather / index_add_ composite (eager and
torch.compile).

Signature and contract: tasks/llm/rms_norm/parity.py; a "kernel" anchor returns its output,
held to `check` before it is timed; `prepare` runs once per input copy, untimed.
"""

# The skew of every timed case's power_law_offsets generator (task.toml).
SKEW = 0.5


def _rank_size_integral(torch, x, skew):
    if skew == 1.0:
        return torch.log1p(x)
    return (torch.pow(1.0 + x, 1.0 - skew) - 1.0) / (1.0 - skew)


def prepare(torch, t, s, sym):
    """row_ptr from the power_law_offsets model (the benchmark fills generators it does not know
    with zeros), the CSR tensor over it, and each nonzero's row for the composite."""
    rows, nnz = sym["num_nodes"], sym["nnz"]
    device = t["emb"].device
    start = int(torch.randint(rows, (1,)).item())
    i = torch.arange(rows + 1, device=device, dtype=torch.float64)
    end = start + i
    whole = _rank_size_integral(torch, torch.tensor(float(rows), dtype=torch.float64), SKEW)
    before = _rank_size_integral(torch, torch.tensor(float(start), dtype=torch.float64), SKEW)
    covered = torch.where(end <= rows,
                          _rank_size_integral(torch, end, SKEW) - before,
                          whole - before + _rank_size_integral(torch, end - rows, SKEW))
    offsets = torch.floor(nnz * covered / whole).clamp(0, nnz).to(torch.int32)
    offsets[0] = 0
    offsets[rows] = nnz
    t["row_ptr"].copy_(offsets)
    t["_adj"] = torch.sparse_csr_tensor(t["row_ptr"], t["col_idx"], t["values"],
                                        size=(rows, rows))
    counts = (t["row_ptr"][1:] - t["row_ptr"][:-1]).to(torch.int64)
    t["_rows"] = torch.repeat_interleave(torch.arange(rows, device=device), counts)


def check(torch, t, s):
    """The products summed in float64, as fp32 [num_nodes, dim]: what a kernel anchor is held
    to."""
    emb = t["emb"].double()
    out = torch.zeros_like(emb)
    out.index_add_(0, t["_rows"], t["values"].double()[:, None] * emb[t["col_idx"].long()])
    return out.float()


def sparse_csr_mm(torch, t, s, sym):
    return torch.sparse.mm(t["_adj"], t["emb"])


def spmm_index_add(torch, t, s, sym):
    contrib = t["values"][:, None] * t["emb"][t["col_idx"].long()]
    out = t["out"]
    out.zero_()
    out.index_add_(0, t["_rows"], contrib)
