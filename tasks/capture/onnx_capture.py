"""Records real inputs of crucible's vision ops from trained ONNX models that ship inside PyPI
wheels, run on CPU with onnxruntime (docs/capture.md, "Vision models from wheels").

    python3 -m tasks.capture.onnx_capture        # RapidOCR's PP-OCRv4 -> tasks/capture/cases/pp_ocrv4/

The default source is `rapidocr_onnxruntime` (Apache-2.0), whose wheel carries PaddleOCR's
PP-OCRv4 text detector (a DB network: a PP-LCNet backbone, a feature pyramid of 3x3
convolutions) and text recogniser (SVTR-LCNet: convolutions, then two transformer blocks whose
LayerNorms are exported as ReduceMean / Sub / Pow / Sqrt / Div / Mul / Add chains). The tool
renders lines of text with Pillow's bundled font, feeds them as RapidOCR preprocesses images
((pixel / 255 - 0.5) / 0.5, NCHW), and records two ops:

- `layer_norm`: every LayerNorm of the recogniser: its input [tokens, 120], weight, bias and
  the model's output, with epsilon (multimodal/layer_norm's interface);
- `conv2d_3x3`: every dense 3x3 stride-1 padding-1 convolution of the detector: input and
  output in NHWC, the weight as [out, 3, 3, in] (diffusion/conv2d_3x3's interface), and the
  bias (zeros where the layer has none).

Values are stored as bf16, rounded to nearest from the model's fp32, the dtype the tasks take.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch

from .safetensors_io import SAFETENSORS_TO_CRUCIBLE, TORCH_TO_SAFETENSORS, write_safetensors

TOOL_VERSION = "1.0.0"
FORMAT = "crucible-capture/1"
HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "rapidocr_onnxruntime"
DETECTOR = "models/ch_PP-OCRv4_det_infer.onnx"
RECOGNISER = "models/ch_PP-OCRv4_rec_infer.onnx"
# Lines rendered for the recogniser (one 48 x 320 crop each, as RapidOCR's rec_img_shape) and
# the first three, together, into the detector's page.
LINES = ("Invoice 2026-12-04  No. 5521", "Total: 1,284.50 EUR", "Qty 12 x 3.75 kg",
         "Thank you for your order!")
PAGE = (96, 224)  # detector input height, width: multiples of 32, as DB networks need
PAGE_LINES = 3


@dataclass
class Recorded:
    """One op call: its tensors (name -> fp32 array, in the task's layout) and scalars."""

    name: str
    layer: int  # the op's ordinal in the model's graph order
    point: str  # the ONNX node that starts it
    nodes: List[str]
    tensors: Dict[str, np.ndarray]
    scalars: Dict[str, float] = field(default_factory=dict)
    notes: Dict[str, str] = field(default_factory=dict)


def packaged_file(package: str, relative: str) -> str:
    """The path of `relative` inside an installed package, found without importing it (RapidOCR's
    __init__ imports OpenCV, which the capture does not need)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {package!r} is not installed (scripts/setup-extras "
                                "installs it)")
    path = os.path.join(list(spec.submodule_search_locations)[0], relative)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{package} has no {relative}")
    return path


def sha256_of(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def render(lines: Sequence[str], height: int, width: int, size: int) -> np.ndarray:
    """Black text on white, one line per `height / len(lines)` band, as uint8 RGB [h, w, 3]."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=size)
    band = height // len(lines)
    for i, line in enumerate(lines):
        draw.text((6, i * band + (band - size) // 2), line, fill="black", font=font)
    return np.asarray(image)


def normalise(pixels: np.ndarray) -> np.ndarray:
    """RapidOCR's preprocessing of both models: (pixel / 255 - 0.5) / 0.5, as NCHW float32."""
    x = (pixels.astype(np.float32) / 255.0 - 0.5) / 0.5
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2) if x.ndim == 4 else x.transpose(2, 0, 1)[None])


class Graph:
    """An ONNX graph's constants (initialisers and Constant nodes), producers and consumers."""

    def __init__(self, model):
        from onnx import numpy_helper

        self.model = model
        self.constants: Dict[str, np.ndarray] = {
            t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        self.producer = {}
        self.consumers: Dict[str, list] = {}
        for node in model.graph.node:
            if node.op_type == "Constant":
                for attribute in node.attribute:
                    if attribute.name == "value":
                        self.constants[node.output[0]] = numpy_helper.to_array(attribute.t)
            for output in node.output:
                self.producer[output] = node
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)

    def only_consumer(self, name: str, op_type: str):
        users = [n for n in self.consumers.get(name, []) if n.op_type == op_type]
        if len(users) != 1:
            raise ValueError(f"{name}: expected one {op_type} consumer, found {len(users)}")
        return users[0]

    def constant_operand(self, node) -> np.ndarray:
        values = [self.constants[i] for i in node.input if i in self.constants]
        if len(values) != 1:
            raise ValueError(f"{node.name}: expected one constant operand, found {len(values)}")
        return values[0]


@dataclass
class LayerNormSite:
    nodes: List[str]
    input: str
    output: str
    weight: np.ndarray
    bias: np.ndarray
    epsilon: float


def layer_norms(graph: Graph) -> List[LayerNormSite]:
    """Every LayerNorm exported as mean = ReduceMean(x); d = x - mean; var = ReduceMean(d ^ 2);
    y = d / sqrt(var + eps) * weight + bias, reduced over the last axis."""
    sites = []
    for node in graph.model.graph.node:
        if node.op_type != "ReduceMean":
            continue
        x = node.input[0]
        subs = [n for n in graph.consumers.get(x, [])
                if n.op_type == "Sub" and n.input[1] == node.output[0]]
        if not subs:
            continue  # the variance's ReduceMean, or a mean that is not centred on
        centred = subs[0].output[0]
        divide = graph.only_consumer(centred, "Div")
        root = graph.producer[divide.input[1]]
        shift = graph.producer[root.input[0]]
        variance = graph.producer[[i for i in shift.input if i not in graph.constants][0]]
        square = graph.producer[variance.input[0]]
        if (root.op_type, shift.op_type, variance.op_type, square.op_type) != (
                "Sqrt", "Add", "ReduceMean", "Pow") or square.input[0] != centred:
            raise ValueError(f"{node.name}: not a LayerNorm chain")
        scale = graph.only_consumer(divide.output[0], "Mul")
        offset = graph.only_consumer(scale.output[0], "Add")
        sites.append(LayerNormSite(
            nodes=[node.name, subs[0].name, square.name, variance.name, shift.name, root.name,
                   divide.name, scale.name, offset.name],
            input=x, output=offset.output[0], weight=graph.constant_operand(scale),
            bias=graph.constant_operand(offset),
            epsilon=float(graph.constant_operand(shift))))
    return sites


@dataclass
class ConvSite:
    node: str
    input: str
    output: str
    weight: np.ndarray  # [out, in, 3, 3]
    bias: Optional[np.ndarray]


def dense_3x3_convs(graph: Graph) -> List[ConvSite]:
    """Every Conv with a 3x3 kernel, group 1, stride 1, dilation 1 and one pixel of padding."""
    from onnx import helper

    sites = []
    for node in graph.model.graph.node:
        if node.op_type != "Conv":
            continue
        attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        weight = graph.constants.get(node.input[1])
        if (weight is None or weight.shape[2:] != (3, 3) or attributes.get("group", 1) != 1
                or list(attributes.get("strides", [1, 1])) != [1, 1]
                or list(attributes.get("dilations", [1, 1])) != [1, 1]
                or list(attributes.get("pads", [0, 0, 0, 0])) != [1, 1, 1, 1]):
            continue
        bias = graph.constants.get(node.input[2]) if len(node.input) > 2 else None
        sites.append(ConvSite(node.name, node.input[0], node.output[0], weight, bias))
    return sites


def run_exposing(model, names: Sequence[str], feed: np.ndarray) -> Dict[str, np.ndarray]:
    """Runs `model` on CPU with the intermediate values `names` added as graph outputs."""
    import onnx
    import onnxruntime

    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    present = {o.name for o in exposed.graph.output}
    for name in names:
        if name not in present:
            exposed.graph.output.append(
                onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1  # one thread: the same summation order on every run
    session = onnxruntime.InferenceSession(exposed.SerializeToString(), options,
                                           providers=["CPUExecutionProvider"])
    input_name = session.get_inputs()[0].name
    outputs = session.run(list(names), {input_name: feed})
    return dict(zip(names, outputs))


def capture_layer_norms(model, lines: Sequence[str]) -> List[Recorded]:
    crops = np.stack([render([line], 48, 320, 28) for line in lines])
    sites = layer_norms(Graph(model))
    values = run_exposing(model, [n for s in sites for n in (s.input, s.output)],
                          normalise(crops))
    recorded = []
    for i, site in enumerate(sites):
        x, y = values[site.input], values[site.output]
        width = x.shape[-1]
        recorded.append(Recorded(
            name=f"rec.norm{i}", layer=i, point=site.nodes[0], nodes=site.nodes,
            tensors={"input": x.reshape(-1, width), "weight": site.weight.reshape(width),
                     "bias": site.bias.reshape(width), "out": y.reshape(-1, width)},
            scalars={"epsilon": site.epsilon}))
    return recorded


def capture_convs(model, lines: Sequence[str], page: Sequence[int]) -> List[Recorded]:
    pixels = render(lines[:PAGE_LINES], page[0], page[1], 20)
    sites = dense_3x3_convs(Graph(model))
    values = run_exposing(model, [n for s in sites for n in (s.input, s.output)],
                          normalise(pixels))
    recorded = []
    for i, site in enumerate(sites):
        out_channels = site.weight.shape[0]
        bias = site.bias if site.bias is not None else np.zeros(out_channels, np.float32)
        recorded.append(Recorded(
            name=f"det.conv{i}", layer=i, point=site.node, nodes=[site.node],
            tensors={"input": values[site.input].transpose(0, 2, 3, 1),
                     "weight": site.weight.transpose(0, 2, 3, 1),
                     "bias": bias.astype(np.float32),
                     "out": values[site.output].transpose(0, 2, 3, 1)},
            notes={} if site.bias is not None else {"bias": "zeros: the layer has no bias"}))
    return recorded


def bf16(array: np.ndarray) -> torch.Tensor:
    """`array` rounded to nearest bf16 (ties to even), row-major."""
    return torch.from_numpy(np.array(array, dtype=np.float32, order="C")).to(torch.bfloat16)


def write_group(out_dir: str, stem: str, op: str, calls: List[Recorded],
                source: Dict[str, object], inputs: Dict[str, object], command: str) -> str:
    """<stem>.safetensors (tensors named "<call>/<arg>") and <stem>.json, its provenance."""
    tensors: Dict[str, torch.Tensor] = {}
    docs = []
    for call in calls:
        names = []
        for arg, value in call.tensors.items():
            name = f"{call.name}/{arg}"
            tensors[name] = bf16(value)
            names.append({"name": name, "arg": arg,
                          "role": "out" if arg == "out" else "in",
                          "dtype": SAFETENSORS_TO_CRUCIBLE[TORCH_TO_SAFETENSORS[torch.bfloat16]],
                          "shape": list(tensors[name].shape)})
        docs.append({"name": call.name, "layer": call.layer, "point": call.point,
                     "onnx_nodes": call.nodes, "scalars": call.scalars,
                     **({"notes": call.notes} if call.notes else {}), "tensors": names})
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, stem + ".safetensors")
    digests = write_safetensors(path, tensors, {"format": "pt", "crucible": FORMAT})
    for doc in docs:
        for t in doc["tensors"]:
            t["bytes"], t["sha256"] = digests[t["name"]]
    import onnxruntime
    import PIL

    provenance = {
        "format": FORMAT,
        "tool": {"name": "crucible tasks/capture (ONNX)", "version": TOOL_VERSION,
                 "onnxruntime": onnxruntime.__version__, "pillow": PIL.__version__,
                 "device": "cpu, 1 thread"},
        "model": source,
        "inputs": {**inputs, "command": command},
        "phase": "forward",  # one forward pass of the model (no prefill or decode steps)
        "step": None,
        "op": op,
        "file": stem + ".safetensors",
        "values": "bf16, rounded to nearest from the model's fp32 values; `out` is the model's "
                  "own output of the op (fp32, rounded), not a re-computation",
        "cases": docs,
    }
    with open(os.path.join(out_dir, stem + ".json"), "w") as f:
        json.dump(provenance, f, indent=1)
        f.write("\n")
    return path


def describe(package: str, relative: str, role: str) -> Dict[str, object]:
    path = packaged_file(package, relative)
    meta = importlib.metadata.metadata(package)
    return {"name": f"PP-OCRv4 {role}", "package": package,
            "package_version": importlib.metadata.version(package),
            "package_license": meta.get("License") or "", "file": relative,
            "sha256": sha256_of(path), "bytes": os.path.getsize(path),
            "origin": "PaddleOCR PP-OCRv4 (Apache-2.0), converted to ONNX by RapidOCR"}


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="python3 -m tasks.capture.onnx_capture",
        description="Record LayerNorm and 3x3 convolution calls of RapidOCR's PP-OCRv4 models "
        "on rendered text (docs/capture.md).")
    p.add_argument("--out", default=os.path.join(HERE, "cases", "pp_ocrv4"),
                   help="output folder (default: tasks/capture/cases/pp_ocrv4)")
    p.add_argument("--package", default=PACKAGE, help="the wheel holding the models")
    args = p.parse_args(argv)
    import onnx

    command = "python3 -m tasks.capture.onnx_capture" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    recogniser = onnx.load(packaged_file(args.package, RECOGNISER))
    detector = onnx.load(packaged_file(args.package, DETECTOR))
    written = [
        write_group(args.out, "rec.layer_norm", "layer_norm",
                    capture_layer_norms(recogniser, LINES),
                    describe(args.package, RECOGNISER, "text recogniser (SVTR-LCNet)"),
                    {"images": "each line of `lines` rendered alone, black on white, 48 x 320, "
                               "Pillow's bundled font at 28 px; one batch",
                     "lines": list(LINES)}, command),
        write_group(args.out, "det.conv2d_3x3", "conv2d_3x3",
                    capture_convs(detector, LINES, PAGE),
                    describe(args.package, DETECTOR, "text detector (DB, PP-LCNet)"),
                    {"images": f"`lines` rendered on one white page of {PAGE[0]} x {PAGE[1]}, "
                               "Pillow's bundled font at 20 px",
                     "lines": list(LINES[:PAGE_LINES])}, command),
    ]
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
