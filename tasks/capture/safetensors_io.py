"""Safetensors files written and read by hand: 8-byte little-endian header length, a JSON header,
then the raw tensor bytes. No package beyond the standard library and torch is needed.

Layout written here (the public format, https://github.com/huggingface/safetensors):
    u64 LE  N
    N bytes JSON {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ...,
                  "__metadata__": {str: str}} padded with spaces to a multiple of 8
    data    tensors back to back, offsets relative to the first byte after the header
"""

from __future__ import annotations

import hashlib
import json
import struct
from typing import Dict, List, Mapping, Optional, Tuple

import torch

# torch dtype <-> safetensors dtype name <-> crucible manifest name (core/dtype.hpp).
TORCH_TO_SAFETENSORS = {
    torch.bfloat16: "BF16",
    torch.float16: "F16",
    torch.float32: "F32",
    torch.float64: "F64",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.int16: "I16",
    torch.int32: "I32",
    torch.int64: "I64",
    torch.bool: "BOOL",
    torch.float8_e4m3fn: "F8_E4M3",
}
SAFETENSORS_TO_TORCH = {name: dtype for dtype, name in TORCH_TO_SAFETENSORS.items()}
SAFETENSORS_TO_CRUCIBLE = {
    "BF16": "bf16",
    "F16": "f16",
    "F32": "f32",
    "F64": "f64",
    "I8": "i8",
    "U8": "u8",
    "I16": "i16",
    "I32": "i32",
    "I64": "i64",
    "BOOL": "bool",
    "F8_E4M3": "fp8_e4m3",
}
# The same bit width, for moving raw bytes through numpy-free paths.
_RAW_VIEW = {2: torch.int16, 4: torch.int32, 8: torch.int64, 1: torch.uint8}

# Refuse headers above this size when reading (the reference implementation's limit).
MAX_HEADER_BYTES = 100 << 20


def tensor_bytes(tensor: torch.Tensor) -> bytes:
    """The little-endian bytes of a CPU copy of `tensor`, row-major."""
    t = tensor.detach().to("cpu").contiguous()
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)  # numpy has no bfloat16; the bits are what is stored
    if t.dtype == torch.float8_e4m3fn:
        t = t.view(torch.uint8)  # nor float8
    return t.numpy().tobytes()


def write_safetensors(
    path: str, tensors: Mapping[str, torch.Tensor], metadata: Optional[Mapping[str, str]] = None
) -> Dict[str, Tuple[int, str]]:
    """Writes `tensors` (in the mapping's order) to `path`. Returns, per tensor name, the byte
    count and sha256 (hex) of its stored bytes, so a caller describing the file need not
    serialise the tensors a second time."""
    header: Dict[str, object] = {}
    blobs: List[bytes] = []
    digests: Dict[str, Tuple[int, str]] = {}
    offset = 0
    for name, tensor in tensors.items():
        if tensor.dtype not in TORCH_TO_SAFETENSORS:
            raise ValueError(f"tensor {name!r}: dtype {tensor.dtype} has no safetensors name")
        blob = tensor_bytes(tensor)
        header[name] = {
            "dtype": TORCH_TO_SAFETENSORS[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + len(blob)],
        }
        blobs.append(blob)
        digests[name] = (len(blob), hashlib.sha256(blob).hexdigest())
        offset += len(blob)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    return digests


def read_safetensors(path: str) -> Tuple[Dict[str, torch.Tensor], Dict[str, str]]:
    """Tensors (name -> CPU tensor, header order) and the __metadata__ map of `path`."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: shorter than the 8-byte header length")
    (header_len,) = struct.unpack("<Q", data[:8])
    if header_len > MAX_HEADER_BYTES or 8 + header_len > len(data):
        raise ValueError(f"{path}: header length {header_len} does not fit the file")
    header = json.loads(data[8 : 8 + header_len].decode("utf-8"))
    body = memoryview(data)[8 + header_len :]
    metadata = header.pop("__metadata__", {}) or {}
    tensors: Dict[str, torch.Tensor] = {}
    for name, info in header.items():
        dtype = SAFETENSORS_TO_TORCH.get(info["dtype"])
        if dtype is None:
            raise ValueError(f"{path}: tensor {name!r}: unsupported dtype {info['dtype']!r}")
        begin, end = info["data_offsets"]
        shape = [int(d) for d in info["shape"]]
        if not 0 <= begin <= end <= len(body):
            raise ValueError(f"{path}: tensor {name!r}: offsets outside the data")
        raw = bytes(body[begin:end])
        elem = torch.empty((), dtype=dtype).element_size()
        count = 1
        for d in shape:
            count *= d
        if count * elem != end - begin:
            raise ValueError(f"{path}: tensor {name!r}: {end - begin} bytes for shape {shape}")
        if count == 0:
            tensors[name] = torch.empty(shape, dtype=dtype)
            continue
        flat = torch.frombuffer(bytearray(raw), dtype=_RAW_VIEW[elem]).clone()
        if dtype == torch.bool:
            flat = flat.to(torch.bool)
        else:
            flat = flat.view(dtype)
        tensors[name] = flat.reshape(shape)
    return tensors, metadata
