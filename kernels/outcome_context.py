"""The context of templates/kernels/_outcome.html, for every page that shows an outcome."""

from __future__ import annotations

import json

from kernels import pictures
from kernels.engine.outcome import Outcome, Status
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


def outcome_context(shown: Replay | None) -> dict:
    """The outcome of a replay with its pictures, and its version's source with the line
    of a compile error in it marked."""
    version = shown.version if shown else None
    outcome = shown.outcome if shown else None
    compile_error = (outcome or {}).get("compile") or {}
    # An error in another kernel the harness runs has its line in that kernel's source.
    in_this_source = compile_error.get("kernel", "self") == "self"
    marked = [compile_error["line"]] if in_this_source and compile_error.get("line") else []
    return {
        "version": version,
        "run": shown.run if shown else None,
        "outcome": outcome,
        "status": Status(outcome["status"]) if outcome else None,
        "figures": pictures.figures(outcome) if outcome else [],
        "source_html": render_source(version.source, "wgsl", marked) if version else "",
        "marks": editor_marks(outcome),
    }
