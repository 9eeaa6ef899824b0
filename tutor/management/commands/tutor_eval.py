"""manage.py tutor_eval: score the tutors on the recorded learner situations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from tutor import llm
from tutor.evaluation import (
    CLAUDE,
    REVIEWER,
    SITUATIONS_DIR,
    evaluate,
    load_situations,
    side_by_side,
    table,
)


class Command(BaseCommand):
    help = (
        "Run the recorded learner situations through the automatic reviewer and, with "
        "ANTHROPIC_API_KEY, through Claude too; print each reply's score, side by side."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--situations", type=Path, default=SITUATIONS_DIR)
        parser.add_argument("--replies", action="store_true", help="print every reply too")

    def handle(self, *args: Any, situations: Path, replies: bool, **options: Any) -> None:
        tutors = [REVIEWER, CLAUDE] if llm.configured() else [REVIEWER]
        results = evaluate(load_situations(situations), tutors)
        for tutor, scores in results.items():
            self.stdout.write(f"Tutor: {tutor}\n")
            if replies:
                for score in scores:
                    self.stdout.write(f"--- {score.name}\n{score.reply}\n")
            self.stdout.write(table(scores) + "\n\n")
        if len(results) > 1:
            self.stdout.write("Side by side\n" + side_by_side(results) + "\n")
