"""A run's speed on its replay page, its embed and replay.json, through URLs: measured on
llvmpipe (labelled as CPU emulation, no speed-up claimed), and with a GPU's figures
injected into the stored outcome (the headline, the speed-up, the roofline)."""

from __future__ import annotations

from datetime import timedelta
from typing import cast

import pytest
from django.conf import settings
from django.test import TransactionTestCase
from django.utils import timezone

from kernels import finishing
from kernels.engine.outcome import Outcome
from kernels.models import Run
from kernels.trace_pictures import MAX_SHOWN_PASSES
from sessions.programs import KernelVersion
from tests.base import BaseTestCase, add_kernel, make_session, store_run
from tests.kernels.test_replay_views import finished

pytestmark = pytest.mark.usefixtures("fresh_replay_backend")

H100 = "NVIDIA H100 80GB HBM3 via Vulkan"


def on_a_gpu(outcome: dict) -> dict:
    """The outcome as an H100 worker would have stored it (figures made up, not timings)."""
    outcome["environment"] = {**outcome["environment"], "software": False, "label": H100}
    outcome["passes"][0].update(gpu_ms=0.5, bytes=1_000_000_000)
    peaks = {"bandwidth_gbs": 4000.0, "fma_gflops": 50000.0, "clock": "timestamp-query"}
    outcome["speed"] = {
        **outcome["speed"],
        "adapter": H100,
        "emulated": False,
        "gpu_ms": 0.5,
        "peaks": peaks,
        "reference": {"name": "numpy add", "ms": 1.55, "speedup": 3.1},
    }
    return outcome


class SpeedPageTests(TransactionTestCase):
    def setUp(self) -> None:
        self.session = make_session("demo", turns=4)
        self.version = add_kernel(self.session, turn=2)

    def test_replay_json_carries_each_pass_time_and_the_speed_report(self) -> None:
        outcome = finished(self.client, "/s/demo/turns/2/replay.json")["outcome"]

        (record,) = outcome["passes"]
        self.assertIsInstance(record["gpu_ms"], float)
        self.assertEqual(record["bytes"], 3 * 512)
        speed = outcome["speed"]
        self.assertEqual(speed["clock"], "timestamp-query")
        self.assertTrue(speed["emulated"])
        self.assertIn("llvmpipe", speed["adapter"])
        self.assertEqual(speed["reference"]["name"], "numpy add")

    def test_on_llvmpipe_the_page_says_emulation_and_claims_no_speed_up(self) -> None:
        finished(self.client, "/s/demo/turns/2/replay.json")
        r = self.client.get("/s/demo/turns/2/replay/")

        self.assertContains(r, "of CPU emulation (not a GPU&#x27;s speed)")
        self.assertContains(r, "emulates a GPU on the CPU")
        self.assertContains(r, "Uploads ")  # a WebGPU run's copies, timed by the wall clock
        self.assertContains(r, "emulated time")
        self.assertNotContains(r, "faster than")
        self.assertNotContains(r, "slower than")

    def test_a_gpu_run_shows_its_time_speed_up_and_share_of_peak(self) -> None:
        finished(self.client, "/s/demo/turns/2/replay.json")
        run = Run.objects.get()
        run.outcome = on_a_gpu(run.outcome)
        run.save(update_fields=["outcome"])

        r = self.client.get("/s/demo/turns/2/replay/")
        self.assertContains(r, "0.5 ms on the GPU, 3.1x faster than numpy add")
        self.assertContains(r, f"Timed by <strong>{H100}</strong> itself")
        self.assertContains(r, "<td>1,000,000,000</td>", html=True)  # the bytes bound
        # 1 GB in 0.5 ms is 2,000 GB/s: half the measured 4,000.
        self.assertContains(r, "<td>50%</td>", html=True)
        self.assertContains(r, "This GPU&#x27;s roofs, as the worker measured them")
        self.assertNotContains(r, "CPU emulation")

        embed = self.client.get("/s/demo/embed/?from=1&to=3")
        self.assertContains(embed, "0.5 ms on the GPU, 3.1x faster than numpy add")

    def test_a_run_on_a_cuda_gpu_is_compared_with_pytorch_there_first_then_numpy(self) -> None:
        finished(self.client, "/s/demo/turns/2/replay.json")
        run = Run.objects.get()
        run.outcome = on_a_gpu(run.outcome)
        run.outcome["speed"]["gpu_reference"] = {
            "name": "PyTorch add",
            "ms": 0.2,
            "runs": 20,
            "where": "NVIDIA H100 80GB HBM3",
            "speedup": 0.4,
        }
        run.save(update_fields=["outcome"])

        r = self.client.get("/s/demo/turns/2/replay/")
        headline = "0.5 ms on the GPU, 2.5x slower than PyTorch add on NVIDIA H100 80GB HBM3"
        self.assertContains(r, headline)
        self.assertContains(
            r,
            "The reference, PyTorch add, took 0.200 ms on NVIDIA H100 80GB HBM3 (median of 20 "
            "runs, each between two CUDA events): this version is 2.5x slower than PyTorch add",
        )
        self.assertContains(
            r,
            "Numpy add took 1.550 ms on this machine&#x27;s CPU: this version is 3.1x "
            "faster than numpy add on this machine&#x27;s CPU.",
        )
        embed = self.client.get("/s/demo/embed/?from=1&to=3")
        self.assertContains(embed, headline)

    def test_a_run_made_while_pytorch_loaded_says_so_and_the_next_view_runs_it_again(
        self,
    ) -> None:
        first = finished(self.client, "/s/demo/turns/2/replay.json")["run"]["id"]
        outcome = on_a_gpu(Run.objects.get().outcome)
        outcome["speed"]["gpu_reference_loading"] = True
        # Stored as a worker's outcome is, by finishing.finish: not standing in for later runs.
        Run.objects.filter(pk=first).update(state=Run.State.RUNNING)
        finishing.finish(first, cast(Outcome, outcome))
        self.assertFalse(Run.objects.get().cacheable)

        r = self.client.get("/s/demo/turns/2/replay/")
        self.assertContains(r, "0.5 ms on the GPU, 3.1x faster than numpy add")
        self.assertContains(r, "PyTorch was still loading on this worker")

        later = timezone.now() - timedelta(seconds=settings.REPLAY_RETRY_AFTER + 1)
        Run.objects.filter(pk=first).update(finished=later)
        again = finished(self.client, "/s/demo/turns/2/replay.json")
        self.assertNotEqual(again["run"]["id"], first)
        self.assertNotIn("gpu_reference_loading", again["outcome"]["speed"])

    def test_copies_timed_by_nothing_are_not_claimed_to_take_no_time(self) -> None:
        finished(self.client, "/s/demo/turns/2/replay.json")
        run = Run.objects.get()
        # A CUDA-events run stored before its speed said null (0 where nothing timed them).
        run.outcome = on_a_gpu(run.outcome)
        run.outcome["speed"].update(clock="cuda-events", upload_ms=0.0, readback_ms=0.0)
        run.save(update_fields=["outcome"])

        r = self.client.get("/s/demo/turns/2/replay/")
        self.assertContains(r, "0.5 ms on the GPU")
        self.assertNotContains(r, "Uploads ")

    def test_a_run_of_many_passes_lists_the_first_and_counts_the_rest(self) -> None:
        finished(self.client, "/s/demo/turns/2/replay.json")
        run = Run.objects.get()
        outcome = on_a_gpu(run.outcome)
        first = outcome["passes"][0]
        outcome["passes"] = [
            {**first, "number": n, "name": f"pass {n}"} for n in range(1, MAX_SHOWN_PASSES + 7)
        ]
        run.outcome = outcome
        run.save(update_fields=["outcome"])

        r = self.client.get("/s/demo/turns/2/replay/")
        self.assertContains(r, f'<th scope="row">pass {MAX_SHOWN_PASSES}</th>', html=True)
        self.assertNotContains(r, f"pass {MAX_SHOWN_PASSES + 1}</th>")
        self.assertContains(r, "And 6 more passes: replay.json lists every one.")
        answer = self.client.get("/s/demo/turns/2/replay.json").json()
        self.assertEqual(len(answer["outcome"]["passes"]), MAX_SHOWN_PASSES + 6)

    def test_a_run_without_a_clock_says_why(self) -> None:
        finished(self.client, "/s/demo/turns/2/replay.json")
        run = Run.objects.get()
        run.outcome["passes"][0]["gpu_ms"] = None
        run.outcome["speed"].update(
            clock="none", gpu_ms=None, problem="Some GPU cannot time passes."
        )
        run.save(update_fields=["outcome"])

        r = self.client.get("/s/demo/turns/2/replay/")
        self.assertContains(r, "Some GPU cannot time passes.")
        self.assertNotContains(r, "speed-passes")  # no figures to put in a table
        self.assertNotContains(r, "speed-pill")


def timed_run(version, gpu_ms: float, adapter: str = H100, emulated: bool = False, **more):
    speed = {
        "clock": "timestamp-query",
        "adapter": adapter,
        "emulated": emulated,
        "repeats": 5,
        "gpu_ms": gpu_ms,
        "upload_ms": 0.1,
        "readback_ms": 0.1,
        "problem": "",
        **more,
    }
    passes = [{"number": 1, "name": "pass 1", "line": 3, "dispatches": 1, "gpu_ms": gpu_ms}]
    return store_run(version, "passed", speed=speed, passes=passes)


class SpeedAcrossVersionsTests(BaseTestCase):
    """Times injected into stored runs: the ordering and the words, not a measurement."""

    def setUp(self) -> None:
        super().setUp()
        self.session = make_session("demo", turns=8)
        first = add_kernel(self.session, turn=2)
        self.versions = [first]
        for number, turn in ((2, 4), (3, 6)):
            reviewed = self.session.turns.get(number=turn)
            version = KernelVersion.objects.create(
                kernel=first.kernel,
                number=number,
                source=first.source + f"// v{number}\n",
                turn=reviewed,
            )
            reviewed.kernel_version = version
            reviewed.save()
            self.versions.append(version)

    def test_each_version_shows_its_time_and_change_and_a_slower_one_is_a_regression(self) -> None:
        timed_run(self.versions[0], 3.1)
        timed_run(self.versions[1], 1.0)  # 3.1x faster than v1
        timed_run(self.versions[2], 2.0)  # 2x slower than v2: a regression

        r = self.client.get("/s/demo/kernels/add/")
        self.assertContains(r, "1 ms: 3.1x faster than v1")
        self.assertContains(r, "2 ms: 2x slower than v2 (slower: a speed regression)")
        self.assertContains(r, "speed-pill regression", count=1)
        self.assertContains(r, f"its passes' time on the device, measured on {H100}", count=3)

        page = self.client.get("/s/demo/turns/4/replay/")
        self.assertContains(page, "this version: 3.1x faster than v1")
        page = self.client.get("/s/demo/turns/6/replay/")
        self.assertContains(page, "this version: 2x slower than v2 (a speed regression)")

    def test_versions_timed_on_different_adapters_are_not_compared(self) -> None:
        timed_run(self.versions[0], 3.1, adapter="llvmpipe via Vulkan", emulated=True)
        timed_run(self.versions[1], 1.0)

        r = self.client.get("/s/demo/kernels/add/")
        self.assertNotContains(r, "faster than")
        self.assertContains(r, "3.1 ms")

    def test_a_change_measured_on_llvmpipe_says_it_is_emulation(self) -> None:
        timed_run(self.versions[0], 3.1, adapter="llvmpipe via Vulkan", emulated=True)
        timed_run(self.versions[1], 1.0, adapter="llvmpipe via Vulkan", emulated=True)

        r = self.client.get("/s/demo/kernels/add/")
        self.assertContains(r, "3.1x faster than v1 (CPU emulation)")

    def test_programs_are_compared_by_their_time_from_first_submit_to_last_readback(self) -> None:
        timed_run(self.versions[0], 0.5)  # a harness run: its passes' time
        timed_run(self.versions[1], 0.19, program_ms=1.2)  # read back after every kernel
        timed_run(self.versions[2], 0.19, program_ms=0.4)  # chained: the same passes

        r = self.client.get("/s/demo/kernels/add/")
        self.assertContains(r, "0.4 ms submit to readback: 3x faster than v2")
        # A program and a harness run are not compared.
        self.assertContains(r, "1.2 ms submit to readback</span>")
        page = self.client.get("/s/demo/turns/6/replay/")
        self.assertContains(
            page, "From the program's first submit to the end of its last readback: 0.4 ms"
        )
