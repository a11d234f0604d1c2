#!/usr/bin/env python3
"""Writes the seed inputs of every fuzz target, derived from the repository's real inputs.

Usage: fuzz/make_seeds.py OUT_DIR       (writes OUT_DIR/<target>/<name> for each target)

The committed corpora under fuzz/corpus/ are these seeds after fuzzing and `-merge=1`
minimisation (docs/fuzzing.md); run this again only to start a corpus afresh. Needs msgpack
(the Python client's dependency).
"""
import hashlib
import json
import pathlib
import re
import struct
import sys
import tomllib

import msgpack

ROOT = pathlib.Path(__file__).resolve().parent.parent


def writer(out, target):
    folder = out / target
    folder.mkdir(parents=True, exist_ok=True)

    def write(data, name=None):
        if isinstance(data, str):
            data = data.encode()
        name = name or hashlib.sha1(data).hexdigest()
        (folder / name).write_bytes(data)

    return write


def pack(value):
    return msgpack.packb(value, use_bin_type=True)


def tasks():
    """Every task manifest, sorted by id as the registry sorts them."""
    found = []
    for path in sorted((ROOT / "tasks").glob("**/task.toml")):
        found.append((tomllib.loads(path.read_text()), path))
    return sorted(found, key=lambda item: item[0]["id"])


def directive_lines(source):
    """The // @ directive comments of a source and the comment lines that continue them."""
    lines, keep = [], False
    for line in source.splitlines():
        stripped = line.strip()
        if re.match(r"//\s*@", stripped):
            keep = True
        elif not stripped.startswith("//"):
            keep = False
        if keep:
            lines.append(line)
    return "\n".join(lines) + "\n"


def request_seeds(write):
    source = (ROOT / "tasks/llm/rms_norm/solution.cu").read_text()
    plan = [{"kernel": "rms_norm_kernel", "grid": "num_tokens", "block": 256,
             "args": ["out", "input", "weight", "epsilon", "hidden_size"]}]
    frames = [
        {"v": 1, "id": 1, "op": "hello", "client": "python"},
        {"v": 1, "id": "req-7", "op": "hello"},
        {"v": 1, "id": 2, "op": "tasks", "category": "llm"},
        {"v": 1, "id": 3, "op": "task", "task": "llm/rms_norm"},
        {"v": 1, "id": 4, "op": "reset", "task": "llm/rms_norm", "seed": 42, "max_steps": 8,
         "reward": {"preset": "default", "speed_weight": 0.5, "improvement": True},
         "options": {"note": "seed corpus", "tags": ["a", "b"]}},
        {"v": 1, "id": 5, "op": "step", "episode": "ep-0001", "source": source},
        {"v": 1, "id": 6, "op": "step", "episode": "ep-0001", "source": "__global__ void k() {}",
         "plan": plan},
        {"v": 1, "id": 7, "op": "score", "task": "llm/rms_norm", "source": source, "seed": 7,
         "reward": {"preset": "kevin"}, "plan": {"launches": plan}},
        {"v": 1, "id": 8, "op": "close", "episode": "ep-0001"},
        {"v": 1, "id": 9, "op": "stats"},
        {"v": 2, "id": 10, "op": "hello"},
        {"v": 1, "id": 11, "op": "launch"},
        {"v": 1, "id": 1.5, "op": "hello"},
        {"v": 1, "id": "x" * 200, "op": "hello"},
        {"v": 1, "id": -1, "op": "reset", "task": "llm/rms_norm", "seed": -5, "max_steps": 0},
        {"v": 1, "id": 12, "op": "reset", "task": "llm/rms_norm", "max_steps": 10001,
         "reward": "default"},
        {"v": 1, "id": 13, "op": "step", "episode": "", "source": 5},
        {"v": 1, "id": 14, "op": "score", "task": "llm/rms_norm", "source": "x", "plan": 3},
        {"id": 15, "op": "hello"},
        {"v": 1, "op": "hello"},
        {"v": 18446744073709551615, "id": 16, "op": "hello"},
        {"v": 1, "id": 17, "op": "step", "episode": "ep", "source": b"bytes, not str"},
        {"v": 1, "id": 18, "op": "tasks", "category": None},
    ]
    for frame in frames:
        write(pack(frame))
    # Strings that are not UTF-8 (msgpack str with raw bytes), in a value, a key and the id.
    bad = msgpack.Packer(unicode_errors="surrogateescape", use_bin_type=True)
    write(bad.pack({"v": 1, "id": "\udcff\udcfe", "op": "hello", "client": "a\udcc3"}))
    write(bad.pack({"v": 1, "id": 19, "op": "step", "episode": "e\udce2\udc82",
                    "source": "// \udcc0\udcaf\n\x00\t", "plan": [{"k\udcff": 1}]}))
    write(bad.pack({"v": 1, "id": 20, "op": "zz\udcf5"}))
    write(pack([1, 2, 3]))
    write(pack({"v": 1, "id": 21, "op": "reset", "task": "t", "options": {"a": {"b": {"c": [[[]]]}}}}))
    write(b"\x81\xa1v")  # truncated
    write(pack({"v": 1}) + b"\x00")  # trailing byte
    write(b"\xc7\x01\x05\x00")  # ext


def launch_plan_seeds(write):
    manifests = tasks()
    index = {manifest["id"]: i for i, (manifest, _) in enumerate(manifests)}
    sources = []
    for path in sorted((ROOT / "kernels").glob("**/*.cu")):
        task = path.relative_to(ROOT / "kernels").with_suffix("").as_posix()
        sources.append((task, path))
    for path in sorted((ROOT / "tasks").glob("*/*/solution.cu")):
        sources.append((path.parent.relative_to(ROOT / "tasks").as_posix(), path))
    for path in sorted((ROOT / "tasks").glob("**/solution.cu")):
        sources.append((path.parent.relative_to(ROOT / "tasks").as_posix(), path))
    for path in sorted((ROOT / "examples/solutions").glob("**/*.cu")):
        task = path.relative_to(ROOT / "examples/solutions").with_suffix("").as_posix()
        sources.append((task.removesuffix("_wrong"), path))
    # The reward-hack examples are all rms_norm kernels.
    for path in sorted((ROOT / "examples/hacks").glob("*.cu")):
        sources.append(("llm/rms_norm", path))
    for task, path in sources:
        if task not in index:
            continue
        text = path.read_text()
        header = bytes([index[task], ord("D")])
        write(header + directive_lines(text).encode())
        if len(text) < 4096:
            write(header + text.encode())
    for manifest, _ in manifests:
        i = index[manifest["id"]]
        symbols = [s["name"] for s in manifest.get("symbols", [])]
        args = [t["name"] for t in manifest.get("tensors", [])]
        args += [s["name"] for s in manifest.get("scalars", [])] + symbols
        first = symbols[0] if symbols else "1"
        launch = {"kernel": "k", "grid": first, "block": 256, "args": args}
        write(bytes([i, ord("S")]) + pack([launch]))
        full = {
            "launches": [
                dict(launch, template_args="float, 4", grid=[f"cdiv({first}, 4)", 2],
                     block=[32, 8], smem=f"{first} * 4", **{"if": f"{first} > 1"},
                     args=args + ["scratch"]),
                {"kernel": "k2", "grid": 1, "block": "32", "args": [], "if": True},
            ],
            "workspaces": [{"name": "scratch", "type": "f32", "count": first}],
            "clusters": [{"kernel": "k", "dims": [2, 1]}],
            "tensor_maps": [{"name": "tile", "tensor": args[0], "dims": [first, 2],
                             "box": [16, 1], "strides": [f"{first} * 2"], "swizzle": 32}],
        }
        full["launches"][1]["args"] = ["tile"]
        write(bytes([i, ord("S")]) + pack(full))
        write(bytes([i, ord("A")]) + b"__global__ void k() {}\x00" + pack([launch]))
        write(bytes([i, ord("A")]) + f"// @launch k<<<{first}, 64>>>()".encode() + b"\x00" +
              pack(None))
        write(bytes([i, ord("D")]) +
              (f"// @tensormap tile {args[0]} dims({first}, 4) box(64, 2) swizzle(128)\n"
               f"// @launch k<<<{first}, 128, 16384>>>(tile)\n").encode())


def expr_seeds(write):
    for manifest, _ in tasks():
        roofline = manifest.get("roofline", {})
        for key in ("bytes", "flops"):
            if key in roofline:
                write(roofline[key])
    for path in sorted((ROOT / "kernels").glob("**/*.cu")):
        for match in re.finditer(r"<<<(.*?)>>>", path.read_text()):
            for part in re.split(r",\s*(?![^()]*\))", match.group(1)):
                write(part.strip())
        for match in re.finditer(r"@launch if \((.*?)\) \w+", path.read_text()):
            write(match.group(1))
    for text in ["cdiv(a, b)", "min(a, b, c)", "max(1, 2)", "0x1F * n", "-(-x)",
                 "a && b || !c", "a % -1", "9223372036854775807 + 1", "-9223372036854775807 - 1",
                 "((((a))))", "a / (b - b)", "x * 2", "cdiv(a, 0)", "a <= b == c > d != e >= f",
                 "min(a)", "foo(1, 2)", "07", "(1", "1 +", "a ? b : c", "\u00e9 + 1",
                 "x" * 1030]:
        write(text)


def manifest_seeds(write):
    # Full-line comments dropped (most of a manifest's bytes), except in the model manifest.
    for manifest, path in tasks():
        text = path.read_text()
        if manifest["id"] != "llm/rms_norm":
            text = "".join(line for line in text.splitlines(keepends=True)
                           if not line.lstrip().startswith("#"))
        write(text)
    write('id = "llm/fuzz"\ncategory = "llm"\n')
    write(b'id = "llm/rms_norm"\n[reference]\nsource = "kernels/llm/rms_norm.cu"\n'
          b'[[symbols]]\nname = "n"\n[[tensors]]\nname = "out"\ndtype = "bf17"\n')


def safetensors_file(tensors, metadata=None):
    """A safetensors file from (name, dtype, shape, bytes) entries, in order."""
    header, data = {}, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(text)) + text + data


def safetensors_seeds(write):
    captured = sorted((ROOT / "tasks/capture").glob("**/*.safetensors"),
                      key=lambda p: p.stat().st_size)
    for path in captured[:1]:
        write(path.read_bytes())
    # The first tensors of every recorded op, each file cut down to them.
    for path in captured:
        raw = path.read_bytes()
        (length,) = struct.unpack_from("<Q", raw)
        header = json.loads(raw[8:8 + length])
        data = raw[8 + length:]
        entries = sorted(((k, v) for k, v in header.items() if k != "__metadata__"),
                         key=lambda kv: kv[1]["data_offsets"][0])
        picked = []
        for name, entry in entries:
            begin, end = entry["data_offsets"]
            if end - begin <= 1024:
                picked.append((name, entry["dtype"], entry["shape"], data[begin:end]))
            if len(picked) == 2:
                break
        if picked:
            write(safetensors_file(picked, header.get("__metadata__")))
    sizes = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "F8_E4M3": 1, "F8_E5M2": 1, "I8": 1,
             "U8": 1, "I16": 2, "I32": 4, "I64": 8, "BOOL": 1}
    for dtype, size in sizes.items():
        write(safetensors_file([("t", dtype, [2, 3], bytes(range(6 * size)))]))
    write(safetensors_file([("a", "F32", [], b"\0\0\x80?"), ("b", "I32", [0, 4], b"")],
                           {"format": "pt", "source": "seed"}))
    write(safetensors_file([]))
    write(struct.pack("<Q", 2) + b"{}")


def trajectory_seeds(write):
    def records(path):
        raw = path.read_bytes()
        header, at, out = raw[:16], 16, []
        while at + 12 <= len(raw):
            _, length, _ = struct.unpack_from("<III", raw, at)
            out.append(raw[at:at + 12 + length])
            at += 12 + length
        return header, out

    header, small = records(ROOT / "examples/trajectories/trajectories.log")
    _, large = records(ROOT / "examples/trajectories/h200_run.log")
    picked = small + sorted(large, key=len)[:4]
    write(header)
    for record in picked:
        write(header + record)
    write(header + picked[0] + picked[-1])
    write(header + picked[0][:40])  # torn tail
    flipped = bytearray(picked[1])
    flipped[30] ^= 0x10
    write(header + picked[0] + bytes(flipped) + picked[2])  # damaged record in the middle
    write(header + b"CRCR" + b"\x00" * 20 + picked[3])  # a false marker before a good record
    write(b"CRUCLOG\x00\x02\x00\x00\x00\x00\x00\x00\x00")  # newer format, bad crc
    write(b"NOTALOG\x00" + bytes(8))


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = pathlib.Path(sys.argv[1])
    request_seeds(writer(out, "fuzz_request"))
    launch_plan_seeds(writer(out, "fuzz_launch_plan"))
    expr_seeds(writer(out, "fuzz_expr"))
    manifest_seeds(writer(out, "fuzz_manifest"))
    safetensors_seeds(writer(out, "fuzz_safetensors"))
    trajectory_seeds(writer(out, "fuzz_trajectory_log"))
    for folder in sorted(out.iterdir()):
        files = list(folder.iterdir())
        print(f"{folder.name}: {len(files)} seeds, {sum(f.stat().st_size for f in files)} bytes")


if __name__ == "__main__":
    main()
