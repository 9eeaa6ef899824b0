"""Shared test scaffolding: three users and small factories."""

from __future__ import annotations

from typing import Any, cast

from django.contrib.auth.models import User
from django.test import Client, TestCase
from django.utils import timezone

from kernels import jobs
from kernels.engine.outcome import Outcome
from kernels.models import Run
from sessions.models import Session, Turn
from sessions.programs import Kernel, KernelVersion

ADD_SOURCE = """@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    out[id.x] = a[id.x] + b[id.x];
}
"""

ADD_HARNESS: dict[str, Any] = {
    "entry_point": "main",
    "buffers": {
        "a": {
            "usage": "read",
            "dtype": "f32",
            "shape": [128],
            "random": {"seed": 1, "low": -1, "high": 1},
        },
        "b": {
            "usage": "read",
            "dtype": "f32",
            "shape": [128],
            "random": {"seed": 2, "low": -1, "high": 1},
        },
        "out": {"usage": "read_write", "dtype": "f32", "shape": [128], "output": True},
    },
    "passes": [{"kernel": "self", "bind": {"0": "a", "1": "b", "2": "out"}, "dispatch": [2, 1, 1]}],
    "reference": {"name": "add", "args": ["a", "b"], "outputs": ["out"]},
    "tolerance": {"atol": 1e-6, "rtol": 1e-6},
}


def make_session(slug: str = "demo", turns: int = 3, **fields) -> Session:
    fields.setdefault("title", f"Session {slug}")
    fields.setdefault("visibility", Session.Visibility.PUBLIC)
    session = Session.objects.create(slug=slug, **fields)
    for number in range(1, turns + 1):
        role = Turn.Role.LEARNER if number % 2 else Turn.Role.TUTOR
        Turn.objects.create(
            session=session, number=number, role=role, content=f"Turn {number} text"
        )
    return session


def add_kernel(
    session: Session, source: str = ADD_SOURCE, harness: dict | None = None, turn: int = 1
) -> KernelVersion:
    """A kernel with one version, reviewed by the given turn."""
    kernel = Kernel.objects.create(
        session=session, name="add", harness=ADD_HARNESS if harness is None else harness
    )
    reviewed = session.turns.get(number=turn)
    version = KernelVersion.objects.create(kernel=kernel, number=1, source=source, turn=reviewed)
    reviewed.kernel_version = version
    reviewed.save()
    return version


class BaseTestCase(TestCase):
    def setUp(self) -> None:
        super().setUp()
        self.csrf_client = Client(enforce_csrf_checks=True)
        # Alice owns the private sessions in these tests.
        self.alice = User.objects.create_user("alice", "alice@example.org", "password")
        # Bob is another signed-in user: he must not see Alice's private work.
        self.bob = User.objects.create_user("bob", "bob@example.org", "password")
        # Charlie is staff: curators see everything.
        self.charlie = User.objects.create_user(
            "charlie", "charlie@example.org", "password", is_staff=True
        )


def store_run(version: KernelVersion, status: str, message: str = "", **outcome) -> Run:
    """A finished run of this version, as the replay service would have stored it."""
    job = jobs.job_for(version)
    outcome = {
        "status": status,
        "message": message or f"It ended in {status}.",
        "environment": {"label": "llvmpipe (test)", "software": True},
        "timings": {"compile_ms": 1.0, "run_ms": 1.0, "wall_ms": 2.0},
        "warnings": [],
        "outputs": [],
        **outcome,
    }
    now = timezone.now()
    return Run.objects.create(
        source_sha256=job.source_sha256,
        harness_digest=job.harness_digest,
        environment_id="test",
        state=Run.State.DONE,
        status=status,
        cacheable=True,
        outcome=outcome,
        adapter="llvmpipe (test)",
        started=now,
        finished=now,
    )


def stored_outcome(fields: dict[str, Any]) -> Outcome:
    """An outcome as the database may hold it: only the keys a test gives (runs stored by
    older runners lack some), which the type of a fresh outcome does not allow."""
    return cast(Outcome, fields)
