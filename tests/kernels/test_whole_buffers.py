"""A buffer kept whole on request: where a run's capture kept only a buffer's first cells
after a pass, the page offers a form; posting it runs the version again keeping that
buffer whole, which then downloads as .npy and is drawn on the page in place of the cut
one. Real wgpu (llvmpipe here) through the pool, through URLs as a reader would go."""

from __future__ import annotations

import io
import json
from typing import Any
from unittest import mock

import numpy as np
import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.cache import cache
from django.db import connection
from django.test import Client, TestCase, TransactionTestCase, override_settings
from django.test.utils import CaptureQueriesContext

from kernels import finishing, jobs, replay, whole_buffers
from kernels.engine.harness import parse_harness
from kernels.engine.host import capture as captures
from kernels.engine.host.check import harness_values
from kernels.engine.host.program import run_program
from kernels.engine.messages import HEADER
from kernels.engine.run import execute
from kernels.engine.worker import result_frame, result_frames
from kernels.models import Fork, KeptBuffer, Run
from sessions.models import Session
from sessions.programs import Blob
from tests.base import ADD_HARNESS, ADD_SOURCE, add_kernel, make_session, stored_outcome
from tests.kernels.test_host_pages import program_version
from tests.kernels.test_replay_views import finished

CELLS = 1 << 18  # 1 MiB of f32: four times what the capture keeps of a buffer
# Two passes over one buffer y, which the program never reads back: "fill" writes
# y[i] = (i % 1000) / 4 - 7, "scale" doubles it.
FILL_WGSL = """@group(0) @binding(0) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(256)
fn fill(@builtin(global_invocation_id) id: vec3<u32>) {
    y[id.x] = f32(id.x % 1000u) / 4.0 - 7.0;
}

@compute @workgroup_size(256)
fn scale(@builtin(global_invocation_id) id: vec3<u32>) {
    y[id.x] = 2.0 * y[id.x];
}
"""
FILL = f"""const adapter = await navigator.gpu.requestAdapter();
const device = await adapter.requestDevice();
const code = await (await fetch("kernel.wgsl")).text();
const module = device.createShaderModule({{ code }});
const y = device.createBuffer({{ label: "y", size: {CELLS * 4}, usage: GPUBufferUsage.STORAGE }});
const encoder = device.createCommandEncoder();
for (const entryPoint of ["fill", "scale"]) {{
  const pipeline = device.createComputePipeline({{ layout: "auto", compute: {{ module, entryPoint }} }});
  const group = device.createBindGroup({{
    layout: pipeline.getBindGroupLayout(0),
    entries: [{{ binding: 0, resource: {{ buffer: y }} }}],
  }});
  const pass = encoder.beginComputePass({{ label: entryPoint }});
  pass.setPipeline(pipeline);
  pass.setBindGroup(0, group);
  pass.dispatchWorkgroups({CELLS // 256});
  pass.end();
}}
device.queue.submit([encoder.finish()]);
"""
FILLED = (np.arange(CELLS) % 1000).astype(np.float32) / np.float32(4) - np.float32(7)
PAGE = "/s/whole/turns/2/replay/"
ASK = "/s/whole/turns/2/replay/whole/"
NPY = "/s/whole/turns/2/replay/whole.npy"
FORM = 'action="/s/whole/turns/2/replay/whole/"'


# These mock what the run's own process does (finishing.finish, the pool) and read what it
# stored as soon as asking answers; a task queue's worker is another process. The
# browser test (tests/browser/test_whole_buffer.py) keeps a buffer whole through either.
in_the_local_pool = pytest.mark.skipif(
    settings.REPLAY_BACKEND != "local", reason="mocks and reads the local pool's run"
)


def downloaded(client: Client, path: str, number: int, buffer: str) -> np.ndarray:
    r = client.get(path, {"pass": str(number), "buffer": buffer})
    assert r.status_code == 200, r.content[:300]
    assert r["Content-Type"] == "application/octet-stream"
    assert r["X-Content-Type-Options"] == "nosniff"
    assert r["Content-Disposition"].startswith("attachment; filename=")
    assert r.streaming  # its 64 MiB are sent as stored, not copied into one response
    body = r.getvalue()
    assert int(r["Content-Length"]) == len(body)
    return np.load(io.BytesIO(body), allow_pickle=False)


@in_the_local_pool
class WholeBufferTests(TransactionTestCase):
    def setUp(self) -> None:
        cache.clear()  # rate limit counters, kept pages
        self.session = make_session("whole", turns=2)
        self.version = program_version(self.session, FILL_WGSL, FILL)
        self.outcome = finished(self.client, "/s/whole/turns/2/replay.json")["outcome"]

    def whole_run_in_flight(self) -> Run:
        """A run keeping buffer y after pass 2 whole, queued for a worker elsewhere."""
        whole = whole_buffers.whole_buffer_job(jobs.job_for(self.version), 2, "y")
        return Run.objects.create(
            source_sha256=whole.source_sha256,
            harness_digest=whole.harness_digest,
            environment_id="elsewhere",
            state=Run.State.QUEUED,
        )

    def ask(
        self, client: Client | None = None, number: int | str = 1, buffer: str = "y", **extra: str
    ) -> Any:
        return (client or self.client).post(ASK, {"pass": number, "buffer": buffer, **extra})

    def test_a_cut_buffer_is_kept_whole_on_request_and_downloads_as_computed(self) -> None:
        for record in self.outcome["passes"]:
            (y,) = record["buffers"]
            self.assertEqual((y["count"], y["kept"]), (CELLS, captures.MAX_CELLS))
        page = self.client.get(PAGE, {"pass": 1}).content.decode()
        self.assertIn(FORM, page)
        self.assertIn("Keep the whole buffer (1.0 MB)", page)
        self.assertIn("runs this version again", page)
        # Nothing is kept before anyone asks; a GET of the form's URL starts nothing.
        self.assertEqual(self.client.get(f"{NPY}?pass=1&buffer=y").status_code, 404)
        self.assertEqual(self.client.get(ASK).status_code, 405)
        self.assertEqual(Run.objects.count(), 1)

        r = self.ask()

        self.assertEqual(r.status_code, 303)
        self.assertEqual(r["Location"], f"{PAGE}?pass=1#passes")
        kept = KeptBuffer.objects.get()
        self.assertEqual((kept.pass_number, kept.buffer, kept.dtype), (1, "y", "f32"))
        self.assertEqual((kept.count, kept.shape), (CELLS, [CELLS]))
        values = downloaded(self.client, NPY, 1, "y")
        self.assertEqual((values.dtype, values.shape), (np.dtype("<f4"), (CELLS,)))
        np.testing.assert_array_equal(values, FILLED)
        # The page draws it whole in place of the cut one, and links the download.
        page = self.client.get(PAGE, {"pass": 1}).content.decode()
        self.assertNotIn(FORM, page)
        self.assertIn(f"y: {CELLS} f32, kept whole ({CELLS:,} cells)", page)
        self.assertIn("each cell drawn is the mean of 64 cells", page)
        self.assertIn(f'href="{NPY}?pass=1&amp;buffer=y" download', page)
        # Pass 2 is still cut, and offers its own.
        page = self.client.get(PAGE, {"pass": 2}).content.decode()
        self.assertIn(FORM, page)
        self.assertEqual(self.ask(number=2).status_code, 303)
        np.testing.assert_array_equal(downloaded(self.client, NPY, 2, "y"), 2 * FILLED)
        # replay.json lists what is kept, and where each downloads.
        listed = finished(self.client, "/s/whole/turns/2/replay.json")["whole_buffers"]
        self.assertEqual(
            listed,
            [
                {
                    "pass": number,
                    "buffer": "y",
                    "dtype": "f32",
                    "shape": [CELLS],
                    "count": CELLS,
                    "url": f"{NPY}?pass={number}&buffer=y",
                }
                for number in (1, 2)
            ],
        )
        # Asked again: the kept one, no run, and the pages kept for readers stay kept.
        runs = Run.objects.count()
        stamp = Session.objects.get(pk=self.session.pk).updated
        self.assertEqual(self.ask().status_code, 303)
        self.assertEqual(Run.objects.count(), runs)
        self.assertEqual(Session.objects.get(pk=self.session.pk).updated, stamp)
        self.assertEqual(KeptBuffer.objects.count(), 2)

    def test_identical_requests_share_one_run_and_one_kept_buffer(self) -> None:
        job = whole_buffers.whole_buffer_job(jobs.job_for(self.version), 1, "y")
        # Two at once: the second joins the run the first started.
        started = replay.start_run(job)
        self.assertEqual(replay.start_run(job).pk, started.pk)
        replay.wait(started, 60)
        self.assertEqual(self.ask().status_code, 303)
        self.assertEqual(Run.objects.filter(harness_digest=job.harness_digest).count(), 1)
        self.assertEqual(KeptBuffer.objects.count(), 1)
        self.assertEqual(Blob.objects.filter(size=CELLS * 4).count(), 1)

    def test_a_fork_keeps_its_own_buffers_whole(self) -> None:
        source = FILL_WGSL.replace("- 7.0", "+ 1.0")
        r = self.client.post("/s/whole/turns/2/fork/", {"source": source, "host": FILL})
        fork = Fork.objects.get()
        self.assertEqual(r["Location"], f"/f/{fork.id}/")
        finished(self.client, f"/f/{fork.id}/replay.json")
        page = self.client.get(f"/f/{fork.id}/", {"pass": 1}).content.decode()
        self.assertIn(f'action="/f/{fork.id}/whole/"', page)

        r = self.client.post(f"/f/{fork.id}/whole/", {"pass": 1, "buffer": "y"})

        self.assertEqual(r["Location"], f"/f/{fork.id}/?pass=1#passes")
        values = downloaded(self.client, f"/f/{fork.id}/whole.npy", 1, "y")
        np.testing.assert_array_equal(values, FILLED + np.float32(8))
        listed = finished(self.client, f"/f/{fork.id}/replay.json")["whole_buffers"]
        self.assertEqual(
            [entry["url"] for entry in listed], [f"/f/{fork.id}/whole.npy?pass=1&buffer=y"]
        )
        # The archived version's buffer is another job's: not kept by the fork's request.
        self.assertNotIn("whole_buffers", finished(self.client, "/s/whole/turns/2/replay.json"))
        self.assertEqual(self.client.get(f"{NPY}?pass=1&buffer=y").status_code, 404)

    def test_bad_requests_say_what_is_wrong_and_run_nothing(self) -> None:
        cases: list[tuple[int | str, str, int, str]] = [
            ("x", "y", 400, "pass must be a pass&#x27;s number"),
            ("-1", "y", 400, "pass must be a pass&#x27;s number"),
            ("1" * 7, "y", 400, "pass must be a pass&#x27;s number"),
            ("²", "y", 400, "pass must be a pass&#x27;s number"),
            (1, "", 400, "buffer must name a buffer"),
            (1, "y" * 201, 400, "buffer must name a buffer"),
            (1, "y\x00", 400, "buffer must name a buffer"),  # PostgreSQL refuses NUL
            (9, "y", 404, "This run has no pass 9 (it has passes 1 to 2)."),
            (0, "y", 404, "This run has no pass 0"),
            (1, "z", 404, "Pass 1 wrote no buffer named &#x27;z&#x27;"),
        ]
        for number, buffer, status, message in cases:
            r = self.ask(number=number, buffer=buffer)
            self.assertContains(r, message, status_code=status)
            self.assertContains(r, f'href="{PAGE}#passes"', status_code=status)
        for query, status in (
            ({"pass": "x", "buffer": "y"}, 400),
            ({"buffer": "y"}, 400),
            ({"pass": "1", "buffer": "y\x00"}, 400),
        ):
            self.assertEqual(self.client.get(NPY, query).status_code, status)
        self.assertEqual(self.client.get(f"{NPY}?pass=3&buffer=y").status_code, 404)
        self.assertEqual(Run.objects.count(), 1)

    def test_a_buffer_over_the_cap_is_never_offered_or_run(self) -> None:
        with mock.patch.object(whole_buffers, "WHOLE_MAX_BYTES", 512 * 1024):
            page = self.client.get(PAGE, {"pass": 1}).content.decode()
            r = self.ask()
        self.assertNotIn(FORM, page)
        self.assertIn("It cannot be kept whole on request either: 1.0 MB is over the", page)
        self.assertContains(r, "Buffer y is 1.0 MB, over the 512 KB", status_code=422)
        self.assertEqual(Run.objects.count(), 1)

    def test_a_full_queue_gives_503_with_retry_after_and_the_form_stays(self) -> None:
        busy = replay.ReplayUnavailable("Every replay worker is busy; try again in 5 s.", 5)
        with mock.patch.object(type(replay.backend()), "start", side_effect=busy):
            r = self.ask()
        self.assertContains(r, "Every replay worker is busy", status_code=503)
        self.assertEqual(r["Retry-After"], "5")
        self.assertFalse(KeptBuffer.objects.exists())
        self.assertIn(FORM, self.client.get(PAGE, {"pass": 1}).content.decode())
        # When a worker is free again, it runs.
        self.assertEqual(self.ask().status_code, 303)
        self.assertTrue(KeptBuffer.objects.exists())

    def test_with_no_adapter_the_reader_is_told_and_nothing_is_kept(self) -> None:
        real = type(replay.backend()).environment_id

        def down(backend: Any, wait: bool) -> Any:
            if wait:
                raise RuntimeError("no adapter answers")
            return real(backend, wait)

        with mock.patch.object(type(replay.backend()), "environment_id", down):
            r = self.ask()
        self.assertEqual(r.status_code, 303)
        page = self.client.get(r["Location"]).content.decode()
        self.assertIn(
            "Buffer y was not kept: This time the version did not get that far: No GPU", page
        )
        self.assertFalse(KeptBuffer.objects.exists())
        # Back up, it runs.
        self.assertEqual(self.ask().status_code, 303)
        self.assertTrue(KeptBuffer.objects.exists())

    def test_a_run_that_fails_this_time_says_why_and_offers_to_try_again(self) -> None:
        real = finishing.finished

        def timed_out(outcome: Any) -> Any:
            stopped = dict(outcome, status="timeout", message="Stopped after 10.0 s.")
            return real(stored_outcome({**stopped, "whole": {"asked": {}}}))

        with mock.patch.object(finishing, "finished", side_effect=timed_out):
            r = self.ask()
        self.assertEqual(r.status_code, 303)
        page = self.client.get(r["Location"]).content.decode()
        self.assertIn("Buffer y was not kept: This time the version did not get that far", page)
        self.assertIn("Try again to keep the whole buffer (1.0 MB)", page)
        self.assertFalse(KeptBuffer.objects.exists())
        # Asked again, it runs anew rather than reusing the failed run.
        self.assertEqual(self.ask().status_code, 303)
        self.assertTrue(KeptBuffer.objects.exists())

    def test_a_buffer_being_kept_says_so_and_readers_pages_follow(self) -> None:
        # A page kept for readers who are not signed in (pages/reader_pages.py)...
        reader = Client()
        self.assertIn(FORM, reader.get(PAGE).content.decode())
        in_flight = self.whole_run_in_flight()
        self.session.touch()  # as asking does
        page = reader.get(PAGE).content.decode()
        self.assertIn("Being kept whole: this version is running again.", page)
        self.assertNotIn(FORM, page)
        # ...is not kept while it says so: the next look sees what became of it.
        in_flight.delete()
        self.assertIn(FORM, reader.get(PAGE).content.decode())
        self.assertEqual(self.ask(number=2).status_code, 303)
        page = reader.get(PAGE).content.decode()
        self.assertIn(f"y: {CELLS} f32, kept whole", page)

    def test_a_buffer_kept_after_a_readers_replay_json_was_kept_is_listed_in_it(self) -> None:
        # A reader's replay.json is kept (pages/reader_pages.py)...
        reader, answer = Client(), "/s/whole/turns/2/replay.json"
        self.assertNotIn("whole_buffers", reader.get(answer).json())
        stamp = Session.objects.get(pk=self.session.pk).updated
        # ...and a buffer is kept whole under the same stamp: its run outlasted the wait of
        # the request that asked, which stamped the session before the reader's answer.
        self.assertEqual(self.ask(number=2).status_code, 303)
        Session.objects.filter(pk=self.session.pk).update(updated=stamp)
        listed = reader.get(answer).json()["whole_buffers"]
        self.assertEqual([(kept["pass"], kept["buffer"]) for kept in listed], [(2, "y")])
        # The answer with it is kept in turn: one query serves it.
        with CaptureQueriesContext(connection) as queries:
            self.assertEqual(reader.get(answer).json()["whole_buffers"], listed)
        self.assertEqual(len(queries), 1)

    @override_settings(WHOLE_BUFFERS_PER_HOUR=1)
    def test_a_flood_of_requests_gets_429_with_retry_after(self) -> None:
        self.assertEqual(self.ask().status_code, 303)
        r = self.ask(number=2)
        self.assertContains(r, "try again in", status_code=429)
        self.assertGreaterEqual(int(r["Retry-After"]), 1)
        # What is kept already costs nothing; another client is not held back.
        self.assertEqual(self.ask().status_code, 303)
        self.assertEqual(self.ask(Client(REMOTE_ADDR="10.0.0.9"), number=2).status_code, 303)

    @override_settings(WHOLE_BUFFERS_PER_HOUR=1)
    def test_joining_a_run_in_flight_is_free_waits_for_nothing_and_keeps_readers_pages(
        self,
    ) -> None:
        self.assertEqual(self.ask().status_code, 303)  # the hour's one run is used
        in_flight = self.whole_run_in_flight()
        stamp = Session.objects.get(pk=self.session.pk).updated

        r = self.client.post(ASK, {"pass": 2, "buffer": "y"}, follow=True)

        self.assertContains(r, "is being kept whole: the version runs again")
        in_flight.refresh_from_db()
        self.assertEqual(in_flight.state, Run.State.QUEUED)  # joined, not waited out
        self.assertEqual(Session.objects.get(pk=self.session.pk).updated, stamp)
        in_flight.delete()
        self.assertContains(self.ask(number=2), "try again in", status_code=429)

    def test_asking_needs_the_csrf_token(self) -> None:
        reader = Client(enforce_csrf_checks=True)
        self.assertEqual(self.ask(reader).status_code, 403)
        page = reader.get(PAGE, {"pass": 1})
        token = page.cookies[settings.CSRF_COOKIE_NAME].value
        self.assertIn('name="csrfmiddlewaretoken" value="', page.content.decode())
        self.assertEqual(self.ask(reader, csrfmiddlewaretoken=token).status_code, 303)

    def test_curators_see_and_delete_kept_buffers_in_the_admin(self) -> None:
        self.assertEqual(self.ask().status_code, 303)
        kept = KeptBuffer.objects.get()
        curator = Client()
        curator.force_login(User.objects.create_superuser("curator", password="password"))
        listed = curator.get("/admin/kernels/keptbuffer/")
        self.assertContains(listed, '<td class="field-pass_number">1</td>', html=False)
        # Its page names the blob by sha256, without loading the bytes to print it.
        with CaptureQueriesContext(connection) as queries:
            change = curator.get(f"/admin/kernels/keptbuffer/{kept.pk}/change/")
        self.assertContains(change, kept.blob_id)
        blobs = f'"{Blob._meta.db_table}"'
        self.assertEqual([q["sql"] for q in queries.captured_queries if blobs in q["sql"]], [])
        deleted = curator.post(f"/admin/kernels/keptbuffer/{kept.pk}/delete/", {"post": "yes"})
        self.assertEqual(deleted.status_code, 302)
        self.assertFalse(KeptBuffer.objects.exists())
        # Its 1 MiB of bytes go with it: nothing else holds them.
        self.assertFalse(Blob.objects.filter(pk=kept.blob_id).exists())
        # The page offers it again, as never kept (not as a run that failed).
        page = self.client.get(PAGE, {"pass": 1}).content.decode()
        self.assertIn("Keep the whole buffer (1.0 MB)", page)
        self.assertEqual(self.ask().status_code, 303)
        self.assertTrue(KeptBuffer.objects.exists())

    def test_a_private_sessions_buffers_are_its_owners_alone(self) -> None:
        alice = User.objects.create_user("alice", password="password")
        bob = User.objects.create_user("bob", password="password")
        Session.objects.filter(pk=self.session.pk).update(
            visibility=Session.Visibility.PRIVATE, owner=alice
        )
        stranger = Client()
        stranger.force_login(bob)
        for client in (self.client, stranger):
            self.assertEqual(self.ask(client).status_code, 404)
        owner = Client()
        owner.force_login(alice)
        self.assertEqual(self.ask(owner).status_code, 303)
        self.assertEqual(downloaded(owner, NPY, 1, "y").size, CELLS)
        for client in (self.client, stranger):
            self.assertEqual(client.get(f"{NPY}?pass=1&buffer=y").status_code, 404)


BUMP_WGSL = """@group(0) @binding(0) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(256)
fn bump(@builtin(global_invocation_id) id: vec3<u32>) {
    y[id.x] = y[id.x] + 1.0;
}
"""
# Ten passes over a buffer of exactly the cells a buffer keeps (256 KiB): the run's 2 MiB
# last eight passes, and the ninth and tenth keep nothing.
BUMPS = (
    FILL.replace(str(CELLS * 4), str(captures.MAX_CELLS * 4))
    .replace('["fill", "scale"]', 'Array(10).fill("bump")')
    .replace(str(CELLS // 256), str(captures.MAX_CELLS // 256))
)


class KeptBytesTests(TestCase):
    def test_bytes_held_by_another_kept_buffer_stay_when_one_goes(self) -> None:
        (sha,) = Blob.store([b"\0" * 64])
        fields = {"source_sha256": "s", "harness_digest": "h", "dtype": "f32", "count": 16}
        one, two = (
            KeptBuffer.objects.create(**fields, pass_number=number, buffer="y", blob_id=sha)
            for number in (1, 2)
        )
        KeptBuffer.objects.filter(pk=one.pk).delete_with_bytes()
        self.assertTrue(Blob.objects.filter(pk=sha).exists())
        KeptBuffer.objects.filter(pk=two.pk).delete_with_bytes()
        self.assertFalse(Blob.objects.filter(pk=sha).exists())


@in_the_local_pool
class BudgetWholeBufferTests(TransactionTestCase):
    def test_a_buffer_past_the_runs_budget_is_offered_and_kept_whole(self) -> None:
        cache.clear()
        session = make_session("bumps", turns=2)
        program_version(session, BUMP_WGSL, BUMPS)
        outcome = finished(self.client, "/s/bumps/turns/2/replay.json")["outcome"]
        kept = [record["buffers"][0]["kept"] for record in outcome["passes"]]
        self.assertEqual(kept, [captures.MAX_CELLS] * 8 + [0, 0])
        self.assertNotIn(
            "whole-buffer-form", self.client.get("/s/bumps/turns/2/replay/?pass=8").content.decode()
        )
        page = self.client.get("/s/bumps/turns/2/replay/", {"pass": 10}).content.decode()
        self.assertIn('action="/s/bumps/turns/2/replay/whole/"', page)
        self.assertNotIn("<code>y</code>: .", page)

        r = self.client.post("/s/bumps/turns/2/replay/whole/", {"pass": 10, "buffer": "y"})

        self.assertEqual(r.status_code, 303)
        values = downloaded(self.client, "/s/bumps/turns/2/replay/whole.npy", 10, "y")
        np.testing.assert_array_equal(values, np.full(captures.MAX_CELLS, 10, dtype="<f4"))


@in_the_local_pool
class HarnessWholeBufferTests(TransactionTestCase):
    def test_a_harness_output_is_kept_whole_in_its_shape(self) -> None:
        cache.clear()
        shape = [512, 256]
        harness = {
            **ADD_HARNESS,
            "buffers": {
                name: {**spec, "shape": shape} for name, spec in ADD_HARNESS["buffers"].items()
            },
            "passes": [{**ADD_HARNESS["passes"][0], "dispatch": [2048, 1, 1]}],
        }
        session = make_session("harnessed", turns=2)
        add_kernel(session, harness=harness, turn=2)
        outcome = finished(self.client, "/s/harnessed/turns/2/replay.json")["outcome"]
        self.assertEqual(outcome["status"], "passed")
        self.assertEqual(outcome["passes"][0]["buffers"][0]["kept"], captures.MAX_CELLS)

        r = self.client.post("/s/harnessed/turns/2/replay/whole/", {"pass": 1, "buffer": "out"})

        self.assertEqual(r.status_code, 303)
        values = downloaded(self.client, "/s/harnessed/turns/2/replay/whole.npy", 1, "out")
        self.assertEqual(values.shape, tuple(shape))
        a, b = (
            harness_values(parse_harness(harness), name, settings.FIXTURES_DIR).astype("<f4")
            for name in "ab"
        )
        np.testing.assert_array_equal(values, (a + b).reshape(shape))
        page = self.client.get("/s/harnessed/turns/2/replay/").content.decode()
        self.assertIn("out: 512×256 f32, kept whole (131,072 cells)", page)
        self.assertIn("each cell drawn is the mean of 8×4 cells", page)


# -- the engine: the one copy, its cap, and how its bytes travel ----------------------------


def test_of_a_harness_with_cases_the_shown_case_keeps_the_buffer_whole(gpu, tmp_path) -> None:
    # b over 1 is clipped: the case "big" is wrong, and shown; "small" passes.
    source = ADD_SOURCE.replace("a[id.x] + b[id.x]", "a[id.x] + min(b[id.x], 1.0)")
    shape = [512, 256]
    spec = {
        **ADD_HARNESS,
        "buffers": {name: {**b, "shape": shape} for name, b in ADD_HARNESS["buffers"].items()},
        "passes": [{**ADD_HARNESS["passes"][0], "dispatch": [2048, 1, 1]}],
        "cases": {
            "big": {"buffers": {"b": {"random": {"seed": 3, "low": -4, "high": 4}}}},
            "small": {"buffers": {"b": {"random": {"seed": 4, "low": -1, "high": 1}}}},
        },
    }
    whole = captures.Whole(1, "out", {"pass": 1, "buffer": "out"})

    outcome = execute(gpu[0], gpu[1], {"self": source}, spec, tmp_path, whole=whole)

    assert outcome["status"] == "mismatch" and outcome["message"].startswith("1 of 2")
    kept = outcome["whole"]
    assert (kept["dtype"], kept["shape"]) == ("f32", shape)
    big = parse_harness(spec).for_case(parse_harness(spec).cases[0])
    a, b = (harness_values(big, name, tmp_path).astype("<f4") for name in "ab")
    got = np.frombuffer(kept["data"], "<f4").reshape(shape)
    np.testing.assert_array_equal(got, (a + np.minimum(b, np.float32(1))).reshape(shape))


def test_the_capture_keeps_one_buffer_whole_and_the_rest_as_ever(gpu) -> None:
    files = {"kernel.wgsl": FILL_WGSL.encode()}
    whole = captures.Whole(2, "y", {"pass": 2, "buffer": "y", "job": ["a", "b"]})
    result = run_program(gpu[0], gpu[1], FILL, files, capture=True, whole=whole)

    assert result.whole is not None
    assert result.whole["asked"] == {"pass": 2, "buffer": "y", "job": ["a", "b"]}
    assert (result.whole["dtype"], result.whole["shape"], result.whole["count"]) == (
        "f32",
        [CELLS],
        CELLS,
    )
    np.testing.assert_array_equal(np.frombuffer(result.whole["data"], "<f4"), 2 * FILLED)
    # The capture of every pass keeps its first cells, as without the request.
    for record in result.captured.values():
        assert len(record[0].data or b"") == captures.MAX_CELLS * 4


def test_a_request_the_run_cannot_meet_says_why(gpu, monkeypatch) -> None:
    files = {"kernel.wgsl": FILL_WGSL.encode()}
    for asked, problem in (
        ((3, "y"), "this run has no pass 3 that writes a buffer named 'y'"),
        ((1, "x"), "this run has no pass 1 that writes a buffer named 'x'"),
    ):
        whole = captures.Whole(*asked, {})
        result = run_program(gpu[0], gpu[1], FILL, files, capture=True, whole=whole)
        assert result.whole == {"asked": {}, "problem": problem}
    monkeypatch.setattr(captures, "WHOLE_MAX_BYTES", CELLS)
    whole = captures.Whole(1, "y", {})
    result = run_program(gpu[0], gpu[1], FILL, files, capture=True, whole=whole)
    assert result.whole is not None and "data" not in result.whole
    assert result.whole["problem"] == (
        f"buffer y is {CELLS * 4:,} bytes, over the {CELLS:,} bytes a buffer kept whole may be"
    )


def test_the_kept_bytes_leave_the_worker_raw_after_the_outcome() -> None:
    data = np.arange(100_000, dtype="<f4").tobytes()
    outcome = {"status": "passed", "whole": {"asked": {"pass": 1}, "data": data}}
    frame, header, attached = result_frames("7", outcome)  # type: ignore[arg-type]
    (length,) = HEADER.unpack(frame[: HEADER.size])
    head = json.loads(frame[HEADER.size :])
    assert length == len(frame) - HEADER.size and head["attachment"] == len(data)
    assert head["outcome"]["whole"] == {"asked": {"pass": 1}}
    assert (header, attached) == (HEADER.pack(len(data)), data)
    # Without one, the frame alone, as ever.
    assert result_frames("8", {"status": "passed"}) == [result_frame("8", {"status": "passed"})]  # type: ignore[typeddict-item]
