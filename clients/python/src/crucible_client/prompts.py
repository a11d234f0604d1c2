"""Prompts from a task's agent view, CUDA source out of a completion, feedback from a result.

Three pure functions over the protocol's maps, no I/O:

    prompt = render_prompt(client.request("task", task="llm/rms_norm")["task"], max_chars=12000)
    source = extract_source(completion)            # raises NoSourceFound when there is none
    text = render_feedback(step_reply, source=source)

`render_prompt` builds the prompt from sections ranked by importance and, when a character
budget is set, drops or shortens the least important ones first, always at line boundaries.
`render_feedback` only ever shows what the server put in the result; a hidden case appears by
its opaque label ("hidden case #k") and the kinds of its failures, never by name or shape.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

__all__ = [
    "NoSourceFound",
    "PromptTooLarge",
    "completion_text",
    "drop_file_mentions",
    "extract_source",
    "hardware_notes",
    "render_feedback",
    "render_prompt",
    "strip_comments",
]

# Languages a fenced block may be tagged with and still be taken as the kernel's source.
SOURCE_LANGUAGES = ("cuda", "cu", "cpp", "c++", "cxx", "cc", "c", "cuh", "hpp", "h")

# What the server's known GPUs offer, for the hardware notes. Figures are the vendor's
# datasheet values for the SXM parts; the roofline floor in results uses the same bandwidth.
_GPU_NOTES: Tuple[Tuple[str, str], ...] = (
    ("H200", "132 SMs, 141 GB HBM3e at 4.8 TB/s, 50 MB L2, up to 227 KiB shared memory per "
             "block, 64K 32-bit registers per SM, about 989 TFLOP/s dense bf16 tensor-core"),
    ("H100", "132 SMs, 80 GB HBM3 at 3.35 TB/s, 50 MB L2, up to 227 KiB shared memory per "
             "block, 64K 32-bit registers per SM, about 989 TFLOP/s dense bf16 tensor-core"),
)


class PromptTooLarge(ValueError):
    """The parts of a prompt that cannot be dropped do not fit the character budget."""


class NoSourceFound(ValueError):
    """A completion holds no CUDA/C++ source: no fenced code block and no bare kernel."""


# ---------------------------------------------------------------------------------------
# Prompt rendering
@dataclass
class _Section:
    name: str
    rank: int  # lower is dropped first; required sections are never dropped
    lines: List[str]
    required: bool = False
    # Lines kept when the section is shortened (its head), and the marker put after them.
    trimmable: bool = False
    fence_end: Optional[str] = None  # a code section keeps its closing fence when trimmed
    marker: str = "[... {n} more lines not shown ...]"
    kept: Optional[int] = field(default=None)

    def text_lines(self) -> List[str]:
        if self.kept is None:
            return list(self.lines)
        body = self.lines[: self.kept]
        cut = len(self.lines) - self.kept - (1 if self.fence_end is not None else 0)
        out = body + [self.marker.format(n=cut)]
        if self.fence_end is not None:
            out.append(self.fence_end)
        return out

    def size(self) -> int:
        return sum(len(line) + 1 for line in self.text_lines()) + 1  # + the blank separator


# A file the agent cannot open: a path with a directory and an extension, or a document name.
_FILE_MENTION = re.compile(
    r"(?:[\w.-]+/)+[\w.-]+\.[A-Za-z]\w*|\b[\w-]+\.(?:md|rst|txt|json|py|toml|yaml|yml)\b")


def _is_comment_line(line: str) -> bool:
    stripped = line.strip()
    return stripped.startswith("//") and not stripped[2:].lstrip().startswith("@")


def drop_file_mentions(source: str) -> str:
    """The source without the comment paragraphs that point at files the agent cannot open.

    A paragraph is a run of whole-line `//` comments up to an empty `//` line, a directive or
    code; a paragraph naming a path (`kernels/llm/rms_norm.cu`) or a document (`DESIGN.md`)
    goes whole, so no sentence is left cut. Code, directives and trailing comments stay.
    """
    lines = source.splitlines()
    keep = [True] * len(lines)
    i = 0
    while i < len(lines):
        if not _is_comment_line(lines[i]) or not lines[i].strip()[2:].strip():
            i += 1
            continue
        j = i
        while j < len(lines) and _is_comment_line(lines[j]) and lines[j].strip()[2:].strip():
            j += 1
        if any(_FILE_MENTION.search(line) for line in lines[i:j]):
            for k in range(i, j):
                keep[k] = False
        i = j
    out: List[str] = []
    for line, kept in zip(lines, keep):
        if not kept:
            continue
        # Two paragraph breaks in a row where a paragraph went: keep one.
        if line.strip() == "//" and out and out[-1].strip() == "//":
            continue
        out.append(line)
    return "\n".join(out) + ("\n" if source.endswith("\n") else "")


def strip_comments(source: str) -> str:
    """The source without its whole-line `//` comments (launch directives `// @...` stay).

    Trailing comments after code are kept: removing them safely needs a lexer (a `//` may sit
    in a string). Runs of blank lines collapse to one.
    """
    out: List[str] = []
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith("//") and not stripped[2:].lstrip().startswith("@"):
            continue
        if not stripped and out and not out[-1].strip():
            continue
        out.append(line.rstrip())
    while out and not out[0].strip():
        out.pop(0)
    return "\n".join(out) + "\n"


def hardware_notes(hello: Optional[Mapping[str, Any]]) -> List[str]:
    """Lines on the server's compile target and GPUs, from a `hello` (or `stats`) reply."""
    if not hello:
        return []
    lines: List[str] = []
    arch = hello.get("arch")
    gpus = [g for g in hello.get("gpus") or [] if isinstance(g, Mapping)]
    names = sorted({str(g.get("name")) for g in gpus if g.get("name")})
    if names:
        lines.append(f"- The kernel runs on {', '.join(names)}"
                     + (f", compiled for {arch}." if arch else "."))
        for name in names:
            for key, note in _GPU_NOTES:
                if key in name:
                    lines.append(f"- {name}: {note}.")
                    break
    elif arch:
        lines.append(f"- The kernel is compiled for {arch}.")
    return lines


def _fmt_shape(shape: Any) -> str:
    if isinstance(shape, (list, tuple)):
        return "[" + ", ".join(str(s) for s in shape) + "]"
    return str(shape)


def _fmt_num(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


_ROLES = {"in": "input", "out": "output", "inout": "input and output"}


def _interface_lines(task: Mapping[str, Any], compact: bool) -> List[str]:
    lines = ["## Interface", ""]
    tensors = task.get("tensors") or []
    if tensors:
        lines.append("Tensors (contiguous, row-major):")
        for t in tensors:
            role = _ROLES.get(str(t.get("role")), str(t.get("role")))
            line = f"- {t.get('name')}: {t.get('dtype')} {_fmt_shape(t.get('shape'))}, {role}"
            tol = t.get("tolerance")
            if isinstance(tol, Mapping):
                line += (f", checked with atol {_fmt_num(tol.get('atol'))} "
                         f"rtol {_fmt_num(tol.get('rtol'))}")
            if not compact and t.get("description"):
                line += f" -- {t['description']}"
            lines.append(line)
    scalars = task.get("scalars") or []
    if scalars:
        lines.append("Scalars:")
        for s in scalars:
            line = f"- {s.get('name')}: {s.get('dtype')}"
            if s.get("default") is not None:
                line += f" (default {_fmt_num(s['default'])})"
            if not compact and s.get("description"):
                line += f" -- {s['description']}"
            lines.append(line)
    symbols = task.get("symbols") or []
    if symbols:
        lines.append("Shape symbols:")
        for s in symbols:
            line = f"- {s.get('name')}: {s.get('dtype')}"
            if not compact and s.get("description"):
                line += f" -- {s['description']}"
            lines.append(line)
    arguments = task.get("arguments") or []
    if arguments:
        lines.append("Kernel arguments a launch may pass (name: C type):")
        lines.append("- " + ", ".join(f"{a.get('name')}: {a.get('c_type')}" for a in arguments))
    checker = task.get("checker")
    if checker and checker != "elementwise":
        lines.append(f"Outputs are judged by the '{checker}' checker, which accepts every right "
                     "answer (for example ties in any order).")
    return lines


def _case_lines(task: Mapping[str, Any], compact: bool) -> List[str]:
    cases = task.get("cases") or []
    if not cases:
        return []
    lines = ["## Visible cases", "",
             "Timed on these shapes (weight = share of the speedup); correctness is also "
             "checked on hidden shapes, so do not assume any size."]
    for c in cases:
        symbols = c.get("symbols") or {}
        line = f"- {c.get('name')}: " + ", ".join(f"{k}={v}" for k, v in symbols.items())
        if c.get("weight") is not None:
            line += f"; weight {_fmt_num(c['weight'])}"
        if not compact:
            floor = (c.get("roofline") or {}).get("h200_floor_ns")
            if floor is not None:
                line += f"; roofline floor {_fmt_num(floor)} ns"
            if c.get("note"):
                line += f" ({c['note']})"
        lines.append(line)
    roofline = task.get("roofline")
    if not compact and isinstance(roofline, Mapping) and roofline:
        lines.append("Roofline: " + "; ".join(f"{k} = {v}" for k, v in roofline.items()))
    return lines


def _code_section(name: str, rank: int, heading: List[str], source: str) -> _Section:
    body = source.rstrip("\n").splitlines()
    return _Section(name, rank, heading + ["```cuda"] + body + ["```"], trimmable=True,
                    fence_end="```", marker="// [... {n} more lines not shown ...]")


def render_prompt(
    task: Mapping[str, Any],
    *,
    style: str = "full",
    reference: Union[bool, str] = True,
    example: Optional[Union[str, Mapping[str, Any]]] = None,
    hello: Optional[Mapping[str, Any]] = None,
    max_chars: Optional[int] = None,
    instructions: Optional[str] = None,
) -> str:
    """A prompt for writing the kernel of one task, from its agent view (the `task` op's map).

    - `style`: "full" (descriptions, case notes, roofline) or "compact" (names and types only).
    - `reference`: True shows the reference kernel without the comment paragraphs that point
      at files the agent cannot open (`drop_file_mentions`), "code" without any whole-line
      comment, "verbatim" as the server sent it, False not at all. Its path is never shown.
    - `example`: a one-shot example of a correct answer: a source string, or
      `{"source": ..., "title": ...}` (for instance another task's solution).
    - `hello`: the server's `hello` reply; adds notes on its compile target and GPUs.
    - `max_chars`: the budget. When the prompt is longer, sections are dropped or cut (whole
      lines only) from the least important: hardware notes, roofline and case details, the
      example, the reference's tail, the visible cases, the interface's descriptions. The
      title, description, launch rules and answer format always stay; PromptTooLarge is
      raised when they alone exceed the budget.
    - `instructions`: replaces the closing answer-format paragraph.
    """
    if style not in ("full", "compact"):
        raise ValueError("style must be 'full' or 'compact'")
    compact = style == "compact"
    sections: List[_Section] = []
    title = task.get("title") or task.get("id") or "kernel task"
    head = [f"# {title}", ""]
    if task.get("id"):
        head.append(f"Task: {task['id']}")
    if task.get("module"):
        head.append(f"Production call it mirrors: {task['module']}")
    sections.append(_Section("title", 100, head, required=True))
    description = str(task.get("description") or "").rstrip()
    if description:
        sections.append(_Section("description", 100, ["## What to compute", ""]
                                 + description.splitlines(), required=True))
    if not compact:
        sections.append(_Section("interface", 60, _interface_lines(task, compact=False)))
    sections.append(_Section("interface_compact", 95, _interface_lines(task, compact=True),
                             required=True))
    launch = str(task.get("launch") or "").rstrip()
    if launch:
        sections.append(_Section("launch", 100, ["## Rules for the answer", ""]
                                 + launch.splitlines(), required=True))
    cases = _case_lines(task, compact=True)
    if cases:
        sections.append(_Section("cases_compact", 50, cases))
        if not compact:
            sections.append(_Section("cases", 30, _case_lines(task, compact=False)))
    ref = task.get("reference")
    ref_source = ref.get("source") if isinstance(ref, Mapping) else None
    if reference and ref_source:
        if reference == "code" or compact:
            text = strip_comments(ref_source)
        elif reference == "verbatim":
            text = ref_source
        else:
            text = drop_file_mentions(ref_source)
        sections.append(_code_section(
            "reference", 40,
            ["## Reference kernel", "",
             "The kernel your answer is timed against (correct; a starting point):"], text))
    if example is not None:
        if isinstance(example, Mapping):
            ex_source, ex_title = str(example.get("source") or ""), example.get("title")
        else:
            ex_source, ex_title = str(example), None
        label = f"A correct answer for {ex_title}" if ex_title else "A correct answer"
        sections.append(_code_section("example", 35, ["## Example", "", label + ":"], ex_source))
    hw = hardware_notes(hello)
    if hw:
        sections.append(_Section("hardware", 10, ["## Hardware", ""] + hw))
    closing = instructions or (
        "Reply with the complete CUDA source of your kernel in one ```cuda code block, "
        "including its // @launch directives. It must be correct on every case and as fast "
        "as you can make it.")
    sections.append(_Section("answer", 100, ["## Answer", ""] + closing.splitlines(),
                             required=True))
    # The detailed interface supersedes the compact one when both are kept.
    by_name = {s.name: s for s in sections}
    present = [s for s in sections]

    def assemble() -> List[_Section]:
        chosen = list(present)
        if "interface" in by_name and by_name["interface"] in chosen:
            chosen = [s for s in chosen if s.name != "interface_compact"]
        if "cases" in by_name and by_name["cases"] in chosen:
            chosen = [s for s in chosen if s.name != "cases_compact"]
        # Keep the document order: the interface where the compact one would be.
        order = ["title", "description", "interface", "interface_compact", "cases",
                 "cases_compact", "launch", "reference", "example", "hardware", "answer"]
        return sorted(chosen, key=lambda s: order.index(s.name))

    def total() -> int:
        return sum(s.size() for s in assemble()) - 1

    if max_chars is not None:
        if max_chars <= 0:
            raise ValueError("max_chars must be positive")
        for victim in sorted((s for s in present if not s.required), key=lambda s: s.rank):
            excess = total() - max_chars
            if excess <= 0:
                break
            if victim.trimmable:
                # Cut the tail, keeping the heading, the opening fence and at least 3 lines.
                minimum = next((i + 1 for i, line in enumerate(victim.lines)
                                if line.startswith("```")), 0) + 3
                keep = len(victim.lines) - (1 if victim.fence_end else 0)
                while keep > minimum:
                    keep -= 1
                    victim.kept = keep
                    if total() <= max_chars:
                        break
                if total() <= max_chars:
                    break
                victim.kept = None
            present.remove(victim)
        if total() > max_chars:
            raise PromptTooLarge(
                f"the prompt's required parts take {total()} characters; the budget is "
                f"{max_chars}")
    return "\n\n".join("\n".join(s.text_lines()) for s in assemble()) + "\n"


# ---------------------------------------------------------------------------------------
# Completion parsing
_FENCE = re.compile(r"^[ ]{0,3}(`{3,}|~{3,})[ \t]*([^\s`]*)[^\n]*$")
_THINK_END = re.compile(r"</think>", re.IGNORECASE)
_LOOKS_LIKE_SOURCE = re.compile(r"__global__|//\s*@launch")


def completion_text(completion: Any) -> str:
    """The text of a completion: a string, a message map, or a list of messages (the last
    assistant message's content, as conversational trainers pass it)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        content = completion.get("content")
        if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
            return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
        return "" if content is None else str(content)
    if isinstance(completion, Sequence):
        messages = [m for m in completion if isinstance(m, Mapping)]
        for message in reversed(messages):
            if message.get("role", "assistant") == "assistant":
                return completion_text(message)
        return completion_text(messages[-1]) if messages else ""
    raise TypeError(f"a completion must be a string or messages, got {type(completion).__name__}")


def _fenced_blocks(text: str) -> List[Tuple[str, str]]:
    """(language, body) of every fenced block; an unclosed last block runs to the end."""
    blocks: List[Tuple[str, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        fence, language = match.group(1), match.group(2).lower()
        body: List[str] = []
        i += 1
        while i < len(lines):
            closing = lines[i].strip()
            if closing.startswith(fence[0] * len(fence)) and not closing.strip(fence[0]):
                break
            body.append(lines[i])
            i += 1
        blocks.append((language, "\n".join(body)))
        i += 1
    return blocks


def extract_source(
    completion: Any,
    *,
    which: str = "last",
    languages: Iterable[str] = SOURCE_LANGUAGES,
    allow_bare: bool = True,
) -> str:
    """The kernel source in a model's completion.

    Reasoning before a `</think>` is skipped. Fenced blocks (``` or ~~~) tagged with one of
    `languages` (cuda, cpp, c++, ...) or untagged are candidates; blocks in other languages
    (python, bash, ...) are not. `which` picks the "last" or "first" candidate. Without any
    fenced block, `allow_bare` takes the whole text when it looks like source (it declares a
    `__global__` function or a `// @launch` directive). Raises NoSourceFound otherwise.
    """
    if which not in ("last", "first"):
        raise ValueError("which must be 'last' or 'first'")
    text = completion_text(completion)
    ends = list(_THINK_END.finditer(text))
    if ends:
        text = text[ends[-1].end():]
    accepted = {lang.lower() for lang in languages}
    blocks = _fenced_blocks(text)
    candidates = [body for lang, body in blocks if (not lang or lang in accepted) and body.strip()]
    if candidates:
        source = candidates[-1] if which == "last" else candidates[0]
        return source.strip("\n") + "\n"
    if blocks:
        langs = sorted({lang or "untagged" for lang, _ in blocks})
        raise NoSourceFound(f"the completion's code blocks are not CUDA/C++ ({', '.join(langs)})")
    if allow_bare and _LOOKS_LIKE_SOURCE.search(text):
        return text.strip("\n") + "\n"
    raise NoSourceFound("the completion holds no ```cuda code block and no kernel source")


# ---------------------------------------------------------------------------------------
# Feedback
_NEXT_STEP = {
    "invalid_action": "Fix what the message names: every kernel needs a // @launch directive "
                      "whose arguments are the task's names, within the device limits.",
    "compile_error": "Fix the first compile error; only device code and the CUDA/CCCL headers "
                     "are available.",
    "launch_error": "Check the grid, block and shared-memory sizes each launch asks for.",
    "runtime_error": "Look for out-of-bounds or misaligned accesses: guard every index against "
                     "the shape symbols, and do not assume sizes are multiples of the block.",
    "timeout": "The kernel ran too long: check loop bounds and that every thread reaches each "
               "barrier.",
    "incorrect": "Recompute the formula on the failing case; check edge handling for sizes "
                 "that are not multiples of your tile, and write every output element.",
    "hack_detected": "Compute every output on every call; results faster than the hardware "
                     "allows are rejected.",
    "infra_error": "The server failed, not your kernel: submit the same source again.",
}
_HIDDEN_LABEL = re.compile(r"^hidden case #\d+$")
_LOG_LINE = re.compile(r"^\s*\S+?\((\d+)\): (error|warning)[^:]*: (.*)$")


def _result_of(reply: Mapping[str, Any]) -> Tuple[Mapping[str, Any], Mapping[str, Any]]:
    """(result, outer) for a step/score reply, its body, or a bare result/observation."""
    result = reply.get("result")
    if isinstance(result, Mapping):
        return result, reply
    return reply, {}


def _ci(value: Any) -> Optional[Tuple[float, float]]:
    if isinstance(value, Mapping):
        low, high = value.get("low"), value.get("high")
        if isinstance(low, (int, float)) and isinstance(high, (int, float)):
            if math.isfinite(low) and math.isfinite(high):
                return float(low), float(high)
    return None


def _speedup_text(speedup: Any, interval: Any) -> str:
    text = f"{float(speedup):.2f}x"
    ci = _ci(interval)
    if ci is not None:
        text += f" (95 % interval {ci[0]:.2f}x to {ci[1]:.2f}x)"
    return text


def _compile_lines(compile_map: Any, source: Optional[str], max_lines: int) -> List[str]:
    if not isinstance(compile_map, Mapping):
        return []
    log = compile_map.get("log")
    if not isinstance(log, str) or not log.strip():
        return []
    source_lines = source.splitlines() if source else []
    out: List[str] = []
    for raw in log.splitlines():
        match = _LOG_LINE.match(raw)
        if not match:
            continue
        number, kind, text = int(match.group(1)), match.group(2), match.group(3)
        line = f"- line {number}: {kind}: {text}"
        if 1 <= number <= len(source_lines):
            line += f"\n    {source_lines[number - 1].strip()}"
        out.append(line)
        if len(out) >= max_lines:
            break
    if not out:  # a log in some other shape: its first lines as they are
        out = ["    " + line for line in log.strip().splitlines()[:max_lines]]
    return ["Compiler output (line numbers are your source's):"] + out


def _correctness_lines(correctness: Any, max_mismatches: int) -> List[str]:
    if not isinstance(correctness, Mapping):
        return []
    runs = [r for r in correctness.get("runs") or [] if isinstance(r, Mapping)]
    failed = [r for r in runs if r.get("pass") is False]
    out: List[str] = []
    if correctness.get("caught_in_timed_call"):
        out.append("Correct in the correctness runs but wrong in a checked timed call.")
    for run in failed[:max_mismatches]:
        problems = [str(p) for p in run.get("problems") or []]
        if run.get("hidden"):
            label = str(run.get("case") or "")
            label = label if _HIDDEN_LABEL.match(label) else "a hidden case"
            out.append(f"- {label}: " + ("; ".join(problems) or "failed"))
            continue
        symbols = run.get("symbols") or {}
        shape = ""
        if isinstance(symbols, Mapping):
            shape = ", ".join(f"{k}={v}" for k, v in symbols.items())
        where = f"case {run.get('case')}" + (f" ({shape})" if shape else "")
        details = problems or [
            str(o.get("summary")) for o in run.get("outputs") or []
            if isinstance(o, Mapping) and o.get("pass") is False and o.get("summary")]
        out.append(f"- {where}, run {run.get('run', '?')}: " + ("; ".join(details) or "failed"))
    if len(failed) > max_mismatches:
        out.append(f"- ... and {len(failed) - max_mismatches} more failing runs")
    if out:
        passed, checked = correctness.get("passed"), correctness.get("checked")
        if isinstance(passed, int) and isinstance(checked, int):
            out.insert(0, f"Correctness: {passed} of {checked} runs passed before the first "
                          "failure.")
        else:
            out.insert(0, "Correctness:")
    return out


def _timing_lines(result: Mapping[str, Any]) -> Tuple[List[str], Optional[str]]:
    timing = result.get("timing")
    if not isinstance(timing, Mapping):
        return [], None
    out: List[str] = []
    slowest: Optional[Tuple[float, str]] = None
    overall = timing.get("speedup", result.get("speedup"))
    if isinstance(overall, (int, float)):
        out.append("Speedup over the reference (weighted geometric mean): "
                   + _speedup_text(overall, timing.get("speedup_ci95")))
    for case in timing.get("cases") or []:
        if not isinstance(case, Mapping) or not isinstance(case.get("speedup"), (int, float)):
            continue
        name = str(case.get("case"))
        line = f"- case {name}: " + _speedup_text(case["speedup"], case.get("speedup_ci95"))
        cand, ref = case.get("candidate"), case.get("reference")
        if isinstance(cand, Mapping) and isinstance(ref, Mapping):
            ours, theirs = cand.get("median_ns"), ref.get("median_ns")
            if isinstance(ours, (int, float)) and isinstance(theirs, (int, float)):
                line += f"; {ours / 1000:.2f} us vs the reference's {theirs / 1000:.2f} us"
        out.append(line)
        if slowest is None or case["speedup"] < slowest[0]:
            slowest = (float(case["speedup"]), name)
    hint = None
    if slowest is not None:
        if slowest[0] < 1.0:
            hint = (f"Correct. Case {slowest[1]} is slower than the reference "
                    f"({slowest[0]:.2f}x): optimise for that shape first.")
        else:
            hint = (f"Correct and at least as fast everywhere; case {slowest[1]} gains least "
                    f"({slowest[0]:.2f}x): look there for more.")
    return out, hint


def render_feedback(
    reply: Mapping[str, Any],
    *,
    source: Optional[str] = None,
    max_mismatches: int = 3,
    max_log_lines: int = 12,
    max_chars: Optional[int] = None,
    show_reward: bool = True,
) -> str:
    """Feedback for the next turn from a step or score reply (or its `result` map).

    Gives the status and the server's message, the compile log's errors at the lines of
    `source` (the submitted text, when given, quotes each line), the first `max_mismatches`
    failing correctness runs, the speedup per visible case with its 95 % interval, and a
    line on what to try next. Hidden cases appear only by their opaque label. `max_chars`
    cuts whole lines from the end (the first line always stays).
    """
    result, outer = _result_of(reply)
    status = str(result.get("status") or "unknown")
    head = f"Status: {status}"
    step = outer.get("step", result.get("step"))
    if isinstance(step, int) and not isinstance(step, bool):
        head = f"Step {step}: {status}"
    lines = [head]
    if result.get("message"):
        lines.append(str(result["message"]))
    reward = result.get("reward")
    total = reward.get("total") if isinstance(reward, Mapping) else None
    if show_reward and isinstance(total, (int, float)):
        lines.append(f"Reward: {total:.3f}")
    lines.extend(_compile_lines(result.get("compile"), source, max_log_lines)
                 if status == "compile_error" else [])
    lines.extend(_correctness_lines(result.get("correctness"), max_mismatches))
    timing, hint = _timing_lines(result)
    lines.extend(timing)
    if status != "ok":
        hint = _NEXT_STEP.get(status)
    elif hint is None:
        hint = "Correct. Try to make it faster."
    if hint:
        lines.append("Next: " + hint)
    text_lines = "\n".join(lines).splitlines()
    if max_chars is not None:
        while len(text_lines) > 1 and sum(len(l) + 1 for l in text_lines) > max_chars:
            text_lines.pop()
    return "\n".join(text_lines) + "\n"
