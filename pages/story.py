"""What a session says about a kernel version, told on its replay page only: the bug (or
the fix) a curated lesson is about, and the tutor's turn that explains it. The session page
and its badges show what the stored run did, never what the story expects of it."""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.db.models import Q

from kernels.engine.outcome import Outcome, Status
from sessions.models import Turn
from sessions.programs import KernelVersion

# A curated note opens with what it is: "bug: rows and columns swapped", "fix: …".
NOTE_KIND = re.compile(r"\A(bug|fix)\s*:\s*", re.I)


@dataclass
class Intent:
    """The lesson's point about this version, and whether this run bears it out."""

    about: str  # "bug" or "fix"
    note: str
    expected: str  # the label of the status the lesson expects
    borne_out: bool | None  # None until there is an outcome


def intent(version: KernelVersion, outcome: Outcome | None) -> Intent | None:
    if not version.expected_status:
        return None
    about = "fix" if version.expected_status == Status.PASSED else "bug"
    note = version.note
    if found := NOTE_KIND.match(note):
        about, note = found[1].lower(), note[found.end() :]
    borne_out = None if outcome is None else outcome["status"] == version.expected_status
    return Intent(about, note, Status(version.expected_status).label, borne_out)


def explaining_turn(turn: Turn) -> Turn | None:
    """The tutor's answer to this kernel: this turn if the tutor wrote it, else the next
    turn the tutor wrote (not its thinking, nor a hidden one)."""
    answers = turn.session.turns.shown().filter(role=Turn.Role.TUTOR, number__gte=turn.number)
    # has_key first: a JSON key that is missing compares as NULL, and NOT NULL is not true.
    thinking = Q(meta__has_key="kind") & Q(meta__kind="thinking")
    return answers.exclude(thinking).order_by("number").first()
