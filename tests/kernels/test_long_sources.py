"""A very long program (an imported 1 MB kernel) is highlighted once, not on every view,
and its replay page shows its first lines within a bound and says so."""

from __future__ import annotations

from unittest import mock

import pygments
import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import TransactionTestCase

from sessions import markdown
from sessions.programs import KernelVersion
from tests.base import ADD_SOURCE, add_kernel, make_session

pytestmark = pytest.mark.usefixtures("fresh_replay_backend")

LINES = 50_000  # about 1.1 MB
LONG = ADD_SOURCE + "".join(f"// note {n}: the bounds check stays.\n" for n in range(LINES))


class LongSourceTests(TransactionTestCase):
    def setUp(self) -> None:
        cache.clear()
        session = make_session("long", turns=2)
        version = add_kernel(session, turn=2)
        KernelVersion.objects.filter(pk=version.pk).update(source=LONG)
        staff = User.objects.create_user("curator", password="pw-kernelbin-1", is_staff=True)
        self.client.force_login(staff)  # no page cache: each view renders

    def test_the_page_is_bounded_and_the_source_highlighted_once(self) -> None:
        highlighted = []
        real = pygments.highlight

        def counting(code, lexer, formatter):
            highlighted.append(len(code))
            return real(code, lexer, formatter)

        with mock.patch.object(markdown, "highlight", counting):
            pages = [self.client.get("/s/long/turns/2/replay/") for _ in range(2)]

        for page in pages:
            self.assertEqual(page.status_code, 200)
            self.assertLess(len(page.content), 2_000_000)  # unbounded, it was over 15 MB
            total = LINES + ADD_SOURCE.count("\n")
            self.assertRegex(page.content.decode(), rf"Lines 1 to [0-9,]+ of {total:,}: the rest")
            self.assertContains(page, "// note 100: the bounds check stays.")
            self.assertNotContains(page, f"// note {LINES - 1}:")
        long_ones = [size for size in highlighted if size > 50_000]
        self.assertEqual(len(long_ones), 1)
        self.assertLessEqual(long_ones[0], 100_000)

    def test_marks_differ_per_view_but_the_highlighting_is_kept(self) -> None:
        first = markdown.render_source(LONG, "wgsl", [3])
        second = markdown.render_source(LONG, "wgsl", [4])
        self.assertIn('<span class="hll"><span class="linenos">   3</span>', first)
        self.assertIn('<span class="hll"><span class="linenos">   4</span>', second)
        self.assertNotIn('<span class="hll"><span class="linenos">   4</span>', first)
