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

Kernel names (slugs, stable across re-imports of the same or a longer transcript):

- `.wgsl` file: the file stem (`kernels/matmul_tiled.wgsl` → `matmul_tiled`). A second
  file with the same stem in another folder gets its folder as a prefix
  (`naive/matmul.wgsl` → `naive-matmul`), then a number if that is taken too.
- Shader in a JS/TS template string or an HTML page: file stem and its first `@compute`
  entry point (`src/pipeline.js`, `fn reduce_sum` → `pipeline-reduce_sum`); a second
  shader in the same file with the same entry point name gets `-2`, in file order.
- Learner's fenced block: a leading comment naming a `.wgsl` file (`// matmul.wgsl`)
  joins that file's kernel; otherwise a block whose entry points match exactly one
  existing kernel continues it; otherwise its first entry point names it ("snippet"
  when that is just "main").

Names are slugified and cut to 60 characters; every name is unique in its session.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from django.utils.text import slugify

# The engine's tokenizer: one linear pass, block comments nested as WGSL says.
from kernels.engine.wgsl import entry_points
from sessions.importers.claude_code.scripts import HTML_SUFFIXES, SCRIPT_SUFFIXES, read_program

WGSL_SUFFIXES = (".wgsl",)
TRACKED_SUFFIXES = WGSL_SUFFIXES + SCRIPT_SUFFIXES + HTML_SUFFIXES
NAME_MAX = 60

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


@dataclass
class _Kernel:
    name: str
    number: int = 0
    source: str | None = None
    host: str = ""
    entries: tuple[str, ...] = ()


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
    shader_names: dict[tuple[str, str, int], str] = field(default_factory=dict)
    # Edits that produced no version, for the report: (path, why).
    unresolved: list[tuple[str, str]] = field(default_factory=list)

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

    def _shader_name(self, path: str, entry: str, ordinal: int) -> str:
        key = (path, entry, ordinal)
        if key not in self.shader_names:
            base = f"{_stem(path)}-{entry}" + (f"-{ordinal + 1}" if ordinal else "")
            self.shader_names[key] = self._unique(base)
        return self.shader_names[key]

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
    ) -> NewVersion | None:
        """A new version of the kernel when its source or host code changed (host None:
        the kernel keeps the host code it has, as for a pasted block of its shader)."""
        kernel = self.kernels.get(name)
        new_kernel = kernel is None
        if kernel is None:
            kernel = self.kernels[name] = _Kernel(name=name)
        host = kernel.host if host is None else host
        if not new_kernel and (kernel.source, kernel.host) == (source, host) and not force:
            return None  # unchanged: not a new version
        kernel.number += 1
        kernel.source = source
        kernel.host = host
        kernel.entries = tuple(entry_points(source))
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
        meta = {"file_path": path, **meta}
        if path.lower().endswith(WGSL_SUFFIXES):
            version = self._record(
                self._wgsl_name(path), content, meta, self.title_for(path), note, force
            )
            return [version] if version else []
        program = read_program(path, content)
        versions = []
        seen: dict[str, int] = {}
        for number, shader in enumerate(program.shaders):
            ordinal = seen.get(shader.entry, 0)
            seen[shader.entry] = ordinal + 1
            shader_meta = {**meta, "container": shader.container, "entry_point": shader.entry}
            if shader.substituted:
                shader_meta["substituted"] = True
            # The program belongs to its first shader's kernel; the others are shaders only.
            host = program.host if number == 0 else ""
            if host:
                shader_meta["program"] = True
            title = f"{self.title_for(path)} · fn {shader.entry}"
            name = self._shader_name(path, shader.entry, ordinal)
            if version := self._record(name, shader.source, shader_meta, title, note, host=host):
                versions.append(version)
        return versions

    def tool_call(
        self, tool: str, params: Any, outcome: Outcome, meta: dict[str, Any]
    ) -> list[NewVersion]:
        """The versions a finished tool call produced (none for failed or rejected ones)."""
        if not isinstance(params, dict):
            return []
        path = params.get("file_path")
        if not isinstance(path, str) or not path.lower().endswith(TRACKED_SUFFIXES):
            return []
        if not outcome.ok:
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

    def _edit(
        self,
        tool: str,
        path: str,
        params: dict[str, Any],
        result: dict[str, Any],
        meta: dict[str, Any],
    ) -> list[NewVersion]:
        edits: list[Any]
        if tool == "Edit":
            edits = [params]
            # The result says what was applied (the user may have changed the proposal).
            if isinstance(result.get("oldString"), str) and isinstance(
                result.get("newString"), str
            ):
                edits = [
                    {
                        "old_string": result["oldString"],
                        "new_string": result["newString"],
                        "replace_all": result.get("replaceAll", params.get("replace_all")),
                    }
                ]
        else:
            listed = params.get("edits")
            edits = listed if isinstance(listed, list) else []
        if isinstance(result.get("originalFile"), str):
            base, how = result["originalFile"], "edit_original"
        elif path in self.files:
            base, how = self.files[path], "reconstructed"
        elif all(isinstance(e, dict) and e.get("old_string") == "" for e in edits) and edits:
            base, how = "", "reconstructed"  # an Edit with an empty old_string creates a file
        else:
            self.unresolved.append((path, "edited before any version of it was seen"))
            return []
        text, missing = base, 0
        for edit in edits:
            old, new = (
                (edit.get("old_string"), edit.get("new_string"))
                if isinstance(edit, dict)
                else (None, None)
            )
            if not isinstance(old, str) or not isinstance(new, str):
                missing += 1
            elif old == "":
                text = text or new  # an empty old_string creates the file
            elif old in text:
                text = (
                    text.replace(old, new) if edit.get("replace_all") else text.replace(old, new, 1)
                )
            else:
                missing += 1
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
