from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from sessions.exchange import ImportProblem, import_session, read_export
from sessions.models import Session


class Command(BaseCommand):
    help = "Import a session from a kernelbin/1 JSON export."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", type=Path)
        parser.add_argument("--title", help="Use this title instead of the file's.")
        parser.add_argument("--slug", help="Import under this slug instead of the file's.")
        parser.add_argument("--visibility", choices=Session.Visibility.values)

    def handle(self, *args, path: Path, title, slug, visibility, **options) -> None:
        try:
            with path.open("rb") as stream:
                data = read_export(stream, size=path.stat().st_size)
            report = import_session(data, title=title, slug=slug, visibility=visibility)
        except OSError as error:
            raise CommandError(f"Cannot read {path}: {error.strerror}") from None
        except ImportProblem as problem:
            raise CommandError(f"{path}: {problem} Nothing was imported.") from None
        self.stdout.write(self.style.SUCCESS(report.summary()))
