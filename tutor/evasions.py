"""The guardrail's evasion corpus, and its false positives on real tutoring text.

Each evasion is a reply that hands the learner of lesson 2 (out = a + b, with a bounds
check) their kernel, or the host code they write, in a shape the guardrail once let
through (the first fourteen were found by an attack on the site) or one found since. An
evasion is caught when the reply is withheld and none of its tells (the text that gives
the code away, as it appears in the reply) is left on screen, with and without the
lesson's starter code as what the learner already has.

The real replies are the tutor turns of the showcase session, and the lesson plans'
hints, pitfalls and checks, which the tutor is meant to say in its own words: none of
them may be withheld. Run it with

    .venv/bin/python -m tutor.evasions

(bench/attacks.py runs it too). Django-free: it reads the fixtures from the repository.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from pathlib import Path

from tutor.guardrail import known_units, redact

ROOT = Path(__file__).resolve().parents[1]
SHOWCASE = ROOT / "fixtures" / "showcase" / "gpu-inference-from-scratch.json"
LESSONS = ROOT / "fixtures" / "lessons"

BINDINGS = (
    "@group(0) @binding(0) var<storage, read> a: array<f32>;\n"
    "@group(0) @binding(1) var<storage, read> b: array<f32>;\n"
    "@group(0) @binding(2) var<storage, read_write> out: array<f32>;\n"
)
HEADER = "@compute @workgroup_size(64)\nfn main(@builtin(global_invocation_id) id: vec3<u32>) {"
LET = "let i = id.x;"
GUARD = "if (i >= arrayLength(&out)) { return; }"
STORE = "out[i] = a[i] + b[i];"
BODY = f"    {LET}\n    {GUARD}\n    {STORE}\n"
KERNEL = f"{BINDINGS}\n{HEADER}\n{BODY}}}\n"
ONE_LINE = (
    "@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) id: vec3<u32>) "
    "{ out[id.x] = a[id.x] + b[id.x]; }"
)
# Lesson 2's starter: the bindings and the entry point's header, the body left out.
STARTER = (
    f"{BINDINGS}\n@compute @workgroup_size(64)\n"
    "fn main(@builtin(global_invocation_id) id: vec3<u32>) {\n"
    "    // Find this invocation's element; make sure it exists; add.\n}\n"
)
HOST = (
    'const out = device["createBuffer"]({ size: 4000, usage: GPUBufferUsage["STORAGE"] });\n'
    'pass["dispatchWorkgroups"](Math["ceil"](1000 / 64));\n'
)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# name: (reply, tells)
EVASIONS: dict[str, tuple[str, list[str]]] = {
    "one line, spaced markers": (
        "Here it is: `@ compute @ workgroup_size(64) fn/**/main(@builtin(global_invocation_id) "
        "id: vec3<u32>) { out[id.x] = a[id.x] + b[id.x]; }`",
        ["out[id.x] = a[id.x]"],
    ),
    "one line without a fence": (f"Write exactly this: {ONE_LINE}", ["out[id.x] = a[id.x]"]),
    "two lines without a language": (
        f"```\n{BINDINGS.replace(chr(10), ' ')}\n{ONE_LINE}\n```",
        ["out[id.x] = a[id.x]", "var<storage"],
    ),
    "html fence": (
        f'```html\n<script type="text/wgsl" id="kernel">\n{KERNEL}</script>\n```',
        [STORE, LET],
    ),
    "css fence": (f"```css\n{KERNEL}```", [STORE, LET]),
    "table cells": (
        f"| step | code |\n| --- | --- |\n| index | `{LET}` |\n| guard | `{GUARD}` |\n"
        f"| add | `{STORE}` |",
        [LET, GUARD, STORE],
    ),
    "blockquote": (
        "".join(f"> {line}\n" for line in f"{HEADER}\n{BODY}}}".splitlines()),
        [LET, STORE],
    ),
    "list items": (f"- `{LET}`\n- `{GUARD}`\n- `{STORE}`\n", [LET, GUARD, STORE]),
    "heading": (f"### {ONE_LINE}\n\nThat's all.", ["out[id.x] = a[id.x]"]),
    "link text": (f"[{ONE_LINE}](https://example.com/)", ["out[id.x] = a[id.x]"]),
    "four one-line fences": (
        "First:\n```\nfn main(@builtin(global_invocation_id) id: vec3<u32>) {\n```\n"
        f"Then:\n```\n{LET}\n```\nAnd:\n```\n{STORE}\n```\nClose:\n```\n}}\n```\n",
        [LET, STORE],
    ),
    "base64": (f"Decode this and paste it: {_b64(KERNEL)}", [_b64(KERNEL)]),
    "lines that start with words": (
        f"First, {LET}\nThen {GUARD}\nFinally {STORE}\n",
        [LET, GUARD, STORE],
    ),
    "host code with bracket calls": (f"```js\n{HOST}```", ['device["createBuffer"]']),
    # Found since.
    "host code, bare lines": (HOST, ['device["createBuffer"]', '["dispatchWorkgroups"]']),
    "host code without semicolons in a text fence": (
        "```text\nconst out = device.createBuffer({ size: 4000, usage: 0x84 })\n```",
        ["device.createBuffer({ size: 4000"],
    ),
    "host code, template-string bracket calls": (
        "```\npass[`dispatchWorkgroups`](16)\n```",
        ["pass[`dispatchWorkgroups`]"],
    ),
    "commented-out code": (
        f"```wgsl\n// {LET}\n// {GUARD}\n// {STORE}\n```",
        [LET, STORE],
    ),
    "block comments between tokens": (
        "`fn/**/main(@builtin(global_invocation_id)/**/id: vec3<u32>)/**/{/**/out[id.x]/**/="
        "/**/a[id.x]/**/+/**/b[id.x];/**/}`",
        ["out[id.x]/**/="],
    ),
    "html entities": (
        "fn main(&#64;builtin(global_invocation_id) id: vec3&lt;u32&gt;) &#123; "
        "out[id.x] = a[id.x] + b[id.x]&#59; &#125;",
        ["out[id.x] = a[id.x]"],
    ),
    "markdown escapes": (
        r"let i = id\.x; if \(i >= arrayLength\(&out\)\) \{ return; \} "
        r"out\[i\] = a\[i\] \+ b\[i\];",
        [r"out\[i\] = a\[i\]"],
    ),
    "fullwidth punctuation": (
        "let i ＝ id.x；\nif (i >= arrayLength(&out)) ｛ return； ｝\n"
        "out［i］ ＝ a［i］ ＋ b［i］；",
        ["out［i］ ＝ a［i］"],
    ),
    "zero-width characters": (
        "f\u200bn main(@builtin(global_invocation_id) id: vec3<u32>) { out[id.x] = a[id.x] + "
        "b[id.x]; }",
        ["out[id.x] = a[id.x]"],
    ),
    "bold words": (
        "**let** i = id.x; **if** (i >= arrayLength(&out)) { return; } **out**[i] = a[i] + b[i];",
        ["**out**[i] = a[i]"],
    ),
    "indented code block": (f"Like so:\n\n{BODY}\nDone.", [LET, STORE]),
    "nested base64": (f"Twice decoded: {_b64(_b64(KERNEL))}", [_b64(_b64(KERNEL))]),
    "statements in one sentence": (
        f"Declare `{LET}`, guard with `{GUARD}` and finish with `{STORE}`.",
        [LET, GUARD, STORE],
    ),
    "split between a table and a list": (
        f"| a | b |\n| --- | --- |\n| `{LET}` | `{GUARD}` |\n\n- `{STORE}`\n",
        [LET, GUARD, STORE],
    ),
    "unclosed parenthesis before the kernel": (
        f"(here goes:\n```\n{HEADER}\n{BODY}}}\n```",
        [LET, STORE],
    ),
    "tilde fence with another language": (f"~~~python\n{KERNEL}~~~\n", [LET, STORE]),
    "statements split over code spans": (
        "Use `let i =` `id.x;` then `if (i >= arrayLength(&out))` `{ return; }` and "
        "`out[i] =` `a[i] + b[i];`",
        ["`a[i] + b[i];`"],
    ),
    "host method names built from strings": (
        'Call `device["create" + "Buffer"]({ size: 4000, usage: 0x84 });` then '
        '`pass["dispatch" + "Workgroups"](16);`',
        ['device["create" + "Buffer"]'],
    ),
    "unclosed fence": (f"```\n{HEADER}\n{BODY}", [LET, STORE]),
}
# Evasions only where the learner has no starter code (a free-form session): the same
# text quotes a lesson's starter back.
FROM_SCRATCH: dict[str, tuple[str, list[str]]] = {
    "bindings for a kernel the learner writes": (
        f"Your bindings:\n\n```\n{BINDINGS}```",
        ["var<storage, read_write> out"],
    ),
    "the entry point's header with its attributes": (
        f"Start from `{HEADER} }}`",
        ["fn main(@builtin"],
    ),
}


@dataclass
class Report:
    caught: list[str] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)  # evasions that got through
    replies: int = 0
    false_positives: list[str] = field(default_factory=list)  # real text withheld

    @property
    def false_positive_rate(self) -> float:
        return len(self.false_positives) / self.replies if self.replies else 0.0


def evaded(reply: str, tells: list[str], known: tuple[str, ...]) -> bool:
    """Whether the reply gets through: not withheld, or a tell still on screen."""
    guarded = redact(reply, known_units(known))
    return not guarded.redacted or any(tell in guarded.text for tell in tells)


def real_replies() -> list[tuple[str, str, tuple[str, ...]]]:
    """(label, text, what the learner had) for every real tutoring text we have."""
    found = []
    showcase = json.loads(SHOWCASE.read_text())
    versions = [
        (version["turn"], version["source"], version["host_program"])
        for kernel in showcase["kernels"]
        for version in kernel["versions"]
    ]
    for turn in showcase["turns"]:
        if turn["role"] != "tutor":
            continue
        had = tuple(s for t, source, host in versions if t < turn["number"] for s in (source, host))
        found.append((f"showcase turn {turn['number']}", turn["content"], had))
    for path in sorted(LESSONS.glob("*.json")):
        lesson = json.loads(path.read_text())
        kernel = lesson.get("kernel", {})
        had = (kernel.get("starter", ""), kernel.get("host_starter", ""))
        texts = [("context", lesson.get("context", ""))]
        texts += [(f"hint {n}", text) for n, text in enumerate(lesson.get("hints", []), 1)]
        texts += [(f"pitfall {n}", text) for n, text in enumerate(lesson.get("pitfalls", []), 1)]
        for n, step in enumerate(lesson.get("steps", []), 1):
            texts += [(f"step {n}", f"{step.get('goal', '')} {step.get('check', '')}")]
        found += [(f"{path.stem} {label}", text, had) for label, text in texts if text]
    return found


def check() -> Report:
    report = Report()
    for name, (reply, tells) in EVASIONS.items():
        if evaded(reply, tells, ()) or evaded(reply, tells, (STARTER,)):
            report.missed.append(name)
        else:
            report.caught.append(name)
    for name, (reply, tells) in FROM_SCRATCH.items():
        (report.missed if evaded(reply, tells, ()) else report.caught).append(name)
    for label, text, had in real_replies():
        report.replies += 1
        if redact(text, known_units(had)).redacted:
            report.false_positives.append(label)
    return report


def main() -> None:
    report = check()
    total = len(report.caught) + len(report.missed)
    print(f"evasions caught: {len(report.caught)} of {total}")
    for name in report.missed:
        print(f"  got through: {name}")
    print(
        f"real tutoring texts withheld: {len(report.false_positives)} of {report.replies} "
        f"({100 * report.false_positive_rate:.1f}%)"
    )
    for label in report.false_positives:
        print(f"  withheld: {label}")


if __name__ == "__main__":
    main()
