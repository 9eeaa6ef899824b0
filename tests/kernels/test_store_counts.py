"""The host panel counts what each invocation stored when a dispatch and its output differ
in size: the run dispatches the pass once more on a copy of its kernel that counts
(kernels/engine/store_counts.py). Real wgpu (llvmpipe here), through the pool and URLs."""

from __future__ import annotations

import pytest
from django.test import TransactionTestCase

from kernels.engine.store_counts import instrument
from sessions.programs import Kernel, KernelVersion
from tests.base import make_session
from tests.kernels.test_replay_views import finished

SHOWCASE = "/s/gpu-inference-from-scratch"
UNTOLD = "the trace does not tell"

# One invocation per element of 1,000, dispatched as 16 workgroups of 64.
ONE_EACH_WGSL = """
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x >= arrayLength(&y)) {
        return;
    }
    y[id.x] = 2.0 * x[id.x];
}
"""
ONE_EACH_HARNESS = {
    "entry_point": "main",
    "buffers": {
        "x": {
            "usage": "read",
            "dtype": "f32",
            "shape": [1000],
            "random": {"seed": 1, "low": -1, "high": 1},
        },
        "y": {"usage": "read_write", "dtype": "f32", "shape": [1000], "output": True},
    },
    "passes": [{"kernel": "self", "bind": {"0": "x", "1": "y"}, "dispatch": [16]}],
}
# The same kernel, storing through a pointer: not counted, the panel keeps its words.
THROUGH_POINTER_WGSL = ONE_EACH_WGSL.replace(
    "y[id.x] = 2.0 * x[id.x];", "let cell = &y[id.x];\n    *cell = 2.0 * x[id.x];"
)


def harness_version(session, source: str) -> KernelVersion:
    kernel = Kernel.objects.create(session=session, name="double", harness=ONE_EACH_HARNESS)
    turn = session.turns.get(number=2)
    version = KernelVersion.objects.create(kernel=kernel, number=1, source=source, turn=turn)
    turn.kernel_version = version
    turn.save()
    return version


def dispatch_note(page: str) -> str:
    start = page.index('<span class="coverage')
    return page[start : page.index("</span>", page.index("</code>", start))]


@pytest.mark.usefixtures("fresh_replay_backend")
class ShowcaseSoftmaxTests(TransactionTestCase):
    def setUp(self) -> None:
        from django.core.management import call_command

        call_command("load_showcase", verbosity=0)

    def turn_of(self, number: int) -> int:
        version = KernelVersion.objects.get(kernel__name="softmax", number=number)
        return version.turn.number

    def test_one_invocation_a_row_is_counted_as_8_writers_and_504_idle(self) -> None:
        turn = self.turn_of(2)
        outcome = finished(self.client, f"{SHOWCASE}/turns/{turn}/replay.json")["outcome"]

        self.assertEqual(outcome["status"], "passed")
        self.assertEqual(
            outcome["store_counts"],
            [{"pass": 1, "buffer": "y", "stores": [[256, 8], [0, 504]], "others": 0}],
        )
        page = self.client.get(f"{SHOWCASE}/turns/{turn}/replay/").content.decode()
        note = dispatch_note(page)
        self.assertIn("8 invocations store 256 values each; 504 store none", note)
        self.assertNotIn(UNTOLD, page)

    def test_a_workgroup_a_row_is_counted_as_every_invocation_storing_4(self) -> None:
        turn = self.turn_of(4)
        outcome = finished(self.client, f"{SHOWCASE}/turns/{turn}/replay.json")["outcome"]

        self.assertEqual(outcome["store_counts"][0]["stores"], [[4, 512]])
        page = self.client.get(f"{SHOWCASE}/turns/{turn}/replay/").content.decode()
        self.assertIn("512 invocations store 4 values each", dispatch_note(page))


@pytest.mark.usefixtures("fresh_replay_backend")
class OneEachTests(TransactionTestCase):
    def setUp(self) -> None:
        self.session = make_session("counts", turns=2)

    def test_one_value_an_invocation_and_the_spare_invocations_are_counted(self) -> None:
        harness_version(self.session, ONE_EACH_WGSL)

        outcome = finished(self.client, "/s/counts/turns/2/replay.json")["outcome"]

        self.assertEqual(outcome["store_counts"][0]["stores"], [[1, 1000], [0, 24]])
        page = self.client.get("/s/counts/turns/2/replay/").content.decode()
        self.assertIn("1,000 invocations store 1 value each; 24 store none", dispatch_note(page))

    def test_a_store_through_a_pointer_is_not_counted_and_the_run_is_the_same(self) -> None:
        harness_version(self.session, THROUGH_POINTER_WGSL)

        outcome = finished(self.client, "/s/counts/turns/2/replay.json")["outcome"]

        self.assertEqual(outcome["status"], "no_reference")
        self.assertNotIn("store_counts", outcome)
        page = self.client.get("/s/counts/turns/2/replay/").content.decode()
        self.assertNotIn("store none", page)


def test_what_cannot_be_counted_for_sure_is_not_instrumented() -> None:
    grid = (1024, 1, 1)
    assert instrument(ONE_EACH_WGSL, "main", (0, 1), grid, {0}) is not None
    refused = {
        "a pointer": THROUGH_POINTER_WGSL,
        "a helper function": ONE_EACH_WGSL.replace(
            "fn main", "fn put(i: u32) { y[i] = 1.0; }\n@compute @workgroup_size(64)\nfn main"
        ).replace("@compute @workgroup_size(64)\n\n", "", 1),
        "a for-loop header": ONE_EACH_WGSL.replace(
            "y[id.x] = 2.0 * x[id.x];", "for (var i = 0u; i < 1u; y[id.x] = 1.0) { }"
        ),
        "a shadowing name": ONE_EACH_WGSL.replace(
            "y[id.x] = 2.0 * x[id.x];", "{ var y = 1.0; y = 2.0; }"
        ),
    }
    for why, source in refused.items():
        assert instrument(source, "main", (0, 1), grid, {0}) is None, why
    every_group = ONE_EACH_WGSL + "".join(
        f"@group({g}) @binding(0) var<storage, read> g{g}: array<f32>;\n" for g in (1, 2, 3)
    )
    assert instrument(every_group, "main", (0, 1), grid, {0}) is None
    assert instrument(ONE_EACH_WGSL, "main", (0, 1), (1 << 21, 1, 1), {0}) is None


def test_the_counter_follows_each_store_and_takes_the_first_free_group() -> None:
    counted = instrument(ONE_EACH_WGSL, "main", (0, 1), (1024, 1, 1), {0})

    assert counted is not None and counted.group == 1 and counted.invocations == 1024
    assert (
        "y[id.x] = 2.0 * x[id.x]; atomicAdd(&_kb_store_counts[id.x + 1024u * (id.y + 1u * "
        "id.z)], 1u);" in counted.source
    )
    assert counted.source.rstrip().endswith(
        "@group(1) @binding(0) var<storage, read_write> _kb_store_counts: array<atomic<u32>>;"
    )
