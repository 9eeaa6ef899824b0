"""Lesson plans: one JSON file per lesson in settings.TUTOR_LESSONS_DIR.

The format is described in fixtures/lessons/README.md. Plans are written by people, so
a broken file is skipped with a warning naming the file and the field, never fatal: the
other lessons stay available.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings

from kernels.engine.harness import HarnessError, parse_harness

log = logging.getLogger(__name__)

FREE_FORM_KERNEL = "kernel"


class LessonError(ValueError):
    pass


@dataclass(frozen=True)
class Lesson:
    slug: str
    order: int
    title: str
    summary: str
    kernel_name: str
    harness: dict[str, Any]
    starter: str
    objectives: list[str] = field(default_factory=list)
    # Per objective, what a run shows when it is met (tutor/progress.py), or None.
    objective_checks: list[dict[str, Any] | None] = field(default_factory=list)
    # The host program the learner writes, when the lesson teaches host code: its starter
    # is the scaffold (what the lesson does not teach), its objectives what it does.
    host_starter: str = ""
    host_objectives: list[str] = field(default_factory=list)
    context: str = ""
    steps: list[dict[str, Any]] = field(default_factory=list)
    pitfalls: list[str] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """The snapshot a guided session keeps (GuidedSession.lesson)."""
        return {
            "slug": self.slug,
            "order": self.order,
            "title": self.title,
            "summary": self.summary,
            "objectives": self.objectives,
            "objective_checks": self.objective_checks,
            "context": self.context,
            "kernel": {
                "name": self.kernel_name,
                "harness": self.harness,
                "starter": self.starter,
                "host_starter": self.host_starter,
                "host_objectives": self.host_objectives,
            },
            "steps": self.steps,
            "pitfalls": self.pitfalls,
            "hints": self.hints,
        }


def _text(data: dict[str, Any], key: str, required: bool = True) -> str:
    value = data.get(key, "")
    if not isinstance(value, str) or (required and not value.strip()):
        raise LessonError(f"{key} must be a non-empty string")
    return value


def _strings(data: dict[str, Any], key: str) -> list[str]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise LessonError(f"{key} must be a list of strings")
    return value


def _host(kernel: dict[str, Any], harness: dict[str, Any]) -> tuple[str, list[str]]:
    """The host starter and objectives, checked: a lesson that teaches host code gives a
    scaffold to write it in, and a reference its readbacks are checked against."""
    try:
        starter = _text(kernel, "host_starter", required=False)
        objectives = _strings(kernel, "host_objectives")
    except LessonError as error:
        raise LessonError(f"kernel.{error}") from None
    if objectives and not starter.strip():
        raise LessonError(
            "kernel.host_objectives: a lesson that teaches host code needs kernel.host_starter, "
            "the scaffold the learner writes it in"
        )
    if len(starter) > settings.TUTOR_KERNEL_MAX_CHARS:
        raise LessonError(
            f"kernel.host_starter is {len(starter):,} characters; a submission may have at "
            f"most {settings.TUTOR_KERNEL_MAX_CHARS:,}"
        )
    if starter.strip() and not (harness.get("reference") or {}).get("name"):
        raise LessonError(
            "kernel.host_starter: the harness needs a reference, which the host program's "
            "readbacks are checked against"
        )
    return starter, objectives


CHECK_KEYS = frozenset(("status", "calls", "builtins", "shared", "host", "guarded"))


def _objective_checks(data: dict[str, Any], objectives: list[str]) -> list[dict[str, Any] | None]:
    checks = data.get("objective_checks", [])
    if not isinstance(checks, list) or len(checks) not in (0, len(objectives)):
        raise LessonError("objective_checks must be a list with one entry per objective")
    for check in checks:
        if check is not None and (not isinstance(check, dict) or set(check) - CHECK_KEYS):
            raise LessonError(
                f"objective_checks: each is null or an object of {', '.join(sorted(CHECK_KEYS))}"
            )
    return checks


def parse_lesson(data: object) -> Lesson:
    if not isinstance(data, dict):
        raise LessonError("a lesson plan is a JSON object")
    slug = _text(data, "slug")
    order = data.get("order", 0)
    if not isinstance(order, int) or isinstance(order, bool):
        raise LessonError("order must be an integer")
    kernel = data.get("kernel")
    if not isinstance(kernel, dict):
        raise LessonError("kernel must be an object with name, harness and starter")
    name = _text(kernel, "name")
    harness = kernel.get("harness") or {}
    if harness:
        try:
            parse_harness(harness, settings.FIXTURES_DIR)
        except HarnessError as error:
            raise LessonError(f"kernel.harness.{error}") from None
    host_starter, host_objectives = _host(kernel, harness)
    steps = data.get("steps", [])
    if not isinstance(steps, list) or not all(
        isinstance(s, dict) and isinstance(s.get("goal", ""), str) for s in steps
    ):
        raise LessonError('steps must be a list of {"goal", "check"} objects')
    return Lesson(
        slug=slug,
        order=order,
        title=_text(data, "title"),
        summary=_text(data, "summary", required=False),
        kernel_name=name,
        harness=harness,
        starter=_text(kernel, "starter", required=False),
        objectives=_strings(data, "objectives"),
        objective_checks=_objective_checks(data, _strings(data, "objectives")),
        host_starter=host_starter,
        host_objectives=host_objectives,
        context=_text(data, "context", required=False),
        steps=steps,
        pitfalls=_strings(data, "pitfalls"),
        hints=_strings(data, "hints"),
    )


_cache: dict[str, tuple[tuple[tuple[str, int, int], ...], list[Lesson]]] = {}


def load_lessons() -> list[Lesson]:
    """Every valid lesson plan, in course order. Re-read when a file changes."""
    folder = Path(settings.TUTOR_LESSONS_DIR)
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    stamp = tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files)
    cached = _cache.get(str(folder))
    if cached and cached[0] == stamp:
        return cached[1]
    lessons: dict[str, Lesson] = {}
    for path in files:
        try:
            lesson = parse_lesson(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError) as error:
            log.warning("Skipping lesson plan %s: %s", path.name, error)
            continue
        if lesson.slug in lessons:
            log.warning("Skipping lesson plan %s: slug %r is taken", path.name, lesson.slug)
            continue
        lessons[lesson.slug] = lesson
    result = sorted(lessons.values(), key=lambda lesson: (lesson.order, lesson.slug))
    _cache[str(folder)] = (stamp, result)
    return result


def get_lesson(slug: str) -> Lesson | None:
    return next((lesson for lesson in load_lessons() if lesson.slug == slug), None)
