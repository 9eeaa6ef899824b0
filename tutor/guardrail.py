"""The guardrail: a tutor reply never hands the learner a kernel.

The system prompt asks Claude not to write the kernel; this module makes sure, in code,
on every reply. It withholds:

- a fenced code block that holds a kernel marker (@compute, @workgroup_size, @group(,
  @binding(, var<storage|uniform|workgroup>, fn name( ) or more than MAX_CODE_LINES
  lines of code (for ```wgsl every line counts; a ```diff that adds any line is a
  correction and always withheld);
- a run of bare code lines outside fences (statements ending in ; { or }, let/var/for/if
  lines, attributes) that holds a marker or is longer than MAX_CODE_LINES;
- an inline `code span` holding a function or two or more statements (a quoted
  attribute such as `@workgroup_size(32)` passes: that points at the learner's line).

Up to two generic lines (a quoted line of the learner's, `let i = id.x;`) pass: the
tutor may point at code and show syntax, as CodeHelp allows.

While streaming, text is released only once its fate is settled: a fenced block when it
closes, a run of code lines when a non-code line ends it, a line that starts like prose
as it arrives (minus any open `code span`). redact() on the full text is the source of
truth; the streamed text is always a prefix of it, so nothing held back ever leaks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_CODE_LINES = 2
# A line is prose (never code) when its first PROSE_PREFIX characters read like words.
PROSE_PREFIX = 24

NOTE = (
    "*(Code withheld: the tutor explains and reviews, but the kernel is yours to write. "
    "Ask for the next hint if you are stuck.)*"
)
INLINE_NOTE = "`[code withheld]`"

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*([^\s`]*)")
MARKER = re.compile(
    r"@compute\b|@workgroup_size\b|@group\s*\(|@binding\s*\(|"
    r"\bvar\s*<\s*(?:storage|uniform|workgroup)\b|\bfn\s+\w+\s*\("
)
CODE_START = re.compile(
    r"^(?:@\w|fn\s|let\s|var\b|const\s|override\s|struct\s|alias\s|for\s*\(|if\s*\(|"
    r"else\b|while\b|loop\b|return\b|workgroupBarrier|storageBarrier|[{}]|"
    # an assignment: name, name.x, name[i] (op)= value
    r"[A-Za-z_]\w*(?:\.\w+|\[[^\]\n]*\])*\s*(?:[-+*/%&|^]|<<|>>)?=(?!=))"
)
CODE_END = re.compile(r"(?:;|\{|\}|\},|\};)\s*(?://.*)?$")
PROSE = re.compile(r"^(?:[-*+>] |\d+[.)] )?[A-Za-z\"'*_(][A-Za-z0-9 ,.'\"*_:?!()\[\]<>#+/`–—-]*$")
CALL = re.compile(r"\w\(")
BACKTICKS = re.compile(r"`+")
CODE_LANGUAGES_ALL_LINES = {"wgsl", "diff", "rust", "c", "cpp", "glsl", "hlsl", "cuda"}


@dataclass
class Finding:
    rule: str
    text: str


@dataclass
class Guarded:
    text: str
    findings: list[Finding] = field(default_factory=list)

    @property
    def redacted(self) -> bool:
        return bool(self.findings)

    @property
    def rules(self) -> list[str]:
        return sorted({f.rule for f in self.findings})

    @property
    def withheld(self) -> str:
        return "\n\n".join(f.text for f in self.findings)


def prose_start(line: str) -> bool:
    """Whether a line reads as prose from its first PROSE_PREFIX characters alone."""
    head = line.strip()[:PROSE_PREFIX]
    if len(head) < PROSE_PREFIX or head.count(" ") < 2:
        return False
    return bool(PROSE.match(head)) and not CALL.search(head) and not MARKER.search(head)


def is_code_line(line: str) -> bool:
    text = line.strip()
    if not text or prose_start(text):
        return False
    return bool(MARKER.match(text) or CODE_START.match(text) or CODE_END.search(text))


def _closes(line: str, opener: str) -> bool:
    stripped = line.strip()
    return (
        len(stripped) >= len(opener)
        and set(stripped) == {opener[0]}
        and len(line) - len(line.lstrip(" ")) <= 3
    )


def _fence_blocked(language: str, body: list[str]) -> bool:
    text = "".join(body)
    if MARKER.search(text):
        return True
    if language.lower() in ("diff", "patch") and any(
        line.startswith("+") and not line.startswith("+++") for line in body
    ):
        return True  # a corrected line, however short
    if language.lower() in CODE_LANGUAGES_ALL_LINES:
        lines = [line for line in body if line.strip() and not line.strip().startswith("//")]
    else:
        lines = [line for line in body if is_code_line(line)]
    return len(lines) > MAX_CODE_LINES


def _span_blocked(span: str) -> bool:
    return bool(
        re.search(r"\bfn\s+\w+\s*\(", span) or span.count(";") >= 2 or ("{" in span and ";" in span)
    )


def _prose(line: str, findings: list[Finding], partial: bool = False) -> str:
    """A prose line with offending `code spans` replaced. With partial, the line is still
    arriving: stop before a span that has not closed yet."""
    out = []
    position = 0
    while True:
        opener = BACKTICKS.search(line, position)
        if opener is None:
            out.append(line[position:])
            break
        if partial and opener.end() == len(line):
            # The run of backticks may still grow: wait for it.
            out.append(line[position : opener.start()])
            break
        closer = re.compile(rf"(?<!`){opener.group()}(?!`)").search(line, opener.end())
        if closer is None or (partial and closer.end() == len(line)):
            if partial:
                out.append(line[position : opener.start()])
                break
            out.append(line[position:])
            break
        out.append(line[position : opener.start()])
        span = line[opener.end() : closer.start()]
        if _span_blocked(span):
            findings.append(Finding("inline code", span))
            out.append(INLINE_NOTE)
        else:
            out.append(line[opener.start() : closer.end()])
        position = closer.end()
    return "".join(out)


def _process(text: str, final: bool) -> Guarded:
    """The guarded text. Without final, only the part whose fate is already settled."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    findings: list[Finding] = []
    i, n = 0, len(lines)

    def complete(k: int) -> bool:
        return final or lines[k].endswith("\n")

    while i < n:
        line = lines[i]
        fence = FENCE.match(line)
        if fence and complete(i):
            opener, language = fence.group(1), fence.group(2)
            j = i + 1
            while j < n and not (_closes(lines[j], opener) and complete(j)):
                j += 1
            if j >= n and not final:
                break  # still open: hold it
            block = lines[i : j + 1]
            if _fence_blocked(language, lines[i + 1 : j]):
                findings.append(Finding("fenced code", "".join(block)))
                ending = "\n" if block[-1].endswith("\n") else ""
                out.append(NOTE + ending)
            else:
                out.extend(block)
            i = j + 1
            continue
        if not complete(i):
            # The last line is still arriving: release it only if it is already prose.
            if not fence and prose_start(line):
                out.append(_prose(line, findings, partial=True))
            break
        if is_code_line(line):
            j = i
            while j < n and complete(j) and is_code_line(lines[j]) and not FENCE.match(lines[j]):
                j += 1
            if not final and (j >= n or not complete(j)):
                break  # the run may go on: hold it
            run = lines[i:j]
            joined = "".join(run)
            if MARKER.search(joined) or len(run) > MAX_CODE_LINES:
                findings.append(Finding("code lines", joined))
                out.append(NOTE + ("\n" if run[-1].endswith("\n") else ""))
            else:
                out.extend(_prose(r, findings) for r in run)
            i = j
            continue
        out.append(_prose(line, findings))
        i += 1
    return Guarded("".join(out), findings)


def redact(text: str) -> Guarded:
    """The reply as the learner may see it, and what was withheld."""
    return _process(text, final=True)


class StreamGuard:
    """Feed it text deltas; it returns what may be shown now."""

    def __init__(self) -> None:
        self.text = ""
        self.sent = ""
        self.stalled = False

    def feed(self, delta: str) -> str:
        self.text += delta
        return self._advance(_process(self.text, final=False).text)

    def finish(self) -> str:
        return self._advance(_process(self.text, final=True).text)

    def _advance(self, shown: str) -> str:
        if self.stalled or not shown.startswith(self.sent):
            # Never contradict what is on screen; the stored reply replaces it at the end.
            self.stalled = True
            return ""
        new = shown[len(self.sent) :]
        self.sent = shown
        return new


ANSWER_REQUEST = re.compile(
    r"\b(?:write|give|show|send|paste|do|fix|solve|finish|complete)\b[^.?!\n]{0,40}\bfor me\b"
    r"|\b(?:give|show|send|paste|tell)\s+me\s+the\s+"
    r"(?:whole\s+|full\s+|complete\s+|entire\s+|working\s+|correct\s+|final\s+|fixed\s+)?"
    r"(?:kernel|code|solution|answer|shader)\b"
    r"|\bjust\s+(?:write|give|show|tell|fix|do)\b"
    r"|\b(?:what(?:'s|\s+is)|tell\s+me)\s+the\s+(?:answer|solution)\b"
    r"|\bwrite\s+(?:the|my|this)\s+(?:whole\s+|full\s+|complete\s+|entire\s+)?"
    r"(?:kernel|shader|solution)\b",
    re.IGNORECASE,
)


def asks_for_answer(message: str) -> bool:
    """Whether a learner's message asks the tutor to write the kernel for them."""
    return bool(ANSWER_REQUEST.search(message))
