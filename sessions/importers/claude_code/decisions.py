"""What the learner decided inside a tool call: answers to AskUserQuestion, and the
words they gave when they rejected a call or a plan ("use pnpm").

Claude Code records these in the tool result, which the reader only sees folded inside
the call; the tutor's next reply answers them. So they become the learner's own turns,
right after the call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

REJECTED = "The user doesn't want to proceed with this tool use"
# How Claude Code introduces what the learner typed: older versions, then newer ones.
_SAID = ("the user said:", "The user provided the following reason for the rejection:")
# Where an answer ends in the result's text ("Q"="A", "Q2"="A2". You can now continue).
_ANSWER_ENDS = ('", "', '". ', '"\n', '".')


@dataclass
class Answer:
    question: str
    options: list[str]
    chosen: list[str]


def rejection_reason(text: str) -> str | None:
    """What the learner typed when they rejected the call, if they typed anything."""
    start = text.find(REJECTED)
    if start < 0:
        return None
    for said in _SAID:
        at = text.find(said, start)
        if at >= 0:
            return text[at + len(said) :].strip() or None
    return None


def answers(params: Any, detail: Any, text: str) -> list[Answer]:
    """The questions asked and what the learner chose, from the structured result when
    it is there (toolUseResult.answers), else from the result's text."""
    questions = _questions(detail) or _questions(params)
    given = detail.get("answers") if isinstance(detail, dict) else None
    found = []
    for question, options in questions:
        if isinstance(given, dict) and question in given:
            chosen = given[question]
            picked = [str(c) for c in chosen] if isinstance(chosen, list) else [str(chosen)]
        else:
            picked = _answer_in_text(text, question)
        if picked:
            found.append(Answer(question=question, options=options, chosen=picked))
    return found


def _questions(holder: Any) -> list[tuple[str, list[str]]]:
    return [(question, [label for label, _ in options]) for question, options in _asked(holder)]


def _asked(holder: Any) -> list[tuple[str, list[tuple[str, str]]]]:
    """Each question with its options, as (label, description)."""
    raw = holder.get("questions") if isinstance(holder, dict) else None
    questions = []
    for item in raw if isinstance(raw, list) else []:
        if isinstance(item, dict) and isinstance(item.get("question"), str):
            options = item.get("options")
            labelled = [
                (str(o.get("label", "")), str(o.get("description") or ""))
                for o in (options if isinstance(options, list) else [])
                if isinstance(o, dict)
            ]
            questions.append((item["question"], labelled))
    return questions


def _answer_in_text(text: str, question: str) -> list[str]:
    marker = f'"{question}"="'
    at = text.find(marker)
    if at < 0:
        return []
    start = at + len(marker)
    ends = [end for end in (text.find(stop, start) for stop in _ANSWER_ENDS) if end >= 0]
    answer = text[start : min(ends)] if ends else text[start:].rstrip('"')
    return [answer] if answer.strip() else []


def describe_questions(found: list[Answer], params: Any) -> str:
    """The questions as the learner saw them, each chosen option marked."""
    chosen_by_question = {a.question: a.chosen for a in found}
    parts = []
    for question, options in _asked(params):
        chosen = chosen_by_question.get(question, [])
        labels = [label for label, _ in options]
        lines = [
            f"- {'**✔ ' + label + '**' if label in chosen else label}"
            + (f" — {description}" if description else "")
            for label, description in options
        ]
        lines += [f"- **✔ {c}** *(typed)*" for c in chosen if c not in labels]
        parts.append("\n".join([f"**{question}**", "", *lines]))
    return "\n\n".join(parts)


def answers_markdown(found: list[Answer]) -> str:
    """The learner's answers, each under the question it answers."""
    return "\n\n".join(
        f"> {a.question}\n\n" + "\n".join(f"**{c}**" for c in a.chosen) for a in found
    )
