from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from sessions.importers.files import import_path
from sessions.importers.options import ImportOptions
from sessions.importers.project_files import read_archive, read_folder
from sessions.importers.specs import ImportProblem
from sessions.models import Session


class Command(BaseCommand):
    help = (
        "Import a session from a Claude Code transcript (JSON Lines) or a kernelbin/1 JSON "
        "export; the format is detected. A Claude Code session's folder, or its main file, "
        "brings its sub-agents' transcripts (subagents/) along. Importing the same "
        "recording again updates it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", type=Path)
        parser.add_argument("--title", help="Use this title instead of the file's.")
        parser.add_argument("--slug", help="Import under this slug instead of the file's.")
        parser.add_argument("--visibility", choices=Session.Visibility.values)
        parser.add_argument(
            "--files",
            type=Path,
            help="The project's root folder (or a zip or tar archive of it): its files "
            "(weights, data) join the session's, named by their path in it, so a program "
            "that fetch()es weights/w1.bin finds it.",
        )
        parser.add_argument(
            "--no-redact",
            dest="redact",
            action="store_false",
            help="Keep secrets, e-mail addresses and home-directory names as recorded "
            "(redaction is on by default).",
        )

    def handle(
        self,
        *args: Any,
        path: Path,
        title: str | None,
        slug: str | None,
        visibility: str | None,
        redact: bool,
        files: Path | None,
        **options: Any,
    ) -> None:
        try:
            found = None
            if files is not None:
                if files.is_dir():
                    found = read_folder(files)
                else:
                    with files.open("rb") as archive:
                        found = read_archive(archive, files.name)
            chosen = ImportOptions(
                title=title, slug=slug, visibility=visibility, redact=redact, files=found
            )
            report = import_path(path, options=chosen)
        except OSError as error:
            raise CommandError(f"Cannot read {path}: {error.strerror}") from None
        except ImportProblem as problem:
            raise CommandError(f"{path}: {problem} Nothing was imported.") from None
        self.stdout.write(self.style.SUCCESS(report.summary()))
        for line in report.details():
            self.stdout.write(line)
        self.stdout.write(f"Session: {report.session.get_absolute_url()}")
