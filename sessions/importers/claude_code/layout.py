"""Which files make one recorded session: the main transcript and its sub-agents'.

Claude Code writes a session as `<id>.jsonl`, and since 2.1 its sub-agents as
`<id>/subagents/agent-<agentId>.jsonl`, each with an `agent-<agentId>.meta.json` beside it
that names the call which started it (`toolUseId`). Older versions wrote sub-agents as
`agent-<hash>.jsonl` next to the sessions, with the parent's sessionId in every line.
A person may name the main file, the session's folder, or a sub-agent's file alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from sessions.importers.specs import ImportProblem

# Sibling files looked at for the older flat layout (one line each).
MAX_SIBLINGS = 2000
HEAD_BYTES = 16 * 1024


@dataclass
class Layout:
    main: Path
    agents: list[Path] = field(default_factory=list)  # sub-agent files joined to it
    # From the sidecars: agentId → the toolUseId of the call that started it, and what
    # the agent was asked to do (its description), by agentId.
    calls: dict[str, str] = field(default_factory=dict)
    descriptions: dict[str, str] = field(default_factory=dict)

    @property
    def files(self) -> list[Path]:
        return [self.main, *self.agents]

    def name_of(self, path: Path) -> str:
        """A joined file's name relative to the main file's folder."""
        try:
            return str(path.relative_to(self.main.parent))
        except ValueError:
            return path.name


def find_layout(path: Path) -> Layout:
    """The main transcript at or in `path`, and the sub-agent files that belong to it."""
    main = _main_file(path)
    layout = Layout(main=main)
    if main.suffix != ".jsonl":
        return layout  # an export, or a transcript under another name: alone
    if _is_agent_file(main):
        _read_sidecar(layout, main)  # a sub-agent alone: its description names it
        return layout
    folder = main.with_suffix("") / "subagents"
    if folder.is_dir():
        layout.agents = sorted(folder.rglob("agent-*.jsonl"))
    else:
        layout.agents = _flat_agents(main)
    for agent in layout.agents:
        _read_sidecar(layout, agent)
    return layout


def _is_agent_file(path: Path) -> bool:
    return path.name.startswith("agent-") or path.parent.name == "subagents"


def _main_file(path: Path) -> Path:
    if not path.is_dir():
        return path  # a file; opening it says what is wrong with it, if anything
    beside = path.with_suffix(".jsonl")
    if (path / "subagents").is_dir() and beside.is_file():
        return beside  # <id>/ named, <id>.jsonl beside it
    inside = sorted(p for p in path.glob("*.jsonl") if not _is_agent_file(p))
    if len(inside) == 1:
        return inside[0]
    if not inside:
        raise ImportProblem(f"The folder {path} holds no session transcript (*.jsonl).")
    raise ImportProblem(
        f"The folder {path} holds {len(inside)} session transcripts: import them one by one."
    )


def _read_sidecar(layout: Layout, agent: Path) -> None:
    sidecar = agent.with_name(agent.name.removesuffix(".jsonl") + ".meta.json")
    agent_id = agent.name.removesuffix(".jsonl").removeprefix("agent-")
    try:
        meta = json.loads(sidecar.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if not isinstance(meta, dict):
        return
    if isinstance(meta.get("toolUseId"), str):
        layout.calls[agent_id] = meta["toolUseId"]
    for key in ("description", "agentType"):
        if isinstance(meta.get(key), str) and meta[key].strip():
            layout.descriptions[agent_id] = meta[key].strip()
            break


def _session_id(path: Path) -> str:
    """The sessionId of the first line that has one, from the start of the file."""
    try:
        with path.open("rb") as handle:
            head = handle.read(HEAD_BYTES)
    except OSError:
        return ""
    for raw in head.split(b"\n")[:50]:
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if isinstance(line, dict) and isinstance(line.get("sessionId"), str):
            return str(line["sessionId"])
    return ""


def _flat_agents(main: Path) -> list[Path]:
    """Older layout: agent-*.jsonl files beside the main one, with its sessionId."""
    siblings = sorted(main.parent.glob("agent-*.jsonl"))[:MAX_SIBLINGS]
    if not siblings:
        return []
    session = _session_id(main)
    return [agent for agent in siblings if session and _session_id(agent) == session]
