"""The roofline on a replay page, through URLs: the showcase's matmul v4 replayed for real
(llvmpipe) sits where its own figures put it against the axes and roofs drawn; passes
whose arithmetic is not counted are bars, not points; stored outcomes with forged figures
(NaN, 0, negative, huge, missing peaks: a fork's outcome is its program's) still render."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from django.test import TransactionTestCase

from kernels.models import Run
from kernels.speed_figures import speed_summary
from kernels.trace_pictures import MAX_SHOWN_PASSES
from tests.base import BaseTestCase, add_kernel, make_session, store_run
from tests.kernels.test_replay_views import finished

pytestmark = pytest.mark.usefixtures("fresh_replay_backend")

TICK = re.compile(
    r'<line class="grid" x1="([\d.]+)" y1="([\d.]+)" x2="([\d.]+)" y2="([\d.]+)"/>'
    r"<text[^>]*>([^<]+)</text>"
)
POINT = re.compile(r'<circle class="point" cx="([\d.]+)" cy="([\d.]+)" r="5"><title>([^<]*)')


def roofline_of(page: str) -> str:
    found = re.search(r'<svg class="roofline".*?</svg>', page, re.S)
    assert found, "no roofline on the page"
    return found.group(0)


def scale(svg: str) -> tuple:
    """Where the axes put 10^a and 10^b, read from the tick labels drawn: a function from
    a figure to its x (intensity) and one to its y (GFLOP/s), in the SVG's units."""
    across, up = [], []
    for x1, y1, x2, y2, label in TICK.findall(svg):
        value = float(label.replace(",", ""))
        if x1 == x2:
            across.append((math.log10(value), float(x1)))
        else:
            assert y1 == y2
            up.append((math.log10(value), float(y1)))
    assert len(across) >= 2 and len(up) >= 2, (across, up)

    def line(ticks: list) -> object:
        (a, pa), (b, pb) = ticks[0], ticks[-1]
        return lambda figure: pa + (math.log10(figure) - a) / (b - a) * (pb - pa)

    return line(across), line(up)


def shown(share: float) -> str:
    return f"{100 * share:.2g}%"


class ShowcaseRooflineTests(TransactionTestCase):
    def setUp(self) -> None:
        from sessions.importers.kernelbin import import_session
        from tests.kernels.test_showcase import DATA

        import_session(DATA)
        self.turns = f"/s/{DATA['session']['slug']}/turns"

    def test_matmul_v4_sits_where_its_figures_put_it(self) -> None:
        outcome = finished(self.client, f"{self.turns}/44/replay.json")["outcome"]
        (record,) = outcome["passes"]
        flops, moved, gpu_ms = record["flops"], record["bytes"], record["gpu_ms"]
        self.assertEqual(flops, 2 * 24 * 20 * 16)  # a 24x20 by 20x16 product, as counted
        peaks = outcome["speed"]["peaks"]
        bandwidth, peak = peaks["bandwidth_gbs"], peaks["fma_gflops"]

        page = self.client.get(f"{self.turns}/44/replay/").content.decode()
        svg = roofline_of(page)
        at_x, at_y = scale(svg)
        intensity = flops / moved
        attained = flops / (gpu_ms / 1000) / 1e9
        roof = min(bandwidth * intensity, peak)

        ((cx, cy, title),) = POINT.findall(svg)
        self.assertAlmostEqual(float(cx), at_x(intensity), delta=0.2)
        self.assertAlmostEqual(float(cy), at_y(attained), delta=0.2)
        self.assertIn(f"pass 1: {shown(attained / roof)} of the roof", svg)
        self.assertIn(f"{intensity:.3g} FLOP a byte, {attained:.3g} GFLOP/s", title)
        # The room left: from the point up to the roof at its intensity.
        room = re.search(
            r'<line class="room" x1="[\d.]+" y1="[\d.]+" x2="[\d.]+" y2="([\d.]+)"', svg
        )
        assert room
        self.assertAlmostEqual(float(room.group(1)), at_y(roof), delta=0.2)
        # The ridge, where bandwidth * intensity reaches the multiply-add rate.
        ridge = re.search(r'<circle class="ridge-point" cx="([\d.]+)" cy="([\d.]+)"', svg)
        assert ridge
        self.assertAlmostEqual(float(ridge.group(1)), at_x(peak / bandwidth), delta=0.2)
        self.assertAlmostEqual(float(ridge.group(2)), at_y(peak), delta=0.2)
        self.assertIn(f"{bandwidth:.3g} GB/s copying", svg)
        self.assertIn(f"{peak:.3g} GFLOP/s multiply-add", svg)
        # llvmpipe: the picture itself says whose roofs these are.
        self.assertIn("The CPU emulating a GPU: the emulator&#x27;s roofs, not a GPU&#x27;s", svg)
        self.assertNotIn("This GPU", svg)
        self.assertIn("The roof is the most this emulator measured", page)
        self.assertNotIn('class="bandwidth-bars"', page)  # its one pass is on the roofline

    def test_passes_whose_arithmetic_is_not_counted_are_bars_not_points(self) -> None:
        outcome = finished(self.client, f"{self.turns}/84/replay.json")["outcome"]  # forward v2
        self.assertEqual(len(outcome["passes"]), 3)
        self.assertFalse(any("flops" in p for p in outcome["passes"]))

        page = self.client.get(f"{self.turns}/84/replay/").content.decode()
        self.assertNotIn('class="roofline"', page)
        self.assertIn("No roofline: the passes' arithmetic is not counted", page)
        bars = re.findall(r'<rect class="bar"[^>]*><title>([^<]*)', page)
        self.assertEqual(len(bars), 3)
        bandwidth = outcome["speed"]["peaks"]["bandwidth_gbs"]
        for record, title in zip(outcome["passes"], bars, strict=True):
            share = record["bytes"] / (record["gpu_ms"] / 1000) / 1e9 / bandwidth
            self.assertEqual(
                title,
                f"{record['name']}: {shown(share)} of peak bandwidth; its arithmetic is not "
                "counted",
            )
        self.assertIn("this emulator measured copying", page)


H100 = "NVIDIA H100 80GB HBM3 via Vulkan"
PEAKS = {"bandwidth_gbs": 2842.0, "fma_gflops": 46813.0, "clock": "timestamp-query"}


def matmul_pass(number: int = 1, **figures) -> dict:
    """The showcase's matmul v4 as the H100 timed it (README's table)."""
    return {
        "number": number,
        "name": f"pass {number}",
        "line": 35,
        "dispatches": 1,
        "bytes": 4752,
        "gpu_ms": 0.0085,
        "flops": 15360,
        **figures,
    }


def gpu_speed(**figures) -> dict:
    return {
        "clock": "timestamp-query",
        "adapter": H100,
        "emulated": False,
        "repeats": 5,
        "gpu_ms": 0.0085,
        "upload_ms": 0.1,
        "readback_ms": 0.1,
        "problem": "",
        "peaks": dict(PEAKS),
        **figures,
    }


class StoredRooflineTests(BaseTestCase):
    """Figures injected into stored runs: what the picture does with them."""

    def setUp(self) -> None:
        super().setUp()
        self.version = add_kernel(make_session("demo", turns=4), turn=2)
        self.outcome: dict[str, Any] = {"speed": gpu_speed(), "passes": [matmul_pass()]}

    def page(self, **changes) -> str:
        """The replay page of a run stored with these keys of the outcome changed (a new
        run: a page shown once is kept for its run)."""
        Run.objects.all().delete()
        store_run(self.version, "passed", **{**self.outcome, **changes})
        r = self.client.get("/s/demo/turns/2/replay/")
        self.assertEqual(r.status_code, 200)
        return r.content.decode()

    def test_a_gpu_run_is_this_gpus_roofline_and_says_nothing_of_emulation(self) -> None:
        svg = roofline_of(self.page())
        self.assertIn("This GPU&#x27;s roofs, as the worker measured them", svg)
        self.assertIn("2,842 GB/s copying", svg)
        self.assertIn("46,813 GFLOP/s multiply-add", svg)
        self.assertNotIn("emulat", svg.lower())
        # 15,360 flops in 8.5 µs: 1.81 GFLOP/s; at 3.23 FLOP a byte the roof is 9,186.
        self.assertIn("pass 1: 0.02% of the roof", svg)
        self.assertIn("(9,186 GFLOP/s, a limit of memory)", svg)

    def test_a_pass_past_the_ridge_is_limited_by_arithmetic(self) -> None:
        heavy = matmul_pass(flops=2 * 1024**3, bytes=12_582_928, gpu_ms=0.879)
        svg = roofline_of(self.page(passes=[heavy]))
        # 171 FLOP a byte, past the ridge at 16.5: the roof there is the multiply-add rate.
        self.assertIn("(46,813 GFLOP/s, a limit of arithmetic)", svg)
        self.assertIn("pass 1: 5.2% of the roof", svg)

    def test_a_pass_without_counted_arithmetic_is_a_bar_beside_the_roofline(self) -> None:
        page = self.page(passes=[matmul_pass(), matmul_pass(2, flops=None)])
        self.assertEqual(len(POINT.findall(roofline_of(page))), 1)
        self.assertIn("These passes are not on the roofline", page)
        self.assertIn("pass 2: ", re.search(r'<rect class="bar".*?</rect>', page).group(0))

    def test_points_are_capped_like_the_table(self) -> None:
        passes = [matmul_pass(n) for n in range(1, MAX_SHOWN_PASSES + 7)]
        svg = roofline_of(self.page(passes=passes))
        self.assertEqual(len(POINT.findall(svg)), MAX_SHOWN_PASSES)

    def test_forged_figures_render_without_error_or_a_number_svg_cannot_read(self) -> None:
        passes = {
            "time 0": [matmul_pass(gpu_ms=0)],
            "time negative": [matmul_pass(gpu_ms=-1.0)],
            "time huge": [matmul_pass(gpu_ms=1e30)],
            "time tiny": [matmul_pass(gpu_ms=1e-300)],
            "time a string": [matmul_pass(gpu_ms="fast")],
            "flops negative": [matmul_pass(flops=-5)],
            "flops huge": [matmul_pass(flops=1e30)],
            "flops past a float": [matmul_pass(flops=10**400)],
            "flops true": [matmul_pass(flops=True)],
            "bytes 0": [matmul_pass(bytes=0)],
            "bytes huge": [matmul_pass(bytes=1e300, flops=1e-300)],
            "no name": [{k: v for k, v in matmul_pass().items() if k != "name"}],
            "a name of markup": [matmul_pass(name='<script>alert("x")</script>')],
            "no passes": [],
            "passes null": None,
        }
        speeds = {
            "peaks missing": gpu_speed(peaks=None),
            "peaks empty": gpu_speed(peaks={}),
            "peaks 0": gpu_speed(peaks={**PEAKS, "bandwidth_gbs": 0}),
            "peaks negative": gpu_speed(peaks={**PEAKS, "fma_gflops": -1}),
            "peaks huge": gpu_speed(peaks={**PEAKS, "bandwidth_gbs": 1e30}),
            "peaks tiny": gpu_speed(peaks={**PEAKS, "fma_gflops": 1e-30}),
            "peaks a list": gpu_speed(peaks=[1, 2]),
            "peaks apart": gpu_speed(peaks={**PEAKS, "bandwidth_gbs": 1e-300, "fma_gflops": 1e300}),
            "peaks far": gpu_speed(peaks={**PEAKS, "bandwidth_gbs": 1, "fma_gflops": 1e300}),
            "total negative": gpu_speed(gpu_ms=-3),
        }
        cases: list[tuple[str, dict[str, Any]]] = [
            (name, {"passes": p}) for name, p in passes.items()
        ]
        cases += [(name, {"speed": s}) for name, s in speeds.items()]
        for name, changes in cases:
            with self.subTest(name):
                readable(self, self.page(**changes))
        # A figure out of all proportion is drawn at the frame's edge, its title true.
        svg = roofline_of(self.page(passes=[matmul_pass(flops=1e30)]))
        ((cx, cy, title),) = POINT.findall(svg)
        self.assertIn("1.18e+26 GFLOP/s", title)
        frame = re.search(r'<rect class="frame" x="(\d+)" y="(\d+)" width="(\d+)"', svg)
        assert frame
        left, top, width = (int(n) for n in frame.groups())
        self.assertEqual(float(cx), left + width)
        self.assertEqual(float(cy), top)

    def test_not_a_number_is_never_drawn(self) -> None:
        """The database refuses an outcome holding NaN or infinity (its JSON would not be
        valid), so the section is asked directly, as a worker's outcome would be."""
        nan, inf = float("nan"), float("inf")
        forged: list[dict[str, Any]] = [
            {"passes": [matmul_pass(gpu_ms=nan)]},
            {"passes": [matmul_pass(flops=nan)]},
            {"passes": [matmul_pass(flops=inf, bytes=inf)]},
            {"speed": gpu_speed(peaks={**PEAKS, "fma_gflops": nan})},
            {"speed": gpu_speed(peaks={**PEAKS, "bandwidth_gbs": inf})},
            {"speed": gpu_speed(gpu_ms=nan)},
        ]
        for changes in forged:
            with self.subTest(changes):
                summary = speed_summary({**self.outcome, **changes})
                assert summary is not None
                readable(self, summary["headline"] + summary["roofline"] + summary["uncounted"])
                for row in summary["rows"]:
                    self.assertNotIn("nan", row["shown_ms"] + row["bandwidth_pct"])


def readable(test: BaseTestCase, page: str) -> None:
    """No SVG attribute holds NaN or infinity, no markup of a name got through, and no
    time reads as NaN."""
    for svg in re.findall(r"<svg.*?</svg>", page, re.S):
        test.assertIsNone(re.search(r'="[^"]*(nan|inf)[^"]*"', svg, re.I), svg)
        test.assertNotIn("<script>", svg)
    test.assertNotIn("nan ms", page)
    test.assertNotIn("inf ms", page)
