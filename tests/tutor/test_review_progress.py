"""The automatic reviewer on the lessons' own bugs: every claim it makes is one the run's
data bears out, races on workgroup memory are named from the kernel itself, and each
version is told what it changed and fixed, which objectives it met, never the same
reply twice. Real lessons (fixtures/lessons), real runs on wgpu."""

from __future__ import annotations

import json
import re
from pathlib import Path

from django.conf import settings
from django.test import override_settings
from django.urls import reverse

from sessions.models import Turn
from tests.tutor.helpers import FakeAPI, TutorRunTestCase, read_events

LESSONS = Path(settings.BASE_DIR) / "fixtures" / "lessons"

SOFTMAX_HEAD = """struct Params {
    rows: u32,
    cols: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

var<workgroup> scratch: array<f32, 64>;
"""


def softmax(barrier: str) -> str:
    """One workgroup per row, tree reductions in workgroup memory for the row's maximum
    and its sum, with `barrier` wherever one is needed."""
    return (
        SOFTMAX_HEAD
        + f"""
@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(local_invocation_id) local: vec3<u32>,
) {{
    let row = group.x;
    let lid = local.x;
    let base = row * params.cols;
    var m = -3.4e38;
    for (var c = lid; c < params.cols; c += 64u) {{
        m = max(m, x[base + c]);
    }}
    scratch[lid] = m;
    {barrier}
    for (var s = 32u; s > 0u; s = s / 2u) {{
        if (lid < s) {{
            scratch[lid] = max(scratch[lid], scratch[lid + s]);
        }}
        {barrier}
    }}
    let rmax = scratch[0];
    {barrier}
    var total = 0.0;
    for (var c = lid; c < params.cols; c += 64u) {{
        total += exp(x[base + c] - rmax);
    }}
    scratch[lid] = total;
    {barrier}
    for (var s = 32u; s > 0u; s = s / 2u) {{
        if (lid < s) {{
            scratch[lid] = scratch[lid] + scratch[lid + s];
        }}
        {barrier}
    }}
    let sum = scratch[0];
    for (var c = lid; c < params.cols; c += 64u) {{
        y[base + c] = exp(x[base + c] - rmax) / sum;
    }}
}}
"""
    )


ADD_HEAD = """@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
"""
ADD_NO_GUARD = ADD_HEAD + "    out[id.x] = a[id.x] + b[id.x];\n}\n"
ADD_GUARD = ADD_HEAD + (
    "    if (id.x >= arrayLength(&out)) { return; }\n    out[id.x] = a[id.x] + b[id.x];\n}\n"
)


def lesson_two_host(dispatch: str) -> str:
    """Lesson 2's host scaffold with the learner's dispatch where its TODO is."""
    plan = json.loads((LESSONS / "02-first-compute-shader.json").read_text())
    scaffold = plan["kernel"]["host_starter"]
    return scaffold.replace("pass.end();", f"pass.dispatchWorkgroups({dispatch});\npass.end();")


# Claims the reviewer used to make without checking them against the data.
UNCHECKED = re.compile(r"cells (after|before) it|never written|which cell does invocation", re.I)


@override_settings(TUTOR_LESSONS_DIR=LESSONS)
class ReviewProgressTestCase(TutorRunTestCase):
    def send(self, guided, source: str, host: str | None = None) -> Turn:
        fields = {"source": source}
        if host is not None:
            fields["host_program"] = host
        with FakeAPI().patch():
            read_events(
                self.client.post(
                    reverse("tutor:submit", args=[guided.session.slug]),
                    fields,
                    **self.stream_headers,
                )
            )
        review = guided.session.turns.order_by("number").last()
        self.assertEqual(review.meta["kind"], "review")
        return review

    def test_a_reduction_without_any_barrier_is_named_a_race(self) -> None:
        guided = self.start("softmax")
        review = self.send(guided, softmax(""))
        self.assertIn(review.kernel_version.turn.meta["run"]["status"], ("mismatch", "nonfinite"))
        text = review.content
        self.assertIn("**A race on workgroup memory.**", text)
        self.assertIn("`scratch[lid]` (line 24)", text)
        self.assertIn("`scratch[lid + s]` (line 28)", text)
        self.assertIn("workgroupBarrier()", text)
        self.assertNotRegex(text, UNCHECKED)
        # Its loops run a few times: llvmpipe's loop cap is not this kernel's problem.
        self.assertNotIn("65,535", text)
        # What it says of the rows is what the run shows: the counts add up to the total.
        counts = [int(n) for n in re.findall(r"row \d+: (\d+) of 256", text)]
        bad = re.search(r"(\d+) of 2,048 cells wrong", text)
        self.assertTrue(counts and bad)
        self.assertEqual(sum(counts), int(bad.group(1)))

    def test_barriers_end_the_race_and_the_objectives_are_marked_met(self) -> None:
        guided = self.start("softmax")
        self.send(guided, softmax(""))
        review = self.send(guided, softmax("workgroupBarrier();"))
        self.assertIn("**It passes:**", review.content)
        self.assertIn(
            "v2 changes 5 lines of the kernel from v1, and that fixes what v1's review pointed "
            "out: the race on workgroup memory.",
            review.content,
        )
        self.assertNotIn("**A race", review.content)
        self.assertIn("Every objective a run can show is now met.", review.content)
        page = self.client.get(reverse("tutor:session", args=[guided.session.slug]))
        # Two of the three: a run cannot show that the learner can explain the overflow.
        self.assertEqual(page.content.decode().count('<li class="met">'), 2)
        self.assertNotIn("Objective met: Explain", review.content)
        self.assertContains(page, "met in v2")

    def test_lesson_two_versions_are_told_apart_and_what_each_fixed(self) -> None:
        guided = self.start("first-compute-shader")
        floor = self.send(guided, ADD_NO_GUARD, lesson_two_host("Math.floor(n / 64)"))
        self.assertIn("dispatches 15 workgroups", floor.content)
        fixed_dispatch = self.send(guided, ADD_NO_GUARD, lesson_two_host("Math.ceil(n / 64)"))
        guarded = self.send(guided, ADD_GUARD, lesson_two_host("Math.ceil(n / 64)"))

        self.assertNotEqual(fixed_dispatch.content, guarded.content)
        # The dispatch fixed, the 24 extra invocations still store past the end: it passes
        # here only because llvmpipe drops those writes, and the review says so.
        self.assertIn("**It passes:**", fixed_dispatch.content)
        self.assertIn("that fixes what v1 failed on", fixed_dispatch.content)
        self.assertIn("**24 invocations past the end store into `out`.**", fixed_dispatch.content)
        self.assertIn("`out[id.x]` (line 7)", fixed_dispatch.content)
        # No hint about the dispatch already fixed.
        self.assertNotIn("how many workgroups", fixed_dispatch.content.lower())
        self.assertIn("Still to show: Size a dispatch", fixed_dispatch.content)

        self.assertIn(
            "v3 changes 1 line of the kernel from v2, and that fixes what v2's review pointed "
            "out: the invocations past the end that stored with nothing to stop them.",
            guarded.content,
        )
        self.assertNotIn("past the end store", guarded.content)
        self.assertIn("Objective met: Size a dispatch", guarded.content)
        self.assertIn("Objective met: Use arrayLength", guarded.content)
        self.assertNotRegex(guarded.content, UNCHECKED)

    def test_the_same_result_is_not_reviewed_word_for_word_twice(self) -> None:
        guided = self.start("first-compute-shader")
        host = lesson_two_host("Math.floor(n / 64)")
        first = self.send(guided, ADD_GUARD, host)
        again = self.send(guided, ADD_GUARD.replace("+ b[id.x]", "+ b[id.x] "), host)
        self.assertNotEqual(first.content, again.content)
        self.assertIn("but the run ends exactly as v1's did", again.content)
        self.assertIn(f"Everything else the review of v1 said (turn {first.number})", again.content)
        self.assertNotIn("dispatches 15 workgroups", again.content)

    def test_claude_is_told_the_progress(self) -> None:
        guided = self.start("first-compute-shader")
        self.send(guided, ADD_NO_GUARD, lesson_two_host("Math.ceil(n / 64)"))
        self.send(guided, ADD_GUARD, lesson_two_host("Math.ceil(n / 64)"))
        from tutor import prompts

        state = prompts.state_text(guided)
        self.assertIn("<progress>", state)
        self.assertIn("objective 2 (met by v2): Size a dispatch", state)
        self.assertIn("objective 1 (met by v1)", state)
        self.assertIn("since the previous version: v2 changes 1 line of the kernel", state)
