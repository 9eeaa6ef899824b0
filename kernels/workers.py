"""What a Celery worker offers, announced where the web process can read it (the Worker
table): the capability of each queue it consumes that it can serve here. "replay" is
WebGPU; "triton" and "cuda" need an NVIDIA GPU's device node and bubblewrap (the sandbox).
The announcement is renewed every minute while the worker runs and removed when it stops;
one not renewed for WORKER_SEEN_WITHIN seconds counts as gone.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from django.utils import timezone

from kernels.jobs import GPU_KINDS
from kernels.models import Worker

QUEUE_CAPABILITIES = {"replay": "webgpu", **{kind: kind for kind in GPU_KINDS}}


def gpu_index() -> int:
    return int(os.environ.get("KERNELBIN_GPU_INDEX", "0"))


def gpu_name() -> str:
    """The GPU's name, where there is one this worker may use ("" otherwise)."""
    if not os.path.exists(f"/dev/nvidia{gpu_index()}"):
        return ""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "NVIDIA GPU"
    try:
        found = subprocess.run(  # noqa: S603 (nvidia-smi, our arguments)
            [smi, "--query-gpu=name", "--format=csv,noheader", f"--id={gpu_index()}"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return "NVIDIA GPU"
    return found.stdout.strip()[:200] or "NVIDIA GPU"


def offered(queues: list[str], gpu: str) -> list[str]:
    """The capabilities a worker consuming these queues can serve."""
    capabilities = []
    for queue in queues:
        capability = QUEUE_CAPABILITIES.get(queue)
        if capability in GPU_KINDS and not (gpu and shutil.which("bwrap")):
            continue
        if capability and capability not in capabilities:
            capabilities.append(capability)
    return capabilities


def announce(name: str, queues: list[str], gpu: str) -> Worker:
    worker, _ = Worker.objects.update_or_create(
        name=name[:200],
        defaults={"capabilities": offered(queues, gpu), "gpu": gpu, "seen": timezone.now()},
    )
    return worker


def withdraw(name: str) -> None:
    Worker.objects.filter(name=name[:200]).delete()
