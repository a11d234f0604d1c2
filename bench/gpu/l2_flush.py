"""The L2 flush bench/gpu/parity.py runs between timed calls: a Triton kernel with a name of its
own (a flush made of a library reduction shares its kernel's name with reductions inside the
calls timed, and the profile could not be split into calls at it). Imported on the GPU machine
only (it needs Triton)."""
import triton
import triton.language as tl


@triton.jit
def crucible_parity_l2_flush(src, dst, n, BLOCK: tl.constexpr):
    # Reads its block of src and stores one partial sum: a read of the whole buffer that the
    # compiler cannot drop, and almost no writes (crucible's own flush reads, too).
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    values = tl.load(src + offsets, mask=offsets < n, other=0)
    tl.store(dst + tl.program_id(0), tl.sum(values, axis=0))


def make_flush(torch, device, block=4096):
    """A function that reads twice the L2 size through crucible_parity_l2_flush."""
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    count = 2 * l2 // 4 + 1
    src = torch.ones(count, dtype=torch.int32, device=device)
    dst = torch.empty(triton.cdiv(count, block), dtype=torch.int32, device=device)

    def flush():
        crucible_parity_l2_flush[(dst.numel(),)](src, dst, count, BLOCK=block)

    return flush
