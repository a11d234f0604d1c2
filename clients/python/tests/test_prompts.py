"""crucible_client.prompts: prompts from task views, sources from completions, feedback from
results. Pure functions first; the last tests render every real task the server lists."""

from __future__ import annotations

import re

import pytest

from crucible_client.prompts import (
    NoSourceFound,
    PromptTooLarge,
    completion_text,
    drop_file_mentions,
    extract_source,
    hardware_notes,
    render_feedback,
    render_prompt,
    strip_comments,
)

REFERENCE = "\n".join(
    ["// Reference: one block per row.", "// See the design notes for why.", "//",
     "// Launch plan (DESIGN.md section 2): one block", "// per row, as in kernels/x/y.cu.",
     "// @launch k<<<n, 256>>>(out, x, n)", "#include <cuda_bf16.h>",
     'extern "C" __global__ void k(float* out, const float* x, int n) {']
    + [f"  out[{i}] = x[{i}];  // element {i}" for i in range(80)]
    + ["}"]) + "\n"
TASK = {
    "id": "demo/copy",
    "category": "demo",
    "module": "torch.clone",
    "title": "Copy, fp32",
    "description": "Copy x into out.\nEvery element, in order.",
    "launch": "Write device code only.\nDeclare launches with // @launch.",
    "symbols": [{"name": "n", "dtype": "i32", "description": "elements"}],
    "tensors": [
        {"name": "out", "dtype": "f32", "shape": ["n"], "role": "out",
         "tolerance": {"atol": 1e-5, "rtol": 1e-5}, "description": "the copy"},
        {"name": "x", "dtype": "f32", "shape": ["n"], "role": "in", "description": "source"},
    ],
    "scalars": [],
    "arguments": [{"name": "out", "kind": "tensor", "c_type": "float*"},
                  {"name": "x", "kind": "tensor", "c_type": "const float*"},
                  {"name": "n", "kind": "symbol", "c_type": "int32_t"}],
    "roofline": {"bytes": "8 * n", "flops": "0"},
    "cases": [{"name": "small", "symbols": {"n": 7}, "weight": 0.5, "note": "odd size",
               "roofline": {"h200_floor_ns": 1.5}},
              {"name": "large", "symbols": {"n": 1 << 20}, "weight": 0.5}],
    "checker": "elementwise",
    "reference": {"path": "kernels/demo/copy.cu", "source": REFERENCE},
}
HELLO = {"arch": "sm_90a", "gpus": [{"index": 0, "name": "NVIDIA H200"}]}


# -- render_prompt --------------------------------------------------------------------------
def test_full_prompt_has_every_part_and_never_the_reference_path():
    prompt = render_prompt(TASK, hello=HELLO, example={"source": "// ex\n", "title": "add"})
    for needle in ("# Copy, fp32", "demo/copy", "torch.clone", "Copy x into out.",
                   "out: f32 [n], output, checked with atol 1e-05", "x: f32 [n], input -- source",
                   "small: n=7; weight 0.5; roofline floor 1.5 ns (odd size)",
                   "Roofline: bytes = 8 * n", "Declare launches with // @launch.",
                   "out[79] = x[79];", "A correct answer for add:", "// ex",
                   "NVIDIA H200, compiled for sm_90a", "4.8 TB/s", "```cuda"):
        assert needle in prompt, needle
    assert "kernels/demo/copy.cu" not in prompt


def test_compact_prompt_drops_descriptions_and_comment_lines_but_keeps_directives():
    prompt = render_prompt(TASK, style="compact")
    assert "-- source" not in prompt and "odd size" not in prompt and "Roofline" not in prompt
    assert "// @launch k<<<n, 256>>>(out, x, n)" in prompt
    assert "// Reference: one block per row." not in prompt
    assert "small: n=7; weight 0.5" in prompt


def test_reference_can_be_left_out_or_shown_without_comments():
    assert "__global__" not in render_prompt(TASK, reference=False)
    shown = render_prompt(TASK)
    assert "DESIGN.md" not in shown and "per row, as in" not in shown
    assert "// See the design notes for why." in shown
    assert "DESIGN.md section 2" in render_prompt(TASK, reference="verbatim")
    code_only = render_prompt(TASK, reference="code")
    assert "// See the design notes" not in code_only and "// @launch" in code_only


@pytest.mark.parametrize("budget", [6000, 3000, 2200, 1500, 1000, 700])
def test_a_budget_is_met_by_dropping_the_least_important_parts_at_line_boundaries(budget):
    full = render_prompt(TASK, hello=HELLO, example="// example\n")
    prompt = render_prompt(TASK, hello=HELLO, example="// example\n", max_chars=budget)
    assert len(prompt) <= budget
    # Every line is whole: from the full or the compact prompt (shorter forms of the same
    # sections), or a marker saying what was cut.
    full_lines = set(full.splitlines()) | set(render_prompt(TASK, style="compact").splitlines())
    for line in prompt.splitlines():
        assert line in full_lines or "more lines not shown" in line, line
    # Required parts always stay.
    for needle in ("# Copy, fp32", "Copy x into out.", "Declare launches", "## Answer",
                   "out: f32 [n], output"):
        assert needle in prompt
    # Least important first: hardware goes before the reference is touched.
    if "## Reference kernel" in prompt:
        assert "## Hardware" not in prompt or prompt == full
    if "more lines not shown" in prompt:  # a cut code block keeps its closing fence
        after = prompt.split("more lines not shown ...]", 1)[1]
        assert after.lstrip("\n").startswith("```")


def test_a_budget_below_the_required_parts_raises():
    with pytest.raises(PromptTooLarge, match="required parts"):
        render_prompt(TASK, max_chars=100)
    with pytest.raises(ValueError):
        render_prompt(TASK, style="tiny")


def test_hardware_notes_come_from_hello_and_say_nothing_without_it():
    assert hardware_notes(None) == []
    assert hardware_notes({"arch": "sm_90a", "gpus": []}) == [
        "- The kernel is compiled for sm_90a."]
    notes = hardware_notes({"arch": "sm_90a", "gpus": [{"index": 0, "name": "Some GPU"}]})
    assert notes == ["- The kernel runs on Some GPU, compiled for sm_90a."]


def test_comment_paragraphs_that_point_at_files_go_whole():
    source = ("// Intro line.\n//\n// Plan (see DESIGN.md): one block\n// per row.\n//\n"
              "// @launch k<<<n, 256>>>(out)\n// Notes on bench/results/x.json and\n"
              "// more.\nint a;  // from docs/y.md\n// Last words.\n")
    assert drop_file_mentions(source) == (
        "// Intro line.\n//\n// @launch k<<<n, 256>>>(out)\n"
        "int a;  // from docs/y.md\n// Last words.\n")


def test_strip_comments_keeps_code_directives_and_trailing_comments():
    text = strip_comments("// a\n\n\n// @launch k<<<1,1>>>()\nint x;  // why\n   // b\n\n\ny;\n")
    assert text == "// @launch k<<<1,1>>>()\nint x;  // why\n\ny;\n"


# -- extract_source -------------------------------------------------------------------------
KERNEL = '// @launch k<<<1, 1>>>(out)\nextern "C" __global__ void k(float* out) { out[0] = 1; }'


@pytest.mark.parametrize("tag", ["cuda", "cpp", "c++", "CUDA", "cu", ""])
def test_fenced_blocks_in_any_cuda_or_cpp_tag_are_found(tag):
    completion = f"Here it is:\n\n```{tag}\n{KERNEL}\n```\nDone."
    assert extract_source(completion) == KERNEL + "\n"


def test_last_or_first_block_and_other_languages_are_skipped():
    completion = (f"```cuda\n// draft\n{KERNEL}\n```\ntest with:\n```python\nprint(1)\n```\n"
                  f"final:\n~~~c++\n// final\n{KERNEL}\n~~~\n")
    assert extract_source(completion).startswith("// final")
    assert extract_source(completion, which="first").startswith("// draft")


def test_reasoning_before_think_end_and_unclosed_fences_are_handled():
    completion = f"<think>```cuda\n// thought\n```</think>\nAnswer:\n```cuda\n{KERNEL}\n"
    assert extract_source(completion) == KERNEL + "\n"  # truncated output, no closing fence


def test_bare_source_is_taken_only_when_it_looks_like_a_kernel():
    assert extract_source(KERNEL) == KERNEL + "\n"
    with pytest.raises(NoSourceFound):
        extract_source(KERNEL, allow_bare=False)


@pytest.mark.parametrize("completion", ["", "I cannot help with that.",
                                        "```python\nprint('no cuda')\n```"])
def test_no_source_raises_a_clear_error(completion):
    with pytest.raises(NoSourceFound) as caught:
        extract_source(completion)
    assert "code block" in str(caught.value) or "not CUDA" in str(caught.value)


def test_conversational_completions_use_the_last_assistant_message():
    messages = [{"role": "user", "content": "write it"},
                {"role": "assistant", "content": f"```cuda\n{KERNEL}\n```"}]
    assert completion_text(messages).startswith("```cuda")
    assert extract_source(messages) == KERNEL + "\n"
    assert extract_source({"role": "assistant", "content": KERNEL}) == KERNEL + "\n"
    with pytest.raises(TypeError):
        completion_text(42)


# -- render_feedback ------------------------------------------------------------------------
def test_compile_errors_are_shown_at_the_agents_lines():
    source = ('// @launch k<<<1,1>>>(out)\n'
              'extern "C" __global__ void k(float* out) { out[0] = 1 }\n')
    reply = {"step": 2, "result": {
        "status": "compile_error", "message": "compilation failed",
        "reward": {"total": -1.0, "infra": False},
        "compile": {"log": 'kernel.cu(2): error: expected a ";"\n  extern ...\n      ^\n\n'
                           '1 error detected in the compilation of "kernel.cu".\n'}}}
    text = render_feedback(reply, source=source)
    assert text.startswith("Step 2: compile_error\ncompilation failed\nReward: -1.000\n")
    assert '- line 2: error: expected a ";"\n    extern "C" __global__ void k' in text
    assert "Next: Fix the first compile error" in text


def test_mismatches_name_visible_cases_and_hidden_cases_only_by_label():
    result = {
        "status": "incorrect", "message": "hidden case #2 (run 1): values are off",
        "correctness": {"passed": 3, "checked": 5, "runs": [
            {"case": "small", "hidden": False, "run": 1, "pass": True},
            {"case": "large", "hidden": False, "run": 1, "pass": False, "symbols": {"n": 1048576},
             "problems": ["3 of 1048576 elements of 'out' are outside the tolerance; "
                          "first at [5]"]},
            {"case": "hidden case #2", "hidden": True, "run": 1, "pass": False,
             "problems": ["values of 'out' are outside the tolerance"]},
            # A hidden run whose label is not the opaque form is never quoted.
            {"case": "odd_shape_777", "hidden": True, "run": 2, "pass": False,
             "symbols": {"n": 777}, "problems": ["elements of 'out' were left unwritten"]},
        ]}}
    text = render_feedback(result)
    assert "Correctness: 3 of 5 runs passed" in text
    assert "- case large (n=1048576), run 1: 3 of 1048576 elements" in text
    assert "- hidden case #2: values of 'out' are outside the tolerance" in text
    assert "- a hidden case: elements of 'out' were left unwritten" in text
    assert "odd_shape_777" not in text and "777" not in text
    assert "Next: Recompute the formula" in text


def test_speedup_per_visible_case_with_its_interval_and_a_next_step():
    result = {"status": "ok", "message": "correct; 1.10x", "speedup": 1.1,
              "reward": {"total": 1.07, "infra": False},
              "timing": {"speedup": 1.1, "speedup_ci95": {"low": 1.05, "high": 1.16}, "cases": [
                  {"case": "small", "speedup": 0.8, "speedup_ci95": {"low": 0.75, "high": 0.86},
                   "candidate": {"median_ns": 5000.0}, "reference": {"median_ns": 4000.0}},
                  {"case": "large", "speedup": 1.5}]}}
    text = render_feedback(result)
    assert "(weighted geometric mean): 1.10x (95 % interval 1.05x to 1.16x)" in text
    assert ("- case small: 0.80x (95 % interval 0.75x to 0.86x); 5.00 us vs the reference's "
            "4.00 us") in text
    assert "- case large: 1.50x\n" in text
    assert "Next: Correct. Case small is slower than the reference (0.80x)" in text


def test_feedback_budget_cuts_whole_lines_and_infra_says_resubmit():
    result = {"status": "infra_error", "message": "no CUDA device on this server",
              "reward": {"total": 0.0, "infra": True}}
    text = render_feedback({"result": result})
    assert "Next: The server failed, not your kernel" in text
    short = render_feedback({"result": result}, max_chars=50)
    assert len(short) <= 50
    assert short == "Status: infra_error\nno CUDA device on this server\n"


# -- against the real server ---------------------------------------------------------------
def test_every_real_task_renders_within_a_budget(client):
    hello = client.request("hello")
    tasks = client.request("tasks")["tasks"]
    assert tasks
    for entry in tasks:
        view = client.request("task", task=entry["id"])["task"]
        prompt = render_prompt(view, hello=hello, max_chars=8000)
        assert len(prompt) <= 8000 and view["title"] in prompt
        assert view["reference"]["path"] not in prompt
        if "## Reference kernel" in prompt:  # no comment points at a file the agent lacks
            shown = prompt.split("## Reference kernel", 1)[1].split("## ", 1)[0]
            for line in shown.splitlines():
                if line.lstrip().startswith("//") and "@launch" not in line:
                    mention = re.search(r"\w/[\w.-]+\.[A-Za-z]|DESIGN\.md", line)
                    assert not mention, (entry["id"], line)
        compact = render_prompt(view, style="compact", reference=False)
        assert "## Reference kernel" not in compact


def test_feedback_from_a_real_compile_error(client):
    source = ('// @launch k<<<1, 32>>>(out)\n#include <cuda_bf16.h>\n'
              'extern "C" __global__ void k(__nv_bfloat16* out) { out[0] = undefined_name; }\n')
    reply = client.request("score", task="llm/rms_norm", source=source)
    text = render_feedback(reply, source=source)
    assert text.startswith("Status: compile_error")
    assert "- line 3: error:" in text and "undefined_name" in text


def test_cli_prints_a_prompt_within_its_budget(live_server):
    import os
    import subprocess
    import sys

    from conftest import REPO

    command = [sys.executable, "-m", "crucible_client", "-e", live_server.endpoint, "prompt",
               "llm/rms_norm", "--compact", "--max-chars", "4000"]
    env = dict(os.environ, PYTHONPATH=str(REPO / "clients" / "python" / "src"))
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("# ") and len(done.stdout) <= 4000
    done = subprocess.run(command[:-1] + ["50"], capture_output=True, text=True, timeout=60,
                          env=env)
    assert done.returncode == 2 and "required parts" in done.stderr


def _shared_completion_cases():
    # The table crucible eval's C++ parser is tested against too (tests/eval/test_completion.cpp),
    # so both parsers give the same source for the same completion.
    import json
    from pathlib import Path

    table = Path(__file__).resolve().parents[3] / "tests" / "eval" / "completion_cases.json"
    return json.loads(table.read_text())["cases"]


@pytest.mark.parametrize("case", _shared_completion_cases(), ids=lambda case: case["name"])
def test_shared_completion_table(case):
    which = case.get("which", "last")
    if case.get("not_a_completion"):
        with pytest.raises(TypeError):
            extract_source(case["completion"], which=which)
    elif "error" in case:
        with pytest.raises(NoSourceFound) as raised:
            extract_source(case["completion"], which=which)
        assert str(raised.value) == case["error"]
    else:
        assert extract_source(case["completion"], which=which) == case["source"]
