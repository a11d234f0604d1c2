"""llm/fp8_scaled_linear's parity anchor: torch._scaled_mm with row-wise scales (per-token a
scales [M, 1], per-channel b scales [1, N]), bf16 out, without fast accumulation.

Signature of the calls: tasks/llm/rms_norm/parity.py. This is a "kernel" anchor: a named library
call, timed eagerly, that returns its output (no copy timed) after that output is held to
`check`. On Hopper PyTorch dispatches row-wise scaling either to cuBLASLt's outer-vector scale
mode (the reference's own path) or to its row-wise CUTLASS kernel, depending on the build.
vLLM's cutlass_scaled_mm runs CUTLASS with fp8 fast accumulation, which is outside this task's
fp32-accumulation contract (task.toml, [tolerance]); it is not an anchor here.
"""


def check(torch, t, s):
    """The scaled product in fp32 from the fp8 operands: what the library's output is held to
    before it is timed."""
    product = t["a"].float() @ t["b"].float().t()
    return product * t["a_scales"].float() * t["b_scales"].float().t()


def scaled_mm_rowwise(torch, t, s, sym):
    # b is [N, K] row-major, so b.t() is the column-major [K, N] operand _scaled_mm requires;
    # the channel scales go in as a [1, N] row.
    return torch._scaled_mm(t["a"], t["b"].t(), scale_a=t["a_scales"],
                            scale_b=t["b_scales"].t(), out_dtype=torch.bfloat16,
                            use_fast_accum=False)
