"""manage.py replay_sessions: every version of a session runs before anyone opens a
replay, so its page shows run badges and the next failing run at once. Real wgpu."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import TransactionTestCase

from kernels.models import Run
from sessions.programs import KernelVersion
from tests.base import add_kernel, make_session

pytestmark = pytest.mark.usefixtures("fresh_replay_backend")


class ReplaySessionsTests(TransactionTestCase):
    def setUp(self) -> None:
        self.session = make_session("demo", turns=4)
        self.version = add_kernel(self.session, turn=2)
        # The second version reads a twice: a mismatch, so a failing run.
        reviewed = self.session.turns.get(number=4)
        reviewed.kernel_version = KernelVersion.objects.create(
            kernel=self.version.kernel,
            number=2,
            source=self.version.source.replace("a[id.x] + b[id.x]", "a[id.x] + a[id.x]"),
            turn=reviewed,
        )
        reviewed.save()

    def test_a_session_page_shows_badges_and_the_failing_run_without_a_replay_opened(self) -> None:
        before = self.client.get("/s/demo/").content.decode()
        self.assertIn("not run yet", before)
        self.assertNotIn('data-jump="failure"', before)

        out = StringIO()
        call_command("replay_sessions", stdout=out)

        self.assertIn("Replayed 2 kernel version(s); 0 were stored already", out.getvalue())
        self.assertEqual(Run.objects.filter(state=Run.State.DONE).count(), 2)
        page = self.client.get("/s/demo/").content.decode()
        self.assertNotIn("not run yet", page)
        self.assertIn('data-jump="failure" href="/s/demo/?turn=4#turn-4"', page)

        # Stored runs are kept: a second pass runs nothing.
        out = StringIO()
        call_command("replay_sessions", "demo", stdout=out)
        self.assertIn("Replayed 0 kernel version(s); 2 were stored already", out.getvalue())

    def test_an_unknown_session_is_named(self) -> None:
        with self.assertRaisesMessage(CommandError, "No session nope."):
            call_command("replay_sessions", "demo", "nope")
