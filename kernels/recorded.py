"""Outcomes of Triton and CUDA programs recorded on a GPU worker and shipped with the
project (fixtures/triton_cuda/h100_outcomes.json), stored as the finished runs of the
versions whose program they are, so that a site without a GPU worker shows them, with the
GPU and date they were measured on."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.db.models import Q

from kernels.engine.outcome import Status
from kernels.engine.run_warnings import as_stored
from kernels.jobs import GPU_KINDS, job_for
from kernels.models import Run
from sessions.programs import KernelVersion


def record(outcomes_path: Path, programs_dir: Path) -> int:
    """Store each recorded outcome as the run of every version whose state's entry script
    is that program, where no finished run of it is stored yet; how many were stored."""
    outcomes: dict[str, Any] = json.loads(outcomes_path.read_text())
    by_text = {
        (programs_dir / f"{name}.py").read_bytes(): outcome for name, outcome in outcomes.items()
    }
    stored = 0
    versions = KernelVersion.objects.filter(state__kind__in=GPU_KINDS).select_related("state")
    for version in versions:
        state = version.state
        assert state is not None
        entry = state.files.filter(path=state.entry).values_list("blob__data", flat=True).first()
        outcome = by_text.get(bytes(entry)) if entry is not None else None
        if outcome is None:
            continue
        job = job_for(version)
        key = Q(source_sha256=job.source_sha256, harness_digest=job.harness_digest)
        if Run.objects.filter(key, state=Run.State.DONE).exists():
            continue
        measured = datetime.fromisoformat(outcome["measured"]["at"].replace("Z", "+00:00"))
        environment = outcome.get("environment") or {}
        Run.objects.create(
            source_sha256=job.source_sha256,
            harness_digest=job.harness_digest,
            environment_id=str(environment.get("id", "recorded"))[:64],
            state=Run.State.DONE,
            status=Status(outcome["status"]).value,
            cacheable=True,
            outcome=as_stored(outcome),
            adapter=str(environment.get("label", ""))[:200],
            created=measured,
            started=measured,
            finished=measured.astimezone(UTC),
        )
        stored += 1
    return stored
