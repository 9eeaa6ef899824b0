"""Readers' forks of Triton and CUDA versions, through URLs: a signed-in reader's edit of
the file a version's kernel is in runs the version's program on the Celery queue of its
kind, within GPU_FORKS_PER_DAY runs a day; a reader who is not signed in is asked to sign
in; an edit already run, or a missing GPU worker, costs nothing; private stays private.
The GPU task itself runs the queued job in the sandbox, here without a GPU."""

from __future__ import annotations

import base64
import io
import shutil
from datetime import timedelta
from typing import Any
from unittest import mock

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.core.management import call_command
from django.test import Client, TestCase, override_settings
from django.utils import timezone

from kernels import finishing, tasks, workers
from kernels.models import Fork, GpuForkRun, Run
from sessions.models import Session
from sessions.programs import KernelVersion
from tests.kernels.test_gpu_workers import import_gpu_session
from tests.sessions.transcripts.build import SCALE_CU, program

pytestmark = pytest.mark.usefixtures("fresh_replay_backend")

ADD_RELU = "add_relu-add_relu_kernel"
# The masked kernel, clamped at 1 instead of 0: a program that runs, and is not archived.
EDITED = program("add_relu_v2").replace("tl.maximum(x + y, 0.0)", "tl.maximum(x + y, 1.0)")


def version_of(kernel: str, number: int) -> KernelVersion:
    return KernelVersion.objects.select_related("turn", "kernel__session").get(
        kernel__name=kernel, number=number
    )


def offer_gpus() -> None:
    """A worker that announced Triton and CUDA on an H100 (bubblewrap taken as there)."""
    with mock.patch("kernels.workers.shutil.which", return_value="/usr/bin/bwrap"):
        workers.announce("gpu-1@h100", ["triton", "cuda"], "NVIDIA H100 80GB HBM3")


def edited(text: str) -> str:
    """A file's text as a job carries it."""
    return base64.b64encode(text.encode()).decode()


class GpuForkTestCase(TestCase):
    def setUp(self) -> None:
        cache.clear()  # the per-minute fork counters
        import_gpu_session()
        self.alice = User.objects.create_user("alice", password="password")
        self.sent = mock.patch.object(tasks.run_gpu_replay, "apply_async").start()
        self.addCleanup(mock.patch.stopall)

    def urls(self, kernel: str = ADD_RELU, number: int = 2) -> tuple[str, str]:
        """The version's replay page and the URL its fork form posts to."""
        version = version_of(kernel, number)
        assert version.turn is not None
        page = f"/s/{version.kernel.session.slug}/turns/{version.turn.number}/"
        return page + "replay/", page + "fork/"

    def fork(self, source: str = EDITED, kernel: str = ADD_RELU, number: int = 2) -> Any:
        return self.client.post(self.urls(kernel, number)[1], {"source": source})

    def queued(self) -> list[tuple[str, dict[str, Any]]]:
        """Each job sent to a GPU queue: its queue and payload."""
        return [(call.kwargs["queue"], call.args[0][2]) for call in self.sent.call_args_list]

    # -- who may run one -------------------------------------------------------------

    def test_a_reader_not_signed_in_is_asked_to_sign_in_and_nothing_runs(self) -> None:
        page_url, fork_url = self.urls()
        page = self.client.get(page_url)
        sign_in = f'href="/accounts/login/?next={page_url.replace("/", "%2F")}%23try-your-fix"'
        self.assertContains(page, sign_in)
        self.assertContains(page, "for signed-in readers only, 10 runs a day")
        self.assertNotContains(page, "Run my version")
        offer_gpus()
        response = self.fork()
        self.assertContains(response, "for signed-in readers only", status_code=403)
        self.assertContains(response, sign_in, status_code=403)
        self.assertContains(response, "tl.maximum(x + y, 1.0)", status_code=403)
        self.assertEqual(self.queued(), [])
        self.assertFalse(Run.objects.exists())
        self.assertFalse(Fork.objects.exists())
        self.assertEqual(fork_url, page_url.replace("replay/", "fork/"))

    def test_a_post_without_its_csrf_token_is_refused(self) -> None:
        offer_gpus()
        strict = Client(enforce_csrf_checks=True)
        strict.force_login(self.alice)
        response = strict.post(self.urls()[1], {"source": EDITED})
        self.assertEqual(response.status_code, 403)
        self.assertEqual(self.queued(), [])
        self.assertFalse(Fork.objects.exists() or GpuForkRun.objects.exists())

    def test_a_signed_in_readers_edit_runs_on_its_kinds_queue_with_the_edited_file(self) -> None:
        self.client.force_login(self.alice)
        page = self.client.get(self.urls()[0])  # before any worker: no archived run starts
        self.assertContains(page, "File <code>add_relu.py</code>")
        self.assertContains(page, 'data-editor="python"')  # highlighted as Python
        self.assertContains(page, "Run my version")
        self.assertContains(page, "You may start 10 more runs today")
        # The form holds the whole file the kernel is in, launcher and test with it.
        self.assertContains(page, "add_relu matches torch.relu(x + y) for")
        offer_gpus()
        response = self.fork()
        self.assertEqual(response.status_code, 303)
        made = Fork.objects.get()
        self.assertEqual(response["Location"], f"/f/{made.id}/")
        ((queue, payload),) = self.queued()
        self.assertEqual(
            (queue, payload["kind"], payload["entry"]), ("triton", "triton", "add_relu.py")
        )
        self.assertEqual(payload["files"]["add_relu.py"], edited(EDITED))
        run = Run.objects.get()
        self.assertEqual(run.state, Run.State.QUEUED)
        self.assertEqual(GpuForkRun.objects.get().run, run)
        self.assertEqual(GpuForkRun.objects.get().user, self.alice)
        shown = self.client.get(response["Location"])
        self.assertContains(shown, "Waiting for a free replay worker")
        self.assertContains(shown, '<span class="gd">--- add_relu.py (v2)</span>')
        self.assertContains(shown, "You may start 9 more runs today")

        # A CUDA version: its program's queue; and a .cu file run by the state's launcher.
        self.fork(program("matmul_v2").replace("16", "32"), "matmul-matmul_naive", 2)
        scaled = SCALE_CU.replace("x[i] *= factor;", "x[i] = x[i] * factor;")
        self.fork(scaled, "scale-scale", 1)
        (_, _), (cuda, naive), (_, scale) = self.queued()
        self.assertEqual((cuda, naive["entry"]), ("cuda", "matmul.py"))
        self.assertEqual(
            naive["files"]["matmul.py"], edited(program("matmul_v2").replace("16", "32"))
        )
        self.assertEqual(scale["entry"], "matmul.py")
        self.assertEqual(scale["files"]["kernels/scale.cu"], edited(scaled))
        self.assertEqual(scale["files"]["matmul.py"], edited(program("matmul_v3")))
        # The .cu file is C++ to the editor; the launcher around a cupy kernel, Python.
        self.assertContains(self.client.get(self.urls("scale-scale", 1)[0]), 'data-editor="cpp"')
        naive_page = self.client.get(self.urls("matmul-matmul_naive", 2)[0])
        self.assertContains(naive_page, 'data-editor="python"')

    @pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
    def test_its_outcome_page_shows_the_run_as_a_replay_does(self) -> None:
        offer_gpus()
        self.client.force_login(self.alice)
        failing = "print('edited on the GPU')\nassert 1 + 1 == 3, 'the sum is off'\n"
        location = self.fork(failing)["Location"]
        ((_, payload),) = self.queued()
        ((run_id, key, _),), _ = self.sent.call_args
        # The GPU worker's task, on what was queued (python3 stands in for the GPU's).
        tasks.run_gpu_replay(run_id, key, payload)
        self.assertEqual(Run.objects.get(pk=run_id).status, "mismatch")
        page = self.client.get(location)
        self.assertContains(page, "A check failed at add_relu.py line 2: the sum is off")
        self.assertContains(page, "edited on the GPU")
        data = self.client.get(location + "replay.json").json()
        self.assertEqual(data["outcome"]["status"], "mismatch")
        self.assertEqual(data["forked_from"]["version"], 2)

    def test_a_page_view_never_starts_a_gpu_forks_run(self) -> None:
        offer_gpus()
        self.client.force_login(self.alice)
        location = self.fork()["Location"]
        Run.objects.all().delete()  # as if the run was lost
        self.client.logout()
        for path in (location, location + "replay.json", location + "embed/"):
            self.client.get(path)
        self.assertContains(self.client.get(location), "No run of this edit is stored")
        self.assertEqual(len(self.queued()), 1)

    # -- the quota -----------------------------------------------------------------

    @override_settings(GPU_FORKS_PER_DAY=2)
    def test_over_the_quota_429_says_when_and_nothing_runs(self) -> None:
        offer_gpus()
        self.client.force_login(self.alice)
        for clamp in ("1.0", "2.0"):
            self.assertEqual(self.fork(EDITED.replace("1.0", clamp)).status_code, 303)
        first = GpuForkRun.objects.order_by("created").first()
        assert first is not None
        GpuForkRun.objects.filter(pk=first.pk).update(created=timezone.now() - timedelta(hours=23))
        third = EDITED.replace("1.0", "3.0")
        response = self.fork(third)
        self.assertContains(response, "a reader may start 2", status_code=429)
        retry = int(response["Retry-After"])
        self.assertTrue(3500 <= retry <= 3600, retry)
        allowed = (timezone.now() + timedelta(seconds=retry)).strftime("%H:%M")
        self.assertContains(response, f"Your next run may start at {allowed} UTC", status_code=429)
        self.assertContains(response, "tl.maximum(x + y, 3.0)", status_code=429)  # kept
        self.assertEqual(len(self.queued()), 2)
        self.assertEqual((Run.objects.count(), Fork.objects.count()), (2, 2))
        # A day after the first, the next runs.
        GpuForkRun.objects.filter(pk=first.pk).update(
            created=timezone.now() - timedelta(hours=24, seconds=1)
        )
        self.assertEqual(self.fork(third).status_code, 303)
        self.assertEqual(len(self.queued()), 3)

    def test_a_lowered_quota_waits_for_enough_runs_to_age(self) -> None:
        offer_gpus()
        self.client.force_login(self.alice)
        for clamp in ("1.0", "2.0", "3.0"):
            self.fork(EDITED.replace("1.0", clamp))
        for hours, charge in zip((20, 10, 5), GpuForkRun.objects.order_by("created"), strict=True):
            charge.created = timezone.now() - timedelta(hours=hours)
            charge.save()
        # Two a day now: the next may start once the two older are a day old (in 14 h).
        with override_settings(GPU_FORKS_PER_DAY=2):
            response = self.fork(EDITED.replace("1.0", "4.0"))
        self.assertContains(response, "You have started 3 runs", status_code=429)
        self.assertAlmostEqual(int(response["Retry-After"]), 14 * 3600, delta=60)

    @override_settings(GPU_FORKS_PER_DAY=0)
    def test_staff_are_not_limited(self) -> None:
        staff = User.objects.create_user("sam", password="password", is_staff=True)
        self.client.force_login(staff)
        self.assertContains(self.client.get(self.urls()[0]), "Staff runs are not limited")
        offer_gpus()
        self.client.force_login(self.alice)
        self.assertContains(self.fork(), "for staff only", status_code=403)
        self.client.force_login(staff)
        for clamp in ("1.0", "2.0", "3.0"):
            self.assertEqual(self.fork(EDITED.replace("1.0", clamp)).status_code, 303)
        self.assertEqual(len(self.queued()), 3)

    @override_settings(GPU_FORKS_PER_DAY=1)
    def test_an_edit_already_run_is_served_from_its_run_for_nothing(self) -> None:
        offer_gpus()
        self.client.force_login(self.alice)
        location = self.fork()["Location"]
        ((run_id, _, _),), _ = self.sent.call_args
        # Sent again while it is in flight, then once it is stored: the same fork and run.
        self.assertEqual(self.fork()["Location"], location)
        finishing.finish(run_id, finishing.failed_outcome("The GPU stopped."))
        Run.objects.filter(pk=run_id).update(cacheable=True)
        again = self.fork()
        self.assertEqual((again.status_code, again["Location"]), (303, location))
        self.assertEqual(len(self.queued()), 1)
        self.assertEqual(GpuForkRun.objects.count(), 1)
        # The quota is spent, yet an edit identical to the archived file is the archived
        # version's job: its recorded H100 run answers, and nothing is sent.
        call_command("record_gpu_outcomes", stdout=io.StringIO())
        archived = self.fork(program("add_relu_v2"))
        self.assertEqual(archived.status_code, 303)
        page = self.client.get(archived["Location"])
        self.assertContains(page, "found no out-of-bounds access")
        self.assertContains(page, "The file is the same as v2")
        self.assertEqual(len(self.queued()), 1)
        self.assertEqual(self.fork(EDITED.replace("1.0", "5.0")).status_code, 429)

    # -- no worker -------------------------------------------------------------------

    def test_without_a_worker_the_missing_capability_is_said_and_costs_nothing(self) -> None:
        self.client.force_login(self.alice)
        response = self.fork()
        self.assertContains(
            response, "No connected replay worker offers Triton (an NVIDIA GPU", status_code=503
        )
        self.assertEqual(response["Retry-After"], "60")
        self.assertContains(response, "tl.maximum(x + y, 1.0)", status_code=503)
        cuda = self.fork(program("matmul_v2").replace("16", "32"), "matmul-matmul_naive", 2)
        self.assertContains(cuda, "offers CUDA (an NVIDIA GPU", status_code=503)
        self.assertEqual(self.queued(), [])
        self.assertFalse(Run.objects.exists() or Fork.objects.exists())
        self.assertFalse(GpuForkRun.objects.exists())
        # A fork run while a worker was there says so once none is.
        offer_gpus()
        location = self.fork()["Location"]
        workers.withdraw("gpu-1@h100")
        self.assertContains(self.client.get(location), "No connected replay worker offers Triton")
        self.assertContains(self.client.get(self.urls()[0]), "You may start 9 more runs today")

    # -- private sessions ------------------------------------------------------------

    def test_a_private_sessions_version_is_forked_only_by_who_may_see_it(self) -> None:
        offer_gpus()
        Session.objects.update(visibility=Session.Visibility.PRIVATE, owner=self.alice)
        bob = User.objects.create_user("bob", password="password")
        self.client.force_login(bob)
        self.assertEqual(self.client.get(self.urls()[0]).status_code, 404)
        self.assertEqual(self.fork().status_code, 404)
        self.assertEqual(self.queued(), [])
        self.client.force_login(self.alice)
        location = self.fork()["Location"]
        self.assertEqual(self.client.get(location).status_code, 200)
        self.client.force_login(bob)
        for path in (location, location + "replay.json", location + "embed/"):
            self.assertEqual(self.client.get(path).status_code, 404, path)
        self.client.logout()
        self.assertEqual(self.client.get(location).status_code, 404)
        self.assertEqual(len(self.queued()), 1)
