"""The context of templates/kernels/_outcome.html, for every page that shows an outcome."""

from __future__ import annotations

from kernels import pictures
from kernels.engine.outcome import Status
from kernels.replay import Replay
from sessions.markdown import render_source


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
    }
