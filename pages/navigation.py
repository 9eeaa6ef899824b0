"""Finding one's way in a long session: its outline, even pages, and the turns worth
jumping to (each kernel version where it first appears, and the failing runs).

The outline of a curated session is its lessons (the note turns that open them); a
session without lessons (an import, a guided session) is outlined by the learner's
prompts, the points where a person asked for something.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Q
from django.db.models.functions import Left

from kernels import replay
from kernels.engine.outcome import Status
from kernels.models import Run
from sessions.models import Session, Turn
from sessions.programs import KernelVersion

# A run that ended in one of these is a failure worth jumping to; "could not run" (no
# adapter) is the site's failure, not the kernel's.
FAILED = {
    Status.MISMATCH,
    Status.NONFINITE,
    Status.COMPILE_ERROR,
    Status.PIPELINE_ERROR,
    Status.TIMEOUT,
    Status.CRASHED,
    Status.THREW,
    Status.REJECTED,
}
TITLE_CHARS = 80
# A lesson's note opens with its title in bold: "**Lesson 3 · Matrix multiplication.** …"
BOLD_LEAD = re.compile(r"\s*\*\*(.+?)\*\*")
MARKUP = re.compile(r"[*_`#>\[\]]+")


@dataclass
class Section:
    """One entry of the outline: the turn that opens it, and what to call it."""

    number: int
    title: str
    kind: str  # "lesson" or "prompt"
    # The title is the note's own bold opening, so the page shows it once, as a heading.
    from_lead: bool = False
    # Where the outline links to: the turn on this page, or on the page that holds it.
    href: str = ""


def page_size(count: int, most: int) -> int:
    """Turns per page so that pages come out even: 109 turns at most 100 a page make
    two pages of 55 and 54, not 100 and 9."""
    if count <= most:
        return max(count, 1)
    return math.ceil(count / math.ceil(count / most))


def _title(content: str) -> tuple[str, bool]:
    if lead := BOLD_LEAD.match(content):
        return lead[1].strip().rstrip(".:").strip(), True
    line = next((line for line in content.splitlines() if line.strip()), "")
    text = " ".join(MARKUP.sub(" ", line).split())
    if len(text) > TITLE_CHARS:
        text = text[: TITLE_CHARS - 1].rstrip() + "…"
    return text or "(no text)", False


@dataclass
class Outline:
    sections: list[Section]
    # More sections than OUTLINE_MAX: only those of the page asked about are listed.
    partial: bool = False


# Sections listed at most; a session with more (a long import has a prompt every few
# turns: 100,000 in one of 200,000 turns) lists those of the page shown, so that the page
# and the query making it stay small.
OUTLINE_MAX = 200


def outline(session: Session, first: int, last: int) -> Outline:
    """The lessons of a curated session, else the learner's prompts, in order; when there
    are more than OUTLINE_MAX, those between turns first and last."""
    turns = session.turns.shown().annotate(opening=Left("content", 400)).order_by("number")
    lessons = turns.filter(role=Turn.Role.SYSTEM, meta__has_key="lesson")
    kind = "lesson"
    if not lessons.exists():
        # A prompt typed by the learner: not a steering note, a tool's answer or the like.
        lessons = turns.filter(Q(role=Turn.Role.LEARNER) & ~Q(meta__has_key="kind"))
        kind = "prompt"
    rows = list(lessons.values_list("number", "opening")[: OUTLINE_MAX + 1])
    partial = len(rows) > OUTLINE_MAX
    if partial:
        on_page = lessons.filter(number__gte=first, number__lte=last)
        rows = list(on_page.values_list("number", "opening")[:OUTLINE_MAX])
    sections = []
    for number, opening in rows:
        title, from_lead = _title(opening)
        sections.append(Section(number, title, kind, from_lead and kind == "lesson"))
    return Outline(sections, partial)


def stored_runs(versions: Iterable[KernelVersion]) -> tuple[dict[int, Run], bool]:
    """The finished run a reader would see now of each version (nothing is started),
    by version id; and whether every version that can be replayed has one (those do
    not change, so a page showing them can be kept)."""
    runs: dict[int, Run] = {}
    complete = True
    for version in {version.pk: version for version in versions}.values():
        shown = replay.for_reader(version)
        # Badges need the run's status, not its outcome (a deferred field: not loaded).
        if (run := shown.finished_run) is not None:
            runs[version.pk] = run
        # A kernel that cannot be replayed shows no outcome, now or later; a run cut short
        # (a timeout) is run again when somebody asks.
        if not shown.problem and (version.pk not in runs or not runs[version.pk].cacheable):
            complete = False
    return runs, complete


@dataclass
class Jumps:
    """Turn numbers worth jumping to, in order: where each kernel version first appears,
    and where each failing run first appears."""

    kernels: list[int]
    failures: list[int]


def jumps(session: Session, runs: dict[int, Run]) -> Jumps:
    kernels, failures, seen = [], [], set()
    reviewed = session.turns.shown().exclude(kernel_version=None).order_by("number")
    for number, version_id in reviewed.values_list("number", "kernel_version_id"):
        if version_id in seen:
            continue
        seen.add(version_id)
        kernels.append(number)
        run = runs.get(version_id)
        if run is not None and run.status in FAILED:
            failures.append(number)
    return Jumps(kernels, failures)
