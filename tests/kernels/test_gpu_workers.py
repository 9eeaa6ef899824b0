"""Triton and CUDA replays go to workers by capability: a version of a Triton or CUDA
program is a job of its kind, sent to the Celery queue of that kind when a connected
worker offers it; when none does, its page says which capability is missing and shows
the outcome recorded on a GPU (fixtures/triton_cuda/h100_outcomes.json), with the GPU
and the date. The GPU task itself runs the program in the sandbox (here without a GPU)."""

from __future__ import annotations

import base64
import io
import shutil
from datetime import timedelta
from unittest import mock

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import TestCase
from django.utils import timezone

from kernels import replay, tasks, workers
from kernels.jobs import Job, job_for, with_files
from kernels.models import Run, Worker
from sessions.models import Session
from sessions.programs import Kernel, KernelVersion
from tests.sessions.importing import TRANSCRIPTS
from tests.sessions.transcripts.build import program

pytestmark = pytest.mark.usefixtures("fresh_replay_backend")


def version_of(kernel: str, number: int) -> KernelVersion:
    return KernelVersion.objects.get(kernel__name=kernel, number=number)


def page_of(version: KernelVersion) -> str:
    assert version.turn is not None
    return f"/s/{version.kernel.session.slug}/turns/{version.turn.number}/replay/"


def import_gpu_session() -> None:
    """The Triton and CUDA transcript of tests/sessions/transcripts, as a public session."""
    call_command(
        "import_transcript",
        str(TRANSCRIPTS / "triton-cuda.jsonl"),
        "--visibility",
        "public",
        stdout=io.StringIO(),
    )


class GpuJobTestCase(TestCase):
    def setUp(self) -> None:
        import_gpu_session()

    def test_a_version_replays_its_states_program(self) -> None:
        job = with_files(job_for(version_of("add_relu-add_relu_kernel", 1)))
        self.assertEqual((job.payload["kind"], job.payload["entry"]), ("triton", "add_relu.py"))
        script = base64.b64decode(job.payload["files"]["add_relu.py"]).decode()
        self.assertEqual(script, program("add_relu_v1"))
        naive = with_files(job_for(version_of("matmul-matmul_naive", 2)))
        self.assertEqual((naive.payload["kind"], naive.payload["entry"]), ("cuda", "matmul.py"))
        # A version's job is its state's: the benchmark's state is another run.
        self.assertNotEqual(
            job_for(version_of("add_relu-add_relu_kernel", 2)).source_sha256,
            job_for(version_of("add_relu-add_relu_kernel", 3)).source_sha256,
        )

    def test_without_a_worker_the_page_says_what_is_missing(self) -> None:
        response = self.client.get(page_of(version_of("add_relu-add_relu_kernel", 1)))
        self.assertContains(response, "No connected replay worker offers Triton (an NVIDIA GPU")
        self.assertNotContains(response, "try again by itself")
        self.assertEqual(Run.objects.count(), 0)
        response = self.client.get(page_of(version_of("matmul-matmul_naive", 1)))
        self.assertContains(response, "offers CUDA (an NVIDIA GPU with CUDA")

    def test_the_recorded_outcomes_show_with_their_gpu_and_date(self) -> None:
        out = io.StringIO()
        call_command("record_gpu_outcomes", stdout=out)
        # Six versions of add_relu and the matmuls, and the scale.cu state's matmul v3 run
        # is the tiled kernel's too (one run per program).
        self.assertIn("Stored ", out.getvalue())
        unmasked = self.client.get(page_of(version_of("add_relu-add_relu_kernel", 1)))
        self.assertContains(unmasked, "recorded on <strong>NVIDIA H100 80GB HBM3</strong>")
        self.assertContains(unmasked, "Invalid __global__ write of size 16 bytes")
        self.assertContains(unmasked, "<code>add_relu_kernel</code>")
        self.assertContains(unmasked, "add_relu matches torch.relu(x + y) for 98432 elements")
        masked = self.client.get(page_of(version_of("add_relu-add_relu_kernel", 2)))
        self.assertContains(masked, "found no out-of-bounds access")
        benchmarked = self.client.get(page_of(version_of("add_relu-add_relu_kernel", 3)))
        self.assertContains(benchmarked, "1.6x faster than PyTorch on the same GPU")
        # Each kernel's own time beside its launches: the median of those after the first.
        self.assertContains(benchmarked, '0.0992 ms <span class="muted small">median of 20</span>')
        self.assertContains(benchmarked, '<td><span class="muted">not timed</span></td>')
        self.assertContains(benchmarked, "with CUDA events")
        # The program's own copies are not timed apart: no "Uploads 0 µs" is claimed.
        self.assertNotContains(benchmarked, "Uploads")
        unguarded = self.client.get(page_of(version_of("matmul-matmul_naive", 1)))
        self.assertContains(unguarded, "Invalid __global__ read of size 4 bytes")
        self.assertContains(unguarded, "A check failed at matmul.py line 34")
        (tiled,) = Kernel.objects.get(name="matmul-matmul_tiled").versions.all()
        self.assertContains(self.client.get(page_of(tiled)), "<caption>Kernel launches</caption>")
        # Recorded once: a second load stores nothing more.
        call_command("record_gpu_outcomes", stdout=out)
        self.assertIn("Stored 0 recorded GPU run(s).", out.getvalue())

    def test_a_worker_that_offers_the_kind_gets_the_job_on_its_queue(self) -> None:
        with mock.patch("kernels.workers.shutil.which", return_value="/usr/bin/bwrap"):
            workers.announce("gpu-1@h100", ["triton", "cuda"], "NVIDIA H100 80GB HBM3")
        version = version_of("add_relu-add_relu_kernel", 2)
        with mock.patch.object(tasks.run_gpu_replay, "apply_async") as sent:
            response = self.client.get(page_of(version))
        self.assertNotContains(response, "No connected replay worker")
        (call,) = sent.call_args_list
        run_id, _key, payload = call.args[0]
        self.assertEqual(call.kwargs["queue"], "triton")
        self.assertEqual(payload["entry"], "add_relu.py")
        self.assertIn("add_relu.py", payload["files"])
        self.assertEqual(Run.objects.get(pk=run_id).state, Run.State.QUEUED)
        # A worker not heard from for too long is gone.
        Worker.objects.update(seen=timezone.now() - timedelta(hours=1))
        response = self.client.get(page_of(version_of("add_relu-add_relu_kernel", 1)))
        self.assertContains(response, "No connected replay worker offers Triton")


class WorkerCapabilityTestCase(TestCase):
    def test_staff_see_the_workers_and_what_they_offer(self) -> None:
        with mock.patch("kernels.workers.shutil.which", return_value="/usr/bin/bwrap"):
            workers.announce("gpu0@h100", ["triton", "cuda"], "NVIDIA H100 80GB HBM3")
        self.assertNotIn("replay", self.client.get("/healthz").json())
        user = get_user_model().objects.create_user("staff", password="pw", is_staff=True)
        self.client.force_login(user)
        (worker,) = self.client.get("/healthz").json()["replay"]["workers"]
        self.assertEqual(
            (worker["name"], worker["capabilities"], worker["gpu"]),
            ("gpu0@h100", ["triton", "cuda"], "NVIDIA H100 80GB HBM3"),
        )

    def test_what_a_worker_offers(self) -> None:
        with mock.patch("kernels.workers.shutil.which", return_value="/usr/bin/bwrap"):
            self.assertEqual(workers.offered(["replay"], ""), ["webgpu"])
            self.assertEqual(workers.offered(["cuda", "triton"], "H100"), ["cuda", "triton"])
            # Without a GPU, a GPU queue is not offered.
            self.assertEqual(workers.offered(["replay", "cuda"], ""), ["webgpu"])
        with mock.patch("kernels.workers.shutil.which", return_value=None):
            self.assertEqual(workers.offered(["cuda"], "H100"), [])  # no sandbox, no runs
        worker = workers.announce("w1", ["replay"], "")
        self.assertEqual(Worker.objects.offering("webgpu"), [worker])
        workers.withdraw("w1")
        self.assertFalse(Worker.objects.exists())


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
class GpuTaskTestCase(TestCase):
    def test_the_task_runs_the_program_in_the_sandbox_and_stores_it(self) -> None:
        source = "print('ran in', __import__('os').getcwd())\nassert 1 == 2, 'differs'\n"
        payload = {
            "kind": "triton",
            "entry": "main.py",
            "files": {"main.py": base64.b64encode(source.encode()).decode()},
            "deadline_s": 10,
            "python": "python3",
        }
        run = Run.objects.create(source_sha256="s", harness_digest="h", environment_id="")
        tasks.run_gpu_replay(run.pk, "key", payload)
        run.refresh_from_db()
        self.assertEqual((run.state, run.status), (Run.State.DONE, "mismatch"))
        self.assertEqual(run.outcome["gpu"]["stdout"], "ran in /work/project\n")
        self.assertEqual(run.outcome["message"], "A check failed at main.py line 2: differs")
        self.assertEqual(replay.missing_capability(job_for_payload(payload)), "")


def job_for_payload(payload: dict) -> Job:
    Worker.objects.create(name="g", capabilities=["triton"])
    return Job("s", "h", payload)


class GpuShowcaseTestCase(TestCase):
    def test_the_second_showcase_shows_its_h100_runs_without_a_gpu(self) -> None:
        out = io.StringIO()
        call_command("load_gpu_showcase", stdout=out)
        self.assertIn("Stored 7 recorded GPU run(s).", out.getvalue())
        session = Session.objects.get(slug="triton-and-cuda-with-claude")
        self.assertEqual(session.title, "Triton and CUDA with Claude")
        self.assertEqual(session.source, Session.Source.FIXTURE)
        self.assertContains(self.client.get("/"), "Triton and CUDA with Claude")
        timeline = self.client.get(f"/s/{session.slug}/kernels/add_relu-add_relu_kernel/")
        self.assertContains(timeline, "replays the program it was written in")
        self.assertNotContains(timeline, "no harness yet")
        self.assertContains(timeline, "0.0727 ms")
        page = self.client.get(page_of(version_of("add_relu-add_relu_kernel", 3)))
        self.assertContains(page, "recorded on <strong>NVIDIA H100 80GB HBM3</strong> on ")
        # Loading again refreshes the session and keeps the runs.
        call_command("load_gpu_showcase", stdout=out)
        self.assertEqual(Session.objects.filter(slug=session.slug).count(), 1)
        self.assertEqual(Run.objects.count(), 7)
