"""The code editor on every page where code is written: each textarea says its language,
and the page lets the editor's stylesheet in by a nonce that no other page names."""

from __future__ import annotations

import re

import pytest
from django.test import TestCase

from tests.base import BaseTestCase, add_kernel, make_session

# Replay pages start runs; each test closes the pool it started.
pytestmark = pytest.mark.usefixtures("fresh_replay_backend")


def nonce_of(response) -> str:
    """The nonce the editor's script tag carries, checked against the page's policy."""
    found = re.search(r'vendor/editor\.js" data-style-nonce="([^"]+)"', response.content.decode())
    assert found, "the page does not load the editor"
    return found[1]


class EditorPagesTestCase(BaseTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.session = make_session("demo", turns=2)
        self.version = add_kernel(self.session, turn=2)

    def test_the_fork_editor_loads_with_a_nonce_its_policy_names(self) -> None:
        r = self.client.get("/s/demo/turns/2/replay/")
        nonce = nonce_of(r)
        self.assertIn(f"style-src 'self' 'nonce-{nonce}'", r["Content-Security-Policy"])
        self.assertContains(r, 'data-editor="wgsl"')
        # Without JavaScript the textarea is the editor, and the form still posts it.
        self.assertContains(r, '<textarea id="fork-source" name="source"')
        # A second request gets another nonce.
        self.assertNotEqual(nonce_of(self.client.get("/s/demo/turns/2/replay/")), nonce)

    def test_a_page_without_the_editor_names_no_nonce(self) -> None:
        r = self.client.get("/s/demo/")
        self.assertIn("style-src 'self';", r["Content-Security-Policy"] + ";")
        self.assertNotIn("nonce-", r["Content-Security-Policy"])

    def test_the_admins_harness_source_and_host_fields_use_it(self) -> None:
        self.charlie.is_superuser = True
        self.charlie.save()
        self.client.force_login(self.charlie)
        r = self.client.get(f"/admin/tutoring_sessions/kernel/{self.version.kernel.pk}/change/")
        nonce = nonce_of(r)
        self.assertIn(f"'nonce-{nonce}'", r["Content-Security-Policy"])
        for name, language in (
            ("harness", "json"),
            ("versions-0-source", "wgsl"),
            ("versions-0-host_program", "javascript"),
            ("versions-0-harness_override", "json"),
        ):
            textarea = re.search(rf'<textarea [^>]*name="{name}"[^>]*>', r.content.decode())
            self.assertIsNotNone(textarea, name)
            self.assertIn(f'data-editor="{language}"', textarea[0])


class KeyboardHelpTestCase(TestCase):
    def test_the_way_out_of_the_editor_is_written_under_it(self) -> None:
        session = make_session("demo", turns=2)
        add_kernel(session, turn=2)
        r = self.client.get("/s/demo/turns/2/replay/")
        self.assertContains(r, 'aria-describedby="fork-help"')
        self.assertContains(r, "press <kbd>Esc</kbd> and then <kbd>Tab</kbd>")
