"""Error pages answered before the middleware that sets the security headers still carry
them; a write that finds the database taken past the busy timeout is a 503 to retry."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client, TransactionTestCase


class BadHostTests(TransactionTestCase):
    def test_the_400_page_for_a_host_we_do_not_serve_has_the_security_headers(self) -> None:
        r = self.client.get("/", headers={"host": "evil.example"})

        self.assertEqual(r.status_code, 400)
        self.assertContains(r, "This server does not answer to that host name.", status_code=400)
        self.assertEqual(r["X-Frame-Options"], "DENY")
        self.assertEqual(r["X-Content-Type-Options"], "nosniff")
        self.assertEqual(r["Referrer-Policy"], "same-origin")
        self.assertIn("frame-ancestors 'none'", r["Content-Security-Policy"])


@contextmanager
def write_lock_taken() -> Iterator[None]:
    """Another connection holds SQLite's write lock; new connections wait 0.2 s for it."""
    if connection.vendor != "sqlite":
        pytest.skip("SQLite's write lock")
    holder = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with mock.patch.dict(connection.settings_dict["OPTIONS"], {"timeout": 0.2}):
            connection.close()  # the next query opens a connection with the short timeout
            yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        connection.close()


class DatabaseBusyTests(TransactionTestCase):
    def test_a_sign_in_that_cannot_write_is_a_503_with_retry_after_not_a_500(self) -> None:
        User.objects.create_user("alice", password="pw-kernelbin-1")
        client = Client(raise_request_exception=False)
        with write_lock_taken():
            r = client.post("/accounts/login/", {"username": "alice", "password": "pw-kernelbin-1"})
        self.assertEqual(r.status_code, 503)
        self.assertEqual(r["Retry-After"], "5")
        self.assertContains(r, "send it again in 5 seconds", status_code=503)
        self.assertEqual(r["X-Frame-Options"], "DENY")
        # Once the lock is free, the same sign-in goes through.
        r = client.post("/accounts/login/", {"username": "alice", "password": "pw-kernelbin-1"})
        self.assertEqual(r.status_code, 302)

    def test_other_errors_are_still_a_500(self) -> None:
        client = Client(raise_request_exception=False)
        with mock.patch("config.views.replay_health", side_effect=RuntimeError("broken")):
            r = client.get("/healthz")
        self.assertEqual(r.status_code, 500)
        self.assertNotIn("Retry-After", r)

    def test_readers_are_not_held_up_by_a_writer(self) -> None:
        # WAL: a page is read while another connection holds the write lock.
        with write_lock_taken():
            self.assertEqual(self.client.get("/").status_code, 200)
