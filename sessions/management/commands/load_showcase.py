from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from sessions.importers.kernelbin import import_session, read_export
from sessions.importers.specs import ImportProblem
from sessions.models import Session


class Command(BaseCommand):
    help = "Load (or refresh) the showcase sessions shipped in fixtures/showcase/."

    def handle(self, *args: Any, **options: Any) -> None:
        paths = sorted((settings.FIXTURES_DIR / "showcase").glob("*.json"))
        if not paths:
            raise CommandError("No showcase files in fixtures/showcase/.")
        loaded = []
        for path in paths:
            try:
                with path.open("rb") as stream:
                    report = import_session(read_export(stream), source=Session.Source.FIXTURE)
            except ImportProblem as problem:
                raise CommandError(f"{path.name}: {problem}") from None
            loaded.append(report.session.slug)
            self.stdout.write(report.summary())
        # A showcase session this version no longer ships goes too.
        gone = Session.objects.filter(source=Session.Source.FIXTURE).exclude(slug__in=loaded)
        for slug in gone.values_list("slug", flat=True):
            self.stdout.write(f"Removed session '{slug}': no longer in fixtures/showcase/.")
        gone.delete()
