"""edge/depthwise_conv2d's parity anchors: PyTorch conv2d with groups = channels on channels_last
fp16 views of the NHWC tensors (cuDNN), as a composite writing out and as the library call alone.

Signature and contract: tasks/llm/rms_norm/parity.py; a "kernel" anchor returns its output,
held to `check` before it is timed.
"""


def _conv(torch, t, s):
    x = t["input"].permute(0, 3, 1, 2)  # NCHW view with channels_last strides: no copy
    c, k = t["weight"].shape[0], t["weight"].shape[-1]
    w = t["weight"].view(c, 1, k, k)
    return torch.nn.functional.conv2d(x, w, t["bias"], stride=1, padding=k // 2, groups=c)


def check(torch, t, s):
    """The convolution in fp32, NHWC like out."""
    x = t["input"].permute(0, 3, 1, 2).float()
    c, k = t["weight"].shape[0], t["weight"].shape[-1]
    y = torch.nn.functional.conv2d(x, t["weight"].view(c, 1, k, k).float(), t["bias"].float(),
                                   padding=k // 2, groups=c)
    return y.permute(0, 2, 3, 1)


def cudnn_conv2d(torch, t, s, sym):
    # conv2d's channels_last result seen as NHWC: a view, nothing copied.
    return _conv(torch, t, s).permute(0, 2, 3, 1)


def depthwise_conv2d(torch, t, s, sym):
    t["out"].copy_(_conv(torch, t, s).permute(0, 2, 3, 1))
