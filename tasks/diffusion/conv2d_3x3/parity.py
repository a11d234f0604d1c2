"""diffusion/conv2d_3x3's parity anchors: PyTorch conv2d(padding=1) on channels_last bf16 views of
the NHWC tensors (cuDNN), as a composite writing out and as the library call alone.

Signature and contract: tasks/llm/rms_norm/parity.py; a "kernel" anchor returns its output,
held to `check` before it is timed.
"""


def _views(t):
    # NCHW views with channels_last strides, no copy: input [N, C_in, H, W] and the weight
    # [C_out, C_in, 3, 3] (a channels_last Conv2d weight is [C_out, 3, 3, C_in] in memory).
    return t["input"].permute(0, 3, 1, 2), t["weight"].permute(0, 3, 1, 2)


def _conv(torch, t):
    x, w = _views(t)
    return torch.nn.functional.conv2d(x, w, t["bias"], stride=1, padding=1)


def check(torch, t, s):
    """The convolution in fp32, NHWC like out."""
    x, w = _views(t)
    y = torch.nn.functional.conv2d(x.float(), w.float(), t["bias"].float(), padding=1)
    return y.permute(0, 2, 3, 1)


def cudnn_conv2d(torch, t, s, sym):
    # conv2d's channels_last result seen as NHWC: a view, nothing copied.
    return _conv(torch, t).permute(0, 2, 3, 1)


def conv2d_3x3(torch, t, s, sym):
    t["out"].copy_(_conv(torch, t).permute(0, 2, 3, 1))
