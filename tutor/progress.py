"""A learner's progress through a guided session: which objectives each version met, and
what a version changed since the one before and whether that fixed its failure.

The lesson says what a run shows when an objective is met (its objective_checks); each
submission records the objectives its run met (Turn.meta["met"]), so the page, the
automatic reviewer and Claude read the same record. Everything here reads the outcome and
the worker's analysis of the source; nothing parses a kernel in the web process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kernels.engine.outcome import EntryPointFacts, Outcome, Status
from sessions.models import Turn, TurnQuerySet
from sessions.programs import KernelVersion, text_diff
from tutor import host_review
from tutor.review import FINDINGS

if TYPE_CHECKING:
    from tutor.models import GuidedSession


def _entry_points(outcome: Outcome) -> list[EntryPointFacts]:
    facts = (outcome.get("analysis") or {}).get("self")
    return facts["entry_points"] if facts else []


def _shows(check: dict[str, Any], outcome: Outcome) -> bool:
    """Whether this run shows what the check asks for."""
    if check.get("status") and outcome.get("status") not in check["status"]:
        return False
    if check.get("host") and not host_review.program(outcome):
        return False
    entries = _entry_points(outcome)
    wanted_calls = set(check.get("calls") or [])
    wanted_builtins = set(check.get("builtins") or [])
    if check.get("guarded") and not all(
        write.get("guarded") for entry in entries for write in entry.get("writes") or []
    ):
        return False
    return any(
        wanted_calls <= set(entry.get("calls") or [])
        and wanted_builtins <= set((entry.get("builtins") or {}).values())
        and (not check.get("shared") or (entry.get("shared") or {}).get("accesses"))
        for entry in entries
    ) or not (wanted_calls or wanted_builtins or check.get("shared"))


def objectives_met(lesson: dict[str, Any], outcome: Outcome) -> list[int]:
    """The indexes of the lesson's objectives this run shows met."""
    checks = (lesson or {}).get("objective_checks") or []
    return [i for i, check in enumerate(checks) if check and _shows(check, outcome)]


def _submissions(guided: GuidedSession) -> TurnQuerySet:
    return guided.session.turns.filter(
        meta__kind="submission", kernel_version__kernel=guided.kernel
    ).select_related("kernel_version")


def met_so_far(guided: GuidedSession, before: int | None = None) -> dict[int, int]:
    """Objective index -> the first version that met it (in submissions before turn
    number `before`, or all)."""
    turns = _submissions(guided).order_by("number")
    if before is not None:
        turns = turns.filter(number__lt=before)
    met: dict[int, int] = {}
    # A session continued from another starts with what was met there (its welcome).
    welcome = guided.session.turns.filter(meta__kind="welcome").order_by("number").first()
    for index, number in ((welcome.meta.get("met") or {}) if welcome else {}).items():
        met[int(index)] = number
    for turn in turns:
        for index in turn.meta.get("met") or []:
            if turn.kernel_version:
                met.setdefault(index, turn.kernel_version.number)
    return met


def previous_submission(guided: GuidedSession, version: KernelVersion) -> Turn | None:
    """The last submission of an earlier version: what this one is compared with."""
    earlier = _submissions(guided).filter(kernel_version__number__lt=version.number)
    return earlier.order_by("-number").first()


def _changed_lines(old: str, new: str) -> int:
    """Lines changed: a line replaced counts once, as do one added and one removed."""
    diff = text_diff(old, new, "a", "b").splitlines()
    added = sum(1 for line in diff if line.startswith("+") and not line.startswith("+++"))
    removed = sum(1 for line in diff if line.startswith("-") and not line.startswith("---"))
    return max(added, removed)


def _what_changed(previous: KernelVersion, version: KernelVersion) -> str:
    parts = []
    if kernel := _changed_lines(previous.source, version.source):
        parts.append(f"{kernel} line{'s' if kernel != 1 else ''} of the kernel")
    if host := _changed_lines(previous.host_program, version.host_program):
        parts.append(f"{host} line{'s' if host != 1 else ''} of the host program")
    return " and ".join(parts) or "nothing"


def _failed(status: str) -> bool:
    return status not in (Status.PASSED, Status.NO_REFERENCE)


def since_previous(
    previous: Turn | None, version: KernelVersion, outcome: Outcome, findings: list[str]
) -> str:
    """One sentence: what this version changed since the previous one, and whether that
    fixed the previous version's failure (or what its review pointed out: FINDINGS), told
    from both runs' recorded results."""
    if previous is None or previous.kernel_version is None:
        return ""
    before = previous.meta.get("run") or {}
    was, now = before.get("status", ""), outcome.get("status", "")
    old = previous.kernel_version
    changed = f"v{version.number} changes {_what_changed(old, version)} from v{old.number}"
    # The first sentence of the message: what it failed on, without the explanation.
    message = (before.get("message") or "").split(". ")[0].rstrip(".")
    fixed = [
        FINDINGS[code]
        for code in previous.meta.get("findings") or []
        if code in FINDINGS and code not in findings
    ]
    if fixed and not _failed(now):
        return f"{changed}, and that fixes what v{old.number}'s review pointed out: {fixed[0]}."
    if not was or was == "not_run":
        return f"{changed}."
    if _failed(was) and not _failed(now):
        return f"{changed}, and that fixes what v{old.number} failed on: {message}."
    if not _failed(was) and _failed(now):
        return f"{changed}, and v{old.number} passed: this change broke something."
    if _failed(was) and was == now and before.get("message") == outcome.get("message"):
        return f"{changed}, but the run ends exactly as v{old.number}'s did."
    if _failed(was):
        return f"{changed}. v{old.number} ended with: {message}; this run ends differently."
    return f"{changed}."


def objectives_line(
    lesson: dict[str, Any], met_before: dict[int, int], met_now: list[int], passed: bool
) -> str:
    """Which objectives this version newly met, and on a pass, which one a run can still
    show (a failing run's review hints at its failure instead)."""
    objectives = (lesson or {}).get("objectives") or []
    checks = (lesson or {}).get("objective_checks") or []
    new = [i for i in met_now if i not in met_before and i < len(objectives)]
    parts = [f"Objective met: {objectives[i]}" for i in new]
    open_ = [
        i
        for i, check in enumerate(checks)
        if check and i not in met_before and i not in met_now and i < len(objectives)
    ]
    if new and not open_ and checks:
        parts.append("Every objective a run can show is now met.")
    elif open_ and passed:
        parts.append(f"Still to show: {objectives[open_[0]]}")
    return "\n\n".join(parts)


def for_model(guided: GuidedSession, version: KernelVersion, outcome: Outcome | None) -> str:
    """<progress> for Claude: the objectives met so far and by which version, what this
    version changed and whether that fixed the previous one's failure."""
    lesson = guided.lesson or {}
    objectives = lesson.get("objectives") or []
    checks = lesson.get("objective_checks") or []
    met = met_so_far(guided)
    lines = []
    for i, objective in enumerate(objectives):
        if i in met:
            state = f"met by v{met[i]}"
        elif i < len(checks) and checks[i]:
            state = "not yet shown by a run"
        else:
            state = "a run cannot show it: judge from the conversation"
        lines.append(f"- objective {i + 1} ({state}): {objective}")
    if outcome is not None:
        latest = _submissions(guided).filter(kernel_version=version).order_by("-number").first()
        found = (latest.meta.get("findings") or []) if latest else []
        since = since_previous(previous_submission(guided, version), version, outcome, found)
        if since:
            lines.append(f"- since the previous version: {since}")
        lines.extend(f"- the automatic review finds {FINDINGS[code]}" for code in found)
    if not lines:
        return ""
    return "<progress>\n" + "\n".join(lines) + "\n</progress>"
