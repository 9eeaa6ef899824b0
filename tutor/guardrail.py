"""The guardrail: a tutor reply never hands the learner a kernel.

The system prompt asks Claude not to write the kernel; this module makes sure, in code,
on every reply. It withholds:

- a fenced code block that holds a kernel marker (@compute, @workgroup_size, @group(,
  @binding(, var<storage|uniform|workgroup>, fn name( ) or a WebGPU host call the
  learner writes (.createBuffer(, .writeBuffer(, .dispatchWorkgroups(, .mapAsync(, …),
  or more than MAX_CODE_LINES lines of code (for ```wgsl and ```js every line counts; a
  ```diff that adds any line is a correction and always withheld); ```html and ```css
  page scaffolding is shown unless it holds a marker;
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

Claude's text is untrusted (a learner can ask for anything) and this runs in the web
process, so the work is linear: each line is read a bounded number of times by patterns
that cannot backtrack over it more than once, code spans are paired in one pass, a stream
re-reads only what is not settled yet, and a reply is read up to MAX_CHARS (Claude's
replies stop at TUTOR_MAX_TOKENS, far below it); the rest is withheld.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_CODE_LINES = 2
MAX_CHARS = 32_000
# A line still arriving is read again on each delta only while its undecided rest (all of
# a line that is not prose, or a prose line from a code span not closed yet) is this
# short; past it, it waits for its end.
MAX_PARTIAL = 400
# A line is prose (never code) when its first PROSE_PREFIX characters read like words.
PROSE_PREFIX = 24

NOTE = (
    "*(Code withheld: the tutor explains and reviews, but the kernel is yours to write. "
    "Ask for the next hint if you are stuck.)*"
)
INLINE_NOTE = "`[code withheld]`"
TOO_LONG = "\n\n*(The rest of this reply was withheld: it is too long to check.)*"

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*([^\s`]*)")
MARKER = re.compile(
    r"@compute\b|@workgroup_size\b|@group\s*\(|@binding\s*\(|"
    r"\bvar\s*<\s*(?:storage|uniform|workgroup)\b|\bfn\s+\w+\s*\(|"
    # WebGPU host calls: the host code a lesson asks the learner to write
    r"\.(?:createBuffer|writeBuffer|dispatchWorkgroups|mapAsync|getMappedRange|"
    r"createComputePipeline|beginComputePass|createBindGroup|copyBufferToBuffer)\s*\("
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
CODE_LANGUAGES_ALL_LINES |= {"js", "javascript", "ts", "typescript", "mjs"}
# Page scaffolding a lesson does not teach: shown unless it holds kernel or host code.
SCAFFOLD_LANGUAGES = {"html", "css", "xml", "svg"}


@dataclass
class Finding:
    rule: str
    text: str


@dataclass
class Held:
    """What a stream's unsettled input starts with: a fence still open (kind "fence", its
    opener and language) or a run of code lines ("code"), and how many complete lines of
    it have been read; or the rest of a prose line still arriving ("prose"), of which
    chars were decided."""

    kind: str
    lines: int = 0
    opener: str = ""
    language: str = ""
    chars: int = 0


@dataclass
class Guarded:
    text: str
    findings: list[Finding] = field(default_factory=list)
    # The input up to settled (a line start) is decided for good, and gave text[:shown].
    settled: int = 0
    shown: int = 0
    # Characters looked at, for the tests of linear growth.
    steps: int = 0
    held: Held | None = None

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
    if language.lower() in SCAFFOLD_LANGUAGES:
        return False
    if language.lower() in CODE_LANGUAGES_ALL_LINES:
        lines = [line for line in body if line.strip() and not line.strip().startswith("//")]
    else:
        lines = [line for line in body if is_code_line(line)]
    return len(lines) > MAX_CODE_LINES


def _span_blocked(span: str) -> bool:
    return bool(
        re.search(r"\bfn\s+\w+\s*\(", span) or span.count(";") >= 2 or ("{" in span and ";" in span)
    )


def _process(text: str, final: bool, held: Held | None = None) -> Guarded:
    """The guarded text. Without final, only the part whose fate is already settled.
    held: what the text starts with, as the last pass over it found (not read again)."""
    return _Pass(text, final, held).run()


class _Pass:
    """One reading of the text, line by line; each line is looked at a bounded number of
    times (steps counts the characters)."""

    def __init__(self, text: str, final: bool, held: Held | None) -> None:
        self.lines = text.splitlines(keepends=True)
        self.final = final
        self.held = held
        self.now_held: Held | None = None
        self.decided = 0  # of a prose line still arriving, the characters decided
        self.out: list[str] = []
        self.length = 0  # of what out holds
        self.findings: list[Finding] = []
        self.steps = 0

    def complete(self, k: int) -> bool:
        return self.final or self.lines[k].endswith("\n")

    def emit(self, text: str) -> None:
        self.out.append(text)
        self.length += len(text)

    def run(self) -> Guarded:
        settled = shown = i = 0
        while i < len(self.lines):
            after = self.block(i)
            if after is None:  # still open, or still arriving: hold it
                if self.now_held is not None and self.now_held.kind == "prose":
                    settled, shown = settled + self.now_held.chars, self.length
                break
            settled += sum(len(line) for line in self.lines[i:after])
            shown, i = self.length, after
        return Guarded("".join(self.out), self.findings, settled, shown, self.steps, self.now_held)

    def block(self, i: int) -> int | None:
        """Write what starts at line i: the index past it, or None to stop here."""
        line = self.lines[i]
        if i == 0 and self.held is not None:
            # What the last pass held: its first lines are not read again, and the rest of
            # a prose line is still prose.
            if self.held.kind == "fence":
                return self.fenced_block(0, self.held.opener, self.held.language)
            if self.held.kind == "code":
                return self.code_lines(0)
            if self.complete(0):
                self.emit(self.prose(line))
                return 1
            return self.partial_prose(line)
        self.steps += len(line)
        fence = FENCE.match(line)
        if fence and self.complete(i):
            return self.fenced_block(i, fence.group(1), fence.group(2))
        if not self.complete(i):
            # The last line is still arriving: release it only if it is already prose.
            return self.partial_prose(line) if not fence and prose_start(line) else None
        if is_code_line(line):
            return self.code_lines(i)
        self.emit(self.prose(line))
        return i + 1

    def known(self, i: int) -> int:
        """The lines after i already read in the last pass (the block it held)."""
        return self.held.lines if i == 0 and self.held is not None else 0

    def fenced_block(self, i: int, opener: str, language: str) -> int | None:
        """The fenced block opening at line i: the index past it, or None while open."""
        j = max(i + 1, self.known(i))
        while j < len(self.lines) and not (_closes(self.lines[j], opener) and self.complete(j)):
            self.steps += len(self.lines[j])
            j += 1
        if j >= len(self.lines) and not self.final:
            # The last line may still become the closing fence: it is read again.
            read = j if self.lines[-1].endswith("\n") else j - 1
            self.now_held = Held("fence", read - i, opener, language)
            return None
        block = self.lines[i : j + 1]
        self.steps += 2 * sum(len(line) for line in block)
        if _fence_blocked(language, self.lines[i + 1 : j]):
            self.findings.append(Finding("fenced code", "".join(block)))
            self.emit(NOTE + ("\n" if block[-1].endswith("\n") else ""))
        else:
            self.emit("".join(block))
        return j + 1

    def code_lines(self, i: int) -> int | None:
        """The run of code lines starting at line i: the index past it, or None while it
        may still go on."""
        j = max(i, self.known(i))
        while j < len(self.lines) and self.complete(j) and is_code_line(self.lines[j]):
            self.steps += len(self.lines[j])
            if j > i and FENCE.match(self.lines[j]):
                break
            j += 1
        if not self.final and (j >= len(self.lines) or not self.complete(j)):
            self.now_held = Held("code", j - i)
            return None
        run = self.lines[i:j]
        joined = "".join(run)
        self.steps += 2 * len(joined)
        if MARKER.search(joined) or len(run) > MAX_CODE_LINES:
            self.findings.append(Finding("code lines", joined))
            self.emit(NOTE + ("\n" if run[-1].endswith("\n") else ""))
        else:
            for line in run:
                self.emit(self.prose(line))
        return j

    def partial_prose(self, line: str) -> None:
        """Release what is decided of a prose line still arriving; hold the rest."""
        self.decided = len(line)
        self.emit(self.prose(line, partial=True))
        self.now_held = Held("prose", chars=self.decided)
        return None

    def prose(self, line: str, partial: bool = False) -> str:
        """A prose line with offending `code spans` replaced. With partial, the line is
        still arriving: stop before a span that has not closed yet.

        A span opens at a run of backticks and closes at the next run of the same length;
        the next run of each length is found in one pass from the end."""
        runs = [(m.start(), m.end()) for m in BACKTICKS.finditer(line)]
        self.steps += len(line) + len(runs)
        closing = [-1] * len(runs)
        last_of_length: dict[int, int] = {}
        for k in range(len(runs) - 1, -1, -1):
            length = runs[k][1] - runs[k][0]
            closing[k] = last_of_length.get(length, -1)
            last_of_length[length] = k
        out = []
        position = k = 0
        while k < len(runs):
            start, end = runs[k]
            close = closing[k]
            if partial and (end == len(line) or close < 0 or runs[close][1] == len(line)):
                # The run may still grow, or its span may still close: wait for it.
                out.append(line[position:start])
                self.decided = start
                return "".join(out)
            if close < 0:
                break
            out.append(line[position:start])
            span = line[end : runs[close][0]]
            if _span_blocked(span):
                self.findings.append(Finding("inline code", span))
                out.append(INLINE_NOTE)
            else:
                out.append(line[start : runs[close][1]])
            position = runs[close][1]
            k = close + 1
        out.append(line[position:])
        return "".join(out)


def redact(text: str) -> Guarded:
    """The reply as the learner may see it, and what was withheld."""
    guarded = _process(text[:MAX_CHARS], final=True)
    if len(text) > MAX_CHARS:
        guarded.findings.append(Finding("too long", text[MAX_CHARS:]))
        guarded.text += TOO_LONG
    return guarded


class StreamGuard:
    """Feed it text deltas; it returns what may be shown now.

    Only the input not settled yet is read again, and only when the delta could change
    its fate: while a line is held (an open fence, a run of code lines), a delta without
    a line break changes nothing."""

    def __init__(self) -> None:
        self.pending = ""  # the input not settled yet
        self.shown = ""  # what the settled input became
        self.received = 0  # characters fed, all of them
        self.deltas: list[str] = []
        self.held: Held | None = None
        self.sent = ""
        self.stalled = False
        self.steps = 0

    def feed(self, delta: str) -> str:
        room = MAX_CHARS - self.received
        self.received += len(delta)
        self.deltas.append(delta)
        if room <= 0:
            return ""
        self.pending += delta[:room]
        held, quiet = self.held, "\n" not in delta[:room]
        # A held block changes only when a line ends; a line still arriving is read again
        # as it grows only while its undecided rest is short.
        if quiet and ((held and held.kind != "prose") or len(self.pending) > MAX_PARTIAL):
            return ""
        guarded = _process(self.pending, final=False, held=self.held)
        self.steps += guarded.steps
        shown = self.shown + guarded.text
        self.pending = self.pending[guarded.settled :]
        self.shown += guarded.text[: guarded.shown]
        self.held = guarded.held
        return self._advance(shown)

    @property
    def text(self) -> str:
        """Everything fed so far."""
        return "".join(self.deltas)

    def finish(self) -> str:
        guarded = _process(self.pending, final=True, held=self.held)
        self.steps += guarded.steps
        rest = TOO_LONG if self.received > MAX_CHARS else ""
        return self._advance(self.shown + guarded.text + rest)

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
