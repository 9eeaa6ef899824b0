"""What the web process does with untrusted text grows linearly with it, and is capped.

The guardrail reads every reply Claude streams (a learner can ask Claude for anything),
and the offline reviewer explains every run: both run in the web process. The guardrail's
work is counted in steps (characters looked at) over an attack family at doubling sizes,
for a whole reply and for one streamed in small deltas; the reviewer reads nothing of the
kernel but the lines it quotes, and takes its facts from the outcome the worker wrote.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernels.engine.outcome import Outcome
from kernels.engine.uniformity import uniformity_error
from tests.base import stored_outcome
from tutor.guardrail import MAX_CHARS, NOTE, StreamGuard, redact
from tutor.review import offline_review

SIZES = (1000, 2000, 4000, 8000, 16000)  # characters
GROWTH = 2.2
ROOT = Path(__file__).resolve().parents[2]


def times(unit: str, size: int) -> str:
    return unit * max(1, size // len(unit))


ATTACKS: dict[str, Callable[[int], str]] = {
    "single backticks": lambda n: "Look at this: " + times("` x ", n),
    "backtick runs of every length": lambda n: (
        "See " + times("".join("`" * k + " a " for k in range(1, 40)), n)
    ),
    "an unclosed span": lambda n: "Use the value `" + times("abcd ", n),
    "an open fence": lambda n: "Here:\n```wgsl\n" + times("let x = a[i];\n", n),
    "a run of code lines": lambda n: "Try:\n" + times("out[i] = a[i] + b[i];\n", n),
    "a long code line": lambda n: "let x = " + "a[" * n + "\n",
    "markers": lambda n: times("fn f( @group ( var < storage ", n),
    "semicolons and blanks": lambda n: times(";" + " " * 60 + "x\n", n),
    "prose with spans": lambda n: times("Use `a` and `` b `` and `fn f(` here.\n", n),
    "fence lines": lambda n: times("```\n", n),
    "blank lines": lambda n: "\n" * n,
    # What the guardrail reads since it judges what a reply gives (tutor/guardrail.py).
    "attribute lines": lambda n: times("@a\n", n),
    "nested parentheses": lambda n: "x = " + "(" * (n // 2) + "a" + ")" * (n // 2) + ";\n",
    "an unclosed parenthesis": lambda n: "Note (" + times("x = a[i] + 1\n", n),
    "assignments in a row": lambda n: times("a = ", n) + ";\n",
    "keywords in a row": lambda n: times("let if return fn ", n),
    "base64 runs": lambda n: times("QGNvbXB1dGUgZm4gbWFpbigpIHsgeCA9IDE7IH0= ", n),
    "entities and escapes": lambda n: times("&#64;\\[&lt;\\*", n),
    "table rows": lambda n: times("| `let i = id.x;` | `out[i] = a[i];` |\n", n),
    "open blocks": lambda n: times("fn f() {\n", n),
}


def streamed(text: str, size: int) -> int:
    guard = StreamGuard()
    for start in range(0, len(text), size):
        guard.feed(text[start : start + size])
    guard.finish()
    return guard.steps


@pytest.mark.parametrize("attack", list(ATTACKS), ids=list(ATTACKS))
@pytest.mark.parametrize("how", ["whole", "in deltas of 4", "line by line"])
def test_the_guardrails_work_grows_linearly(attack: str, how: str) -> None:
    counted = []
    for n in SIZES:
        text = ATTACKS[attack](n)
        if how == "whole":
            counted.append(redact(text).steps)
        elif how == "in deltas of 4":
            counted.append(streamed(text, 4))
        else:
            guard = StreamGuard()
            for line in text.splitlines(keepends=True):
                guard.feed(line)
            guard.finish()
            counted.append(guard.steps)
    for smaller, larger in itertools.pairwise(counted):
        assert larger <= GROWTH * smaller + 100, f"{attack}, {how}: {counted}"


def test_a_reply_is_read_up_to_the_cap_and_the_rest_withheld() -> None:
    text = "A fine explanation, word after word. " * (3 * MAX_CHARS // 37)
    guarded = redact(text)

    assert guarded.steps < 6 * MAX_CHARS
    assert guarded.text.endswith("it is too long to check.)*")
    assert guarded.rules == ["too long"]
    assert len(guarded.text) < MAX_CHARS + 200
    guard = StreamGuard()
    shown = "".join(guard.feed(text[i : i + 7]) for i in range(0, len(text), 7)) + guard.finish()
    assert shown == guarded.text
    assert guard.steps < 6 * MAX_CHARS


def test_a_held_block_is_not_read_again_on_every_delta() -> None:
    guard = StreamGuard()
    assert guard.feed("Look:\n```wgsl\n") == "Look:\n"
    for k in range(200):
        assert guard.feed(f"let i{k} = id.x;\n") == ""
    steps = guard.steps
    assert guard.feed("```\n") == NOTE + "\n"
    assert steps < 200 * 80


# -- the reviewer ---------------------------------------------------------------------------------


def test_the_review_takes_the_workgroup_size_from_the_outcome_not_the_source() -> None:
    harness = {
        "buffers": {
            "a": {"dtype": "f32", "shape": [128], "usage": "read", "zeros": True},
            "out": {"dtype": "f32", "shape": [128], "usage": "read_write", "output": True},
        },
        "passes": [{"entry_point": "main", "bind": {"0": "a", "1": "out"}, "dispatch": [2]}],
    }
    entry: Any = {
        "name": "main",
        "stage": "compute",
        "line": 3,
        "workgroup_size": [32, 1, 1],
        "workgroup_storage": 0,
        "builtins": {"id": "global_invocation_id"},
        "writes": [{"buffer": "out", "index": "id.x", "line": 5}],
        "loops": [],
    }
    outcome: Outcome = {
        "status": "mismatch",
        "message": "64 of 128 cells differ.",
        "environment": {},
        "timings": {"compile_ms": 1.0, "run_ms": 1.0, "wall_ms": 2.0},
        "warnings": [],
        "outputs": [{"name": "out", "count": 128, "bad": 64, "unwritten": 64, "first_bad": []}],
        "analysis": {"self": {"entry_points": [entry], "bindings": []}},
    }
    # A source the old reader took seconds over: the review never reads it.
    hostile = "@compute " + "@a " * 40 + "f"

    review = offline_review(outcome, hostile, harness)

    assert "Only 64 invocations ran (2 workgroups × @workgroup_size 32)" in review
    entry["workgroup_size"] = [64, 1, 1]
    review = offline_review(outcome, hostile, harness)
    assert "Enough invocations ran" in review
    assert "It stores into `out[id.x]` (line 5)." in review


def test_the_web_side_parses_no_kernel() -> None:
    """The reviewer and the exchange read no kernel; the guardrail reads replies with the
    engine's tokenizer only (one pass, its steps counted), never its parser."""
    engine_readers = {"kernels.engine.wgsl", "kernels.engine.analysis", "kernels.engine.uniformity"}
    for path in ("tutor/review.py", "tutor/guardrail.py", "tutor/engine.py", "tutor/replies.py"):
        tree = ast.parse((ROOT / path).read_text())
        imported = {
            (node.module, alias.name)
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
            for alias in node.names
        }
        allowed = {("kernels.engine.wgsl", name) for name in ("tokenize", "IDENT", "NUMBER")}
        if path == "tutor/guardrail.py":
            imported -= allowed
        assert not {module for module, _ in imported} & engine_readers, path


def test_compile_causes_are_found_in_one_pass_over_a_long_message() -> None:
    line = "expected " * 20_000
    outcome: Outcome = {
        "status": "compile_error",
        "message": "The kernel does not compile.",
        "environment": {},
        "timings": {"compile_ms": 1.0, "run_ms": None, "wall_ms": 1.0},
        "warnings": [],
        "outputs": [],
        "compile": {
            "kernel": "self",
            "line": 1,
            "column": 1,
            "message": "type mismatch",
            "label": "",
            "notes": [],
            "text": f"1 │ {line}found",
        },
    }
    review = offline_review(outcome, line, {})
    assert "Two types meet that WGSL will not convert for you" in review


def test_the_review_of_a_barrier_a_browser_refuses_names_tint_and_the_cause() -> None:
    source = (
        "var<workgroup> tile: array<f32, 64>;\n@compute @workgroup_size(64)\n"
        "fn main(@builtin(local_invocation_id) lid: vec3<u32>) {\n"
        "  if (lid.x < 32u) {\n    workgroupBarrier();\n  }\n}\n"
    )
    info = uniformity_error("self", source)
    assert info is not None
    outcome = stored_outcome(
        {"status": "compile_error", "message": "", "compile": info, "outputs": []}
    )

    review = offline_review(outcome, source, {})

    assert "Tint, refuses it at line 5, column 5" in review
    assert "Line 5 reads `workgroupBarrier();`" in review
    assert "Tint adds: line 4, column 7: builtin 'lid' of 'main' may be non-uniform." in review
    assert "Likely cause: A barrier must be reached by every invocation" in review
