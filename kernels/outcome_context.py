"""The context of templates/kernels/_outcome.html, for every page that shows an outcome."""

from __future__ import annotations

import json

from kernels import pictures
from kernels.engine.outcome import Outcome, Status
from kernels.engine.wgsl import tokenize
from kernels.host_context import case_rows
from kernels.replay import Replay
from sessions.markdown import render_source


def editor_marks(outcome: Outcome | None) -> dict[str, str]:
    """Where the code editors mark the run's error, as JSON for their data-marks: naga's
    error in the kernel ("source") and the host program's ("host"), at line and column."""
    outcome = outcome or {}
    marks: dict[str, list[dict]] = {"source": [], "host": []}
    compile_error = outcome.get("compile") or {}
    # An error in another kernel the harness runs is not in this version's source.
    if compile_error.get("line") and compile_error.get("kernel", "self") == "self":
        marks["source"].append(
            {
                "line": compile_error["line"],
                "column": compile_error.get("column") or 1,
                "message": compile_error.get("message") or outcome.get("message", ""),
            }
        )
    program_error = (outcome.get("program") or {}).get("error") or {}
    if program_error.get("line"):
        marks["host"].append(
            {"line": program_error["line"], "column": 1, "message": program_error["message"]}
        )
    return {name: json.dumps(found) for name, found in marks.items()}


# Statuses of a run that got as far as computing something.
RAN = {Status.PASSED, Status.MISMATCH, Status.NONFINITE, Status.NO_REFERENCE}
# A guard's condition is short; past this many tokens an "if" is not looked into further.
GUARD_TOKENS = 200


def _has_bounds_check(source: str) -> bool:
    """Whether the kernel compares before it indexes (an "if" with < or > in its
    condition) or asks a buffer its length."""
    tokens = tokenize(source).tokens
    for i, token in enumerate(tokens):
        if token.text == "arrayLength":
            return True
        if token.text == "if":
            for later in tokens[i + 1 : i + GUARD_TOKENS]:
                if later.text == "{":
                    break
                if later.text in ("<", ">"):
                    return True
    return False


def shown_warnings(outcome: Outcome, source: str) -> list[str]:
    """The outcome's warnings that could mislead about this run. llvmpipe's caveats
    (kernels/engine/run.py) are left out where they cannot: nothing ran (a compile
    error); the loop cap for a run that gave the right answer; dropped out-of-bounds
    writes for a kernel that checks its bounds."""
    status = outcome["status"]
    shown = []
    for warning in outcome.get("warnings", []):
        if "llvmpipe" in warning:
            if status not in RAN:
                continue
            if "loop" in warning and status not in (Status.MISMATCH, Status.NONFINITE):
                continue
            if "Out-of-bounds" in warning and _has_bounds_check(source):
                continue
        shown.append(warning)
    return shown


def outcome_context(shown: Replay | None) -> dict:
    """The outcome of a replay with its pictures, and its version's source with the line
    of a compile error in it marked."""
    version = shown.version if shown else None
    outcome = shown.outcome if shown else None
    compile_error = (outcome or {}).get("compile") or {}
    # An error in another kernel the harness runs has its line in that kernel's source.
    in_this_source = compile_error.get("kernel", "self") == "self"
    marked = [compile_error["line"]] if in_this_source and compile_error.get("line") else []
    figures = pictures.figures(outcome) if outcome else []
    return {
        "version": version,
        "run": shown.run if shown else None,
        "outcome": outcome,
        "status": Status(outcome["status"]) if outcome else None,
        "figures": figures,
        # The legend of the colours that mark cells, for the pictures that mark them.
        "legend": any(figure.get("marks") for figure in figures),
        "warnings": shown_warnings(outcome, version.source) if outcome and version else [],
        "cases": case_rows(outcome),
        "source_html": render_source(version.source, "wgsl", marked) if version else "",
        "marks": editor_marks(outcome),
    }
