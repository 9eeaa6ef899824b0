"""The tutor evaluation: recorded learner situations run through the configured tutor.

Each situation (fixtures/tutor_eval/*.json) is a lesson, a kernel (and host program) with
a known bug and what the learner wrote with it. It is submitted in a fresh session of an evaluation
user, exactly as a learner submits, so the reply comes from whichever tutor the server
has: Claude with an API key, the automatic reviewer without. Each reply is scored on
four points, one each: no kernel handed over (the guardrail's detector), the bug's
concept named or asked about, the run's evidence used (cells, values, lines), and a
length a learner reads (LENGTH words at most).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import User

from sessions.models import Turn
from tutor import engine, guardrail
from tutor.lessons import get_lesson
from tutor.models import GuardrailEvent

SITUATIONS_DIR = Path(settings.BASE_DIR) / "fixtures" / "tutor_eval"
EVAL_USER = "tutor-eval"
LENGTH = (15, 300)
POINTS = ("no_kernel", "concept", "evidence", "length")


@dataclass
class Score:
    name: str
    reply: str
    points: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.points.values())


def load_situations(directory: Path = SITUATIONS_DIR) -> list[dict]:
    return [json.loads(path.read_text()) for path in sorted(directory.glob("*.json"))]


def score_reply(situation: dict, reply: str, withheld: bool = False) -> Score:
    """withheld: the guardrail took code out of the reply before the learner saw it."""
    lower = reply.lower()
    words = len(reply.split())
    # Quoting the learner's own code back gives nothing away.
    known = guardrail.known_units([situation["kernel"], situation.get("host") or ""])
    return Score(
        situation["name"],
        reply,
        {
            "no_kernel": int(not withheld and not guardrail.redact(reply, known).redacted),
            "concept": int(any(c.lower() in lower for c in situation["concepts"])),
            "evidence": int(any(e.lower() in lower for e in situation["evidence"])),
            "length": int(LENGTH[0] <= words <= LENGTH[1]),
        },
    )


def reply_to(situation: dict, user: User) -> tuple[str, bool]:
    """The tutor's reply to the situation's submission, and whether the guardrail withheld
    code from it, in a session deleted afterwards."""
    lesson = get_lesson(situation["lesson"])
    if lesson is None:
        raise ValueError(f"{situation['name']}: there is no lesson {situation['lesson']!r}")
    guided = engine.start_session(user, lesson)
    try:
        # A situation's "host" is the host program submitted with the kernel.
        submitted = engine.submit(
            guided, situation["kernel"], note=situation["message"], host=situation.get("host")
        )
        for _ in submitted:
            pass
        last = guided.session.turns.order_by("number").last()
        withheld = guided.guardrail_events.filter(kind=GuardrailEvent.Kind.REDACTED).exists()
        return (last.content if last and last.role == Turn.Role.TUTOR else ""), withheld
    finally:
        guided.session.delete()


def evaluate(situations: list[dict]) -> list[Score]:
    user, created = User.objects.get_or_create(username=EVAL_USER)
    try:
        return [score_reply(s, *reply_to(s, user)) for s in situations]
    finally:
        if created:
            user.delete()


def table(scores: list[Score]) -> str:
    width = max([len(s.name) for s in scores] + [9])
    lines = [f"{'situation':<{width}}  " + "  ".join(POINTS) + "  total"]
    for s in scores:
        cells = "  ".join(f"{s.points[p]:>{len(p)}}" for p in POINTS)
        lines.append(f"{s.name:<{width}}  {cells}  {s.total:>3}/{len(POINTS)}")
    got = sum(s.total for s in scores)
    lines.append(f"{'total':<{width}}  {got}/{len(POINTS) * len(scores)}")
    return "\n".join(lines)
