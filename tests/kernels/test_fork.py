"""Readers' forks through URLs: an edit of a turn's version runs under its harness on the
local pool, gets a permanent content-addressed page, JSON and embed, and every bad input
gets a clear answer."""

from __future__ import annotations

import json
from typing import Any
from unittest import mock

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client, TransactionTestCase, override_settings

from kernels import replay
from kernels.models import Fork
from kernels.replay import ReplayUnavailable
from sessions.models import Session
from tests.base import ADD_SOURCE, add_kernel, make_session
from tests.kernels.test_host_program import ADD_WGSL, VECTOR_ADD
from tests.kernels.test_host_versions import FLOOR, HARNESS, add_program
from tests.kernels.test_replay_views import finished

# The same sum written the other way round: it passes, and it is not the archived text.
SWAPPED = ADD_SOURCE.replace("a[id.x] + b[id.x]", "b[id.x] + a[id.x]")
WRONG = ADD_SOURCE.replace("a[id.x] + b[id.x]", "a[id.x] - b[id.x]")
NO_SEMICOLON = ADD_SOURCE.replace("a[id.x] + b[id.x];", "a[id.x] + b[id.x]")

pytestmark = pytest.mark.usefixtures("fresh_replay_backend")


class ForkTestCase(TransactionTestCase):
    def setUp(self) -> None:
        cache.clear()  # rate limit counters
        self.session = make_session("demo", turns=4, learner="Sam")
        self.version = add_kernel(self.session, turn=2)
        self.alice = User.objects.create_user("alice", password="password")
        self.bob = User.objects.create_user("bob", password="password")

    def fork(self, client: Client | None = None, path: str = "/s/demo/turns/2/fork/", **data):
        return (client or self.client).post(path, data)

    def made(self, source: str = SWAPPED, **data) -> str:
        """The fork's page URL, after its run finished."""
        r = self.fork(source=source, **data)
        self.assertEqual(r.status_code, 303, r.content[:500])
        finished(self.client, r["Location"] + "replay.json")
        return r["Location"]

    def make_private(self) -> None:
        Session.objects.filter(pk=self.session.pk).update(
            visibility=Session.Visibility.PRIVATE, owner=self.alice
        )

    # -- running an edit -----------------------------------------------------------

    def test_the_replay_page_offers_the_fork_editor_with_its_csrf_token(self) -> None:
        page = self.client.get("/s/demo/turns/2/replay/").content.decode()
        self.assertIn("Try your own fix", page)
        self.assertIn('<form method="post" action="/s/demo/turns/2/fork/" class="fork-form">', page)
        self.assertIn('name="csrfmiddlewaretoken"', page.split('class="fork-form"')[1])
        self.assertIn('data-editor="wgsl"', page)

    def test_an_edit_runs_and_answers_303_to_its_page_with_the_outcome_and_diff(self) -> None:
        r = self.fork(source=SWAPPED)
        self.assertEqual(r.status_code, 303)
        fork = Fork.objects.get()
        self.assertEqual(r["Location"], f"/f/{fork.id}/")
        self.assertRegex(fork.id, r"^[a-z2-7]{26}$")
        self.assertEqual(fork.version, self.version)
        body = finished(self.client, f"/f/{fork.id}/replay.json")
        self.assertEqual(body["outcome"]["status"], "passed")
        page = self.client.get(f"/f/{fork.id}/")
        self.assertContains(
            page, '<span class="status-pill status-passed">passed</span>', html=True
        )
        self.assertContains(page, "Changes from v1")
        self.assertContains(
            page, '<span class="gd">--- v1</span>\n<span class="gi">+++ fork</span>'
        )
        # Fork again: the editor holds the fork's source and posts to the same turn.
        self.assertContains(page, 'action="/s/demo/turns/2/fork/"')
        self.assertContains(page, "b[id.x] + a[id.x];\n}\n</textarea>")

    def test_a_wrong_edit_shows_the_same_pictures_as_a_replay(self) -> None:
        url = self.made(WRONG)
        page = self.client.get(url)
        self.assertContains(page, "status-mismatch")
        self.assertContains(page, "First wrong cells of <code>out</code>")
        self.assertContains(page, "<svg")

    def test_the_same_edit_gets_the_same_url_and_another_edit_another(self) -> None:
        first = self.made(SWAPPED)
        self.assertEqual(self.fork(source=SWAPPED)["Location"], first)
        # Windows line ends are the same text.
        self.assertEqual(self.fork(source=SWAPPED.replace("\n", "\r\n"))["Location"], first)
        self.assertNotEqual(self.fork(source=WRONG)["Location"], first)
        self.assertEqual(Fork.objects.count(), 2)

    def test_its_json_has_the_shape_of_a_turns_replay_json(self) -> None:
        url = self.made()
        archived = finished(self.client, "/s/demo/turns/2/replay.json")
        forked = finished(self.client, url + "replay.json")
        self.assertEqual(set(forked) - {"fork", "forked_from"}, set(archived))
        self.assertEqual(forked["fork"], url.split("/")[2])
        self.assertEqual(
            forked["forked_from"],
            {"session": "demo", "turn": 2, "version": 1, "replay": "/s/demo/turns/2/replay/"},
        )

    def test_its_json_serves_warnings_as_sentences_and_coded_items_beside(self) -> None:
        # A loop bounded by what the kernel reads from storage: llvmpipe's cap may cut it.
        looping = SWAPPED.replace(
            "    out[id.x] =",
            "    var s = 0.0;\n    for (var k = 0u; k < u32(a[0]); k++) { s += 0.0; }\n"
            "    out[id.x] = s +",
        )
        forked = finished(self.client, self.made(looping) + "replay.json")["outcome"]
        items = forked["warning_items"]
        self.assertEqual(forked["warnings"], [item["text"] for item in items])
        if forked["environment"].get("software"):
            self.assertIn("llvmpipe_loop_cap", [item["code"] for item in items])

    def test_a_compile_error_is_marked_for_the_editor_at_its_line_and_column(self) -> None:
        url = self.made(NO_SEMICOLON)
        page = self.client.get(url).content.decode()
        marks = page.split('id="fork-source"')[1].split('data-marks="')[1].split('"')[0]
        (mark,) = json.loads(marks.replace("&quot;", '"'))
        self.assertEqual(mark["line"], 8)
        self.assertGreaterEqual(mark["column"], 1)
        self.assertTrue(mark["message"])

    # -- sharing -------------------------------------------------------------------

    def test_its_embed_may_be_framed_anywhere(self) -> None:
        url = self.made()
        r = self.client.get(url + "embed/")
        self.assertEqual(r.status_code, 200)
        self.assertNotIn("X-Frame-Options", r)
        self.assertIn("frame-ancestors *", r["Content-Security-Policy"])
        self.assertContains(r, "status-passed")
        # Its page is not framable, like every page but the embeds.
        self.assertEqual(self.client.get(url)["X-Frame-Options"], "DENY")

    def test_oembed_answers_for_a_fork_url(self) -> None:
        url = self.made()
        r = self.client.get("/oembed/", {"url": f"http://testserver{url}", "format": "json"})
        self.assertEqual(r.status_code, 200)
        document = r.json()
        self.assertEqual(document["type"], "rich")
        self.assertEqual(document["title"], "add v1, forked · Session demo")
        self.assertIn(f'src="http://testserver{url}embed/"', document["html"])
        page = self.client.get(url)
        self.assertContains(page, 'type="application/json+oembed"')

    # -- who may fork and see a fork -----------------------------------------------

    def test_anyone_may_fork_an_unlisted_session(self) -> None:
        Session.objects.filter(pk=self.session.pk).update(visibility=Session.Visibility.UNLISTED)
        url = self.made()
        self.assertEqual(self.client.get(url).status_code, 200)

    def test_a_private_sessions_forks_are_its_owners_only(self) -> None:
        self.make_private()
        self.assertEqual(self.fork(source=SWAPPED).status_code, 404)
        self.client.force_login(self.bob)
        self.assertEqual(self.fork(source=SWAPPED).status_code, 404)
        self.client.force_login(self.alice)
        url = self.made()
        self.assertEqual(self.client.get(url).status_code, 200)
        # Never embedded, even for its owner: embeds carry no cookies.
        self.assertEqual(self.client.get(url + "embed/").status_code, 404)
        self.client.force_login(self.bob)
        for path in (url, url + "replay.json", url + "embed/"):
            self.assertEqual(self.client.get(path).status_code, 404, path)

    def test_a_fork_whose_session_became_private_answers_as_private(self) -> None:
        url = self.made()
        self.make_private()
        for path in (url, url + "replay.json", url + "embed/"):
            self.assertEqual(self.client.get(path).status_code, 404, path)
        oembed = self.client.get("/oembed/", {"url": f"http://testserver{url}"})
        self.assertEqual(oembed.status_code, 404)
        self.client.force_login(self.alice)
        self.assertEqual(self.client.get(url).status_code, 200)

    # -- bad input -----------------------------------------------------------------

    def test_a_post_without_its_csrf_token_is_refused(self) -> None:
        r = self.fork(Client(enforce_csrf_checks=True), source=SWAPPED)
        self.assertEqual(r.status_code, 403)
        self.assertFalse(Fork.objects.exists())

    def test_an_empty_kernel_is_refused_and_nothing_runs(self) -> None:
        for source in ("", "  \n\t\n"):
            r = self.fork(source=source)
            self.assertContains(r, "The kernel is empty", status_code=400)
        self.assertFalse(Fork.objects.exists())

    @override_settings(FORK_MAX_CHARS=1000)
    def test_a_huge_kernel_is_refused_with_413_keeping_the_archived_source_in_the_editor(
        self,
    ) -> None:
        r = self.fork(source=ADD_SOURCE + "// " + "x" * 2000)
        self.assertContains(r, "a fork may hold at most 1,000", status_code=413)
        self.assertContains(r, "a[id.x] + b[id.x];\n}\n</textarea>", status_code=413)
        self.assertFalse(Fork.objects.exists())

    def test_a_harness_cannot_be_changed_by_a_fork(self) -> None:
        spec = json.dumps({"entry_point": "main"})
        for field in ("harness", "harness_override"):
            posted: dict[str, Any] = {"source": SWAPPED, field: spec}
            r = self.fork(**posted)
            self.assertContains(r, "the harness cannot be changed here", status_code=400)
            # The reader's edit is back in the editor.
            self.assertContains(r, "b[id.x] + a[id.x];\n}\n</textarea>", status_code=400)
        self.assertFalse(Fork.objects.exists())

    def test_a_host_program_for_a_version_without_one_is_refused(self) -> None:
        r = self.fork(source=SWAPPED, host="console.log(1);")
        self.assertContains(r, "This version has no host program", status_code=400)

    @override_settings(FORK_RUNS_PER_MINUTE=2)
    def test_a_flood_of_runs_gets_429_with_retry_after(self) -> None:
        for source in (SWAPPED, WRONG):
            self.assertEqual(self.fork(source=source).status_code, 303)
        r = self.fork(source=NO_SEMICOLON)
        self.assertContains(r, "try again in", status_code=429)
        self.assertGreaterEqual(int(r["Retry-After"]), 1)
        self.assertEqual(Fork.objects.count(), 2)
        # Another client is not held back.
        other = Client(REMOTE_ADDR="10.0.0.9")
        self.assertEqual(self.fork(other, source=NO_SEMICOLON).status_code, 303)

    def test_a_full_queue_gives_a_clear_503_with_retry_and_stores_nothing(self) -> None:
        busy = ReplayUnavailable("Every replay worker is busy; try again in 5 s.", 5)
        with mock.patch.object(type(replay.backend()), "start", side_effect=busy):
            r = self.fork(source=SWAPPED)
        self.assertContains(r, "Every replay worker is busy", status_code=503)
        self.assertEqual(r["Retry-After"], "5")
        self.assertContains(r, "b[id.x] + a[id.x];\n}\n</textarea>", status_code=503)
        self.assertFalse(Fork.objects.exists())
        # When a worker is free again, the same edit runs.
        self.assertEqual(self.fork(source=SWAPPED).status_code, 303)

    def test_curators_read_and_delete_forks_in_the_admin(self) -> None:
        fork = Fork.objects.create(id="abcdefghijkl", version=self.version, source=WRONG)
        curator = User.objects.create_superuser("curator", password="password")
        self.client.force_login(curator)
        listing = self.client.get("/admin/kernels/fork/")
        self.assertContains(listing, "abcdefghijkl")
        self.assertContains(
            self.client.get(f"/admin/kernels/fork/{fork.id}/change/"), "a[id.x] - b[id.x]"
        )
        self.client.post(f"/admin/kernels/fork/{fork.id}/delete/", {"post": "yes"})
        self.assertFalse(Fork.objects.exists())
        self.assertEqual(self.client.get(f"/f/{fork.id}/").status_code, 404)

    def test_a_missing_turn_or_fork_is_404(self) -> None:
        self.assertEqual(self.fork(path="/s/demo/turns/9/fork/", source=SWAPPED).status_code, 404)
        self.assertEqual(self.fork(path="/s/demo/turns/1/fork/", source=SWAPPED).status_code, 404)
        for path in ("/f/aaaaaaaaaaaa/", "/f/aaaaaaaaaaaa/replay.json", "/f/aaaaaaaaaaaa/embed/"):
            self.assertEqual(self.client.get(path).status_code, 404, path)
        self.assertEqual(self.client.get("/s/demo/turns/2/fork/").status_code, 405)


class HostForkTestCase(TransactionTestCase):
    """A version with a host program forks with it: the reader edits either or both."""

    def setUp(self) -> None:
        cache.clear()
        self.session = make_session("host", turns=4)
        add_program(self.session, [FLOOR], HARNESS)

    def test_a_fixed_host_program_runs_and_its_diff_shows(self) -> None:
        page = self.client.get("/s/host/turns/2/replay/")
        self.assertContains(page, 'data-editor="javascript"')
        r = self.client.post("/s/host/turns/2/fork/", {"source": ADD_WGSL, "host": VECTOR_ADD})
        self.assertEqual(r.status_code, 303)
        self.assertEqual(
            finished(self.client, r["Location"] + "replay.json")["outcome"]["status"], "passed"
        )
        page = self.client.get(r["Location"])
        self.assertContains(page, "Host changes from v1")
        self.assertContains(page, 'Math</span><span class="p">.</span><span class="nx">ceil')
        self.assertContains(page, "The kernel is the same as v1")
        # The diff shows the change; the whole program is folded below it.
        text = page.content.decode()
        self.assertLess(text.index("Host changes from v1"), text.index("Host program"))
        self.assertContains(page, "<summary>The whole program of this edit</summary>")

    def test_without_a_host_field_the_archived_program_runs_and_an_empty_one_is_refused(
        self,
    ) -> None:
        r = self.client.post("/s/host/turns/2/fork/", {"source": ADD_WGSL})
        self.assertEqual(r.status_code, 303)
        self.assertEqual(Fork.objects.get().host_program, FLOOR)
        empty = self.client.post("/s/host/turns/2/fork/", {"source": ADD_WGSL, "host": " "})
        self.assertContains(empty, "The host program is empty", status_code=400)
