"""A replay page and a fork's page are kept whole for readers who are not signed in and
served again with one query, for as long as they show what a new render would (the
session unchanged and visible to them, no newer run), each with the reader's own CSRF
token and stylesheet nonce; never for a signed-in reader or a private session. Readers
who come at once for a page not kept yet are answered by one render."""

from __future__ import annotations

import re
import threading
import time
from unittest import mock

from django.core.cache import cache
from django.db import connection, connections
from django.test import Client, TransactionTestCase, override_settings
from django.test.utils import CaptureQueriesContext

from kernels import replay
from kernels.models import Fork
from pages import outcome_context, replay_views
from tests.base import BaseTestCase, add_kernel, make_session, store_run

PAGE = "/s/demo/turns/2/replay/"
FORK = "/f/abcdefghijklmnopqrstuvwxyz/"
TOKEN = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
NONCE = re.compile(r'data-style-nonce="([^"]+)"')


class ReaderPagesTestCase(BaseTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.session = make_session("demo", turns=3)
        self.version = add_kernel(self.session, turn=2)
        store_run(self.version, "passed", "All 6 cells match the reference.")
        self.fork = Fork.objects.create(
            id=FORK.split("/")[2], version=self.version, source=self.version.source + "\n"
        )
        store_run(self.fork.as_version(), "passed", "The fork's cells all match.")

    def served_again(self, url: str) -> tuple[str, str]:
        """The page as the first reader got it, and as the next one did: one query."""
        first = Client().get(url)
        self.assertEqual(first.status_code, 200)
        with CaptureQueriesContext(connection) as naming:
            replay.backend().environment_id(wait=False)
        with self.assertNumQueries(1 + len(naming)):
            again = self.reader.get(url)
        self.assertEqual(again.status_code, 200)
        return first.content.decode(), again.content.decode()

    def test_a_replay_page_is_served_again_with_the_readers_own_token_and_nonce(self) -> None:
        self.reader = Client(enforce_csrf_checks=True)
        first, again = self.served_again(PAGE)

        self.assertIn("All 6 cells match the reference.", again)
        tokens = TOKEN.findall(again)
        nonces = NONCE.findall(again)
        self.assertTrue(tokens and nonces)
        self.assertNotEqual(tokens, TOKEN.findall(first))
        self.assertNotEqual(nonces, NONCE.findall(first))
        # Apart from them, the same bytes.
        self.assertEqual(NONCE.sub("", TOKEN.sub("", again)), NONCE.sub("", TOKEN.sub("", first)))
        # The nonce is the one its header allows; the token goes with the cookie it set:
        # "Run again" passes the CSRF check (and is then refused by the rate limit).
        page = self.reader.get(PAGE)
        body = page.content.decode()
        self.assertIn(f"'nonce-{NONCE.search(body)[1]}'", page["Content-Security-Policy"])
        with override_settings(REPLAY_FRESH_PER_MINUTE=0):
            r = self.reader.post(PAGE, {"csrfmiddlewaretoken": TOKEN.search(body)[1]})
        self.assertEqual(r.status_code, 302)

    def test_a_forks_page_is_served_again_with_one_query(self) -> None:
        self.reader = Client()
        _, again = self.served_again(FORK)
        self.assertIn("The fork&#x27;s cells all match.", again)

    def test_a_newer_run_shows_at_once(self) -> None:
        for url, version in ((PAGE, self.version), (FORK, self.fork.as_version())):
            self.client.get(url)
            store_run(version, "mismatch", "3 of 6 cells wrong this time.")
            self.assertContains(self.client.get(url), "3 of 6 cells wrong this time.")

    def test_a_change_to_the_session_shows_at_once(self) -> None:
        for url in (PAGE, FORK):
            self.client.get(url)
        self.session.title = "Renamed by a curator"
        self.session.save()
        for url in (PAGE, FORK):
            self.assertContains(self.client.get(url), "Renamed by a curator")

    def test_a_session_made_private_is_not_served_from_the_cache(self) -> None:
        for url in (PAGE, FORK):
            self.client.get(url)
        self.session.visibility = "private"
        self.session.owner = self.alice
        self.session.save()
        for url in (PAGE, FORK):
            self.assertEqual(self.client.get(url).status_code, 404)

    def test_a_signed_in_reader_gets_a_page_of_their_own(self) -> None:
        for url in (PAGE, FORK):
            self.assertNotContains(self.client.get(url), "Sign out")
        self.client.login(username="alice", password="password")
        for url in (PAGE, FORK):
            self.assertContains(self.client.get(url), "Sign out")


class ReadersAtOnceTestCase(TransactionTestCase):
    def test_readers_who_come_at_once_wait_for_one_render(self) -> None:
        cache.clear()
        version = add_kernel(make_session("demo", turns=3), turn=2)
        store_run(version, "passed", "All 6 cells match the reference.")
        renders: list[int] = []
        real = outcome_context.outcome_context

        def slow(shown):
            renders.append(1)
            time.sleep(0.3)  # long enough for every reader to have come
            return real(shown)

        answers: list[int] = []
        start = threading.Barrier(4)

        def read() -> None:
            try:
                start.wait()
                answers.append(Client().get(PAGE).status_code)
            finally:
                connections.close_all()

        with mock.patch.object(replay_views, "outcome_context", slow):
            readers = [threading.Thread(target=read) for _ in range(4)]
            for reader in readers:
                reader.start()
            for reader in readers:
                reader.join()

        self.assertEqual(answers, [200] * 4)
        self.assertEqual(len(renders), 1)
