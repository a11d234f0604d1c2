"""multimodal/layer_norm's parity anchor: torch.nn.functional.layer_norm (aten native_layer_norm
eagerly, inductor's persistent reduction under torch.compile).

Signature and contract: tasks/llm/rms_norm/parity.py.
"""


def layer_norm(torch, t, s, sym):
    x = t["input"]
    t["out"].copy_(torch.nn.functional.layer_norm(x, (x.shape[-1],), t["weight"], t["bias"],
                                                  s["epsilon"]))
