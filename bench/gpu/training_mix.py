#!/usr/bin/env python3
"""Writes a training mix: the kernels an RL policy sends to `crucible serve`, as `crucible eval`
JSONL samples (bench/README.md, docs/eval.md).

A policy in training does not mostly send working kernels. Early in a run, and on every new
task, most of its edits break something; what breaks, and where the server spends its time on
it, decides the throughput a trainer sees. The default mix, by share of samples:

  30 % compile_error   the commonest failure of sampled CUDA: a dropped `;` or `}`, a misspelt
                       or undeclared name, a type mismatch, a call to a helper it never wrote, a
                       kernel renamed but not in its `@launch` (the compiler resolves the name);
                       plus the corpus's host-file includes and a constant expression that never
                       ends. Cost: a compile, no GPU.
  10 % invalid_launch  a bad `@launch` directive: a block over 1024 threads, too much dynamic
                       shared memory, an argument that does not exist, a grid over an
                       unknown symbol, a directive that does not parse or is missing; plus the
                       corpus's. Cost: rejected before the compile.
  25 % wrong_answer    compiles and runs, fails the correctness check: an off-by-one bound on
                       the last block-stride loop, the last block skipped; plus every wrong
                       kernel and hack of the corpus. Cost: compile and the correctness runs up
                       to the first failure, no timing.
   3 % fault           a trap, an illegal or misaligned address, a launch over the kernel's
                       launch bounds. Cost: a runner restart.
   2 % hang            a spinning thread. Cost: the kernel watchdog, the most expensive sample
                       per unit. Faults and hangs are rare because a policy learns them away
                       first (their penalty is the largest), but every one of them costs a lot.
  30 % correct         the task's example solution and its reference resubmitted, and the
                       corpus's correct kernels. Cost: compile, every correctness run, timing.

Why these shares: they are the split issue 19 proposes, between an early policy (mostly compile
errors) and a converged one (mostly correct), counted by how often each thing is sent and not by
what it costs, so steps/s on this mix is what a trainer sees mid-run. The server's cost per
sample differs by orders of magnitude across the classes (no compile, a compile, correctness
runs, timing, a runner restart, a watchdog), so a mix of correct kernels only, or of cheap
failures only, would say little about training.

Tasks (default): eight tasks of different sizes, each an equal share of every class: six small
memory-bound ops (rms_norm, fused_add_rms_norm, silu_and_mul, rotary_embedding, topk_softmax,
layer_norm), a quantisation (dynamic_per_token_scaled_fp8_quant) and one with large inputs
(paged_decode_attention). `--tasks all` takes every task. A sample's task is drawn first, then
one of that task's sources of the sample's class; the corpus (examples/hacks,
examples/solutions, examples/trajectories, tests/gpu/kernels, tests/corpus) is mostly
llm/rms_norm, so that task gets the hand-written sources and the others the mutations.
Mutations apply to tasks/<task>/solution.cu (compile and launch mutations also to the
reference source), whose structure is simple enough that the effect is known.

The class counts are exact (largest remainder), the order shuffled; the output is a function of
--seed, --count, --tasks, --tag and --repeat-share only. Every source is distinct: each gets a
trailing comment with the seed, the tag and its index, after 0 to 2 blank lines, so no two
samples share a compile-cache entry. --tag changes those comments only (same samples, new
sources: runs at several concurrencies against one server never hit each other's cache).
--repeat-share F makes that fraction of the correct samples exact copies of an earlier correct
sample (meta.cache "repeat"; a policy resubmitting a kernel it already sent): those, and only
those, are meant to hit the compile cache.

Each sample: {"task", "sample_id", "source", "meta": {"expect", "kind", "source_of_sample",
"cache"}}; expect is the status the sample should get on a GPU, kind its class above,
source_of_sample the file (and mutation) it came from.

Usage: training_mix.py [--count N] [--seed S] [--tasks T,...|all] [--tag X] > mix.jsonl
(run from the repository root, or give --root)
"""
import argparse
import json
import pathlib
import random
import re
import sys
import tomllib

MIX = {  # class: (share, expected status)
    "compile_error": (0.30, "compile_error"),
    "invalid_launch": (0.10, "invalid_action"),
    "wrong_answer": (0.25, "incorrect"),
    "fault": (0.03, "runtime_error"),
    "hang": (0.02, "timeout"),
    "correct": (0.30, "ok"),
}
DEFAULT_TASKS = [
    "llm/rms_norm",
    "llm/fused_add_rms_norm",
    "llm/silu_and_mul",
    "llm/rotary_embedding",
    "llm/topk_softmax",
    "multimodal/layer_norm",
    "llm/dynamic_per_token_scaled_fp8_quant",
    "llm/paged_decode_attention",
]
# Sources of the corpus that hit the compile deadline (seconds of a compile worker each): a
# test of the sandbox, not something a policy sends.
EXCLUDED = {"tests/corpus/macro_bomb.cu", "tests/corpus/template_bomb.cu"}
STATUS_CLASS = {
    "compile_error": "compile_error",
    "invalid_action": "invalid_launch",
    "incorrect": "wrong_answer",
    "runtime_error": "fault",
    "launch_error": "fault",
    "timeout": "hang",
    "ok": "correct",
}
TRAILERS = ["attempt", "revision", "candidate", "try", "step"]


class MutationError(Exception):
    """The mutation does not apply to this source."""


# --- where code goes -----------------------------------------------------------------------

def kernel_start(text):
    """Index of the first `__global__` outside a comment (one-line test: enough for these
    sources)."""
    for match in re.finditer(r"\b__global__\b", text):
        line = text[text.rfind("\n", 0, match.start()) + 1:match.start()]
        if "//" not in line and "/*" not in line and not line.lstrip().startswith("*"):
            return match.start()
    raise MutationError("no __global__ function")


def body_start(text):
    """Index just past the `{` that opens the first __global__ function's body."""
    at = kernel_start(text)
    depth, i = 0, at
    while i < len(text):  # the body's brace is the first `{` outside the parameter list
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
        elif text[i] == "{" and depth == 0:
            return i + 1
        i += 1
    raise MutationError("no kernel body")


def insert_in_body(text, statement):
    at = body_start(text)
    return text[:at] + "\n  " + statement + text[at:]


def directive(text):
    """(start, end) of the first `@launch` line."""
    match = re.search(r"^//[ \t]*@launch\b.*$", text, re.MULTILINE)
    if not match:
        raise MutationError("no @launch directive")
    return match.start(), match.end()


def split_top(text):
    """Splits on commas outside brackets."""
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    parts.append(current.strip())
    return parts


def with_config(text, change):
    """Rewrites the <<<...>>> launch configuration of the first directive."""
    start, end = directive(text)
    line = text[start:end]
    match = re.search(r"<<<(.*?)>>>", line)
    if not match:
        raise MutationError("directive configuration wraps")
    config = change(split_top(match.group(1)))
    line = line[:match.start(1)] + ", ".join(config) + line[match.end(1):]
    return text[:start] + line + text[end:]


def fresh_name(text, name):
    if re.search(rf"\b{re.escape(name)}\b", text):
        raise MutationError(f"{name} already in the source")
    return name


# --- compile errors ------------------------------------------------------------------------

def missing_semicolon(text, rng):
    at = body_start(text)
    lines = [m for m in re.finditer(r"^(\s+[^/\s#][^\n]*);[ \t]*$", text[at:], re.MULTILINE)
             if not m.group(1).lstrip().startswith("for")]
    if not lines:
        raise MutationError("no statement")
    m = rng.choice(lines)
    return text[:at + m.end(1)] + text[at + m.end(1) + 1:]


def missing_brace(text, rng):
    at = text.rfind("}")
    if at < 0:
        raise MutationError("no brace")
    return text[:at] + text[at + 1:]


def undeclared_identifier(text, rng):
    at = body_start(text)
    params = re.findall(r"\b(\w+)\s*[,)]", text[kernel_start(text):at])
    body = text[at:]
    used = [p for p in params if re.search(rf"\b{p}\b", body) and len(p) > 2]
    if not used:
        raise MutationError("no parameter used in the body")
    choices = [(name, typo) for name in used for typo in (name[:-1], name + "s", name + "_")
               if not re.search(rf"\b{typo}\b", text)]
    if not choices:
        raise MutationError("no free misspelling")
    name, typo = rng.choice(choices)
    m = re.search(rf"\b{name}\b", body)
    return text[:at + m.start()] + typo + text[at + m.end():]


def type_mismatch(text, rng):
    return insert_in_body(text, "int* row_offset = 1.5f;")


def undefined_function(text, rng):
    names = [n for n in ("block_reduce_sum", "warp_sum", "load_vec4", "row_mean")
             if not re.search(rf"\b{n}\b", text)]
    if not names:
        raise MutationError("every helper name is taken")
    name = rng.choice(names)
    return insert_in_body(text, f"const float unused_total = {name}(0.0f);")


def unknown_kernel(text, rng):
    """The directive names a kernel the source does not define: the name is resolved by the
    compiler (NVRTC's name expressions), so this is a compile error, not a launch-plan one."""
    start, end = directive(text)
    line = text[start:end]
    m = re.search(r"@launch\s+(?:if\s*\(.*?\)\s*)?(\w+)", line)
    if not m:
        raise MutationError("no kernel name")
    name = fresh_name(text, m.group(1) + "_tuned")
    return text[:start] + line[:m.start(1)] + name + line[m.end(1):] + text[end:]


# --- invalid launch plans ------------------------------------------------------------------

def block_too_large(text, rng):
    return with_config(text, lambda c: [c[0], rng.choice(["2048", "4096"])] + c[2:])


def shared_too_large(text, rng):
    return with_config(text, lambda c: c[:2] + [rng.choice(["300000", "1048576"])] + c[3:])


def grid_unknown_symbol(text, rng):
    symbol = fresh_name(text, "num_blocks_wanted")
    return with_config(text, lambda c: [f"cdiv({symbol}, 4)"] + c[1:])


def unknown_argument(text, rng):
    start, end = directive(text)
    line = text[start:end]
    m = re.search(r">>>\s*\((\w+)", line)
    if not m:
        raise MutationError("no argument on the directive line")
    name = fresh_name(text, m.group(1) + "_ptr")
    return text[:start] + line[:m.start(1)] + name + line[m.end(1):] + text[end:]


def malformed_directive(text, rng):
    start, end = directive(text)
    line = text[start:end].replace(">>>", ">>", 1)
    return text[:start] + line + text[end:]


def missing_directive(text, rng):
    return re.sub(r"^(//[ \t]*)@launch\b", r"\1launch:", text, flags=re.MULTILINE)


# --- wrong answers -------------------------------------------------------------------------

def off_by_one(text, rng):
    """The last block-stride loop (the one that writes the output in these solutions) stops one
    element short."""
    at = body_start(text)
    loops = list(re.finditer(r"for \(int (\w+) = threadIdx\.x; \1 < ([^;]+);", text[at:]))
    if not loops:
        raise MutationError("no block-stride loop")
    m = loops[-1]
    return text[:at + m.end(2)] + " - 1" + text[at + m.end(2):]


def skipped_block(text, rng):
    return insert_in_body(text, "if (blockIdx.x == gridDim.x - 1 && blockIdx.y == gridDim.y - 1 "
                                "&& blockIdx.z == gridDim.z - 1) return;")


# --- faults and hangs ----------------------------------------------------------------------

def trap(text, rng):
    return insert_in_body(text, "if (blockIdx.x == 0 && threadIdx.x == 0) __trap();")


def bad_address(text, rng):
    return insert_in_body(text, "if (threadIdx.x == 0) *reinterpret_cast<volatile int*>(64) = 1;")


def spin(text, rng):
    # A loop the compiler cannot drop: ptxas removes a loop on a (volatile) local variable, which
    # has no side effect, so that version never hung on the H200. clock64() is an asm volatile
    # read of a counter that stays non-negative for centuries.
    return insert_in_body(text, "if (threadIdx.x == 0) { while (clock64() >= 0) {} }")


MUTATIONS = {  # class: [(name, function, applies to the reference source too)]
    "compile_error": [("missing_semicolon", missing_semicolon, True),
                      ("missing_brace", missing_brace, True),
                      ("undeclared_identifier", undeclared_identifier, True),
                      ("type_mismatch", type_mismatch, True),
                      ("undefined_function", undefined_function, True),
                      ("unknown_kernel", unknown_kernel, True)],
    "invalid_launch": [("block_too_large", block_too_large, True),
                       ("shared_too_large", shared_too_large, True),
                       ("grid_unknown_symbol", grid_unknown_symbol, True),
                       ("unknown_argument", unknown_argument, True),
                       ("malformed_directive", malformed_directive, True),
                       ("missing_directive", missing_directive, True)],
    "wrong_answer": [("off_by_one", off_by_one, False), ("skipped_block", skipped_block, False)],
    "fault": [("trap", trap, False), ("bad_address", bad_address, False)],
    "hang": [("spin", spin, False)],
    "correct": [],
}


# --- the corpus ----------------------------------------------------------------------------

def expected_status(text):
    m = re.search(r"^// expect: (\w+)", text, re.MULTILINE)
    return m.group(1) if m else None


def corpus(root):
    """(task, class, expected status, source_of_sample, text) of every hand-written source with a
    known status."""
    items = []
    for folder in ("tests/gpu/kernels", "examples/hacks"):
        for path in sorted((root / folder).glob("*.cu")):
            text = path.read_text()
            status = expected_status(text)
            if status not in STATUS_CLASS:
                continue
            m = re.search(r"^// task: (\S+)", text, re.MULTILINE)
            items.append((m.group(1) if m else "llm/rms_norm", STATUS_CLASS[status], status,
                          f"{folder}/{path.name}", text))
    for path in sorted((root / "examples/solutions").rglob("*.cu")):
        task = str(path.parent.relative_to(root / "examples/solutions")) + "/" + \
            path.stem.removesuffix("_wrong")
        items.append((task, "wrong_answer", "incorrect", str(path.relative_to(root)),
                      path.read_text()))
    trajectories = {"simple": "correct", "unweighted": "wrong_answer",
                    "missing_semicolon": "compile_error", "no_kernel": "invalid_launch"}
    path = root / "examples/trajectories/solutions.jsonl"
    for line in path.read_text().splitlines():
        record = json.loads(line)
        if record["sample_id"] in trajectories:
            kind = trajectories[record["sample_id"]]
            items.append((record["task"], kind, MIX[kind][1],
                          f"examples/trajectories/solutions.jsonl:{record['sample_id']}",
                          record["source"]))
    for path in sorted((root / "tests/corpus").glob("*.cu")):
        name = f"tests/corpus/{path.name}"
        if name in EXCLUDED:
            continue
        text = path.read_text()
        if path.stem.startswith("ok_"):
            items.append(("llm/rms_norm", "correct", "ok", name, "#include <cuda_bf16.h>\n" + text))
        else:  # a kernel `k(int* out)` with no directive: give it one so it reaches the compiler
            items.append(("llm/rms_norm", "compile_error", "compile_error", name,
                          "// @launch k<<<1, 1>>>(out)\n" + text))
    return items


def task_sources(root, task):
    """(solution path, text), (reference path, text) of a task."""
    folder = root / "tasks" / task
    manifest = tomllib.loads((folder / "task.toml").read_text())
    reference = manifest["reference"]["source"]
    return ((f"tasks/{task}/solution.cu", (folder / "solution.cu").read_text()),
            (reference, (root / reference).read_text()))


def pools(root, tasks):
    """pool[task][class] = [(source_of_sample, expected status, make(rng) -> text)]."""
    pool = {task: {name: [] for name in MIX} for task in tasks}
    for task, kind, status, name, text in corpus(root):
        if task in pool:
            pool[task][kind].append((name, status, lambda rng, text=text: text))
    for task in tasks:
        solution, reference = task_sources(root, task)
        for path, text in (solution, reference):
            pool[task]["correct"].append((path, "ok", lambda rng, text=text: text))
        for kind, mutations in MUTATIONS.items():
            for name, mutate, on_reference in mutations:
                for path, text in (solution, reference) if on_reference else (solution,):
                    try:
                        mutate(text, random.Random(0))
                    except MutationError:
                        continue  # does not apply to this source
                    make = lambda rng, text=text, mutate=mutate: mutate(text, rng)  # noqa: E731
                    pool[task][kind].append((f"{path} + {name}", MIX[kind][1], make))
    return pool


def class_counts(count, mix):
    """Exact per-class counts summing to count (largest remainder, ties by the table's order)."""
    raw = {name: count * share for name, (share, _) in mix.items()}
    counts = {name: int(value) for name, value in raw.items()}
    order = sorted(mix, key=lambda name: -(raw[name] - counts[name]))
    for name in order[:count - sum(counts.values())]:
        counts[name] += 1
    return counts


def distinct(text, rng, seed, tag, index):
    """Makes a source unique with a trailing comment (and 0-2 blank lines before it)."""
    label = f"{seed}-{tag}-{index}" if tag else f"{seed}-{index}"
    return text.rstrip("\n") + "\n" * (1 + rng.randrange(3)) + \
        f"// {rng.choice(TRAILERS)} {label}\n"


def generate(root, count=200, seed=2026, tasks=None, tag="", repeat_share=0.0, mix=MIX):
    """The samples (dicts in the eval input format), in order."""
    tasks = tasks or DEFAULT_TASKS
    pool = pools(root, tasks)
    rng = random.Random(seed)
    classes = [name for name, n in class_counts(count, mix).items() for _ in range(n)]
    rng.shuffle(classes)
    samples, correct_sent = [], []
    for index, kind in enumerate(classes):
        candidates = [task for task in tasks if pool[task][kind]]
        task = rng.choice(candidates)
        origin, expect, make = rng.choice(pool[task][kind])
        variation = random.Random(rng.getrandbits(64))
        cache = "new"
        if kind == "correct" and correct_sent and rng.random() < repeat_share:
            task, origin, expect, source = rng.choice(correct_sent)
            cache = "repeat"
        else:
            source = distinct(make(variation), variation, seed, tag, index)
            if kind == "correct":
                correct_sent.append((task, origin, expect, source))
        samples.append({
            "task": task,
            "sample_id": f"{kind}/{task}/{index}",
            "source": source,
            "meta": {"expect": expect, "kind": kind, "source_of_sample": origin,
                     "cache": cache},
        })
    return samples


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200, help="samples in all (default 200)")
    parser.add_argument("--seed", type=int, default=2026, help="draws and shuffle (default 2026)")
    parser.add_argument("--tasks", default="", help="comma-separated task ids, or 'all' "
                        "(default: the eight of the docstring)")
    parser.add_argument("--tag", default="", help="changes every source's trailing comment only")
    parser.add_argument("--repeat-share", type=float, default=0.0,
                        help="share of correct samples that repeat an earlier one exactly")
    parser.add_argument("--root", type=pathlib.Path, default=pathlib.Path.cwd())
    args = parser.parse_args()
    if args.count < 1:
        parser.error("--count must be at least 1")
    if not 0.0 <= args.repeat_share <= 1.0:
        parser.error("--repeat-share must be within [0, 1]")
    if args.tasks == "all":
        tasks = sorted(str(p.parent.relative_to(args.root / "tasks"))
                       for p in (args.root / "tasks").glob("*/*/solution.cu"))
    else:
        tasks = [t for t in args.tasks.split(",") if t] or DEFAULT_TASKS
    for task in tasks:
        if not (args.root / "tasks" / task / "task.toml").exists():
            parser.error(f"unknown task {task}")
    for sample in generate(args.root, args.count, args.seed, tasks, args.tag, args.repeat_share):
        sys.stdout.write(json.dumps(sample) + "\n")


if __name__ == "__main__":
    main()
