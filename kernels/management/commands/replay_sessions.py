from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from kernels import replay
from sessions.models import Session
from sessions.programs import KernelVersion


class Command(BaseCommand):
    help = (
        "Replay every kernel version of the given sessions (by default every public one) "
        "that has no stored run, one at a time, so that the first reader of a session "
        "sees its run badges and its next failing run. Stored runs are kept; `make run` "
        "starts this in the background after loading the showcase."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slugs", nargs="*", help="session slugs (default: every public one)")
        parser.add_argument("--fresh", action="store_true", help="run again what is stored")

    def handle(self, *args: Any, **options: Any) -> None:
        sessions = Session.objects.filter(visibility=Session.Visibility.PUBLIC)
        if slugs := options["slugs"]:
            sessions = Session.objects.filter(slug__in=slugs)
            if missing := set(slugs) - set(sessions.values_list("slug", flat=True)):
                raise CommandError(f"No session {', '.join(sorted(missing))}.")
        versions = (
            KernelVersion.objects.filter(kernel__session__in=sessions)
            .select_related("kernel__session", "turn")
            .order_by("kernel__session_id", "turn__number", "pk")
        )
        counts = {"stored": 0, "ran": 0, "failed": 0}
        ran: dict[int, Session] = {}
        for version in versions:
            label = f"{version.kernel.session.slug} {version.kernel.name} v{version.number}"
            if not options["fresh"] and replay.for_reader(version).outcome is not None:
                counts["stored"] += 1
                continue
            # Waiting as long as a terminal would: a queue shared with readers can be slow.
            shown = replay.run_now(
                version, fresh=options["fresh"], timeout=settings.REPLAY_DEADLINE * 3
            )
            if shown.outcome is None:
                counts["failed"] += 1
                self.stderr.write(f"{label}: {shown.problem or shown.busy}")
                continue
            counts["ran"] += 1
            ran[version.kernel.session_id] = version.kernel.session
            if options["verbosity"] > 1:
                self.stdout.write(f"{label}: {shown.outcome['status']}")
        # A page kept while a run was missing is kept briefly anyway; this shows the badges
        # at once.
        for session in ran.values():
            session.touch()
        self.stdout.write(
            f"Replayed {counts['ran']} kernel version(s); {counts['stored']} were stored "
            f"already; {counts['failed']} could not run."
        )
