"""Running a learner's Python or CUDA as untrusted code: bubblewrap (Debian's `bubblewrap`)
around it, limits on it, and every process it started killed when it ends.

Inside: the system's folders read-only (/usr, /etc, /opt and the merged /bin and /lib),
the run's own scratch folder as /work (the only place it can write, with /tmp),
no network (its own network namespace), no other IPC or host names, a user namespace in
which it is an ordinary user (root's files are not its), an empty environment but for
what the run sets, run by nobody (uid 65534) when the worker is root, and no /home,
/root, /srv, /var or the project's own folders: no database, settings or other run's
scratch. With a GPU, only that GPU's device nodes
(and the driver's control nodes) are there; without one the sandbox also has its own
process namespace. A GPU program keeps the host's: CUDA does not start in a process
namespace of its own (cudaGetDeviceCount fails with error 304), so its processes are
found by the mount namespace they share with the sandbox and killed by it.

Limits (setrlimit in the child, before bubblewrap starts): CPU seconds, file size (what
it writes, its output included), open files, and without a GPU its address space
(CUDA reserves far more address space than it uses, so a GPU run's memory is bounded by
its data segment instead); processes, counted in the sandbox's user namespace; and a
wall-clock deadline after which everything is killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

SYSTEM_FOLDERS = ("/usr", "/etc", "/opt")
# Symbolic links on a merged-/usr system, folders elsewhere: bound if present.
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib64", "/lib32")
# The NVIDIA driver's nodes every CUDA process opens, beside its GPU's /dev/nvidiaN.
NVIDIA_CONTROL = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
SANDBOX_UID = 1000
# Who the sandbox is outside when the worker runs as root: inside a user namespace its
# files would otherwise be root's (/etc/shadow readable), and root has no process limit.
OUTSIDE_UID = 65534
MIB = 1 << 20


@dataclass(frozen=True)
class Limits:
    wall_s: float = 60.0
    cpu_s: int = 120
    memory_bytes: int = 8 << 30
    processes: int = 64
    file_bytes: int = 64 * MIB
    output_bytes: int = 256 * 1024
    open_files: int = 256


@dataclass
class Finished:
    """How a sandboxed command ended: its exit code (negative: killed by that signal),
    whether the deadline or the output cap ended it, its output (cut at the cap)."""

    returncode: int
    timed_out: bool
    stdout: str
    stderr: str
    output_cut: bool = False
    wall_s: float = 0.0
    killed: list[int] = field(default_factory=list)


class SandboxUnavailable(Exception):
    """bubblewrap is not installed, or cannot make namespaces here."""


def bwrap() -> str:
    found = shutil.which("bwrap")
    if found is None:
        raise SandboxUnavailable(
            "bubblewrap (bwrap) is not installed: `apt-get install bubblewrap` on the worker."
        )
    return found


def gpu_nodes(gpu: int | None) -> list[str]:
    """The device nodes a run on this GPU needs, those present."""
    if gpu is None:
        return []
    wanted = [f"/dev/nvidia{gpu}", *NVIDIA_CONTROL]
    caps = Path("/dev/nvidia-caps")
    if caps.is_dir():
        wanted += sorted(str(p) for p in caps.iterdir())
    return [node for node in wanted if os.path.exists(node)]


def command(
    scratch: Path,
    argv: Sequence[str],
    env: dict[str, str],
    gpu: int | None = None,
    info_fd: int | None = None,
) -> list[str]:
    """The bwrap command line running argv in /work/project with scratch as /work."""
    args = [bwrap()]
    for folder in SYSTEM_FOLDERS:
        args += ["--ro-bind-try", folder, folder]
    for link in SYSTEM_LINKS:
        if os.path.islink(link):
            args += ["--symlink", os.readlink(link), link]
        else:
            args += ["--ro-bind-try", link, link]
    args += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]  # noqa: S108 (its own)
    for node in gpu_nodes(gpu):
        args += ["--dev-bind", node, node]
    args += ["--bind", str(scratch), "/work", "--chdir", "/work/project"]
    args += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    args += ["--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if gpu is None:
        args += ["--unshare-pid"]
    args += ["--die-with-parent", "--new-session", "--clearenv"]
    for name, value in env.items():
        args += ["--setenv", name, value]
    if info_fd is not None:
        args += ["--info-fd", str(info_fd)]
    return [*args, "--", *argv]


def _limit(limits: Limits, gpu: bool) -> None:
    """In the child before exec: the limits, and a process group of its own."""
    os.setsid()
    if os.geteuid() == 0:
        os.setgroups([])
        os.setgid(OUTSIDE_UID)
        os.setuid(OUTSIDE_UID)
    resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_s, limits.cpu_s))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
    resource.setrlimit(resource.RLIMIT_NOFILE, (limits.open_files, limits.open_files))
    resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
    memory = resource.RLIMIT_DATA if gpu else resource.RLIMIT_AS
    resource.setrlimit(memory, (limits.memory_bytes, limits.memory_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def kill_namespace(namespace: str | None) -> list[int]:
    """SIGKILL every process in this mount namespace (the sandbox's); their pids."""
    if namespace is None:
        return []
    killed = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _namespace(int(entry)) == namespace:
            try:
                os.kill(int(entry), signal.SIGKILL)
                killed.append(int(entry))
            except OSError:
                pass
    return killed


def _read_capped(path: Path, cap: int) -> tuple[str, bool]:
    with path.open("rb") as handle:
        data = handle.read(cap + 1)
    return data[:cap].decode("utf-8", "replace"), len(data) > cap


def run(
    scratch: Path,
    argv: Sequence[str],
    env: dict[str, str],
    limits: Limits,
    gpu: int | None = None,
) -> Finished:
    """Run argv in the sandbox; every process it started is gone when this returns.

    Its output goes to files outside the sandbox, so that it cannot fill a pipe and
    stall, and each is cut at limits.output_bytes (RLIMIT_FSIZE stops it writing far
    beyond)."""
    logs = scratch.parent / f"{scratch.name}.logs"
    logs.mkdir(mode=0o700, exist_ok=True)
    if os.geteuid() == 0:
        for path in (scratch, *scratch.rglob("*")):
            os.chown(path, OUTSIDE_UID, OUTSIDE_UID, follow_symlinks=False)
    info_read, info_write = os.pipe()
    started = time.monotonic()
    with (
        (logs / "stdout").open("wb") as out,
        (logs / "stderr").open("wb") as err,
    ):
        process = subprocess.Popen(  # noqa: S603 (argv is ours: bwrap and the driver)
            command(scratch, argv, env, gpu, info_write),
            # bwrap's own environment is seen inside (its /proc/1/environ): none of ours.
            env={"PATH": "/usr/bin:/bin"},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            pass_fds=(info_write,),
            preexec_fn=lambda: _limit(limits, gpu is not None),
            close_fds=True,
        )
    os.close(info_write)
    namespace = None
    with os.fdopen(info_read, "rb") as info:
        try:
            child = json.loads(info.read(4096) or b"{}").get("child-pid")
            namespace = _namespace(int(child)) if child else None
        except ValueError:
            pass
    timed_out = False
    try:
        process.wait(timeout=max(0.1, limits.wall_s - (time.monotonic() - started)))
    except subprocess.TimeoutExpired:
        timed_out = True
    killed = kill_namespace(namespace)
    with contextlib.suppress(OSError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    stdout, cut_out = _read_capped(logs / "stdout", limits.output_bytes)
    stderr, cut_err = _read_capped(logs / "stderr", limits.output_bytes)
    shutil.rmtree(logs, ignore_errors=True)
    return Finished(
        returncode=process.returncode,
        timed_out=timed_out,
        stdout=stdout,
        stderr=stderr,
        output_cut=cut_out or cut_err,
        wall_s=time.monotonic() - started,
        killed=killed,
    )
