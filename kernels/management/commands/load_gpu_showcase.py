from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from kernels.recorded import record
from sessions.importers.files import import_path
from sessions.importers.options import ImportOptions
from sessions.importers.specs import ImportProblem
from sessions.models import Session

SLUG = "triton-and-cuda-with-claude"


class Command(BaseCommand):
    help = (
        "Load (or refresh) the second showcase, 'Triton and CUDA with Claude' "
        "(fixtures/triton_cuda/session.jsonl), with the outcomes its programs had on an "
        "H100 (fixtures/triton_cuda/h100_outcomes.json), so a site without a GPU shows them."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        folder = settings.FIXTURES_DIR / "triton_cuda"
        try:
            report = import_path(
                folder / "session.jsonl",
                options=ImportOptions(slug=SLUG, visibility=Session.Visibility.PUBLIC),
            )
        except ImportProblem as problem:
            raise CommandError(f"session.jsonl: {problem}") from None
        Session.objects.filter(pk=report.session.pk).update(source=Session.Source.FIXTURE)
        self.stdout.write(report.summary())
        stored = record(folder / "h100_outcomes.json", folder / "programs")
        self.stdout.write(f"Stored {stored} recorded GPU run(s).")
