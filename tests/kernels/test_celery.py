"""Replays through Celery: a dead broker, and a worker killed in the middle of a job.

The dead-broker test runs everywhere (it needs no broker); the worker test needs the
real worker that CI's second pass starts (REPLAY_BACKEND=celery).
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from django.conf import settings
from django.test import TransactionTestCase, override_settings
from django.utils import timezone

from config.celery import app
from kernels import jobs
from kernels.models import Run
from tests.base import add_kernel, make_session
from tests.kernels.test_replay_views import HOSTILE, HOSTILE_HARNESS

pytestmark = pytest.mark.usefixtures("fresh_replay_backend")


@override_settings(REPLAY_BACKEND="celery")
class DeadBrokerTestCase(TransactionTestCase):
    def setUp(self) -> None:
        self.session = make_session("demo", turns=2)
        self.version = add_kernel(self.session, turn=1)
        self.broker = app.conf.broker_url
        # Nothing listens on port 1: every publish fails at once.
        app.conf.broker_url = "redis://127.0.0.1:1/0"
        app._after_fork()  # drop pooled connections to the real broker

    def tearDown(self) -> None:
        app.conf.broker_url = self.broker
        app._after_fork()

    def test_readers_are_told_and_nothing_is_left_queued(self) -> None:
        r = self.client.get("/s/demo/turns/1/replay.json")
        self.assertEqual(r.status_code, 503)
        self.assertEqual(r["Retry-After"], "30")
        self.assertIn("replay queue cannot be reached", r.json()["error"])
        self.assertContains(
            self.client.get("/s/demo/turns/1/replay/"),
            "Results that were already stored still show",
        )
        self.assertEqual(Run.objects.count(), 0)
        self.assertEqual(self.client.get("/healthz").json(), {"status": "degraded"})

    def test_stored_results_still_show(self) -> None:
        job = jobs.job_for(self.version)
        Run.objects.create(
            source_sha256=job.source_sha256,
            harness_digest=job.harness_digest,
            environment_id="gpu-fleet",
            state=Run.State.DONE,
            status="passed",
            cacheable=True,
            outcome={
                "status": "passed",
                "message": "All 128 cells match the reference.",
                "outputs": [],
                "environment": {"label": "NVIDIA H100 via Vulkan"},
                "timings": {},
                "warnings": [],
            },
            adapter="NVIDIA H100 via Vulkan",
            finished=timezone.now(),
        )
        r = self.client.get("/s/demo/turns/1/replay/")
        self.assertContains(r, "All 128 cells match the reference.")
        self.assertContains(r, "NVIDIA H100 via Vulkan")
        self.assertEqual(
            self.client.get("/s/demo/turns/1/replay.json").json()["outcome"]["status"], "passed"
        )


@pytest.mark.skipif(settings.REPLAY_BACKEND != "celery", reason="needs the CI Celery worker")
class KilledWorkerTestCase(TransactionTestCase):
    def running_on(self, run_id: int, not_worker: str = "") -> str:
        give_up = time.monotonic() + 60
        while time.monotonic() < give_up:
            run = Run.objects.get(pk=run_id)
            if run.state == Run.State.RUNNING and run.worker and run.worker != not_worker:
                return run.worker
            time.sleep(0.05)
        raise AssertionError(f"run {run_id} never started: {Run.objects.get(pk=run_id).state}")

    def finished_run(self, run_id: int) -> Run:
        give_up = time.monotonic() + 90
        while time.monotonic() < give_up:
            run = Run.objects.get(pk=run_id)
            if run.state == Run.State.DONE:
                return run
            time.sleep(0.1)
        raise AssertionError("the run was left unfinished")

    def start(self, slug: str) -> int:
        session = make_session(slug, turns=1)
        add_kernel(
            session,
            source=HOSTILE.replace("60000u", f"{59000 + len(slug)}u"),
            harness=HOSTILE_HARNESS,
        )
        return self.client.get(f"/s/{slug}/turns/1/replay.json").json()["run"]["id"]

    def kill(self, worker: str) -> None:
        os.kill(int(worker.rsplit(":", 1)[1]), signal.SIGKILL)

    def test_a_job_whose_worker_is_killed_is_run_again(self) -> None:
        run_id = self.start("killed-once")
        first = self.running_on(run_id)
        self.kill(first)
        second = self.running_on(run_id, not_worker=first)
        run = self.finished_run(run_id)
        self.assertEqual(run.attempts, 2)
        self.assertEqual(run.worker, second)
        self.assertEqual(run.status, "timeout")  # the kernel itself outlives the deadline

    def test_a_job_that_keeps_losing_its_worker_ends_as_crashed(self) -> None:
        run_id = self.start("killed-twice")
        worker = self.running_on(run_id)
        for attempt in range(1, settings.REPLAY_MAX_ATTEMPTS + 1):
            self.kill(worker)
            if attempt < settings.REPLAY_MAX_ATTEMPTS:
                worker = self.running_on(run_id, not_worker=worker)
        # The next delivery finds the attempts used up and gives the run a clear end.
        run = self.finished_run(run_id)
        self.assertEqual(run.status, "crashed")
        self.assertIn("stopped", run.outcome["message"])
