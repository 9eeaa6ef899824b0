"""The front page and another session's page cost the same whatever the size of the
largest session: counted as SQLite virtual-machine steps (rows read and written), which,
unlike timings, are the same on every run."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.core.cache import cache
from django.db import connection
from django.test import TestCase
from django.test.utils import CaptureQueriesContext

from sessions.models import Session, Turn
from tests.base import make_session


@contextmanager
def sqlite_steps() -> Iterator[list[int]]:
    """Counts the steps SQLite's virtual machine takes inside the block."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's step counter")
    connection.ensure_connection()
    steps = [0]

    def step() -> int:
        steps[0] += 1
        return 0  # go on

    connection.connection.set_progress_handler(step, 1)
    try:
        yield steps
    finally:
        connection.connection.set_progress_handler(None, 1)


def grow(session: Session, turns: int) -> None:
    """Add prompts and answers, the shape of a long imported chat."""
    start = session.turns.count() + 1
    Turn.objects.bulk_create(
        Turn(
            session=session,
            number=number,
            role="learner" if number % 2 else "tutor",
            content=f"Question {number}?",
            html=f"<p>Question {number}?</p>",
        )
        for number in range(start, start + turns)
    )


class PageCostTests(TestCase):
    def setUp(self) -> None:
        self.small = make_session("small", turns=4, title="Small")
        self.large = make_session("large", turns=4, title="Large")

    def cost(self, path: str) -> tuple[int, int]:
        """(queries, SQLite steps) of one uncached GET."""
        cache.clear()
        with CaptureQueriesContext(connection) as queries, sqlite_steps() as steps:
            self.assertEqual(self.client.get(path).status_code, 200)
        return len(queries), steps[0]

    def test_the_front_page_and_other_pages_cost_the_same_beside_a_session_of_any_size(
        self,
    ) -> None:
        paths = ["/", "/s/small/"]
        before = {path: self.cost(path) for path in paths}
        grow(self.large, 3000)
        after = {path: self.cost(path) for path in paths}

        self.assertEqual(before, after)
        self.assertContains(self.client.get("/"), "3004 turns")
        self.assertContains(self.client.get("/"), "4 turns")

    def test_a_long_sessions_own_pages_stay_the_same_size_as_it_grows(self) -> None:
        # 600 turns hold 300 prompts: more than the outline lists.
        grow(self.large, 596)
        cache.clear()
        before = self.client.get("/s/large/?page=2")
        with CaptureQueriesContext(connection) as queries_before:
            self.client.get("/s/large/?page=3")
        grow(self.large, 5400)
        cache.clear()
        after = self.client.get("/s/large/?page=2")
        with CaptureQueriesContext(connection) as queries_after:
            self.client.get("/s/large/?page=3")

        self.assertEqual(len(queries_before), len(queries_after))
        self.assertLess(abs(len(after.content) - len(before.content)), len(before.content) // 50)
        self.assertContains(after, "Too many to list: those on this page.")
        self.assertContains(after, 'href="#turn-101"')  # the page's own first prompt
        self.assertNotContains(after, "?turn=1#turn-1")  # no prompt of another page
