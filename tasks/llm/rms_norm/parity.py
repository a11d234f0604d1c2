"""llm/rms_norm's parity anchor: vLLM rms_norm as a PyTorch composite (the model to copy).

bench/gpu/parity.py times this task's reference against the functions that task.toml's [parity]
table names, on the same shapes (bench/README.md). Every function takes:

    torch  the torch module (this file imports nothing, so it loads without PyTorch)
    t      the call's tensors by manifest name, on the GPU, filled from the case's generators
    s      the case's scalars by name (defaults filled in)
    sym    the case's symbols by name

and, like the production call, writes the `out` and `inout` tensors of `t` in place. A
"composite" anchor is timed eagerly and under torch.compile; the faster is the library time.
"""


def rms_norm(torch, t, s, sym):
    x = t["input"].float()
    t["out"].copy_((x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + s["epsilon"])).to(
        t["input"].dtype) * t["weight"])


def check(torch, t, s):
    """The normalised rows in fp32 (one rounding to the input's dtype, as vLLM's kernel): what a
    library kernel's output is held to before it is timed."""
    x = t["input"].float()
    y = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + s["epsilon"])).to(t["input"].dtype)
    return y.float() * t["weight"].float()


def flashinfer_rmsnorm(torch, t, s, sym):
    # FlashInfer's RMSNorm kernel (the norm SGLang and vLLM's FlashInfer paths call).
    import flashinfer  # carried to the GPU machine only; the harness names it when absent
    return flashinfer.norm.rmsnorm(t["input"], t["weight"], s["epsilon"], out=t["out"])
