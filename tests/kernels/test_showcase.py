"""The showcase session "GPU inference from scratch" and its lesson plans.

Every kernel version replays on a real wgpu device (llvmpipe here) and must end with the
status the story says: each bug still reproduces, each fix still passes. A version with
Maya's host program (lessons 1, 2 and 7) replays as that program. Only the import test
and the replay pages need the database.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from django.test import TransactionTestCase

from kernels.engine.device import open_device
from kernels.engine.harness import parse_harness
from kernels.engine.host.program import run_program_job
from kernels.engine.outcome import Outcome, output_list
from kernels.engine.references import mlp_forward
from kernels.engine.run import execute
from tests.kernels.test_replay_views import finished

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures"
SHOWCASE = FIXTURES / "showcase" / "gpu-inference-from-scratch.json"
LESSONS = sorted((FIXTURES / "lessons").glob("[0-9][0-9]-*.json"))

DATA = json.loads(SHOWCASE.read_text(encoding="utf-8"))
KERNELS = {kernel["name"]: kernel for kernel in DATA["kernels"]}
VERSIONS = [(kernel, version) for kernel in DATA["kernels"] for version in kernel["versions"]]
PROGRAMS = [(kernel, version) for kernel, version in VERSIONS if version["host_program"]]
TURNS = {turn["number"]: turn for turn in DATA["turns"]}


def version_id(item: tuple[dict, dict]) -> str:
    kernel, version = item
    return f"{kernel['name']}-v{version['number']}-{version['expected_status']}"


def harness_of(kernel: dict, version: dict) -> dict:
    override = version["harness_override"]
    return override if override is not None else kernel["harness"]


def sources_for(kernel: dict, version: dict) -> dict[str, str]:
    """Mirrors kernels.jobs.sources_for: another kernel named by a pass runs as its
    latest version introduced at or before this version's turn."""
    sources = {"self": version["source"]}
    names = {p.get("kernel", "self") for p in harness_of(kernel, version)["passes"]} - {"self"}
    for name in sorted(names):
        others = sorted(KERNELS[name]["versions"], key=lambda v: -v["number"])
        earlier = [v for v in others if v["turn"] is not None and v["turn"] <= version["turn"]]
        sources[name] = (earlier or others)[0]["source"]
    return sources


@pytest.fixture(scope="module")
def gpu():
    return open_device()


@pytest.fixture(scope="module")
def run(gpu):
    device, env = gpu

    def run(sources: dict[str, str], harness: dict | None) -> Outcome:
        return execute(device, env, sources, harness, FIXTURES)

    return run


@pytest.fixture(scope="module")
def run_program(gpu):
    """A version's host program run as kernels.jobs.program_job sends it: the session's
    files, the version's WGSL under the names a program fetches, and its harness, whose
    numpy reference is fed with the inputs the program wrote."""
    device, env = gpu
    files = {file["name"]: file["data"] for file in DATA["files"]}

    def run_program(kernel: dict, version: dict) -> Outcome:
        wgsl = {"kernel.wgsl": version["source"], f"{kernel['name']}.wgsl": version["source"]}
        job = {
            "kind": "program",
            "source": version["host_program"],
            "files": files,
            "wgsl": wgsl,
            "harness": harness_of(kernel, version),
        }
        return run_program_job(device, env, job)

    return run_program


# -- the file ------------------------------------------------------------------------------


def test_the_committed_file_is_what_build_writes() -> None:
    spec = importlib.util.spec_from_file_location("showcase_build", SHOWCASE.parent / "build.py")
    build = importlib.util.module_from_spec(spec)
    # Registered before running: its dataclasses look their module up by name.
    sys.modules[spec.name] = build
    try:
        spec.loader.exec_module(build)
    finally:
        del sys.modules[spec.name]

    assert build.render() == SHOWCASE.read_text(encoding="utf-8"), (
        "fixtures/showcase/gpu-inference-from-scratch.json is stale: "
        "run .venv/bin/python fixtures/showcase/build.py"
    )


def test_it_replaces_the_old_seed() -> None:
    assert not (SHOWCASE.parent / "first-compute-shader.json").exists()


def test_the_story_links_every_version_to_its_turns() -> None:
    turns = {turn["number"]: turn for turn in DATA["turns"]}
    for kernel, version in VERSIONS:
        ref = {"name": kernel["name"], "version": version["number"]}
        submitting = turns[version["turn"]]
        assert submitting["role"] == "learner"
        assert submitting["kernel"] == ref
        assert f"```wgsl\n{version['source'].rstrip()}\n```" in submitting["content"]
        reviewing = [t for t in DATA["turns"] if t["kernel"] == ref and t["role"] == "tutor"]
        assert reviewing, f"{kernel['name']} v{version['number']} has no reviewing turn"
        assert all(t["number"] > version["turn"] for t in reviewing)
        assert version["note"]


def test_a_submission_shows_its_host_program_where_it_changed() -> None:
    shown = 0
    for kernel, version in PROGRAMS:
        earlier = [v for v in kernel["versions"] if v["number"] == version["number"] - 1]
        if earlier and earlier[0]["host_program"] == version["host_program"]:
            continue
        content = TURNS[version["turn"]]["content"]
        whole = f"```javascript\n{version['host_program'].rstrip()}\n```" in content
        changed = [line for line in version["host_program"].splitlines() if line.strip()]
        as_diff = "```diff\n" in content and any(f"\n+{line}\n" in content for line in changed)
        assert whole or as_diff, f"{kernel['name']} v{version['number']}"
        shown += 1
    # scale v1, add v1 and v2 (as a diff), forward v3 and v4 (as a diff), mnist v1
    assert shown == 6


def test_lessons_1_2_6_and_7_replay_the_learners_host_programs() -> None:
    lessons = {TURNS[version["turn"]]["meta"]["lesson"] for _, version in PROGRAMS}
    assert lessons == {1, 2, 6, 7}
    assert {kernel["name"] for kernel, _ in PROGRAMS} == {"scale", "add", "forward", "mnist"}
    for kernel, version in PROGRAMS:
        # The shader comes from the version's WGSL, which the replay serves by this name.
        assert f'fetch("{kernel["name"]}.wgsl")' in version["host_program"]


def test_the_files_are_the_fixture_arrays_the_programs_fetch() -> None:
    files = {file["name"]: base64.b64decode(file["data"]) for file in DATA["files"]}
    mnist = FIXTURES / "mnist"

    assert files["mnist/w1.bin"] == np.load(mnist / "w1.npy").astype("<f4").tobytes()
    digits = np.load(mnist / "test_images.npy")[:100]
    assert files["mnist/test_images.bin"] == digits.astype("<f4").tobytes()
    labels = np.load(mnist / "test_labels.npy")[:100]
    assert files["mnist/test_labels.bin"] == labels.astype("<u4").tobytes()
    # Every file is one a program loads, by a name in a string of its own.
    named = {
        name
        for _, version in PROGRAMS
        for name in re.findall(r'"([\w/]+\.bin)"', version["host_program"])
    }
    assert named == set(files)


def test_the_tutor_never_writes_the_learners_code() -> None:
    for turn in DATA["turns"]:
        if turn["role"] == "tutor":
            for fence in ("```wgsl", "```javascript", "```js", "```diff"):
                assert fence not in turn["content"], f"turn {turn['number']}"


# -- import --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_it_imports_as_a_public_fixture_session() -> None:
    from kernels.jobs import sources_for as replay_sources_for
    from sessions.importers.kernelbin import import_session
    from sessions.models import Session
    from sessions.programs import KernelVersion

    report = import_session(DATA, source=Session.Source.FIXTURE)
    session = report.session

    assert session.slug == "gpu-inference-from-scratch"
    assert session.visibility == Session.Visibility.PUBLIC
    assert session.learner == "Maya"
    assert session.tutor_model == ""
    assert report.turns >= 60
    dividers = session.turns.filter(role="system").order_by("number")
    assert [re.match(r"\*\*Lesson (\d)", t.content)[1] for t in dividers] == list("12345678")
    assert {t.meta["lesson"] for t in session.turns.all()} == set(range(1, 9))
    assert sorted(session.tags.values_list("name", flat=True)) == sorted(
        ["wgsl", "webgpu", "matmul", "softmax", "mnist", "beginner"]
    )

    versions = KernelVersion.objects.filter(kernel__session=session).select_related("kernel")
    assert versions.count() == len(VERSIONS)
    for version in versions:
        assert version.turn is not None and version.turn.role == "learner"
        assert version.turn.kernel_version == version
        reviewers = session.turns.filter(kernel_version=version, role="tutor")
        assert reviewers.filter(number__gt=version.turn.number).exists(), str(version)
        # The sources a replay would use are the ones this file's replays use.
        kernel = KERNELS[version.kernel.name]
        spec = next(v for v in kernel["versions"] if v["number"] == version.number)
        harness = parse_harness(version.harness)
        assert replay_sources_for(version, harness) == sources_for(kernel, spec)

    # Loading it again updates in place.
    again = import_session(DATA, source=Session.Source.FIXTURE)
    assert not again.created
    assert Session.objects.filter(slug=session.slug).count() == 1


# -- replay --------------------------------------------------------------------------------


@pytest.mark.parametrize("item", VERSIONS, ids=version_id)
def test_every_version_replays_with_its_expected_status(run, run_program, item) -> None:
    kernel, version = item
    if version["host_program"]:
        outcome = run_program(kernel, version)
    else:
        outcome = run(sources_for(kernel, version), harness_of(kernel, version))

    assert outcome["status"] == version["expected_status"], outcome["message"]


@pytest.mark.parametrize(
    "name, number", [("matmul", 3), ("softmax", 1), ("softmax", 3), ("forward", 1)]
)
def test_a_loop_bounded_by_the_uniform_the_harness_writes_is_not_blamed_on_llvmpipe(
    run, name, number
) -> None:
    """Their loops run dims.k (256), params.cols (784) times, and tree reductions halve
    a stride: none can reach llvmpipe's 65,535, so their wrong results are their own."""
    kernel = KERNELS[name]
    [version] = [v for v in kernel["versions"] if v["number"] == number]
    outcome = run(sources_for(kernel, version), harness_of(kernel, version))

    assert outcome["status"] == version["expected_status"], outcome["message"]
    assert "llvmpipe_loop_cap" not in [w["code"] for w in outcome["warnings"]]


def reviews_of(kernel: dict, version: dict) -> str:
    ref = {"name": kernel["name"], "version": version["number"]}
    return "\n".join(t["content"] for t in DATA["turns"] if t["kernel"] == ref)


# What each program prints, as the story quotes it in the turns about that version.
CONSOLE = [
    ("scale", 2, "y[0], y[1], y[255]: -256 -254 254"),
    ("add", 1, "out[999] = 0"),
    ("add", 2, "out[999] = 2997"),
    ("add", 2, "workgroups: 16"),
    ("forward", 3, "row 0: class 8, p = 0.242"),
    ("forward", 4, "row 0: class 8, p = 0.242"),
    ("mnist", 1, "right: 34 of 100"),
    ("mnist", 1, "answers for 0 to 9: 12 0 2 4 4 0 9 0 65 4"),
    ("mnist", 2, "right: 97 of 100"),
    ("mnist", 2, "10 10 12 9 6 8 15 10 9 11"),
]


@pytest.mark.parametrize(("name", "number", "text"), CONSOLE, ids=lambda v: str(v))
def test_the_story_quotes_what_the_program_printed(run_program, name, number, text) -> None:
    kernel = KERNELS[name]
    version = next(v for v in kernel["versions"] if v["number"] == number)

    outcome = run_program(kernel, version)

    printed = "\n".join(line["text"] for line in outcome["program"]["console"])
    assert text in printed
    assert text in reviews_of(kernel, version)


def test_lesson_6s_forward_pass_read_back_each_step_and_chained_are_both_timed(
    run_program,
) -> None:
    kernel = KERNELS["forward"]
    read_back, chained = (next(v for v in kernel["versions"] if v["number"] == n) for n in (3, 4))

    slow, fast = run_program(kernel, read_back), run_program(kernel, chained)

    assert slow["status"] == fast["status"] == "passed"
    assert slow["program"]["trace"]["submits"] == 3 and fast["program"]["trace"]["submits"] == 1
    assert [p["dispatches"] for p in slow["passes"]] == [1, 1, 1]
    assert [p["dispatches"] for p in fast["passes"]] == [3]
    for outcome in (slow, fast):  # measured, whatever the figures are
        assert outcome["speed"]["program_ms"] > 0
        assert all(p["gpu_ms"] is not None for p in outcome["passes"])


def test_lesson_1s_bind_group_does_not_fit_the_shader_and_the_story_quotes_why(
    run_program,
) -> None:
    kernel = KERNELS["scale"]
    first = kernel["versions"][0]
    program = first["host_program"].splitlines()

    error = run_program(kernel, first)["program"]["error"]

    assert (error["kind"], error["call"]) == ("webgpu", "device.createBindGroup")
    assert "device.createBindGroup" in program[error["line"] - 1]
    cause = error["message"].split(": ", 1)[1]
    assert cause.startswith("Number of bindings in bind group descriptor (2)")
    assert cause in reviews_of(kernel, first)
    assert f"line {error['line']} of your script" in reviews_of(kernel, first)


def test_lesson_2s_floor_leaves_960_to_999_never_written_and_ceil_fixes_it(run_program) -> None:
    kernel = KERNELS["add"]
    floor, ceil = kernel["versions"]
    assert "Math.floor(n / 64)" in floor["host_program"]
    assert "Math.ceil(n / 64)" in ceil["host_program"]
    assert floor["source"] != ceil["source"]  # and the kernel gains its guard

    wrong = run_program(kernel, floor)

    [dispatch] = wrong["program"]["trace"]["passes"][0]["dispatches"]
    assert dispatch["workgroups"][0] == 15
    [out] = wrong["outputs"]
    assert (out["bad"], out["unwritten"]) == (40, 40)
    assert [bad["index"] for bad in out["first_bad"]][:3] == [[960], [961], [962]]
    assert all(bad["kind"] == "unwritten" for bad in out["first_bad"])
    assert wrong["check"] == {"against": "reference", "name": "add", "problem": ""}


def classifier() -> tuple[dict, list[dict]]:
    """The kernel whose harness reports a classification, and its versions."""
    kernel = next(k for k in DATA["kernels"] if "report" in k["harness"])
    return kernel, sorted(kernel["versions"], key=lambda v: v["number"])


def test_the_final_forward_pass_classifies_the_test_digits_like_numpy(run) -> None:
    kernel, versions = classifier()
    final = versions[-1]
    outcome = run({"self": final["source"]}, kernel["harness"])

    assert outcome["status"] == "passed", outcome["message"]
    report = outcome["report"]
    assert report["count"] == 1000
    assert report["accuracy"] >= 0.95

    arrays = {
        name: np.load(FIXTURES / "mnist" / f"{name}.npy").astype(np.float64)
        for name in ("test_images", "w1", "b1", "w2", "b2")
    }
    probs = mlp_forward(*arrays.values())
    top2 = np.sort(probs, axis=1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 1e-3
    assert clear.sum() > 990
    predictions = np.array(report["predictions"])
    assert (predictions[clear] == probs.argmax(axis=1)[clear]).all()


def test_the_buggy_forward_pass_scores_lower_than_the_fixed_one(run) -> None:
    kernel, versions = classifier()
    accuracy = {}
    for version in versions:
        # Each under its own harness: v1 and v2 fix their batch at the 100 digits that
        # Maya's page loads, v3 classifies her drawings.
        outcome = run({"self": version["source"]}, harness_of(kernel, version))
        accuracy[version["number"]] = (outcome["status"], outcome["report"]["accuracy"])

    fixed = [acc for status, acc in accuracy.values() if status == "passed"]
    buggy = [acc for status, acc in accuracy.values() if status == "mismatch"]
    assert fixed and buggy, accuracy
    assert max(buggy) < min(fixed) - 0.1, accuracy


def ten_digit_cases() -> dict:
    """The classifier on one test digit at a time: ten cases, each a slice of the fixture
    files (the digit's 784 pixels and its label), hidden shown beside the output."""
    kernel, _ = classifier()
    harness = json.loads(json.dumps(kernel["harness"]))
    buffers = harness["buffers"]

    def digit(k: int) -> dict:
        return {
            "x": {"file": {"path": "mnist/test_images.npy", "offset": 4 * 784 * k, "count": 784}},
            "labels": {"file": {"path": "mnist/test_labels.npy", "offset": 4 * k, "count": 1}},
        }

    for name, fill in digit(0).items():
        buffers[name] = {**{k: v for k, v in buffers[name].items() if k != "file"}, **fill}
    buffers["x"]["shape"] = [1, 784]
    buffers["labels"]["shape"] = [1]
    for name, classes in (("hidden", 128), ("logits", 10), ("probs", 10)):
        buffers[name]["shape"] = [1, classes]
    for number, dispatch in enumerate(([16, 1], [2, 1], [1])):
        harness["passes"][number]["dispatch"] = dispatch
    harness["report"]["show"] = ["hidden"]
    harness["cases"] = {f"digit-{k}": {"buffers": digit(k)} for k in range(10)}
    return harness


def test_the_final_classifier_checks_ten_test_digits_one_case_each(run) -> None:
    _, versions = classifier()

    outcome = run({"self": versions[-1]["source"]}, ten_digit_cases())

    assert outcome["status"] == "passed", outcome["message"]
    assert outcome["message"] == "All 10 cases match the reference."
    labels = np.load(FIXTURES / "mnist" / "test_labels.npy")[:10]
    cases = outcome["cases"]
    assert [c["name"] for c in cases] == [f"digit-{k}" for k in range(10)]
    assert [c["report"]["labels_count"].index(1) for c in cases] == labels.tolist()
    assert sum(c["report"]["accuracy"] for c in cases) >= 9
    probs, hidden = outcome["outputs"]
    assert (probs["name"], hidden["name"], hidden["intermediate"]) == ("probs", "hidden", True)
    assert hidden["count"] == 128 and min(output_list(hidden, "got")) == 0.0  # after the ReLU


def test_a_buggy_classifier_fails_the_cases_it_gets_wrong(run) -> None:
    _, versions = classifier()
    buggy = next(v for v in versions if v["expected_status"] == "mismatch")

    outcome = run({"self": buggy["source"]}, ten_digit_cases())

    # The first case that fails is the one shown; most fail.
    passed = [c["name"] for c in outcome["cases"] if c["status"] == "passed"]
    assert outcome["status"] == "mismatch" and len(passed) < 5
    assert outcome["message"].startswith(f"{len(passed)} of 10 cases pass; case digit-0: ")


# -- replay pages --------------------------------------------------------------------------


@pytest.mark.usefixtures("fresh_replay_backend")
class HostBugPageTests(TransactionTestCase):
    """The host side of each host bug shows its cause on the version's replay page: in
    the learner's own program (lessons 1 and 2) or in the harness written out as the
    host code it stands for (lessons 3 and 6)."""

    def setUp(self) -> None:
        from sessions.importers.kernelbin import import_session

        import_session(DATA)

    def page(self, kernel: str, number: int):
        turn = next(v["turn"] for v in KERNELS[kernel]["versions"] if v["number"] == number)
        path = f"/s/{DATA['session']['slug']}/turns/{turn}/replay"
        outcome = finished(self.client, f"{path}.json")["outcome"]
        return outcome, self.client.get(f"{path}/")

    def test_scale_v1_names_the_line_whose_bind_group_does_not_fit(self) -> None:
        outcome, page = self.page("scale", 1)
        self.assertEqual(outcome["status"], "pipeline_error")
        self.assertContains(page, "<h2>Host program</h2>", html=True)
        self.assertContains(page, "Line 40 (device.createBindGroup): Number of bindings")

    def test_add_v1_dispatches_960_invocations_for_1000_elements(self) -> None:
        outcome, page = self.page("add", 1)
        [out] = outcome["outputs"]
        self.assertEqual((out["unwritten"], out["first_bad"][0]["index"]), (40, [960]))
        # Maya's program, its dispatch and its console: the cause where she wrote it.
        self.assertContains(page, "<h2>Host program</h2>", html=True)
        self.assertContains(page, "dispatches 15 workgroups of 64: 960 invocations for the 1,000")
        self.assertContains(page, "<code>dispatchWorkgroups(15)</code>")
        self.assertContains(page, "workgroups: 15")
        self.assertContains(page, "out[999] = 0")
        self.assertNotContains(page, "the harness, written as the WebGPU code it stands for")

    def test_add_v2s_host_diff_rounds_up(self) -> None:
        outcome, page = self.page("add", 2)
        self.assertEqual(outcome["status"], "passed")
        self.assertContains(page, "Host changes since v1")
        self.assertContains(page, '<span class="changed">floor</span>(n / 64)')
        self.assertContains(page, '<span class="changed">ceil</span>(n / 64)')
        self.assertContains(page, "<code>dispatchWorkgroups(16)</code>")

    def test_matmul_v2_sends_12_bytes_for_a_16_byte_uniform(self) -> None:
        _, page = self.page("matmul", 2)
        self.assertContains(page, "Buffer dims is 12 bytes, but struct Dims")
        self.assertContains(page, "is 16 bytes")
        self.assertContains(page, '<g class="segment padding missing">')

    def test_forward_v1_shares_one_dims_buffer_between_passes(self) -> None:
        _, page = self.page("forward", 1)
        self.assertContains(page, "Uniform buffer dims is bound in passes 1 and 3")
        self.assertContains(page, "m = 16; k = 32; n = 10")

    def test_mnist_v1s_page_loads_the_weights_and_prints_its_score(self) -> None:
        outcome, page = self.page("mnist", 1)
        self.assertEqual(outcome["status"], "mismatch")
        self.assertEqual(outcome["check"]["name"], "mlp_forward")
        self.assertContains(page, "right: 34 of 100")
        self.assertContains(page, "401,408 bytes")  # w1, fetched from the session's files
        self.assertContains(page, "compared with numpy&#x27;s mlp_forward")


# -- lesson plans --------------------------------------------------------------------------

LESSON_FIELDS = {
    "slug",
    "order",
    "title",
    "summary",
    "objectives",
    "objective_checks",
    "context",
    "kernel",
    "steps",
    "pitfalls",
    "hints",
}
COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
ENTRY_BODY = re.compile(r"@compute[^{]*\{(?P<body>[^{}]*)\}")


def test_there_are_eight_lessons_in_order() -> None:
    plans = [json.loads(p.read_text(encoding="utf-8")) for p in LESSONS]

    assert [plan["order"] for plan in plans] == list(range(1, 9))
    assert [f"{plan['order']:02d}-{plan['slug']}.json" for plan in plans] == [
        p.name for p in LESSONS
    ]


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_a_lesson_plan_is_complete_and_its_starter_is_not_a_solution(run, path: Path) -> None:
    plan = json.loads(path.read_text(encoding="utf-8"))
    assert set(plan) == LESSON_FIELDS
    assert plan["objectives"] and plan["pitfalls"]
    # At least one objective a run can show met, so the page has something to mark.
    assert len(plan["objective_checks"]) == len(plan["objectives"])
    assert any(plan["objective_checks"])
    assert all(set(step) == {"goal", "check"} for step in plan["steps"])
    assert len(plan["hints"]) >= 3
    assert "twin" in plan["hints"][-1]
    assert "```" not in plan["hints"][-1]

    kernel = plan["kernel"]
    harness = parse_harness(kernel["harness"], FIXTURES)
    assert harness.reference is not None
    assert harness.kernel_names() == {"self"}
    starter = kernel["starter"]

    # It compiles, and every entry point's body is left to the learner.
    assert run({"self": starter}, None)["status"] == "no_reference"
    bodies = ENTRY_BODY.findall(COMMENTS.sub("", starter))
    assert bodies and all(not body.strip() for body in bodies)
    assert {p.entry_point for p in harness.passes} <= set(
        re.findall(r"fn (\w+)\(", COMMENTS.sub("", starter))
    )
    # With its harness it runs, and does not pass.
    assert run({"self": starter}, kernel["harness"])["status"] == "mismatch"


def story_kernel(plan: dict) -> tuple[dict, dict] | None:
    """The story's final version of the plan's kernel, where the plan's harness runs the
    same kernels as the story's (lesson 6's plan is one module; the story chains three)."""
    kernel = KERNELS[plan["kernel"]["name"]]
    final = max(kernel["versions"], key=lambda v: v["number"])
    plan_kernels = {p.get("kernel", "self") for p in plan["kernel"]["harness"]["passes"]}
    story_kernels = {p.get("kernel", "self") for p in harness_of(kernel, final)["passes"]}
    return (kernel, final) if plan_kernels == story_kernels else None


SOLVED = [p for p in LESSONS if story_kernel(json.loads(p.read_text(encoding="utf-8")))]


@pytest.mark.parametrize("path", SOLVED, ids=lambda p: p.stem)
def test_the_showcase_solves_its_lesson(run, path: Path) -> None:
    _, final = story_kernel(json.loads(path.read_text(encoding="utf-8")))
    plan = json.loads(path.read_text(encoding="utf-8"))

    outcome = run({"self": final["source"]}, plan["kernel"]["harness"])

    assert outcome["status"] == "passed", outcome["message"]


def test_a_program_run_again_on_the_same_inputs_computes_its_reference_once(gpu) -> None:
    from kernels.engine.worker import Memo

    device, env = gpu
    kernel = KERNELS["add"]
    _, ceil = kernel["versions"]
    files = {file["name"]: file["data"] for file in DATA["files"]}
    job = {
        "kind": "program",
        "source": ceil["host_program"],
        "files": files,
        "wgsl": {"kernel.wgsl": ceil["source"], "add.wgsl": ceil["source"]},
        "harness": harness_of(kernel, ceil),
    }
    memo, computed = Memo(), []

    def counting(key: tuple, compute):
        def counted():
            computed.append(key[0])
            return compute()

        return memo(key, counted)

    first = run_program_job(device, env, job, counting)
    again = run_program_job(device, env, job, counting)

    assert first["status"] == again["status"] == "passed"
    assert first["outputs"] == again["outputs"]
    assert computed.count("program reference") == 1
    assert computed.count("harness") == 1  # parsed once too
    # Other inputs are another reference.
    job["source"] = ceil["host_program"].replace("b[i] = 2 * i;", "b[i] = 5 * i;", 1)
    other = run_program_job(device, env, job, counting)
    assert other["status"] == "passed"
    assert computed.count("program reference") == 2
