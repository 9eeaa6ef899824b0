"""The context of templates/kernels/_outcome.html, for every page that shows an outcome."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kernels import pictures
from kernels.engine.outcome import Outcome, RunWarning, Status, WarningCode
from kernels.engine.run_warnings import warnings_of
from kernels.program_lines import file_lines, in_file
from kernels.replay import Replay
from kernels.speed_figures import speed_summary
from pages.host_context import case_rows
from sessions.markdown import render_source
from sessions.programs import KernelVersion


def source_language(version: KernelVersion) -> str:
    """How a kernel's source is highlighted: WGSL, or Triton's Python, or CUDA C++."""
    language = version.meta.get("language") if isinstance(version.meta, dict) else None
    return {"triton": "python", "cuda": "cuda"}.get(str(language), "wgsl")


def editor_marks(outcome: Outcome | None) -> dict[str, str]:
    """Where the code editors mark the run's error, as JSON for their data-marks: naga's
    error in the kernel ("source") and the host program's ("host"), at line and column."""
    # Read key by key: outcomes stored by older runners lack some.
    read: Mapping[str, Any] = outcome or {}
    marks: dict[str, list[dict[str, Any]]] = {"source": [], "host": []}
    compile_error = read.get("compile") or {}
    # An error in another kernel the harness runs is not in this version's source.
    if compile_error.get("line") and compile_error.get("kernel", "self") == "self":
        marks["source"].append(
            {
                "line": compile_error["line"],
                "column": compile_error.get("column") or 1,
                "message": compile_error.get("message") or read.get("message", ""),
            }
        )
    program_error = (read.get("program") or {}).get("error") or {}
    if program_error.get("line"):
        marks["host"].append(
            {"line": program_error["line"], "column": 1, "message": program_error["message"]}
        )
    return {name: json.dumps(found) for name, found in marks.items()}


# Statuses of a run that got as far as computing something.
RAN = {Status.PASSED, Status.MISMATCH, Status.NONFINITE, Status.NO_REFERENCE}


def shown_warnings(outcome: Outcome) -> list[RunWarning]:
    """The outcome's warnings that could mislead about this run: llvmpipe's caveats are
    left out where nothing ran (a compile error), and the loop cap beside a run that gave
    the right answer. Runs stored before warnings had codes warned of dropped writes for
    every kernel: with no store named, those are left out."""
    status = outcome["status"]
    shown = []
    for warning in warnings_of(outcome):
        code = warning["code"]
        if code in (WarningCode.LOOP_CAP, WarningCode.DROPPED_WRITES):
            if status not in RAN:
                continue
            if code == WarningCode.LOOP_CAP and status not in (Status.MISMATCH, Status.NONFINITE):
                continue
            if code == WarningCode.DROPPED_WRITES and not warning["data"]:
                continue
        shown.append(warning)
    return shown


def outcome_context(shown: Replay | None) -> dict[str, Any]:
    """The outcome of a replay with its pictures, and its version's source with the line
    of a compile error in it marked."""
    version = shown.version if shown else None
    outcome = shown.outcome if shown else None
    # The words name the file's lines (kernels/program_lines.py); the editors hold the
    # program's code, so their marks stay on its lines (error["line"]).
    outcome = in_file(outcome, file_lines(version)) if version else outcome
    compile_error: Mapping[str, Any] = (outcome.get("compile") if outcome else None) or {}
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
        "warnings": shown_warnings(outcome) if outcome and version else [],
        "cases": case_rows(outcome),
        "source_html": render_source(version.source, source_language(version), marked)
        if version
        else "",
        "marks": editor_marks(outcome),
        "speed": speed_summary(outcome),
    }
