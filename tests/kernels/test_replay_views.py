"""Replay pages and replay.json, through URLs, with real kernels on the local pool."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.cache import cache
from django.db import connection
from django.test import Client, TransactionTestCase, override_settings
from django.utils import timezone

from kernels import jobs, replay
from kernels.models import Run
from tests.base import ADD_HARNESS, ADD_SOURCE, add_kernel, make_session

COMPILE_ERROR = ADD_SOURCE.replace("a[id.x] + b[id.x];", "a[id.x] + b[id.x]")
COPY_SOURCE = """@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    y[id.x] = x[id.x];
}
"""
# Long enough on llvmpipe to outlive any short deadline: 4096 workgroups of 256
# invocations, each looping 60,000 times (under the 65,535 loop cap).
HOSTILE = """@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    var acc = 0.0;
    for (var i = 0u; i < 60000u; i++) { acc += sin(f32(i) * a[id.x % 128u]); }
    out[id.x % 128u] = acc;
}
"""
HOSTILE_HARNESS = {
    **ADD_HARNESS,
    "passes": [{**ADD_HARNESS["passes"][0], "dispatch": [4096, 1, 1]}],
}
ENDLESS = ADD_SOURCE.replace(
    "out[id.x] = a[id.x] + b[id.x];",
    "var n = 0u;\n    loop { if (a[0] > 100.0) { break; } n++; }\n    out[id.x] = f32(n);",
)


LOCAL_ONLY = pytest.mark.skipif(
    settings.REPLAY_BACKEND != "local", reason="exercises the in-process pool"
)


# Each test gets a backend (and a local pool) built from its own settings.
pytestmark = pytest.mark.usefixtures("fresh_replay_backend")


def finished(client: Client, path: str) -> dict:
    """replay.json once the run is done, asking about that run as the page's script does."""
    give_up = time.monotonic() + 90
    r = client.get(path, {"wait": 10})
    while r.status_code == 202:
        assert time.monotonic() < give_up, "the run never finished"
        time.sleep(0.1)
        r = client.get(path, {"wait": 10, "run": r.json()["run"]["id"]})
    assert r.status_code == 200, r.content
    return r.json()


class ReplayTestCase(TransactionTestCase):
    def setUp(self) -> None:
        self.session = make_session("demo", turns=4)
        self.version = add_kernel(self.session, turn=2)

    def finished(self, path: str = "/s/demo/turns/2/replay.json") -> dict:
        return finished(self.client, path)

    def test_it_runs_the_kernel_and_shows_the_outcome(self) -> None:
        body = self.finished()
        self.assertEqual(body["state"], "done")
        self.assertEqual(body["outcome"]["status"], "passed")
        self.assertIn("via", body["outcome"]["environment"]["label"])
        r = self.client.get("/s/demo/turns/2/replay/")
        self.assertContains(r, '<span class="status-pill status-passed">passed</span>', html=True)
        self.assertContains(r, "Ran on")
        self.assertContains(r, "<svg")

    def test_a_finished_run_is_reused(self) -> None:
        first = self.finished()["run"]["id"]
        second = self.finished()["run"]["id"]
        self.assertEqual(first, second)
        self.assertEqual(Run.objects.count(), 1)

    def test_a_cached_run_sends_the_outcome_it_stored(self) -> None:
        first = self.finished()
        r = self.client.get("/s/demo/turns/2/replay.json")
        self.assertEqual(r["Content-Type"], "application/json")
        self.assertEqual(r.json(), first)
        self.assertEqual(list(r.json()), list(first))
        # The text as the database keeps it (PostgreSQL's jsonb writes numbers its own
        # way), sent on without being parsed and encoded again.
        run = Run.objects.defer("outcome").get()
        stored = replay.stored_outcome_text(run)
        self.assertIn(f'"outcome": {stored}, "matches_expected"', r.content.decode())

    def test_a_compile_error_marks_the_line(self) -> None:
        self.version.source = COMPILE_ERROR
        self.version.save()
        body = self.finished()
        self.assertEqual(body["outcome"]["status"], "compile_error")
        self.assertEqual(body["outcome"]["compile"]["line"], 8)
        r = self.client.get("/s/demo/turns/2/replay/")
        self.assertContains(r, '<span class="hll"><span class="linenos">8</span>')
        self.assertContains(r, "expected `;`")

    def test_a_harness_version_shows_its_harness_as_host_code_and_its_trace(self) -> None:
        self.finished()
        r = self.client.get("/s/demo/turns/2/replay/")
        self.assertContains(r, "the harness, written as the WebGPU code it stands for")
        self.assertContains(r, "What the host did")
        # 2 workgroups of 64 for the 128 elements of out, each buffer 512 bytes.
        self.assertContains(r, "<code>dispatchWorkgroups(2)</code> × <code>@workgroup_size(64)")
        self.assertContains(r, "for the 128 elements of <code>out</code>")
        self.assertContains(r, '<span class="bytes">512 bytes</span>')
        self.assertNotContains(r, "Host changes since")

    @override_settings(EMBED_PENDING_CACHE_SECONDS=1)
    def test_an_embed_shows_the_stored_outcome_and_starts_nothing(self) -> None:
        self.version.source = COMPILE_ERROR
        self.version.save()
        embed = "/s/demo/embed/?from=1&to=3"
        r = self.client.get(embed)
        self.assertContains(r, "▶ replay add v1")
        self.assertNotContains(r, '<p class="turn-outcome"')
        self.assertEqual(Run.objects.count(), 0)

        self.finished()
        time.sleep(1.1)  # an embed still waiting for an outcome is cached this briefly
        r = self.client.get(embed)
        outcome = '<span class="status-pill status-compile_error">does not compile</span>'
        self.assertContains(r, outcome, html=True)
        self.assertContains(r, "line 8")
        self.assertEqual(Run.objects.count(), 1)

        # With every outcome stored, the page is kept until the session changes.
        Run.objects.all().delete()
        time.sleep(1.1)
        self.assertContains(self.client.get(embed), outcome, html=True)

    def test_identical_concurrent_requests_share_one_run(self) -> None:
        job = jobs.job_for(self.version)
        runs = [replay.start_run(job), replay.start_run(job)]
        self.assertEqual(runs[0].pk, runs[1].pk)
        self.assertEqual(replay.wait(runs[0], 10).status, "passed")
        self.assertEqual(Run.objects.count(), 1)

    @override_settings(REPLAY_FRESH_PER_MINUTE=1)
    def test_run_again_bypasses_the_cache_and_is_rate_limited(self) -> None:
        first = self.finished()["run"]["id"]
        r = self.client.post("/s/demo/turns/2/replay/")
        self.assertRedirects(r, "/s/demo/turns/2/replay/", fetch_redirect_response=False)
        second = self.finished()["run"]["id"]
        self.assertNotEqual(first, second)
        r = self.client.post("/s/demo/turns/2/replay/", follow=True)
        self.assertContains(r, "You have asked for many fresh runs")
        self.assertEqual(Run.objects.count(), 2)

    def test_run_again_needs_csrf(self) -> None:
        r = Client(enforce_csrf_checks=True).post("/s/demo/turns/2/replay/")
        self.assertEqual(r.status_code, 403)

    @override_settings(REPLAY_DEADLINE=1.5, REPLAY_FRESH_PER_MINUTE=1)
    def test_a_kernel_past_the_deadline_times_out_and_the_timeout_is_kept(self) -> None:
        self.version.source = HOSTILE
        self.version.save()
        self.version.kernel.harness = HOSTILE_HARNESS
        self.version.kernel.save()
        body = self.finished()
        self.assertEqual(body["outcome"]["status"], "timeout")
        run = Run.objects.get()
        self.assertTrue(run.cacheable)
        self.assertContains(self.client.get("/s/demo/turns/2/replay/"), "timed out")
        # A reader who comes later is shown the same timeout: views never run it again...
        with override_settings(REPLAY_RETRY_AFTER=0):
            self.client.get("/s/demo/turns/2/replay.json")
        self.assertEqual(Run.objects.count(), 1)
        # ...only "Run again" does, and that is rate-limited.
        self.addCleanup(cache.clear)  # the "Run again" rate limit counts in the cache
        self.client.post("/s/demo/turns/2/replay/")
        self.assertEqual(Run.objects.count(), 2)
        self.client.post("/s/demo/turns/2/replay/")
        self.assertEqual(Run.objects.count(), 2)

    def test_polling_a_run_never_starts_another(self) -> None:
        run_id = self.finished()["run"]["id"]
        for _ in range(3):
            r = self.client.get("/s/demo/turns/2/replay.json", {"run": run_id})
            self.assertEqual(r.json()["run"]["id"], run_id)
        self.assertEqual(Run.objects.count(), 1)
        other = make_session("other", turns=2)
        add_kernel(other, source=COMPILE_ERROR, turn=1)
        self.assertEqual(
            self.client.get("/s/other/turns/1/replay.json", {"run": run_id}).status_code, 404
        )
        self.assertEqual(
            self.client.get("/s/demo/turns/2/replay.json", {"run": "x"}).status_code, 404
        )

    def test_an_endless_loop_ends_with_an_outcome(self) -> None:
        self.version.source = ENDLESS
        self.version.save()
        outcome = self.finished()["outcome"]
        self.assertIn(outcome["status"], {"mismatch", "timeout"})
        if outcome["environment"].get("software"):
            codes = [warning["code"] for warning in outcome["warning_items"]]
            self.assertIn("llvmpipe_loop_cap", codes)

    @override_settings(REPLAY_DEADLINE=3.0)
    def test_the_site_keeps_answering_while_a_hostile_kernel_is_killed(self) -> None:
        hostile = make_session("hostile", turns=2)
        version = add_kernel(hostile, source=HOSTILE, harness=HOSTILE_HARNESS, turn=1)
        self.assertTrue(version)
        result = {}

        def read_hostile() -> None:
            try:
                result["body"] = finished(Client(), "/s/hostile/turns/1/replay.json")
            finally:
                connection.close()  # this thread's own connection

        reader = threading.Thread(target=read_hostile)
        reader.start()
        # While that kernel runs, the site serves pages and other replays.
        while not Run.objects.filter(state=Run.State.RUNNING).exists():
            pass
        self.assertEqual(self.client.get("/").status_code, 200)
        self.assertEqual(self.client.get("/s/demo/").status_code, 200)
        self.assertEqual(self.finished()["outcome"]["status"], "passed")
        self.assertTrue(reader.is_alive(), "the other requests finished before the hostile one")
        reader.join(30)
        self.assertEqual(result["body"]["outcome"]["status"], "timeout")
        self.assertEqual(self.finished()["outcome"]["status"], "passed")

    @LOCAL_ONLY
    @override_settings(REPLAY_WORKERS=1, REPLAY_QUEUE=1, REPLAY_DEADLINE=3.0)
    def test_a_full_queue_says_busy_with_retry_after(self) -> None:
        sessions = []
        for index in range(3):
            session = make_session(f"load-{index}", turns=1)
            source = HOSTILE.replace("60000u", f"{60000 - index}u")
            add_kernel(session, source=source, harness=HOSTILE_HARNESS, turn=1)
            sessions.append(session)
        answers = [self.client.get(f"/s/{s.slug}/turns/1/replay.json") for s in sessions]
        busy = answers[-1]
        self.assertEqual(busy.status_code, 503)
        self.assertGreaterEqual(int(busy["Retry-After"]), 1)
        self.assertIn("busy", busy.json()["error"])
        # The page says so too, instead of hanging.
        page = self.client.get(f"/s/{sessions[-1].slug}/turns/1/replay/")
        self.assertContains(page, "Every replay worker is busy")
        for session in sessions[:2]:
            self.finished(f"/s/{session.slug}/turns/1/replay.json")

    def test_a_run_lost_with_its_worker_is_replaced(self) -> None:
        job = jobs.job_for(self.version)
        lost = Run.objects.create(
            source_sha256=job.source_sha256,
            harness_digest=job.harness_digest,
            environment_id="whatever",
            state=Run.State.RUNNING,
        )
        an_hour_ago = timezone.now() - timedelta(hours=1)
        Run.objects.filter(pk=lost.pk).update(created=an_hour_ago, started=an_hour_ago)
        body = self.finished()
        self.assertEqual(body["outcome"]["status"], "passed")
        lost.refresh_from_db()
        self.assertEqual((lost.state, lost.status), ("done", "crashed"))
        self.assertIn("lost", lost.outcome["message"])

    def test_an_invalid_harness_is_explained(self) -> None:
        kernel = self.version.kernel
        kernel.harness = {**ADD_HARNESS, "passes": [{**ADD_HARNESS["passes"][0], "kernel": "nope"}]}
        kernel.save()
        r = self.client.get("/s/demo/turns/2/replay/")
        self.assertContains(r, "The harness runs kernel &#x27;nope&#x27;, which this session lacks")
        self.assertEqual(self.client.get("/s/demo/turns/2/replay.json").status_code, 422)
        # An embed of that turn still shows it, with a link to the page that explains.
        r = self.client.get("/s/demo/embed/?from=1&to=3")
        self.assertContains(r, 'href="http://testserver/s/demo/turns/2/replay/"')
        self.assertNotContains(r, '<p class="turn-outcome"')

    def test_bad_wait_and_missing_turns(self) -> None:
        self.assertEqual(
            self.client.get("/s/demo/turns/2/replay.json", {"wait": "soon"}).status_code, 400
        )
        r = self.client.get("/s/demo/turns/3/replay/")
        self.assertContains(r, "did not submit or review a kernel", status_code=404)
        self.assertEqual(self.client.get("/s/demo/turns/99/replay/").status_code, 404)

    def test_previous_and_next_versions_and_the_diff(self) -> None:
        from sessions.programs import KernelVersion

        turn = self.session.turns.get(number=4)
        fixed = KernelVersion.objects.create(
            kernel=self.version.kernel,
            number=2,
            source=ADD_SOURCE.replace("+", "+ 0.0 +"),
            turn=turn,
        )
        turn.kernel_version = fixed
        turn.save()
        first = self.client.get("/s/demo/turns/2/replay/")
        self.assertContains(first, 'href="/s/demo/turns/4/replay/"')
        second = self.client.get("/s/demo/turns/4/replay/")
        self.assertContains(second, 'href="/s/demo/turns/2/replay/"')
        self.assertContains(second, "Changes since v1")
        self.assertContains(second, '<span class="gi">')
        timeline = self.client.get("/s/demo/kernels/add/")
        self.assertContains(timeline, "v1")
        self.assertContains(timeline, "v2")

    def test_healthz_reports_the_adapter_and_the_workers_to_staff(self) -> None:
        self.finished()
        self.client.force_login(User.objects.create_user("ops", password="pw", is_staff=True))
        body = self.client.get("/healthz").json()
        self.assertEqual(body["status"], "ok")
        self.assertEqual(body["replay"]["backend"], settings.REPLAY_BACKEND)
        self.assertIn("via", body["replay"]["environment"])
        if settings.REPLAY_BACKEND == "local":
            self.assertEqual(body["replay"]["alive"], body["replay"]["size"])
        else:
            self.assertTrue(body["replay"]["broker"]["ok"])

    def test_private_replays_stay_private(self) -> None:
        owner = User.objects.create_user("owner", password="pw")
        self.session.visibility = "private"
        self.session.owner = owner
        self.session.save()
        self.assertEqual(self.client.get("/s/demo/turns/2/replay.json").status_code, 404)
        self.assertEqual(Run.objects.count(), 0)
        self.client.login(username="owner", password="pw")
        self.assertEqual(self.finished()["outcome"]["status"], "passed")


class ReplayCommandTestCase(TransactionTestCase):
    def call(self, *args) -> str:
        from io import StringIO

        from django.core.management import call_command

        out = StringIO()
        call_command("replay", *args, stdout=out)
        return out.getvalue()

    def test_it_replays_files(self) -> None:
        import tempfile
        from pathlib import Path

        with tempfile.TemporaryDirectory() as tmp:
            source, harness = Path(tmp) / "k.wgsl", Path(tmp) / "h.json"
            source.write_text(ADD_SOURCE)
            harness.write_text(json.dumps(ADD_HARNESS))
            self.assertIn(
                "passed: All 128 cells match", self.call("--source", source, "--harness", harness)
            )
            outcome = json.loads(self.call("--source", source, "--harness", harness, "--json"))
            self.assertEqual(outcome["status"], "passed")
            # Without a harness it only compiles.
            self.assertIn("no_reference: Compiles", self.call("--source", source))
            source.write_text(COMPILE_ERROR)
            text = self.call("--source", source, "--harness", harness)
            self.assertIn("compile_error", text)
            self.assertIn("wgsl:8:1", text)

    def test_it_replays_a_program_of_several_modules(self) -> None:
        import copy
        import tempfile
        from pathlib import Path

        harness = copy.deepcopy(ADD_HARNESS)
        harness["buffers"]["sum"] = {"usage": "read_write", "dtype": "f32", "shape": [128]}
        harness["passes"] = [
            {"kernel": "add", "bind": {"0": "a", "1": "b", "2": "sum"}, "dispatch": [2]},
            {"kernel": "self", "bind": {"0": "sum", "1": "out"}, "dispatch": [2]},
        ]
        harness["report"] = {"show": ["sum"]}
        with tempfile.TemporaryDirectory() as tmp:
            copy_source, add, spec = (
                Path(tmp) / "copy.wgsl",
                Path(tmp) / "add.wgsl",
                Path(tmp) / "h.json",
            )
            copy_source.write_text(COPY_SOURCE)
            add.write_text(ADD_SOURCE)
            spec.write_text(json.dumps(harness))

            text = self.call("--source", copy_source, "--source", add, "--harness", spec)

        self.assertIn("passed: All 128 cells match", text)
        self.assertIn("sum [128]: intermediate, shown, 128 cells", text)

    def test_it_replays_a_stored_turn(self) -> None:
        session = make_session("demo", turns=2)
        add_kernel(session, turn=2)
        self.assertIn("passed", self.call("--session", "demo", "--turn", "2"))

    def test_usage_errors_exit_non_zero(self) -> None:
        from django.core.management import CommandError

        make_session("demo", turns=2)
        for args in (
            [],
            ["--session", "demo", "--turn", "1"],
            ["--session", "nope", "--turn", "1"],
            ["--source", "/nonexistent.wgsl"],
        ):
            with self.subTest(args=args), self.assertRaises(CommandError):
                self.call(*args)
