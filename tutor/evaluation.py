"""The tutor evaluation: recorded learner situations run through the tutors the server has.

Each situation (fixtures/tutor_eval/*.json) is a lesson, a kernel (and host program) with
a known bug and what the learner wrote with it, and optionally the versions submitted
before it ("before": a fixed bug followed by a new one, a version that only adds a guard).
They are submitted in a fresh session of an evaluation user, exactly as a learner submits,
and the last reply is scored: by the automatic reviewer always, and by Claude too when
there is an API key, side by side. Each reply is scored on five points, one each: no
kernel handed over (the guardrail's detector), the bug's concept named or asked about,
the run's evidence used (cells, values, lines), a length a learner reads (LENGTH words at
most), and honest: none of the situation's false claims (a pattern the data contradicts,
a hint about a bug already fixed, a backend note the kernel cannot meet). A reply that
makes a false claim fails its situation: it scores 0 whatever else it got right.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User

from sessions.models import Turn
from tutor import engine, guardrail
from tutor.lessons import get_lesson
from tutor.models import GuardrailEvent

SITUATIONS_DIR = Path(settings.BASE_DIR) / "fixtures" / "tutor_eval"
EVAL_USER = "tutor-eval"
LENGTH = (15, 300)
POINTS = ("no_kernel", "concept", "evidence", "length", "honest")
REVIEWER, CLAUDE = "the automatic reviewer", "Claude"


@dataclass
class Score:
    name: str
    reply: str
    points: dict[str, int] = field(default_factory=dict)
    false_claims: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.points.values()) if self.points.get("honest", 1) else 0


def load_situations(directory: Path = SITUATIONS_DIR) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(directory.glob("*.json"))]


def score_reply(situation: dict[str, Any], reply: str, withheld: bool = False) -> Score:
    """withheld: the guardrail took code out of the reply before the learner saw it."""
    lower = reply.lower()
    words = len(reply.split())
    false = [claim for claim in situation.get("false_claims", []) if claim.lower() in lower]
    # Quoting the learner's own code back gives nothing away (as in a live reply).
    submitted = [situation, *situation.get("before", [])]
    known = guardrail.known_units(
        [code for s in submitted for code in (s["kernel"], s.get("host") or "")]
    )
    return Score(
        situation["name"],
        reply,
        {
            "no_kernel": int(not withheld and not guardrail.redact(reply, known).redacted),
            "concept": int(any(c.lower() in lower for c in situation["concepts"])),
            "evidence": int(any(e.lower() in lower for e in situation["evidence"])),
            "length": int(LENGTH[0] <= words <= LENGTH[1]),
            "honest": int(not false),
        },
        false,
    )


def reply_to(situation: dict[str, Any], user: User, automatic: bool = False) -> tuple[str, bool]:
    """The tutor's reply to the situation's last submission, and whether the guardrail
    withheld code from it, in a session deleted afterwards. automatic: the automatic
    reviewer's reply, even with an API key."""
    lesson = get_lesson(situation["lesson"])
    if lesson is None:
        raise ValueError(f"{situation['name']}: there is no lesson {situation['lesson']!r}")
    guided = engine.start_session(user, lesson)
    try:
        # A situation's "host" is the host program submitted with the kernel; the
        # versions "before" it are submitted first, and always reviewed automatically.
        for earlier in situation.get("before", []):
            for _ in engine.submit(
                guided, earlier["kernel"], host=earlier.get("host"), automatic=True
            ):
                pass
        submitted = engine.submit(
            guided,
            situation["kernel"],
            note=situation["message"],
            host=situation.get("host"),
            automatic=automatic,
        )
        for _ in submitted:
            pass
        last = guided.session.turns.order_by("number").last()
        withheld = guided.guardrail_events.filter(kind=GuardrailEvent.Kind.REDACTED).exists()
        return (last.content if last and last.role == Turn.Role.TUTOR else ""), withheld
    finally:
        guided.session.delete()


def evaluate(
    situations: list[dict[str, Any]], tutors: Sequence[str] = (REVIEWER,)
) -> dict[str, list[Score]]:
    """Each tutor's scores on the situations: REVIEWER, and CLAUDE where there is a key."""
    user, created = User.objects.get_or_create(username=EVAL_USER)
    try:
        return {
            tutor: [
                score_reply(s, *reply_to(s, user, automatic=tutor == REVIEWER)) for s in situations
            ]
            for tutor in tutors
        }
    finally:
        if created:
            user.delete()


def table(scores: list[Score]) -> str:
    width = max([len(s.name) for s in scores] + [9])
    lines = [f"{'situation':<{width}}  " + "  ".join(POINTS) + "  total"]
    for s in scores:
        cells = "  ".join(f"{s.points[p]:>{len(p)}}" for p in POINTS)
        claims = f"  false: {'; '.join(s.false_claims)}" if s.false_claims else ""
        lines.append(f"{s.name:<{width}}  {cells}  {s.total:>3}/{len(POINTS)}{claims}")
    got = sum(s.total for s in scores)
    lines.append(f"{'total':<{width}}  {got}/{len(POINTS) * len(scores)}")
    return "\n".join(lines)


def side_by_side(results: dict[str, list[Score]]) -> str:
    """One line per situation: each tutor's total, in columns."""
    tutors = list(results)
    names = [s.name for s in results[tutors[0]]]
    width = max([len(n) for n in names] + [9])
    column = max(len(t) for t in tutors)
    lines = [f"{'situation':<{width}}  " + "  ".join(f"{t:>{column}}" for t in tutors)]
    for i, name in enumerate(names):
        row = "  ".join(f"{f'{results[t][i].total}/{len(POINTS)}':>{column}}" for t in tutors)
        lines.append(f"{name:<{width}}  {row}")
    of = len(POINTS) * len(names)
    row = "  ".join(f"{f'{sum(s.total for s in results[t])}/{of}':>{column}}" for t in tutors)
    lines.append(f"{'total':<{width}}  {row}")
    return "\n".join(lines)
