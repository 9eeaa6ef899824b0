"""What a fork's editor (templates/kernels/_fork_form.html) holds for a version: its
kernel and host program, or for a Triton or CUDA version the file of its program that a
fork edits, and the reader's GPU runs left (kernels/forks.py)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.urls import reverse
from django.utils.http import urlencode

from kernels import forks
from sessions.programs import KernelVersion, ProgramState

LANGUAGES = {ProgramState.Kind.TRITON: "Triton (Python)", ProgramState.Kind.CUDA: "CUDA"}
# The editor's mode for a file (static/src/editor.js): CUDA C++ files are C++ to it, and
# anything else a Triton or CUDA program runs is Python (a cupy kernel in a string too).
CPP_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".h", ".hpp")


def gpu_file(version: KernelVersion, user: User | AnonymousUser) -> dict[str, Any] | None:
    """For a Triton or CUDA version: the file a fork edits (path, its archived text), the
    program that runs it, and how many runs the reader may still start today (None: no
    limit; absent for a reader who is not signed in). None for a WebGPU version."""
    if not forks.is_gpu_version(version) or version.state is None:
        return None
    path, text = forks.file_of(version)
    state = version.state
    shown: dict[str, Any] = {
        "path": path,
        "text": text,
        "language": LANGUAGES.get(ProgramState.Kind(state.kind), state.kind),
        "editor": "cpp" if path.lower().endswith(CPP_SUFFIXES) else "python",
        "entry": state.entry,
        "per_day": settings.GPU_FORKS_PER_DAY,
    }
    if isinstance(user, User):
        shown["runs_left"] = forks.gpu_runs_left(user)
    return shown


def sign_in_url(page: str, editor: str = "try-your-fix") -> str:
    """Sign in, then back to this page's fork editor (the id of its section)."""
    return f"{reverse('login')}?{urlencode({'next': f'{page}#{editor}'})}"
