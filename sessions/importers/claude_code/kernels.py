"""Rebuilding WGSL kernel versions from what a transcript shows of the files.

A recorded session never stores the kernels themselves, only the tool calls that wrote
and edited them and the messages that pasted them. `KernelHistory` replays those in
order and reports each new version of each kernel:

- Write on a `.wgsl` file: the new content, exactly (how: "write").
- Edit/MultiEdit: applied to `toolUseResult.originalFile` when the result carries it
  ("edit_original"); otherwise to the previous version we rebuilt ("reconstructed");
  when an old_string is not there to replace, the version is kept but marked
  "unresolved" and holds the best source we have.
- A full Read of a tracked file whose content differs from what we rebuilt: the learner
  changed it in their editor ("read").
- JS/TS and HTML files (scripts.py reads them): each template string that holds a
  `@compute` shader is a kernel of its own ("template_string"), as is a WGSL `<script>`
  in a page ("script_tag"), updated when that shader's text changes. A file that is a
  whole WebGPU program (a `.js` or `.html` file that asks for a device) also gives its
  host code to the kernel of its first shader: that kernel gets a new version when its
  shader or the host code changes, and each replays as a program.
- Fenced ```wgsl blocks in the learner's messages that hold a `@compute` entry point
  ("fenced").
- Python and CUDA files (gpu_sources.py reads them): each `@triton.jit` function and each
  `__global__` function (in a `.cu`/`.cuh` file or a Python string that load_inline or
  cupy compiles) is a kernel of its own, followed across versions of its file as a
  page's shaders are; a change of the rest of the script (its launcher, test or
  benchmark) alone is a version of its first kernel, since the program runs differently.
  A script that is a Triton or CUDA program becomes the state's entry, and the state's
  kind is its ("triton", "cuda"); such versions replay by running the state's program on
  a GPU worker, not by a host program of their own.

Program states: every successful Write or Edit of a file under the project's folder (the
transcript's cwd), and a full Read that shows the learner changed one, makes a new state of
the project (`NewState`): every file as it stands then, by its path in the project, and
its entry, the last page or script written that is a whole WebGPU program. A version
made by that call belongs to that state and carries the entry's host code, so its replay
runs the state's program; a `.wgsl` file's version does when the entry names the file.

A shader in a page or script is followed across versions of its file by what it is, not
where it is: the same text, else the closest earlier shader of the file (the share of
lines they have in common, helped by the same variable or label), else it is a new
kernel. Four `fn main` shaders that replace one another are four kernels.

Kernel names (slugs, stable across re-imports of the same or a longer transcript):

- `.wgsl` file: the file stem (`kernels/matmul_tiled.wgsl` → `matmul_tiled`). A second
  file with the same stem in another folder gets its folder as a prefix
  (`naive/matmul.wgsl` → `naive-matmul`), then a number if that is taken too.
- Shader in a JS/TS template string or an HTML page: file stem and its first `@compute`
  entry point (`src/pipeline.js`, `fn reduce_sum` → `pipeline-reduce_sum`); another
  shader of the file with the same entry point name gets `-2`, in the order they first
  appear (a name, once given, stays with the shader's lineage).
- Learner's fenced block: a leading comment naming a `.wgsl` file (`// matmul.wgsl`)
  joins that file's kernel; otherwise a block whose entry points match exactly one
  existing kernel continues it; otherwise its first entry point names it ("snippet"
  when that is just "main").

Names are slugified and cut to 60 characters; every name is unique in its session.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field
from typing import Any

from django.utils.text import slugify

# The engine's tokenizer: one linear pass, block comments nested as WGSL says.
from kernels.engine.wgsl import entry_points
from sessions.importers.claude_code.edits import apply_edits, edits_made
from sessions.importers.claude_code.gpu_sources import (
    GPU_SUFFIXES,
    gpu_versions,
    read_gpu_program,
)
from sessions.importers.claude_code.likeness import likeness
from sessions.importers.claude_code.scripts import (
    HTML_SUFFIXES,
    RUNNABLE_SUFFIXES,
    SCRIPT_SUFFIXES,
    Program,
    Shader,
    read_program,
)

WGSL_SUFFIXES = (".wgsl",)
TRACKED_SUFFIXES = WGSL_SUFFIXES + SCRIPT_SUFFIXES + HTML_SUFFIXES + GPU_SUFFIXES
NAME_MAX = 60
# How alike two shaders must be to be one shader's versions: the share of their lines
# in common (Dice's coefficient over the stripped lines that hold a word: not blank, not
# comments, not lone braces), lower when the code gives both the same label. Two small
# `fn main` shaders share about half their lines by boilerplate alone (the attribute, the
# signature, the index); a fix keeps most of them.
SAME_SHADER = 0.55
SAME_NAMED_SHADER = 0.3
# A project path a program can fetch() (sessions.programs.FILE_NAME).
# The characters a project file's name may hold for a program to fetch it by that name.
_PATH_CHARACTERS = frozenset(string.ascii_letters + string.digits + "_.-")

_FENCE = re.compile(
    r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})[ \t]*wgsl\b[^\n]*\n(?P<body>.*?)"
    r"(?:^ {0,3}(?P=fence)[`~]*[ \t]*$|\Z)",
    re.M | re.S | re.I,
)
_FILE_COMMENT = re.compile(r"^\s*//\s*(?:file(?:name)?:\s*)?(\S+\.wgsl)\b", re.I)


def _path_parts(path: str) -> list[str]:
    return [part for part in re.split(r"[\\/]+", path) if part]


def _stem(path: str) -> str:
    name = _path_parts(path)[-1] if _path_parts(path) else path
    return name.rsplit(".", 1)[0] if "." in name else name


def _slug(text: str) -> str:
    return slugify(text)[:NAME_MAX].strip("-_") or "kernel"


def fenced_wgsl(text: str) -> list[str]:
    """The bodies of ```wgsl fenced blocks that hold a @compute entry point."""
    return [m["body"] for m in _FENCE.finditer(text) if entry_points(m["body"])]


@dataclass
class NewVersion:
    kernel: str
    number: int
    source: str
    meta: dict[str, Any]
    note: str = ""
    new_kernel: bool = False
    kernel_title: str = ""
    host_program: str = ""
    state: int | None = None  # the number of the program state it was written in


@dataclass
class NewState:
    """The project after a tool call changed it: every file by its path in the project."""

    number: int
    entry: str  # the page or script whose program runs ("" when none can)
    files: dict[str, str]
    changed: str  # the path this call wrote
    # The shader modules its files hold, as (kernel name, version number).
    modules: list[tuple[str, int]] = field(default_factory=list)
    kind: str = "webgpu"  # the entry's: "webgpu", "triton" or "cuda"


@dataclass
class _Kernel:
    name: str
    number: int = 0
    source: str | None = None
    host: str = ""
    entries: tuple[str, ...] = ()
    variable: str = ""
    label: str = ""


@dataclass
class Outcome:
    """How a tool call ended, as far as versions care."""

    ok: bool
    result: Any = None  # the line's toolUseResult (dict, list, string or None)


@dataclass
class KernelHistory:
    cwd: str = ""
    kernels: dict[str, _Kernel] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # path → last known content
    path_names: dict[str, str] = field(default_factory=dict)
    # Edits that produced no version, for the report: (path, why).
    unresolved: list[tuple[str, str]] = field(default_factory=list)
    # The project: every file under cwd the transcript wrote or read, by relative path.
    project: dict[str, str] = field(default_factory=dict)
    states: int = 0
    entry: str = ""
    kind: str = "webgpu"  # the kind of program the entry is
    # The state the last tool call made, until the caller takes it (take_state).
    new_state: NewState | None = None
    # Each program file's kernels, in the order they first appeared, and its host code.
    file_kernels: dict[str, list[str]] = field(default_factory=dict)
    file_hosts: dict[str, str] = field(default_factory=dict)
    # Where the lines of each host code read are in its file, by the host code: a
    # version carries its host code's in meta["host_lines"] (kernels/program_lines.py).
    host_lines: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Each project file's shader modules now, by its path in the project.
    file_modules: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    # The kernel of each page whose program ran before it held any shader module.
    program_kernels: dict[str, str] = field(default_factory=dict)

    # Naming ------------------------------------------------------------------

    def _unique(self, base: str) -> str:
        base = _slug(base)
        if base not in self.kernels:
            return base
        n = 2
        while True:
            suffix = f"-{n}"
            name = base[: NAME_MAX - len(suffix)] + suffix
            if name not in self.kernels:
                return name
            n += 1

    def title_for(self, path: str) -> str:
        root = self.cwd.rstrip("/\\")
        if root and path.startswith(root) and path[len(root) : len(root) + 1] in ("/", "\\"):
            return path[len(root) + 1 :]
        parts = _path_parts(path)
        return "/".join(parts[-2:]) if parts else path

    def _wgsl_name(self, path: str) -> str:
        if path in self.path_names:
            return self.path_names[path]
        stem = _slug(_stem(path))
        parts = _path_parts(path)
        # A learner's block that named this file ("// matmul.wgsl") started its history.
        pasted = f"(fenced)/{parts[-1] if parts else path}"
        if pasted in self.path_names and not any(
            _stem(p) == _stem(path) for p in self.path_names if p != pasted
        ):
            self.path_names[path] = self.path_names[pasted]
            return self.path_names[path]
        if stem in self.kernels and len(parts) > 1:
            stem = _slug(f"{parts[-2]}-{_stem(path)}")
        name = self._unique(stem)
        self.path_names[path] = name
        return name

    def _lineage(self, path: str, shaders: tuple[Shader, ...]) -> list[str]:
        """The kernel each shader of a file's new text continues, or a new one's name."""
        known = self.file_kernels.setdefault(path, [])
        names: list[str | None] = [None] * len(shaders)
        free = list(known)
        for i, shader in enumerate(shaders):
            same = next((n for n in free if self.kernels[n].source == shader.source), None)
            if same is not None:
                names[i] = same
                free.remove(same)
        pairs = []
        for i, shader in enumerate(shaders):
            if names[i] is not None:
                continue
            for name in free:
                kernel = self.kernels[name]
                alike = likeness(kernel.source or "", shader.source)
                # A label is given on purpose; a variable (`shader`, `code`) may be
                # reused for whatever the page runs now, so it only breaks ties.
                labelled = bool(shader.label and shader.label == kernel.label)
                same_variable = bool(shader.variable and shader.variable == kernel.variable)
                if alike >= (SAME_NAMED_SHADER if labelled else SAME_SHADER):
                    pairs.append((labelled, alike, same_variable, -i, name))
        for *_, minus_i, name in sorted(pairs, reverse=True):
            if names[-minus_i] is None and name in free:
                names[-minus_i] = name
                free.remove(name)
        for i, shader in enumerate(shaders):
            if names[i] is None:
                name = self._unique(f"{_stem(path)}-{shader.entry}")
                self.kernels[name] = _Kernel(name=name)  # the name is taken from now
                names[i] = name
                known.append(name)
        return [name for name in names if name is not None]

    # Recording ---------------------------------------------------------------

    def _record(
        self,
        name: str,
        source: str,
        meta: dict[str, Any],
        title: str,
        note: str = "",
        force: bool = False,
        host: str | None = None,
        shader: Shader | None = None,
    ) -> NewVersion | None:
        """A new version of the kernel when its source or host code changed (host None:
        the kernel keeps the host code it has, as for a pasted block of its shader)."""
        kernel = self.kernels.get(name)
        if kernel is None:
            kernel = self.kernels[name] = _Kernel(name=name)
        new_kernel = kernel.number == 0
        host = kernel.host if host is None else host
        if not new_kernel and (kernel.source, kernel.host) == (source, host) and not force:
            return None  # unchanged: not a new version
        if host and (lines := self.host_lines.get(host)):
            meta = {**meta, "host_lines": lines}
        kernel.number += 1
        kernel.source = source
        kernel.host = host
        kernel.entries = tuple(entry_points(source))
        if shader is not None:
            kernel.variable, kernel.label = shader.variable, shader.label
        return NewVersion(
            kernel=name,
            number=kernel.number,
            source=source,
            meta=meta,
            note=note,
            new_kernel=new_kernel,
            kernel_title=title,
            host_program=host,
        )

    def _file_changed(
        self, path: str, content: str, meta: dict[str, Any], note: str = "", force: bool = False
    ) -> list[NewVersion]:
        self.files[path] = content
        state = self._project_changed(path, content)
        meta = {"file_path": path, **meta}
        if path.lower().endswith(GPU_SUFFIXES):
            return gpu_versions(self, path, content, meta, note, state)
        if path.lower().endswith(WGSL_SUFFIXES):
            if relative := self.project_path(path):
                meta["project_path"] = relative
            version = self._record(
                self._wgsl_name(path),
                content,
                meta,
                self.title_for(path),
                note,
                force,
                host=self._host_fetching(path),
            )
            self._modules_of(path, [self._wgsl_name(path)], state)
            return self._in_state([version] if version else [], state, path)
        program = self._program(path, content)
        names = self._lineage(path, program.shaders)
        host_changed = self.file_hosts.get(path) != program.host
        self.file_hosts[path] = program.host
        versions = []
        for number, (name, shader) in enumerate(zip(names, program.shaders, strict=True)):
            changed = self.kernels[name].source != shader.source
            # A change of the host code alone is a version of the file's first shader.
            if not changed and not (number == 0 and host_changed):
                continue
            shader_meta = {**meta, "container": shader.container, "entry_point": shader.entry}
            if shader.substituted:
                shader_meta["substituted"] = True
            if program.host:
                shader_meta["program"] = True
            title = f"{self.title_for(path)} · fn {shader.entry}"
            version = self._record(
                name, shader.source, shader_meta, title, note, host=program.host, shader=shader
            )
            if version:
                versions.append(version)
        if program.host and not program.shaders and host_changed:
            versions += self._fetched_shaders(program.host, meta, note)
            if not versions and state is not None and state.entry == self.project_path(path):
                versions += self._shaderless(path, program.host, meta, note)
        self._modules_of(path, names, state)
        return self._in_state(versions, state, path)

    def _shaderless(
        self, path: str, host: str, meta: dict[str, Any], note: str
    ) -> list[NewVersion]:
        """A page that is its state's program but holds no shader module yet (a first page
        that makes a buffer and reads it back): a version of the program's own kernel,
        named after the file, whose WGSL is empty, so its turn replays that program."""
        name = self.program_kernels.get(path)
        if name is None:
            name = self.program_kernels[path] = self._unique(_stem(path))
        title = f"{self.title_for(path)} · the page's program"
        version = self._record(name, "", {**meta, "program": True}, title, note, host=host)
        return [version] if version else []

    def _fetched_shaders(self, host: str, meta: dict[str, Any], note: str) -> list[NewVersion]:
        """A program whose shaders are .wgsl files it fetches: a change of its host code
        is a version of each such file's kernel (the same WGSL, run by the new code)."""
        versions = []
        for wgsl_path, name in self.path_names.items():
            kernel = self.kernels.get(name)
            base = _path_parts(wgsl_path)[-1] if _path_parts(wgsl_path) else ""
            if wgsl_path.startswith("(fenced)") or kernel is None or kernel.source is None:
                continue
            if not base or base not in host:
                continue
            wgsl_meta = {**meta, "file_path": wgsl_path, "how": "host_changed"}
            if relative := self.project_path(wgsl_path):
                wgsl_meta["project_path"] = relative
            title = self.title_for(wgsl_path)
            if version := self._record(name, kernel.source, wgsl_meta, title, note, host=host):
                versions.append(version)
        return versions

    def _in_state(
        self, versions: list[NewVersion], state: NewState | None, path: str
    ) -> list[NewVersion]:
        """The versions, each in the state this call made (or, for a file the project
        holds as it was, the last state; for a file outside the project, none)."""
        number = state.number if state else None
        if state is None and self.project_path(path) is not None:
            number = self.states or None
        for version in versions:
            version.state = number
        return versions

    def _modules_of(self, path: str, names: list[str], state: NewState | None) -> None:
        """Record the shader modules the file holds now; the state lists the project's."""
        relative = self.project_path(path)
        if relative is None:
            return
        self.file_modules[relative] = [
            (name, self.kernels[name].number) for name in names if self.kernels[name].number
        ]
        if state is not None:
            state.modules = self._modules()

    def _modules(self) -> list[tuple[str, int]]:
        """The shader modules of the project's files, in path order: (kernel, version)."""
        return [
            module for path in sorted(self.project) for module in self.file_modules.get(path, [])
        ]

    # The project ----------------------------------------------------------------

    def project_path(self, path: str) -> str | None:
        """The path of a file in the project (relative to cwd), or None when it is
        outside it or has a name a program could not fetch."""
        root = self.cwd.rstrip("/\\")
        parts = _path_parts(path)
        if root:
            if not (path.startswith(root) and path[len(root) : len(root) + 1] in ("/", "\\")):
                return None
            parts = _path_parts(path[len(root) + 1 :])
        elif parts:
            parts = parts[-1:]
        relative = "/".join(parts)
        if len(relative) > 200 or ".." in parts:
            return None
        if not parts or not all(part and set(part) <= _PATH_CHARACTERS for part in parts):
            return None
        return relative

    def _project_changed(self, path: str, content: str) -> NewState | None:
        """A new state when the file is in the project and its content is new there."""
        relative = self.project_path(path)
        if relative is None or self.project.get(relative) == content:
            return None
        self.project[relative] = content
        if relative.lower().endswith(RUNNABLE_SUFFIXES) and self._program(relative, content).host:
            self.entry, self.kind = relative, "webgpu"
        elif relative.lower().endswith(GPU_SUFFIXES) and (
            kind := read_gpu_program(relative, content).kind
        ):
            self.entry, self.kind = relative, kind
        self.states += 1
        self.new_state = NewState(
            self.states, self.entry, dict(self.project), relative, self._modules(), self.kind
        )
        return self.new_state

    def take_state(self) -> NewState | None:
        """The state the last tool call made (once)."""
        state, self.new_state = self.new_state, None
        return state

    def _program(self, path: str, content: str) -> Program:
        """The file's program, its host code's lines kept (host_lines)."""
        program = read_program(path, content)
        if program.host:
            parts = _path_parts(path)
            name = self.project_path(path) or (parts[-1] if parts else path)
            starts = [list(start) for start in program.lines] or [[1, 1]]
            self.host_lines[program.host] = {"file": name, "starts": starts}
        return program

    def _host_fetching(self, path: str) -> str:
        """The entry's host code when it names this file (a page that fetch()es its
        shader from a .wgsl file), else ""."""
        if not self.entry:
            return ""
        host = self._program(self.entry, self.project[self.entry]).host
        name = _path_parts(path)[-1] if _path_parts(path) else path
        return host if name in host else ""

    def tool_call(
        self, tool: str, params: Any, outcome: Outcome, meta: dict[str, Any]
    ) -> list[NewVersion]:
        """The versions a finished tool call produced (none for failed or rejected ones)."""
        if not isinstance(params, dict):
            return []
        path = params.get("file_path")
        if not isinstance(path, str) or not outcome.ok:
            return []
        if not path.lower().endswith(TRACKED_SUFFIXES):
            self._other_file(tool, path, params, outcome)
            return []
        result = outcome.result if isinstance(outcome.result, dict) else {}
        meta = {"tool": tool, **meta}
        if tool == "Write" and isinstance(params.get("content"), str):
            return self._file_changed(path, params["content"], {**meta, "how": "write"})
        if tool in ("Edit", "MultiEdit"):
            return self._edit(tool, path, params, result, meta)
        if tool == "Read":
            return self._read(path, result, meta)
        return []

    def _other_file(self, tool: str, path: str, params: dict[str, Any], outcome: Outcome) -> None:
        """A file that holds no kernel, written or edited: the project changes."""
        result = outcome.result if isinstance(outcome.result, dict) else {}
        relative = self.project_path(path)
        if relative is None:
            return
        if tool == "Write" and isinstance(params.get("content"), str):
            self._project_changed(path, params["content"])
        elif tool in ("Edit", "MultiEdit"):
            base = result.get("originalFile")
            if not isinstance(base, str):
                base = self.project.get(relative)
            edits = edits_made(tool, params, result)
            if base is None and not (edits and all(e.get("old_string") == "" for e in edits)):
                return
            text, missing = apply_edits(base or "", edits)
            if not missing:
                self._project_changed(path, text)

    def _edit(
        self,
        tool: str,
        path: str,
        params: dict[str, Any],
        result: dict[str, Any],
        meta: dict[str, Any],
    ) -> list[NewVersion]:
        edits = edits_made(tool, params, result)
        if isinstance(result.get("originalFile"), str):
            base, how = result["originalFile"], "edit_original"
        elif path in self.files:
            base, how = self.files[path], "reconstructed"
        elif all(e.get("old_string") == "" for e in edits) and edits:
            base, how = "", "reconstructed"  # an Edit with an empty old_string creates a file
        else:
            self.unresolved.append((path, "edited before any version of it was seen"))
            return []
        text, missing = apply_edits(base, edits)
        if result.get("userModified"):
            meta["user_modified"] = True
        if missing:
            if not path.lower().endswith(WGSL_SUFFIXES):
                self.unresolved.append((path, "an edit's old_string is not in the file"))
                return []
            meta = {**meta, "how": "unresolved", "base": how, "missing_edits": missing}
            # Kept so the timeline shows that something changed here, honestly labelled.
            return self._file_changed(path, text, meta, note="unresolved edit", force=True)
        note = "reconstructed" if how == "reconstructed" else ""
        return self._file_changed(path, text, {**meta, "how": how}, note=note)

    def _read(self, path: str, result: dict[str, Any], meta: dict[str, Any]) -> list[NewVersion]:
        file = result.get("file")
        if not isinstance(file, dict) or not isinstance(file.get("content"), str):
            return []
        total, lines = file.get("totalLines"), file.get("numLines")
        whole = file.get("startLine", 1) in (0, 1) and (total is None or lines == total)
        if not whole or self.files.get(path) == file["content"]:
            return []
        return self._file_changed(path, file["content"], {**meta, "how": "read"})

    def learner_text(self, text: str, meta: dict[str, Any]) -> list[NewVersion]:
        """Versions from ```wgsl blocks in a learner's message."""
        versions = []
        for body in fenced_wgsl(text):
            name = self._fenced_name(body)
            named = _FILE_COMMENT.search("\n".join(body.splitlines()[:3]))
            title = named[1] if named else "from a learner's message"
            version = self._record(name, body, {**meta, "how": "fenced"}, title)
            if version:
                versions.append(version)
        return versions

    def _fenced_name(self, body: str) -> str:
        head = "\n".join(body.splitlines()[:3])
        if m := _FILE_COMMENT.search(head):
            stem = _stem(m[1])
            paths = [p for p in self.path_names if _stem(p) == stem]
            if len(paths) == 1:
                return self.path_names[paths[0]]
            return self.path_names.setdefault(f"(fenced)/{m[1]}", self._unique(stem))
        entries = tuple(entry_points(body))
        same = [k.name for k in self.kernels.values() if k.entries == entries]
        if len(same) == 1:
            return same[0]
        first = entries[0]
        return self._unique("snippet" if first == "main" else first)
