"""What a Python or CUDA C++ file holds for Kernelbin: its Triton and CUDA kernels, and
whether it is a program a GPU worker can run.

- Triton: each function decorated with `@triton.jit` (or `@jit` imported from triton),
  its other decorators (`@triton.autotune(...)`) and its body, by indentation
  ("triton_jit").
- CUDA: each `__global__` function, from its line to the brace that closes its body
  ("cuda_global"); in a `.cu`/`.cuh` file, or inside a Python string
  (`torch.utils.cpp_extension.load_inline(cuda_sources=...)`, `cupy.RawKernel(...)`),
  where the body ends at the string's end at the latest ("cuda_string").
- A `.py` file that holds a kernel, or compiles CUDA (load_inline, cpp_extension, cupy),
  or imports triton, is a program (its kind "triton" or "cuda"); so is a `.cu` file with
  a `main` (compiled by nvcc). The other files are the project's, not programs.

Every scan is one pass over the text: these files are untrusted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sessions.importers.claude_code.scripts import Shader

if TYPE_CHECKING:
    from sessions.importers.claude_code.kernels import KernelHistory, NewState, NewVersion

PYTHON_SUFFIXES = (".py",)
CUDA_SUFFIXES = (".cu", ".cuh")
GPU_SUFFIXES = PYTHON_SUFFIXES + CUDA_SUFFIXES

_DEF = re.compile(r"(?:async\s+)?def\s+([A-Za-z_]\w*)\s*\(")
_TRITON_DECORATOR = re.compile(r"@\s*(?:triton\s*\.\s*)?jit\b")
_TRITON_IMPORT = re.compile(r"^\s*(?:import\s+triton\b|from\s+triton\b)", re.M)
_CUDA_IN_PYTHON = re.compile(r"\b(?:load_inline|cpp_extension|RawKernel|RawModule|cupy)\b")
_CUDA_MAIN = re.compile(r"\bint\s+main\s*\(")
_GLOBAL = re.compile(r"__global__")
_NAME_BEFORE_PAREN = re.compile(r"\b([A-Za-z_]\w*+)\s*+(?:<[^<>(){};]*+>)?\s*+\(")
_STRING_END = re.compile(r"\"\"\"|'''")


@dataclass(frozen=True)
class GpuProgram:
    """A file's kernels in file order, and the kind of program it is ("" when it is
    not one a GPU worker runs)."""

    kernels: tuple[Shader, ...]
    kind: str


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" \t"))


def triton_kernels(text: str) -> list[Shader]:
    """Each @triton.jit function of a Python file, with its decorators."""
    lines = text.splitlines()
    found: list[Shader] = []
    i = floor = 0  # floor: where the last function ended (no decorator is above it)
    while i < len(lines):
        line = lines[i]
        match = _DEF.match(line.lstrip())
        if not match:
            i += 1
            continue
        indent = _indent(line)
        # Its decorators: the '@' lines at its indent above it, with the lines of their
        # arguments between them.
        start, k = i, i - 1
        while k >= floor and lines[k].strip():
            above = lines[k]
            if _indent(above) == indent and above.lstrip().startswith("@"):
                start = k
            elif _indent(above) == indent and not above.lstrip().startswith((")", "]", "}")):
                break
            k -= 1
        decorators = "\n".join(lines[start:i])
        end = i
        # The signature may span lines; the body is every deeper line after it.
        while end < len(lines) and not lines[end].split("#", 1)[0].rstrip().endswith(":"):
            end += 1
        end = min(end + 1, len(lines))
        while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > indent):
            end += 1
        while end > i + 1 and not lines[end - 1].strip():
            end -= 1
        if _TRITON_DECORATOR.search(decorators):
            source = "\n".join(lines[start:end]) + "\n"
            name = match[1]
            found.append(Shader(name, source, "triton_jit", label=name))
        i = floor = max(end, i + 1)
    return found


def cuda_kernels(text: str, in_python: bool = False) -> list[Shader]:
    """Each __global__ function: from its line to the brace closing its body (in Python,
    to the end of the string holding it at the latest)."""
    found: list[Shader] = []
    position = 0
    for match in _GLOBAL.finditer(text):
        if match.start() < position:
            continue  # inside the kernel found before
        # Its line, back to the kernel before at most (a scan back to the file's start
        # for each would be quadratic).
        line_start = text.rfind("\n", position, match.start())
        start = line_start + 1 if line_start >= 0 else position
        limit = len(text)
        if in_python and (string_end := _STRING_END.search(text, match.end())):
            limit = string_end.start()
        brace = text.find("{", match.end(), limit)
        name = _NAME_BEFORE_PAREN.search(text, match.end(), brace) if brace >= 0 else None
        while name is not None and name[1] == "__launch_bounds__":
            name = _NAME_BEFORE_PAREN.search(text, name.end(), brace)
        if name is None:
            position = limit  # nothing after it up to there is a kernel either
            continue
        depth, end = 0, limit
        for k in range(brace, limit):
            char = text[k]
            if char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    end = k + 1
                    break
        position = end
        container = "cuda_string" if in_python else "cuda_global"
        found.append(Shader(name[1], text[start:end] + "\n", container, label=name[1]))
    return found


def read_gpu_program(path: str, content: str) -> GpuProgram:
    """The kernels of a .py, .cu or .cuh file and the kind of program it is."""
    lower = path.lower()
    if lower.endswith(CUDA_SUFFIXES):
        kernels = cuda_kernels(content)
        runnable = lower.endswith(".cu") and _CUDA_MAIN.search(content) is not None
        return GpuProgram(tuple(kernels), "cuda" if runnable else "")
    triton = triton_kernels(content)
    cuda = cuda_kernels(content, in_python=True) if _GLOBAL.search(content) else []
    # A script that compiles CUDA and times it with triton.testing is a CUDA program.
    if triton:
        kind = "triton"
    elif cuda or _CUDA_IN_PYTHON.search(content):
        kind = "cuda"
    else:
        kind = "triton" if _TRITON_IMPORT.search(content) else ""
    return GpuProgram(tuple(triton + cuda), kind)


def gpu_versions(
    history: KernelHistory,
    path: str,
    content: str,
    meta: dict[str, Any],
    note: str,
    state: NewState | None,
) -> list[NewVersion]:
    """The versions a new text of a Python or CUDA file makes of its Triton and CUDA
    kernels (KernelHistory follows them as it follows a page's shaders). As for a page, a
    change of the rest of the file alone (the launcher, the test, the benchmark) is a
    version of its first kernel: the program runs differently."""
    program = read_gpu_program(path, content)
    names = history._lineage(path, program.kernels)
    rest = content
    for kernel in program.kernels:
        rest = rest.replace(kernel.source.rstrip("\n"), "", 1)
    rest_changed = history.file_hosts.get(path) != rest
    history.file_hosts[path] = rest
    versions = []
    for number, (name, kernel) in enumerate(zip(names, program.kernels, strict=True)):
        changed = history.kernels[name].source != kernel.source
        if not changed and not (number == 0 and rest_changed):
            continue
        triton = kernel.container == "triton_jit"
        kernel_meta = {
            **meta,
            "container": kernel.container,
            "entry_point": kernel.entry,
            "language": "triton" if triton else "cuda",
        }
        if state is not None and state.entry == history.project_path(path):
            kernel_meta["program"] = True
        marker = "@triton.jit" if triton else "__global__"
        title = f"{history.title_for(path)} · {marker} {kernel.entry}"
        version = history._record(
            name, kernel.source, kernel_meta, title, note, not changed, host="", shader=kernel
        )
        if version:
            versions.append(version)
    history._modules_of(path, names, state)
    return history._in_state(versions, state, path)
