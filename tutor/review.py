"""Run outcomes in words: compact facts for Claude, and the offline reviewer's explanation.

The offline reviewer works from the outcome alone (no API key, or the budget is spent):
naga's message with the line it points at, which cells are wrong and the likely cause
(a transposed result, too few invocations, an early return, an overflow, a binding that
does not match the host). It never writes code: it quotes at most the learner's own line.
What it knows of the source (workgroup sizes, where outputs are written) the worker read
and put in the outcome's "analysis": nothing here parses a kernel in the web process, and
every scan of text here is one pass.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from kernels.engine.harness import HarnessError, parse_harness
from kernels.engine.outcome import EntryPointFacts, Outcome, Status, output_list
from kernels.engine.run_warnings import warnings_of
from kernels.speed_figures import speed_summary
from tutor import evidence, host_review
from tutor.quoting import quote, source_line

FIRST_CELLS = 6
# The strings JSON carries NaN and the infinities as.
SPECIAL = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _number(raw: object) -> float | None:
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        return float(raw)
    return SPECIAL.get(raw) if isinstance(raw, str) else None


def _fmt(value: object) -> str:
    number = _number(value)
    if value is None:
        return "never written"
    if number is None:
        return str(value)
    if math.isfinite(number):
        return f"{number:.4g}"
    return str(value)


def status_label(outcome: Outcome) -> str:
    try:
        return Status(outcome.get("status", "")).label
    except ValueError:
        return outcome.get("status", "unknown")


def speed_review(outcome: Outcome) -> str:
    """A sentence on a passing run's speed, on a GPU only: on llvmpipe nothing is said,
    since what holds for the emulator says nothing of a GPU."""
    summary = speed_summary(outcome)
    if summary is None or summary["total"] is None or summary["emulated"]:
        return ""
    sentence = f"**How fast:** its passes took {summary['headline']} ({summary['adapter']})."
    shares = [row["bandwidth"] for row in summary["rows"] if row["bandwidth"] is not None]
    if shares and max(shares) < 0.1:
        sentence += (
            f" No pass moves more than {100 * max(shares):.2g}% of the memory bandwidth this GPU "
            "can: at this size the time is mostly the cost of starting the work, so a larger "
            "problem says more about the kernel."
        )
    return sentence


# -- the offline reviewer --------------------------------------------------------------


# Phrases looked for in the error, case-insensitively; "a … b" is a, then b on one line.
COMPILE_CAUSES = [
    (
        ("uniform control flow",),
        "A barrier must be reached by every invocation of the workgroup or by none. A browser "
        "refuses workgroupBarrier() (or storageBarrier(), workgroupUniformLoad()) inside an "
        "if or a loop, or after a return, that depends on local_invocation_id or "
        "global_invocation_id: keep the barrier outside the branch, and let the branch guard "
        "only the work.",
    ),
    (
        ("expected `;`",),
        "A statement is missing its semicolon: look at the end of the previous statement "
        "(naga notices only when the next token arrives, often on the next line).",
    ),
    (
        ("no definition in scope", "unknown identifier", "unresolved"),
        "A name is used that is not declared where it is used: a typo, a variable declared "
        "inside another block, or a builtin written differently (it is `global_invocation_id`).",
    ),
    (
        ("automatic conversion", "type mismatch", "expected … found", "cannot be", "mismatch"),
        "Two types meet that WGSL will not convert for you: u32, i32 and f32 never mix "
        "implicitly; convert explicitly with f32(…), u32(…) or i32(…), and write u32 "
        "literals with a u suffix (8u).",
    ),
    (
        ("workgroup_size",),
        "A compute entry point needs both @compute and @workgroup_size(…).",
    ),
    (
        ("access", "read-only", "not writable", "store"),
        "A write to something that cannot be written: a buffer declared `read` or a `let`. "
        "Check the access mode of the buffer you store into.",
    ),
    (
        ("[[", "stage", "block"),
        "Old WGSL syntax: attributes are written @compute, @group(0) @binding(1); "
        "[[block]] and @stage(compute) were removed in 2022.",
    ),
]


def _mentions(text: str, phrase: str) -> bool:
    """Whether the lower-case text holds the phrase ("a … b": a, then b on the same line)."""
    first, _, then = phrase.partition(" … ")
    if not then:
        return first in text
    for line in text.splitlines():
        start = line.find(first)
        if start >= 0 and line.find(then, start + len(first)) >= 0:
            return True
    return False


def _compile_review(outcome: Outcome, source: str) -> list[str]:
    info: Mapping[str, Any] = outcome.get("compile") or {}
    line, column = info.get("line"), info.get("column")
    where = f"line {line}, column {column}" if line else "an unknown place"
    # naga compiles; Chrome's compiler, Tint, refuses what naga lets through (a barrier
    # in non-uniform control flow) and the worker reports it in Tint's words.
    tint = "uniform control flow" in info.get("message", "")
    compiler = "Tint" if tint else "naga"
    stops = "a browser's compiler, Tint, refuses it at" if tint else "naga stops at"
    parts = [
        f"**It does not compile.** {stops} {where}: *{info.get('message', '')}*"
        + (
            f" ({info['label']})"
            if info.get("label") and info["label"] not in info.get("message", "")
            else ""
        )
        + "."
    ]
    if quoted := quote(source_line(source, line)):
        parts.append(f"Line {line} reads {quoted}.")
    if line and column == 1 and line > 1 and (quoted := quote(source_line(source, line - 1))):
        parts.append(f"The line before it reads {quoted}.")
    for note in info.get("notes") or []:
        parts.append(f"{compiler} adds: {note}.")
    text = " ".join(info.get(key) or "" for key in ("message", "label", "text")).lower()
    for phrases, cause in COMPILE_CAUSES:
        if any(_mentions(text, phrase) for phrase in phrases):
            parts.append(f"Likely cause: {cause}")
            break
    return [" ".join(parts[:2]), *parts[2:]]


def _bindings(harness: dict[str, Any]) -> str:
    try:
        parsed = parse_harness(harness)
    except HarnessError:
        return ""
    rows = []
    for p in parsed.passes[:1]:
        for b in p.bind:
            buf = parsed.buffer(b.buffer)
            kind = "uniform" if buf.usage == "uniform" else f"storage, {buf.usage}"
            shape = "×".join(str(d) for d in buf.shape)
            rows.append(
                f"@group({b.group}) @binding({b.binding}) → `{buf.name}` "
                f"({kind}, {buf.dtype} [{shape}])"
            )
    return "; ".join(rows)


def _pipeline_review(outcome: Outcome, harness: dict[str, Any]) -> list[str]:
    message = outcome.get("message", "")
    parts = [f"**It compiles, but the pipeline could not be set up:** {message}"]
    text = f"{message} {outcome.get('error', '')}"
    if "workgroup storage" in text:
        cause = (
            "the kernel's var<workgroup> arrays need more memory than WebGPU gives a "
            "workgroup unless the page asks for more (16 KiB): use smaller tiles, or fewer "
            "workgroup arrays"
        )
    elif "max_compute_invocations_per_workgroup" in text:
        cause = (
            "the workgroup is larger than WebGPU allows by default: at most 256 invocations "
            "per workgroup (x and y up to 256, z up to 64)"
        )
    elif "UNIFORM" in text:
        cause = (
            "a binding is declared `var<uniform>` but the host binds a storage buffer there: "
            "match the address space to the host's buffer"
        )
    elif "STORAGE" in text:
        cause = "a binding is declared as storage but the host binds a uniform buffer there"
    elif any(words in text for words in ("does not match the number", "not bound", "declaration")):
        cause = "the kernel declares a different set of @group/@binding numbers than the host binds"
    elif any(word in text.lower() for word in ("size", "minimum", "align")):
        cause = (
            "a uniform or struct size mismatch: the struct the kernel declares is larger than "
            "the buffer the host binds (check member types and padding)"
        )
    else:
        cause = "a binding or uniform size mismatch between the kernel's declarations and the host"
    parts.append(f"Likely cause: {cause}.")
    if bindings := _bindings(harness):
        parts.append(f"The host binds: {bindings}.")
    return parts


def _entry_point(outcome: Outcome, harness: dict[str, Any]) -> tuple[EntryPointFacts, int] | None:
    """The first pass's entry point as the worker read it, and the pass's workgroups: the
    host program's first dispatch in a program run, else the harness's first pass."""
    if host_review.program(outcome):
        dispatched = host_review.first_dispatch(outcome)
        if dispatched is None:
            return None
        kernel, entry_point, groups = "self", dispatched[0], dispatched[1]
    else:
        try:
            first = parse_harness(harness).passes[0]
        except HarnessError:
            return None
        kernel, entry_point, groups = first.kernel, first.entry_point, math.prod(first.dispatch)
    facts = (outcome.get("analysis") or {}).get(kernel)
    for entry in facts["entry_points"] if facts else []:
        if entry["name"] == entry_point:
            return entry, groups
    return None


def _threads(outcome: Outcome, harness: dict[str, Any]) -> tuple[int, int, int] | None:
    """(workgroups, invocations per workgroup, total invocations) of the first pass; a
    size that is not a constant counts as 1, as the limits' pre-check counts it."""
    found = _entry_point(outcome, harness)
    if found is None:
        return None
    entry, groups = found
    size = math.prod(entry["workgroup_size"] or [1])
    return groups, size, groups * size


def _store_places(entry: EntryPointFacts | None, name: str) -> str:
    """Where the kernel stores into the output: `out[i]` (line 9), or ""."""
    writes = [w for w in (entry["writes"] if entry else []) if w["buffer"] == name][:3]
    places = [(quote(f"{name}[{w['index']}]"), w["line"]) for w in writes]
    if not places or not all(quoted for quoted, _ in places):
        return ""
    return ", ".join(f"{quoted} (line {line})" for quoted, line in places)


def _stores(outcome: Outcome, harness: dict[str, Any], name: str) -> str:
    """Where the kernel stores into the output, as a sentence: It stores into `out[i]`."""
    found = _entry_point(outcome, harness)
    listed = _store_places(found[0] if found else None, name)
    return f" It stores into {listed}." if listed else ""


def _transposed(output: dict[str, Any]) -> bool:
    shape = output.get("shape") or []
    got, expected = output_list(output, "got"), output_list(output, "expected")
    if len(shape) != 2 or shape[0] != shape[1] or not got or not expected:
        return False
    n = shape[0]
    matches = total = 0
    for r in range(n):
        for c in range(n):
            g, e_t, e = (
                _number(got[r * n + c]),
                _number(expected[c * n + r]),
                _number(expected[r * n + c]),
            )
            if g is None or e_t is None or e is None or not math.isfinite(g):
                continue
            if math.isclose(e, e_t, rel_tol=1e-4, abs_tol=1e-5):
                continue  # symmetric cells say nothing
            total += 1
            matches += math.isclose(g, e_t, rel_tol=1e-3, abs_tol=1e-4)
    return total > 0 and matches / total > 0.9


def _closeness(harness: dict[str, Any]) -> evidence.Close:
    """Whether a cell agrees with its reference as the run's comparison judged it (numpy's
    isclose with the harness's tolerance), so every count and pattern told here is about
    the cells the run called wrong: a cell of 4e-12 is not "the value" of one of 3e-6."""
    tolerance = (harness or {}).get("tolerance") or {}
    atol, rtol = tolerance.get("atol", 1e-5), tolerance.get("rtol", 1e-5)

    def close(got: object, want: object) -> bool:
        g, e = _number(got), _number(want)
        return g is not None and e is not None and abs(g - e) <= atol + rtol * abs(e)

    return close


def _zero_swapped(wrong: list[tuple[float, float]]) -> bool:
    """Each wrong cell is 0 where the expected is not, or not 0 where the expected is:
    a max/min or a comparison the wrong way round (as in a ReLU)."""
    return all((abs(g) < 1e-12) != (abs(e) < 1e-12) for g, e in wrong) and any(
        abs(e) < 1e-12 for _, e in wrong
    )


def _value_pattern(output: dict[str, Any], index: str, harness: dict[str, Any]) -> str:
    """What the wrong values themselves show. A pattern is told only when every wrong
    cell it speaks of bears it out, with the numbers; otherwise where the wrong cells are,
    plainly. index is where the kernel stores (`out[i]` (line 9)), or ""."""
    if _transposed(output):
        return (
            "The result is the **transpose** of the expected matrix: every wrong cell (r, c) holds "
            "the value expected at (c, r). Row and column are swapped, either in which "
            "invocation id component you treat as the row or in the index you write to."
        )
    got, expected = output_list(output, "got"), output_list(output, "expected")
    if not got or not expected:
        return ""
    close = _closeness(harness)
    shape = output.get("shape") or []
    numbers = ((_number(g), _number(e)) for g, e in zip(got, expected, strict=False))
    pairs = [
        (g, e)
        for g, e in numbers
        if g is not None and e is not None and math.isfinite(g) and math.isfinite(e)
    ]
    wrong = [(g, e) for g, e in pairs if not close(g, e)]
    if not wrong:
        return ""
    if all(abs(g) < 1e-12 for g, _ in wrong):
        return (
            f"The {len(wrong)} wrong cells all hold **0**: the value was written but nothing "
            "was computed into it. Is the accumulator ever added to, and does the loop that "
            "adds run?"
        )
    if all(math.isclose(g, -e, rel_tol=1e-4) for g, e in wrong):
        return (
            "The wrong cells have the **right size but the wrong sign**. Which operator in "
            "your formula decides the sign?"
        )
    if _zero_swapped(wrong):
        return (
            "Where the expected value is 0 your kernel keeps a (negative) value, and where it "
            "is not 0 yours gives 0: the choice between the value and 0 is the wrong way "
            "round. For a negative input, which one does your kernel keep, and which should it?"
        )
    ratios = [g / e for g, e in wrong if e != 0]
    if len(ratios) == len(wrong) and max(ratios) - min(ratios) < 1e-3 * max(1.0, abs(ratios[0])):
        g, e = wrong[0]
        return (
            f"Every one of the {len(wrong)} wrong cells is the expected value **times "
            f"{ratios[0]:.3g}** (the first: expected {e:.4g}, got {g:.4g}). Where in your "
            f"formula could a factor of {ratios[0]:.3g} come from?"
        )
    if rows := evidence.row_factors(got, expected, shape, close):
        return rows
    if shift := evidence.best_shift(got, expected, close):
        example = evidence.shift_example(got, expected, shift, shape, close)
        return evidence.shift_explanation(shift, index, example)
    plain = evidence.wrong_by_row(got, expected, shape, close)
    question = (
        "What do the wrong cells have in common that the right ones do not, and which line "
        "computes them?"
    )
    if evidence.only_first_row_right(got, expected, shape, close):
        # Whatever the row number multiplies is 0 in row 0: a row stride is the suspect.
        question = (
            "Row 0 is right and every other row is wrong: in row 0, anything multiplied by "
            "the row number is 0. In each index expression that multiplies the row, is what it "
            "multiplies by (the row stride) the length of a row of that matrix?"
        )
    return (
        f"{plain} The wrong values are not a simple pattern of the expected ones (not "
        f"transposed, shifted, scaled or zero). {question}"
    ).strip()


def _cells(output: dict[str, Any]) -> str:
    rows = []
    for cell in (output.get("first_bad") or [])[:FIRST_CELLS]:
        index = ", ".join(str(i) for i in cell.get("index") or [])
        rows.append(f"| [{index}] | {_fmt(cell.get('expected'))} | {_fmt(cell.get('got'))} |")
    if not rows:
        return ""
    return "| cell | expected | got |\n|---|---|---|\n" + "\n".join(rows)


def _results_review(outcome: Outcome, harness: dict[str, Any], host: str) -> list[str]:
    parts = [f"**It runs, but the results are wrong:** {outcome.get('message', '')}"]
    threads = _threads(outcome, harness)
    found_entry = _entry_point(outcome, harness)
    entry = found_entry[0] if found_entry else None
    # The kernel itself shows a race: that is named before anything the values show.
    if raced := evidence.race(entry):
        parts.append(raced)
    for output in outcome.get("outputs", []):
        bad = output.get("bad") or 0
        if not bad:
            continue
        unwritten = output.get("unwritten") or 0
        nonfinite = output.get("nonfinite") or 0
        wrong = bad - unwritten - nonfinite
        name = output.get("name", "out")
        if table := _cells(output):
            parts.append(f"First wrong cells of `{name}`:\n\n{table}")
        if unwritten:
            parts.append(_unwritten(output, outcome, harness, host, entry, threads))
        if nonfinite and raced:
            parts.append(
                f"**{nonfinite} cells of `{name}` are NaN or infinite** where the reference is "
                "finite: a value read from workgroup memory before it was written can give them."
            )
        elif nonfinite:
            parts.append(
                f"**{nonfinite} cells of `{name}` are NaN or infinite** where the reference is "
                "finite. That is an overflow or an undefined operation: exp() of a large value "
                "(softmax must subtract the row maximum before exp), a division by zero, sqrt or "
                "log of a negative number, or reading a cell nobody wrote."
            )
        if raced and wrong > 0:
            # The race explains the values; what is plain about them is where they are.
            got, expected = output_list(output, "got"), output_list(output, "expected")
            if got and expected:
                shape = output.get("shape") or []
                parts.append(evidence.wrong_by_row(got, expected, shape, _closeness(harness)))
        elif wrong > 0 and (pattern := _value_pattern(output, _store_places(entry, name), harness)):
            parts.append(pattern)
    return parts


def _unwritten(
    output: dict[str, Any],
    outcome: Outcome,
    harness: dict[str, Any],
    host: str,
    entry: EntryPointFacts | None,
    threads: tuple[int, int, int] | None,
) -> str:
    """What the run shows of an output's cells that were never written."""
    count = output.get("count") or 0
    unwritten = output.get("unwritten") or 0
    name = output.get("name", "out")
    kind, found = evidence.unwritten_cells(output, entry, threads)
    first = next(
        (c.get("index") for c in output.get("first_bad") or [] if c.get("kind") == "unwritten"),
        None,
    )
    where = f", the first at [{', '.join(str(i) for i in first)}]" if first else ""
    text = f"**{unwritten} of {count} cells of `{name}` were never written**{where}."
    if unwritten == count:
        text += (
            f" Not one cell was written: nothing stores to `{name}` yet (is the body "
            "still empty?), the store writes to another buffer, or every invocation "
            "returns before it gets there."
        )
    elif kind in ("local", "lines"):
        text += f" {found}"
    elif not evidence.one_cell_each(entry, name):
        text += f" {found}" if found else ""
    elif host and (short := host_review.dispatch_shortfall(outcome, host, count, name)):
        text += short
    elif threads and threads[2] < count:
        groups, size, total = threads
        text += (
            f" Only {total} invocations ran ({groups} "
            f"workgroup{'s' if groups != 1 else ''} "
            f"× @workgroup_size {size}) for {count} cells: too few workgroups or threads. "
            "The host's dispatch is fixed by the lesson: how many cells does each "
            "invocation cover, and how many would it take to cover them all?"
        )
    elif found:
        text += f" {found}" + _stores(outcome, harness, name)
    else:
        text += (
            " Enough invocations ran to cover every cell, so some of them returned "
            "before writing or wrote to another cell; the run does not show which."
        ) + _stores(outcome, harness, name)
    return text


def _shown_review(outcome: Outcome) -> str:
    """A program run with no verdict: its outputs are shown, and why there is no verdict."""
    return (
        f"**It ran; the outputs it read back are shown.** {outcome.get('message', '')} "
        "Do they hold what you expect? Work out two or three cells by hand and compare; "
        "to check a change, compare this run with an earlier version of yours."
    )


FINDINGS = {
    "race": "the race on workgroup memory",
    "overrun": "the invocations past the end that stored with nothing to stop them",
}


def _overrun(outcome: Outcome, harness: dict[str, Any]) -> str:
    threads = _threads(outcome, harness)
    return evidence.overrun(warnings_of(outcome), threads, outcome.get("outputs", []))


def findings(outcome: Outcome, harness: dict[str, Any]) -> list[str]:
    """The codes of what the review says about the kernel beyond its verdict (FINDINGS),
    recorded with each submission so the next one can be told what it fixed."""
    found = _entry_point(outcome, harness)
    entry = found[0] if found else None
    codes = []
    if evidence.race(entry):
        codes.append("race")
    if _overrun(outcome, harness):
        codes.append("overrun")
    return codes


def offline_review(outcome: Outcome, source: str, harness: dict[str, Any], host: str = "") -> str:
    """The automatic review of one run, in Markdown; host is the version's host program."""
    status = outcome.get("status", "")
    if stopped := host_review.error_review(outcome, host):
        parts = stopped
    elif status == Status.COMPILE_ERROR:
        parts = _compile_review(outcome, source)
    elif status == Status.PIPELINE_ERROR:
        parts = _pipeline_review(outcome, harness)
    elif status in (Status.MISMATCH, Status.NONFINITE):
        parts = _results_review(outcome, harness, host)
    elif status == Status.PASSED:
        parts = [f"**It passes:** {outcome.get('message', '')}"]
        found = _entry_point(outcome, harness)
        entry = found[0] if found else None
        if past := _overrun(outcome, harness):
            parts.append(past)
        if raced := evidence.race(entry):
            parts.append(f"It passes here by the luck of the order the invocations ran in. {raced}")
        elif fast := speed_review(outcome):
            parts.append(fast)
    elif status == Status.NO_REFERENCE and host_review.program(outcome):
        parts = [host_review.never_dispatched(outcome) or _shown_review(outcome)]
    elif status == Status.NO_REFERENCE:
        parts = [
            f"**{outcome.get('message', 'It compiles.')}** This session has no harness: "
            "nothing defines the kernel's inputs or what it should compute, so it was compiled "
            "and validated, not run. A free-form session started from a template (on the "
            "lessons page) runs every submission and checks it against a reference."
        ]
    elif status == Status.TIMEOUT:
        parts = [
            f"**It did not finish in time:** {outcome.get('message', '')} A loop whose condition "
            "never becomes false, or far more work per invocation than intended, are the "
            "usual causes."
        ]
    elif status == Status.REJECTED:
        parts = [f"**It was not run:** {outcome.get('message', '')}"]
        message = outcome.get("message", "")
        if "llvmpipe" in message and "loop" in message:
            parts.append(
                "How many times must that loop run for one cell of the output, and what in "
                "its condition decides that?"
            )
        elif "llvmpipe" in message:
            parts.append(
                "What should an invocation with no cell of its own do, and how would it know "
                "that it has none?"
            )
    elif status == Status.CRASHED and (crash := outcome.get("crash")):
        what = "shader compiler" if crash["stage"] == "compile" else "replay worker"
        parts = [
            f"**Your kernel crashed the {what}:** {outcome.get('message', '')} "
            f"{outcome.get('error', '')} Change the kernel and submit it again."
        ]
    else:
        parts = [
            f"**It could not be run:** {outcome.get('message', '')} This is the server's "
            "problem, not your kernel's; submit again in a moment."
        ]
    # The runner's backend caveats are on the run panel, each where the kernel can meet it.
    return "\n\n".join(parts)
