"""manage.py tutor_eval: score the configured tutor on the recorded learner situations."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand

from tutor import llm
from tutor.evaluation import SITUATIONS_DIR, evaluate, load_situations, table


class Command(BaseCommand):
    help = (
        "Run the recorded learner situations through the configured tutor (Claude with "
        "ANTHROPIC_API_KEY, else the automatic reviewer) and print each reply's score."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--situations", type=Path, default=SITUATIONS_DIR)
        parser.add_argument("--replies", action="store_true", help="print every reply too")

    def handle(self, *args, situations: Path, replies: bool, **options) -> None:
        tutor = "Claude" if llm.configured() else "the automatic reviewer"
        self.stdout.write(f"Tutor: {tutor}\n")
        scores = evaluate(load_situations(situations))
        if replies:
            for score in scores:
                self.stdout.write(f"--- {score.name}\n{score.reply}\n")
        self.stdout.write(table(scores) + "\n")
