"""What a replay runs: a version's sources, harness, host program and files, as the job a
worker is sent (kernels.replay starts and finds its run), keyed by their content.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from kernels.engine.harness import Harness, HarnessError, canonical_digest, parse_harness
from sessions.programs import (
    Blob,
    KernelVersion,
    ProgramState,
    SessionFile,
    StateFile,
    sha256_text,
)

# The kinds of program a GPU worker runs (kernels/engine/gpu_run.py), each the name of the
# Celery queue of the workers that offer it; WebGPU jobs go to "replay".
GPU_KINDS = (ProgramState.Kind.TRITON.value, ProgramState.Kind.CUDA.value)
# What a worker must have to run each, for the reader told that none connected can.
CAPABILITY_NEEDS = {
    "webgpu": "WebGPU (wgpu, on a GPU or llvmpipe)",
    "triton": "Triton (an NVIDIA GPU with CUDA, PyTorch and Triton)",
    "cuda": "CUDA (an NVIDIA GPU with CUDA, PyTorch and CuPy)",
}


class ReplayProblem(Exception):
    """This version cannot be replayed as configured (a bad harness, a missing kernel)."""


@dataclass(frozen=True)
class Job:
    source_sha256: str
    harness_digest: str
    payload: dict[str, Any]

    def key(self, environment_id: str) -> str:
        return f"{self.source_sha256}:{self.harness_digest}:{environment_id}"


def sources_digest(sources: dict[str, str]) -> str:
    canonical = json.dumps(sources, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def parsed_harness(version: KernelVersion, spec: dict[str, Any] | None = None) -> Harness | None:
    spec = version.harness if spec is None else spec
    if not spec:
        return None
    try:
        return parse_harness(spec)
    except HarnessError as error:
        message = f"The harness of kernel '{version.kernel.name}' is invalid: {error}"
        raise ReplayProblem(message) from None


def sources_for(version: KernelVersion, harness: Harness | None) -> dict[str, str]:
    """Every source the passes use: this version as "self", and for other kernels of the
    session the version that was current when this one was introduced."""
    sources = {"self": version.source}
    names = (harness.kernel_names() if harness else set()) - {"self"}
    for name in sorted(names):
        others = KernelVersion.objects.filter(kernel__session=version.kernel.session_id)
        others = others.filter(kernel__name=name).order_by("-number")
        if version.turn is not None:
            earlier = others.filter(turn__number__lte=version.turn.number)
            others = earlier if earlier.exists() else others
        other = others.first()
        if other is None:
            raise ReplayProblem(f"The harness runs kernel '{name}', which this session lacks.")
        sources[name] = other.source
    return sources


def job_for(
    version: KernelVersion,
    spec: dict[str, Any] | None = None,
    compare_with: KernelVersion | None = None,
) -> Job:
    """The job replaying this version, under its own harness or the one given; its host
    program when it has one (compared with another version's, when one is given)."""
    spec = version.harness if spec is None else spec
    if version.state is not None and version.state.kind in GPU_KINDS:
        return gpu_program_job(version)
    if version.host_program:
        return program_job(version, spec, compare_with)
    harness = parsed_harness(version, spec)
    sources = sources_for(version, harness)
    payload = {
        "sources": sources,
        "harness": spec or None,
        "fixtures_dir": str(settings.FIXTURES_DIR),
    }
    digest = canonical_digest(harness) if harness else "compile-only"
    return Job(sources_digest(sources), digest, payload)


# A program's own interrupt, which names its line, comes this long before the pool's
# deadline kills its worker.
PROGRAM_MARGIN = 2.0


@dataclass(frozen=True)
class ProgramCheck:
    """What a host program's readbacks are checked against: the harness's numpy
    reference fed with the inputs the program wrote, else the readbacks of the kernel's
    final program version, else nothing (its outputs are shown without a verdict)."""

    harness: Harness | None = None
    final: KernelVersion | None = None


def program_check(
    version: KernelVersion, harness: Harness | None, compare_with: KernelVersion | None = None
) -> ProgramCheck:
    """compare_with: a version the reader chose, whose readbacks are the reference."""
    if compare_with is not None and compare_with.host_program:
        return ProgramCheck(final=compare_with)
    if harness is not None and harness.reference is not None:
        return ProgramCheck(harness=harness)
    final = version.kernel.versions.exclude(host_program="").order_by("-number").first()
    return ProgramCheck(final=final if final is not None and final.pk != version.pk else None)


def wgsl_files(version: KernelVersion) -> dict[str, str]:
    """The version's WGSL as the files a program may fetch() it by: also by its path in
    its program state, for a .wgsl file the program fetches (a fork's edit runs)."""
    files = {"kernel.wgsl": version.source, f"{version.kernel.name}.wgsl": version.source}
    path = version.meta.get("project_path") if isinstance(version.meta, dict) else None
    if isinstance(path, str) and path.endswith(".wgsl"):
        files[path] = version.source
    return files


def program_job(
    version: KernelVersion, spec: dict[str, Any], compare_with: KernelVersion | None = None
) -> Job:
    """The job running this version's host program (kernels.engine.host.program).

    Its key covers the WGSL, the program, the session's files and what it is checked
    against; the files themselves join the payload only when the job is sent (with_files).
    """
    check = program_check(version, parsed_harness(version, spec), compare_with)
    files = program_files(version)
    content = {"self": version.source, "@host": version.host_program}
    content |= {f"@file:{name}": sha256 for name, sha256 in files.items()}
    payload: dict[str, Any] = {
        "kind": "program",
        "source": version.host_program,
        "wgsl": wgsl_files(version),
        "files": None,
        "session_files": version.kernel.session_id if files else None,
        "state_files": version.state_id if files else None,
        # The files the key covers, by sha256: a worker on this machine gets these.
        "known_files": files,
        "deadline_s": max(1.0, settings.REPLAY_DEADLINE - PROGRAM_MARGIN),
        "fixtures_dir": str(settings.FIXTURES_DIR),
    }
    if check.harness is not None:
        payload["harness"] = check.harness.to_dict()
        against = f"reference:{canonical_digest(check.harness)}"
    elif check.final is not None:
        final = check.final
        payload["reference_program"] = {"source": final.host_program, "wgsl": wgsl_files(final)}
        against = f"program:{sources_digest({'self': final.source, '@host': final.host_program})}"
    else:
        against = "none"
    digest = hashlib.sha256(f"program/{against}".encode()).hexdigest()
    return Job(sources_digest(content), digest, payload)


def gpu_digests() -> list[str]:
    """The harness digests of Triton and CUDA programs' runs (gpu_program_job)."""
    return [hashlib.sha256(f"gpu/{kind}".encode()).hexdigest() for kind in GPU_KINDS]


def capability(job: Job) -> str:
    """What a worker must offer to run the job: "webgpu", "triton" or "cuda"."""
    kind = job.payload.get("kind")
    return kind if kind in GPU_KINDS else "webgpu"


def version_file(version: KernelVersion) -> str:
    """The file of its program state that a Triton or CUDA version's kernel is in (its
    path in the project), else the state's entry: what a reader's fork of it edits."""
    assert version.state is not None
    written = version.meta.get("file_path") if isinstance(version.meta, dict) else None
    if isinstance(written, str):
        # The importer keeps the path the session wrote to, from its own folder: the
        # longest state path it ends with is the file (kernels/scale.cu, not scale.cu).
        paths = StateFile.objects.filter(state=version.state_id).values_list("path", flat=True)
        held = [path for path in paths if written == path or written.endswith(f"/{path}")]
        if held:
            return max(held, key=len)
    return version.state.entry


def gpu_program_job(version: KernelVersion) -> Job:
    """The job running the Triton or CUDA program of the state the version was written in
    (its entry script, on the state's files), on a GPU worker (kernels/engine/gpu_run.py).
    Its key covers the entry, the kind and every file; the files join when it is sent.

    A reader's fork (unsaved: kernels.models.Fork.as_version) holds the whole text of the
    version's file (version_file) as its source: it runs in that file's place, so an edit
    that changes nothing is the archived version's job, and shares its runs."""
    state = version.state
    assert state is not None
    if not state.entry:
        raise ReplayProblem(
            "This version's program state holds no script that runs its kernels, so there "
            "is nothing to replay."
        )
    files = program_files(version)
    edited: dict[str, str] = {version_file(version): version.source} if version.pk is None else {}
    files |= {path: sha256_text(text) for path, text in edited.items()}
    content = {"@entry": state.entry, "@kind": state.kind}
    content |= {f"@file:{name}": sha256 for name, sha256 in files.items()}
    payload: dict[str, Any] = {
        "kind": state.kind,
        "entry": state.entry,
        "files": None,
        "session_files": version.kernel.session_id,
        "state_files": state.pk,
        "edited_files": edited,
        "known_files": files,
        "deadline_s": settings.GPU_REPLAY_DEADLINE,
    }
    digest = hashlib.sha256(f"gpu/{state.kind}".encode()).hexdigest()
    return Job(sources_digest(content), digest, payload)


def program_files(version: KernelVersion) -> dict[str, str]:
    """name → sha256 of each file the version's program may fetch(): the session's
    uploaded files, and over them the files of the program state it was written in."""
    files = dict(
        SessionFile.objects.filter(session=version.kernel.session_id).values_list("name", "sha256")
    )
    if version.state_id is not None:
        files |= dict(
            StateFile.objects.filter(state=version.state_id).values_list("path", "blob_id")
        )
    return files


def with_files(job: Job, on_disk: bool = False) -> Job:
    """The job with its files (the session's, then its state's over them), read from the
    database when it is sent: in it, in base64, with each one's sha256 (file_shas), for a
    worker elsewhere; on_disk, named by their sha256 in REPLAY_FILES_DIR, for a worker on
    this machine, which reads each once (3 MB of weights crossed the pool's pipe as 4 MB of
    JSON on every replay). Either way a worker knows each file by its sha256: it decodes
    or reads it once, and keeps it on the device as a program's input (kept_inputs.py)."""
    session_id = job.payload.get("session_files")
    if session_id is None:
        return job
    payload = {
        key: value
        for key, value in job.payload.items()
        if key not in ("session_files", "state_files", "edited_files", "known_files")
    }
    # A fork's edit, over the file it replaces (gpu_program_job).
    edited = {path: text.encode() for path, text in job.payload.get("edited_files", {}).items()}
    # Unordered: the model's ordering would join the session's table for nothing.
    sessions = SessionFile.objects.filter(session=session_id).order_by()
    state = job.payload.get("state_files")
    # No query for a job without a state (most are): it would find nothing.
    states = StateFile.objects.filter(state=state) if state else StateFile.objects.none()
    edited_shas = {path: hashlib.sha256(data).hexdigest() for path, data in edited.items()}
    if not on_disk:
        sent = list(sessions.values_list("name", "sha256", "data"))
        sent += states.values_list("path", "blob_id", "blob__data")
        sent += [(path, edited_shas[path], data) for path, data in edited.items()]
        files = {name: base64.b64encode(bytes(data)).decode() for name, _, data in sent}
        shas = {name: sha for name, sha, _ in sent}
        return Job(
            job.source_sha256,
            job.harness_digest,
            {**payload, "files": files, "file_shas": shas},
        )
    # The files the job's key was made of, when it says (not read again: the run is of
    # those, whatever changed since).
    refs = job.payload.get("known_files") or (
        dict(sessions.values_list("name", "sha256"))
        | dict(states.values_list("path", "blob_id"))
        | edited_shas
    )
    folder = Path(settings.REPLAY_FILES_DIR)
    missing = {sha for sha in refs.values() if not (folder / sha).exists()}
    if missing:
        folder.mkdir(parents=True, exist_ok=True)
        rows = list(sessions.filter(sha256__in=missing).values_list("sha256", "data"))
        rows += Blob.objects.filter(sha256__in=missing).values_list("sha256", "data")
        rows += [(edited_shas[path], data) for path, data in edited.items()]
        for sha, data in dict(rows).items():
            if sha in missing:
                _write_file(folder, sha, bytes(data))
        _prune(folder, keep=set(refs.values()))
    return Job(
        job.source_sha256,
        job.harness_digest,
        {**payload, "files": None, "file_refs": refs, "files_dir": str(folder)},
    )


def _write_file(folder: Path, sha: str, data: bytes) -> None:
    """Written whole or not at all: a worker never reads half a file."""
    partial = folder / f".{sha}.{os.getpid()}.{threading.get_ident()}"
    partial.write_bytes(data)
    os.replace(partial, folder / sha)


def _prune(folder: Path, keep: set[str]) -> None:
    """The oldest files out while the folder holds more than REPLAY_FILES_BYTES."""
    files = sorted(
        (entry.stat().st_mtime, entry.stat().st_size, entry)
        for entry in folder.iterdir()
        if entry.is_file() and entry.name not in keep
    )
    total = sum(size for _, size, _ in files) + sum(
        (folder / sha).stat().st_size for sha in keep if (folder / sha).exists()
    )
    for _, size, entry in files:
        if total <= settings.REPLAY_FILES_BYTES:
            break
        entry.unlink(missing_ok=True)
        total -= size
