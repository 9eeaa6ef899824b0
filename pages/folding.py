"""Sub-agents' conversations folded under the call that started them, and the views of a
session page (all turns, prompts only, without tools, without sub-agents).

An importer marks each turn of a sub-agent with its depth (Turn.meta["depth"]), in the
order it happened, right after its call. A page is made of main-line turns (depth 0),
each followed by what is folded under it, so a run of 200 sub-agent turns never pushes
the main thread onto later pages.
"""

from __future__ import annotations

from django.db.models import Case, Count, Q, QuerySet, Sum, When

from sessions.models import Turn

# ?show=…: what a reader may filter a session page to (the default shows everything).
VIEWS = {
    "prompts": "Prompts only",
    "no-tools": "Without tools",
    "no-agents": "Without sub-agents",
}


def view_of(raw: str | None) -> str:
    """The view asked for; anything unknown is the whole session (one cache entry)."""
    return raw if raw in VIEWS else ""


def filtered(turns: QuerySet[Turn], view: str) -> QuerySet[Turn]:
    if view == "prompts":
        return turns.filter(role=Turn.Role.LEARNER)
    if view == "no-tools":
        return turns.exclude(role=Turn.Role.TOOL).exclude(meta__has_key="depth")
    if view == "no-agents":
        return turns.exclude(meta__has_key="depth")
    return turns


def main_line(turns: QuerySet[Turn]) -> QuerySet[Turn]:
    """The turns a page is counted in: not those folded under another."""
    return turns.exclude(meta__has_key="depth")


def counts(turns: QuerySet[Turn]) -> tuple[int, int]:
    """(main-line turns, all turns), in one query."""
    found = turns.aggregate(
        total=Count("*"), main=Sum(Case(When(~Q(meta__has_key="depth"), then=1), default=0))
    )
    return found["main"] or 0, found["total"]


def _depth(turn: Turn) -> int:
    depth = turn.meta.get("depth", 0)
    return depth if isinstance(depth, int) else 0


def fold(turns: list[Turn]) -> list[Turn]:
    """The turns at the top of the page; each turn a sub-agent's turns follow holds them,
    in turn.folded (nested as deep as the agents were), and a summary in turn.agent_label."""
    top: list[Turn] = []
    stack: list[tuple[int, Turn]] = []  # (depth, turn) of the turns that may hold others
    for turn in turns:
        turn.folded = []
        depth = _depth(turn)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        if stack:
            stack[-1][1].folded.append(turn)
        else:
            top.append(turn)  # the page starts inside a fold: shown as it is
        stack.append((depth, turn))
    for turn in turns:
        if turn.folded:
            turn.agent_label = agent_label(turn)
    return top


def agent_label(turn: Turn) -> str:
    """ "Sub-agent · Explore · claude-haiku-4-5 · 12 calls · 1 min 5 s": what the importer
    recorded of the agent (meta["agent"]), else what the folded turns show."""
    agent = turn.meta.get("agent") if isinstance(turn.meta.get("agent"), dict) else {}
    folded = turn.folded
    calls = agent.get("calls", sum(1 for t in folded if t.role == Turn.Role.TOOL))
    parts = ["Sub-agent"]
    if agent.get("type"):
        parts.append(str(agent["type"]))
    if agent.get("model"):
        parts.append(str(agent["model"]))
    parts.append(f"{calls} call{'s' if calls != 1 else ''}")
    parts.append(f"{len(folded)} turn{'s' if len(folded) != 1 else ''}")
    if isinstance(agent.get("duration_ms"), int):
        parts.append(duration(agent["duration_ms"]))
    if isinstance(agent.get("tokens"), int):
        parts.append(f"{agent['tokens']:,} tokens")
    return " · ".join(parts)


def duration(ms: int) -> str:
    seconds = round(ms / 1000)
    if seconds < 60:
        return f"{max(ms, 0) / 1000:.1f} s" if ms < 10_000 else f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"
