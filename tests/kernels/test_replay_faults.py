"""Kernels that crash their worker, and runs nobody waits for: through URLs and the façade."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import TransactionTestCase, override_settings
from django.utils import timezone

from config import processes
from kernels import finishing, jobs, replay
from kernels.backends import LocalBackend
from kernels.models import Run
from tests.base import add_kernel, make_session
from tests.kernels.test_pool import NAGA_CRASH
from tests.kernels.test_replay_views import HOSTILE, HOSTILE_HARNESS, finished

pytestmark = [
    pytest.mark.usefixtures("fresh_replay_backend"),
    pytest.mark.skipif(settings.REPLAY_BACKEND != "local", reason="counts the local pool's work"),
]


def pool_status() -> dict:
    local = replay.backend()
    assert isinstance(local, LocalBackend)
    return local.pool().status()


class CrashedKernelTestCase(TransactionTestCase):
    def test_a_kernel_that_crashes_the_compiler_is_kept_and_shown_without_internals(
        self,
    ) -> None:
        add_kernel(make_session("crash", turns=1), source=NAGA_CRASH, harness={})

        body = finished(self.client, "/s/crash/turns/1/replay.json")

        outcome = body["outcome"]
        self.assertEqual(outcome["status"], "crashed")
        self.assertEqual(outcome["crash"]["stage"], "compile")
        self.assertNotIn("detail", outcome)
        run = Run.objects.get()
        self.assertTrue(run.cacheable)
        self.assertIn("in create_shader_module", run.detail)
        pid = re.search(r"Worker (\d+) killed by SIGSEGV", run.detail)[1]
        crashes = pool_status()["crashes"]
        self.assertEqual(crashes, 1)

        # Every later visit shows the stored outcome: no worker is started again.
        for _ in range(3):
            page = self.client.get("/s/crash/turns/1/replay/")
            self.assertContains(page, "The kernel made the shader compiler crash")
            self.assertContains(page, "very deep nesting")
            for internal in (pid, "stderr", "Fatal Python error", "server&#x27;s problem"):
                self.assertNotContains(page, internal)
            again = self.client.get("/s/crash/turns/1/replay.json").json()
            self.assertEqual(again["run"]["id"], run.pk)
            self.assertNotIn(pid, str(again))
        self.assertEqual(Run.objects.count(), 1)
        self.assertEqual(pool_status()["crashes"], crashes)

        # Staff find the worker and its stderr in the admin.
        staff = User.objects.create_superuser("staff", "staff@example.org", "pw")
        self.client.force_login(staff)
        admin = self.client.get(f"/admin/kernels/run/{run.pk}/change/")
        self.assertContains(admin, f"Worker {pid} killed by SIGSEGV")
        self.assertContains(admin, "Fatal Python error")

    def test_a_run_that_lost_its_worker_is_not_kept(self) -> None:
        version = add_kernel(make_session("lost", turns=1))
        job = jobs.job_for(version)
        run = Run.objects.create(
            source_sha256=job.source_sha256, harness_digest=job.harness_digest, environment_id="x"
        )
        finishing.finish(run.pk, finishing.failed_outcome("The worker running it stopped."))
        run.refresh_from_db()
        self.assertEqual(run.status, "crashed")
        self.assertFalse(run.cacheable)


class LostRunTestCase(TransactionTestCase):
    def test_a_run_whose_process_is_gone_from_this_host_is_replaced_at_once(self) -> None:
        version = add_kernel(make_session("orphan", turns=1))
        job = jobs.job_for(version)
        server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        orphan = Run.objects.create(
            source_sha256=job.source_sha256,
            harness_digest=job.harness_digest,
            environment_id=replay.backend().environment_id(wait=True),
            state=Run.State.RUNNING,
            started=timezone.now(),
            worker=processes.process_name(server.pid),
        )
        # While its process lives, readers see it running.
        self.assertEqual(replay.for_reader(version, start=True).run.pk, orphan.pk)
        server.kill()  # the web process running it is killed
        server.wait()

        body = finished(self.client, "/s/orphan/turns/1/replay.json")

        self.assertEqual(body["outcome"]["status"], "passed")
        self.assertNotEqual(body["run"]["id"], orphan.pk)
        orphan.refresh_from_db()
        self.assertEqual((orphan.state, orphan.status), ("done", "crashed"))


class GaveUpTestCase(TransactionTestCase):
    @override_settings(REPLAY_WORKERS=1, REPLAY_DEADLINE=3.0, REPLAY_QUEUE=8)
    def test_runs_whose_requesters_gave_up_are_dropped_before_they_run(self) -> None:
        slow = add_kernel(make_session("slow", turns=1), source=HOSTILE, harness=HOSTILE_HARNESS)
        running = replay.for_reader(slow, start=True).run
        deadline = time.monotonic() + 30
        while not pool_status()["busy_pids"]:
            self.assertLess(time.monotonic(), deadline, "the slow run never started")
            time.sleep(0.02)

        started = time.monotonic()
        gave_up = []
        for index in range(5):
            source = HOSTILE.replace("60000u", f"{59990 + index}u")
            version = add_kernel(
                make_session(f"gave-up-{index}", turns=1), source=source, harness=HOSTILE_HARNESS
            )
            shown = replay.run_now(version, timeout=0.2)
            self.assertEqual(shown.busy, "The run did not finish in time; try again.")
            gave_up.append(shown.run.pk)

        # The slow run ends at its deadline; the five are dropped, not run to theirs.
        self.assertEqual(replay.wait(running, 30).status, "timeout")
        # Their runs are forgotten once a pool thread has dropped them (the bound only
        # keeps a broken pool from hanging the test).
        while pool_status()["abandoned"] < 5 or Run.objects.filter(pk__in=gave_up).exists():
            self.assertLess(time.monotonic() - started, 5 * settings.REPLAY_DEADLINE)
            time.sleep(0.05)
        # None of the five ran to its deadline: the slow run is the pool's only timeout.
        self.assertEqual(pool_status()["timeouts"], 1)

        # Nothing was kept: a later visit starts it again.
        body = finished(self.client, "/s/gave-up-0/turns/1/replay.json")
        self.assertEqual(body["outcome"]["status"], "timeout")
        self.assertNotIn(body["run"]["id"], gave_up)


class ClaimTestCase(TransactionTestCase):
    """A worker taking a run: one UPDATE while attempts are left, a clear end after."""

    def run_with(self, attempts: int, state: str = Run.State.QUEUED) -> Run:
        return Run.objects.create(
            source_sha256="s",
            harness_digest="h",
            environment_id="e",
            state=state,
            attempts=attempts,
        )

    def test_a_run_with_attempts_left_is_taken_in_one_query(self) -> None:
        run = self.run_with(settings.REPLAY_MAX_ATTEMPTS - 1)
        with self.assertNumQueries(1):
            self.assertTrue(finishing.claim(run.pk, "host:1:2"))
        run.refresh_from_db()
        self.assertEqual((run.state, run.worker), (Run.State.RUNNING, "host:1:2"))
        self.assertEqual(run.attempts, settings.REPLAY_MAX_ATTEMPTS)

    def test_a_run_out_of_attempts_ends_as_crashed(self) -> None:
        run = self.run_with(settings.REPLAY_MAX_ATTEMPTS)
        self.assertFalse(finishing.claim(run.pk, "host:1:2"))
        run.refresh_from_db()
        self.assertEqual((run.state, run.status), (Run.State.DONE, "crashed"))
        stopped = f"stopped {settings.REPLAY_MAX_ATTEMPTS} times"
        self.assertIn(stopped, run.outcome["message"])

    def test_a_finished_run_is_not_taken(self) -> None:
        run = self.run_with(0, state=Run.State.DONE)
        self.assertFalse(finishing.claim(run.pk, "host:1:2"))
        run.refresh_from_db()
        self.assertEqual((run.attempts, run.worker), (0, ""))
