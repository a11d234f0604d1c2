"""@DOC@"""
# Written by `crucible export-op` from the template env/cli/export_op_template.py: the kernel
# source, the task's signature and the launch plan below are data; the code around them reads
# the plan's integer expressions, compiles the source with NVRTC for the current GPU on first
# use and launches it with the CUDA driver on PyTorch's current stream.

import ctypes
import json
import os
import threading
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

TASK: Dict[str, Any] = json.loads("@TASK@")
PLAN: Dict[str, Any] = json.loads("@PLAN@")
SOURCE: str = "@SOURCE@"
OP_NAME = "@NAME@"

# --- the launch plan's integer expressions: C arithmetic on int64 (core/expr.hpp's grammar) ---


def _tokens(text: str) -> List[str]:
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c.isspace():
            i += 1
        elif c.isalnum() or c == "_":
            j = i
            while j < len(text) and (text[j].isalnum() or text[j] == "_"):
                j += 1
            out.append(text[i:j])
            i = j
        elif text[i:i + 2] in ("||", "&&", "==", "!=", "<=", ">="):
            out.append(text[i:i + 2])
            i += 2
        else:
            out.append(c)
            i += 1
    return out


def _div(a: int, b: int) -> int:
    if b == 0:
        raise ZeroDivisionError("division by zero in a launch expression")
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


class _Parser:
    def __init__(self, text: str, env: Mapping[str, int]):
        self.t, self.i, self.env = _tokens(text), 0, env

    def peek(self) -> Optional[str]:
        return self.t[self.i] if self.i < len(self.t) else None

    def take(self) -> str:
        self.i += 1
        return self.t[self.i - 1]

    def binary(self, ops: Sequence[str], lower: Any) -> int:
        value = lower()
        while self.peek() in ops:
            op, right = self.take(), lower()
            value = {"||": lambda a, b: int(bool(a) or bool(b)),
                     "&&": lambda a, b: int(bool(a) and bool(b)),
                     "==": lambda a, b: int(a == b), "!=": lambda a, b: int(a != b),
                     "<": lambda a, b: int(a < b), "<=": lambda a, b: int(a <= b),
                     ">": lambda a, b: int(a > b), ">=": lambda a, b: int(a >= b),
                     "+": lambda a, b: a + b, "-": lambda a, b: a - b,
                     "*": lambda a, b: a * b, "/": _div,
                     "%": lambda a, b: a - _div(a, b) * b}[op](value, right)
        return value

    def expr(self) -> int:
        return self.binary(("||",), lambda: self.binary(("&&",), lambda: self.binary(
            ("==", "!="), lambda: self.binary(("<", "<=", ">", ">="), lambda: self.binary(
                ("+", "-"), lambda: self.binary(("*", "/", "%"), self.unary))))))

    def unary(self) -> int:
        if self.peek() == "-":
            self.take()
            return -self.unary()
        if self.peek() == "!":
            self.take()
            return int(not self.unary())
        return self.primary()

    def primary(self) -> int:
        token = self.take()
        if token == "(":
            value = self.expr()
            self.take()
            return value
        if token[0].isdigit():
            return int(token, 16) if token.lower().startswith("0x") else int(token)
        if self.peek() == "(":
            self.take()
            args = [self.expr()]
            while self.peek() == ",":
                self.take()
                args.append(self.expr())
            self.take()
            if token == "cdiv":
                return _div(args[0] + args[1] - 1, args[1])
            return min(args) if token == "min" else max(args)
        return int(self.env[token])


def evaluate(text: str, env: Mapping[str, int]) -> int:
    """The value of one of the plan's integer expressions with `env`'s symbols."""
    return _Parser(text, env).expr()


def plan(symbols: Mapping[str, int]) -> List[Dict[str, Any]]:
    """The launches that run for these symbol values, in order: kernel (its name expression),
    grid, block, smem (dynamic shared memory bytes), cluster (blocks per thread-block cluster,
    or None) and args (as the plan lists them)."""
    launches = []
    for launch in PLAN["launches"]:
        if launch["condition"] is not None and not evaluate(launch["condition"], symbols):
            continue
        launches.append({
            "kernel": launch["name_expression"],
            "grid": [evaluate(e, symbols) for e in launch["grid"]],
            "block": [evaluate(e, symbols) for e in launch["block"]],
            "smem": evaluate(launch["smem"], symbols),
            "cluster": (None if launch["cluster"] is None
                        else [evaluate(e, symbols) for e in launch["cluster"]]),
            "args": launch["args"],
        })
    return launches


def tensor_map_figures(symbols: Mapping[str, int], shapes: Mapping[str, Sequence[int]],
                       launches: Optional[List[Dict[str, Any]]] = None
                       ) -> List[Optional[Dict[str, Any]]]:
    """Each @tensormap of the plan for these symbol values, as the server evaluates it: the
    tensor, dims (innermost first), stride_bytes (of dimensions 1..), box and swizzle, or None
    for a map that no launch running for these values passes (it is not encoded; `launches`,
    when given, is plan(symbols) already computed). Raises ValueError where the server would
    refuse the map (a box extent outside 1..256, an innermost
    box that is not a multiple of 16 bytes or exceeds the swizzle span, a stride that is not a
    positive multiple of 16 bytes below 2^40, a view reaching past the tensor in `shapes`)."""
    out: List[Optional[Dict[str, Any]]] = []
    if not PLAN["tensor_maps"]:
        return out
    passed = {name for launch in (plan(symbols) if launches is None else launches)
              for kind, name in launch["args"] if kind == "tensor_map"}
    for spec in PLAN["tensor_maps"]:
        if spec["name"] not in passed:
            out.append(None)
            continue
        where = f"tensor map '{spec['name']}'"
        size = spec["element_bytes"]
        dims = [evaluate(e, symbols) for e in spec["dims"]]
        box = [evaluate(e, symbols) for e in spec["box"]]
        if any(b < 1 or b > 256 for b in box):
            raise ValueError(f"{where}: box {box}: each extent is 1 to 256")
        if box[0] * size % 16 or (spec["swizzle"] and box[0] * size > spec["swizzle"]):
            raise ValueError(f"{where}: the innermost box is {box[0] * size} bytes: a multiple "
                             f"of 16, at most the swizzle span when there is one")
        if any(d < 1 or d > 1 << 32 for d in dims):
            raise ValueError(f"{where}: dims {dims}: each extent is 1 to 2^32")
        strides = [evaluate(e, symbols) for e in spec["strides"]]
        if not strides:
            for d in dims[:-1]:
                strides.append((strides[-1] if strides else 1) * d)
        stride_bytes = [s * size for s in strides]
        if any(s < 1 or b % 16 or b >= 1 << 40 for s, b in zip(strides, stride_bytes)):
            raise ValueError(f"{where}: strides {strides} (elements): each a positive multiple "
                             "of 16 bytes below 2^40 bytes")
        reach = 1 + sum((d - 1) * s for d, s in zip(dims, [1] + strides))
        elements = 1
        for extent in shapes[spec["tensor"]]:
            elements *= extent
        if reach > elements:
            raise ValueError(f"{where} reaches {reach} elements of '{spec['tensor']}', which "
                             f"has {elements}")
        out.append({"tensor": spec["tensor"], "dims": dims, "stride_bytes": stride_bytes,
                    "box": box, "swizzle": spec["swizzle"]})
    return out


def symbols_of(shapes: Mapping[str, Sequence[int]], given: Mapping[str, int]) -> Dict[str, int]:
    """Every task symbol: read from the tensors' shapes where one names it, else `given`."""
    symbols: Dict[str, int] = dict(given)
    for tensor in TASK["tensors"]:
        shape = shapes[tensor["name"]]
        if len(shape) != len(tensor["shape"]):
            raise ValueError(f"{tensor['name']} has {len(shape)} dimensions, the task "
                             f"{len(tensor['shape'])}")
        for dim, size in zip(tensor["shape"], shape):
            if isinstance(dim, int) or dim.isdigit():
                if int(dim) != size:
                    raise ValueError(f"{tensor['name']}: a dimension of {dim} is {size}")
            elif symbols.setdefault(dim, int(size)) != size:
                raise ValueError(f"{tensor['name']}: {dim} is {size} here, {symbols[dim]} "
                                 "elsewhere")
    missing = [name for name in PLAN["symbols"] if name not in symbols]
    if missing:
        raise ValueError(f"symbols {missing} are in no tensor's shape: pass them by keyword")
    return symbols


# --- CUDA through ctypes: NVRTC to compile, the driver to load and launch ---

_PRELUDE = ("#pragma once\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
            "#include <cuda_fp8.h>\n#include <cuda/std/cstdint>\n"
            "typedef struct CUtensorMap_st { alignas(64) unsigned long long opaque[16]; }"
            " CUtensorMap;\n")


def _library(names: Sequence[str]) -> ctypes.CDLL:
    errors = []
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError as exc:
            errors.append(str(exc))
    raise OSError("cannot load any of " + ", ".join(names) + ": " + "; ".join(errors))


class _LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute: an id, padding to 8 bytes, a 64-byte value."""
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_uint * 16)]


class _LaunchConfig(ctypes.Structure):
    """CUlaunchConfig, for cuLaunchKernelEx."""
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("smem", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_LaunchAttribute)),
                ("num_attrs", ctypes.c_uint)]


# CUtensorMapDataType by dtype: fp8, bool and the 8-bit integers travel as bytes (UINT8).
_TENSOR_MAP_TYPES = {"u8": 0, "i8": 0, "bool": 0, "fp8_e4m3": 0, "fp8_e5m2": 0, "i16": 1,
                     "i32": 3, "i64": 5, "f16": 6, "f32": 7, "f64": 8, "bf16": 9}
_SWIZZLES = {0: 0, 32: 1, 64: 2, 128: 3}  # CU_TENSOR_MAP_SWIZZLE_NONE, _32B, _64B, _128B
_L2_PROMOTION_128B = 2  # CU_TENSOR_MAP_L2_PROMOTION_L2_128B


class _TensorMap:
    """A CUtensorMap: 128 bytes at a 64-byte aligned address inside a larger ctypes buffer."""

    def __init__(self) -> None:
        self._buffer = ctypes.create_string_buffer(128 + 64)
        address = ctypes.addressof(self._buffer)
        self.address = address + (-address % 64)

    def param(self) -> ctypes.c_void_p:
        return ctypes.c_void_p(self.address)


_CLUSTER_DIMENSION = 4  # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14  # CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED


class _Kernels:
    """The source compiled for one device: its functions by name expression."""

    def __init__(self, device_index: int, capability: Tuple[int, int]):
        cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda")
        self.cuda = _library(["libcuda.so.1"])
        nvrtc = _library([os.environ.get("CRUCIBLE_NVRTC", "libnvrtc.so.13"),
                          os.path.join(cuda_home, "lib64", "libnvrtc.so.13"), "libnvrtc.so"])
        program = ctypes.c_void_p()
        headers = (ctypes.c_char_p * 1)(_PRELUDE.encode())
        names = (ctypes.c_char_p * 1)(b"crucible_prelude.cuh")
        self._check_nvrtc(nvrtc, nvrtc.nvrtcCreateProgram(
            ctypes.byref(program), SOURCE.encode(), b"kernel.cu", 1, headers, names))
        expressions = list(dict.fromkeys(l["name_expression"] for l in PLAN["launches"]))
        for expression in expressions:
            self._check_nvrtc(nvrtc, nvrtc.nvrtcAddNameExpression(program, expression.encode()))
        major, minor = capability
        arch = f"sm_{major}{minor}" + ("a" if major >= 9 else "")
        options = [f"-arch={arch}", "-std=c++17", "--pre-include=crucible_prelude.cuh"]
        for folder in ("include", "include/cccl", "include/crt"):
            if os.path.isdir(os.path.join(cuda_home, folder)):
                options.append("-I" + os.path.join(cuda_home, folder))
        encoded = (ctypes.c_char_p * len(options))(*(o.encode() for o in options))
        result = nvrtc.nvrtcCompileProgram(program, len(options), encoded)
        if result != 0:
            size = ctypes.c_size_t()
            nvrtc.nvrtcGetProgramLogSize(program, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            nvrtc.nvrtcGetProgramLog(program, log)
            raise RuntimeError(f"NVRTC could not compile {OP_NAME}: {log.value.decode()}")
        size = ctypes.c_size_t()
        self._check_nvrtc(nvrtc, nvrtc.nvrtcGetCUBINSize(program, ctypes.byref(size)))
        cubin = ctypes.create_string_buffer(size.value)
        self._check_nvrtc(nvrtc, nvrtc.nvrtcGetCUBIN(program, cubin))
        lowered = {}
        for expression in expressions:
            name = ctypes.c_char_p()
            self._check_nvrtc(nvrtc, nvrtc.nvrtcGetLoweredName(
                program, expression.encode(), ctypes.byref(name)))
            lowered[expression] = name.value
        self.module = ctypes.c_void_p()
        self._check(self.cuda.cuModuleLoadData(ctypes.byref(self.module), cubin), "load")
        self.functions = {}
        for expression, name in lowered.items():
            function = ctypes.c_void_p()
            self._check(self.cuda.cuModuleGetFunction(ctypes.byref(function), self.module,
                                                      name), "find " + expression)
            self.functions[expression] = function
        nvrtc.nvrtcDestroyProgram(ctypes.byref(program))

    @staticmethod
    def _check_nvrtc(nvrtc: ctypes.CDLL, result: int) -> None:
        if result != 0:
            nvrtc.nvrtcGetErrorString.restype = ctypes.c_char_p
            raise RuntimeError(f"NVRTC: {nvrtc.nvrtcGetErrorString(result).decode()}")

    def _check(self, result: int, what: str) -> None:
        if result != 0:
            message = ctypes.c_char_p()
            self.cuda.cuGetErrorString(result, ctypes.byref(message))
            raise RuntimeError(f"CUDA driver: cannot {what}: "
                               f"{(message.value or b'error %d' % result).decode()}")

    def encode(self, figures: Mapping[str, Any], dtype: str, address: int) -> "_TensorMap":
        """A tensor map over `address` with `figures` (from tensor_map_figures), encoded as the
        runner encodes it: dense boxes, zeros outside the view, 128-byte L2 promotion."""
        tensor_map = _TensorMap()
        rank = len(figures["dims"])
        u64, u32 = ctypes.c_uint64, ctypes.c_uint32
        self._check(self.cuda.cuTensorMapEncodeTiled(
            ctypes.c_void_p(tensor_map.address), _TENSOR_MAP_TYPES[dtype], u32(rank),
            ctypes.c_void_p(address), (u64 * rank)(*figures["dims"]),
            (u64 * max(1, rank - 1))(*figures["stride_bytes"]), (u32 * rank)(*figures["box"]),
            (u32 * rank)(*([1] * rank)), 0, _SWIZZLES[figures["swizzle"]], _L2_PROMOTION_128B,
            0), "encode a tensor map")
        return tensor_map

    def launch(self, expression: str, grid: Sequence[int], block: Sequence[int], smem: int,
               cluster: Optional[Sequence[int]], args: Sequence[Any], stream: int) -> None:
        function = self.functions[expression]
        if smem > 48 * 1024:  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            self._check(self.cuda.cuFuncSetAttribute(function, 8, smem), "allow shared memory")
        pointers = (ctypes.c_void_p * len(args))(
            *(a.param() if isinstance(a, _TensorMap) else ctypes.cast(ctypes.byref(a),
                                                                      ctypes.c_void_p)
              for a in args))
        # cuLaunchKernelEx, as crucible's runner launches: a thread-block cluster goes in the
        # cluster dimension attribute (more than 8 blocks a cluster needs the opt-in).
        config = _LaunchConfig(grid=(ctypes.c_uint * 3)(*grid),
                               block=(ctypes.c_uint * 3)(*block), smem=smem,
                               stream=ctypes.c_void_p(stream))
        if cluster is not None:
            if cluster[0] * cluster[1] * cluster[2] > 8:
                self._check(self.cuda.cuFuncSetAttribute(
                    function, _NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1), "allow a large cluster")
            attribute = _LaunchAttribute(id=_CLUSTER_DIMENSION)
            attribute.value[0], attribute.value[1], attribute.value[2] = cluster
            config.attrs, config.num_attrs = ctypes.pointer(attribute), 1
        self._check(self.cuda.cuLaunchKernelEx(ctypes.byref(config), function, pointers, None),
                    "launch " + expression)


_compiled: Dict[int, _Kernels] = {}
_lock = threading.Lock()
_SCALAR_TYPES = {"f32": ctypes.c_float, "f64": ctypes.c_double, "i32": ctypes.c_int32,
                 "i64": ctypes.c_int64}


def run(tensors: Mapping[str, Any], scalars: Mapping[str, float],
        given: Mapping[str, int]) -> None:
    """Runs the op on PyTorch CUDA tensors (by task tensor name), on the current stream."""
    import torch

    first = next(iter(tensors.values()))
    device = first.device
    for name, tensor in tensors.items():
        if tensor.device != device or not tensor.is_contiguous():
            raise ValueError(f"{name} must be a contiguous tensor on {device}")
    symbols = symbols_of({n: tuple(t.shape) for n, t in tensors.items()}, given)
    with _lock:
        kernels = _compiled.get(device.index)
        if kernels is None:
            torch.cuda.init()
            with torch.cuda.device(device):
                torch.cuda.synchronize()  # the primary context is current from here
                kernels = _compiled[device.index] = _Kernels(
                    device.index, torch.cuda.get_device_capability(device))
    workspaces = [torch.empty(max(1, evaluate(w["count"], symbols) * w["element_bytes"]),
                              dtype=torch.uint8, device=device) for w in PLAN["workspaces"]]
    launches = plan(symbols)
    maps = {}
    figures = tensor_map_figures(symbols, {n: tuple(t.shape) for n, t in tensors.items()},
                                 launches)
    for spec, figure in zip(PLAN["tensor_maps"], figures):
        if figure is None:
            continue
        dtype = next(t["dtype"] for t in TASK["tensors"] if t["name"] == spec["tensor"])
        maps[spec["name"]] = kernels.encode(figure, dtype, tensors[spec["tensor"]].data_ptr())
    stream = torch.cuda.current_stream(device).cuda_stream
    for launch in launches:
        args: List[Any] = []
        for kind, name in launch["args"]:
            if kind == "tensor":
                args.append(ctypes.c_uint64(tensors[name].data_ptr()))
            elif kind == "workspace":
                index = [w["name"] for w in PLAN["workspaces"]].index(name)
                args.append(ctypes.c_uint64(workspaces[index].data_ptr()))
            elif kind == "tensor_map":
                args.append(maps[name])
            elif kind == "scalar":
                dtype = next(s["dtype"] for s in TASK["scalars"] if s["name"] == name)
                args.append(_SCALAR_TYPES[dtype](scalars[name]))
            else:
                dtype = next(s["dtype"] for s in TASK["symbols"] if s["name"] == name)
                args.append(_SCALAR_TYPES[dtype](symbols[name]))
        kernels.launch(launch["kernel"], launch["grid"], launch["block"], launch["smem"],
                       launch["cluster"], args, stream)


# --- the PyTorch custom op ---
try:
    import torch
except ImportError:  # the plan and its expressions stay usable without PyTorch
    torch = None  # type: ignore[assignment]

if torch is not None:
    pass  # @OP@
