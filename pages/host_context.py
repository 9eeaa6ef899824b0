"""The host side of a version for the pages that show it: the host code and the picture
of what it did (templates/kernels/_host.html).

A version with a host program shows the program, its console and error, and the trace
its run left. A version without one shows its harness written out as the WebGPU host
code it stands for (kernels/engine/host/harness_program.py), which is what its run
replayed, and the trace that run left, so a host mistake made in a harness (a dispatch
rounded down, a uniform too short) shows as plainly as one in a program.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kernels import finishing, jobs, trace_pictures
from kernels.engine.host.harness_program import harness_host
from kernels.engine.host.trace import module_sources
from kernels.engine.outcome import Outcome, Status, run_trace
from kernels.engine.run import SEVERITY
from kernels.models import Run
from kernels.program_lines import file_lines, in_file, picture_in_file
from sessions.markdown import render_code, render_source
from sessions.programs import KernelVersion, version_diff


@dataclass
class Host:
    """A version's host code, and the trace of what it did with the WGSL of its modules."""

    code: str = ""
    is_program: bool = False
    trace: Mapping[str, Any] | None = None
    module_sources: dict[str, str] = field(default_factory=dict)
    case: str = ""  # the harness case whose inputs the trace shows


def host_of(version: KernelVersion, outcome: Mapping[str, Any] | None = None) -> Host:
    """The version's host program and its run's trace, or its harness as host code (with
    the inputs of the case whose outputs the outcome shows, when it has cases)."""
    if version.host_program:
        trace = run_trace(outcome)
        # Traces stored before modules carried their code: each module was read as the
        # version's own WGSL.
        own = {m["name"]: version.source for m in (trace or {}).get("modules", [])}
        modules = own | module_sources(trace or {})
        return Host(version.host_program, True, trace, modules)
    try:
        harness = jobs.parsed_harness(version)
        if harness is None:
            return Host()
        sources = jobs.sources_for(version, harness)
    except jobs.ReplayProblem:
        return Host()
    shown = shown_case(outcome)
    case = next((c for c in harness.cases if c.name == shown), None)
    if case is not None:
        harness = harness.for_case(case)
    # The code that ran, and the trace the run left (a run stored before harness runs kept
    # one has none: the code is shown without the picture).
    written = harness_host(harness, sources, version.kernel.name)
    trace = run_trace(outcome)
    # The run names each module by its kernel (its label); a trace carries their code.
    modules = dict(sources) | module_sources(trace or {})
    return Host(written.code, False, trace, modules, shown if case else "")


def shown_case(outcome: Mapping[str, Any] | None) -> str:
    """The name of the case whose outputs a run of several cases shows: its worst, the
    first of the worst (kernels/engine/run.py), or "" for a run without cases."""
    cases = (outcome or {}).get("cases") or []
    known = [c for c in cases if c.get("status") in SEVERITY]
    if not known:
        return ""
    return str(max(known, key=lambda c: SEVERITY.index(Status(c["status"])))["name"])


def case_rows(outcome: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Each case of a run of several, with its verdict in words, the shown one marked."""
    shown = shown_case(outcome)
    return [
        {
            "name": case["name"],
            "description": case.get("description", ""),
            "status": case["status"],
            "label": Status(case["status"]).label,
            "message": case["message"],
            "shown": case["name"] == shown,
        }
        for case in (outcome or {}).get("cases") or []
    ]


def host_context(
    version: KernelVersion,
    outcome: Outcome | None,
    findings: bool = True,
    compare_with: KernelVersion | None = None,
    run: Run | None = None,
) -> dict[str, Any]:
    """What _host.html shows of this version; {} when it has no host side to show.

    findings: the picture's findings and their marked lines (they name the fix: a lesson
    leaves them out and asks instead). compare_with: the version the run was compared
    with, when the reader chose one. run: the finished run whose outcome this is, which
    holds the picture of its program's trace."""
    host = host_of(version, outcome)
    if not host.code:
        return {}
    # The program's lines as the reader's browser names them (index.html:193); the marks
    # stay on the lines of the code shown, whose margin numbers the file's lines.
    lines = file_lines(version) if host.is_program else None
    outcome = in_file(outcome, lines)
    read: Mapping[str, Any] = outcome or {}
    program = read.get("program") or {}
    error = program.get("error") or None
    counted = read.get("store_counts") or []
    picture = _picture(host, version, run, error, counted)
    if picture is not None and not findings:
        picture = {**picture, "findings": []}
    marked = [f["line"] for f in (picture or {}).get("findings", []) if f.get("line")]
    if error and error.get("line"):
        marked.append(error["line"])
    if picture is not None and lines is not None:
        picture = picture_in_file(picture, lines)
    numbers = lines.line if lines is not None else None
    context = {
        "is_program": host.is_program,
        "case": host.case,
        "html": render_source(host.code, "javascript", sorted(set(marked)), numbers),
        "picture": picture,
        "console": program.get("console", []),
        "page_text": any(line["level"] == "page" for line in program.get("console", [])),
        "console_dropped": program.get("console_dropped", 0),
        "error": error,
    }
    # What readbacks are compared with means nothing to a run that read none back.
    read_back = outcome is None or bool(host.trace and host.trace.get("readbacks"))
    if host.is_program and read_back:
        context["check"] = check_text(version, compare_with)
    return context


def _picture(
    host: Host,
    version: KernelVersion,
    run: Run | None,
    error: Mapping[str, Any] | None,
    counted: Sequence[Mapping[str, Any]],
) -> dict[str, Any] | None:
    """What the trace draws: as stored with its run, or drawn now for a run not finished."""
    if not host.trace:
        return None
    if run is None or run.state != Run.State.DONE:
        return trace_pictures.host_picture(host.trace, host.module_sources, error, counted)
    picture = finishing.stored_picture(run, version.source)
    if picture is None:
        return None
    # The bind group WebGPU refused carries the error in the words the page uses (the
    # file's line where it has one), not the engine's.
    unbound = [
        {**group, "error": str(error.get("message", ""))} if group["error"] and error else group
        for group in picture["unbound"]
    ]
    return {**picture, "unbound": unbound}


def host_diff_html(version: KernelVersion, previous: KernelVersion | None) -> str:
    """The diff of the host code from the previous version, when it changed."""
    if previous is None:
        return ""
    before, after = host_of(previous).code, host_of(version).code
    if before == after or not (before or after):
        return ""
    return render_code(version_diff(before, after, previous.number, version.number), "diff")


def check_text(version: KernelVersion, compare_with: KernelVersion | None = None) -> str:
    """What a program's readbacks were compared with, in words."""
    if compare_with is not None and compare_with.host_program:
        return (
            f"Its readbacks are compared with those of v{compare_with.number}, the earlier "
            "version you chose."
        )
    try:
        check = jobs.program_check(version, jobs.parsed_harness(version))
    except jobs.ReplayProblem:
        return ""
    if check.harness is not None and check.harness.reference is not None:
        return (
            f"Its readbacks are compared with numpy's {check.harness.reference.name}, "
            "computed from the inputs the program wrote."
        )
    if check.final is not None:
        return (
            f"Its readbacks are compared with those of v{check.final.number}, the final "
            "version of this program in the session."
        )
    return (
        "Its readbacks are shown as they came back: this is the final version of the "
        "program, and its kernel names no reference to compare with."
    )
