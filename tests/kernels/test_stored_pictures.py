"""The picture of what a host program did is drawn once, when its run is stored, and
pages only read it; a run stored before pictures were is drawn on its first view and
kept. Real wgpu (llvmpipe here), through URLs."""

from __future__ import annotations

from unittest import mock

import pytest
from django.contrib.auth.models import User
from django.test import TransactionTestCase

from kernels import trace_pictures
from kernels.models import Run
from tests.base import make_session
from tests.kernels.test_host_pages import program_version
from tests.kernels.test_host_program import ADD_WGSL, VECTOR_ADD
from tests.kernels.test_replay_views import finished

pytestmark = pytest.mark.usefixtures("fresh_replay_backend")

PAGE = "/s/drawn/turns/2/replay/"


def not_drawn(*args, **kwargs):
    raise AssertionError("a page drew the trace")


class StoredPictureTests(TransactionTestCase):
    def setUp(self) -> None:
        program_version(make_session("drawn", turns=2), ADD_WGSL, VECTOR_ADD)
        # It ran (with nothing to compare its readback with: no_reference).
        outcome = finished(self.client, "/s/drawn/turns/2/replay.json")["outcome"]
        self.assertEqual(outcome["status"], "no_reference")
        self.reader = self.client_class()
        self.reader.force_login(User.objects.create_user("reader"))

    def buffers_drawn(self) -> list[str]:
        picture = Run.objects.get().picture
        return [buffer["name"] for buffer in picture["buffers"]] if picture else []

    def test_the_picture_is_stored_with_the_outcome_and_pages_only_read_it(self) -> None:
        self.assertEqual(sorted(self.buffers_drawn())[:3], ["a", "b", "out"])
        with mock.patch.object(trace_pictures, "host_picture", not_drawn):
            page = self.reader.get(PAGE)
        self.assertEqual(page.status_code, 200)
        self.assertContains(page, 'class="trace-buffer')

    def test_a_run_stored_before_pictures_is_drawn_on_its_first_view_and_kept(self) -> None:
        drawn = Run.objects.get().picture
        Run.objects.update(picture=None)
        self.assertContains(self.reader.get(PAGE), 'class="trace-buffer')
        self.assertEqual(Run.objects.get().picture, drawn)
        with mock.patch.object(trace_pictures, "host_picture", not_drawn):
            self.assertContains(self.reader.get(PAGE), 'class="trace-buffer')
