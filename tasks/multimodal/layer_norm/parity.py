"""multimodal/layer_norm's parity anchors: torch.nn.functional.layer_norm (aten native_layer_norm
eagerly, inductor's persistent reduction under torch.compile), and FlashInfer's LayerNorm kernel.

Signature and contract: tasks/llm/rms_norm/parity.py; `prepare`, `check` and a kernel anchor's
return: tasks/llm/paged_decode_attention/parity.py.
"""


def layer_norm(torch, t, s, sym):
    x = t["input"]
    t["out"].copy_(torch.nn.functional.layer_norm(x, (x.shape[-1],), t["weight"], t["bias"],
                                                  s["epsilon"]))


def prepare(torch, t, s, sym):
    """FlashInfer's LayerNorm takes its weight and bias in fp32: converted once (untimed)."""
    t["_gamma"] = t["weight"].float()
    t["_beta"] = t["bias"].float()


def check(torch, t, s):
    """The LayerNorm in float64 (biased variance): what a library kernel's output is held to."""
    x = t["input"].double()
    mean = x.mean(-1, keepdim=True)
    var = (x - mean).pow(2).mean(-1, keepdim=True)
    return (x - mean) * torch.rsqrt(var + s["epsilon"]) * t["weight"].double() + t["bias"].double()


def flashinfer_layernorm(torch, t, s, sym):
    # flashinfer.norm.layernorm: bf16 rows, fp32 weight and bias (its CUDA kernel: the CuTe-DSL
    # one needs nvidia-cutlass-dsl, which the GPU machine does not have).
    import flashinfer.norm  # carried to the GPU machine only; the harness names it when absent

    return flashinfer.norm.layernorm(t["input"], t["_gamma"], t["_beta"], s["epsilon"])
